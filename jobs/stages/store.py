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
from jobs.progress import report_stats
from jobs.records import entry_from_json, to_table, vectors_from_bytes
from jobs.stats import Clock, Notes, RunStats, StoreStats


def store_entries(
    batch: pa.Table, *, cache_uri: str, storage_options: dict[str, Any], collector=None
) -> pa.Table:
    """Write the cache entries a batch's rows carry; report what was written and what was not."""
    clock = Clock()
    rows = batch.to_pylist()
    entries = [
        entry_from_json(row["cache_entry"], vectors_from_bytes(row["vectors"], row["dim"]))
        for row in rows
        if row["cache_entry"] is not None
    ]
    warnings = EmbeddingCache(cache_uri, storage_options).put_many(entries) if entries else {}
    for row in rows:
        row["cache_entry"] = None
    stats = StoreStats(
        entries=len(entries) - len(warnings),
        chunks=sum(len(e.text_hashes) for e in entries if e.key not in warnings),
        failures=len(warnings),
        warnings=Notes(tuple(warnings.values())),
        **clock.spent(),
    )
    report_stats(collector, RunStats(store=stats))
    return to_table(rows)
