"""Stage 1b: chunk changed sources on CPU workers, and parse each topic's qa-pairs.md into
questions; `read_and_chunk` is the task that runs stages 1a, 1b and 1c on one batch of sources.

Failures become error records on the row (the chunker's code, e.g. CHUNKING_FAILED for invalid
UTF-8), never exceptions, unless the failure policy is "abort".
With the model's window encoder (`ChunkSettings.encoder`, built by the driver), the task also
tokenizes every chunk's embedding text for the model, in one call per batch, so the embedding
actors (on a GPU node, the CPU that feeds the GPU) do not (`embedding.encoder`).
Reads `topic`, `kind`, `path`, `payload`, `error_code`; writes `document`, `chunk_files`,
`token_ids`, `token_cut`, `error_code`, `error_message` and drops `payload` (except the topic
facts). Works on whole Arrow columns, as every stage does.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import tokenizers

from chunking import CHUNKING_FAILED, ChunkedDocument, ChunkingError, chunk_source
from embedding.encoder import Encoded, encode
from indexing import parse_questions
from jobs.progress import report_stats
from jobs.records import QUESTIONS, SOURCE, TOPIC, document_to_json, token_columns, with_columns
from jobs.stages.chunk_files import write_chunk_files
from jobs.stages.read import read_sources
from jobs.stats import ChunkStats, Clock, Histogram, RunStats, Slowest
from jobs.storage import Storage

QUESTIONS_FAILED = "QUESTIONS_FAILED"
Failure = tuple[str, str]  # a row's error code and message


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
    encoder: str | None = None  # the model's window encoder as JSON (`embedding.encoder`), if any


def read_and_chunk(
    batch: pa.Table,
    *,
    source: Storage,
    output: Storage,
    settings: ChunkSettings,
    collector=None,
) -> pa.Table:
    """Read and chunk one batch of work rows, and write the chunk files of new topics; report the
    stages' counts to the collector."""
    batch, read = read_sources(batch, source)
    batch, chunked = chunk_sources(batch, settings, output)
    report_stats(collector, RunStats(read=read, chunk=chunked))
    return batch


def chunk_sources(
    batch: pa.Table, settings: ChunkSettings, output: Storage
) -> tuple[pa.Table, ChunkStats]:
    """The batch with every readable source chunked and every readable questions row parsed
    (`document`), the chunks tokenized for the model when there is an encoder (`token_ids`,
    `token_cut`), the chunk files of new topics written (`chunk_files`,
    `jobs.stages.chunk_files`), and the bytes dropped but a topic row's facts. Works on whole
    columns."""
    clock = Clock()
    stats = ChunkStats()
    topics, kinds, paths, payloads, codes, messages = (
        batch.column(name).to_pylist()
        for name in ("topic", "kind", "path", "payload", "error_code", "error_message")
    )
    chunked: list[ChunkedDocument | None] = [None] * batch.num_rows
    questions: list[str | None] = [None] * batch.num_rows
    for i, (kind, path, data) in enumerate(zip(kinds, paths, payloads, strict=True)):
        failure = None
        if codes[i] is None and kind == SOURCE:
            chunked[i], failure, counts = _chunk_source(data, path, settings)
            stats += counts
        elif codes[i] is None and kind == QUESTIONS:
            questions[i], failure = _questions(data)
        if failure is not None:
            codes[i], messages[i] = failure
        if codes[i] is not None and settings.abort_on_failure:
            raise SourceFailed(f"{path}: {codes[i]}: {messages[i]}")
    encoded = _encoded(chunked, settings.encoder)
    written = write_chunk_files(topics, paths, chunked, output)
    columns = {
        "document": [
            document_to_json(doc) if doc is not None else text
            for doc, text in zip(chunked, questions, strict=True)
        ],
        "chunk_files": written,
        **token_columns(encoded),
        "error_code": codes,
        "error_message": messages,
        "payload": [d if k == TOPIC else None for k, d in zip(kinds, payloads, strict=True)],
    }
    files = sum(len(names) for names in written if names)
    tokenized = sum(len(e) for e in encoded if e is not None)
    counts = dataclasses.replace(stats, files=files, encoded=tokenized, **clock.spent())
    return with_columns(batch, columns), counts


def _encoded(documents: list[ChunkedDocument | None], encoder: str | None) -> list[Encoded | None]:
    """Each document's chunks tokenized for the model in one call for the whole batch; None for
    every row without an encoder, and for rows without a document."""
    if encoder is None:
        return [None] * len(documents)
    texts = [chunk.embedding_text for doc in documents if doc for chunk in doc.chunks]
    every = encode(_window_encoder(encoder), texts, parallel=False)  # a task holds one CPU
    encoded: list[Encoded | None] = []
    start = 0
    for doc in documents:
        end = start + len(doc.chunks) if doc else start
        encoded.append(Encoded(every.ids[start:end], every.cut[start:end]) if doc else None)
        start = end
    return encoded


@functools.lru_cache(maxsize=1)
def _window_encoder(encoder: str) -> tokenizers.Tokenizer:
    """The encoder of this JSON, parsed once per worker process (about 15 ms for MiniLM's)."""
    return tokenizers.Tokenizer.from_str(encoder)


def _chunk_source(
    data: bytes, path: str, settings: ChunkSettings
) -> tuple[ChunkedDocument | None, Failure | None, ChunkStats]:
    """One source's chunked document or its failure, and its counts."""
    started = time.perf_counter()
    try:
        document = chunk_source(
            data,
            strategy=settings.strategy,
            document_id=path,
            tenant_id=settings.tenant,
            document_path=path,
            corpus_paths=settings.corpus_paths,
            time_budget=settings.time_budget,
            **settings.options,
        )
    except ChunkingError as exc:
        return None, (exc.code, exc.message), ChunkStats(bytes=len(data), failed=1)
    except Exception as exc:  # noqa: BLE001 - one bad source must not stop the others
        failure = (CHUNKING_FAILED, f"{type(exc).__name__}: {exc}")
        return None, failure, ChunkStats(bytes=len(data), failed=1)
    seconds = time.perf_counter() - started
    size, chunks = len(data), len(document.chunks)
    return (
        document,
        None,
        ChunkStats(
            sources=1,
            bytes=size,
            chunks=chunks,
            skipped_tail=int(bool(document.skipped_tail_tokens)),
            skipped_tokens=document.skipped_tail_tokens,
            tokens=Histogram.of(chunk.token_count for chunk in document.chunks),
            slowest=Slowest(((seconds, path, size, chunks),)),
        ),
    )


def _questions(data: bytes) -> tuple[str | None, Failure | None]:
    """A qa-pairs.md's questions as a JSON list, or its failure."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, (QUESTIONS_FAILED, f"invalid UTF-8 at byte offset {exc.start}")
    return json.dumps(parse_questions(text), ensure_ascii=False), None
