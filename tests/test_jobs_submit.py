"""The job as platform teams run it: `ray job submit` of `python -m jobs.reindex` to a Ray head."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from environment_support import own_ray_environment
from jobs_support import ON_RAY
from mounts_support import can_mount_privately, private_mounts
from ray.job_submission import JobStatus, JobSubmissionClient
from ray.util.state import list_actors, list_nodes

from tests.jobs_support import unstamped

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CORPUS = ROOT / "tests" / "fixtures" / "corpus"
PLUGINS = ROOT / "tests" / "fixtures" / "plugins"  # two packages and their dist-info
# Ray's state API raises where a filter leaves out some of the cluster's entries (dead nodes, other
# jobs' actors: "data truncation") unless told not to.
PARTIAL = {"raise_on_missing_output": False}
OUR_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (INFO|WARNING) ")
# What a healthy job's log used to show from Ray and transformers (issue 11).
NOISE = (
    "RayDeprecationWarning",
    "constructor arguments in the object store",
    "Progress bars disabled",
    "Loading weights",
    "Starting execution of Dataset",
)


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def _environment() -> dict[str, str]:
    env = own_ray_environment()
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", RAY_AUTH_MODE="disabled")
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    return env


def _answers(url: str, timeout: float = 10.0) -> bool:
    """Whether `url` answers a GET within `timeout` seconds."""
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return True
    except OSError:
        return False


T = TypeVar("T")


class NodeNotStarted(RuntimeError):
    """A `ray start` exited before it had started its node (its logs in the message)."""


def _twice(start: Callable[[], T]) -> T:
    """`start()`, and once more where it raises `NodeNotStarted` (a warning says why).

    `ray start` gives its raylet 30 s to show in the GCS's node table, and on a loaded 2-core
    machine it twice took longer (full runs of the suite, 2026-12-02): once the head's, whose
    dashboard already answered, so the module's tests had begun, and six failed on "connection
    refused" as `ray start` stopped the head; once the second node's."""
    try:
        return start()
    except NodeNotStarted as exc:
        warnings.warn(f"{exc}; starting another", stacklevel=2)
    return start()


def _wait_until(
    ready: Callable[[], bool], process: subprocess.Popen, problem: str, timeout: float = 120.0
) -> None:
    """Return once `ready()`; `NodeNotStarted` if `process` (a `ray start`) exits first,
    TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise NodeNotStarted(f"ray start exited ({process.returncode}) early: {problem}")
        if ready():
            return
        time.sleep(0.5)
    raise TimeoutError(f"{problem} within {timeout} s")


def _start_node(
    command: list[str], base: str, ready: Callable[[], bool], what: str
) -> subprocess.Popen:
    """A node's `ray start --block` process (`command`, its temp dir and output in `base`), once
    `ray start` says it has started it and `ready()` (`what` it waits for); otherwise the node is
    stopped and `NodeNotStarted` says why, with its logs.

    `ray start` writes the cluster's address into its temp dir once it has started the node,
    after its raylet shows in the GCS's node table."""
    temp_dir = f"{base}/ray"
    process = _ray_start([*command, "--temp-dir", temp_dir], f"{base}/node.log")
    address = Path(temp_dir, "ray_current_cluster")
    try:
        _wait_until(address.exists, process, f"no {address}")
        _wait_until(ready, process, what)
    except (NodeNotStarted, TimeoutError) as exc:
        problem = f"{exc}:{node_logs(base)}"
        with contextlib.suppress(ProcessLookupError):  # its group may be gone with it
            _stop(process)
        raise NodeNotStarted(problem) from None
    return process


@dataclass(frozen=True)
class RayHead:
    """A running head: its job API address, and the RAY_TMPDIR under which `ray.init()` finds it
    (as it finds a default `ray start --head` under /tmp)."""

    address: str
    ray_tmpdir: str
    gcs: str  # what RAY_ADDRESS names to join it
    client: str  # its Ray Client address (`ray://…`)


