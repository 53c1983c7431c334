"""Faults (issue 12): a failed run writes its report; a stalled S3 endpoint fails the build within
the configured timeouts, naming the endpoint, and a re-run once it answers converges. Real builds
(on the session's Ray instance where a test is about Ray: `ON_RAY`, or a child joined to it), a
real socket that never answers, a real moto server."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import ray
from environment_support import (
    fault_environment,
    own_ray_environment,
    paused_program,
    without_aws_credentials,
)
from jobs_support import ON_RAY, cache_copy, gone_endpoint, outputs, s3_options, signalled_at

from jobs.cli import main as mdindex
from jobs.config import load_config
from jobs.discovery import discover, list_input
from jobs.records import SOURCE, new_row, to_table
from jobs.reindex import main
from jobs.stages.chunk import CHUNKER_ERROR, ChunkSettings, chunk_sources
from jobs.stages.read import read_sources
from jobs.storage import Storage

pytestmark = pytest.mark.usefixtures("ray_session")

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "local.yaml")
TEXT = "# {0}\n\nThe {0} page says how requests are retried after a timeout.\n"


def build(*args: str) -> int:
    return main(["--config", CONFIG, *args])


def report_of(output: Path) -> dict:
    return json.loads((output / "_reindex" / "report.json").read_text())


@pytest.fixture(scope="module")
def page_vectors(tmp_path_factory) -> Path:
    """The cache of one build of the pages `TEXT` of "Alpha" and "Beta", built once for the
    module: the builds of those pages whose subject is not the vectors read them from a copy
    (`vectors`)."""
    base = tmp_path_factory.mktemp("pages")
    (base / "docs" / "t").mkdir(parents=True)
    for name in ("Alpha", "Beta"):
        (base / "docs" / "t" / f"{name.lower()}.md").write_text(TEXT.format(name))
    assert build("--input", str(base / "docs"), "--output", str(base / "out")) == 0
    return base / "out" / ".embedding-cache"


@pytest.fixture
def vectors(page_vectors, tmp_path) -> list[str]:
    """`--cache` of the test's own copy of `page_vectors`."""
    return cache_copy(page_vectors, tmp_path)


def test_a_failed_run_writes_its_report(tmp_path, vectors):
    docs = tmp_path / "docs"
    (docs / "t").mkdir(parents=True)
    (docs / "t" / "a.md").write_text(TEXT.format("Alpha"))
    assert build("--input", str(docs), *vectors) == 0
    assert report_of(docs)["status"] == "ok"
    index = (docs / "t" / "index.json").read_bytes()
    (docs / "t" / "b.md").write_bytes(b"# Beta\n\ncaf\xe9\n")
    # on Ray: the chunk task's SourceFailed, out of Ray Data's error (without Ray:
    # test_jobs_in_process)
    abort = ("--set", "failure_policy=abort", *ON_RAY)
    assert build("--input", str(docs), *abort, *vectors) == 1
    report = report_of(docs)
    assert (report["status"], report["exit_code"]) == ("failed", 1)
    assert "t/b.md" in report["error"] and "CHUNKING_FAILED" in report["error"]
    assert (docs / "t" / "index.json").read_bytes() == index  # the previous output stays


class StalledEndpoint:
    """A TCP server that accepts connections and never answers (a hung S3 endpoint)."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                self.held.append(self.server.accept()[0])
            except OSError:
                return

    def close(self):
        for connection in self.held:
            connection.close()
        self.server.close()


class Lines(logging.Handler):
    """The messages logged to a logger while attached."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_stalled_s3_endpoint_fails_the_build_naming_it(tmp_path, s3_server, vectors):
    logger, lines = logging.getLogger("mdindex.build"), Lines()
    level = logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    stalled = StalledEndpoint()
    # s3fs tries a timed-out request 5 times, with pauses of 0.1-0.8 s: about 8 s here
    bounded = ["--set", "s3.read_timeout=0.2", "--set", "s3.max_attempts=1"]
    output = tmp_path / "out"
    started = time.monotonic()
    try:
        code = build(
            "--input", "s3://docs/corpus", "--output", str(output),
            "--set", f"storage_options={s3_options(stalled.url)}", *bounded,
        )  # fmt: skip
    finally:
        stalled.close()
        logger.removeHandler(lines)
        logger.setLevel(level)
    assert code == 1 and time.monotonic() - started < 30, time.monotonic() - started
    note = (
        f"S3 endpoint {stalled.url}: connect timeout 5.0 s, read timeout 0.2 s, 1 attempts per "
        "request, and s3fs tries a timed-out request 5 times"
    )
    assert any(line.startswith(note) for line in lines.lines), lines.lines
    report = report_of(output)
    assert report["status"] == "failed" and stalled.url in report["error"]
    # The endpoint answers again (here: a live server holding the corpus): the re-run converges.
    bucket = s3_server.make_bucket("stalled-docs")
    s3_server.filesystem().pipe(f"{bucket}/corpus/t/a.md", TEXT.format("Alpha").encode())
    live = [
        "--set",
        f"storage_options={s3_options(s3_server.endpoint_url)}",
        "--set",
        "s3.max_attempts=1",
    ]
    assert build("--input", f"{bucket}/corpus", "--output", str(output), *live, *vectors) == 0
    assert report_of(output)["status"] == "ok" and list((output / "t" / "_chunks").glob("a-*-0.md"))


