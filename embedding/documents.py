"""Embed a batch of documents through the cache: reuse what is stored, embed the rest at once.

`embed_documents` works on documents as columns (`Documents`: one strategy key and kind, every
chunk's text and ids, offsets per document), with no Python object per document on a cold cache:
a build's embedding actor calls it. `embed_uncached` and `embed_with_cache` take one `DocRequest`
per document, for callers that have documents one by one, and go through it."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from embedding.cache import CacheEntry, CacheKey, EmbeddingCache, text_hashes
from embedding.encoder import Encoded

if TYPE_CHECKING:  # only for annotations: this module works without importing torch
    from embedding.embedder import Embedded, Embedder
    from embedding.lazy import LazyEmbedder


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

    cache_hit: the whole entry was valid and reused (or the request has no texts: no entry);
    reused: chunks taken from a stale or previous entry by text hash; embedded: chunks computed
    now; truncated: chunks cut to the model window (remembered in the cache, so a hit reports the
    same count as the run that embedded them); entry: the cache entry still to be written (None
    for a hit, or without a cache);
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


@dataclass(frozen=True, eq=False)
class Documents:
    """Documents of one strategy key and one kind (passages, or `query` texts) as columns: per
    document its source hash and previous source hash, per chunk its text (document after
    document) and, for passages, optionally its token ids from an encoder with the embedder's
    `encoder_digest`. Document i's chunks are `texts[offsets[i]:offsets[i + 1]]`."""

    strategy_key: str
    source_hashes: Sequence[str]
    previous_hashes: Sequence[str | None]
    texts: Sequence[str]
    offsets: np.ndarray
    tokens: Encoded | None = None
    query: bool = False

    def __post_init__(self):
        documents = len(self.source_hashes)
        if len(self.previous_hashes) != documents or len(self.offsets) != documents + 1:
            raise ValueError("Documents: one source hash, previous hash and offset per document")
        if self.offsets[0] != 0 or self.offsets[-1] != len(self.texts):
            raise ValueError("Documents: offsets must run from 0 to the number of texts")
        if (np.diff(self.offsets) < 0).any():  # a negative chunk count: an IndexError later
            raise ValueError("Documents: offsets must not decrease (a chunk count below 0)")
        if self.tokens is not None and (self.query or len(self.tokens) != len(self.texts)):
            raise ValueError("Documents: tokens must be one id row per text, and not for queries")


@dataclass(frozen=True, eq=False)
class DocumentsVectors:
    """What `embed_documents` gives for one `Documents`: per chunk its vector (n, dim), text hash
    and whether it was cut to the model window; per document whether its whole cache entry was
    reused (`hits`; a document without chunks is one: no entry is written for it, which would
    replace the entry of other settings that chunk the same bytes, a draft's, say), how many
    chunks came from an older entry, or from an earlier call (`Remembered`), by text hash
    (`reused`) and how many were embedded now (`embedded`)."""

    vectors: np.ndarray
    text_hashes: tuple[str, ...]
    cut: np.ndarray
    hits: np.ndarray
    reused: np.ndarray
    embedded: np.ndarray


@dataclass(frozen=True, eq=False)
class _Known:
    """A group's text hashes and what the cache holds of it: vectors and cut flags where known,
    which chunks are known (`have`), per document whether it was a whole hit and how many chunks
    it reused. `embed_documents` fills in the rest of `vectors` and `cut`."""

    hashes: tuple[str, ...]
    vectors: np.ndarray
    cut: np.ndarray
    have: np.ndarray
    hits: np.ndarray
    reused: np.ndarray


@dataclass(frozen=True)
class Embeddings:
    """What `embed_documents` did: one `DocumentsVectors` per `Documents`, in order, and the
    model's work for them (as in `Uncached`)."""

    results: list[DocumentsVectors]
    tokens: int = 0
    padded_tokens: int = 0
    model_seconds: float = 0.0


