"""The content-hash cache and embed_with_cache with the real MiniLM: hits, every kind of damage,
partial reuse of an edited document, one embedder call per batch, concurrent writers, moto S3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace

import fsspec
import numpy as np
import pytest

from embedding import (
    CacheEntry,
    CacheKey,
    DocRequest,
    Documents,
    Embedder,
    EmbeddingCache,
    chunk_offsets,
    embed_documents,
    embed_uncached,
    embed_with_cache,
    text_hashes,
)
from embedding.documents import Remembered
from tests.embedding_support import embedder, sha

STRATEGY = "semantic-250-750"
TEXTS = tuple(
    f"Section {i}: how the {['router', 'cache', 'worker'][i % 3]} handles case {i}."
    for i in range(6)
)


# Padded tokens per micro-batch: an eighth of the CPU default's arithmetic. These tests are about
# the cache; the micro-batch shape's own bits are test_embedding_model's.
SMALL_BUDGET = 256


def minilm() -> Embedder:
    """MiniLM on the CPU in fp32, in micro-batches of `SMALL_BUDGET` padded tokens."""
    return embedder(dtype="fp32", token_budget=SMALL_BUDGET)


def request(texts=TEXTS, source="doc-a", previous=None) -> DocRequest:
    return DocRequest(STRATEGY, sha(source), tuple(texts), sha(previous) if previous else None)


@pytest.fixture
def cache(tmp_path) -> EmbeddingCache:
    return EmbeddingCache(str(tmp_path / "cache"))


def entry_path(cache: EmbeddingCache, source="doc-a") -> str:
    return cache.entry_path(CacheKey(STRATEGY, minilm().key, sha(source)))


def test_miss_then_hit_returns_bit_identical_vectors(cache):
    [first] = embed_with_cache(minilm(), cache, [request()])
    assert (first.cache_hit, first.reused, first.embedded) == (False, 0, len(TEXTS))
    [second] = embed_with_cache(minilm(), cache, [request()])
    assert (second.cache_hit, second.reused, second.embedded) == (True, 0, 0)
    assert second.vectors.dtype == np.float32
    assert second.vectors.tobytes() == first.vectors.tobytes()
    np.testing.assert_allclose(first.vectors, minilm().embed(list(TEXTS)), atol=1e-6)


def test_embed_uncached_writes_nothing_and_hands_back_the_entries_to_write(cache):
    model = minilm()
    started = time.perf_counter()
    done = embed_uncached(model, cache, [request(), request(TEXTS[:2] + ("new text",), "doc-b")])
    took = time.perf_counter() - started
    [miss, partial] = done.results
    # the model's work: every distinct text once, in token slots at least as many as its tokens
    alone = model.embed_with_stats([*TEXTS, "new text"])
    assert (done.tokens, done.padded_tokens) == (alone.tokens, alone.padded_tokens)
    assert 0 < done.tokens <= done.padded_tokens
    assert 0 < done.model_seconds <= took  # the model held, within the call
    assert not cache.fs.exists(entry_path(cache)) and not cache.fs.exists(cache.root)
    assert miss.entry.key == CacheKey(STRATEGY, model.key, sha("doc-a"))
    assert miss.entry.text_hashes == text_hashes(TEXTS)
    assert miss.entry.vectors.tobytes() == miss.vectors.tobytes()
    assert cache.put_many([miss.entry, partial.entry]) == {}  # written apart, e.g. on a CPU worker
    again = embed_uncached(model, cache, [request(), request(TEXTS[:2] + ("new text",), "doc-b")])
    [hit, hit_b] = again.results
    # all from the cache: no model work
    assert (again.tokens, again.padded_tokens, again.model_seconds) == (0, 0, 0.0)
    assert (hit.cache_hit, hit.entry, hit_b.cache_hit) == (True, None, True)
    assert hit.vectors.tobytes() == miss.vectors.tobytes()
    [no_cache] = embed_uncached(model, None, [request()]).results
    assert no_cache.entry is None and no_cache.vectors.tobytes() == miss.vectors.tobytes()


def test_layout_and_metadata_follow_seed_000(cache):
    embed_with_cache(minilm(), cache, [request()])
    folder = entry_path(cache)
    assert folder.endswith(f"/{STRATEGY}/{minilm().key}/{sha('doc-a')[:16]}")
    names = sorted(p.rsplit("/", 1)[-1] for p in cache.fs.ls(folder, detail=False))
    assert names == sorted(["metadata.json"] + [f"chunk-{i}.bin" for i in range(len(TEXTS))])
    meta = json.loads(cache.fs.cat(f"{folder}/metadata.json"))
    assert meta["model"] == minilm().key and meta["strategy"] == STRATEGY
    assert meta["source_hash"] == sha("doc-a") and meta["chunk_count"] == len(TEXTS)
    assert meta["dim"] == 384 and len(meta["chunk_hashes"]) == len(TEXTS)
    raw = cache.fs.cat(f"{folder}/chunk-2.bin")
    assert len(raw) == 384 * 4
    [hit] = embed_with_cache(minilm(), cache, [request()])
    assert np.frombuffer(raw, dtype="<f4").tobytes() == hit.vectors[2].tobytes()


def _truncate_bin(fs, folder):
    fs.pipe(f"{folder}/chunk-3.bin", fs.cat(f"{folder}/chunk-3.bin")[:-4])


def _wrong_dimension_bin(fs, folder):
    fs.pipe(f"{folder}/chunk-3.bin", np.zeros(383, dtype="<f4").tobytes())


def _damaged_bin(fs, folder):
    vector = np.frombuffer(fs.cat(f"{folder}/chunk-1.bin"), dtype="<f4").copy()
    vector[0] += 0.5
    fs.pipe(f"{folder}/chunk-1.bin", vector.tobytes())


def _edit_metadata(**changes):
    def edit(fs, folder):
        meta = json.loads(fs.cat(f"{folder}/metadata.json"))
        meta.update(changes)
        fs.pipe(f"{folder}/metadata.json", json.dumps(meta).encode())

    return edit


def _remove(name):
    return lambda fs, folder: fs.rm(f"{folder}/{name}")


def _garbage_metadata(fs, folder):
    fs.pipe(f"{folder}/metadata.json", b'{"model": "truncated')


def _deeply_nested_metadata(fs, folder):  # json.loads raised RecursionError
    fs.pipe(f"{folder}/metadata.json", b"[" * 100_000 + b"]" * 100_000)


DAMAGE = {
    "truncated bin": _truncate_bin,
    "bin of another dimension": _wrong_dimension_bin,
    "damaged bin": _damaged_bin,
    "metadata dim": _edit_metadata(dim=383),
    "metadata model": _edit_metadata(model="other-model-fp32"),
    "metadata strategy": _edit_metadata(strategy="semantic-100-200"),
    "metadata chunk count": _edit_metadata(chunk_count=5),
    "metadata source hash": _edit_metadata(source_hash=sha("other document")),
    "metadata not json": _garbage_metadata,
    "metadata nested past the stack": _deeply_nested_metadata,
    "metadata truncated row not a number": _edit_metadata(truncated=[float("inf")]),  # Overflow
    "missing bin": _remove("chunk-4.bin"),
    "missing metadata": _remove("metadata.json"),
}


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_damaged_entry_is_a_miss_and_is_regenerated(cache, damage, caplog):
    [first] = embed_with_cache(minilm(), cache, [request()])
    damage(cache.fs, entry_path(cache))
    key = CacheKey(STRATEGY, minilm().key, sha("doc-a"))
    with caplog.at_level("WARNING", logger="embedding.cache"):
        assert cache.get(key, 384) is None
    if damage is not DAMAGE["missing metadata"]:  # a plain miss is not damage
        assert f"cache entry {key.relpath}:" in caplog.text and "recomputing" in caplog.text
    [again] = embed_with_cache(minilm(), cache, [request()])
    assert not again.cache_hit
    np.testing.assert_allclose(again.vectors, first.vectors, atol=1e-6)
    regenerated = cache.get(key, 384)
    assert regenerated is not None and regenerated.text_hashes == text_hashes(TEXTS)
    [hit] = embed_with_cache(minilm(), cache, [request()])
    assert hit.cache_hit and hit.vectors.tobytes() == again.vectors.tobytes()


def test_wrong_dimension_request_is_a_miss(cache):
    embed_with_cache(minilm(), cache, [request()])
    assert cache.get(CacheKey(STRATEGY, minilm().key, sha("doc-a")), 768) is None


def test_other_model_or_strategy_never_sees_the_entry(cache):
    embed_with_cache(minilm(), cache, [request()])
    other_model = CacheKey(
        STRATEGY, embedder(dtype="fp32", max_length=16, token_budget=SMALL_BUDGET).key, sha("doc-a")
    )
    other_strategy = CacheKey("semantic-100-200", minilm().key, sha("doc-a"))
    assert cache.get(other_model, 384) is None and cache.get(other_strategy, 384) is None


def test_edited_document_reembeds_only_changed_chunks(cache):
    old = tuple(
        f"Paragraph {i} explains option {i} of the build command in detail." for i in range(40)
    )
    [before] = embed_with_cache(minilm(), cache, [request(old, "v1")])
    new = list(old)
    new[10:13] = ["An edited paragraph about caching.", "A new note on retries.", "Another one."]
    new.append("A paragraph added at the end.")
    [after] = embed_with_cache(minilm(), cache, [request(new, "v2", previous="v1")])
    assert (after.cache_hit, after.reused, after.embedded) == (False, 37, 4)
    unchanged = [i for i in range(40) if not 10 <= i < 13]
    assert after.vectors[unchanged].tobytes() == before.vectors[unchanged].tobytes()
    np.testing.assert_allclose(after.vectors, minilm().embed(new), atol=1e-5)
    [hit] = embed_with_cache(minilm(), cache, [request(new, "v2")])
    assert hit.cache_hit and hit.vectors.tobytes() == after.vectors.tobytes()


def test_a_document_without_chunks_leaves_the_entry_of_its_bytes_alone(cache):
    """A draft chunks to nothing by default and to its text with `sources.include_drafts`, under
    one cache key: a build without chunks wrote an empty entry over the drafts' vectors, so each
    switch of the setting embedded the drafts again. A document without chunks writes no entry,
    on a warm cache or a cold one."""
    model = minilm()
    [included] = embed_with_cache(model, cache, [request(TEXTS, "draft")])
    [left_out, empty] = embed_with_cache(model, cache, [request((), "draft"), request((), "e")])
    assert (left_out.entry, empty.entry, left_out.vectors.shape) == (None, None, (0, 384))
    [again] = embed_with_cache(model, cache, [request(TEXTS, "draft")])
    assert (again.cache_hit, again.embedded) == (True, 0)
    assert again.vectors.tobytes() == included.vectors.tobytes()
    assert not cache.fs.exists(entry_path(cache, "e"))


def test_a_batch_is_embedded_in_one_call_in_request_order(cache, monkeypatch):
    model = minilm()
    embed_with_cache(model, cache, [request(TEXTS[:2], "warm")])
    calls: list[int] = []
    real = model.embed_encoded

    def counting(encoded, **options):
        calls.append(len(encoded))
        return real(encoded, **options)

    monkeypatch.setattr(model, "embed_encoded", counting)
    requests = [
        request(TEXTS[:2], "warm"),  # a hit
        request(TEXTS[2:5], "b"),
        request((TEXTS[5], TEXTS[2]), "c"),  # TEXTS[2] is shared with "b": embedded once
        request((), "empty"),
    ]
    results = embed_with_cache(model, cache, requests)
    assert calls == [4]
    assert [r.cache_hit for r in results] == [True, False, False, True]  # empty: no entry
    assert [r.vectors.shape for r in results] == [(2, 384), (3, 384), (2, 384), (0, 384)]
    for req, result in zip(requests, results, strict=True):
        if req.texts:
            np.testing.assert_allclose(result.vectors, model.embed(list(req.texts)), atol=1e-5)


def test_without_a_cache_everything_is_embedded():
    [result] = embed_with_cache(minilm(), None, [request()])
    assert (result.cache_hit, result.embedded) == (False, len(TEXTS))


def test_truncated_chunks_are_counted_on_miss_and_on_hit(cache):
    long = " ".join(f"token{i}" for i in range(500))
    [miss] = embed_with_cache(minilm(), cache, [request((TEXTS[0], long), "long")])
    [hit] = embed_with_cache(minilm(), cache, [request((TEXTS[0], long), "long")])
    assert miss.truncated == 1 and hit.cache_hit and hit.truncated == 1


def test_concurrent_writers_of_one_entry_never_expose_a_partial_entry(cache):
    vectors = minilm().embed(list(TEXTS))
    key = CacheKey(STRATEGY, minilm().key, sha("contended"))
    entry = CacheEntry(key, text_hashes(TEXTS), vectors)
    stop = time.monotonic() + 2.0
    seen: list[bool] = []
    partial: list[bytes] = []  # checked here: an assert in a thread would end only the thread

    def write():
        while time.monotonic() < stop:
            cache.put(entry)

    def read():
        while time.monotonic() < stop:
            got = cache.get(key, 384)
            seen.append(got is not None)
            if got is not None and got.vectors.tobytes() != vectors.tobytes():
                partial.append(got.vectors.tobytes())

    threads = [threading.Thread(target=f) for f in (write, write, read)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert any(seen)
    assert partial == []
    assert cache.get(key, 384).vectors.tobytes() == vectors.tobytes()
    leftovers = [p for p in cache.fs.ls(cache.entry_path(key), detail=False) if ".tmp-" in p]
    assert leftovers == []


def test_bad_keys_are_rejected():
    with pytest.raises(ValueError, match="sha256"):
        CacheKey(STRATEGY, "model", "abc")
    with pytest.raises(ValueError, match="filesystem-safe"):
        CacheKey("../escape", "model", sha("x"))
    with pytest.raises(TypeError, match="tuple of str"):
        DocRequest(STRATEGY, sha("x"), ("ok", 3))


def test_documents_whose_offsets_go_back_are_refused(cache):
    """A negative chunk count (`chunk_offsets([3, -1])`) passed the check of the first and last
    offsets, and `embed_documents` ended in "IndexError: index 3 is out of bounds"."""
    texts = ["one text", "two"]
    with pytest.raises(ValueError, match="offsets must not decrease"):
        Documents(STRATEGY, [sha("a"), sha("b")], [None, None], texts, chunk_offsets([3, -1]))
    good = Documents(STRATEGY, [sha("a"), sha("b")], [None, None], texts, chunk_offsets([2, 0]))
    [found] = embed_documents(minilm(), cache, [good]).results
    assert found.embedded.tolist() == [2, 0] and found.vectors.shape[0] == 2


@pytest.mark.parametrize("root", ["", None])
def test_an_empty_cache_root_is_refused(root, tmp_path, monkeypatch):
    """`EmbeddingCache("")` (an unset variable) put its entries in the current directory, and
    None was "argument of type 'NoneType' is not iterable"."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=f"the cache root must be a path or URI, got {root!r}"):
        embed_with_cache(minilm(), EmbeddingCache(root), [request()])
    assert list(tmp_path.iterdir()) == []


