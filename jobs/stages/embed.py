"""Stage 4: embed on an actor pool. Each actor loads the model once; for each document it looks the
embedding cache up and embeds only the misses (`embedding.embed_with_cache`); it embeds each
topic's questions as queries (with the model's query prefix), through the same cache."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from embedding import DocRequest, EmbeddingCache, embed_with_cache, load_embedder
from jobs.records import QUESTIONS, SOURCE, document_from_json, to_table, vectors_to_bytes

# Cache namespace (the strategy-key level of seed 000's layout) of qa-pairs.md questions, which
# are embedded as queries and cached like chunks (seed 000 section 6: "with caching").
QUESTIONS_CACHE_KEY = "questions"


@dataclass(frozen=True)
class EmbedSettings:
    """What an embedding actor needs: the model and its options, the cache, the strategy key."""

    model: str
    options: dict[str, Any]
    cache_uri: str | None
    storage_options: dict[str, Any] = field(default_factory=dict)
    strategy_key: str = ""
    mix_documents: bool = False


class EmbedActor:
    """A callable class for `map_batches(..., compute=ActorPoolStrategy(...))`."""

    def __init__(self, settings: EmbedSettings):
        self.embedder = load_embedder(settings.model, **settings.options)
        self.cache = (
            EmbeddingCache(settings.cache_uri, settings.storage_options)
            if settings.cache_uri
            else None
        )
        self.strategy_key = settings.strategy_key
        self.mix_documents = settings.mix_documents

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Attach vectors (and embed/cache counts) to chunked sources and parsed questions."""
        started = time.perf_counter()
        rows = batch.to_pylist()
        work = [(row, request) for row in rows if (request := self._request(row)) is not None]
        requests = [request for _, request in work]
        if self.mix_documents:
            results = embed_with_cache(self.embedder, self.cache, requests) if requests else []
        else:  # micro-batches never mix documents: vector bits independent of Ray's batching
            results = [embed_with_cache(self.embedder, self.cache, [r])[0] for r in requests]
        for (row, request), result in zip(work, results, strict=True):
            row.update(vectors=vectors_to_bytes(result.vectors), dim=self.embedder.dim)
            if not request.query:
                row.update(
                    embedded=result.embedded,
                    cache_hits=len(request.texts) - result.embedded,
                    truncated=result.truncated,
                )
        elapsed = time.perf_counter() - started
        for row, _ in work:  # the batch's seconds shared out, so stage totals add up
            row["embed_s"] = elapsed / len(work)
        return to_table(rows)

    def _request(self, row: dict[str, Any]) -> DocRequest | None:
        """The cache request of a freshly chunked source or of a topic's questions, else None."""
        if row["document"] is None:
            return None
        if row["kind"] == SOURCE and not row["carried"]:
            document = document_from_json(row["document"])
            return DocRequest(
                strategy_key=self.strategy_key,
                source_hash=row["sha256"],
                texts=tuple(chunk.text for chunk in document.chunks),
                previous_source_hash=row["previous_hash"],
            )
        if row["kind"] == QUESTIONS and (questions := tuple(json.loads(row["document"]))):
            return DocRequest(QUESTIONS_CACHE_KEY, row["sha256"], questions, query=True)
        return None