def test_a_source_deleted_or_edited_while_the_build_reads_it(tmp_path):
    """Listed, then deleted before its read: READ_FAILED naming it, the batch goes on. Listed,
    then edited: the bytes read are hashed, and the next listing sees it changed."""
    from jobs.records import SOURCE, new_row, to_table
    from jobs.stages.read import READ_FAILED, read_sources
    from jobs.storage import Storage

    docs = tmp_path / "docs"
    (docs / "t").mkdir(parents=True)
    for name in ("a", "b", "c"):
        (docs / "t" / f"{name}.md").write_text(TEXT.format(name))
    storage = Storage(str(docs))
    listed = {info.path: info for info in storage.walk()}
    (docs / "t" / "b.md").unlink()
    (docs / "t" / "c.md").write_text(TEXT.format("edited"))
    work = to_table([new_row("t", SOURCE, p, size=listed[p].size) for p in sorted(listed)])
    batch, stats = read_sources(work, storage)
    rows = batch.to_pylist()
    assert (stats.files, stats.failed) == (2, 1)
    # done for the progress line, with its listed bytes (no chunk stage counts it)
    assert (stats.failed_sources, stats.failed_source_bytes) == (1, listed["t/b.md"].size)
    assert rows[1]["error_code"] == READ_FAILED and "t/b.md" in rows[1]["error_message"]
    assert rows[2]["payload"] == TEXT.format("edited").encode()
    relisted = {info.path: info for info in storage.walk()}
    assert relisted["t/c.md"] != listed["t/c.md"] and relisted["t/a.md"] == listed["t/a.md"]


def test_a_source_past_its_time_budget_fails_alone_and_the_rest_is_written(tmp_path, vectors):
    """In a real build the budget stops the source inside its Ray task (CHUNKING_TIMEOUT)."""
    docs = tmp_path / "docs"
    (docs / "t").mkdir(parents=True)
    (docs / "t" / "a.md").write_text(TEXT.format("Alpha"))
    (docs / "t" / "b.md").write_text(TEXT.format("Beta"))
    (docs / "t" / "huge.md").write_bytes(b"word " * 4_000_000)  # 20 MB: tens of seconds
    started = time.monotonic()
    timed = ("--set", "chunking.timeout_seconds=3", *ON_RAY)  # without Ray: test_jobs_in_process
    assert build("--input", str(docs), *timed, *vectors) == 3
    assert time.monotonic() - started < 120
    report = report_of(docs)
    assert [(f["path"], f["code"]) for f in report["failures"]] == [
        ("t/huge.md", "CHUNKING_TIMEOUT")
    ]
    chunks = json.loads((docs / "t" / "index.json").read_text())["_embedded"]["chunks"]
    assert sorted(chunks) == ["a", "b"]
    # A timeout depends on the machine, not only on the bytes: the next run retries the source.
    manifest = json.loads((docs / "_reindex" / "manifest.json").read_text())
    assert manifest["sources"]["t/huge.md"]["failed"] and manifest["topics"]["t"]["failed"]
    assert "settled_failure" not in manifest["sources"]["t/huge.md"]
    config = load_config(CONFIG, overrides={"input": str(docs)})
    plan = discover(config, list_input(config)).plan
    assert plan.changed == {"t/huge.md"} and plan.settled == ()


def test_an_s3_endpoint_gone_fails_the_build_naming_it(tmp_path, caplog):
    """The build's log says it failed in one line, as for missing credentials: the endpoint that
    refused the connection is named in the error, and its traceback (80 lines of aiohttp and
    aiobotocore frames, found by use: a scheduled build against an endpoint that was down) adds
    nothing to it."""
    gone = gone_endpoint()
    output = tmp_path / "out"
    code = build(
        "--input", "s3://docs/corpus", "--output", str(output),
        "--set", f"storage_options={s3_options(gone)}", "--set", "s3.max_attempts=1",
    )  # fmt: skip
    assert code == 1
    report = report_of(output)
    assert report["status"] == "failed" and gone in report["error"]
    failed = [r for r in caplog.records if r.getMessage() == "the job failed"]
    assert len(failed) == 1 and failed[0].exc_info is None


def test_an_s3_output_without_credentials_fails_the_build_in_one_line(
    tmp_path, monkeypatch, capsys, caplog
):
    """No credentials anywhere (a cron line without the AWS environment): botocore's
    NoCredentialsError is no OSError, so the failed report's write raised it again from the
    build's error handler: exit 1 with three tracebacks and no line of ours. Now the build's
    error is printed, and the report that could not be written is a warning; the build's log
    says it failed without 25 lines of s3fs frames (the machine's setting, not our error)."""
    without_aws_credentials(monkeypatch, tmp_path)
    (tmp_path / "docs" / "t").mkdir(parents=True)
    (tmp_path / "docs" / "t" / "a.md").write_text("# a\n\nHow a signs a request.\n")
    options = json.dumps({"client_kwargs": {"endpoint_url": gone_endpoint()}})
    code = build(
        "--input", str(tmp_path / "docs"), "--output", "s3://no-credentials/out",
        "--set", f"storage_options={options}", "--cache", str(tmp_path / "cache"),
    )  # fmt: skip
    assert code == 1
    needs = "mdindex build: the job failed: NoCredentialsError: Unable to locate credentials"
    assert needs in capsys.readouterr().err
    failed = [r for r in caplog.records if r.getMessage() == "the job failed"]
    assert len(failed) == 1 and failed[0].exc_info is None


