"""Stage 2b: write the embedding cache entries the embedding actors computed, in CPU tasks, so an
actor (a GPU) never waits on cache writes. All entries of a batch are written at once
(`EmbeddingCache.put_many`: every .bin file, then every metadata.json). An entry that cannot be
written is a warning naming its path, never a failure: its vectors are in the row all the same.
Reads `cache_entry`, `vectors`, `dim`; clears `cache_entry`.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from embedding.cache import EmbeddingCache
from jobs.progress import report_stats, rows_key
from jobs.records import entry_from_json, vectors_from_bytes, with_columns
from jobs.stats import Clock, Notes, RunStats, StoreStats


def store_entries(
    batch: pa.Table, *, cache_uri: str, storage_options: dict[str, Any], collector=None
) -> pa.Table:
    """Write the cache entries a batch's rows carry; report what was written and what was not.
    Works on the three columns it reads (no row dicts), and returns the batch with `cache_entry`
    cleared."""
    clock = Clock()
    # One entry per key: rows of the same bytes (copied pages, empty files) carry the same entry,
    # which is written once and was counted once for each.
    by_key = {
        found.key: found
        for found in (
            entry_from_json(entry, vectors_from_bytes(vectors, dim))
            for entry, vectors, dim in zip(
                *(batch.column(name).to_pylist() for name in ("cache_entry", "vectors", "dim")),
                strict=True,
            )
            if entry is not None
        )
    }
    entries = list(by_key.values())
    warnings = EmbeddingCache(cache_uri, storage_options).put_many(entries) if entries else {}
    stats = StoreStats(
        entries=len(entries) - len(warnings),
        chunks=sum(len(e.text_hashes) for e in entries if e.key not in warnings),
        failures=len(warnings),
        warnings=Notes(tuple(warnings.values())),
        **clock.spent(),
    )
    report_stats(collector, RunStats(store=stats), rows_key("store", batch))
    return with_columns(batch, {"cache_entry": [None] * batch.num_rows})
