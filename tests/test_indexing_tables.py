"""The Parquet chunk and documents tables read back with pyarrow, pandas and DuckDB."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from indexing_support import source, topic_input

from indexing import IndexSettings, SourceInput, build_topic, chunk_table_schema, simhash64
from indexing.paths import chunk_file
from indexing.tables import RetainedRows

TOPIC = "guides/intro"
DIM = 8


def big_question() -> str:
    """A question whose SimHash needs all 64 bits (>= 2**63): int64 would corrupt it."""
    return next(
        q for q in (f"How do I use feature {i}?" for i in range(100)) if simhash64(q) >= 2**63
    )


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(3, DIM)).astype(np.float32)
    question = big_question()
    body = [("Overview", "Intro [site](https://example.com)."), ("API Reference", "```\nx()\n```"),
            ("Usage", "Use it.")]  # fmt: skip
    good = source(
        f"{TOPIC}/guide.md", body, vectors, is_code={1}, front_matter={"promotion_level": "pinned"}
    )
    failed = SourceInput(
        f"{TOPIC}/broken.md", None, None, ("CHUNKING_FAILED", "bad byte at 3"), "ab12"
    )
    inp = topic_input(TOPIC, [good, failed], questions=[question], question_vectors=vectors[2:3])
    out = build_topic(inp, IndexSettings())
    root = tmp_path_factory.mktemp("tables")
    pq.write_table(out.chunk_rows, root / "chunks.parquet")
    pq.write_table(out.document_rows, root / "documents.parquet")
    return root, vectors, question, good.document


def test_pyarrow_reads_every_chunk_field_and_exact_types(written):
    root, vectors, question, document = written
    table = pq.read_table(root / "chunks.parquet")
    assert table.schema.equals(chunk_table_schema(DIM))
    assert table.schema.field("embedding").type == pa.list_(pa.float32(), DIM)
    assert table.schema.field("prompt_hashes").type == pa.list_(pa.uint64())
    rows = table.to_pylist()
    assert [r["ordinal"] for r in rows] == [0, 1, 2]
    for row, chunk in zip(rows, document.chunks, strict=True):
        record = chunk.to_dict()
        for field in ("chunk_id", "title", "headings_path", "header_path", "start_line", "end_line",
                      "token_count", "is_code", "content_type", "text", "links", "chunk_path",
                      "context"):  # fmt: skip
            assert row[field] == record[field], field
        assert row["extras"] == "{}"
        assert row["promotion_level"] == "pinned"  # seed 001: inherited from the document
    assert (
        rows[0]["topic"] == TOPIC and rows[0]["model"] and rows[0]["strategy"] == "semantic-250-750"
    )
    assert rows[0]["source_version_id"] == document.source_version_id
    assert rows[1]["href"] == f"{TOPIC}/" + chunk_file("guide", 1, document.chunks[1].text)
    assert rows[1]["is_code"] is True
    assert (
        rows[2]["prompt_hashes"] == [simhash64(question)] and rows[2]["prompt_hashes"][0] >= 2**63
    )
    assert rows[0]["similarity_technical"] is not None  # "API Reference" is the technical baseline
    np.testing.assert_array_equal(
        np.array([r["embedding"] for r in rows], dtype=np.float32), vectors
    )


def test_pandas_reads_the_tables(written):
    root, vectors, question, _ = written
    frame = pd.read_parquet(root / "chunks.parquet")
    assert len(frame) == 3 and list(frame.columns) == chunk_table_schema(DIM).names
    np.testing.assert_array_equal(
        np.stack(frame["embedding"].to_list()).astype(np.float32), vectors
    )
    hashes = frame["prompt_hashes"].iloc[2]
    assert hashes.dtype == np.uint64 and int(hashes[0]) == simhash64(question)
    documents = pd.read_parquet(root / "documents.parquet")
    assert documents.set_index("source")["status"].to_dict() == {
        f"{TOPIC}/broken.md": "failed",
        f"{TOPIC}/guide.md": "ok",
    }
    assert documents.set_index("source")["promotion_level"][f"{TOPIC}/guide.md"] == "pinned"


def test_duckdb_queries_the_tables(written):
    root, vectors, question, document = written
    chunks = str(root / "chunks.parquet")
    types = {row[0]: row[1] for row in duckdb.sql(f"DESCRIBE SELECT * FROM '{chunks}'").fetchall()}
    # Parquet has no fixed-size list: DuckDB sees a FLOAT list, cast to FLOAT[dim] for array maths.
    assert types["embedding"] == "FLOAT[]" and types["prompt_hashes"] == "UBIGINT[]"
    found = duckdb.sql(
        f"SELECT ordinal, prompt_hashes[1] FROM '{chunks}' WHERE len(prompt_hashes) > 0"
    ).fetchall()
    assert found == [(2, simhash64(question))]
    best = duckdb.sql(
        f"SELECT ordinal FROM '{chunks}' "
        f"ORDER BY array_cosine_similarity(embedding::FLOAT[{DIM}], ?::FLOAT[{DIM}]) DESC LIMIT 1",
        params=[vectors[1].tolist()],
    ).fetchall()
    assert best == [(1,)]
    documents = duckdb.sql(
        f"SELECT source, is_chunked, chunk_count, source_version_id, status, error_code, error "
        f"FROM '{root / 'documents.parquet'}' ORDER BY source"
    ).fetchall()
    assert documents == [
        (f"{TOPIC}/broken.md", False, 0, "ab12", "failed", "CHUNKING_FAILED", "bad byte at 3"),
        (f"{TOPIC}/guide.md", True, 3, document.source_version_id, "ok", None, None),
    ]


def test_a_topic_without_chunks_still_writes_readable_tables(tmp_path):
    failed = SourceInput(f"{TOPIC}/broken.md", None, None, ("CHUNKING_FAILED", "bad"))
    out = build_topic(topic_input(TOPIC, [failed]), IndexSettings())
    pq.write_table(out.chunk_rows, tmp_path / "c.parquet")
    assert duckdb.sql(f"SELECT count(*) FROM '{tmp_path / 'c.parquet'}'").fetchall() == [(0,)]
    assert len(pd.read_parquet(tmp_path / "c.parquet")) == 0


def test_a_failed_source_keeps_its_retained_rows_in_source_order(written):
    """Rows of the previous tables handed in for a failed source stay, between its neighbours."""
    rng = np.random.default_rng(7)
    body = [("One", "First."), ("Two", "Second.")]
    kept = source(f"{TOPIC}/b-kept.md", body, rng.normal(size=(2, DIM)).astype(np.float32),
                  front_matter={"title": "Kept"})  # fmt: skip
    neighbours = [
        source(f"{TOPIC}/{stem}.md", [("X", stem)], rng.normal(size=(1, DIM)).astype(np.float32))
        for stem in ("a", "c")
    ]
    before = build_topic(topic_input(TOPIC, [kept, *neighbours]), IndexSettings())
    [kept_row] = [r for r in before.document_rows.to_pylist() if r["source"] == kept.path]
    assert kept_row["front_matter"] == '{"title": "Kept"}' and kept_row["tenant_id"]
    previous = pq.read_table(pa.BufferReader(_parquet_bytes(before.chunk_rows)))
    retained = RetainedRows(
        chunks=previous.filter(pc.equal(previous["source"], kept.path)), document=kept_row
    )
    failed = SourceInput(kept.path, None, None, ("CHUNKING_FAILED", "bad byte at 9"), "ff00",
                         retained=retained)  # fmt: skip
    after = build_topic(topic_input(TOPIC, [failed, *neighbours]), IndexSettings())
    assert after.chunk_rows.equals(before.chunk_rows)
    [failed_row] = [r for r in after.document_rows.to_pylist() if r["source"] == kept.path]
    assert failed_row == {
        **kept_row,
        "status": "failed",
        "error_code": "CHUNKING_FAILED",
        "error": "bad byte at 9",
    }


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()
