"""Similarity to a baseline chunk and the build-time MMR stripe order (seed 000 section 4)."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

import numpy as np

from indexing.vectors import unit_rows

MIN_STRIPED = 8


def stripe_factor(count: int) -> int:
    """The stripe factor for a source of `count` chunks (baseline included).

    1 below 8 chunks, else ceil(sqrt(count)). This meets every example of seed 000
    (7->1, 8->3, 12->4, 16->4, 25->5), which round(sqrt(count)) does not (12 -> 3); the seed's
    bounds max(2, min(count/2, .)) never bind for count >= 8, so they are left out.
    """
    if count < MIN_STRIPED:
        return 1
    return math.isqrt(count - 1) + 1


def similarities(vectors: np.ndarray, baseline: int) -> list[float]:
    """Cosine similarity of every row of `vectors` to row `baseline`, rounded to 4 decimals.

    Computed in float64; a zero vector has similarity 0. Rounding happens before any ranking so
    that the published similarities reproduce the published orders.
    """
    unit = unit_rows(vectors)
    return [round(float(x), 4) + 0.0 for x in unit @ unit[baseline]]


def rank(scores: Sequence[float], exclude: Collection[int]) -> list[int]:
    """Indices not in `exclude`, by score descending, ties by index ascending."""
    return sorted(
        (i for i in range(len(scores)) if i not in exclude), key=lambda i: (-scores[i], i)
    )


def stripe(ranked: Sequence[int], factor: int) -> list[int]:
    """Stripe s (0-based) takes ranked positions s, s+factor, s+2*factor...; stripes joined."""
    return [ranked[p] for s in range(factor) for p in range(s, len(ranked), factor)]


def stripe_order(scores: Sequence[float], baselines: Collection[int]) -> list[int]:
    """The stripe order of a source: rank the non-baseline chunks, stripe by the source's factor."""
    return stripe(rank(scores, baselines), stripe_factor(len(scores)))