@pytest.fixture(scope="module")
def ray_head():
    """A Ray head (2 CPUs, free ports, its own temp dir) for the module's tests (each starts
    it in 4 s and stops it in 5: one head for both); stopped by its own pid.

    `ray start --block` keeps the head in the foreground, so stopping that one process stops
    exactly this cluster (`ray stop` would stop every Ray on the machine).

    A head whose start failed is started once more (`_twice`)."""
    process, head = _twice(_start_head)
    try:
        yield head
        assert _answers(f"{head.address}/api/version"), (
            f"the Ray head went away:{node_logs(head.ray_tmpdir)}"
        )
    finally:
        _stop(process)
        shutil.rmtree(head.ray_tmpdir, ignore_errors=True)


def _start_head() -> tuple[subprocess.Popen, RayHead]:
    """A head's `ray start --block` process, once it has started its node and its dashboard
    answers (`_start_node`)."""
    gcs, dashboard, client, agent_http, agent_grpc, metrics, runtime_env = _free_ports(7)
    base = tempfile.mkdtemp(prefix="rayjob", dir="/tmp")  # short: socket paths are limited
    # its temp dir is {base}/ray (`_start_node`): where ray.init() looks with RAY_TMPDIR={base}
    command = [
        str(BIN / "ray"),
        "start",
        "--head",
        "--block",
        "--num-cpus",
        "2",
        "--port",
        str(gcs),
        "--dashboard-host",
        "127.0.0.1",
        "--dashboard-port",
        str(dashboard),
        "--ray-client-server-port",
        str(client),
        "--dashboard-agent-listen-port",
        str(agent_http),
        "--dashboard-agent-grpc-port",
        str(agent_grpc),
        "--metrics-export-port",
        str(metrics),
        "--runtime-env-agent-port",
        str(runtime_env),
        "--disable-usage-stats",
    ]
    address = f"http://127.0.0.1:{dashboard}"
    api = f"{address}/api/version"
    try:
        answers = functools.partial(_answers, api, timeout=2)
        process = _start_node(command, base, answers, f"no answer at {api}")
    except NodeNotStarted:
        shutil.rmtree(base, ignore_errors=True)
        raise
    return process, RayHead(address, base, f"127.0.0.1:{gcs}", f"ray://127.0.0.1:{client}")


def node_logs(base: str) -> str:
    """The end of what a node's `ray start --block` printed (`node.log` in `base`), of its
    `ray_process_exit.log` (which names a process of the node that exited), and of its
    dashboard's and raylet's logs."""
    names = ("ray_process_exit.log", "dashboard.log", "raylet.out")
    return log_tails([Path(base, "node.log"), *(session_logs(base) / name for name in names)])


def session_logs(ray_tmpdir: str) -> Path:
    """The logs folder of the latest Ray session under `ray_tmpdir` (a head's RAY_TMPDIR)."""
    return Path(ray_tmpdir, "ray", "session_latest", "logs")


def log_tails(files: list[Path]) -> str:
    """The end of each of `files` that exists, under its name (the last 4,000 characters: a
    raylet's fatal error is a line and a stack trace of about 2,000)."""
    present = (f for f in files if f.exists())
    return "".join(f"\n--- {f.name}:\n{f.read_text(errors='replace')[-4000:]}" for f in present)


def _ray_start(command: list[str], output: str = os.devnull) -> subprocess.Popen:
    """`ray start --block …` in a session of its own (its Ray processes in its process group, which
    `_stop` ends), its output to the file `output`."""
    with open(output, "wb") as log:
        return subprocess.Popen(
            command, env=_environment(), stdout=log, stderr=log, start_new_session=True
        )


