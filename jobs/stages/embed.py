"""Stage 2: embed on an actor pool. Each actor loads the model once (on a CPU at its first cache
miss, `embedding.LazyEmbedder`: an actor whose chunks are all cached never loads it); for each
batch it looks every document up in the embedding cache at once and embeds all the misses of all
its documents in one embedder call (`embedding.embed_documents`, on whole columns: no Python
object per document), whose fixed-shape micro-batches keep every vector the same bits whatever
documents share the batch. Each topic's questions are embedded as queries (with the model's query
prefix), through the same cache. The new cache entries are not written here: they
travel with the rows to `jobs.stages.store`, so the actor (a GPU) never waits on cache writes.
What an actor embeds it remembers for its later batches (`embedding.documents.Remembered`): a
copy of a page in another version's folder, whose cache entry is not written yet, is not
embedded again.
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
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from embedding import EmbeddingCache
from embedding.documents import (
    Documents,
    DocumentsVectors,
    Embeddings,
    Remembered,
    cache_model_key,
    chunk_offsets,
    embed_documents,
    truncated_rows,
)
from jobs.gc_pause import gc_paused
from jobs.landmarks import Plugin, check_landmarks
from jobs.progress import CallProgress, embedding_progress, report_stats, rows_key
from jobs.records import QUESTIONS, SOURCE, chunk_tokens, entry_to_json, with_columns
from jobs.stats import EmbedStats, Names, RunStats, SharedClock

# Cache namespace (the strategy-key level of seed 000's layout) of qa-pairs.md questions, which
# are embedded as queries and cached like chunks (seed 000 section 6: "with caching").
QUESTIONS_CACHE_KEY = "questions"
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
    collector: Any = None  # the run's `jobs.progress.Collector`, if any
    encoder_digest: str | None = None  # of the chunk tasks' encoder (None: they tokenize nothing)
    env: dict[str, str] = field(default_factory=dict)  # set before torch loads (`actor_env`)
    # load the model at the actor's start even where its cache keys need no model (a CPU): the
    # run's chunks are expected to miss the cache (`jobs.work.new_content`)
    load_at_start: bool = False
    # the third-party backend the driver found (`jobs.landmarks.config_plugins`), which the actor
    # checks it finds before anything else, as a node's first chunk task checks the strategy
    plugins: tuple[Plugin, ...] = ()
    # one embedder in the driver's process, a run without Ray (`jobs.in_process`), not an actor
    in_driver: bool = False


class EmbedActor:
    """A callable class for `map_batches(..., compute=ActorPoolStrategy(...))`. Ray runs two of
    its calls at once (`jobs.resources.ACTOR_CONCURRENT_BATCHES`): the embedder takes their model
    calls one at a time, and the rest of one batch (decoding, cache lookups, Arrow) overlaps the
    other's model call."""

    def __init__(self, settings: EmbedSettings):
        # Before torch: OpenMP reads its settings when torch loads it, and nothing in this new
        # process has imported torch yet (this module does not).
        os.environ.update(settings.env)
        # A node that joined late without the backend: "PluginNotOnNode: …", not the hub's
        # "model 'hashing': not a local directory, and the Hugging Face hub could not provide it"
        check_landmarks(settings.plugins)
        self.settings = settings
        self.strategy_key = settings.strategy_key
        self.collector = settings.collector
        self.pretokenized = False  # the chunk tasks' ids are this model's (known once it loads)
        self.clock = SharedClock()
        self.loaded_at = 0.0  # when the model last finished loading (epoch seconds)
        # this build's vectors so far: a copy of a page (versioned docs) in a later batch is not
        # embedded again, its cache entry not yet written (`embedding.documents.Remembered`)
        self.remembered = Remembered()
        with gc_paused():
            # Imported here, in the actor (the driver needs none of it); torch only once the
            # model loads.
            from embedding import LazyEmbedder, model_keys

            self.cache = (
                EmbeddingCache(settings.cache_uri, settings.storage_options)
                if settings.cache_uri
                else None
            )
            # On a CPU the cache keys come from the model's files, and the model loads at the
            # first miss (a build whose chunks are all cached never loads it), or now where
            # misses are expected (a cold build's actor waited for its first batch, then for
            # its imports); elsewhere now. Now is while the chunk tasks run.
            keys = model_keys(settings.model, **settings.options) if self.cache else None
            self.embedder = LazyEmbedder(keys, self._load) if keys else self._load()
            if keys and settings.load_at_start:
                self.embedder.loaded()  # and its keys checked against its files', as at a miss

    def _load(self):
        """Load the model (in a block with the collector paused), prepare its shapes, and say
        whether the chunk tasks' token ids are its ids.

        Loading builds some 400,000 objects, all kept for the actor's life (torch, transformers,
        the model). The collector is paused meanwhile (each pass traversed them again: 1.6 s of an
        8-9 s start on the 2-core AVX2 VM), then one collection frees the load's garbage (11,000
        objects, 0.2 s more than with the collector on) and the rest is frozen: Python's full
        collections then skip it, where each traversed it, stalling the model (a GPU) between
        calls (2.1 s of one actor's time on a cold build of all of tldr, 0.16 s frozen). Both
        happen before the collector is back on, whose first pass would traverse it all.

        Not so in the driver's process (`in_driver`), which outlives the build: frozen, this
        object and its model (in a cycle with the `LazyEmbedder`) were never collected, and a
        program that ran one small build after another grew by the model each time (MiniLM:
        70-100 MB a build). There the topics are built with the collector paused instead
        (`jobs.stages.topic.build_and_write`)."""
        from embedding import load_embedder

        settings = self.settings
        embedder = load_embedder(settings.model, **settings.options)
        # On a GPU: every micro-batch shape's kernels loaded (and graphs captured) now, not
        # during the first batches.
        embedder.warm_up()
        self.pretokenized = settings.encoder_digest == embedder.encoder_digest
        if settings.encoder_digest and not self.pretokenized:
            log.warning(
                "model %s: its loaded tokenizer differs from the one the chunk tasks built from "
                "its files; this actor tokenizes the chunks itself",
                settings.model,
            )
        if not settings.in_driver:
            gc.collect()
            gc.freeze()
        self.clock.skip()
        self.loaded_at = time.time()  # a running call's progress starts here (`CallProgress`)
        report_stats(self.collector, RunStats(embed=EmbedStats(models_loaded=1)))
        return embedder

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Attach vectors (and the cache entries to write) to chunked sources and parsed
        questions; report the counts and the time (counted once where two calls overlap). Python's
        collector is paused meanwhile (`jobs.gc_pause`)."""
        self.clock.start()
        key = rows_key("embed", batch)
        try:
            with gc_paused():
                progress = embedding_progress(self.collector, key, loaded=lambda: self.loaded_at)
                table, stats = self.embed(batch, progress)
        finally:
            spent = self.clock.spent()
        stats = RunStats(embed=stats + EmbedStats(**spent))
        report_stats(self.collector, stats, key)
        return table

    def embed(
        self, batch: pa.Table, progress: CallProgress | None = None
    ) -> tuple[pa.Table, EmbedStats]:
        """The batch with its vectors, and the counts; `progress` is told the chunks found in
        the cache (of all) as soon as they are known, then the texts of each micro-batch
        embedded. Works on whole Arrow columns: the sources' chunks go to the embedder as one
        `Documents`, their vectors come back as one matrix."""
        sources, asked = _rows_of(batch, SOURCE), _rows_of(batch, QUESTIONS)
        hashes = batch.column("sha256").to_pylist()
        groups, rows = [self._sources(batch, sources, hashes)], [sources]
        questions = [(i, json.loads(batch.column("document")[i].as_py())) for i in asked]
        questions = [(i, texts) for i, texts in questions if texts]
        if questions:
            groups.append(_questions(questions, hashes))
            rows.append([i for i, _ in questions])
        done = embed_documents(
            self.embedder,
            self.cache,
            groups,
            self.settings.encoder_digest,
            progress.embedded if progress else None,
            self.remembered,
            found=progress.found if progress else None,
        )
        written: dict[str, list[Any]] = {name: [None] * batch.num_rows for name in WRITES}
        for group, found, indices in zip(groups, done.results, rows, strict=True):
            for i, vectors, entry in self._rows(group, found, indices):
                written["vectors"][i] = vectors
                written["dim"][i] = self.embedder.dim
                written["cache_entry"][i] = entry
        stats = _counts(groups, done, self.embedder.key, self.pretokenized)
        return with_columns(batch, written), stats

    def _sources(self, batch: pa.Table, rows: list[int], hashes: list[str | None]) -> Documents:
        """The chunked sources among `rows` of the batch as one `Documents`, with the chunk
        tasks' token ids when they made them (for every one of these rows): `embed_documents`
        uses them where they are the model's."""
        columns = ["embedding_texts", "token_ids", "token_cut"]
        taken = batch.select(columns).take(pa.array(rows, type=pa.int64()))
        texts = taken.column("embedding_texts").combine_chunks()
        tokens = None
        if self.settings.encoder_digest and taken.column("token_ids").null_count == 0:
            tokens = chunk_tokens(taken)
        previous = batch.column("previous_hash").to_pylist()
        return Documents(
            strategy_key=self.strategy_key,
            source_hashes=[hashes[i] for i in rows],
            previous_hashes=[previous[i] for i in rows],
            texts=texts.flatten().to_pylist(),
            offsets=chunk_offsets(pc.list_value_length(texts).fill_null(0).to_numpy()),
            tokens=tokens,
        )

    def _rows(self, group: Documents, found: DocumentsVectors, rows: list[int]):
        """(row, vectors as bytes, the cache entry to write as JSON or None) per document."""
        data = np.ascontiguousarray(found.vectors, dtype="<f4").tobytes()
        width = 4 * self.embedder.dim
        offsets = group.offsets.tolist()
        truncated = truncated_rows(found.cut, group.offsets)
        model_key = cache_model_key(self.embedder, group.query)
        for document, i in enumerate(rows):
            start, end = offsets[document], offsets[document + 1]
            entry = None
            if self.cache is not None and not found.hits[document]:
                key = (group.strategy_key, model_key, group.source_hashes[document])
                entry = entry_to_json(key, found.text_hashes[start:end], truncated[document])
            yield i, data[start * width : end * width], entry


