"""How many requests the job's batched reads send to an object store (a moto S3 server whose
requests are counted): one GET per object, found or not, and no HEAD or LIST beside it."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from embedding.cache import CacheKey, EmbeddingCache
from jobs.storage import Storage


def _benchmark_module():
    """benchmarks/pipeline.py, whose counting moto server (`S3`) the benchmark itself uses."""
    path = Path(__file__).parents[1] / "benchmarks" / "pipeline.py"
    spec = importlib.util.spec_from_file_location("mdindex_benchmark_pipeline", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def counted(request) -> Iterator[tuple[str, dict, object]]:
    """A moto server of the module's own with a bucket, its storage options, its counter. Moto's
    buckets are one store in a process: the bucket is named for the module (test_jobs_runs
    imports this fixture, and pytest-xdist can run both modules in one worker)."""
    s3 = _benchmark_module().S3()
    bucket = s3.new_bucket(request.module.__name__.rpartition(".")[2].replace("_", "-"))
    try:
        yield bucket, s3.storage_options, s3.counter
    finally:
        s3.server.stop()


def test_storage_read_many_sends_one_get_per_object(counted):
    bucket, options, counter = counted
    store = Storage(f"s3://{bucket}/in", options=options)
    store.write_many({f"t/{i}.md": f"page {i}".encode() for i in range(5)})
    counter.take()
    found = store.read_many([f"t/{i}.md" for i in range(5)] + ["t/missing.md"])
    assert [found[f"t/{i}.md"] for i in range(5)] == [f"page {i}".encode() for i in range(5)]
    assert isinstance(found["t/missing.md"], FileNotFoundError)
    assert counter.take() == {"GET": 6}


def test_storage_reads_one_file_in_one_get(counted):
    # the build's own reads of its output (the manifest, the report, a topic's tables): s3fs's
    # cat_file sent a HEAD before each GET, and a HEAD and a LIST for a file that is not there
    bucket, options, counter = counted
    store = Storage(f"s3://{bucket}/out", options=options)
    store.write_many({"_reindex/manifest.json": b"{}"})
    counter.take()
    assert store.read_bytes("_reindex/manifest.json") == b"{}"
    assert store.read_optional("_reindex/report.json") is None
    with pytest.raises(FileNotFoundError):
        store.read_bytes("t/missing.parquet")
    assert counter.take() == {"GET": 3}


def test_cache_lookups_send_one_get_per_object(counted):
    import numpy as np

    from embedding.cache import CacheEntry

    bucket, options, counter = counted
    cache = EmbeddingCache(f"s3://{bucket}/cache", storage_options=options)
    stored = CacheKey("semantic-x", "model-y", "a" * 64)
    cache.put(CacheEntry(stored, ("b" * 64, "c" * 64), np.ones((2, 4), dtype=np.float32)))
    counter.take()
    missing = CacheKey("semantic-x", "model-y", "d" * 64)
    hit, miss = cache.get_many([stored, missing], dim=4)
    assert hit is not None and hit.vectors.shape == (2, 4) and miss is None
    # two metadata.json files, then the stored entry's two vectors
    assert counter.take() == {"GET": 4}


def test_lookups_in_a_cold_cache_ask_once_per_model_folder_and_read_nothing(counted):
    import numpy as np

    from embedding.cache import CacheEntry

    bucket, options, counter = counted
    cache = EmbeddingCache(f"s3://{bucket}/cold-cache", storage_options=options)
    keys = [CacheKey("semantic-x", "model-y", f"{i:02x}" * 32) for i in range(40)]
    counter.take()
    assert cache.get_many(keys, dim=4) == [None] * 40
    asked = counter.take()
    assert "GET" not in asked and 1 <= sum(asked.values()) <= 2  # s3fs's exists: HEAD, LIST
    assert cache.get_many(keys[:5], dim=4) == [None] * 5
    assert counter.take() == {}  # the folder was asked about once

    # Written by another object, the entry stays a miss for this one, until this one writes
    # into the folder itself.
    other = EmbeddingCache(f"s3://{bucket}/cold-cache", storage_options=options)
    other.put(CacheEntry(keys[1], ("c" * 64,), np.ones((1, 4), dtype=np.float32)))
    counter.take()
    assert cache.get_many(keys[1:2], dim=4) == [None] and counter.take() == {}
    cache.put(CacheEntry(keys[0], ("b" * 64,), np.ones((1, 4), dtype=np.float32)))
    counter.take()
    found = cache.get_many(keys[:2], dim=4)
    assert [entry.vectors.shape for entry in found] == [(1, 4), (1, 4)]
    assert counter.take() == {"GET": 4}  # two metadata.json files, two vectors