def _stop(process: subprocess.Popen) -> None:
    """Stop a `ray start --block` process and the Ray processes it started (its process group):
    a node stopped so leaves the cluster at once (killed, it stays alive there for a while)."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # only the processes this node started
        process.wait(timeout=30)


@contextlib.contextmanager
def second_node(head: RayHead) -> Iterator[subprocess.Popen]:
    """A node of one CPU joined to `head` (`ray start --address`, ports of its own), as a second
    machine of the cluster, while the block runs (its `ray start --block` process, whose group
    holds its Ray processes); stopped by its own pid. Started once more if its start failed
    (`_twice`)."""
    process = _twice(lambda: _start_second_node(head))
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):  # a node the block killed is gone
            _stop(process)


def _start_second_node(head: RayHead) -> subprocess.Popen:
    """`second_node`'s `ray start --block` process, once it has started its node and the head
    counts two live nodes (`_start_node`). Its temp dir is its own, in the head's (by default it
    is /tmp/ray, where `ray start` would write this cluster's address for every `ray.init()` on
    the machine to find)."""
    agent_http, agent_grpc, metrics, runtime_env, manager, objects = _free_ports(6)
    ports = {
        "--dashboard-agent-listen-port": agent_http,
        "--dashboard-agent-grpc-port": agent_grpc,
        "--metrics-export-port": metrics,
        "--runtime-env-agent-port": runtime_env,
        "--node-manager-port": manager,
        "--object-manager-port": objects,
    }
    base = tempfile.mkdtemp(prefix="n", dir=head.ray_tmpdir)  # short: socket paths are limited
    command = [str(BIN / "ray"), "start", "--block", "--address", head.gcs, "--num-cpus", "1"]
    command += [*(str(part) for pair in ports.items() for part in pair), "--disable-usage-stats"]
    alive = [("state", "=", "ALIVE")]
    return _start_node(
        command,
        base,
        lambda: len(list_nodes(address=head.address, filters=alive, **PARTIAL)) >= 2,
        "the head does not count two live nodes",
    )


def job_exit(ray_head, submission_id: str) -> subprocess.CompletedProcess:
    """`python -m jobs.job_exit` for a job submitted to `ray_head`."""
    command = [sys.executable, "-m", "jobs.job_exit", "--address", ray_head.address, submission_id]
    return subprocess.run(
        command, cwd=ROOT, env=_environment(), capture_output=True, text=True, timeout=120
    )


def test_ray_job_submit_runs_the_build_and_an_actors_call_outlives_the_loss_of_a_node(
    ray_head, tmp_path
):
    """Two checks on one cluster of two nodes (the head and a second node, which the second check
    kills: one node started for both, not one each)."""
    with second_node(ray_head) as node:
        # a program joined to a cluster of two nodes runs even a small build on it
        assert "without Ray: no" in joined_dry_run(ray_head, tmp_path / "dry")
        ray_job_submit_runs_the_build(ray_head, tmp_path)
        an_embedding_actors_call_outlives_the_loss_of_its_node(ray_head, node, tmp_path)


def joined_dry_run(head: RayHead, output: Path, address: str | None = None) -> str:
    """The output of `--dry-run` of the fixture corpus run by a program that joined `head` with
    `ray.init(address=…)` (`JOINED_PROGRAM`, no RAY_ADDRESS), at its GCS or at `address`."""
    joined = address or head.gcs
    command = [sys.executable, "-c", JOINED_PROGRAM, joined, "--config", "configs/local.yaml"]
    command += ["--input", str(CORPUS), "--output", str(output), "--dry-run"]
    for _ in range(2):
        done = subprocess.run(
            command, cwd=ROOT, env=_environment(), capture_output=True, text=True, timeout=120
        )
        # Ray Client's proxy starts a server process for each program; in one full run of the
        # suite (two test processes, 2 CPUs) it exited as it started, and the program's
        # `ray.init` failed: Ray's, not the build's; tried once more, its log kept for the message.
        if CLIENT_SERVER_FAILED not in done.stderr:
            break
    assert done.returncode == 0, done.stderr[-3000:] + client_server_logs(head)
    return done.stdout


# What a Ray Client program's `ray.init` raises when the server process for it did not start.
CLIENT_SERVER_FAILED = "Starting Ray client server failed"


def client_server_logs(head: RayHead) -> str:
    """The end of the head's Ray Client server logs (`ray_client_server_*.err`), if any."""
    return log_tails(sorted(session_logs(head.ray_tmpdir).glob("ray_client_*.err")))


def test_a_program_joined_to_a_head_of_one_node_here_runs_a_small_build_without_ray(
    ray_head, tmp_path
):
    """A program that joined a Ray instance of one node, this machine's (as one that started its
    own): a small build runs its stages in the program's process, as on a machine without Ray,
    which an embedding actor and Ray Data's actors would only slow (Decisions, "Small runs
    without Ray"); on a cluster of two nodes (above) it runs on the cluster, and so it does
    through Ray Client, whose program may run on any machine."""
    assert "without Ray: yes" in joined_dry_run(ray_head, tmp_path / "dry")
    assert "without Ray: no" in joined_dry_run(ray_head, tmp_path / "dry", ray_head.client)


