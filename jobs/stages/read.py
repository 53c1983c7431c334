"""Stage 1a: read the bytes of changed sources and qa-pairs.md through fsspec, and hash the sources.

A batch is read with one `cat` of many paths (concurrent GETs on object stores). An unreadable file
becomes an error record (READ_FAILED) for its own row; the rest of the batch goes on.
Reads `path`; writes `payload`, `sha256`, `error_code`, `error_message`.
"""

from __future__ import annotations

import hashlib
from typing import Any

from jobs.records import TOPIC
from jobs.stats import Clock, ReadStats
from jobs.storage import Storage

READ_FAILED = "READ_FAILED"


def read_rows(rows: list[dict[str, Any]], source: Storage) -> ReadStats:
    """Fill `payload` and `sha256` of every row that names a file (in place); count the bytes."""
    clock = Clock()
    wanted = [row for row in rows if row["kind"] != TOPIC]
    found = source.read_many([row["path"] for row in wanted])
    total = failed = 0
    for row in wanted:
        data = found.get(row["path"])
        if isinstance(data, bytes):
            row.update(payload=data, sha256=hashlib.sha256(data).hexdigest())
            total += len(data)
        else:
            reason = data if data is not None else FileNotFoundError(row["path"])
            row.update(
                error_code=READ_FAILED,
                error_message=f"cannot read {source.uri(row['path'])}: {reason}",
            )
            failed += 1
    return ReadStats(
        files=len(wanted) - failed,
        bytes=total,
        failed=failed,
        **clock.spent(),
    )