class Remembered:
    """Vectors an embedding actor computed in its earlier calls, by model key (passages and
    queries apart) and text hash, with whether each was cut to the model window; the least
    recently used are dropped past `max_bytes` (each vector's bytes and about 200 of bookkeeping:
    the 64 MB default holds some 38,000 MiniLM vectors, 15,000 of a 1,024-wide model: the
    distinct chunks of a docs version of some 4,000 pages at FastAPI's 10 a page, small beside
    the 400 MB an actor holds once torch and a model are loaded). A build's copies of a page
    (versioned docs) land in different calls and miss the cache, which is written after them:
    `embed_documents` takes them from here. Safe for an actor's concurrent calls, each of which
    recalls what is remembered as it starts: a text the other call is embedding meanwhile is
    embedded by both. (Holding a call's recall, model work and remembering as one turn caught
    those too, 424 chunks embedded of a three-version tree's 1,143 against 827, but kept each
    call's encoding and fill from overlapping the other's model work: tldr-en's cold build
    took 0.7 s longer in six pairs of six, 2026-11-30.)"""

    ENTRY_BYTES = 200  # the key's tuple and strings, the bytes object, the ordered dict's link

    def __init__(self, max_bytes: int = 64 * 2**20):
        self.max_bytes = max_bytes
        self.bytes = 0
        self._vectors: OrderedDict[tuple[str, str], tuple[np.ndarray, bool]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._vectors)

    def get(self, model_key: str, text_hash: str) -> tuple[np.ndarray, bool] | None:
        """The vector (float32, read-only) and its cut flag, or None."""
        with self._lock:
            found = self._vectors.get((model_key, text_hash))
            if found is not None:
                self._vectors.move_to_end((model_key, text_hash))
            return found

    def put(self, model_key: str, hashes: Sequence[str], vectors: np.ndarray, cut: np.ndarray):
        """Remember each text's vector (a row of `vectors`, kept as a read-only view: no copy, the
        call's matrix freed once its last row is dropped) and cut flag, in bulk (a copy of each
        row and a dictionary entry at a time took 2 µs a row; 0.3 µs now)."""
        rows = np.ascontiguousarray(vectors, dtype=np.float32).view()
        rows.flags.writeable = False
        keys = [(model_key, text_hash) for text_hash in hashes]
        with self._lock:
            added = sum(key not in self._vectors for key in keys)
            self._vectors.update(zip(keys, zip(rows, cut.tolist(), strict=True), strict=True))
            self.bytes += added * (rows.shape[1] * rows.itemsize + self.ENTRY_BYTES)
            while self.bytes > self.max_bytes and self._vectors:
                _, (vector, _) = self._vectors.popitem(last=False)
                self.bytes -= vector.nbytes + self.ENTRY_BYTES


def chunk_offsets(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    """Where each document's chunks start among all chunks, and where the last ends, from each
    document's chunk count: `Documents.offsets`."""
    return np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)


def cache_model_key(embedder: Embedder | LazyEmbedder, query: bool) -> str:
    """The model part of a cache key: query vectors are kept apart from passages."""
    return embedder.query_key if query else embedder.key


def truncated_rows(cut: np.ndarray, offsets: np.ndarray) -> list[tuple[int, ...]]:
    """Per document (`Documents.offsets`), the rows within it of its chunks that were cut to the
    model window (`DocumentsVectors.cut`)."""
    chunks = np.flatnonzero(cut)
    bounds = np.searchsorted(chunks, offsets).tolist()
    return [
        tuple((chunks[low:high] - start).tolist()) if high > low else ()
        for start, low, high in zip(offsets.tolist(), bounds, bounds[1:], strict=False)
    ]


def embed_with_cache(
    embedder: Embedder | LazyEmbedder, cache: EmbeddingCache | None, requests: Sequence[DocRequest]
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
    embedder: Embedder | LazyEmbedder, cache: EmbeddingCache | None, requests: Sequence[DocRequest]
) -> Uncached:
    """Vectors for each request, in request order, computing only what the cache lacks; each
    result that was not a hit carries the `entry` to write back (none when `cache` is None).

    The requests are grouped into `Documents` (by strategy key, kind and whether they bring
    token ids) and go through `embed_documents`. Writing is left to the caller, so an accelerator
    never waits on cache writes (the build writes them in a CPU stage, `jobs.stages.store`)."""
    groups: dict[tuple[str, bool, bool], list[int]] = {}
    for index, request in enumerate(requests):
        kind = (request.strategy_key, request.query, request.tokens is not None)
        groups.setdefault(kind, []).append(index)
    documents = [_documents(requests, rows) for rows in groups.values()]
    done = embed_documents(embedder, cache, documents)
    results: list[DocVectors | None] = [None] * len(requests)
    for rows, group, found in zip(groups.values(), documents, done.results, strict=True):
        cut = truncated_rows(found.cut, group.offsets)
        for document, index in enumerate(rows):
            results[index] = _doc_vectors(embedder, cache, group, found, document, cut[document])
    return Uncached(results, done.tokens, done.padded_tokens, done.model_seconds)