def ray_job_submit_runs_the_build(ray_head, tmp_path):
    """The build's exit code 3 comes back from `jobs.job_exit` (`ray job submit` exits 1). On a
    cluster of two nodes: the pool is sized to both nodes' CPUs, and the run's bookkeeping actor
    runs on the driver's node (Ray placed it on a random node: one whose loss then failed the
    build, "ActorUnavailableError", where Ray tried the lost tasks again)."""
    output = tmp_path / "out"
    runtime_env = {"env_vars": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}}
    command = [
        str(BIN / "ray"),
        "job",
        "submit",
        "--address",
        ray_head.address,
        "--submission-id",
        "build-with-a-failed-source",
        "--working-dir",
        ".",
        "--runtime-env-json",
        json.dumps(runtime_env),
        "--",
        "python",
        "-m",
        "jobs.reindex",
        "--config",
        "configs/local.yaml",
        "--input",
        str(CORPUS),
        "--output",
        str(output),
    ]
    done = subprocess.run(
        command, cwd=ROOT, env=_environment(), capture_output=True, text=True, timeout=400
    )
    log = done.stdout + done.stderr
    assert done.returncode != 0, log  # the job exits 3 (one invalid source), so the job FAILED
    assert "exit code 3" in log or "exited with code 3" in log, log[-3000:]
    assert "topic 'guides' written" in log  # log lines instead of progress bars
    assert "joined the Ray cluster at " in log
    for noise in NOISE:  # clean logs (jobs/logs.py)
        assert noise not in log, noise
    report = json.loads((output / "_reindex" / "report.json").read_text())
    assert report["sources"]["seen"] == 7 and report["sources"]["failed"] == 1
    assert report["timings"]["cpus"] == 3  # the head's 2 and the second node's 1
    job = JobSubmissionClient(ray_head.address).get_job_info("build-with-a-failed-source")
    collectors = list_actors(
        address=ray_head.address,
        filters=[("class_name", "=", "StatsCollector"), ("job_id", "=", job.job_id)],
        detail=True,
        **PARTIAL,
    )
    assert [actor.node_id for actor in collectors] == [job.driver_node_id]
    golden = json.loads((output / "libraries/json-source-generation/index.json").read_text())
    assert golden["_embedded"]["chunks"]["golden-reference"]["count"] > 8
    assert done.returncode == 1  # Ray's code for any failed job
    asked = job_exit(ray_head, "build-with-a-failed-source")
    assert asked.returncode == 3, asked.stderr


def _status(client: JobSubmissionClient, submission_id: str) -> JobStatus | None:
    """The job's status, None while the job server has not heard of it yet."""
    try:
        return client.get_job_status(submission_id)
    except RuntimeError:  # 404 until `ray job submit` has sent it
        return None


