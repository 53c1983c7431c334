"""Length-aware micro-batches: similar lengths together, padded size bounded by a token budget."""

from __future__ import annotations

from collections.abc import Sequence


def plan_batches(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Group row indices into micro-batches, longest rows first.

    Rows are sorted by length (ties by index, so the plan is deterministic) and cut into runs whose
    padded size, rows x longest row, stays within `token_budget`; a row longer than the budget
    gets a batch of its own. Every index appears exactly once.
    """
    if token_budget < 1:
        raise ValueError(f"token_budget must be >= 1, got {token_budget}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    for index in order:
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= token_budget:
            batches[-1].append(index)
        else:
            batches.append([index])
    return batches


def padding_waste(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> float:
    """Fraction of the padded token slots that are padding (0.0 for no rows)."""
    padded = sum(len(batch) * max(lengths[i] for i in batch) for batch in batches)
    real = sum(lengths)
    return 0.0 if padded == 0 else (padded - real) / padded
