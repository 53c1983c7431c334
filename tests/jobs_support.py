"""Shared helpers of the build tests."""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import fsspec
import pyarrow as pa

from jobs.records import QUESTIONS, SOURCE, new_row, to_table
from jobs.stages.chunk import ChunkSettings
from jobs.storage import Storage

CORPUS = Path(__file__).resolve().parent / "fixtures" / "corpus"
GUIDES = ["guides/getting-started.md", "guides/installation.md"]
NOT_OUTPUTS = ("_reindex/", ".embedding-cache/")  # the run's report and manifest, the cache
# A build's arguments that run its stages on Ray whatever its size, for a test of the Ray path in
# a process without Ray: the fixtures are within `resources.in_process_sources` (`jobs.in_process`)
ON_RAY = ("--set", "resources.in_process_sources=null")
# A build's log line's time stamp and level (`jobs.build_cli.log_formatter`)
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z [A-Z]+ ", re.MULTILINE)


def unstamped(text: str) -> str:
    """`text` with the time stamp and level taken off each line of the build's log that has
    them (the line a refused or locked-out build ends with is stamped too)."""
    return STAMP.sub("", text)


def outputs(root: Path) -> dict[str, bytes]:
    """Every file under a local output root but the run's report and manifest and the cache."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.relative_to(root).as_posix().startswith(NOT_OUTPUTS)
    }


def stored(fs: fsspec.AbstractFileSystem, root: str) -> dict[str, bytes]:
    """Every file under an output root on any filesystem but the report, manifest and cache, by
    relative path."""
    found = {path[len(root) + 1 :]: path for path in fs.find(root)}
    return {rel: fs.cat_file(at) for rel, at in found.items() if not rel.startswith(NOT_OUTPUTS)}


def signalled_at(
    command: list[str], env: dict[str, str], marker: str, signum: int = signal.SIGTERM
) -> tuple[int, str]:
    """`command` (a build) run with `env`, its output unbuffered (stdout and stderr as one), sent
    `signum` at the first line that holds `marker`: its exit code and the output after that line,
    or all of it when no line held the marker (no signal sent: a build that failed before it,
    whose output a failure message then shows)."""
    driver = subprocess.Popen(
        command, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    seen = []
    for line in driver.stdout:
        seen.append(line)
        if marker in line:
            driver.send_signal(signum)
            break
    else:
        return driver.wait(timeout=60), "".join(seen)
    rest = driver.communicate(timeout=120)[0]
    return driver.returncode, rest


def cache_copy(cache: Path, folder: Path) -> list[str]:
    """`--cache` of a copy of the embedding cache `cache`, made in `folder`: a build whose
    vectors are all there loads no model (most of a small build's time), and what it writes stays
    out of the original, which other tests read."""
    shutil.copytree(cache, folder / "cache-copy")
    return ["--cache", str(folder / "cache-copy")]


def s3_options(endpoint: str) -> str:
    """`storage_options` for `--set`: the test credentials and an S3 endpoint."""
    return json.dumps(
        {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        }
    )


def gone_endpoint() -> str:
    """An HTTP endpoint on 127.0.0.1 at a port nothing listens on: every connection is refused."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{closed.getsockname()[1]}"


# Stand-in stages for scheduling tests: importable here by Ray's workers (a test module is not).
MEETING_SECONDS = 60


def meeting_chunking(batch: pa.Table, folder: str, tasks: int) -> pa.Table:
    """A chunk task's stand-in (one of `tasks`) that holds its CPU slot until another one runs
    beside it (each running task has a file in `folder`), or all others are done, or
    `MEETING_SECONDS` passed: then it leaves `folder/alone`, and the others wait no more. Says
    when it ran and whether it met one. (A fixed hold of 0.5 s made the test depend on how soon
    Ray started a second worker process: 20 s beside three busy loops, on 2 cores.)"""
    start = time.time()
    row = batch.column("row")[0].as_py()
    running = Path(folder, f"running-{row}")
    running.touch()
    deadline = time.monotonic() + MEETING_SECONDS
    while not (met := len(list(Path(folder).glob("running-*"))) > 1):
        if len(list(Path(folder).glob("done-*"))) == tasks - 1 or Path(folder, "alone").exists():
            break
        if time.monotonic() > deadline:
            Path(folder, "alone").touch()
            break
        time.sleep(0.05)
    time.sleep(0.2)  # the other one sees this one too
    Path(folder, f"done-{row}").touch()
    running.unlink()
    end = time.time()
    return pa.table({"row": batch.column("row"), "start": [start], "end": [end], "met": [met]})


class PassingActor:
    """An embedding actor's stand-in."""

    def __call__(self, batch: pa.Table) -> pa.Table:
        return batch


class CallSizes:
    """An embedding actor's stand-in that answers each call with the rows it was given."""

    def __call__(self, batch: pa.Table) -> pa.Table:
        return pa.table({"rows": [batch.num_rows]})


def passing(batch: pa.Table) -> pa.Table:
    """A store task's stand-in."""
    return batch


def chunk_task_inputs(output: Path, encoder: str | None, options: dict) -> dict:
    """`read_and_chunk`'s arguments for the fixture corpus's guides and their questions, chunked
    with `semantic` and `options`. The output's guides topic already has an index.json, so no
    chunk files are written ahead."""
    (output / "guides").mkdir(exist_ok=True)
    (output / "guides" / "index.json").write_text("{}")
    rows = [new_row("guides", SOURCE, path) for path in GUIDES]
    rows.append(new_row("guides", QUESTIONS, "guides/qa-pairs.md"))
    settings = ChunkSettings(
        strategy="semantic", options=options, corpus_paths=frozenset(GUIDES), encoder=encoder
    )
    return {
        "batch": to_table(rows),
        "source": Storage(str(CORPUS)),
        "output": Storage(str(output)),
        "settings": settings,
    }
