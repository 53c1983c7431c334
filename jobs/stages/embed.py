"""Stage 2: embed on an actor pool. Each actor loads the model once; for each batch it looks every
document up in the embedding cache at once and embeds all the misses of all its documents in one
embedder call (`embedding.embed_uncached`), whose fixed-shape micro-batches keep every vector the
same bits whatever documents share the batch. Each topic's questions are embedded as queries (with
the model's query prefix), through the same cache. The new cache entries are not written here: they
travel with the rows to `jobs.stages.store`, so the actor (a GPU) never waits on cache writes.
Each chunk is embedded as its `embedding_text` (the chunking layer decides: e.g. hierarchical's
context-enriched text), which the chunk task sends beside the document, and the cache is keyed on
exactly that text. Its token ids come from the chunk task when that task's encoder has this
model's `encoder_digest` (`embedding.encoder`); an actor whose model tokenizes differently says so
once and tokenizes the texts itself.
Reads `kind`, `document` (a topic's questions), `sha256`, `previous_hash`, `embedding_texts`,
`token_ids`, `token_cut`; writes `vectors`, `dim`, `cache_entry` and drops the texts and token ids.
"""

from __future__ import annotations

import gc
import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from embedding import DocRequest, EmbeddingCache, Uncached, embed_uncached
from embedding.encoder import Encoded
from jobs.gc_pause import gc_paused
from jobs.progress import report_stats
from jobs.records import (
    QUESTIONS,
    SOURCE,
    entry_to_json,
    tokens_of,
    vectors_to_bytes,
    with_columns,
)
from jobs.stats import EmbedStats, Names, RunStats, SharedClock

# Cache namespace (the strategy-key level of seed 000's layout) of qa-pairs.md questions, which
# are embedded as queries and cached like chunks (seed 000 section 6: "with caching").
QUESTIONS_CACHE_KEY = "questions"
READS = ("kind", "document", "sha256", "previous_hash", "embedding_texts")
WRITES = ("vectors", "dim", "cache_entry", "embedding_texts", "token_ids", "token_cut")
log = logging.getLogger("mdindex.build")


@dataclass(frozen=True)
class EmbedSettings:
    """What an embedding actor needs: the model and its options, the cache, the strategy key."""

    model: str
    options: dict[str, Any]
    cache_uri: str | None
    storage_options: dict[str, Any] = field(default_factory=dict)
    strategy_key: str = ""
    collector: Any = None  # the run's StatsCollector actor, if any
    encoder_digest: str | None = None  # of the chunk tasks' encoder (None: they tokenize nothing)
    env: dict[str, str] = field(default_factory=dict)  # set before torch loads (`actor_env`)


