"""Stage 1d: tokenize every chunk's embedding text for the model, in the chunk task, so that the
embedding actors (on a GPU node, the CPU that feeds the GPU) do not (`embedding.encoder`).

The driver builds the model's window encoder from its small files and passes it as JSON
(`ChunkSettings.encoder`); without one (files the driver could not read) this stage does nothing
and the actors tokenize. One encoder call per batch, on the task's own thread.
Reads the chunked documents of `jobs.stages.chunk`; writes `token_ids` and `token_cut`.
"""

from __future__ import annotations

import functools

import pyarrow as pa
import tokenizers

from chunking import ChunkedDocument
from embedding.encoder import Encoded, encode
from jobs.records import token_columns, with_columns
from jobs.stats import Clock, TokenizeStats


def tokenize_sources(
    batch: pa.Table, documents: list[ChunkedDocument | None], encoder: str | None
) -> tuple[pa.Table, TokenizeStats]:
    """The batch with each chunked source's token ids (`documents` in row order; null for rows
    without one), and the counts; the batch unchanged without an encoder."""
    if encoder is None:
        return batch, TokenizeStats()
    clock = Clock()
    texts = [chunk.embedding_text for doc in documents if doc is not None for chunk in doc.chunks]
    every = encode(_window_encoder(encoder), texts, parallel=False)  # a task holds one CPU
    encoded: list[Encoded | None] = []
    start = 0
    for doc in documents:
        if doc is None:
            encoded.append(None)
            continue
        end = start + len(doc.chunks)
        encoded.append(Encoded(every.ids[start:end], every.cut[start:end]))
        start = end
    tokens = sum(len(ids) for ids in every.ids)
    stats = TokenizeStats(chunks=len(texts), tokens=tokens, **clock.spent())
    return with_columns(batch, token_columns(encoded)), stats


@functools.lru_cache(maxsize=1)
def _window_encoder(encoder: str) -> tokenizers.Tokenizer:
    """The encoder of this JSON, parsed once per worker process (about 15 ms for MiniLM's)."""
    return tokenizers.Tokenizer.from_str(encoder)
