"""Embed a batch of documents through the cache: reuse what is stored, embed the rest at once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from embedding.cache import CacheEntry, CacheKey, EmbeddingCache, text_hashes
from embedding.encoder import Encoded

if TYPE_CHECKING:  # only for annotations: this module works without importing torch
    from embedding.embedder import Embedder


@dataclass(frozen=True)
class DocRequest:
    """One document's chunk texts, its cache identity and (optionally) its previous version.

    `query=True` marks texts embedded as queries (with the model's query prefix), such as the
    questions of qa-pairs.md; their entries live under the embedder's `query_key`.
    `tokens`: the texts' ids from an encoder with the embedder's `encoder_digest` (passages only),
    so the embedder does not tokenize them again."""

    strategy_key: str
    source_hash: str
    texts: tuple[str, ...]
    previous_source_hash: str | None = None
    query: bool = False
    tokens: Encoded | None = None

    def __post_init__(self):
        name = f"DocRequest {self.source_hash[:16]}"
        if isinstance(self.texts, str) or not all(isinstance(t, str) for t in self.texts):
            raise TypeError(f"{name}: texts must be a tuple of str")
        if self.tokens is not None and (self.query or len(self.tokens) != len(self.texts)):
            raise ValueError(f"{name}: tokens must be one id row per text, and not for queries")


@dataclass(frozen=True, eq=False)
class DocVectors:
    """Vectors (n, dim) for one request, and where they came from.

    cache_hit: the whole entry was valid and reused; reused: chunks taken from a stale or previous
    entry by text hash; embedded: chunks computed now; truncated: chunks cut to the model window
    (remembered in the cache, so a hit reports the same count as the run that embedded them);
    entry: the cache entry still to be written (None for a hit, or without a cache);
    cache_warning: why the vectors could not be written to the cache ("" when they were)."""

    vectors: np.ndarray
    cache_hit: bool
    reused: int
    embedded: int
    truncated: int
    entry: CacheEntry | None = None
    cache_warning: str = ""


@dataclass(frozen=True)
class Uncached:
    """What `embed_uncached` did: each request's vectors, and the model's work for them: the
    `tokens` of the texts it embedded, the token slots it computed (`padded_tokens`) and the
    wall time it held the model (`model_seconds`, see `Embedded`)."""

    results: list[DocVectors]
    tokens: int = 0
    padded_tokens: int = 0
    model_seconds: float = 0.0


@dataclass(frozen=True)
class _Plan:
    """Per request: a full hit, or the vectors known by text hash and the rows still missing."""

    key: CacheKey
    hit: CacheEntry | None
    hashes: tuple[str, ...]
    known: dict[str, tuple[np.ndarray, bool]]
    missing: tuple[int, ...]


def embed_with_cache(
    embedder: Embedder, cache: EmbeddingCache | None, requests: Sequence[DocRequest]
) -> list[DocVectors]:
    """Vectors for each request, in request order, computing only what the cache lacks, and the
    new entries written back (`embed_uncached`, then `EmbeddingCache.put_many`)."""
    results = embed_uncached(embedder, cache, requests).results
    writes = [result.entry for result in results if result.entry is not None]
    if cache is None or not writes:
        return results
    warnings = cache.put_many(writes)
    return [
        replace(result, cache_warning=warnings.get(result.entry.key, ""))
        if result.entry
        else result
        for result in results
    ]


def embed_uncached(
    embedder: Embedder, cache: EmbeddingCache | None, requests: Sequence[DocRequest]
) -> Uncached:
    """Vectors for each request, in request order, computing only what the cache lacks; each
    result that was not a hit carries the `entry` to write back (none when `cache` is None).

    All entries (and the previous entries named by `previous_source_hash`) are read in one batched
    lookup; chunks whose text hash matches a chunk of a stale or previous entry keep its vector;
    every remaining distinct text of the whole batch is embedded in ONE embedder call (one per
    kind when passages and queries are mixed). Writing is left to the caller, so an accelerator
    never waits on cache writes (the build writes them in a CPU stage, `jobs.stages.store`)."""
    plans = _plan(embedder, cache, requests)
    # (query, text hash) -> (request, row) of its first occurrence, in order
    pending: dict[tuple[bool, str], tuple[DocRequest, int]] = {}
    for request, plan in zip(requests, plans, strict=True):
        for row in plan.missing:
            pending.setdefault((request.query, plan.hashes[row]), (request, row))
    computed: dict[tuple[bool, str], tuple[np.ndarray, bool]] = {}
    tokens = padded_tokens = 0
    model_seconds = 0.0
    for query in (False, True):
        wanted = [key for key in pending if key[0] == query]
        if not wanted:
            continue
        encoded = _encoded(embedder, [pending[key] for key in wanted], query)
        fresh = embedder.embed_encoded(encoded, query=query)
        tokens, padded_tokens = tokens + fresh.tokens, padded_tokens + fresh.padded_tokens
        model_seconds += fresh.model_seconds
        cut = set(fresh.truncated_rows)
        computed.update((key, (fresh.vectors[i], i in cut)) for i, key in enumerate(wanted))
    results: list[DocVectors] = []
    for request, plan in zip(requests, plans, strict=True):
        if plan.hit is not None:
            results.append(DocVectors(plan.hit.vectors, True, 0, 0, len(plan.hit.truncated_rows)))
            continue
        rows = [plan.known.get(h) or computed[request.query, h] for h in plan.hashes]
        vectors = (
            np.array([vector for vector, _ in rows], dtype=np.float32)  # half np.stack's time
            if rows
            else np.zeros((0, embedder.dim), dtype=np.float32)
        )
        truncated = tuple(i for i, (_, cut_row) in enumerate(rows) if cut_row)
        missing = len(plan.missing)
        entry = CacheEntry(plan.key, plan.hashes, vectors, truncated) if cache is not None else None
        results.append(
            DocVectors(vectors, False, len(rows) - missing, missing, len(truncated), entry)
        )
    return Uncached(results, tokens, padded_tokens, model_seconds)


def _encoded(embedder: Embedder, rows: list[tuple[DocRequest, int]], query: bool) -> Encoded:
    """The ids of these (request, row) texts: those their request brought, the others encoded
    now in one call."""
    todo = [request.texts[row] for request, row in rows if request.tokens is None]
    fresh = embedder.encode(todo, query=query)
    made = zip(fresh.ids, fresh.cut, strict=True)
    pairs = [
        next(made) if request.tokens is None else (request.tokens.ids[row], request.tokens.cut[row])
        for request, row in rows
    ]
    return Encoded(tuple(ids for ids, _ in pairs), tuple(cut for _, cut in pairs))


def _plan(
    embedder: Embedder, cache: EmbeddingCache | None, requests: Sequence[DocRequest]
) -> list[_Plan]:
    """Look every entry and previous entry up at once and decide what each request still needs."""
    keys = [CacheKey(r.strategy_key, _model_key(embedder, r), r.source_hash) for r in requests]
    previous = [
        CacheKey(r.strategy_key, _model_key(embedder, r), r.previous_source_hash)
        if r.previous_source_hash and r.previous_source_hash != r.source_hash
        else None
        for r in requests
    ]
    lookups = keys + [k for k in previous if k is not None]
    if cache is None:
        found: list[CacheEntry | None] = [None] * len(lookups)
    else:
        found = cache.get_many(lookups, embedder.dim)
    stored_previous = iter(found[len(keys) :])
    plans = []
    for request, key, entry, prev_key in zip(
        requests, keys, found[: len(keys)], previous, strict=True
    ):
        prev_entry = next(stored_previous) if prev_key is not None else None
        hashes = text_hashes(request.texts)
        if entry is not None and entry.text_hashes == hashes:
            plans.append(_Plan(key, entry, hashes, {}, ()))
            continue
        known: dict[str, tuple[np.ndarray, bool]] = {}
        for source in (prev_entry, entry):  # a stale entry of this very source is also usable
            if source is not None:
                cut = set(source.truncated_rows)
                for row, text_hash in enumerate(source.text_hashes):
                    known.setdefault(text_hash, (source.vectors[row], row in cut))
        missing = tuple(i for i, h in enumerate(hashes) if h not in known)
        plans.append(_Plan(key, None, hashes, known, missing))
    return plans


def _model_key(embedder: Embedder, request: DocRequest) -> str:
    """The model part of a request's cache key: query vectors are kept apart from passages."""
    return embedder.query_key if request.query else embedder.key