def _rows_of(batch: pa.Table, kind: str) -> list[int]:
    """The rows of `kind` that have a document (a chunked source, a topic's parsed questions)."""
    wanted = pc.and_(pc.equal(batch.column("kind"), kind), pc.is_valid(batch.column("document")))
    return np.flatnonzero(wanted.fill_null(False).to_numpy()).tolist()


def _questions(questions: list[tuple[int, list[str]]], hashes: list[str | None]) -> Documents:
    """Topics' parsed questions (row, texts) as one `Documents` of queries."""
    return Documents(
        strategy_key=QUESTIONS_CACHE_KEY,
        source_hashes=[hashes[i] for i, _ in questions],
        previous_hashes=[None] * len(questions),
        texts=[text for _, texts in questions for text in texts],
        offsets=chunk_offsets([len(texts) for _, texts in questions]),
        query=True,
    )


def _counts(
    groups: list[Documents], done: Embeddings, model_key: str, pretokenized: bool
) -> EmbedStats:
    """The stage's counts of one batch (summed over whole arrays), and the key of the model
    that embedded it; `pretokenized`: the chunk tasks' ids are the model's."""
    passages, found = groups[0], done.results[0]
    chunks = len(passages.texts)
    embedded = int(found.embedded.sum())
    return EmbedStats(
        documents=len(passages.source_hashes),
        chunks=chunks,
        embedded=embedded,
        cache_hits=chunks - embedded,
        cache_reused=int(found.reused.sum()),
        truncated=int(found.cut.sum()),
        pretokenized=embedded if pretokenized and passages.tokens is not None else 0,
        questions=sum(len(group.texts) for group in groups[1:]),
        tokens=done.tokens,
        padded_tokens=done.padded_tokens,
        model_seconds=done.model_seconds,
        model_keys=Names((model_key,)),
    )
