"""Shared helpers of the build tests."""

from __future__ import annotations

from pathlib import Path


def outputs(root: Path) -> dict[str, bytes]:
    """Every file under an output root but the run's report and manifest and the cache."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
        and not p.relative_to(root).as_posix().startswith(("_reindex/", ".embedding-cache/"))
    }
