"""Whole-file writes that no reader can see half done, on any fsspec filesystem."""

from __future__ import annotations

import os
import tempfile

import fsspec
from fsspec.implementations.local import LocalFileSystem


def write_atomically(fs: fsspec.AbstractFileSystem, files: dict[str, bytes]) -> None:
    """Write each `{path: data}` whole: on local disk to a temporary file in the same folder,
    renamed over the path; on object storage as one put per object (concurrent where the
    filesystem batches puts, as s3fs does). Paths are the filesystem's own (no scheme)."""
    if not files:
        return
    if not isinstance(fs, LocalFileSystem):
        fs.pipe(files)
        return
    for path, data in files.items():
        _replace_local(path, data)


def _replace_local(path: str, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, then rename it over `path`."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