@ray.remote
def list_a_bucket(endpoint: str) -> None:
    """List a bucket from a Ray worker, with the filesystem the build uses."""
    import s3fs

    s3fs.S3FileSystem(skip_instance_cache=True, client_kwargs={"endpoint_url": endpoint}).ls("b")


def test_a_node_without_s3_credentials_is_named_so(tmp_path):
    """A build on a cluster whose nodes have no S3 credentials of their own (the driver's shell
    had them) said "the job failed: NoCredentialsError: Unable to locate credentials", where the
    driver's own listing had just worked: now it names the Ray task's node and what it lacks."""
    from jobs.build_cli import root_cause
    from jobs.report import error_text

    nowhere = str(tmp_path / "no-aws-files")
    node = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}
    node |= {"AWS_SHARED_CREDENTIALS_FILE": nowhere, "AWS_CONFIG_FILE": nowhere}
    node |= {"AWS_EC2_METADATA_DISABLED": "true", "AWS_SESSION_TOKEN": ""}
    task = list_a_bucket.options(runtime_env={"env_vars": node}, max_retries=0)
    with pytest.raises(ray.exceptions.RayTaskError) as raised:
        ray.get(task.remote(gone_endpoint()))
    said = error_text(root_cause(raised.value))
    needs = "NodeWithoutCredentials: Unable to locate credentials in a Ray task (pid="
    assert said.startswith(needs), said
    assert "each node needs S3 credentials of its own" in said and "storage_options" in said


def _node_without_the_plugin(batch: dict) -> dict:
    """A map task's check on a node lacking the config's plugin, as `jobs.landmarks` raises it."""
    from jobs.landmarks import PluginNotOnNode

    raise PluginNotOnNode("the chunking strategy 'paragraphs', which the driver found, is not here")


def test_a_late_nodes_check_in_a_map_task_is_its_one_line():
    """A node that joined during the build and lacks a third-party class (or has another folder)
    fails its first chunk task with `PluginNotOnNode` (`NotTheDriversFolder`): the build's last
    line and the report's error were Ray Data's 'RayTaskError(UserCodeException): ray::MapBatches
    …' with the traceback, the one line somewhere inside."""
    from ray import cloudpickle

    from jobs.build_cli import root_cause
    from jobs.report import error_text

    this_module = sys.modules[__name__]  # which Ray's workers cannot import: sent by value
    cloudpickle.register_pickle_by_value(this_module)
    try:
        with pytest.raises(Exception) as raised:
            ray.data.range(1).map_batches(_node_without_the_plugin).materialize()
    finally:
        cloudpickle.unregister_pickle_by_value(this_module)
    said = error_text(root_cause(raised.value))
    assert said == (
        "PluginNotOnNode: the chunking strategy 'paragraphs', which the driver found, is not here"
    )


def test_an_embedding_actor_that_fails_to_start_is_named_with_its_node_and_error(tmp_path):
    """An embedding actor that raised in its start (a GPU node whose torch has no CUDA) ended the
    build with Ray's ActorDiedError: the actor's whole traceback (30 lines) as the report's error
    and the build's last line. Now one line: which actor, its node and pid, and its error."""
    from jobs.build_cli import root_cause
    from jobs.report import error_text
    from jobs.stages.embed import EmbedActor, EmbedSettings

    settings = EmbedSettings("minilm", {"device": "cuda:99"}, cache_uri=str(tmp_path / "cache"))
    actor = ray.remote(EmbedActor).options(max_restarts=0).remote(settings)
    with pytest.raises(ray.exceptions.ActorDiedError) as raised:
        ray.get(actor.__call__.remote({}))
    said = error_text(root_cause(raised.value))
    needs = "ActorStartFailed: the embedding actor failed to start on node "
    assert said.startswith(needs), said
    assert re.search(r" \(pid \d+\): ValueError: device 'cuda:99': \S", said), said
    assert "\n" not in said and "File " not in said


def test_an_embedding_actor_on_a_node_without_the_backend_says_so(tmp_path):
    """An embedding actor that started on a node lacking the config's third-party backend (one
    that joined late: the start's check saw the nodes then) took the backend's entry point name
    for a Hugging Face model's: "model 'hashing': not a local directory, and the Hugging Face hub
    could not provide it". It checks the backend first, as a chunk task checks the strategy."""
    from jobs.build_cli import root_cause
    from jobs.landmarks import BACKEND, Plugin
    from jobs.report import error_text
    from jobs.stages.embed import EmbedActor, EmbedSettings

    missing = Plugin(BACKEND, "mdx_nowhere_backend")
    settings = EmbedSettings(
        "mdx_nowhere_backend", {}, cache_uri=str(tmp_path / "cache"), plugins=(missing,)
    )
    actor = ray.remote(EmbedActor).options(max_restarts=0).remote(settings)
    with pytest.raises(ray.exceptions.ActorDiedError) as raised:
        ray.get(actor.__call__.remote({}))
    said = error_text(root_cause(raised.value))
    assert said.startswith("ActorStartFailed: the embedding actor failed to start on node "), said
    needs = "PluginNotOnNode: the embedding backend 'mdx_nowhere_backend', which the driver found"
    assert needs in said and "no entry point 'mdx_nowhere_backend'" in said, said
    assert "\n" not in said and "Hugging Face" not in said


def topics_corpus(docs: Path, version: str) -> None:
    for t in range(6):
        for name in ("a", "b", "c"):
            path = docs / f"t{t}" / f"{name}.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(
                TEXT.format(f"{name} {t} {version}") + f"\n## More\n\n{version} text.\n"
            )