def test_a_job_ray_job_stop_stopped_exits_143_from_job_exit_where_ray_job_submit_says_0(ray_head):
    """`ray job stop` makes the waiting `ray job submit` exit 0, as if the job had succeeded;
    `jobs.job_exit` says 143 (stopped by SIGTERM). An id no job has: exit 2, one line."""
    ray = str(BIN / "ray")
    submit = [ray, "job", "submit", "--address", ray_head.address, "--submission-id", "stopped"]
    waiting = subprocess.Popen(
        [*submit, "--", "sleep", "300"],
        cwd=ROOT,
        env=_environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = JobSubmissionClient(ray_head.address)
        deadline = time.monotonic() + 60
        while _status(client, "stopped") != JobStatus.RUNNING:
            assert time.monotonic() < deadline, "the job never ran"
            time.sleep(0.5)
        stop = [ray, "job", "stop", "--address", ray_head.address, "stopped"]
        subprocess.run(stop, env=_environment(), capture_output=True, check=True, timeout=60)
        assert waiting.wait(timeout=60) == 0
    finally:
        waiting.kill()
    assert job_exit(ray_head, "stopped").returncode == 143
    unknown = job_exit(ray_head, "no-such-job")
    assert unknown.returncode == 2
    assert unknown.stderr.count("\n") == 1 and "no-such-job" in unknown.stderr


@pytest.mark.parametrize("where", ["start", "wait"])
def test_job_exit_says_2_in_one_line_for_a_job_server_lost_or_refusing_never_1(
    monkeypatch, capsys, where
):
    """A server gone while job_exit waits (requests' ConnectionError, an OSError), an address
    without http:// that no GCS answers (RpcError) and a token the server wants
    (AuthenticationError, several lines) were a traceback and exit 1, the build's own "failed"."""
    import ray.job_submission
    import requests
    from ray.exceptions import AuthenticationError, RpcError

    from jobs import job_exit as module

    errors = [
        requests.exceptions.ConnectionError("Connection refused"),
        RpcError("Timed out while waiting for GCS to become available."),
        AuthenticationError("Authentication required: ...\n\nset RAY_AUTH_TOKEN"),
    ]
    for error in errors:

        class Client:
            def __init__(self, address, error=error):
                self.error = error
                if where == "start":
                    raise error

            def get_job_info(self, submission_id):
                raise self.error

        monkeypatch.setattr(ray.job_submission, "JobSubmissionClient", Client)
        assert module.main(["--address", "127.0.0.1:8265", "job-1"]) == 2, error
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "job-1" in err, err


def test_a_local_build_starts_its_own_ray_beside_a_running_head_and_prints_only_our_lines(
    ray_head, tmp_path
):
    """With `ray start --head` running on the machine and no RAY_ADDRESS, `python -m jobs.reindex`
    starts a private Ray (with its own `resources.num_cpus`), instead of joining that cluster,
    where `num_cpus` is refused and the build exits 1. Its logs are clean (jobs/logs.py): stderr
    holds our log lines only, no warnings, error-level lines or progress bars from Ray or
    transformers, and stdout the summary."""
    output = tmp_path / "out"
    command = [sys.executable, "-m", "jobs.reindex", "--config", "configs/local.yaml"]
    command += ["--input", "examples/corpus", "--output", str(output)]
    command += ["--set", "resources.num_cpus=2", *ON_RAY]
    env = dict(_environment(), RAY_TMPDIR=ray_head.ray_tmpdir)
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert [line for line in lines if not OUR_LINE.match(line)] == []
    assert [line for line in lines if " WARNING " in line] == []
    messages = [line.split(" ", 2)[2] for line in lines]
    assert messages[0].startswith("6 sources in 4 topics")
    assert messages[1].startswith("started a local Ray instance (logs in ")
    assert sum(m.startswith("topic ") for m in messages) == 4
    assert done.stdout.startswith("mdindex build: 6 sources in 4 topics")
    report = json.loads((output / "_reindex" / "report.json").read_text())
    assert report["timings"]["cpus"] == 2 and report["sources"]["seen"] == 6


def test_a_third_party_class_the_nodes_cannot_import_stops_the_build_before_any_work(
    ray_head, tmp_path
):
    """The driver has the fixture plugins' package (on its PYTHONPATH, with their entry points),
    the cluster's nodes do not (installed on the submitting machine or the head alone): exit 2
    before any work, one line naming the class, the node and what to do. Before, each chunk task
    failed on "unknown chunking strategy 'paragraphs'" (exit 1 under Ray's traceback), and an
    embedding actor took the backend's name for a Hugging Face model's. A build that finds the
    cluster joined is stopped so by its first chunk task on the node."""
    output = tmp_path / "out"
    command = [sys.executable, "-m", "jobs.reindex", "--config", "configs/local.yaml"]
    command += ["--input", str(CORPUS), "--output", str(output)]
    command += ["--set", "chunking.strategy=paragraphs", "--set", "chunking.options={}"]
    command += ["--set", "embedding.model=hashing"]
    env = dict(_environment(), RAY_ADDRESS=ray_head.gcs, PYTHONPATH=str(PLUGINS))
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 2, done.stderr[-3000:]
    last = unstamped(done.stderr.splitlines()[-1])
    assert last.startswith(
        "mdindex build: the chunking strategy 'paragraphs', which the driver found, is not on node "
    ), done.stderr[-3000:]
    assert "no entry point 'paragraphs' of 'mdindex.strategies' is installed here" in last
    assert '"py_modules"' in last and "Traceback" not in done.stderr
    assert sorted(p.name for p in output.iterdir()) == ["_reindex"]  # no topic written
    report = json.loads((output / "_reindex" / "report.json").read_text())
    assert (report["status"], report["exit_code"]) == ("failed", 2)
    assert report["error"] == f"PluginNotOnNode: {last.removeprefix('mdindex build: ')}"
    # A program that joined the cluster itself has no check at the start (nor has a node that
    # joins later): the first chunk task on the node stops the build with the same line and exit
    # 2 (as for a folder), where each said "unknown chunking strategy" (exit 1); the line is the
    # build's last and the report's error, not inside Ray Data's error and traceback.
    # its model, and on the cluster (a head of one node: a machine apart here)
    build = [sys.executable, "-c", JOINED_PROGRAM, ray_head.gcs, *command[3:-2], *ON_RAY]
    env.pop("RAY_ADDRESS")
    done = subprocess.run(build, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "unknown chunking strategy" not in done.stderr
    refusal = "the chunking strategy 'paragraphs', which the driver found, is not"
    last = unstamped(done.stderr.splitlines()[-1])
    assert last.startswith(f"mdindex build: {refusal} on node "), last
    report = json.loads((output / "_reindex" / "report.json").read_text())
    assert report["exit_code"] == 2
    assert report["error"].startswith(f"PluginNotOnNode: {refusal} on node ")


# A program that joins a cluster itself, then builds in-process (the build finds Ray started;
# a small one runs on it where the cluster has a node apart from this one's, or with `ON_RAY`).
JOINED_PROGRAM = """
import sys, ray
from jobs.reindex import main
ray.init(address=sys.argv[1])
sys.exit(main(sys.argv[2:]))
"""


def in_a_namespace_of_its_own(folder: Path, at: Path, command: list[str]) -> list[str]:
    """`command` run where `folder` is mounted at `at` (for it alone)."""
    mounted = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    return [*private_mounts(), "sh", "-c", mounted, "sh", str(folder), str(at), *command]


def test_a_local_output_that_is_another_folder_on_the_nodes_stops_the_build_before_any_work(
    ray_head, tmp_path
):
    """A cluster whose machines do not share the output's path: the driver joins the head from a
    mount namespace of its own, where the output's path is another folder than the node sees
    there (as on a second machine's disk). The node's check finds that the lock file there does
    not name this build, and the build stops with exit code 2 and one line naming the folder,
    before any work: nothing is written where the node looks, and the driver's folder holds the
    run's report (its unfinished one goes in before Ray starts, and its failed one replaces it).
    (Before, the topics were written where the node looks, the driver's manifest naming them.)"""
    if not can_mount_privately():
        pytest.skip("needs a mount namespace of its own (unshare --mount)")
    output, drivers = tmp_path / "out", tmp_path / "drivers"
    output.mkdir()
    drivers.mkdir()
    build = [sys.executable, "-m", "jobs.reindex", "--config", "configs/local.yaml"]
    build += ["--input", str(CORPUS), "--output", str(output)]
    command = in_a_namespace_of_its_own(drivers, output, build)
    env = dict(_environment(), RAY_ADDRESS=ray_head.gcs)
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "joined the Ray cluster at " in done.stderr
    last = unstamped(done.stderr.splitlines()[-1])
    assert last.startswith(
        f"mdindex build: {output} is not the driver's folder on the machine of this Ray worker"
    ), done.stderr[-3000:]
    assert "its _reindex/build.lock does not name this build" in last
    assert list(output.rglob("*")) == []  # nothing written where the node looks
    report = json.loads((drivers / "_reindex" / "report.json").read_text())
    assert (report["status"], report["exit_code"]) == ("failed", 2)
    assert report["error"] == f"FoldersNotShared: {last.removeprefix('mdindex build: ')}"


def test_a_build_that_finds_the_cluster_joined_is_stopped_by_its_first_chunk_task(
    ray_head, tmp_path
):
    """A program that joined the cluster itself has no check of the nodes at the start (nor have
    nodes that join later): the first chunk task on a machine whose folder differs stops the build
    with exit code 2 (as at the start; it was 1) before it writes there, and the failed run's
    report in the driver's folder names the folder."""
    if not can_mount_privately():
        pytest.skip("needs a mount namespace of its own (unshare --mount)")
    output, drivers = tmp_path / "out", tmp_path / "drivers"
    output.mkdir()
    drivers.mkdir()
    build = [sys.executable, "-c", JOINED_PROGRAM, ray_head.gcs, "--config", "configs/local.yaml"]
    build += ["--input", str(CORPUS), "--output", str(output), *ON_RAY]  # the node a machine apart
    command = in_a_namespace_of_its_own(drivers, output, build)
    done = subprocess.run(
        command, cwd=ROOT, env=_environment(), capture_output=True, text=True, timeout=400
    )
    assert done.returncode == 2, done.stderr[-3000:]
    refusal = f"{output} is not the driver's folder on the machine of this Ray worker"
    last = unstamped(done.stderr.splitlines()[-1])
    assert last.startswith(f"mdindex build: {refusal}"), done.stderr[-3000:]
    assert list(output.rglob("*")) == []  # nothing written where the node looks
    report = json.loads((drivers / "_reindex" / "report.json").read_text())
    assert (report["status"], report["exit_code"]) == ("failed", 2)
    assert report["error"].startswith(f"NotTheDriversFolder: {refusal}")


# An actor with the embedding pool's restart and retry options, its first start on a node the test
# kills: its call there waits for that node's end, and runs again on the head once Ray restarts it.
ACTOR_PROGRAM = """
import sys, time, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from jobs.resources import actor_stage_args, embed_pool
from jobs.config import EmbedResources
ray.init(address=sys.argv[1], logging_level="ERROR")
doomed = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"]["CPU"] == 1][0]
options = actor_stage_args(embed_pool(EmbedResources(), 1, 1), None, 3)
@ray.remote
class Actor:
    def work(self, doomed, running):
        while ray.get_runtime_context().get_node_id() == doomed:
            open(running, "w").close()  # the test kills the node once it sees this
            time.sleep(0.2)
        return "done"
    def node(self):
        return ray.get_runtime_context().get_node_id()
while True:  # soft: a node not ready yet for it is passed over
    actor = Actor.options(
        num_cpus=0,
        max_restarts=options["max_restarts"],
        max_task_retries=options["max_task_retries"],
        scheduling_strategy=NodeAffinitySchedulingStrategy(doomed, soft=True),
    ).remote()
    if ray.get(actor.node.remote()) == doomed:
        break
    ray.kill(actor)
    time.sleep(1)
print(ray.get(actor.work.remote(doomed, sys.argv[2])), flush=True)
"""


def an_embedding_actors_call_outlives_the_loss_of_its_node(ray_head, node, tmp_path):
    """A node lost mid-build (its Ray processes killed, as a preempted spot node's) with the
    embedding actor on it: the actor's call runs again once Ray restarts the actor elsewhere.
    Its tries were bounded by `resources.retries` as its restarts are, and Ray used them up on
    "connection refused" before it marked the node dead: the build failed, "ActorUnavailableError:
    The actor … is unavailable" (FastAPI's docs on a head and a second node, 2026-12-01)."""
    program = subprocess.Popen(
        [sys.executable, "-c", ACTOR_PROGRAM, ray_head.gcs, str(tmp_path / "running")],
        cwd=ROOT,
        env=_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "running").exists():  # the call runs on the second node
            assert program.poll() is None, program.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the actor's call did not start in 120 s"
            time.sleep(0.2)
        os.killpg(node.pid, signal.SIGKILL)  # the node's raylet, agents and workers
        out, err = program.communicate(timeout=180)
    finally:
        program.kill()
    # Ray's "(raylet) Task Actor.work failed … retried" lines go to stdout too, before or after
    assert program.returncode == 0 and "done" in out.splitlines(), err[-3000:]
