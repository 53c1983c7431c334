"""Parquet-ready chunk and document tables (seed 001 `document_chunks` and `documents`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from chunking.record import Chunk, ChunkedDocument, Link

LINK_TYPE = pa.struct(
    [
        ("url", pa.string()),
        ("text", pa.string()),
        ("link_type", pa.string()),
        ("target_document", pa.string()),
    ]
)


# Chunk fields stored in a column of their own, unchanged (headings_path, links and extras are
# converted: list, list of structs, JSON text).
PLAIN_CHUNK_FIELDS = (
    "chunk_id",
    "ordinal",
    "title",
    "header_path",
    "start_line",
    "end_line",
    "token_count",
    "is_code",
    "content_type",
    "text",
    "chunk_path",
    "context",
)


def chunk_from_row(row: dict[str, Any]) -> Chunk:
    """The Chunk a row of the chunk table was made from (the inverse of `chunk_table`)."""
    return Chunk(
        **{k: row[k] for k in PLAIN_CHUNK_FIELDS},
        headings_path=tuple(row["headings_path"]),
        links=tuple(Link(**link) for link in row["links"]),
        extras=json.loads(row["extras"]),
    )


def chunk_table_schema(dim: int) -> pa.Schema:
    """Schema of the chunk table: every Chunk field, its document, index facts, model and embedding.

    `promotion_level` is the document's (seed 001: chunks inherit it); `text` is seed 001's
    `content`; `embedding` is a fixed-size list of `dim` float32;
    `prompt_hashes` are unsigned 64-bit SimHashes.
    """
    return pa.schema(
        [
            ("topic", pa.string()),
            ("source", pa.string()),
            ("document_id", pa.string()),
            ("tenant_id", pa.string()),
            ("source_version_id", pa.string()),
            ("promotion_level", pa.string()),
            ("chunk_id", pa.string()),
            ("ordinal", pa.int32()),
            ("title", pa.string()),
            ("headings_path", pa.list_(pa.string())),
            ("header_path", pa.string()),
            ("start_line", pa.int32()),
            ("end_line", pa.int32()),
            ("token_count", pa.int32()),
            ("is_code", pa.bool_()),
            ("content_type", pa.string()),
            ("text", pa.string()),
            ("chunk_path", pa.string()),
            ("context", pa.string()),
            ("links", pa.list_(LINK_TYPE)),
            ("extras", pa.string()),
            ("href", pa.string()),
            ("similarity_conceptual", pa.float64()),
            ("similarity_technical", pa.float64()),
            ("prompt_hashes", pa.list_(pa.uint64())),
            ("model", pa.string()),
            ("strategy", pa.string()),
            ("embedding", pa.list_(pa.float32(), dim)),
        ]
    )


def document_table_schema() -> pa.Schema:
    """Schema of the documents table: one row per source, chunked or failed.

    With the chunk table's rows it holds every fact of a `ChunkedDocument`: `front_matter` is the
    document's front matter as JSON text (sorted keys; values JSON cannot hold become strings),
    null when the row describes no chunked version (a source that failed and never chunked).
    """
    return pa.schema(
        [
            ("topic", pa.string()),
            ("source", pa.string()),
            ("document_id", pa.string()),
            ("tenant_id", pa.string()),
            ("is_chunked", pa.bool_()),
            ("chunk_count", pa.int32()),
            ("source_version_id", pa.string()),
            ("promotion_level", pa.string()),
            ("strategy", pa.string()),
            ("status", pa.string()),
            ("error_code", pa.string()),
            ("error", pa.string()),
            ("front_matter", pa.string()),
            ("skipped_tail_tokens", pa.int32()),
            ("tokenizer", pa.string()),
        ]
    )


def front_matter_json(document: ChunkedDocument) -> str:
    """A document's front matter as the documents table stores it."""
    return json.dumps(document.front_matter, sort_keys=True, ensure_ascii=False, default=str)


@dataclass(frozen=True)
class SourceRows:
    """What one chunked source contributes to the chunk table besides its chunk records."""

    path: str
    document: ChunkedDocument
    vectors: np.ndarray
    hrefs: Sequence[str]
    similarity_conceptual: Sequence[float]
    similarity_technical: Sequence[float] | None
    prompt_hashes: Sequence[Sequence[int]]


def chunk_table(
    topic: str, model: str, strategy: str, sources: Sequence[SourceRows], dim: int
) -> pa.Table:
    """The chunk table of one topic, rows in source then chunk order (`dim` 0 when it has none)."""
    schema = chunk_table_schema(dim)
    rows = []
    for src in sources:
        doc = src.document
        for i, chunk in enumerate(doc.chunks):
            record = chunk.to_dict()
            rows.append(
                {
                    "topic": topic,
                    "source": src.path,
                    "document_id": doc.document_id,
                    "tenant_id": doc.tenant_id,
                    "source_version_id": doc.source_version_id,
                    "promotion_level": doc.promotion_level,
                    **{k: record[k] for k in PLAIN_CHUNK_FIELDS},
                    "headings_path": record["headings_path"],
                    "links": record["links"],
                    "extras": json.dumps(record["extras"], sort_keys=True, ensure_ascii=False),
                    "href": src.hrefs[i],
                    "similarity_conceptual": src.similarity_conceptual[i],
                    "similarity_technical": (
                        None if src.similarity_technical is None else src.similarity_technical[i]
                    ),
                    "prompt_hashes": list(src.prompt_hashes[i]),
                    "model": model,
                    "strategy": strategy,
                }
            )
    if not rows:
        return schema.empty_table()
    table = pa.Table.from_pylist(rows, schema=schema.remove(schema.get_field_index("embedding")))
    flat = [np.asarray(src.vectors, dtype=np.float32).reshape(-1) for src in sources]
    values = pa.array(np.concatenate(flat), type=pa.float32())
    embedding = pa.FixedSizeListArray.from_arrays(values, dim)
    return table.append_column(schema.field("embedding"), embedding)


@dataclass(frozen=True)
class DocumentRow:
    """One row of the documents table."""

    topic: str
    source: str
    document_id: str
    is_chunked: bool
    chunk_count: int
    source_version_id: str | None
    strategy: str
    status: str  # "ok" | "failed"
    error_code: str | None = None
    error: str | None = None
    tenant_id: str | None = None
    front_matter: str | None = None
    skipped_tail_tokens: int | None = None
    tokenizer: str | None = None
    promotion_level: str | None = None


@dataclass(frozen=True, eq=False)
class RetainedRows:
    """A failed source's rows from the previous run's tables, kept while it fails.

    `chunks`: its chunk-table rows (chunk table schema); `document`: its documents-table row, which
    is kept with status "failed" and this run's error (its other facts describe the kept chunks).
    """

    chunks: pa.Table
    document: dict[str, Any]


def combined_chunk_table(parts: Sequence[pa.Table], dim: int) -> pa.Table:
    """One chunk table from per-source pieces (built or retained), in the given order."""
    schema = chunk_table_schema(dim)
    tables = [part.select(schema.names).cast(schema) for part in parts]
    return pa.concat_tables(tables).combine_chunks() if tables else schema.empty_table()


def document_table(rows: Sequence[DocumentRow]) -> pa.Table:
    """The documents table of one topic."""
    schema = document_table_schema()
    return pa.Table.from_pylist(
        [{f.name: getattr(r, f.name) for f in schema} for r in rows], schema=schema
    )
