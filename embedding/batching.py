"""Fixed-shape micro-batches: a row's arithmetic never depends on which rows share its batch.

Every row is padded to its *bucket length*, a function of its own token count alone (rounded up to a
multiple of `LENGTH_STEP`, capped at the model window), and rows of one bucket are cut into runs of
`rows_per_batch(length, budget)`. A model's kernels pick their blocking from the input's shape, and
GPUs and some CPUs (an Intel Xeon with AMX: MKL's fp32 GEMM, oneDNN's bf16 one) also their
threading from the row count, so the embedder fills every micro-batch up to its full row count too:
each shape is then fixed by the budget and the bucket length, and a row's vector comes out bit for
bit the same whatever its neighbours, its position or the number of rows in the call. Not fp32 on a
CPU whose MKL runs in its strict reproducible mode (`REPRODUCIBLE_MKL`, as MKL itself says:
`mkl_strict`), whose bits depend on neither the row count nor the thread count
(`fills_micro_batches`).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

LENGTH_STEP = 16  # bucket lengths are multiples of this (padding cost: ~8 tokens a row)
# MKL's strict conditional numerical reproducibility, set in a process's environment before MKL's
# first call (a build's embedding actors set it before they load torch). Without it MKL split a
# small fp32 product across threads by its shape: at `embedding.token_budget` 256 a vector's bits
# depended on the thread count (2 of 27 texts, 1 against 2 threads; 2-core Xeon with AMX), and on
# 2 threads on the row count (40 of 123 texts in micro-batches of 1-3 rows against filled ones).
# With it: none, either way. At the CPU default 2,048 the filled vectors were the same bits with or
# without it there, and as fast (600 FastAPI chunks: 22.2 s against 24.1 on 2 threads); on MKL's
# AVX2 code path they differ in the last bits (README, Decisions, "Embedding").
REPRODUCIBLE_MKL = {"MKL_CBWR": "AUTO,STRICT"}
MKL_CBWR_ALL, MKL_CBWR_STRICT = -1, 0x10000  # `mkl_cbwr_get`'s option for all, and its strict bit


@dataclass(frozen=True)
class MicroBatch:
    """Row indices that run together, each padded to `length` tokens."""

    length: int
    rows: tuple[int, ...]


def bucket_length(length: int, cap: int, step: int = LENGTH_STEP) -> int:
    """The padded length of a row of `length` tokens: up to a multiple of `step`, at most `cap`."""
    return min(cap, -(-max(1, length) // step) * step)


def bucket_lengths(cap: int, step: int = LENGTH_STEP) -> list[int]:
    """Every bucket length a row can get in a window of `cap` tokens, shortest first."""
    return sorted({bucket_length(n, cap, step) for n in range(1, cap + 1, step)} | {cap})


def rows_per_batch(length: int, token_budget: int) -> int:
    """Rows of one micro-batch of bucket `length`: as many as the token budget holds, at least 1."""
    if token_budget < 1:
        raise ValueError(f"token_budget must be >= 1, got {token_budget}")
    return max(1, token_budget // length)


def plan_batches(
    lengths: Sequence[int], token_budget: int, cap: int, step: int = LENGTH_STEP
) -> list[MicroBatch]:
    """Group row indices into fixed-shape micro-batches, longest bucket first.

    Rows of a bucket keep their input order and are cut into runs of `rows_per_batch`; every index
    appears exactly once, and the plan is a function of the lengths alone.
    """
    buckets: dict[int, list[int]] = {}
    for index, length in enumerate(lengths):
        buckets.setdefault(bucket_length(length, cap, step), []).append(index)
    batches = []
    for length in sorted(buckets, reverse=True):
        rows = buckets[length]
        size = rows_per_batch(length, token_budget)
        batches.extend(
            MicroBatch(length, tuple(rows[i : i + size])) for i in range(0, len(rows), size)
        )
    return batches


def padding_waste(
    lengths: Sequence[int], batches: Sequence[MicroBatch], *, full_rows: int | None = None
) -> float:
    """Fraction of the computed token slots that are padding (0.0 for no rows).

    `full_rows`: the token budget when every micro-batch is padded to its full row count (the
    embedder's micro-batches; None for batches run as they are).
    """
    padded = sum(
        (rows_per_batch(b.length, full_rows) if full_rows else len(b.rows)) * b.length
        for b in batches
    )
    real = sum(lengths)
    return 0.0 if padded == 0 else (padded - real) / padded


def fills_micro_batches(device_type: str, dtype: str, strict: bool) -> bool:
    """Whether each micro-batch is filled up to its budget's row count with filler rows: yes,
    except for fp32 on a CPU whose MKL runs in its `strict` reproducible mode (`mkl_strict`)."""
    return not (device_type == "cpu" and dtype == "fp32" and strict)


def mkl_strict() -> bool:
    """Whether this process's MKL runs in its strict reproducible mode, as MKL itself says
    (`mkl_cbwr_get`, which torch's library exports). MKL takes its mode from the environment
    (`REPRODUCIBLE_MKL`) at its first call, so a variable set after that call changes nothing: in
    a program that multiplied matrices before a build embedded in its process, the variable said
    strict where MKL was not, and unfilled micro-batches gave bits that depended on their row
    count. Where MKL has made no call yet, asking makes it take its mode now, as that call would.
    False where torch has no MKL (ARM, macOS: the variable means nothing there)."""
    import torch

    if not torch.backends.mkl.is_available():
        return False
    try:
        library = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        get = library.mkl_serv_cbwr_get
    except (OSError, AttributeError):  # another platform's library, or MKL's symbols hidden
        return False
    get.restype, get.argtypes = ctypes.c_int, [ctypes.c_int]
    return bool(get(MKL_CBWR_ALL) & MKL_CBWR_STRICT)
