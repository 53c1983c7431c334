"""Row spans of output blocks: the slices the reduce takes and the per-topic counts that decide
when a topic is complete."""

from __future__ import annotations

import pyarrow as pa

from jobs.blocks import rows_in, topic_counts

BLOCK = pa.table({"topic": ["a", "a", "b", "c", "b"], "path": ["1", "2", "3", "4", "5"]})


def test_a_span_names_rows_from_its_start_to_its_end_or_the_blocks_end():
    assert rows_in(BLOCK, (0, None)).equals(BLOCK)
    assert rows_in(BLOCK, (1, 3)).column("path").to_pylist() == ["2", "3"]
    assert rows_in(BLOCK, (3, None)).column("path").to_pylist() == ["4", "5"]
    assert rows_in(BLOCK, (2, 2)).num_rows == 0


def test_topic_counts_cover_the_span_only():
    assert topic_counts(BLOCK, (0, None)) == {"a": 2, "b": 2, "c": 1}
    assert topic_counts(BLOCK, (1, 4)) == {"a": 1, "b": 1, "c": 1}
    assert topic_counts(BLOCK, (4, 4)) == {}