def embed_documents(
    embedder: Embedder | LazyEmbedder,
    cache: EmbeddingCache | None,
    groups: Sequence[Documents],
    tokens_digest: str | None = None,
    progress: Callable[[int], None] | None = None,
    remembered: Remembered | None = None,
    found: Callable[[int, int], None] | None = None,
) -> Embeddings:
    """Vectors for every chunk of every group, computing only what the cache lacks.

    Each group's entries (and the previous entries named by `previous_hashes`) are read in one
    batched lookup, skipped where the cache's model folder does not exist (a cold cache: every
    chunk is embedded, with no object per document); a document whose entry has its chunks' text
    hashes is a hit, and other chunks whose text hash matches a chunk of a stale or previous
    entry keep its vector. Every remaining distinct text of all the groups is embedded in ONE
    embedder call per kind (passages, queries), whose fixed-shape micro-batches make a vector
    independent of what else is in the call.

    `tokens_digest` is the `encoder_digest` of the encoder that made the groups' token ids: they
    are used only where it is the embedder's own (asked once a text is missing: a
    `LazyEmbedder` loads then), else the texts are tokenized again; None: they are the
    embedder's ids. `progress` is called with the passages of each micro-batch as it is
    embedded (`Embedder.embed_encoded`); `found`, once before any, with the passages not to embed
    (in the cache or `remembered`: the call's `cache_hits`, known long before it returns) and all
    the passages.

    `remembered`: vectors of earlier calls (an actor's); a chunk the cache lacks whose text is
    there is not embedded again (counted in `reused`: the same bits, the micro-batches being
    fixed-shape), and what this call embeds is added to it."""
    known = [_known(embedder, cache, group) for group in groups]
    tokens = padded_tokens = 0
    model_seconds = 0.0
    for query in (False, True):
        same = [(g, k) for g, k in zip(groups, known, strict=True) if g.query is query]
        if remembered is not None:
            for group, held in same:
                _recall(remembered, cache_model_key(embedder, query), group, held)
        if found is not None and not query:  # questions are no chunks
            held_of = [held.have for _, held in same]
            found(sum(int(have.sum()) for have in held_of), sum(have.size for have in held_of))
        fresh = _embed_missing(embedder, same, query, tokens_digest, progress, remembered)
        if fresh is not None:
            tokens, padded_tokens = tokens + fresh.tokens, padded_tokens + fresh.padded_tokens
            model_seconds += fresh.model_seconds
    results = []
    for group, held in zip(groups, known, strict=True):
        missing = np.concatenate([[0], np.cumsum(~held.have)])
        embedded = missing[group.offsets[1:]] - missing[group.offsets[:-1]]
        results.append(
            DocumentsVectors(held.vectors, held.hashes, held.cut, held.hits, held.reused, embedded)
        )
    return Embeddings(results, tokens, padded_tokens, model_seconds)


def _known(
    embedder: Embedder | LazyEmbedder, cache: EmbeddingCache | None, group: Documents
) -> _Known:
    """A group's text hashes and what the cache already holds of it, read in one batched lookup
    (none where the cache's model folder does not exist)."""
    hashes = text_hashes(group.texts)
    chunks, documents = len(hashes), len(group.source_hashes)
    held = _Known(
        hashes,
        np.empty((chunks, embedder.dim), dtype=np.float32),
        np.zeros(chunks, dtype=bool),
        np.zeros(chunks, dtype=bool),
        np.diff(group.offsets) == 0,  # no chunks: nothing to embed nor to cache
        np.zeros(documents, dtype=np.int64),
    )
    model_key = cache_model_key(embedder, group.query)
    if cache is None or not documents or not cache.may_hold(group.strategy_key, model_key):
        return held
    keys = [CacheKey(group.strategy_key, model_key, h) for h in group.source_hashes]
    previous = [
        CacheKey(group.strategy_key, model_key, before) if before and before != now else None
        for now, before in zip(group.source_hashes, group.previous_hashes, strict=True)
    ]
    found = cache.get_many(keys + [k for k in previous if k is not None], embedder.dim)
    stored_previous = iter(found[documents:])
    offsets = group.offsets.tolist()
    for document, (entry, before) in enumerate(zip(found[:documents], previous, strict=True)):
        prior = next(stored_previous) if before is not None else None
        start, end = offsets[document], offsets[document + 1]
        if entry is not None and entry.text_hashes == hashes[start:end]:
            held.vectors[start:end] = entry.vectors
            held.cut[[start + row for row in entry.truncated_rows]] = True
            held.have[start:end] = held.hits[document] = True
            continue
        usable: dict[str, tuple[np.ndarray, bool]] = {}
        for source in (prior, entry):  # a stale entry of this very source is also usable
            if source is not None:
                cut_rows = set(source.truncated_rows)
                for row, text_hash in enumerate(source.text_hashes):
                    usable.setdefault(text_hash, (source.vectors[row], row in cut_rows))
        for chunk in range(start, end):
            if (got := usable.get(hashes[chunk])) is not None:
                held.vectors[chunk], held.cut[chunk] = got
                held.have[chunk] = True
                held.reused[document] += 1
    return held


