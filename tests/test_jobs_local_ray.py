"""The private Ray instance a local build starts (`jobs.local_ray.start_ray`), in a new process."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from environment_support import own_ray_environment
from jobs_support import ON_RAY, gone_endpoint

REPO = Path(__file__).resolve().parent.parent

# In a local instance `start_ray` started (2 CPUs): first, how many of Ray's worker processes
# have the build's modules loaded (tokenizers' library mapped); then whether an idle worker
# process beyond one per CPU is kept. Two one-CPU tasks hold both CPUs, so no-CPU tasks get worker
# processes of their own; once done, those are idle workers beyond the CPUs, which Ray's default
# kills after a second: a second burst 2 s later then runs in processes started after it began.
WORKERS = """
import json, logging, os, sys, time
import ray
from jobs.config import load_config
from jobs.local_ray import start_ray

def parent(pid):
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])

def workers_with(library):
    # this instance's workers only: children of its raylet, a child of this process (another
    # build's workers may still be on the machine)
    found = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{pid}/cmdline", "rb").read().startswith(b"ray::"):
                if parent(parent(pid)) == os.getpid():
                    found += library in open(f"/proc/{pid}/maps").read()
        except OSError:
            continue  # gone meanwhile
    return found

def process_start():
    fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
    uptime = float(open("/proc/uptime").read().split()[0])
    return time.time() - uptime + int(fields[19]) / os.sysconf("SC_CLK_TCK")

@ray.remote(num_cpus=1)
def hold(seconds):
    time.sleep(seconds)

@ray.remote(num_cpus=0)
def started():
    time.sleep(0.5)  # the burst's tasks run at once, each in a process
    return process_start()

logging.basicConfig(level=logging.INFO, format="%(message)s")  # start_ray's lines, as a build's
config = load_config(sys.argv[1], overrides={"input": "."}, settings=["resources.num_cpus=2"])
start_ray(config)
deadline = time.monotonic() + 60
while workers_with("tokenizers") < 2 and time.monotonic() < deadline:
    time.sleep(0.2)
