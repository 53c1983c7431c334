"""Stage 1b: chunk changed sources on CPU workers, and parse each topic's qa-pairs.md into
questions; `read_and_chunk` is the task that runs stages 1a and 1b on one batch of sources.

Failures become error records on the row (the chunker's code, e.g. CHUNKING_FAILED for invalid
UTF-8), never exceptions, unless the failure policy is "abort".
Reads `payload`; writes `document`, `error_code`, `error_message` and drops `payload` (except the
topic facts).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from chunking import CHUNKING_FAILED, ChunkingError, chunk_source
from indexing import parse_questions
from jobs.progress import report_stats
from jobs.records import QUESTIONS, SOURCE, TOPIC, document_to_json, to_table
from jobs.stages.read import read_rows
from jobs.stats import ChunkStats, Clock, Histogram, RunStats, Slowest
from jobs.storage import Storage

QUESTIONS_FAILED = "QUESTIONS_FAILED"


class SourceFailed(RuntimeError):
    """A source failed and the failure policy says to stop the job."""


@dataclass(frozen=True)
class ChunkSettings:
    """What every chunk task needs: the strategy, its options, the tenant, the corpus paths."""

    strategy: str
    options: dict[str, Any] = field(default_factory=dict)
    tenant: str = "default"
    corpus_paths: frozenset[str] = frozenset()
    abort_on_failure: bool = False
    time_budget: float | None = None  # seconds per source (CHUNKING_TIMEOUT past it)


def read_and_chunk(
    batch: pa.Table, *, source: Storage, settings: ChunkSettings, collector=None
) -> pa.Table:
    """Read and chunk one batch of work rows; report both stages' counts to the collector."""
    rows = batch.to_pylist()
    read = read_rows(rows, source)
    chunked = chunk_rows(rows, settings)
    report_stats(collector, RunStats(read=read, chunk=chunked))
    return to_table(rows)


def chunk_rows(rows: list[dict[str, Any]], settings: ChunkSettings) -> ChunkStats:
    """Chunk every readable source row and parse every readable questions row (in place)."""
    clock = Clock()
    stats = ChunkStats()
    for row in rows:
        if row["error_code"] is None and row["kind"] == SOURCE:
            stats += _chunk_row(row, settings)
        elif row["error_code"] is None and row["kind"] == QUESTIONS:
            _questions_row(row)
        if row["kind"] != TOPIC:
            row["payload"] = None  # bytes are not needed downstream
        if row["error_code"] is not None and settings.abort_on_failure:
            raise SourceFailed(f"{row['path']}: {row['error_code']}: {row['error_message']}")
    return dataclasses.replace(stats, **clock.spent())


def _chunk_row(row: dict[str, Any], settings: ChunkSettings) -> ChunkStats:
    started = time.perf_counter()
    try:
        document = chunk_source(
            row["payload"],
            strategy=settings.strategy,
            document_id=row["path"],
            tenant_id=settings.tenant,
            document_path=row["path"],
            corpus_paths=settings.corpus_paths,
            time_budget=settings.time_budget,
            **settings.options,
        )
    except ChunkingError as exc:
        row.update(error_code=exc.code, error_message=exc.message)
        return ChunkStats(bytes=len(row["payload"]), failed=1)
    except Exception as exc:  # noqa: BLE001 - one bad source must not stop the others
        row.update(error_code=CHUNKING_FAILED, error_message=f"{type(exc).__name__}: {exc}")
        return ChunkStats(bytes=len(row["payload"]), failed=1)
    row["document"] = document_to_json(document)
    seconds = time.perf_counter() - started
    size, chunks = len(row["payload"]), len(document.chunks)
    return ChunkStats(
        sources=1,
        bytes=size,
        chunks=chunks,
        skipped_tail=int(bool(document.skipped_tail_tokens)),
        skipped_tokens=document.skipped_tail_tokens,
        tokens=Histogram.of(chunk.token_count for chunk in document.chunks),
        slowest=Slowest(((seconds, row["path"], size, chunks),)),
    )


def _questions_row(row: dict[str, Any]) -> None:
    try:
        text = row["payload"].decode("utf-8")
    except UnicodeDecodeError as exc:
        row.update(
            error_code=QUESTIONS_FAILED, error_message=f"invalid UTF-8 at byte offset {exc.start}"
        )
        return
    row["document"] = json.dumps(parse_questions(text), ensure_ascii=False)