class EmbedActor:
    """A callable class for `map_batches(..., compute=ActorPoolStrategy(...))`. Ray runs two of
    its calls at once (`jobs.resources.ACTOR_CONCURRENT_BATCHES`): the embedder takes their model
    calls one at a time, and the rest of one batch (decoding, cache lookups, Arrow) overlaps the
    other's model call."""

    def __init__(self, settings: EmbedSettings):
        # Before torch: OpenMP reads its settings when torch loads it, and nothing in this new
        # process has imported torch yet (this module does not).
        os.environ.update(settings.env)
        # Loading builds some 400,000 objects, all kept for the actor's life (torch, transformers,
        # the model). The collector is paused meanwhile (each pass traversed them again: 1.6 s of
        # an 8-9 s start on the 2-core AVX2 VM), then one collection frees the load's garbage
        # (11,000 objects, 0.2 s more than with the collector on) and the rest is frozen: Python's
        # full collections then skip it, where each traversed it, stalling the model (a GPU)
        # between calls (2.1 s of one actor's time on a cold build of all of tldr, 0.16 s frozen).
        # Both happen before the collector is back on, whose first pass would traverse it all.
        with gc_paused():
            # Imported here, in the actor: the driver never loads torch.
            from embedding import load_embedder

            self.embedder = load_embedder(settings.model, **settings.options)
            # On a GPU: every micro-batch shape's kernels loaded (and graphs captured) now, while
            # the chunk tasks run, not during the first batches.
            self.embedder.warm_up()
            self.cache = (
                EmbeddingCache(settings.cache_uri, settings.storage_options)
                if settings.cache_uri
                else None
            )
            gc.collect()
            gc.freeze()
        self.strategy_key = settings.strategy_key
        self.collector = settings.collector
        self.clock = SharedClock()
        self.pretokenized = settings.encoder_digest == self.embedder.encoder_digest
        if settings.encoder_digest and not self.pretokenized:
            log.warning(
                "model %s: its loaded tokenizer differs from the one the chunk tasks built from "
                "its files; this actor tokenizes the chunks itself",
                settings.model,
            )

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Attach vectors (and the cache entries to write) to chunked sources and parsed
        questions; report the counts and the time (counted once where two calls overlap). Python's
        collector is paused meanwhile (`jobs.gc_pause`)."""
        self.clock.start()
        try:
            with gc_paused():
                table, stats = self.embed(batch)
        finally:
            spent = self.clock.spent()
        report_stats(self.collector, RunStats(embed=stats + EmbedStats(**spent)))
        return table

    def embed(self, batch: pa.Table) -> tuple[pa.Table, EmbedStats]:
        """The batch with its vectors, and the counts. Reads and writes whole Arrow columns (no
        row dicts)."""
        read = zip(*(batch.column(name).to_pylist() for name in READS), strict=True)
        tokens = tokens_of(batch) if self.pretokenized else [None] * batch.num_rows
        work = [
            (i, request)
            for i, (row, encoded) in enumerate(zip(read, tokens, strict=True))
            if (request := self._request(*row, encoded))
        ]
        requests = [request for _, request in work]
        done = embed_uncached(self.embedder, self.cache, requests)
        written: dict[str, list[Any]] = {name: [None] * batch.num_rows for name in WRITES}
        for (i, _), result in zip(work, done.results, strict=True):
            written["vectors"][i] = vectors_to_bytes(result.vectors)
            written["dim"][i] = self.embedder.dim
            written["cache_entry"][i] = entry_to_json(result.entry) if result.entry else None
        return with_columns(batch, written), _counts(requests, done, self.embedder.key)

    def _request(
        self,
        kind: str,
        document: str | None,
        sha256: str,
        previous_hash: str | None,
        texts: list[str] | None,
        tokens: Encoded | None,
    ) -> DocRequest | None:
        """The cache request of a chunked source (its chunk task's embedding `texts` and
        `tokens`, if any) or of a topic's questions, else None."""
        if document is None:
            return None
        if kind == SOURCE:
            return DocRequest(
                strategy_key=self.strategy_key,
                source_hash=sha256,
                texts=tuple(texts),
                previous_source_hash=previous_hash,
                tokens=tokens,
            )
        if kind == QUESTIONS and (questions := tuple(json.loads(document))):
            return DocRequest(QUESTIONS_CACHE_KEY, sha256, questions, query=True)
        return None


def _counts(requests: list[DocRequest], done: Uncached, model_key: str) -> EmbedStats:
    """The stage's counts of one batch (summed here once, not a record added per document), and
    the key of the model that embedded it."""
    passages = [
        (r, result) for r, result in zip(requests, done.results, strict=True) if not r.query
    ]
    chunks = sum(len(r.texts) for r, _ in passages)
    embedded = sum(result.embedded for _, result in passages)
    return EmbedStats(
        documents=len(passages),
        chunks=chunks,
        embedded=embedded,
        cache_hits=chunks - embedded,
        cache_reused=sum(result.reused for _, result in passages),
        truncated=sum(result.truncated for _, result in passages),
        pretokenized=sum(result.embedded for r, result in passages if r.tokens is not None),
        questions=sum(len(r.texts) for r in requests if r.query),
        tokens=done.tokens,
        padded_tokens=done.padded_tokens,
        model_seconds=done.model_seconds,
        model_keys=Names((model_key,)),
    )
