"""Shared helpers of the build tests."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa

NOT_OUTPUTS = ("_reindex/", ".embedding-cache/")  # the run's report and manifest, the cache


def outputs(root: Path) -> dict[str, bytes]:
    """Every file under a local output root but the run's report and manifest and the cache."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.relative_to(root).as_posix().startswith(NOT_OUTPUTS)
    }


def s3_options(endpoint: str) -> str:
    """`storage_options` for `--set`: the test credentials and an S3 endpoint."""
    return json.dumps(
        {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        }
    )


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


def passing(batch: pa.Table) -> pa.Table:
    """A store task's stand-in."""
    return batch