def test_memory_filesystem_cache():
    cache = EmbeddingCache("memory://embedding-cache-test/root")
    [first] = embed_with_cache(minilm(), cache, [request()])
    [hit] = embed_with_cache(minilm(), cache, [request()])
    assert hit.cache_hit and hit.vectors.tobytes() == first.vectors.tobytes()
    fsspec.filesystem("memory").rm("/embedding-cache-test", recursive=True)


def test_cache_on_moto_s3(s3_server):
    bucket = s3_server.make_bucket("embedding-cache")
    cache = EmbeddingCache(f"{bucket}/out/.embedding-cache", s3_server.storage_options)
    requests = [request(TEXTS[i : i + 2], f"doc-{i}") for i in range(5)]
    first = embed_with_cache(minilm(), cache, requests)
    assert not any(r.cache_hit for r in first)
    fresh = EmbeddingCache(f"{bucket}/out/.embedding-cache", s3_server.storage_options)
    second = embed_with_cache(minilm(), fresh, requests)
    assert all(r.cache_hit for r in second)
    for a, b in zip(first, second, strict=True):
        assert a.vectors.tobytes() == b.vectors.tobytes()
    s3 = s3_server.filesystem()
    folder = fresh.entry_path(CacheKey(STRATEGY, minilm().key, sha("doc-3")))
    s3.pipe(f"{folder}/chunk-1.bin", s3.cat(f"{folder}/chunk-1.bin")[:100])  # a truncated object
    third = embed_with_cache(minilm(), fresh, requests)
    assert [r.cache_hit for r in third] == [True, True, True, False, True]
    np.testing.assert_allclose(third[3].vectors, first[3].vectors, atol=1e-6)
    assert all(r.cache_hit for r in embed_with_cache(minilm(), fresh, requests))


