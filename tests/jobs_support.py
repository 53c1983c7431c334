"""Shared helpers of the build tests."""

from __future__ import annotations

import json
from pathlib import Path

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
