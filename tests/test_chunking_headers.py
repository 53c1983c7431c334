"""The `headers` strategy against seed 001's rules."""

from __future__ import annotations

from chunking import chunk_source, strategy_key


def filler(count: int, word: str = "text") -> str:
    return "\n".join(f"{word} line {i}" for i in range(count))


def test_short_document_is_one_unchunked_chunk():
    text = "# Title\n\n## A\nshort\n\n### B\nalso short\n"
    document = chunk_source(text, strategy="headers")
    assert document.is_chunked is False
    (chunk,) = document.chunks
    assert chunk.text == text.rstrip("\n")
    assert (chunk.start_line, chunk.end_line) == (1, 7)
    assert chunk.header_path == "# Title"


def test_a_long_document_of_no_content_has_no_chunk_and_is_not_chunked():
    """Seed 001: `is_chunked` is true "when document has chunks"; a file over 500 lines of
    headings alone (every section empty) was `is_chunked: true` with 0 chunks."""
    document = chunk_source("\n".join(f"## Heading {i}" for i in range(600)), strategy="headers")
    assert (document.chunks, document.is_chunked) == ((), False)


def test_long_document_splits_at_h2_and_h3_with_header_paths():
    text = (
        f"# Guide\n{filler(200)}\n"
        f"## Root Cause Analysis\n{filler(100)}\n"
        f"### Database Layer\n{filler(100)}\n"
        f"#### Detail (not a split point)\n{filler(50)}\n"
        f"## Empty Section\n\n"
        f"## Fix\n{filler(100)}\n"
    )
    document = chunk_source(text, strategy="headers")
    assert document.is_chunked is True
    paths = [chunk.header_path for chunk in document.chunks]
    assert paths == [
        "# Guide",
        "# Guide > ## Root Cause Analysis",
        "# Guide > ## Root Cause Analysis > ### Database Layer",
        "# Guide > ## Fix",
    ]
    database = document.chunks[2]
    assert database.headings_path == ("Guide", "Root Cause Analysis", "Database Layer")
    assert database.text.startswith("### Database Layer\n")
    assert "#### Detail" in database.text
    lines = text.split("\n")
    for chunk in document.chunks:
        assert chunk.text == "\n".join(lines[chunk.start_line - 1 : chunk.end_line])


def test_long_section_splits_between_blocks_never_inside_code():
    code = "```python\n" + "\n".join(f"x_{i} = {i}" for i in range(300)) + "\n```"
    paragraphs = "\n\n".join(f"Paragraph {i}.\nSecond line of {i}." for i in range(400))
    text = f"## Big\n{paragraphs}\n\n{code}\n\n{paragraphs}\n"
    document = chunk_source(text, strategy="headers")
    assert len(document.chunks) >= 3
    for chunk in document.chunks:
        assert chunk.end_line - chunk.start_line + 1 <= 1000
        assert chunk.header_path == "## Big"
        assert chunk.text.count("```") in (0, 2)
    starts = [chunk.start_line for chunk in document.chunks]
    assert starts == sorted(starts)


def test_document_without_h2_or_h3_is_one_chunk():
    text = f"# Only a title\n{filler(600)}\n"
    document = chunk_source(text, strategy="headers")
    assert len(document.chunks) == 1
    assert document.chunks[0].end_line == 601


def test_unclosed_fence_is_closed_in_its_chunk():
    text = f"## A\n{filler(600)}\n## B\n```\ncode\n"
    last = chunk_source(text, strategy="headers").chunks[-1]
    assert last.text == "## B\n```\ncode\n```"
    assert (last.start_line, last.end_line) == (602, 604)


def test_cache_key():
    assert strategy_key("headers") == "headers-500-1000"
    assert strategy_key("headers", max_document_lines=300) == "headers-300-1000"


def test_a_chunk_ends_at_its_last_non_blank_line():
    """markdown-it's line map of a list, and of a fence that never closes, takes in the blank
    lines after it: a section ending with one ended on a blank line, its text with "\n"."""
    lines = "\n\n".join(f"para {i}" for i in range(250))
    text = f"# T\n\n{lines}\n\n## A\n\n- a\n- b\n\n## B\n\n```\ncode\n\n\n"
    document = chunk_source(text, strategy="headers")
    *_, listed, fenced = document.chunks
    assert listed.text == "## A\n\n- a\n- b"
    assert (listed.start_line, listed.end_line) == (503, 506)
    assert fenced.text == "## B\n\n```\ncode\n```"
    assert (fenced.start_line, fenced.end_line) == (508, 511)
    short = chunk_source("# T\n\n- a\n- b\n\n\n", strategy="headers").chunks[0]
    assert (short.text, short.end_line) == ("# T\n\n- a\n- b", 4)


def test_a_heading_where_a_long_section_is_cut_goes_with_its_content():
    """A long section cut between blocks left a heading that fitted last in its piece, its
    content starting the next (a chunk ending with "#### Sub"), and a heading ending the section
    that did not fit was a chunk of its own, with nothing under it."""
    text = "## A\n\npara one\nline\n\n#### Sub\n\npara two\nline\nline\n\n## B\n\nb\n"
    document = chunk_source(text, strategy="headers", max_document_lines=1, max_section_lines=6)
    first, second, _ = document.chunks
    assert first.text == "## A\n\npara one\nline"  # was "...line\n\n#### Sub"
    assert (second.text, second.header_path) == (
        "#### Sub\n\npara two\nline\nline",
        "## A > #### Sub",
    )
    text = "## A\n\npara one\nline\nline\n\npara two\nline\nline\n\n#### Tail\n\n## B\n\nb\n"
    document = chunk_source(text, strategy="headers", max_document_lines=1, max_section_lines=4)
    assert [c.text for c in document.chunks] == [
        "## A\n\npara one\nline\nline",
        "para two\nline\nline\n\n#### Tail",  # was two chunks, the second "#### Tail" alone
        "## B\n\nb",
    ]
