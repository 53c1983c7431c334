"""Seed 000 section 4: stripe factors, the 12-chunk stripe pattern, ranking and baselines."""

from __future__ import annotations

import numpy as np
import pytest
from indexing_support import ranked_vectors, source, topic_input

from indexing import IndexSettings, build_topic
from indexing.stripes import rank, similarities, stripe, stripe_factor, stripe_order


@pytest.mark.parametrize(("count", "factor"), [(7, 1), (8, 3), (12, 4), (16, 4), (25, 5)])
def test_seed_factor_table(count, factor):
    assert stripe_factor(count) == factor


def test_factor_stays_within_the_seed_bounds():
    for count in range(8, 2000):
        factor = stripe_factor(count)
        assert 2 <= factor <= count // 2
        assert (factor - 1) ** 2 < count <= factor**2  # ceil(sqrt(count))


def test_below_eight_chunks_is_plain_similarity_order():
    scores = [1.0, 0.2, 0.9, 0.5, 0.9, 0.1, 0.7]  # 7 chunks: factor 1
    assert stripe_order(scores, {0}) == [2, 4, 6, 3, 1, 5]


def test_twelve_chunk_pattern_from_the_seed():
    # Twelve ranked chunks (1..12 after the baseline), ranked in index order.
    scores = [1.0] + [1.0 - i / 100 for i in range(1, 13)]
    order = stripe_order(scores, {0})
    assert order == [1, 5, 9, 2, 6, 10, 3, 7, 11, 4, 8, 12]
    # Retrieval behaviour of the seed: first 3, first 6, all 12.
    assert order[:3] == [1, 5, 9]
    assert order[:6] == [1, 5, 9, 2, 6, 10]


def test_pattern_applies_to_ranked_positions_not_indices():
    rng = np.random.default_rng(7)
    scores = [1.0] + list(rng.permutation(np.linspace(0.1, 0.9, 12)))
    ranked = rank(scores, {0})
    assert [scores[i] for i in ranked] == sorted(scores[1:], reverse=True)
    positions = [1, 5, 9, 2, 6, 10, 3, 7, 11, 4, 8, 12]
    assert stripe_order(scores, {0}) == [ranked[p - 1] for p in positions]


def test_twelve_chunks_counting_the_baseline():
    # n = 12 chunks including the baseline: 11 ranked, factor 4, the pattern without position 12.
    scores = [1.0] + [1.0 - i / 100 for i in range(1, 12)]
    assert stripe_order(scores, {0}) == [1, 5, 9, 2, 6, 10, 3, 7, 11, 4, 8]


def test_ties_break_by_index():
    assert rank([1.0, 0.5, 0.7, 0.5, 0.7], {0}) == [2, 4, 1, 3]


def test_technical_order_excludes_both_baselines():
    scores = [0.3, 1.0] + [1.0 - i / 100 for i in range(2, 13)]  # 13 chunks, factor 4
    order = stripe_order(scores, {0, 1})
    assert sorted(order) == list(range(2, 13))
    assert order == stripe([2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], 4)


def test_similarities_are_cosines_rounded_to_four_decimals():
    vectors = np.array([[2.0, 0.0], [1.0, 1.0], [0.0, 3.0], [-1.0, 0.0], [0.0, 0.0]])
    assert similarities(vectors, 0) == [1.0, 0.7071, 0.0, -1.0, 0.0]
    assert all(str(s) != "-0.0" for s in similarities(vectors, 0))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_topic_build_refuses_a_chunk_vector_that_is_not_finite(bad):
    """A caller's NaN or inf vector (its own model's, fp16 overflowed) was written as `null`
    similarities in index.json and put its chunk in a stripe order of its own; now a ValueError
    names the source and the chunk, as the embedder's own check does."""
    vectors = ranked_vectors([1.0, 0.9, 0.5])
    vectors[2, 1] = bad
    sections = [(f"Part {i}", f"Body {i}.") for i in range(3)]
    with pytest.raises(ValueError, match=r"docs/t/a\.md: the vector of chunk 2 holds NaN or inf"):
        build_topic(
            topic_input("docs/t", [source("docs/t/a.md", sections, vectors)]), IndexSettings()
        )


def test_a_topic_build_refuses_a_question_vector_that_is_not_finite():
    """A NaN question vector attached its question to no chunk, unsaid (seed 000: every question
    attaches to its best chunk)."""
    sections = [(f"Part {i}", f"Body {i}.") for i in range(3)]
    questions = np.array([[np.nan, 0.0, 0.0], [1.0, 0.0, 0.0]])
    inp = topic_input(
        "docs/t",
        [source("docs/t/a.md", sections, ranked_vectors([1.0, 0.9, 0.5]))],
        questions=["Why?", "How?"],
        question_vectors=questions,
    )
    with pytest.raises(ValueError, match="the vector of question 'Why\\?' holds NaN or inf"):
        build_topic(inp, IndexSettings())
