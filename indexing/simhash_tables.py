"""Corpus SimHash tables for Hamming-distance lookup, after Manku, Jain and Das Sarma (WWW 2007).

The 64 bits are split into k+1 contiguous blocks. Two hashes within distance k agree exactly on at
least one block (pigeonhole), so a lookup reads, for each block, the one shard holding the query's
block value, finds the entries with that exact block value by binary search and then verifies
the full distance. Shards are keyed by block and by the top SHARD_BITS bits of the block value:

    _index/simhash/manifest.json               k, block layout, shard bits, entry count
    _index/simhash/k{k}/b{block}/{prefix}.json one sorted table per (block, prefix)

Hashes inside the shards are 16-digit lower-case hex strings, exact in any JSON reader.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, TypeVar

import numpy as np

from indexing.simhash import BITS, HASH_NAME, hamming

ROOT = "_index/simhash"
MANIFEST = f"{ROOT}/manifest.json"
SHARD_BITS = 8

PromptEntry = tuple[int, str, str, int]  # (simhash, topic, source stem, chunk index)
Hashes = TypeVar("Hashes", int, np.ndarray)  # one hash, or a uint64 array of them


@dataclass(frozen=True)
class Block:
    """Bits [start, start + width) of a hash, bit 0 being the least significant."""

    start: int
    width: int

    def value(self, h: Hashes) -> Hashes:
        """This block's bits of `h` as an int (of each hash of a uint64 array)."""
        return (h >> self.start) & ((1 << self.width) - 1)

    def prefix(self, h: Hashes) -> Hashes:
        """The top SHARD_BITS bits of this block's value (the whole value for narrow blocks)."""
        return self.value(h) >> max(0, self.width - SHARD_BITS)


@dataclass(frozen=True)
class SimhashMatch:
    """One stored prompt hash within the lookup distance of a query hash."""

    hash: int
    distance: int
    topic: str
    source: str
    index: int


def blocks(k: int) -> tuple[Block, ...]:
    """The k+1 blocks, most significant first; widths differ by at most one bit."""
    if not 0 <= k < BITS:
        raise ValueError(f"simhash k must be between 0 and {BITS - 1}, got {k}")
    count = k + 1
    widths = [BITS // count + (1 if i < BITS % count else 0) for i in range(count)]
    result, top = [], BITS
    for width in widths:
        top -= width
        result.append(Block(start=top, width=width))
    return tuple(result)


def shard_path(k: int, block_number: int, block: Block, h: int) -> str:
    """Output-root-relative path of the shard that holds `h` for one block."""
    return _prefix_path(k, block_number, block, block.prefix(h))


def _prefix_path(k: int, block_number: int, block: Block, prefix: int) -> str:
    """Output-root-relative path of one block's shard for one prefix of its value."""
    digits = (min(block.width, SHARD_BITS) + 3) // 4
    return f"{ROOT}/k{k}/b{block_number}/{prefix:0{digits}x}.json"


def _dump(doc: dict) -> bytes:
    return (json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def build_simhash_tables(entries: Iterable[PromptEntry], *, k: int) -> dict[str, bytes]:
    """All corpus table files (manifest and shards) for `entries`, keyed by output-root path, for
    lookups within Hamming distance `k` (a build's `index.simhash_k`, default 6).

    Entries are de-duplicated; each shard is sorted by (block value, hash, topic, source, index).
    Only non-empty shards are written: a missing shard means no entry in it.
    """
    layout = blocks(k)
    unique = sorted(set(entries))
    for h, *_ in unique:
        if not 0 <= h < 1 << BITS:
            raise ValueError(f"simhash {h} is not an unsigned 64-bit value")
    rows = [[f"{h:016x}", topic, source, index] for h, topic, source, index in unique]
    hashes = np.fromiter((h for h, *_ in unique), dtype=np.uint64, count=len(unique))
    shards: dict[str, list[list]] = {}
    for number, block in enumerate(layout):
        # a stable sort keeps `unique`'s order among equal values: (value, entry) order
        order = np.argsort(block.value(hashes), kind="stable")
        prefixes = block.prefix(hashes[order])
        found, firsts = np.unique(prefixes, return_index=True)
        bounds = pairwise([*firsts.tolist(), len(order)])
        for prefix, (start, end) in zip(found.tolist(), bounds, strict=True):
            path = _prefix_path(k, number, block, prefix)
            shards[path] = [rows[position] for position in order[start:end].tolist()]
    files = {
        MANIFEST: _dump(
            {
                "hash": HASH_NAME,
                "k": k,
                "bits": BITS,
                "shard_bits": SHARD_BITS,
                "blocks": [{"start": b.start, "width": b.width} for b in layout],
                "entries": len(unique),
            }
        )
    }
    for path in sorted(shards):
        files[path] = _dump({"entries": shards[path]})
    return files


def _member(data: bytes, key: str, kind: type) -> Any:
    """Member `key` of a table file's JSON object; ValueError when the file is no such object
    (damaged: `[]`, `null`, `{}`, a `k` that is not a number)."""
    doc = json.loads(data)
    value = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(value, kind):
        raise ValueError(f"not a SimHash table: no {kind.__name__} {key!r}")
    return value


_ENTRY_TYPES = [str, str, str, int]  # of a shard's entry: hex hash, topic, source stem, index


def _entries(shard: bytes) -> list[list]:
    """A shard's entries, each `[hex hash, topic, source, index]`; ValueError when it is damaged."""
    rows = _member(shard, "entries", list)
    if not all(isinstance(row, list) and list(map(type, row)) == _ENTRY_TYPES for row in rows):
        raise ValueError("not a SimHash table: an entry is not [hash, topic, source, index]")
    return rows


def lookup_simhash(
    read: Callable[[str], bytes | None], h: int, max_distance: int | None = None
) -> list[SimhashMatch]:
    """Stored entries within Hamming distance of `h`, nearest first.

    `read(path)` returns a file's bytes (output-root-relative path) or None when it does not exist.
    The distance limit is the tables' k, or `max_distance` when that is smaller. ValueError when
    a file read is damaged (not JSON, not a table's shape, a k out of range).
    """
    manifest_bytes = read(MANIFEST)
    if manifest_bytes is None:
        return []
    k = _member(manifest_bytes, "k", int)
    limit = k if max_distance is None else min(k, max_distance)
    found: dict[tuple[int, str, str, int], int] = {}
    for number, block in enumerate(blocks(k)):
        shard = read(shard_path(k, number, block, h))
        if shard is None:
            continue
        rows = _entries(shard)
        hashes = [int(row[0], 16) for row in rows]
        keys = [block.value(x) for x in hashes]
        want = block.value(h)
        for i in range(bisect.bisect_left(keys, want), bisect.bisect_right(keys, want)):
            distance = hamming(hashes[i], h)
            if distance <= limit:
                _, topic, source, index = rows[i]
                found[(hashes[i], topic, source, index)] = distance
    return sorted(
        (
            SimhashMatch(hash=e[0], distance=d, topic=e[1], source=e[2], index=e[3])
            for e, d in found.items()
        ),
        key=lambda m: (m.distance, m.topic, m.source, m.index, m.hash),
    )