@pytest.mark.parametrize("store", ["local", "s3"])
def test_a_cache_under_a_folder_named_with_two_colons_stays_under_it(tmp_path, s3_server, store):
    """fsspec's `url_to_fs` reads `::` as a chain of filesystems: the cache of an output folder
    named `docs::v2` was read and written in `docs`, a folder beside the output (the build's
    own storage took the name whole)."""
    if store == "local":
        fs, top = fsspec.filesystem("file"), str(tmp_path)
        options = None
    else:
        fs, top = s3_server.filesystem(), s3_server.make_bucket("embedding-cache-colons")
        options = s3_server.storage_options
    root = f"{top}/docs::v2/.embedding-cache"
    [first] = embed_with_cache(minilm(), EmbeddingCache(root, options), [request()])
    written = fs.find(fs._strip_protocol(top))
    assert written and all("/docs::v2/.embedding-cache/" in path for path in written)
    [again] = embed_with_cache(minilm(), EmbeddingCache(root, options), [request()])
    assert again.cache_hit and again.vectors.tobytes() == first.vectors.tobytes()


def test_a_cache_on_s3_finds_entries_another_client_wrote_after_a_listing(s3_server):
    """A new `EmbeddingCache` in the same process (the next build's actor in a kept worker) asks
    the store whether a model folder exists: fsspec's filesystem, one per process and options,
    does not answer from a listing made before another process wrote the folder."""
    bucket = s3_server.make_bucket("embedding-cache-listings")
    root = f"{bucket}/out/.embedding-cache"
    key = CacheKey(STRATEGY, minilm().key, sha("doc-a"))
    first = EmbeddingCache(root, s3_server.storage_options)
    folder = f"{first.root}/{STRATEGY}"
    first.fs.pipe(f"{folder}/other-model/x", b"")  # the strategy folder exists
    assert first.fs.ls(folder) == [f"{folder}/other-model"]
    assert first.get(key, dim=384) is None
    writer = EmbeddingCache(root, {**s3_server.storage_options, "skip_instance_cache": True})
    [written] = embed_with_cache(minilm(), writer, [request()])
    found = EmbeddingCache(root, s3_server.storage_options).get(key, dim=384)
    assert found is not None and found.vectors.tobytes() == written.vectors.tobytes()


