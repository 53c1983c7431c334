"""SimHash values and the Manku-style corpus tables."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from indexing import build_simhash_tables, hamming, lookup_simhash, simhash64
from indexing.simhash_tables import MANIFEST, blocks

QUESTION = "How do I enable source generation for System.Text.Json serialization in my project?"


def test_identical_and_normalised_text_has_distance_zero():
    assert hamming(simhash64(QUESTION), simhash64(QUESTION)) == 0
    assert simhash64(QUESTION) == simhash64(
        "  how do I ENABLE source generation for system.text.json serialization in my project  "
    )


def test_one_word_change_is_near_and_unrelated_text_is_far():
    base = simhash64(QUESTION)
    changed = simhash64(QUESTION.replace("enable", "disable"))
    unrelated = simhash64(
        "The quarterly garden club meeting moved to Thursday evening at the library."
    )
    assert 0 < hamming(base, changed) <= 16
    assert hamming(base, unrelated) >= 20
    assert hamming(base, changed) < hamming(base, unrelated)


def test_one_word_changes_stay_far_closer_than_unrelated_texts_on_average():
    rng = random.Random(3)
    vocabulary = [f"word{i}" for i in range(500)]
    near, far = [], []
    for _ in range(200):
        words = [rng.choice(vocabulary) for _ in range(20)]
        edited = list(words)
        edited[rng.randrange(20)] = rng.choice(vocabulary)
        other = [rng.choice(vocabulary) for _ in range(20)]
        base = simhash64(" ".join(words))
        near.append(hamming(base, simhash64(" ".join(edited))))
        far.append(hamming(base, simhash64(" ".join(other))))
    assert sum(near) / len(near) < 10  # a 20-word text: 3 of 39 features change
    assert 28 < sum(far) / len(far) < 36  # unrelated: about half the 64 bits


def test_values_are_unsigned_64_bit_and_textless_input_is_zero():
    values = [simhash64(f"question number {i} about topic {i * 7}") for i in range(200)]
    assert all(0 <= v < 2**64 for v in values)
    assert any(v >= 2**63 for v in values)  # the top bit is used: int64 would not hold these
    assert simhash64("") == simhash64("?!  ...") == 0


def test_same_values_in_processes_with_different_hash_seeds():
    code = (
        "import json, sys; from indexing import simhash64; "
        "print(json.dumps([simhash64(t) for t in json.loads(sys.argv[1])]))"
    )
    texts = [QUESTION, "What is a stripe order?", "Überprüfung der Größe — naïve café"]
    outputs = []
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", code, json.dumps(texts)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        outputs.append(json.loads(done.stdout))
    assert outputs[0] == outputs[1] == [simhash64(t) for t in texts]


def test_blocks_cover_all_bits_once():
    for k in range(0, 8):
        layout = blocks(k)
        assert len(layout) == k + 1
        covered = sorted(bit for b in layout for bit in range(b.start, b.start + b.width))
        assert covered == list(range(64))


def test_tables_are_sharded_per_block_and_prefix():
    entries = [
        (0xFFFF_0000_0000_0001, "a", "golden-reference", 1),
        (0x0000_FFFF_0000_0002, "b", "x", 0),
    ]
    files = build_simhash_tables(entries, k=3)
    manifest = json.loads(files[MANIFEST])
    assert manifest["k"] == 3 and manifest["entries"] == 2
    assert [b["width"] for b in manifest["blocks"]] == [16, 16, 16, 16]
    shards = sorted(p for p in files if p != MANIFEST)
    assert shards == [
        f"_index/simhash/k3/{name}.json"
        for name in ("b0/00", "b0/ff", "b1/00", "b1/ff", "b2/00", "b3/00")
    ]
    assert json.loads(files["_index/simhash/k3/b0/ff.json"])["entries"] == [
        ["ffff000000000001", "a", "golden-reference", 1]
    ]
    # A lookup reads only the manifest and one shard per block.
    reads = []
    lookup_simhash(lambda p: reads.append(p) or files.get(p), entries[0][0])
    assert len(reads) == 1 + 4


hashes = st.integers(min_value=0, max_value=2**64 - 1)


def _flip(value: int, bits: list[int]) -> int:
    for bit in bits:
        value ^= 1 << bit
    return value


@settings(max_examples=60, deadline=None)
@given(
    k=st.integers(min_value=0, max_value=5),
    query=hashes,
    far=st.lists(hashes, max_size=30),
    flips=st.lists(st.lists(st.integers(0, 63), max_size=7, unique=True), max_size=30),
)
def test_lookup_finds_exactly_the_entries_within_k(k, query, far, flips):
    near = [_flip(query, bits) for bits in flips]  # distances 0..7 around the query
    stored = [(h, "topic", f"s{i % 3}", i) for i, h in enumerate(near + far)]
    files = build_simhash_tables(stored, k=k)
    found = {(m.hash, m.topic, m.source, m.index) for m in lookup_simhash(files.get, query)}
    expected = {e for e in stored if hamming(e[0], query) <= k}
    assert found == expected
    for match in lookup_simhash(files.get, query):
        assert match.distance == hamming(match.hash, query) <= k


def test_lookup_without_tables_is_empty_and_max_distance_narrows():
    assert lookup_simhash({}.get, 123) == []
    files = build_simhash_tables([(0b1011, "t", "s", 0), (0b1000, "t", "s", 1)], k=3)
    assert [m.index for m in lookup_simhash(files.get, 0b1011)] == [0, 1]
    assert [m.index for m in lookup_simhash(files.get, 0b1011, max_distance=1)] == [0]


def test_tables_are_byte_deterministic_whatever_the_entry_order():
    entries = [(simhash64(f"q{i}"), f"t{i % 4}", "src", i) for i in range(50)]
    again = build_simhash_tables(list(reversed(entries)) + entries, k=3)
    assert build_simhash_tables(entries, k=3) == again


def test_a_hash_read_back_as_a_signed_int64_is_the_same_hash():
    """hamming(-1, 0) was 1: a hash from a signed int64 column (Parquet, numpy) was compared as
    a negative Python int, not as its 64 bits."""
    big = 2**63 + 5
    signed = int(np.array([big], dtype=np.uint64).view(np.int64)[0])
    assert signed < 0
    assert hamming(signed, big) == 0 and hamming(signed, 5) == 1
    assert hamming(-1, 0) == 64 and hamming(2**64 - 1, 0) == 64