def assert_every_index_names_files_that_exist(output: Path) -> None:
    """Every index.json under `output` parses, and each chunk file it names is there."""
    for index in output.rglob("index.json"):
        for source in json.loads(index.read_text())["_embedded"].get("chunks", {}).values():
            for item in source["items"]:
                assert (index.parent / item["href"]).is_file()


@pytest.mark.slow  # test_jobs_atomic's crash: a process killed before its switch, on the way
def test_a_driver_killed_mid_build_leaves_a_valid_output_and_a_rerun_converges(tmp_path):
    """`kill -9` of `python -m jobs.reindex` (joined to this session's Ray) once it has started
    writing the new version: every index.json still parses and names files that exist, and a
    re-run gives the bytes of a clean build of the new version."""
    docs, killed, clean = tmp_path / "docs", tmp_path / "killed", tmp_path / "clean"
    topics_corpus(docs, "v1")
    assert build("--input", str(docs), "--output", str(killed)) == 0
    topics_corpus(docs, "v2")
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    command = [sys.executable, "-m", "jobs.reindex", "--config", CONFIG]
    driver = subprocess.Popen(
        [*command, "--input", str(docs), "--output", str(killed)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while driver.poll() is None and time.monotonic() < deadline:
        if any(b"v2 text" in p.read_bytes() for p in killed.glob("t*/_chunks/*.md")):
            break
        time.sleep(0.005)
    driver.kill()
    assert driver.wait() == -9  # killed mid-build, not finished
    assert_every_index_names_files_that_exist(killed)
    assert build("--input", str(docs), "--output", str(killed)) == 0
    assert build("--input", str(docs), "--output", str(clean)) == 0
    assert outputs(killed) == outputs(clean)


def signal_at(
    docs: Path,
    output: Path,
    marker: str,
    options: list[str] | None = None,
    signum: signal.Signals = signal.SIGTERM,
) -> tuple[int, str]:
    """`python -m jobs.reindex` (with `options`) joined to this session's Ray, sent `signum` at
    the first line of its output that holds `marker` (`jobs_support.signalled_at`)."""
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    command = [sys.executable, "-m", "jobs.reindex", "--config", CONFIG, *(options or [])]
    command += ["--input", str(docs), "--output", str(output)]
    return signalled_at(command, env, marker, signum)


def test_a_build_stopped_by_sigterm_mid_build_reports_it_and_exits_143(tmp_path):
    """A scheduler's SIGTERM mid-build (joined to this session's Ray): exit 143 and a failed
    report that says what stopped it; the output keeps only valid indexes. Ray's core worker
    installs a C++ handler for SIGTERM ("*** SIGTERM received"), which aborted the driver with no
    report in about 1 run of 10: the driver puts Python's handler back after `ray.init`."""
    docs, output = tmp_path / "docs", tmp_path / "out"
    topics_corpus(docs, "v1")
    code, rest = signal_at(docs, output, "embedding pool:")  # logged as its actors start
    assert code == 143, rest[-3000:]
    assert "mdindex build: stopped by SIGTERM" in rest and "SIGTERM received" not in rest
    report = report_of(output)
    assert (report["status"], report["exit_code"]) == ("failed", 143)
    assert report["error"] == "Interrupted: stopped by SIGTERM"
    assert_every_index_names_files_that_exist(output)


def test_a_build_killed_where_it_cannot_report_leaves_a_report_that_says_it_did_not_finish(
    tmp_path, vectors, capsys, caplog
):
    """A run killed where no handler runs (kill -9, the kernel's out-of-memory killer, a
    container or machine gone) left the last run's report, which said "ok", or none: a person
    reading it days later could not tell that the last run never finished. Once it holds the
    lock, before its first write into the index, a run now writes a report saying it is
    unfinished, which its own replaces at its end; so does a run killed after such a run, whose
    interim manifest is already there. A first build's interim manifest had no settings key, the
    mark of one this version cannot read, so the next run warned "manifest.json is of another
    format, or damaged": it names the run's key now, and the next run says nothing of damage."""
    docs, output = tmp_path / "docs", tmp_path / "out"
    (docs / "t").mkdir(parents=True)
    (docs / "t" / "alpha.md").write_text(TEXT.format("Alpha"))
    (docs / "t" / "gamma.md").write_text(TEXT.format("Gamma"))  # not cached: a model to load

    # Killed at the interim manifest's rename, its first write after the lock's and the report's
    # (the report came after it: a kill there left the last run's report, or none).
    env = fault_environment("crash", str(output), match="_reindex/manifest.json")
    env["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    command = [sys.executable, "-m", "jobs.reindex", "--config", CONFIG, *vectors]
    command += ["--input", str(docs), "--output", str(output)]
    child = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr[-3000:]
    assert not (output / "_reindex" / "manifest.json").exists()
    assert report_of(output)["status"] == "unfinished"

    code, rest = signal_at(docs, output, "embedding pool:", vectors, signal.SIGKILL)
    assert code == -signal.SIGKILL, rest[-3000:]
    assert (output / "_reindex" / "manifest.json").is_file()  # the interim one
    report = report_of(output)
    assert (report["status"], report["exit_code"]) == ("unfinished", None)
    assert "finished_at" not in report and report["started_at"] in report["error"]
    assert re.fullmatch(
        rf"the build of pid \d+ on {re.escape(socket.gethostname())}, since \S+, has "
        r"not reported its end: it is still running, or it was stopped where it could not "
        r"\(kill -9, out of memory, its machine or container gone\); the next build redoes what "
        r"it changed",
        report["error"],
    )
    code, rest = signal_at(docs, output, "embedding pool:", vectors, signal.SIGKILL)
    assert code == -signal.SIGKILL, rest[-3000:]
    again = report_of(output)
    assert again["status"] == "unfinished" and again["error"] != report["error"]
    assert mdindex(["report", str(output)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(
        f"last run: unfinished (exit code unknown), started {again['started_at']}, pid "
        f"{again['pid']} on {socket.gethostname()}\n  the build of pid {again['pid']} on"
    ), text

    with caplog.at_level(logging.INFO, logger="mdindex.build"):
        assert build("--input", str(docs), "--output", str(output), *vectors) == 0
    assert "damaged" not in caplog.text
    assert (report_of(output)["status"], report_of(output)["sources"]["chunked"]) == ("ok", 2)
    assert_every_index_names_files_that_exist(output)


def process_group(pgid: int) -> set[int]:
    """The pids of the live processes of process group `pgid`."""
    members = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == pgid:
                    members.add(int(entry.name))
            except ProcessLookupError:  # ended meanwhile
                continue
    return members


def test_a_sigterm_to_the_builds_process_group_reaches_the_driver_alone(tmp_path):
    """`timeout 4h mdindex build ...` (coreutils) sends its SIGTERM to its whole process group,
    as does `kill -- -PGID`. The processes of the build's private Ray instance were in that group
    too, and stopped with the driver, which then now and then could not report the run: Ray's
    core worker ended it with exit 1 (its object store's connection lost), it aborted in
    `ray.init` (134) or hung 60 s for its GCS, the previous report left as it was; otherwise it
    reported 7-27 s later. They lead process groups of their own now: the driver is the group's
    only member, and the group's SIGTERM stops the build as one sent to the driver does (143, a
    failed report that says so, every index.json valid)."""
    docs, output = tmp_path / "docs", tmp_path / "out"
    topics_corpus(docs, "v1")
    command = [sys.executable, "-m", "jobs.reindex", "--config", CONFIG, *ON_RAY]
    driver = subprocess.Popen(
        [*command, "--input", str(docs), "--output", str(output)],
        env={**own_ray_environment(), "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    seen = []
    try:
        for line in driver.stdout:
            seen.append(line)
            if "embedding pool:" in line:  # logged once the local Ray instance is up
                break
        assert process_group(driver.pid) == {driver.pid}, "".join(seen)[-3000:]
        os.killpg(driver.pid, signal.SIGTERM)
        rest = driver.communicate(timeout=60)[0]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 143, rest[-3000:]
    assert "mdindex build: stopped by SIGTERM" in rest
    report = report_of(output)
    assert (report["status"], report["exit_code"]) == ("failed", 143)
    assert report["error"] == "Interrupted: stopped by SIGTERM"
    assert_every_index_names_files_that_exist(output)


def test_a_sigterm_once_the_build_is_reported_ends_it_with_its_code_and_only_it(tmp_path, vectors):
    """Once a build is reported, SIGTERM ends a `python -m jobs.reindex` at once with the build's
    code, and no traceback. What is left then is Ray's shutdown at exit, an atexit hook that
    waits 0.5 s: Python's `SystemExit` inside it printed "Exception ignored in atexit callback",
    and now and then the core worker's teardown aborted the driver (a finished build exited 1 or
    -6). A build run in-process puts its caller's handler back, so a later SIGTERM to that
    program (a test runner stopped by its CI) is not taken for the build's end."""

    def callers(signum, frame):
        raise AssertionError("not sent")

    docs, built, output = tmp_path / "docs", tmp_path / "built", tmp_path / "out"
    (docs / "t").mkdir(parents=True)
    (docs / "t" / "a.md").write_text(TEXT.format("Alpha"))
    before = signal.signal(signal.SIGTERM, callers)
    try:
        assert build("--input", str(docs), "--output", str(built), *vectors) == 0
        assert signal.getsignal(signal.SIGTERM) is callers
    finally:
        signal.signal(signal.SIGTERM, before)

    code, rest = signal_at(docs, output, "mdindex build: 1 source ", vectors)  # the summary
    assert code == 0, rest[-3000:]
    assert "Traceback" not in rest and "SIGTERM" not in rest
    assert (report_of(output)["status"], report_of(output)["exit_code"]) == ("ok", 0)


# A program as `mdindex` runs one: its start, then a build that reports exit code 3 and returns
# (`run_build` in `callers_handler`), then SIGTERM before the program's end (`exit_with`) or, with
# "start", at once.
PROGRAM = """
import os, signal, sys
from jobs.signals import callers_handler, exit_at_once_on_sigterm, exit_with, program_start
program_start()
if sys.argv[1] == "start":
    os.kill(os.getpid(), signal.SIGTERM)
with callers_handler():
    exit_at_once_on_sigterm(3)
os.kill(os.getpid(), signal.SIGTERM)
exit_with(0)
"""


@pytest.mark.parametrize(("when", "code"), [("start", 143), ("after the build", 3)])
def test_a_sigterm_between_the_builds_return_and_the_programs_end_exits_with_the_builds_code(
    when, code
):
    """The build put the default action back on its way out, and a SIGTERM that came before the
    program's `exit_with` killed it (-15): a finished build's code was lost (likely what made
    `test_a_sigterm_once_the_build_is_reported…` fail once, in a run of eight modules). Now the
    build's handler holds to the program's end; before any build, SIGTERM exits 143, as a shell
    reports it."""
    done = subprocess.run([sys.executable, "-c", PROGRAM, when], capture_output=True, timeout=60)
    assert (done.returncode, done.stderr) == (code, b"")


# A program as `mdindex` runs one (or, "in-process", a caller without `program_start`): a build
# that reports exit code 3 and returns, then Ctrl-C before the program's end ("between") or in
# Ray's shutdown at exit, an atexit hook that waits 0.5 s ("at exit").
INTERRUPTED = """
import atexit, os, signal, sys, time
# Python's own handler, as it starts where SIGINT is not ignored: a background job of a script (CI
# under nohup) inherits it ignored, and each case then ended 3 whatever the handlers did
signal.signal(signal.SIGINT, signal.default_int_handler)
from jobs.signals import callers_handler, exit_at_once_on_sigterm, exit_with, program_start
if sys.argv[1] != "in-process":
    program_start()
with callers_handler():
    exit_at_once_on_sigterm(3)
if sys.argv[1] == "at exit":
    atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(0.5)))
else:
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.5)
    except KeyboardInterrupt:
        sys.exit(7)
exit_with(3)
"""


@pytest.mark.parametrize(("when", "code"), [("between", 3), ("at exit", 3), ("in-process", 7)])
def test_a_ctrl_c_once_the_build_is_reported_exits_with_the_builds_code(when, code):
    """A second Ctrl-C as a stopped build's program ended (in Ray's shutdown at exit) printed
    "Exception ignored in atexit callback … KeyboardInterrupt" and the driver aborted (-6) after
    the build had reported 130: SIGINT, as SIGTERM, ends a reported build at once with its code.
    A caller that ran the build in-process gets its own Ctrl-C back (`KeyboardInterrupt`)."""
    program = [sys.executable, "-c", INTERRUPTED, when]
    done = subprocess.run(program, capture_output=True, timeout=60)
    assert (done.returncode, done.stderr) == (code, b"")


# A program run under `nohup` (SIGHUP ignored): its start, a build's handlers, then SIGHUP.
NOHUP = """
import os, signal
from jobs.signals import callers_handler, exit_on_sigterm, exit_with, program_start
signal.signal(signal.SIGHUP, signal.SIG_IGN)
program_start()
with callers_handler():
    exit_on_sigterm()
    os.kill(os.getpid(), signal.SIGHUP)
os.kill(os.getpid(), signal.SIGHUP)
exit_with(0)
"""


def test_sighup_stays_ignored_under_nohup():
    """`nohup mdindex build … &` then logging out: the build goes on (SIGHUP is taken as SIGTERM
    only where nothing ignores it)."""
    done = subprocess.run([sys.executable, "-c", NOHUP], capture_output=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, b"")


# A program whose stopped build is writing its report (`exit_on_sigterm`'s handler is SIGTERM's)
# when a second SIGTERM comes: SystemExit(15) escapes the build's own handling.
SECOND_SIGTERM = """
import os, signal
from jobs.signals import exit_on_sigterm, run_program

def main():
    exit_on_sigterm()
    os.kill(os.getpid(), signal.SIGTERM)  # as the failed report is written
    return 143

run_program(main)
"""


def test_a_second_sigterm_while_a_stopped_build_writes_its_report_exits_143():
    """It escaped as SystemExit(15): exit 15, which no shell or scheduler reports for SIGTERM."""
    done = subprocess.run([sys.executable, "-c", SECOND_SIGTERM], capture_output=True, timeout=60)
    assert (done.returncode, done.stderr) == (143, b"")


def test_a_sigterm_while_the_driver_waits_in_ray_is_taken_as_the_signal_it_was():
    """Ray gives a SystemExit that the SIGTERM handler raised while the driver waited in
    `ray.wait` or `ray.get` (for the last topics' reduces) as SystemExit(1), its class and code
    lost: the build exited 1 without a word, its report left "unfinished" (found by use: a
    SIGTERM to a build whose reduces waited for a node). It stands for that SIGTERM."""
    from jobs.build_cli import ending
    from jobs.signals import callers_handler, exit_on_sigterm

    never = ray.remote(num_cpus=512)(lambda: None).remote()  # no node holds it: no end
    with callers_handler():
        exit_on_sigterm()
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
        with pytest.raises(SystemExit) as caught:
            ray.wait([never])
    ray.cancel(never)
    assert caught.value.code == 1  # Ray's stand-in for the handler's exit
    end = ending(caught.value)
    assert (end.code, end.message) == (143, "mdindex build: stopped by SIGTERM; a re-run converges")


def test_a_sigterm_that_stopped_an_earlier_build_in_the_process_is_not_a_later_builds():
    """The record of the signals that stopped a build (Ray gives their exit as SystemExit(1))
    is the build's: once a build in the process was stopped by SIGTERM (or by a `NodeWatch`,
    which interrupts as SIGTERM does), a later build's own exit 1 was read as that SIGTERM:
    exit 143, "stopped by SIGTERM"."""
    from jobs.build_cli import ending
    from jobs.signals import Stopped, callers_handler, exit_on_sigterm

    with callers_handler():
        exit_on_sigterm()
        with pytest.raises(Stopped):
            signal.raise_signal(signal.SIGTERM)
    with callers_handler():
        exit_on_sigterm()
        assert ending(SystemExit(1)) is None  # not the build's to report: it goes on up


# A command that leaves Ctrl-C to Python (`mdindex query` waiting on a server, loading a model).
CTRL_C = """
import os, signal
from jobs.signals import run_program

def main():
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal's Ctrl-C finds it
    os.kill(os.getpid(), signal.SIGINT)
    return 0

run_program(main)
"""


def test_ctrl_c_in_a_command_without_its_own_handling_exits_130_quietly():
    """`mdindex query` or `report` stopped by Ctrl-C printed a KeyboardInterrupt traceback of
    some 40 lines (from fsspec's event loop, transformers' imports)."""
    done = subprocess.run([sys.executable, "-c", CTRL_C], capture_output=True, timeout=60)
    assert (done.returncode, done.stderr) == (130, b"")


def hangup_as_in_a_terminal() -> None:
    """SIGHUP's default action, as a program started from a terminal has it (in a child process,
    before it runs)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_build_stopped_by_sigterm_before_ray_starts_reports_it_too(tmp_path, signum):
    """SIGTERM while the build lists an input on a hung S3 endpoint (before Ray starts): exit 143,
    as a shell gives it, and a failed report that says what stopped it, within about a second.
    SIGHUP (an SSH session dropped) the same, 129: it killed the build, whose report said
    "unfinished" (`report --check`: 75, still running) until the next run."""
    stalled = StalledEndpoint()
    output = tmp_path / "out"
    command = [sys.executable, "-m", "jobs.reindex", "--config", CONFIG, "--output", str(output)]
    command += ["--input", "s3://docs/corpus", "--set", "s3.read_timeout=60"]
    command += ["--set", f"storage_options={s3_options(stalled.url)}"]
    env = own_ray_environment()
    try:
        driver = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            preexec_fn=hangup_as_in_a_terminal,  # a test run under nohup ignores SIGHUP
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not stalled.held and time.monotonic() < deadline:  # the listing's request is in
            time.sleep(0.05)
        signalled = time.monotonic()
        driver.send_signal(signum)
        rest = driver.communicate(timeout=30)[1]
    finally:
        stalled.close()
    assert driver.returncode == 128 + signum, rest[-3000:]
    assert time.monotonic() - signalled < 10
    report = report_of(output)
    assert (report["status"], report["exit_code"]) == ("failed", 128 + signum)
    assert report["error"] == f"Interrupted: stopped by {signum.name}"
    assert report["started_at"] <= report["finished_at"]  # said, where no unfinished report was
    assert "started a local Ray instance" not in rest


def paused_build(output: Path, fault: str, count: int, *args: str) -> subprocess.Popen:
    """`python -m jobs.reindex ARGS --output OUTPUT` in a child process (a local Ray of its own,
    if it starts one) held at the `count`-th rename onto its report.json (`paused_program`)."""
    command = [sys.executable, "-m", "jobs.reindex", "--config", CONFIG, *args]
    return paused_program(output, fault, count, [*command, "--output", str(output)])


def test_a_failed_build_writes_its_report_before_it_releases_the_lock(tmp_path):
    """A failed or stopped build wrote its report once it had released the build lock: a build
    that took the lock meanwhile ran, and the first one's report then stood for it (or, had it
    been killed, for the last run), a write outside the lock. It is written while the lock is
    held now: a second build meanwhile is refused (75) and writes nothing."""
    docs, empty, output = tmp_path / "docs", tmp_path / "empty", tmp_path / "out"
    (docs / "t").mkdir(parents=True)
    empty.mkdir()
    for name in ("a.md", "a.mdx"):  # a shared stem: under abort, exit 1 before Ray would start
        (docs / "t" / name).write_text(TEXT.format("Alpha"))
    options = ["--set", 'sources.globs=["*.md", "*.mdx"]', "--set", "failure_policy=abort"]
    failing = paused_build(output, "pause", 1, "--input", str(docs), *options)
    second = [sys.executable, "-m", "jobs.reindex", "--config", CONFIG, "--input", str(empty)]
    env = own_ray_environment()
    done = subprocess.run(
        [*second, "--output", str(output)], env=env, capture_output=True, text=True, timeout=120
    )
    Path(f"{output}.go").touch()
    stderr = failing.communicate(timeout=60)[1]
    assert failing.returncode == 1, stderr[-3000:]
    assert "mdindex build: the job failed: SourceFailed: t/a.md: STEM_CONFLICT" in stderr
    assert done.returncode == 75, done.stderr[-3000:]
    report = report_of(output)
    assert (report["status"], report["exit_code"], report["pid"]) == ("failed", 1, failing.pid)


def test_a_sigterm_once_the_report_is_in_place_ends_the_build_with_its_code(tmp_path):
    """A SIGTERM after a finished build's report.json was renamed into place, before the build
    returned (its report.html then written, its lock released), made it a failed report, exit
    143. From there on a SIGTERM ends the build at once with its own code, its report left."""
    empty, output = tmp_path / "empty", tmp_path / "out"
    empty.mkdir()
    build = paused_build(output, "pause-after", 2, "--input", str(empty))  # the unfinished one's
    build.send_signal(signal.SIGTERM)  # then the run's own
    Path(f"{output}.go").touch()
    stderr = build.communicate(timeout=60)[1]
    assert build.returncode == 0, stderr[-3000:]
    assert (report_of(output)["status"], report_of(output)["exit_code"]) == ("ok", 0)


def test_sources_that_make_no_chunk_are_counted_and_named_drafts_aside(tmp_path):
    """An empty page, a blank one and one of front matter alone made no chunk and were said
    nowhere (a page a change emptied); a draft is counted as one (`skipped_drafts`)."""
    pages = {
        "t/a.md": TEXT.format("Alpha").encode(),
        "t/blank.md": b"\n  \n",
        "t/draft.md": b"---\ndraft: true\n---\n# Draft\n\nNot yet.\n",
        "t/empty.md": b"",
        "t/front.md": b"---\ntitle: Section\n---\n",
    }
    (tmp_path / "t").mkdir()
    for path, data in pages.items():
        (tmp_path / path).write_bytes(data)
    storage = Storage(str(tmp_path))
    batch, _ = read_sources(to_table([new_row("t", SOURCE, p) for p in pages]), storage)
    _, stats, _ = chunk_sources(batch, ChunkSettings("semantic"), storage)
    assert stats.empty.to_dict() == {
        "count": 3,
        "first": ["t/blank.md", "t/empty.md", "t/front.md"],
    }
    assert (stats.sources, stats.skipped_drafts, stats.failed) == (5, 1, 0)


def test_an_exception_the_chunker_did_not_raise_on_purpose_is_a_chunker_error(tmp_path):
    """CHUNKER_ERROR, not the chunker's own (settled) CHUNKING_FAILED: the next run retries it."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.md").write_text(TEXT.format("Alpha"))
    (tmp_path / "t" / "b.md").write_bytes(b"# B\n\ncaf\xe9\n")
    rows = [new_row("t", SOURCE, path) for path in ("t/a.md", "t/b.md")]
    storage = Storage(str(tmp_path))
    batch, _ = read_sources(to_table(rows), storage)
    settings = ChunkSettings(strategy="semantic", options={"no_such_option": 1})
    batch, stats, _ = chunk_sources(batch, settings, storage)
    codes = batch.column("error_code").to_pylist()
    assert codes == [CHUNKER_ERROR, CHUNKER_ERROR] and stats.failed == 2
    assert batch.column("error_message")[0].as_py().startswith("ValueError: unknown option")
    batch, _, _ = chunk_sources(
        read_sources(to_table(rows), storage)[0], ChunkSettings("semantic"), storage
    )
    assert batch.column("error_code").to_pylist() == [None, "CHUNKING_FAILED"]


def test_a_call_ray_tries_again_after_its_worker_died_is_counted_once(tmp_path, vectors):
    """A worker that dies after its record reached the collector (a chunk task, the embedding
    actor, a topic's reduce) has its call tried again, which reported it again: 4 sources
    chunked of 2, 4 chunks embedded or from the cache of 2, 2 topics written of 1. Each call's
    record is now counted once (its key: the stage and its rows)."""
    docs, out = tmp_path / "docs", tmp_path / "out"
    (docs / "t").mkdir(parents=True)
    for name in ("Alpha", "Beta"):
        (docs / "t" / f"{name.lower()}.md").write_text(TEXT.format(name))
    killed = ("chunk.sources", "embed.chunks", "index.topics")
    env = fault_environment("crash-after-report", str(out), match=os.pathsep.join(killed))
    child = subprocess.run(
        [sys.executable, "-m", "jobs.reindex", "--config", CONFIG, *ON_RAY,
         "--input", str(docs), "--output", str(out), *vectors],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert child.returncode == 0, child.stderr[-3000:]
    assert all(Path(f"{out}.crashed-{counter}").exists() for counter in killed)

    report = report_of(out)
    counters, chunks = report["counters"], report["chunks"]
    assert report["sources"]["chunked"] == counters["chunk"]["sources"] == 2
    assert counters["read"]["files"] == 2 and len(report["slowest_sources"]) == 2
    assert chunks["total"] == counters["embed"]["chunks"] == chunks["cache_hits"] == 2
    assert counters["index"]["topics"] == report["topics"]["rebuilt"] == 1


class _Dataset:
    """What `Bundles` asks of a dataset: an iterator of bundles that ends at once, fails at once
    with `error`, or (`endless`) waits for ever."""

    def __init__(self, error: Exception | None = None, endless: bool = False):
        self.error, self.endless = error, endless

    def iter_internal_ref_bundles(self):
        if self.error:
            raise self.error
        while self.endless:
            time.sleep(0.001)
        return iter(())


def test_the_bundles_thread_stopped_as_its_dataset_ends_or_fails_prints_no_traceback(
    capfd, monkeypatch
):
    """A build that fails as its dataset fails (or as a reduce fails just after the dataset ended)
    stops the thread that fetched the dataset's bundles. Stopped as that thread ended, it raised
    the stop in threading's own code: a traceback of `_Stopped` on stderr (2 to 9 of these 6,000
    stops, with the GIL passed on every microsecond). Stopped before it began, or while it waits,
    it ends too."""
    from jobs.reduce import Bundles

    raised = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_type))
    # raised in threading's code after the thread's own handler: "Exception ignored in thread"
    monkeypatch.setattr(sys, "unraisablehook", lambda args: raised.append(args.exc_type))
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for dataset in (_Dataset(ValueError("the dataset failed")), _Dataset()):
            for _ in range(3000):
                bundles = Bundles(dataset)
                with pytest.raises((ValueError, KeyError)):
                    for _ in bundles.pieces(10.0):
                        pass
                    raise KeyError("a reduce failed")
                bundles.stop()
        for _ in range(100):
            Bundles(_Dataset(endless=True)).stop()  # returns: the thread ended
    finally:
        sys.setswitchinterval(interval)
    assert raised == []
    assert "_Stopped" not in capfd.readouterr().err