def test_queries_are_cached_apart_from_passages(cache):
    questions = ("How do I cache embeddings?", "What does the router do?")
    model = minilm()
    passage = DocRequest(STRATEGY, sha("qa"), questions)
    query = DocRequest("questions", sha("qa"), questions, query=True)
    [as_passage, as_query] = embed_with_cache(model, cache, [passage, query])
    assert as_query.embedded == 2 and as_passage.embedded == 2
    np.testing.assert_allclose(
        as_query.vectors, model.embed(list(questions), query=True), atol=1e-5
    )
    [hit] = embed_with_cache(model, cache, [query])
    assert hit.cache_hit and hit.vectors.tobytes() == as_query.vectors.tobytes()
    assert cache.get(CacheKey("questions", model.query_key, sha("qa")), model.dim) is not None
    assert cache.get(CacheKey("questions", model.key, sha("qa")), model.dim) is None


def test_two_entries_with_swapped_files_are_both_recomputed(cache):
    requests = [request(TEXTS[:3], "doc-a"), request(TEXTS[3:], "doc-b")]
    first = embed_with_cache(minilm(), cache, requests)
    a, b = entry_path(cache, "doc-a"), entry_path(cache, "doc-b")
    for name in ("chunk-0.bin", "metadata.json"):
        data_a, data_b = cache.fs.cat(f"{a}/{name}"), cache.fs.cat(f"{b}/{name}")
        cache.fs.pipe({f"{a}/{name}": data_b, f"{b}/{name}": data_a})
    again = embed_with_cache(minilm(), cache, requests)
    assert [r.cache_hit for r in again] == [False, False]
    for before, after in zip(first, again, strict=True):
        np.testing.assert_allclose(after.vectors, before.vectors, atol=1e-6)


