"""Stage 4: embed on an actor pool. Each actor loads the model once; for each document it looks the
embedding cache up and embeds only the misses (`embedding.embed_with_cache`); it embeds each
topic's questions as queries (with the model's query prefix)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from embedding import DocRequest, EmbeddingCache, embed_with_cache, load_embedder
from jobs.records import QUESTIONS, SOURCE, document_from_json, to_table, vectors_to_bytes


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
        sources = [
            r
            for r in rows
            if r["kind"] == SOURCE and r["document"] is not None and not r["carried"]
        ]
        requests = []
        for row in sources:
            document = document_from_json(row["document"])
            requests.append(
                DocRequest(
                    strategy_key=self.strategy_key,
                    source_hash=row["sha256"],
                    texts=tuple(chunk.text for chunk in document.chunks),
                    previous_source_hash=row["previous_hash"],
                )
            )
        if self.mix_documents:
            results = embed_with_cache(self.embedder, self.cache, requests) if requests else []
        else:  # micro-batches never mix documents: vector bits independent of Ray's batching
            results = [embed_with_cache(self.embedder, self.cache, [r])[0] for r in requests]
        for row, request, result in zip(sources, requests, results, strict=True):
            row.update(
                vectors=vectors_to_bytes(result.vectors),
                dim=self.embedder.dim,
                embedded=result.embedded,
                cache_hits=len(request.texts) - result.embedded,
                truncated=result.truncated,
            )
        for row in rows:
            if row["kind"] == QUESTIONS and row["document"] is not None:
                questions = json.loads(row["document"])
                if questions:
                    vectors = self.embedder.embed(questions, query=True)
                    row.update(vectors=vectors_to_bytes(vectors), dim=self.embedder.dim)
        worked = sources + [r for r in rows if r["kind"] == QUESTIONS]
        elapsed = time.perf_counter() - started
        for row in worked:  # the batch's seconds shared out, so stage totals add up
            row["embed_s"] = elapsed / len(worked)
        return to_table(rows)
