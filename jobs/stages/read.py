"""Stage 1a: read the bytes of changed sources and qa-pairs.md through fsspec, and hash the sources.

A batch is read with one `cat` of many paths (concurrent GETs on object stores). An unreadable file
becomes an error record (READ_FAILED) for its own row; the rest of the batch goes on.
Reads `kind`, `path`; writes `payload`, `sha256`, `error_code`, `error_message`.
"""

from __future__ import annotations

import hashlib

import pyarrow as pa

from jobs.records import SOURCE, TOPIC, with_columns
from jobs.stats import Clock, ReadStats
from jobs.storage import Storage

READ_FAILED = "READ_FAILED"


def read_sources(batch: pa.Table, source: Storage) -> tuple[pa.Table, ReadStats]:
    """The batch with `payload` and `sha256` filled for every row that names a file (a topic row
    keeps its facts), and the files and bytes counted. Works on whole columns (no row dicts)."""
    clock = Clock()
    kinds, paths, sizes = (batch.column(name).to_pylist() for name in ("kind", "path", "size"))
    columns = {
        name: batch.column(name).to_pylist()
        for name in ("payload", "sha256", "error_code", "error_message")
    }
    wanted = [i for i, kind in enumerate(kinds) if kind != TOPIC]
    found = source.read_many([paths[i] for i in wanted])
    total = failed = failed_sources = failed_source_bytes = 0
    for i in wanted:
        data = found.get(paths[i])
        if isinstance(data, bytes):
            columns["payload"][i] = data
            columns["sha256"][i] = hashlib.sha256(data).hexdigest()
            total += len(data)
        else:
            reason = data if data is not None else FileNotFoundError(paths[i])
            columns["error_code"][i] = READ_FAILED
            columns["error_message"][i] = f"cannot read {source.uri(paths[i])}: {reason}"
            failed += 1
            if kinds[i] == SOURCE:
                failed_sources += 1
                failed_source_bytes += sizes[i] or 0
    stats = ReadStats(
        files=len(wanted) - failed,
        bytes=total,
        failed=failed,
        failed_sources=failed_sources,
        failed_source_bytes=failed_source_bytes,
        **clock.spent(),
    )
    return with_columns(batch, columns), stats
