"""Whole-file writes that no reader can see half done, on any fsspec filesystem."""

from __future__ import annotations

import os
import tempfile

import fsspec
from fsspec.implementations.local import LocalFileSystem


def write_atomically(
    fs: fsspec.AbstractFileSystem, files: dict[str, bytes], *, in_place: bool = False
) -> None:
    """Write each `{path: data}` whole: on local disk to a temporary file in the same folder,
    renamed over the path; on object storage as one put per object (concurrent where the
    filesystem batches puts, as s3fs does). Paths are the filesystem's own (no scheme).

    `in_place=True` writes local files directly, skipping the temporary file and rename (a third
    of the cost of a small file): only for files whose readers check their content anyway, such
    as the cache's vectors, which metadata.json's digest vouches for."""
    if not files:
        return
    if not isinstance(fs, LocalFileSystem):
        fs.pipe(files)
        return
    for folder in {os.path.dirname(path) for path in files}:  # each folder once, not per file
        os.makedirs(folder, exist_ok=True)
    write = _write_local if in_place else _replace_local
    for path, data in files.items():
        write(path, data)


def _write_local(path: str, data: bytes) -> None:
    """Write `data` over `path` directly (a reader may see it half written)."""
    with open(path, "wb") as out:
        out.write(data)


def _replace_local(path: str, data: bytes) -> None:
    """Write `data` to a temporary file beside `path` (whose folder exists), then rename it over
    `path`."""
    handle, temporary = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(path))
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
