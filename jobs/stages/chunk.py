"""Stage 1b: chunk changed sources on CPU workers, and parse each topic's qa-pairs.md into
questions; `read_and_chunk` is the task that runs stages 1a to 1d on one batch of sources.

Failures become error records on the row (the chunker's code, e.g. CHUNKING_FAILED for invalid
UTF-8; CHUNKER_ERROR for an exception the chunker did not raise on purpose), never exceptions,
unless the failure policy is "abort".
Reads `topic`, `kind`, `path`, `payload`, `error_code`; writes `document`, `chunk_files`,
`error_code`, `error_message` and drops `payload` (except the topic facts). Works on whole Arrow
columns, as every stage does.
"""

from __future__ import annotations

import json
import time
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from chunking import ChunkedDocument, ChunkingError, chunk_source, token_counter
from chunking.normalize import decode
from indexing import parse_questions
from indexing.questions import QUESTIONS_FAILED
from indexing.terminal import printable
from jobs.gc_pause import gc_paused
from jobs.known import KnownFailure
from jobs.landmarks import Landmark, Plugin, check_landmarks
from jobs.progress import report_stats, rows_key
from jobs.records import QUESTIONS, SOURCE, TOPIC, document_to_json, with_columns
from jobs.stages.chunk_files import write_chunk_files
from jobs.stages.read import read_sources
from jobs.stages.tokenize import tokenize_sources
from jobs.stats import ChunkStats, Clock, Histogram, Paths, RunStats, Slowest
from jobs.storage import Storage

# An exception other than the chunker's own ChunkingError: a bug, or the machine (memory). Unlike
# the chunker's deterministic codes, it is retried on every run (`jobs.plan`).
CHUNKER_ERROR = "CHUNKER_ERROR"
Failure = tuple[str, str]  # a row's error code and message


class SourceFailed(KnownFailure, RuntimeError):
    """A source failed and the failure policy says to stop the job."""


@dataclass(frozen=True)
class ChunkSettings:
    """What every chunk task needs: the strategy, its options, the tenant, the corpus paths,
    whether drafts are chunked (`chunking.chunk_source`'s `include_drafts`)."""

    strategy: str
    options: dict[str, Any] = field(default_factory=dict)
    tenant: str = "default"
    corpus_paths: AbstractSet[str] = frozenset()  # a `jobs.path_set.PathSet` in builds
    abort_on_failure: bool = False
    time_budget: float | None = None  # seconds per source (CHUNKING_TIMEOUT past it)
    encoder: str | None = None  # the model's window encoder as JSON (`embedding.encoder`), if any
    include_drafts: bool = False


def read_and_chunk(
    batch: pa.Table,
    *,
    source: Storage,
    output: Storage,
    settings: ChunkSettings,
    landmarks: tuple[Landmark | Plugin, ...] = (),
    collector=None,
) -> pa.Table:
    """Read and chunk one batch of work rows, write the chunk files of new topics and tokenize the
    chunks for the model; report the stages' counts to the collector. Python's collector is
    paused meanwhile (`jobs.gc_pause`). First, the local folders must be the driver's
    and its third-party classes importable here (`jobs.landmarks`)."""
    check_landmarks(landmarks)
    with gc_paused():
        batch, read = read_sources(batch, source)
        batch, chunked, documents = chunk_sources(batch, settings, output)
        counter = token_counter(settings.strategy, **settings.options)
        batch, tokenized = tokenize_sources(batch, documents, settings.encoder, counter)
    stats = RunStats(read=read, chunk=chunked, tokenize=tokenized)
    report_stats(collector, stats, rows_key("chunk", batch))
    return batch


