"""Row spans of the pipeline's output blocks, as the driver's reduce loop names them."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

Span = tuple[int, int | None]  # rows [start, end) of a block; end None: to the block's end


def rows_in(block: pa.Table, span: Span) -> pa.Table:
    """The rows of `block` that `span` names."""
    start, end = span
    return block.slice(start, (block.num_rows if end is None else end) - start)


def topic_counts(block: pa.Table, span: Span) -> dict[str, int]:
    """How many rows of each topic a span of a block holds."""
    return dict(Counter(rows_in(block, span).column("topic").to_pylist()))