def test_an_entry_path_that_is_a_directory_is_a_warning(cache, caplog):
    folder = entry_path(cache)
    cache.fs.makedirs(f"{folder}/metadata.json/x")
    with caplog.at_level("WARNING", logger="embedding.cache"):
        [result] = embed_with_cache(minilm(), cache, [request()])
    assert result.embedded == len(TEXTS) and result.vectors.shape == (len(TEXTS), 384)
    assert result.cache_warning.startswith(f"cache entry {folder} not written: Is a directory")
    assert f"{folder}/metadata.json" in result.cache_warning and folder in caplog.text
    assert [p.rsplit("/", 1)[-1] for p in cache.fs.ls(folder)] == ["metadata.json"]  # no .bin


def test_a_write_failing_midway_leaves_no_half_written_entry(tmp_path):
    """A real kernel write failure (RLIMIT_FSIZE: EFBIG past 1,000 bytes, as a full disk stops a
    write), in a child process so that the limit binds nothing else."""
    script = f"""
import resource, signal, numpy as np
from embedding import CacheEntry, CacheKey, EmbeddingCache
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
cache = EmbeddingCache({str(tmp_path / "cache")!r})
small = CacheEntry(CacheKey("s", "m", "{"1" * 64}"), ("{"a" * 64}",), np.ones((1, 8), "f4"))
big = CacheEntry(CacheKey("s", "m", "{"2" * 64}"), ("{"b" * 64}",), np.ones((1, 384), "f4"))
print(cache.put_many([small, big]))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    cache = EmbeddingCache(str(tmp_path / "cache"))
    big = cache.entry_path(CacheKey("s", "m", "2" * 64))
    assert f"cache entry {big} not written: File too large ({big}/chunk-0.bin)" in done.stdout
    assert cache.fs.ls(big) == []  # the half-written chunk-0.bin was removed
    assert cache.get(CacheKey("s", "m", "1" * 64), 8) is not None  # the small one was written


def test_links_inside_the_cache_never_lead_writes_out(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept.bin").write_bytes(b"precious")
    cache = EmbeddingCache(str(tmp_path / "cache"))
    model = minilm()
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / STRATEGY).symlink_to(outside)
    [result] = embed_with_cache(model, cache, [request()])
    assert "outside the cache root" in result.cache_warning and result.embedded == len(TEXTS)
    other = EmbeddingCache(str(tmp_path / "other"))
    folder = entry_path(other)
    other.fs.makedirs(folder)
    os.symlink(outside / "kept.bin", f"{folder}/chunk-0.bin")
    [linked] = embed_with_cache(model, other, [request()])
    assert "not written" in linked.cache_warning and "chunk-0.bin" in linked.cache_warning
    assert sorted(p.name for p in outside.iterdir()) == ["kept.bin"]
    assert (outside / "kept.bin").read_bytes() == b"precious"


def test_an_entry_folder_that_is_a_link_is_resolved_on_its_own(tmp_path):
    """The model folder is resolved once per call, but each entry's own folder that is a link is
    followed: one leading out of the root is refused, one staying inside is written through."""
    outside = tmp_path / "outside"
    outside.mkdir()
    cache = EmbeddingCache(str(tmp_path / "cache"))
    model = minilm()
    out_of_root = entry_path(cache, "doc-out")
    inside = entry_path(cache, "doc-in")
    cache.fs.makedirs(os.path.dirname(out_of_root))
    os.symlink(outside, out_of_root)
    kept = tmp_path / "cache" / "kept-inside"
    kept.mkdir()
    os.symlink(kept, inside)
    results = embed_with_cache(
        model, cache, [request(source="doc-out"), request(source="doc-in"), request()]
    )
    assert f"cache entry {out_of_root} not written: it resolves to {outside}" in (
        results[0].cache_warning
    )
    assert [r.cache_warning for r in results[1:]] == ["", ""]
    assert list(outside.iterdir()) == []
    assert (kept / "metadata.json").is_file()
    [hit] = embed_with_cache(model, cache, [request(source="doc-in")])
    assert hit.cache_hit


def test_embed_documents_tells_its_progress_per_micro_batch():
    """`progress` hears each micro-batch's passages as it is embedded (a build's progress line
    counts a long call's chunks as they go); a text twice in the call is embedded, and told,
    once; questions, embedded as queries, are no chunks: not told."""
    texts = [" ".join(["word"] * n) for n in (3, 40, 120, 300)] + [TEXTS[0], TEXTS[0]]
    docs = Documents(STRATEGY, [sha("progress")], [None], texts, chunk_offsets([len(texts)]))
    asked = Documents(STRATEGY, [sha("qa")], [None], ["Why?"], chunk_offsets([1]), query=True)
    told: list[int] = []
    model = minilm()
    found, _ = embed_documents(model, None, [docs, asked], progress=told.append).results
    assert len(told) > 1 and sum(told) == len(set(texts)) == len(texts) - 1
    assert int(found.embedded.sum()) == len(texts)


def test_texts_remembered_from_an_earlier_call_are_not_embedded_again_and_keep_their_bits():
    """A versioned docs tree's copies of a page land in different calls of a build, before its
    cache entries are written: each copy was embedded again (1,032 chunks for 349 texts). With
    `Remembered` the later call embeds none of the texts an earlier one did, counts them in
    `reused`, and its vectors and cut flags are those a call without it computes, bit for bit
    (fixed-shape micro-batches); queries are remembered apart from passages."""
    model = minilm()
    long = " ".join(["word"] * 300)  # cut to the model window: the flag is remembered too
    first = [*TEXTS[:4], long]
    copy = [TEXTS[3], "An edited paragraph of version two.", long, TEXTS[0], TEXTS[1]]

    def call(texts, source, memory, query=False):
        group = Documents(STRATEGY, [sha(source)], [None], texts, chunk_offsets([len(texts)]))
        group = replace(group, query=query) if query else group
        told: list[int] = []
        done = embed_documents(model, None, [group], progress=told.append, remembered=memory)
        [found] = done.results
        return found, sum(told)

    memory = Remembered()
    call(first, "docs/a.md", memory)
    found, told = call(copy, "versioned_docs/version-2.0/a.md", memory)
    alone, _ = call(copy, "versioned_docs/version-2.0/a.md", None)
    assert (told, int(found.embedded.sum()), int(found.reused.sum())) == (1, 1, 4)
    assert found.vectors.tobytes() == alone.vectors.tobytes()
    assert found.cut.tolist() == alone.cut.tolist() == [False, False, True, False, False]
    assert found.text_hashes == alone.text_hashes
    asked, _ = call([TEXTS[0]], "qa", memory, query=True)
    assert int(asked.embedded.sum()) == 1
    small = Remembered(max_bytes=3 * (4 * model.dim + Remembered.ENTRY_BYTES))
    call(first, "docs/a.md", small)
    assert len(small) == 3 and small.get(model.key, text_hashes([TEXTS[0]])[0]) is None