def _embed_missing(
    embedder: Embedder | LazyEmbedder,
    same: list[tuple[Documents, _Known]],
    query: bool,
    tokens_digest: str | None,
    progress: Callable[[int], None] | None,
    remembered: Remembered | None,
) -> Embedded | None:
    """Embed every distinct text these groups (of one kind) still lack, in one embedder call, and
    fill them in (and in `remembered`); None when none is missing."""
    firsts: dict[str, tuple[Documents, int]] = {}  # text hash -> its first missing chunk
    for group, held in same:
        for chunk in np.flatnonzero(~held.have).tolist():
            firsts.setdefault(held.hashes[chunk], (group, chunk))
    if not firsts:
        return None
    own_ids = tokens_digest is None or tokens_digest == embedder.encoder_digest
    encoded = _encoded(embedder, list(firsts.values()), query, own_ids)
    told = None if query else progress  # questions are no chunks
    fresh = embedder.embed_encoded(encoded, query=query, progress=told)
    row = {text_hash: i for i, text_hash in enumerate(firsts)}
    fresh_cut = np.zeros(len(row), dtype=bool)
    fresh_cut[list(fresh.truncated_rows)] = True
    for _, held in same:
        missing = np.flatnonzero(~held.have)
        rows = [row[held.hashes[chunk]] for chunk in missing.tolist()]
        held.vectors[missing] = fresh.vectors[rows]
        held.cut[missing] = fresh_cut[rows]
    if remembered is not None:
        remembered.put(cache_model_key(embedder, query), list(row), fresh.vectors, fresh_cut)
    return fresh


def _recall(remembered: Remembered, model_key: str, group: Documents, held: _Known):
    """Fill in the chunks `held` lacks whose text `remembered` has, counted in `reused`."""
    recalled = np.zeros(len(held.hashes), dtype=np.int64)
    for chunk in np.flatnonzero(~held.have).tolist():
        if (got := remembered.get(model_key, held.hashes[chunk])) is not None:
            held.vectors[chunk] = got[0]
            held.cut[chunk], held.have[chunk], recalled[chunk] = got[1], True, 1
    if recalled.any():
        counts = np.concatenate([[0], np.cumsum(recalled)])
        held.reused[:] += counts[group.offsets[1:]] - counts[group.offsets[:-1]]


def _encoded(
    embedder: Embedder | LazyEmbedder,
    chunks: list[tuple[Documents, int]],
    query: bool,
    own_ids: bool = True,
) -> Encoded:
    """The ids of these (group, chunk) texts: those their group brought (where they are the
    embedder's `own_ids`), the others encoded now in one call."""
    brought = [(group, chunk, own_ids and group.tokens is not None) for group, chunk in chunks]
    fresh = embedder.encode(
        [group.texts[chunk] for group, chunk, ok in brought if not ok], query=query
    )
    made = zip(fresh.ids, fresh.cut, strict=True)
    pairs = [
        (group.tokens.ids[chunk], group.tokens.cut[chunk]) if ok else next(made)
        for group, chunk, ok in brought
    ]
    return Encoded(tuple(ids for ids, _ in pairs), tuple(cut for _, cut in pairs))


def _documents(requests: Sequence[DocRequest], rows: list[int]) -> Documents:
    """These requests (one strategy key, one kind, all with token ids or none) as `Documents`."""
    chosen = [requests[index] for index in rows]
    first = chosen[0]
    tokens = None
    if first.tokens is not None:
        tokens = Encoded(
            tuple(ids for r in chosen for ids in r.tokens.ids),
            tuple(cut for r in chosen for cut in r.tokens.cut),
        )
    return Documents(
        strategy_key=first.strategy_key,
        source_hashes=[r.source_hash for r in chosen],
        previous_hashes=[r.previous_source_hash for r in chosen],
        texts=[text for r in chosen for text in r.texts],
        offsets=chunk_offsets([len(r.texts) for r in chosen]),
        tokens=tokens,
        query=first.query,
    )


def _doc_vectors(
    embedder: Embedder | LazyEmbedder,
    cache: EmbeddingCache | None,
    group: Documents,
    found: DocumentsVectors,
    document: int,
    truncated: tuple[int, ...],
) -> DocVectors:
    """One document's `DocVectors` from its group's result and its `truncated_rows`, with the
    entry to write (none for a hit, or without a cache)."""
    start, end = int(group.offsets[document]), int(group.offsets[document + 1])
    vectors = found.vectors[start:end]
    if found.hits[document]:
        return DocVectors(vectors, True, 0, 0, len(truncated))
    entry = None
    if cache is not None:
        model_key = cache_model_key(embedder, group.query)
        key = CacheKey(group.strategy_key, model_key, group.source_hashes[document])
        entry = CacheEntry(key, found.text_hashes[start:end], vectors, truncated)
    reused, embedded = int(found.reused[document]), int(found.embedded[document])
    return DocVectors(vectors, False, reused, embedded, len(truncated), entry)
