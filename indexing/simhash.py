"""64-bit SimHash (Charikar) of a text over word and word-bigram features."""

from __future__ import annotations

import hashlib
import re
import unicodedata

import numpy as np

BITS = 64
_MASK64 = (1 << BITS) - 1  # a hash's 64 bits, whatever the sign it was read back with
HASH_NAME = "simhash64/nfkc-casefold-words+bigrams/blake2b-8/v1"
_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """The normalised tokens: NFKC, case-folded, runs of word characters."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def features(text: str) -> list[str]:
    """Word tokens followed by word bigrams ("a b"), the SimHash features of `text`."""
    tokens = words(text)
    return tokens + [f"{a} {b}" for a, b in zip(tokens, tokens[1:], strict=False)]


def feature_hash(feature: str) -> int:
    """A fixed 64-bit hash of one feature: BLAKE2b with an 8-byte digest, read big-endian."""
    return int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "big")


def simhash64(text: str) -> int:
    """The 64-bit SimHash of `text` as an unsigned int; 0 for text without words.

    Every feature occurrence votes +1 for each bit set in its hash and -1 for each bit clear;
    bit i of the result is set when its vote total is positive (bit 0 is the least significant).
    """
    feats = features(text)
    if not feats:
        return 0
    hashes = np.array([feature_hash(f) for f in feats], dtype=np.uint64)
    shifts = np.arange(BITS, dtype=np.uint64)
    set_bits = ((hashes[:, None] >> shifts) & np.uint64(1)).sum(axis=0, dtype=np.int64)
    votes = 2 * set_bits - len(feats)
    return sum(1 << int(bit) for bit in np.flatnonzero(votes > 0))


def hamming(a: int, b: int) -> int:
    """The number of bit positions where two 64-bit values differ, each read as its 64 bits: a
    hash read back as a signed int64 (a Parquet or numpy column) is the same hash (-1 and 0
    differed in 1 bit, not 64)."""
    return ((a ^ b) & _MASK64).bit_count()
