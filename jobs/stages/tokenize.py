"""Stage 1d: every chunk's embedding input, made in the chunk task so that the embedding actors
(on a GPU node, the CPU that feeds the GPU) do not make it: its embedding text, which the actor
would otherwise decode from the document's JSON, and its token ids for the model
(`embedding.encoder`).

The driver builds the model's window encoder from its small files and passes it as JSON
(`ChunkSettings.encoder`); without one (files the driver could not read) this stage sends the
texts only, and the actors tokenize. When the chunker counted tokens with the same tokenizer and
it splits at whitespace (MiniLM's, `configs/local.yaml`), a text's ids are those of its words,
which the counting already tokenized (`HFCounter.ids`), framed as the encoder would
(`embedding.encoder.Window`): the encoder's own ids, at a fifth of its time or less (FastAPI's
chunk texts: 0.8 s against 5.0 s). Otherwise, one encoder call per batch, on the task's own
thread.
Reads the chunked documents of `jobs.stages.chunk`; writes `embedding_texts`, `token_ids` and
`token_cut`.
"""

from __future__ import annotations

import functools
import json

import pyarrow as pa
import tokenizers

from chunking import ChunkedDocument, TokenCounter
from embedding.encoder import Encoded, Window, encode, encoder_window
from jobs.records import text_columns, token_columns, with_columns
from jobs.stats import Clock, TokenizeStats


def tokenize_sources(
    batch: pa.Table,
    documents: list[ChunkedDocument | None],
    encoder: str | None,
    counter: TokenCounter | None = None,
) -> tuple[pa.Table, TokenizeStats]:
    """The batch with each chunked source's embedding texts and token ids (`documents` in row
    order; null for rows without one), and the counts; without an encoder, the texts only.
    `counter` is the one the chunker counted with."""
    texts_by_row = text_columns(documents)
    if encoder is None:
        return with_columns(batch, texts_by_row), TokenizeStats()
    clock = Clock()
    texts = [text for row in texts_by_row["embedding_texts"] if row is not None for text in row]
    window = _counted_window(counter, encoder) if counter is not None else None
    if window is not None:
        every = window.frame(counter.ids(texts))
    else:
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
    return with_columns(batch, {**texts_by_row, **token_columns(encoded)}), stats


@functools.lru_cache(maxsize=1)
def _window_encoder(encoder: str) -> tokenizers.Tokenizer:
    """The encoder of this JSON, parsed once per worker process (about 15 ms for MiniLM's)."""
    return tokenizers.Tokenizer.from_str(encoder)


@functools.lru_cache(maxsize=4)
def _counted_window(counter: TokenCounter, encoder: str) -> Window | None:
    """The encoder's `Window` when `counter` gives the encoder's ids without it: an additive
    counter (`chunking.tokens.splits_at_whitespace`) whose tokenizer is the encoder's, window
    and padding aside; else None. Decided once per worker process."""
    tokenizer = getattr(counter, "tokenizer", None)
    if not counter.additive or tokenizer is None:
        return None
    plain = tokenizers.Tokenizer.from_str(encoder)
    plain.no_truncation()
    plain.no_padding()
    if plain.to_str() != tokenizer.to_str():
        return None
    return encoder_window(json.loads(encoder))
