"""Stage 2: read the bytes of sources (not carried ones) and qa-pairs.md through fsspec, and hash
the sources.

A batch is read with one `cat` of many paths (concurrent GETs on object stores). An unreadable file
becomes an error record (READ_FAILED) for its own row; the rest of the batch goes on.
"""

from __future__ import annotations

import hashlib
import time

import pyarrow as pa

from jobs.records import TOPIC, to_table
from jobs.storage import Storage

READ_FAILED = "READ_FAILED"


def read_batch(batch: pa.Table, *, source: Storage) -> pa.Table:
    """Fill `payload`, `bytes_read` and (for sources) `sha256` of every row that names a file."""
    started = time.perf_counter()
    rows = batch.to_pylist()
    wanted = [row["path"] for row in rows if _needs_bytes(row)]
    found = source.read_many(wanted)
    for row in rows:
        if not _needs_bytes(row):
            continue
        data = found.get(row["path"])
        if isinstance(data, bytes):
            row.update(payload=data, bytes_read=len(data), sha256=hashlib.sha256(data).hexdigest())
        else:
            reason = data if data is not None else FileNotFoundError(row["path"])
            row.update(
                error_code=READ_FAILED,
                error_message=f"cannot read {source.uri(row['path'])}: {reason}",
            )
    elapsed = (time.perf_counter() - started) / max(1, len(wanted))
    for row in rows:
        if _needs_bytes(row):
            row["read_s"] = elapsed
    return to_table(rows)


def _needs_bytes(row: dict) -> bool:
    """Sources and qa-pairs.md, except sources carried from the previous run."""
    return row["kind"] != TOPIC and not row["carried"]
