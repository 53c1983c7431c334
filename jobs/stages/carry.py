"""Stage 1: carry unchanged sources of rebuilt topics from the previous run's table shards.

A topic is rebuilt when one of its sources changed; its other sources are unchanged (same content
hash, strategy and model) and are neither read, chunked nor embedded: their chunked documents and
vectors come back from the topic's previous chunk and documents tables. A source that cannot be
carried (shards missing or unreadable, rows that do not fit) drops its `carried` mark, so the next
stages read, chunk and embed it as usual.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from chunking import ChunkedDocument
from jobs.previous import Expected, PreviousTables, carried_document, read_previous
from jobs.records import document_to_json, to_table, vectors_to_bytes
from jobs.storage import Storage

log = logging.getLogger("mdindex.build")


@dataclass(frozen=True)
class CarrySettings:
    """Where the previous shards are, and what their rows must have been made with."""

    output: Storage
    expected: Expected


def carry_batch(batch: pa.Table, *, settings: CarrySettings) -> pa.Table:
    """Fill `document`, `vectors` and `dim` of every carried row, or drop its mark."""
    rows = batch.to_pylist()
    shards: dict[str, PreviousTables | None] = {}
    for row in rows:
        if not row["carried"]:
            continue
        started = time.perf_counter()
        topic = row["topic"]
        if topic not in shards:
            shards[topic] = read_previous(settings.output, topic)
        found = _carried(shards[topic], row, settings.expected)
        if found:
            document, vectors = found
            row.update(
                document=document_to_json(document),
                vectors=vectors_to_bytes(vectors),
                dim=vectors.shape[1],
                sha256=document.source_version_id,
            )
        else:
            log.info("%s: not in the previous tables as it is now; reading it", row["path"])
            row["carried"] = False
        row["carry_s"] = time.perf_counter() - started
    return to_table(rows)


def _carried(
    tables: PreviousTables | None, row: dict, expected: Expected
) -> tuple[ChunkedDocument, np.ndarray] | None:
    """The row's document and vectors from the previous tables, or None (never an exception:
    rows that do not parse make the source be read and chunked again)."""
    if tables is None:
        return None
    try:
        return carried_document(tables, row["path"], row["previous_hash"], expected)
    except (KeyError, TypeError, ValueError) as exc:
        log.warning("%s: previous rows unusable (%s)", row["path"], exc)
        return None