ready = workers_with("tokenizers")
busy = [hold.remote(15) for _ in range(2)]
ray.get([started.remote() for _ in range(2)])
time.sleep(2)  # twice Ray's default
began = time.time()
again = ray.get([started.remote() for _ in range(2)])
print(json.dumps({"ready": ready, "kept": all(start < began for start in again)}))
ray.shutdown()
"""


@pytest.fixture(scope="module")
def workers() -> dict:
    """What the child above found in the local instance it started, and what `start_ray` left of
    the sessions in Ray's folder (`RAY_TMPDIR`) where it found twelve of finished builds (marked),
    another Ray user's (no mark) and a running build's (its mark locked): their names, its own
    session's (`own`), and its log."""
    from jobs.local_ray import SESSION_MARK

    temporary = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))  # Ray's socket paths are short
    folder = temporary / "ray"
    finished = [folder / f"session_2020-01-01_00-00-{i:02}_000000_{i}" for i in range(12)]
    other, running = folder / "session_2019-01-01_other", folder / "session_2019-01-02_run"
    for session in [*finished, other, running]:
        (session / "logs").mkdir(parents=True)
        (session / "logs" / "raylet.out").write_text("log\n")
    for session in [*finished, running]:
        (session / SESSION_MARK).write_text("")
    env = own_ray_environment()
    env.update({"RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(REPO), "RAY_TMPDIR": str(temporary)})
    try:
        with open(running / SESSION_MARK) as held:
            fcntl.flock(held, fcntl.LOCK_EX)  # a build still running
            done = subprocess.run(
                [sys.executable, "-c", WORKERS, str(REPO / "configs" / "local.yaml")],
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
            )
        assert done.returncode == 0, done.stderr[-3000:]
        left = {path.name for path in folder.glob("session_2*")}
        [own] = left - {session.name for session in [*finished, other, running]}
        return {
            **json.loads(done.stdout.strip().splitlines()[-1]),
            "folder": folder,
            "sessions": left,
            "own": own,
            "marked": (folder / own / SESSION_MARK).exists(),
            "finished": [session.name for session in finished],
            "other": other.name,
            "running": running.name,
            "log": done.stderr,
        }
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def test_the_local_instance_starts_with_a_worker_process_per_cpu_our_modules_loaded(workers):
    assert workers["ready"] == 2


def test_the_local_instance_keeps_an_idle_worker_process_for_the_next_task(workers):
    assert workers["kept"]


@pytest.mark.parametrize(
    ("config", "settings", "asks"),
    [
        # The GPU config on a machine whose Ray instance has no GPU (none is made visible to it),
        # with a model this machine has (its own, not in the hub cache here, is refused first).
        (
            "cluster-gpu.yaml",
            ["embedding.model=minilm"],
            "an embedding actor (resources.embed) asks for 2 CPUs and 0.5 GPU",
        ),
        # (slow: the GPU case's path and exit; each stage's check without Ray: test_jobs_stats)
        pytest.param(
            "local.yaml",
            [
                "resources.num_cpus=1",
                "resources.index.num_cpus=2",
                "resources.in_process_sources=null",
            ],
            "a topic's reduce (resources.index) asks for 2 CPUs and no GPU",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_a_stage_the_local_instance_cannot_hold_fails_the_build_at_once(
    tmp_path, config, settings, asks
):
    """Ray Data would wait for ever for a node that a private local instance never gets: the build
    exits 2 (a config error for this machine) before it starts a stage, naming what is missing."""
    env = own_ray_environment()
    env.update({"RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""})
    output = tmp_path / "out"
    command = [sys.executable, "-m", "jobs.reindex", "--config", str(REPO / "configs" / config)]
    command += ["--input", str(REPO / "examples" / "corpus"), "--output", str(output)]
    command += ["--cache", str(tmp_path / "cache")]
    for setting in settings:
        command += ["--set", setting]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    assert asks in done.stderr and "a local instance never grows" in done.stderr, done.stderr
    assert ("embedding.device: cpu" in done.stderr) == (config == "cluster-gpu.yaml")
    # found once Ray is up, after the run's unfinished report: its failed one replaces it (the
    # history said "unfinished" of a run that had ended, and report --check 75)
    report = json.loads((output / "_reindex" / "report.json").read_text())
    assert (report["status"], report["exit_code"]) == ("failed", 2)
    assert report["error"].startswith("InfeasibleResources: this machine's Ray instance has")
    assert "Traceback" not in done.stderr


def test_a_stage_no_node_of_a_joined_cluster_can_hold_is_a_warning_then_exit_1(
    ray_session, tmp_path
):
    """A cluster may grow (its autoscaler adds nodes): the build waits for one, and says so at
    its start (its progress said "0 chunks embedded" and no more, waiting for a GPU node that
    never joined). Not for ever: once no live node has held the stage for
    `resources.node_wait_seconds` (here 0: at the first look), the build fails as any failed
    build does (it waited until a scheduler's timeout killed it): exit 1, one line naming what
    waited, how long and what to set, its report written and the lock released."""
    import ray

    # this process's RAY_AUTH_MODE: the child must authenticate as the session's Ray expects
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    env["PYTHONPATH"] = str(REPO)
    output = tmp_path / "out"
    config = str(REPO / "configs" / "local.yaml")
    command = [sys.executable, "-m", "jobs.reindex", "--config", config]
    command += ["--input", str(REPO / "examples" / "corpus"), "--output", str(output)]
    command += ["--cache", str(tmp_path / "cache"), "--set", "resources.index.num_cpus=512"]
    command += ["--set", "resources.node_wait_seconds=0"]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-3000:]
    waiting = "a topic's reduce (resources.index) asks for 512 CPUs and no GPU"
    warning = (
        f"{waiting}, and no node of the cluster has that: the build waits until the autoscaler "
        "adds one (its node types must offer it), at most 0 s (resources.node_wait_seconds)"
    )
    assert warning in done.stderr, done.stderr[-3000:]
    error = (
        rf"NodeWaitTooLong: {re.escape(waiting)}, and no live node of the Ray cluster has had "
        r"that for \d+ s \(resources.node_wait_seconds: 0\): give the cluster a node type "
        r"that offers it, ask for less, or set resources.node_wait_seconds higher \(null: wait "
        r"for ever\)"
    )
    assert re.search(rf"^mdindex build: the job failed: {error}$", done.stderr, re.M), done.stderr
    report = json.loads((output / "_reindex" / "report.json").read_text())
    assert (report["status"], report["exit_code"]) == ("failed", 1)
    assert re.fullmatch(error, report["error"])
    assert (output / "_reindex" / "build.lock").read_bytes() == b""  # released


def test_a_node_watch_says_what_no_live_node_holds_and_reduces_none_can_are_not_awaited(
    ray_session,
):
    """The progress lines' note of what no live node can hold, and how long it has waited; and
    a stopped build's wait for its running reduces: those no node can hold never start, so they
    are cancelled (the wait for them had no end)."""
    import ray

    from jobs.config import EmbedResources, IndexResources, ResourcesConfig
    from jobs.local_ray import NodeWatch, waiting_for
    from jobs.reduce import settle

    big = ResourcesConfig(index=IndexResources(num_cpus=512), node_wait_seconds=None)
    watch = NodeWatch(big)
    watch.look()
    waiting = "a topic's reduce (resources.index) asks for 512 CPUs and no GPU"
    assert re.fullmatch(rf"; waiting for a node \(\d+ s\): {re.escape(waiting)}", watch.note())
    assert watch.failure is None  # no bound: it waits for ever
    fits = NodeWatch(ResourcesConfig())
    fits.look()
    assert fits.note() == ""
    gpus = ResourcesConfig(embed=EmbedResources(num_gpus=4), node_wait_seconds=0)
    carried = NodeWatch(gpus, embeds=False)  # a pass that starts no embedding actor
    carried.look()
    assert (carried.note(), carried.failure) == ("", None)
    actor = "an embedding actor (resources.embed) asks for 1 CPU and 4 GPUs"
    assert waiting_for(gpus) == [actor] and waiting_for(gpus, embeds=False) == []

    reduces = [ray.remote(num_cpus=512)(lambda: None).remote() for _ in range(2)]
    began = time.monotonic()
    settle(reduces, {"num_cpus": 512})
    assert time.monotonic() - began < 10


def test_a_node_watch_leaves_a_build_a_signal_stopped_to_wait_for_its_reduces(ray_session):
    """Once a SIGTERM has stopped the build, its wait for its running reduces must hold: a node
    watch reaching its bound then interrupted that wait too (exit 1 for 143, and reduces still
    writing once the lock was released; helper 91's review)."""
    from jobs.config import IndexResources, ResourcesConfig
    from jobs.local_ray import NodeWatch
    from jobs.signals import Stopped, callers_handler, exit_on_sigterm

    big = ResourcesConfig(index=IndexResources(num_cpus=512), node_wait_seconds=0)
    with callers_handler():
        exit_on_sigterm()
        with pytest.raises(Stopped):
            signal.raise_signal(signal.SIGTERM)
        watch = NodeWatch(big)
        watch.look()  # past its bound: it would stop a build that is stopping already
        assert watch.failure is None and "asks for 512 CPUs" in watch.note()


def test_a_node_watch_leaves_a_failed_build_to_wait_for_its_reduces(ray_session):
    """A build that failed (a chunk task's error, a lost lock) waits for its running reduces
    (`jobs.reduce.settle`) before it reports and releases its lock. A node watch reaching its
    bound meanwhile interrupted that wait: the report named `NodeWaitTooLong`, not the error that
    failed the build, and its reduces still wrote once the lock was released (helper 100)."""
    import threading

    import ray

    from jobs.config import IndexResources, ResourcesConfig
    from jobs.local_ray import NodeWatch
    from jobs.reduce import settle
    from jobs.signals import callers_handler, exit_on_sigterm

    big = ResourcesConfig(index=IndexResources(num_cpus=512), node_wait_seconds=0)
    with callers_handler():
        exit_on_sigterm()
        running = ray.remote(num_cpus=0)(lambda: time.sleep(1.5) or "written").remote()
        watch = NodeWatch(big)
        look = threading.Timer(0.3, watch.look)  # past its bound, as the reduce still runs
        look.start()
        settle([running], {"num_cpus": 0})
        look.join()
    assert watch.failure is None and "asks for 512 CPUs" in watch.note()
    assert ray.get(running, timeout=0) == "written"


def test_a_build_killed_while_its_ray_starts_leaves_its_unfinished_line(tmp_path):
    """A run killed while its private Ray instance starts (3-10 s on 2 CPUs: kill -9, the
    out-of-memory killer) left no report and no line in the run history, its unfinished report
    written once Ray was up: an operator reading the history saw nothing of it. It is written
    before Ray starts now (found by use, helper 100)."""
    from jobs.runs import RUNS_PATH, parse_runs

    output = tmp_path / "out"
    env = {**own_ray_environment(), "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(REPO)}
    driver = subprocess.Popen(
        one_page_build(tmp_path), cwd=REPO, env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert _child_started(driver, "gcs_server"), "Ray's GCS never started"
    finally:
        driver.kill()  # in ray.init, which waits for the GCS, then starts the raylet
        rest = driver.communicate(timeout=60)[1]
    runs = parse_runs((output / RUNS_PATH).read_bytes())
    assert [(run["status"], run["pid"]) for run in runs] == [("unfinished", driver.pid)], rest
    assert json.loads((output / "_reindex" / "report.json").read_text())["status"] == "unfinished"


def _child_started(parent: subprocess.Popen, name: str, timeout: float = 60.0) -> bool:
    """Whether a child process of `parent` whose command line holds `name` runs within `timeout`
    seconds (False once `parent` has ended without one)."""
    deadline = time.monotonic() + timeout
    pid = parent.pid
    while time.monotonic() < deadline and parent.poll() is None:
        for entry in Path("/proc").iterdir():
            try:
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    if name.encode() in (entry / "cmdline").read_bytes():
                        return True
            except (OSError, ValueError, IndexError):  # not a process, or gone meanwhile
                continue
        time.sleep(0.05)
    return False


def test_a_nodes_check_that_hangs_is_a_warning(ray_session, tmp_path, monkeypatch):
    """A node whose check of the driver's local folders hangs (a stalled network filesystem; here
    the lock file is a FIFO no one writes to) does not hold the build: once `LANDMARKS_TIMEOUT_S`
    has passed, a warning says that the node's first tasks will check, and the build goes on."""
    import ray

    from jobs import local_ray
    from jobs.landmarks import Landmark

    fifo = tmp_path / "build.lock"
    os.mkfifo(fifo)
    monkeypatch.setattr(local_ray, "LANDMARKS_TIMEOUT_S", 1.0)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    local_ray.log.addHandler(handler)
    try:
        node = ray.get_runtime_context().get_node_id()  # the session's instance: one node
        local_ray.check_nodes((Landmark(str(tmp_path), fifo.name, "0" * 64),), [node])
    finally:
        local_ray.log.removeHandler(handler)
        _end_the_wait(fifo)
    assert [r.getMessage() for r in records] == [
        "not every node checked the local folders (GetTimeoutError); their first tasks will"
    ]


def _end_the_wait(fifo: Path) -> None:
    """Open the FIFO for writing once its reader is there, and close it: the reading task sees
    the end of the file and finishes (it fails: not the landmark's digest)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            return
        except OSError:  # ENXIO: no reader yet (the task's worker process still starting)
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def one_page_build(tmp_path: Path) -> list[str]:
    """The command of a build of a one-page corpus made under `tmp_path`, into `tmp_path/out`, on
    a local Ray instance of its own (a run that small runs without Ray by default)."""
    docs = tmp_path / "docs"
    (docs / "t").mkdir(parents=True)
    (docs / "t" / "a.md").write_text("# A\n\nText.\n")
    command = [
        sys.executable,
        "-m",
        "jobs.reindex",
        "--config",
        str(REPO / "configs" / "local.yaml"),
        *ON_RAY,
    ]
    return [*command, "--input", str(docs), "--output", str(tmp_path / "out")]


def test_a_ray_address_no_cluster_answers_at_is_a_usage_error_at_once(tmp_path):
    """`ray.init` tried a GCS address that takes no connection for about 14 minutes, the output
    locked all along, then exit 1: exit 2 now, in seconds, naming RAY_ADDRESS."""
    command = one_page_build(tmp_path)
    address = gone_endpoint().removeprefix("http://")
    env = {**own_ray_environment(), "RAY_ADDRESS": address}
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"RAY_ADDRESS={address}: no Ray cluster answers there" in done.stderr
    assert time.monotonic() - started < 60


def test_a_tmpdir_ray_cannot_use_stops_the_build_in_one_line_naming_it(tmp_path):
    """TMPDIR naming a folder under a file (or a /tmp/ray another user made): Ray's
    NotADirectoryError traceback from inside `ray.init`, naming neither Ray nor TMPDIR. Now one
    line naming the folder and what to set, exit 1, before Ray starts."""
    command = one_page_build(tmp_path)
    (tmp_path / "a-file").write_text("")
    env = {**own_ray_environment(), "TMPDIR": str(tmp_path / "a-file" / "tmp")}
    env.pop("RAY_TMPDIR", None)
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr
    folder = tmp_path / "a-file" / "tmp" / "ray"
    assert done.stderr.splitlines()[-1] == (
        f"mdindex build: the job failed: RayFolderUnusable: Ray's folder {folder} cannot be used "
        "(Not a directory): "
        "set TMPDIR (or RAY_TMPDIR, which Ray reads first) to a folder this user can write, "
        "with room"
    )


def test_a_ray_folder_without_room_is_refused_naming_its_free_space(tmp_path):
    """A full TMPDIR: `ray.init` waited 30 s, then "The current node timed out during startup
    ... the GCS has become overloaded", naming neither the folder nor the disk."""
    from jobs.local_ray import RayFolderUnusable, check_ray_folder

    check_ray_folder(str(tmp_path / "ray"), min_free=1)
    free = shutil.disk_usage(tmp_path).free
    with pytest.raises(RayFolderUnusable, match=r"ray cannot be used \(\d+\.\d MB free, under the"):
        check_ray_folder(str(tmp_path / "ray"), min_free=free + 10**9)


def test_a_build_keeps_the_last_sessions_of_finished_builds_and_no_other_users_or_running(
    workers,
):
    """Every build on a local instance left its session folder in Ray's folder (`{RAY_TMPDIR or
    TMPDIR}/ray`), about 1 MB each, some 15-42 MB: a cron job filled /tmp. Now a build's
    `start_ray` removes the sessions of finished builds but the newest `KEEP_SESSIONS`; another
    Ray user's session (no mark), a running build's (its mark locked) and its own stay."""
    from jobs.local_ray import KEEP_SESSIONS

    assert workers["marked"]
    kept = set(workers["finished"][-KEEP_SESSIONS:])
    assert workers["sessions"] == {workers["other"], workers["running"], *kept, workers["own"]}
    assert f"logs in {workers['folder'] / workers['own']};" in workers["log"]
    assert "2 older ones removed" in workers["log"]
