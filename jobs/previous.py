"""A topic's table shards as the previous run wrote them (`_index/chunks/`, `_index/documents/`).

They are where an unchanged source of a rebuilt topic is carried from (its chunked document and
vectors, exactly as chunking and embedding made them) and where a failed source's rows are kept
from. Anything missing, unreadable or made with other settings reads as "not there": the caller
then reads and chunks the source (or keeps no rows), it never fails the job.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from chunking import Chunk, ChunkedDocument
from chunking.links import resolve_again
from indexing import (
    chunk_table_path,
    chunk_table_schema,
    document_table_path,
    document_table_schema,
)
from indexing.sources import DEFAULT_GLOBS
from indexing.tables import RetainedRows, chunk_from_row
from jobs.storage import Storage

log = logging.getLogger("mdindex.build")


@dataclass(frozen=True, eq=False)
class PreviousTables:
    """One topic's previous chunk and documents tables."""

    chunks: pa.Table
    documents: pa.Table

    def chunk_rows(self, path: str) -> pa.Table:
        """The chunk-table rows of one source, in chunk order (none for a source that made no
        chunk: an empty one; typed indices, as pyarrow cannot take an untyped empty list)."""
        return self.chunks.take(pa.array(self._chunk_indices.get(path, []), type=pa.int64()))

    def chunk_records(self, path: str) -> tuple[list[dict[str, Any]], np.ndarray]:
        """The chunk-table rows of one source as dicts without the embedding, in chunk order, and
        their embeddings as one (n, dim) matrix. The table is converted once for all sources: a
        `take` per source cost a tenth of a millisecond each, most of a large topic's carry."""
        indices = self._chunk_indices.get(path, [])
        return [self._records[i] for i in indices], self._vectors[indices]

    @cached_property
    def _records(self) -> list[dict[str, Any]]:
        return self.chunks.drop_columns(["embedding"]).to_pylist()

    @cached_property
    def _vectors(self) -> np.ndarray:
        dim = self.chunks.schema.field("embedding").type.list_size
        flat = self.chunks.column("embedding").combine_chunks().flatten()
        return np.asarray(flat, dtype=np.float32).reshape(self.chunks.num_rows, dim)

    def document_row(self, path: str) -> dict[str, Any] | None:
        """The documents-table row of one source, if it has exactly one."""
        rows = self._document_rows.get(path, [])
        return rows[0] if len(rows) == 1 else None

    @cached_property
    def _chunk_indices(self) -> dict[str, list[int]]:
        """Row indices of each source's chunks (one pass over the table, not one per source)."""
        indices: dict[str, list[int]] = {}
        for index, source in enumerate(self.chunks.column("source").to_pylist()):
            indices.setdefault(source, []).append(index)
        return indices

    @cached_property
    def _document_rows(self) -> dict[str, list[dict[str, Any]]]:
        rows: dict[str, list[dict[str, Any]]] = {}
        for row in self.documents.to_pylist():
            rows.setdefault(row["source"], []).append(row)
        return rows


@dataclass(frozen=True)
class Expected:
    """What carried rows must have been made with: this run's model, strategy and corpus (its
    sources, and the file-name patterns that make a path one)."""

    model: str
    strategy: str  # the strategy name, e.g. "semantic"
    strategy_key: str
    corpus_paths: AbstractSet[str]  # a `jobs.path_set.PathSet` in builds
    source_globs: tuple[str, ...] = DEFAULT_GLOBS


def read_previous(output: Storage, topic: str) -> PreviousTables | None:
    """The topic's previous shards; None when either is missing, unreadable or of another layout."""
    try:
        chunks = output.read_optional(chunk_table_path(topic))
        documents = output.read_optional(document_table_path(topic))
        if chunks is None or documents is None:
            return None
        tables = PreviousTables(
            chunks=pq.read_table(pa.BufferReader(chunks)),
            documents=pq.read_table(pa.BufferReader(documents)),
        )
    except (OSError, pa.ArrowException) as exc:
        log.warning("topic %r: previous tables unreadable (%s); reading its sources", topic, exc)
        return None
    if not set(chunk_table_schema(0).names) <= set(tables.chunks.column_names) or not set(
        document_table_schema().names
    ) <= set(tables.documents.column_names):
        return None
    return tables


def carried_document(
    tables: PreviousTables, path: str, sha256: str, expected: Expected
) -> tuple[ChunkedDocument, np.ndarray] | None:
    """An unchanged source's chunked document and vectors rebuilt from the previous tables.

    None when they cannot stand in for chunking it now: no "ok" row for this content hash, rows of
    another model or strategy, or chunks missing. Its links are resolved in this run's corpus.
    """
    row = tables.document_row(path)
    if (
        row is None
        or row["status"] != "ok"
        or row["source_version_id"] != sha256
        or row["strategy"] != expected.strategy_key
        or row["front_matter"] is None
    ):
        return None
    records, vectors = tables.chunk_records(path)
    if [r["ordinal"] for r in records] != list(range(row["chunk_count"])) or any(
        r["model"] != expected.model or r["strategy"] != expected.strategy_key for r in records
    ):
        return None
    chunks = tuple(_resolved_again(chunk_from_row(r), path, expected) for r in records)
    if vectors.shape[1] == 0 and chunks:  # a topic of sources without chunks has no width
        return None
    document = ChunkedDocument(
        document_id=row["document_id"],
        tenant_id=row["tenant_id"],
        source_version_id=row["source_version_id"],
        strategy=expected.strategy,
        strategy_key=row["strategy"],
        chunks=chunks,
        front_matter=json.loads(row["front_matter"]),
        is_chunked=row["is_chunked"],
        skipped_tail_tokens=row["skipped_tail_tokens"],
        tokenizer=row["tokenizer"],
    )
    return document, vectors


def retained_rows(
    tables: PreviousTables | None, path: str, expected: Expected
) -> RetainedRows | None:
    """A failed source's previous rows to keep (none without a previously chunked version)."""
    row = tables.document_row(path) if tables is not None else None
    if row is None or row["front_matter"] is None:
        return None
    rows = tables.chunk_rows(path)
    same = pc.and_(
        pc.equal(rows["model"], expected.model), pc.equal(rows["strategy"], expected.strategy_key)
    )
    return RetainedRows(chunks=rows.filter(same), document=row)


def _resolved_again(chunk: Chunk, path: str, expected: Expected) -> Chunk:
    """The chunk with its links resolved in this run's corpus, as chunking the source now would:
    a link's target may have become a source, or stopped being one, since the chunk was made."""
    links = tuple(resolve_again(link, path, expected.corpus_paths) for link in chunk.links)
    return chunk if links == chunk.links else replace(chunk, links=links)
