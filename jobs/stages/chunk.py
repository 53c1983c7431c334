"""Stage 3: chunk sources (not carried ones) on CPU workers, and parse each topic's qa-pairs.md
into questions.

Failures become error records on the row (the chunker's code, e.g. CHUNKING_FAILED for invalid
UTF-8), never exceptions, unless the failure policy is "abort".
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from chunking import CHUNKING_FAILED, ChunkingError, chunk_source
from indexing import parse_questions
from jobs.records import QUESTIONS, SOURCE, TOPIC, document_to_json, to_table

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


def chunk_batch(batch: pa.Table, *, settings: ChunkSettings) -> pa.Table:
    """Chunk every readable source row and parse every readable questions row of the batch."""
    rows = batch.to_pylist()
    for row in rows:
        if row["error_code"] is None and row["kind"] == SOURCE and not row["carried"]:
            _chunk_row(row, settings)
        elif row["error_code"] is None and row["kind"] == QUESTIONS:
            _questions_row(row)
        if row["kind"] != TOPIC:
            row["payload"] = None  # bytes are not needed downstream
        if row["error_code"] is not None and settings.abort_on_failure:
            raise SourceFailed(f"{row['path']}: {row['error_code']}: {row['error_message']}")
    return to_table(rows)


def _chunk_row(row: dict[str, Any], settings: ChunkSettings) -> None:
    started = time.perf_counter()
    try:
        document = chunk_source(
            row["payload"],
            strategy=settings.strategy,
            document_id=row["path"],
            tenant_id=settings.tenant,
            document_path=row["path"],
            corpus_paths=settings.corpus_paths,
            **settings.options,
        )
    except ChunkingError as exc:
        row.update(error_code=exc.code, error_message=exc.message)
    except Exception as exc:  # noqa: BLE001 - one bad source must not stop the others
        row.update(error_code=CHUNKING_FAILED, error_message=f"{type(exc).__name__}: {exc}")
    else:
        row["document"] = document_to_json(document)
    row["chunk_s"] = time.perf_counter() - started


def _questions_row(row: dict[str, Any]) -> None:
    try:
        text = row["payload"].decode("utf-8")
    except UnicodeDecodeError as exc:
        row.update(
            error_code=QUESTIONS_FAILED, error_message=f"invalid UTF-8 at byte offset {exc.start}"
        )
        return
    row["document"] = json.dumps(parse_questions(text), ensure_ascii=False)
