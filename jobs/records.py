"""The rows that flow through the Ray Data pipeline, and the JSON codec of a chunked document.

One row per work item, all with the same Arrow schema so blocks always concatenate:
- kind "source": one changed markdown source (read, chunked, embedded);
- kind "questions": a topic's qa-pairs.md (read, parsed, embedded as queries);
- kind "topic": a rebuilt topic's facts for its reduce (child topics, keywords file, and the
  unchanged sources it carries from the previous tables), as JSON in `payload`.
Unchanged sources of a rebuilt topic have no row: the reduce takes them from the previous tables
(those it cannot take get a row in a second pass, `jobs.work.recarry_rows`).
Documents travel as JSON text and vectors as raw little-endian float32 bytes: plain Arrow columns.
Each chunk's embedding text travels from the chunk task to the embedding actor as a string list
(the actor does not decode the document for it), and the chunk tasks' token ids as nested int32
lists.
A cache entry the embedding actor computed but did not write travels as JSON beside its vectors.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from chunking import Chunk, ChunkedDocument, Link
from embedding.cache import CacheEntry, CacheKey
from embedding.encoder import Encoded

SOURCE = "source"
QUESTIONS = "questions"
TOPIC = "topic"

ROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("kind", pa.string()),
        ("path", pa.string()),
        ("size", pa.int64()),  # the listing's size (batches are packed by it)
        ("previous_hash", pa.string()),  # sha256 of the source in the previous run, if any
        ("payload", pa.large_binary()),  # raw bytes once read; the topic facts for kind "topic"
        ("sha256", pa.string()),
        ("document", pa.large_string()),  # ChunkedDocument JSON; the question list for "questions"
        ("chunk_files", pa.list_(pa.string())),  # the chunk files its chunk task wrote, if any
        ("embedding_texts", pa.list_(pa.large_string())),  # each chunk's (`text_columns`)
        ("token_ids", pa.list_(pa.list_(pa.int32()))),  # each chunk's model ids (`chunk_tokens`)
        ("token_cut", pa.list_(pa.int32())),  # the chunks those ids were cut to the window
        ("error_code", pa.string()),
        ("error_message", pa.string()),
        ("vectors", pa.large_binary()),
        ("dim", pa.int32()),
        ("cache_entry", pa.large_string()),  # the cache entry still to write (`entry_to_json`)
    ]
)


def new_row(topic: str, kind: str, path: str, **values: Any) -> dict[str, Any]:
    """A pipeline row as the driver makes it: only the columns it sets (`to_table` fills the
    others with null, so the driver keeps a few keys per source, not every column)."""
    return {"topic": topic, "kind": kind, "path": path, **values}


def to_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Rows back into an Arrow table of the pipeline schema."""
    return pa.Table.from_pylist(rows, schema=ROW_SCHEMA)


def with_columns(batch: pa.Table, columns: dict[str, list[Any]]) -> pa.Table:
    """`batch` with the named columns of the pipeline schema replaced by these values."""
    for name, values in columns.items():
        field = ROW_SCHEMA.field(name)
        batch = batch.set_column(
            batch.schema.get_field_index(name), field, pa.array(values, type=field.type)
        )
    return batch


def document_to_json(document: ChunkedDocument) -> str:
    """A chunked document as JSON text (front-matter values JSON cannot hold become strings)."""
    data = {
        "document_id": document.document_id,
        "tenant_id": document.tenant_id,
        "source_version_id": document.source_version_id,
        "strategy": document.strategy,
        "strategy_key": document.strategy_key,
        "chunks": [chunk.to_dict() for chunk in document.chunks],
        "front_matter": document.front_matter,
        "is_chunked": document.is_chunked,
        "skipped_tail_tokens": document.skipped_tail_tokens,
        "tokenizer": document.tokenizer,
        "skipped_links": [vars(link) for link in document.skipped_links],
    }
    return json.dumps(data, ensure_ascii=False, default=str)


def document_from_json(text: str) -> ChunkedDocument:
    """The chunked document that `document_to_json` wrote."""
    data = json.loads(text)
    chunks = tuple(
        Chunk(
            **{
                **c,
                "headings_path": tuple(c["headings_path"]),
                "links": tuple(Link(**link) for link in c["links"]),
            }
        )
        for c in data.pop("chunks")
    )
    skipped = tuple(Link(**link) for link in data.pop("skipped_links"))
    return ChunkedDocument(chunks=chunks, skipped_links=skipped, **data)


def text_columns(documents: list[ChunkedDocument | None]) -> dict[str, list[Any]]:
    """The `embedding_texts` column values: each chunked document's chunks' embedding texts
    (None for rows without a document)."""
    return {
        "embedding_texts": [
            None if doc is None else [chunk.embedding_text for chunk in doc.chunks]
            for doc in documents
        ]
    }


def token_columns(encoded: list[Encoded | None]) -> dict[str, list[Any]]:
    """The `token_ids` and `token_cut` column values of each row's encoded chunks (None: none)."""
    return {
        "token_ids": [None if e is None else list(e.ids) for e in encoded],
        "token_cut": [
            None if e is None else [i for i, cut in enumerate(e.cut) if cut] for e in encoded
        ],
    }


def chunk_tokens(batch: pa.Table) -> Encoded:
    """Every chunk's ids and cut flag from `token_ids` and `token_cut`, row after row, of the
    rows that have ids: numpy slices of the column's values, never a Python list per token."""
    ids = batch.column("token_ids").combine_chunks()
    cuts = batch.column("token_cut").combine_chunks()
    if ids.null_count:
        cuts = cuts.filter(ids.is_valid())
        ids = ids.filter(ids.is_valid())
    rows = ids.flatten()  # every row's chunk id lists, in order
    values = rows.flatten().to_numpy()
    ends = np.cumsum(rows.value_lengths().to_numpy()).tolist()
    chunk_ids = [values[start:end] for start, end in pairwise([0, *ends])]
    first = np.concatenate([[0], np.cumsum(ids.value_lengths().to_numpy())]).astype(np.int64)
    flags = np.zeros(len(chunk_ids), dtype=bool)
    parents = pc.list_parent_indices(cuts).to_numpy()
    flags[first[parents] + cuts.flatten().to_numpy()] = True
    return Encoded(tuple(chunk_ids), tuple(flags.tolist()))


def vectors_from_bytes(data: bytes, dim: int) -> np.ndarray:
    """The (n, dim) float32 matrix of a `vectors` value (raw little-endian float32 bytes)."""
    return np.frombuffer(data, dtype="<f4").reshape(-1, dim).astype(np.float32)


def entry_to_json(
    key: tuple[str, str, str], text_hashes: Sequence[str], truncated: Sequence[int]
) -> str:
    """A cache entry's identity (strategy key, model key, source hash), chunk text hashes and
    truncated rows as JSON (not its vectors, which travel in the row's `vectors` column).
    orjson: a sixth of `json.dumps`' time."""
    return orjson.dumps(
        {"key": list(key), "text_hashes": list(text_hashes), "truncated": list(truncated)}
    ).decode()


def entry_from_json(text: str, vectors: np.ndarray) -> CacheEntry:
    """The cache entry `entry_to_json` wrote, with its vectors."""
    data = orjson.loads(text)
    return CacheEntry(
        CacheKey(*data["key"]), tuple(data["text_hashes"]), vectors, tuple(data["truncated"])
    )
