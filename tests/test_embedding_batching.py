"""Fixed-shape micro-batching: every row once, shapes from a row's own length, little padding."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embedding.batching import (
    LENGTH_STEP,
    MicroBatch,
    bucket_length,
    bucket_lengths,
    padding_waste,
    plan_batches,
    rows_per_batch,
)


@settings(deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=512), max_size=300),
    st.integers(1, 20000),
    st.integers(1, 512),
)
def test_every_row_once_in_a_batch_shaped_by_its_own_length(lengths, budget, cap):
    lengths = [min(length, cap) for length in lengths]
    batches = plan_batches(lengths, budget, cap)
    assert sorted(i for batch in batches for i in batch.rows) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch.rows) <= rows_per_batch(batch.length, budget)
        assert all(bucket_length(lengths[i], cap) == batch.length for i in batch.rows)
        assert all(lengths[i] <= batch.length for i in batch.rows)
    assert plan_batches(lengths, budget, cap) == batches


@settings(deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=600), max_size=50), st.integers(1, 600))
def test_bucket_lengths_are_every_length_a_row_can_get(lengths, cap):
    every = bucket_lengths(cap)
    assert every == sorted(set(every)) and every[-1] == cap
    assert {bucket_length(min(length, cap), cap) for length in lengths} <= set(every)
    assert len(every) == -(-cap // LENGTH_STEP)


def test_bucket_length_rounds_up_to_the_step_within_the_window():
    assert bucket_length(1, 256) == LENGTH_STEP
    assert bucket_length(LENGTH_STEP, 256) == LENGTH_STEP
    assert bucket_length(LENGTH_STEP + 1, 256) == 2 * LENGTH_STEP
    assert bucket_length(250, 256) == 256
    assert bucket_length(250, 250) == 250


def test_bucketed_batches_waste_far_less_padding_than_fixed_batches():
    lengths = [(i * 7919) % 250 + 6 for i in range(2000)]
    planned = plan_batches(lengths, 4096, 256)
    fixed = [
        MicroBatch(max(lengths[i : i + 32]), tuple(range(i, min(i + 32, len(lengths)))))
        for i in range(0, len(lengths), 32)
    ]
    assert padding_waste(lengths, planned) < 0.06
    assert padding_waste(lengths, planned, full_rows=4096) < 0.20  # the embedder: tails filled up
    assert padding_waste(lengths, fixed) > 0.4


@pytest.mark.parametrize(("device", "most"), [("cuda", 0.52), ("cpu", 0.22)])
def test_the_default_budgets_compute_at_most_about_twice_the_real_tokens(device, most):
    """Every micro-batch is filled to its full row count, so each length bucket of an embed call
    costs up to a whole micro-batch. A call the size the job makes (one chunk task's output: ~560
    chunks spread over the 16 buckets) at the default budget computes at most about twice its
    tokens on a GPU, and about a quarter more on a CPU (3.4 times at the CPUs' former 16,384); at
    the old 65,536-token budget a GPU computed 14 times them (measured on an H100 build of tldr-en:
    9% of the token slots were real tokens, 52% at 8,192)."""
    from embedding.keys import DEFAULT_TOKEN_BUDGET

    lengths = [16 + (i * 37) % 241 for i in range(560)]
    budget = DEFAULT_TOKEN_BUDGET[device]
    assert padding_waste(lengths, plan_batches(lengths, budget, 256), full_rows=budget) <= most
    assert padding_waste(lengths, plan_batches(lengths, 65536, 256), full_rows=65536) > 0.9


def test_budget_must_be_positive():
    with pytest.raises(ValueError, match="token_budget"):
        plan_batches([3, 4], 0, 256)