def chunk_sources(
    batch: pa.Table, settings: ChunkSettings, output: Storage
) -> tuple[pa.Table, ChunkStats, list[ChunkedDocument | None]]:
    """The batch with every readable source chunked and every readable questions row parsed
    (`document`), the chunk files of new topics written (`chunk_files`,
    `jobs.stages.chunk_files`), and the bytes dropped but a topic row's facts; the counts; and
    the chunked documents in row order (None for the other rows). Works on whole columns."""
    clock = Clock()
    timed: list[tuple[float, str, int, int]] = []  # (seconds, path, bytes, chunks) per source
    failed = failed_bytes = 0
    topics, kinds, paths, payloads, codes, messages = (
        batch.column(name).to_pylist()
        for name in ("topic", "kind", "path", "payload", "error_code", "error_message")
    )
    chunked: list[ChunkedDocument | None] = [None] * batch.num_rows
    questions: list[str | None] = [None] * batch.num_rows
    for i, (kind, path, data) in enumerate(zip(kinds, paths, payloads, strict=True)):
        failure = None
        if codes[i] is None and kind == SOURCE:
            chunked[i], failure, seconds = chunk_one_source(data, path, settings)
            if chunked[i] is None:
                failed, failed_bytes = failed + 1, failed_bytes + len(data)
            else:
                timed.append((seconds, path, len(data), len(chunked[i].chunks)))
        elif codes[i] is None and kind == QUESTIONS:
            questions[i], failure = questions_json(data)
        if failure is not None:
            codes[i], messages[i] = failure
        if codes[i] is not None and settings.abort_on_failure:
            # one line: Ray's error holds it as a line of its own (`jobs.build_cli`)
            raise SourceFailed(printable(f"{path}: {codes[i]}: {messages[i]}"))
    written = write_chunk_files(topics, paths, chunked, output)
    columns = {
        "document": [
            document_to_json(doc) if doc is not None else text
            for doc, text in zip(chunked, questions, strict=True)
        ],
        "chunk_files": written,
        "error_code": codes,
        "error_message": messages,
        "payload": [d if k == TOPIC else None for k, d in zip(kinds, payloads, strict=True)],
    }
    documents = [doc for doc in chunked if doc is not None]
    stats = ChunkStats(
        sources=len(documents),
        bytes=sum(size for _, _, size, _ in timed) + failed_bytes,
        chunks=sum(chunks for _, _, _, chunks in timed),
        failed=failed,
        skipped_tail=sum(1 for doc in documents if doc.skipped_tail_tokens),
        skipped_tokens=sum(doc.skipped_tail_tokens for doc in documents),
        skipped_drafts=0 if settings.include_drafts else sum(doc.is_draft for doc in documents),
        empty=Paths.of(
            path
            for path, doc in zip(paths, chunked, strict=True)
            if doc is not None and not doc.chunks and not doc.is_draft
        ),
        files=sum(len(names) for names in written if names),
        tokens=Histogram.of(chunk.token_count for doc in documents for chunk in doc.chunks),
        slowest=Slowest.of(timed),
        **clock.spent(),
    )
    return with_columns(batch, columns), stats, chunked


def chunk_one_source(
    data: bytes, path: str, settings: ChunkSettings
) -> tuple[ChunkedDocument | None, Failure | None, float]:
    """One source's chunked document or its failure (a chunker's error as its code and message), and
    the seconds it took: the chunk stage's and the checked dry run's one way to chunk a source."""
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
            include_drafts=settings.include_drafts,
            **settings.options,
        )
    except ChunkingError as exc:
        return None, (exc.code, exc.message), 0.0
    except Exception as exc:  # noqa: BLE001 - one bad source must not stop the others
        return None, (CHUNKER_ERROR, f"{type(exc).__name__}: {exc}"), 0.0
    return document, None, time.perf_counter() - started


def questions_json(data: bytes) -> tuple[str | None, Failure | None]:
    """A qa-pairs.md's questions as a JSON list, or its failure (bytes a source's `decode`
    refuses, with its words): the chunk stage's and the checked dry run's one way to read it."""
    try:
        text = decode(data)
    except ChunkingError as exc:
        return None, (QUESTIONS_FAILED, exc.message)
    return json.dumps(parse_questions(text), ensure_ascii=False), None
