"""Shared helpers of the build tests."""

from __future__ import annotations

import json
import os
import shutil
import socket
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
FAULTS = Path(__file__).resolve().parent / "faults"


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


def without_aws_credentials(monkeypatch, folder: Path) -> None:
    """No AWS credentials anywhere for this test (a cron line without the AWS environment): none
    in the environment, no shared files (paths under `folder` that do not exist), no instance
    metadata to ask."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(folder / "no-aws-files"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(folder / "no-aws-files"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


# Stand-in stages for scheduling tests: importable here by Ray's workers (a test module is not).
HOLD_SECONDS = 0.5


def timed_chunking(batch: pa.Table) -> pa.Table:
    """A chunk task's stand-in: holds its CPU slot for `HOLD_SECONDS`, and says when."""
    start = time.time()
    time.sleep(HOLD_SECONDS)
    return batch.append_column("start", pa.array([start])).append_column(
        "end", pa.array([time.time()])
    )


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


def own_ray_environment() -> dict[str, str]:
    """This process's environment for a build in a child process with a local Ray of its own
    (without RAY_ADDRESS, which would join the session's)."""
    return {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}


def fault_environment(fault: str, root: str, **settings: str) -> dict[str, str]:
    """`own_ray_environment` with the file fault `fault` of `tests/faults/sitecustomize.py` on
    the paths under `root` in every process of the build; `settings` are its other variables
    (match="...": MDINDEX_FAULT_MATCH, count="...": MDINDEX_FAULT_COUNT)."""
    env = own_ray_environment()
    path = [str(FAULTS), *filter(None, [env.get("PYTHONPATH")])]
    env.update(PYTHONPATH=os.pathsep.join(path), MDINDEX_FAULT=fault, MDINDEX_FAULT_ROOT=root)
    env.update({f"MDINDEX_FAULT_{name.upper()}": value for name, value in settings.items()})
    return env
