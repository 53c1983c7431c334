"""Invariants every registered strategy keeps, on fixtures, random markdown and bad input.

The own-content check (see tests/chunking_support.py): every non-blank line of a chunk, except
lines that are headings of the document (possibly prepended context), a table's header and
delimiter rows (repeated above rows cut from it), an indented container's first line (`!!! note`,
repeated above lines of its body cut from it) and bare fence lines (possibly a closed or
reopened fence), appears, whitespace collapsed, in the document's lines start_line..end_line
(also collapsed). The first and last lines: a chunk's text starts and ends with a non-blank line,
and its start_line and end_line are non-blank lines that hold one of its lines.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from chunking import CHUNKING_FAILED, ChunkingError, chunk_source, list_strategies
from chunking.blocks import parse_tokens
from tests.chunking_support import (
    check_invariants,
    empty_code_blocks,
    empty_containers,
    markdown_documents,
)

STRATEGIES = sorted(list_strategies())
FIXTURES = Path(__file__).parent / "fixtures" / "markdown"
FIXTURE_FILES = sorted(p.name for p in FIXTURES.glob("*.md"))


def test_every_strategy_is_listed_with_its_cache_key():
    keys = list_strategies()
    assert {"semantic", "headers", "structural", "hierarchical"} <= set(keys)
    assert keys["semantic"] == "semantic-250-750"
    assert len(set(keys.values())) == len(keys)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_invariants_on_fixtures(strategy, name):
    data = (FIXTURES / name).read_bytes()
    document = check_invariants(data, strategy)
    assert document.chunks, "a non-empty fixture gives chunks"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_no_heading_is_taken_from_inside_a_fence(strategy):
    document = check_invariants((FIXTURES / "tricky_fences.md").read_bytes(), strategy)
    for chunk in document.chunks:
        assert set(chunk.headings_path) <= {"Fences", "Real Heading"}
        assert "Not a heading" not in chunk.title and "comment" not in chunk.title


@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(
    max_examples=int(os.environ.get("CHUNKING_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(text=markdown_documents())
def test_invariants_on_random_markdown(strategy, text):
    check_invariants(text, strategy)


# Limits small enough that random documents are cut everywhere: in fences, tables and long lines.
SMALL = {
    "semantic": {"max_tokens": 60, "min_tokens": 20, "min_tokens_deeper": 40},
    "structural": {"target": 60, "soft_max": 80, "hard_max": 100, "overlap_percent": 15},
    "hierarchical": {"max_chunk_size": 300, "overlap_size": 60, "hard_max_size": 600},
    "headers": {"max_document_lines": 20, "max_section_lines": 10},
}


@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=markdown_documents())
def test_invariants_with_small_limits_and_crlf(strategy, text):
    check_invariants(text.replace("\n", "\r\n"), strategy, **SMALL[strategy])


# Documents hypothesis found breaking an invariant (tests/fixtures/found), and what went wrong:
# - list-fence-closer-opens (semantic): cut out of its list item, a 4-space "```" line is indented
#   code; the closer inserted after the last line, for a fence the file ends, opened a fence;
# - list-fence-reopened-as-code (semantic): the same, the reopened fence did not open and a
#   closing line did;
# - fence-info-with-pipe (semantic): before a table's delimiter row markdown-it reads a reopened
#   opener whose info string holds "|" as the table's header row;
# - overlap-at-backticks (hierarchical): the overlap started a chunk at a "```" inside a line;
# - quoted-fence-line-cut (semantic, MiniLM tokens): a piece of a cut fence line in a block quote
#   lost the quote's marker, and with it the fence its chunk reopened;
# - quoted-unclosed-fence (structural): a block quote holding a fence that never closes was one
#   chunk, and its closing line took it past hard_max (the file failed);
# - fence-info-too-long-to-reopen (structural): an info string too long to repeat in every piece
#   failed the file (the bare marker reopens it now, as in semantic);
# - line-cut-before-a-list-fence (semantic): a long line cut before " 1. ```", a list's fence;
# - window-starts-at-backticks (structural): a token window began with "```";
# - cut-before-closing-backticks (structural): a chunk ended inside "``` the … ```", a paragraph
#   line (backticks in its info string) that its first part alone would make a fence opener;
# - html-block-list-fence (semantic): no room was kept to close a "- ```" line of an HTML block;
# - line-like-an-opener-cut (semantic): the first piece of a long paragraph line "``` word … ```"
#   is a fence opener alone (hierarchical: the closer added took a window past hard_max_size);
# - headers-quoted-fence-in-list (headers): a fence its list item ended, then a blank line, ended
#   the chunk: alone, the item goes on to the end of the text, and the fence with it;
# - hierarchical-list-with-unclosed-fence (hierarchical): a list holding a fence that never closes
#   was packed whole, and its closing line took the chunk past hard_max_size (the file failed);
# - overlap-starts-at-backticks (structural, MiniLM tokens): an overlap began with "``` the 1.", and
#   the line closing the fence it opened took the chunk past hard_max (the file failed);
# - html-block-fence-pairs-otherwise (semantic, MiniLM tokens): alone, a chunk's "```" line from its
#   HTML block paired with the next fence's opener after the block, so a "~~~~~" line there opened
#   a fence; the room kept covered only the HTML block's fence-like lines (the file failed);
# - table-header-like-an-opener (semantic, MiniLM tokens): a table's header row "``` the … |" ended
#   a chunk, its delimiter row in the next: alone, the header row opened a fence;
# - html-block-swallows-admonition (semantic): an HTML block ran on over a "!!! note" line, and
#   a chunk cut inside the block read that line as a container alone, whose body's "```py"
#   (indented code in the file) then opened a fence; no room was kept to close it (the file
#   failed).
FOUND = sorted((FIXTURES.parent / "found").glob("*.md"))


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("path", FOUND, ids=lambda path: path.stem)
def test_invariants_on_examples_found_before(strategy, newline, path):
    text = path.read_text(encoding="utf-8").replace("\n", newline)
    for tokenizer in ("heuristic", "minilm"):
        check_invariants(text, strategy, **SMALL[strategy], tokenizer=tokenizer)
    check_invariants(text, strategy)


# A long line cut at max_tokens 40 (MiniLM tokens) or 60 into pieces, one that starts like a fence
# line (found by a fuzz check, about 3 documents in 200): the marker "```" moved to the end of the
# piece before, "1. - - ", made that piece an opener; "~~~" did not fit in the piece before;
# in a fence, a piece "``` " closed the fence its chunk reopened, and the closer added opened one;
# a later piece of an HTML block's first line is no HTML block, so the block's "```py" opened one;
# one of indented code, "1. gamma", lost the indentation and was a list item holding "    ```py";
# one of a paragraph line, "- gamma - >", was a list item that the next line, "    ```py",
# continued (at max_tokens 60).
@pytest.mark.parametrize(
    "text",
    [
        "# -\n## | </tr> <td>\n `code` `code` 安装 > ``` 1. 1. - - ```</td></tr>",
        '!!! note "x"\n    :::::: tip\n    ::: > </tr> ~~~ ``` ~~~ ~~~ :::\n    ::::::',
        "## # > #\n::::{tab-item} pip\n```py\n``` **b** **b** ~~~\n```\n::::",
        "</tr> [l](x.md) | [l](x.md) ~~~ [l](x.md) ::: ::: ~~~\n```py",
        "    </tr> gamma - alpha # alpha > | | 1. `code` [l](x.md) 安装 1. **b** ``` 1. <td> alpha"
        " ::: <td> ~~~ alpha [l](x.md) # 1. gamma 安装\n    ```py",
        "``` alpha **b** ~~~ `code` > gamma > alpha # ~~~ # <td> `code` <td> alpha ::: 1. 1. 1. # #"
        " **b** <td> ::: | # **b** ``` alpha alpha **b** - # # ::: | gamma gamma [l](x.md) 1. >"
        " </tr> - gamma - >\n    ```py",
    ],
    ids=[
        "moved-marker-makes-an-opener",
        "marker-does-not-fit-back",
        "piece-closes-its-fence",
        "piece-of-an-html-blocks-first-line",
        "piece-of-indented-code",
        "piece-of-a-paragraph-line",
    ],
)
def test_no_piece_of_a_cut_line_leaves_a_fence_open(text):
    check_invariants(text, "semantic", max_tokens=40, min_tokens=16, tokenizer="minilm")
    check_invariants(text, "semantic", max_tokens=60, min_tokens=20)


# Limits for each strategy, so that a page of a few 30-token paragraphs is cut in several chunks.
PARAGRAPH_LIMITS = {
    "structural": {"target": 60, "soft_max": 80, "hard_max": 180},
    "semantic": {"min_tokens": 40, "max_tokens": 100},
    "hierarchical": {"max_chunk_size": 700, "overlap_size": 100, "hard_max_size": 1400},
    "headers": {"max_document_lines": 5, "max_section_lines": 12},
}


def _paragraph(number: int) -> str:
    return f"Paragraph {number} " + " ".join(["river"] * 25) + "."


def _slash_page(opener: str, body: list[str], closer: str) -> tuple[str, int, int]:
    """A FastAPI-like page with a pymdownx.blocks fence (`/// tip | Title` ... `///`) between
    paragraphs; returns it and the fence's first and last line."""
    before = ["# Guide", "", "## Install", "", _paragraph(1), "", _paragraph(2), ""]
    text = "\n".join([*before, opener, "", "\n\n".join(body), "", closer, "", _paragraph(3), ""])
    return text, len(before) + 1, text.count("\n") - 2  # its last line: before "", the text


def _starts_with_a_closer(text: str) -> bool:
    """Whether the first line of `text` that is no heading is a bare closing line (`///`)."""
    lines = [line for line in text.split("\n") if line.strip() and not line.startswith("#")]
    return bool(lines) and lines[0].strip("/ ") == ""


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_slash_fence_is_kept_whole_where_it_fits(strategy):
    """FastAPI's `/// tip | Title` ... `///` (pymdownx.blocks) was read as paragraphs: every
    strategy cut inside it (`structural` made its code block a chunk of its own and began the
    next chunk with a bare `///`). It is one container, kept whole where it fits."""
    body = [_paragraph(10), _paragraph(11), "```bash\n$ fastapi dev main.py\n```"]
    text, first, last = _slash_page("/// tip | Run it with the CLI", body, "///")
    document = check_invariants(text, strategy, **PARAGRAPH_LIMITS[strategy])
    spans = [(c.start_line, c.end_line) for c in document.chunks]
    assert len(spans) > 1
    assert any(start <= first and last <= end for start, end in spans), spans
    assert not any(_starts_with_a_closer(c.text) for c in document.chunks)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(
    ("openers", "closers"),
    [
        (["/// tip | Run it with the CLI"], ["///"]),
        (["//// tab | Python 3.10+", "/// note"], ["///", "////"]),
    ],
    ids=["tip", "note-in-tab"],
)
def test_a_slash_fence_over_the_limit_is_cut_inside_its_body(strategy, openers, closers):
    """A `///` fence (a `/// note` in a `//// tab`) too big for a chunk is cut between the
    paragraphs of its body: each chunk holding a piece of it repeats the fences' first lines
    (outermost first) and ends with their closing lines (innermost first), so it reads as the
    container it is cut from; no chunk starts with a bare closing line. `headers` never cuts a
    block: the fence is one chunk. Until 2026-12-01 its paragraphs were chunked as any others:
    pieces without the first line, a closing `///` atop the text after it."""
    body = [_paragraph(10 + i) for i in range(10)]
    text, first, last = _slash_page("\n".join(openers), body, "\n".join(closers))
    document = check_invariants(text, strategy, **PARAGRAPH_LIMITS[strategy])
    pieces = [c for c in document.chunks if "Paragraph 1" in c.text.replace("Paragraph 1 ", "")]
    assert len(pieces) > (strategy != "headers")
    for chunk in pieces:
        lines = [line for line in chunk.text.split("\n") if line.strip()]
        at = lines.index(openers[0])
        assert lines[at : at + len(openers)] == openers, chunk.text
        assert chunk.text.endswith("\n".join(["", *closers])) or lines[-1] == _paragraph(3)
    assert not any(_starts_with_a_closer(c.text) for c in document.chunks)
    seen = [line for c in pieces for line in c.text.split("\n") if line in body]
    assert sorted(set(seen), key=body.index) == body


@pytest.mark.parametrize("opener", ["/// tip | Run it", ":::tip Run it"])
@pytest.mark.parametrize(
    ("strategy", "before", "options"),
    [
        ("structural", 1, {"target": 60, "soft_max": 80, "hard_max": 180}),
        ("hierarchical", 2, {"max_chunk_size": 700, "overlap_size": 150, "hard_max_size": 1400}),
    ],
)
def test_no_overlap_is_taken_from_a_container(strategy, before, options, opener):
    """The overlap in front of the paragraph after a container (a colon or slash fence) came
    from the container's last lines: the chunk began with its bare closing line (`:::` atop
    the paragraph), or inside its body without its first line."""
    closer = opener.split(" ")[0].removesuffix("tip")
    paragraphs = [_paragraph(n) for n in range(before)], [_paragraph(n) for n in (7, 8, 9)]
    container = [opener, _paragraph(10), closer]
    text = "\n\n".join(["# Guide", "## Install", *paragraphs[0], *container, *paragraphs[1]])
    lines = text.split("\n")
    first, last = lines.index(opener) + 1, lines.index(closer) + 1
    document = check_invariants(text + "\n", strategy, **options)
    starts = [c.start_line for c in document.chunks]
    assert len(starts) > 1 and not any(first < start <= last for start in starts), starts


def _list_page(item: str, opener: str, body: list[str], closer: str) -> str:
    """A page whose list item (`item`: `1. ` or `* `) holds a container (FastAPI's
    deployment/docker.md: `1. …`, then `    /// note`, its body and `    ///` 4 columns in)."""
    fence = [opener, "", *body, "", closer]
    inner = [_paragraph(2), "", *fence, "", _paragraph(3)]
    lines = ["# Guide", "", "## Install", "", _paragraph(1), "", f"{item}Install the packages."]
    lines += ["", *(f"    {line}" if line else "" for line in inner), "", f"{item}Copy the app."]
    return "\n".join([*lines, "", _paragraph(4), ""])


def _balanced(text: str, opener: str, closer: str, empty: bool = False) -> bool:
    """Whether every `opener` line of `text` (indentation aside) is closed by a later `closer`
    line, none right after it (an empty container) unless `empty`, and no `closer` line closes
    nothing."""
    depth, before = 0, ""
    for line in filter(None, map(str.strip, text.split("\n"))):
        depth += {opener: 1, closer: -1}.get(line, 0)
        if depth < 0 or (before, line) == (opener, closer) and not empty:
            return False
        before = line
    return depth == 0


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(
    ("item", "opener", "closer"),
    [("1. ", "/// note | Caching", "///"), ("* ", "/// note", "///"), ("1. ", ":::tip", ":::")],
    ids=["numbered", "bullet", "colon-fence"],
)
def test_a_container_in_a_list_item_is_cut_inside_its_body(strategy, item, opener, closer):
    """A `/// note` (or `:::tip`) inside a list item, too big for a chunk, is cut as a top-level
    one is: each chunk holding a piece of its body repeats its first line and ends with its
    closing line, at the item's indentation, and its body is all kept; no chunk ends with its
    first line alone (an empty note). Until chunking.REVISION 43 the list was cut between lines
    as if it held none: a chunk opened the note and ended inside it, the next began inside its
    body or with its bare closing line (FastAPI's deployment/docker.md)."""
    body = [_paragraph(10 + i) for i in range(10)]
    text = _list_page(item, opener, [line for p in body for line in (p, "")][:-1], closer)
    document = check_invariants(text, strategy, **PARAGRAPH_LIMITS[strategy])
    for chunk in document.chunks:
        assert _balanced(chunk.text, opener, closer), chunk.text
    pieces = [c for c in document.chunks if any(p in c.text for p in body)]
    assert len(pieces) > (strategy != "headers")
    for chunk in pieces:
        lines = [line for line in chunk.text.split("\n") if line.strip()]
        held = [n for n, line in enumerate(lines) if line.strip() in body]
        assert f"    {opener}" in lines[: held[0]], chunk.text
        assert f"    {closer}" in lines[held[-1] :], chunk.text
    seen = {line.strip() for c in pieces for line in c.text.split("\n")}
    assert set(body) <= seen


def _words(count: int) -> str:
    return " ".join(f"word{n}" for n in range(count)) + "."


_CODE = "commons = " + " + ".join(f"x{n}" for n in range(12))
# (words of the paragraph before it, a container): each ends a chunk or a piece with its head, or
# starts one with its closing line, with the old code and `PARAGRAPH_LIMITS`
_HEADS = {
    # FastAPI's de tutorial/dependencies/classes-as-dependencies.md: a tab whose body starts
    # with a code block
    "tab-then-code": (41, ["//// tab | Python 3.10+", "", "```Python", _CODE, "```", "", "////"]),
    # a tab whose body starts with a note (FastAPI's _llm-test.md)
    "tab-then-note": (
        41,
        ["//// tab | Python 3.10+", "", "/// tip | Tip", "", _words(20), "", "///", "", _words(10)]
        + ["", "////"],
    ),
    # a note whose first line of text is longer than a chunk (ko docs/advanced/async-tests.md)
    "note-then-long-line": (20, ["/// note | Note", "", _words(150), "", "///"]),
    # a tab ending a piece after its last item (zh _llm-test.md: a chunk `//// tab | 测试`, `////`)
    "closer-after-list": (
        20,
        ["//// tab | Test", "", *(f"* item number {n}" for n in range(46)), "", "////", ""]
        + ["//// tab | Info", "", _words(10), "", "////"],
    ),
}


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("case", sorted(_HEADS))
def test_no_chunk_holds_a_container_without_its_body(strategy, case):
    """No chunk ends with a container's first lines and nothing of its body (an empty `//// tab`
    or `/// note`, closed there and repeated atop the next chunk with its text), and none is a
    container's first line repeated above its closing line alone: the first lines go with the
    body's first line of content (through a note nested in the tab, a code block's first line),
    the closing line with its last, cut at words where they do not fit together. Before
    chunking.REVISION 44 `semantic` (configs/local.yaml) left 115 such chunks in FastAPI's
    docs, `structural` one."""
    before, container = _HEADS[case]
    text = "\n".join(["# Guide", "", "## Install", "", _words(before), "", *container, ""])
    text += "\n" + _words(30) + "\n"
    document = check_invariants(text, strategy, **PARAGRAPH_LIMITS[strategy])
    for chunk in document.chunks:
        assert empty_containers(chunk.text) == [], chunk.text
    body = [line for line in container if line.startswith(("word", "* item", _CODE))]
    last = body[-1].split()[-1]  # the body's last word, kept
    assert any(last in c.text for c in document.chunks)


# (a heading or the text of a list item, a code block whose first line is longer than a chunk)
_LONG_CODE = {
    "below-a-heading": ["## Install", "", "```bash", _words(300), "echo done", "```"],
    "in-a-list-item": [
        "1. Run:",
        "",
        "    ```bash",
        "    " + _words(300),
        "    echo done",
        "    ```",
    ],
}


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("case", sorted(_LONG_CODE))
def test_no_chunk_ends_with_an_empty_code_block_whose_first_line_is_cut(strategy, case):
    """A code block whose first line is longer than a chunk starts its first chunk or piece with
    that line's first piece after its opening line: the opening line alone (with a heading above
    it) was a chunk, or a chunk's end, of its own: an empty code block (`structural`, and
    `semantic` below a heading, until chunking.REVISION 45)."""
    text = "\n".join(["# Guide", "", _words(40), "", *_LONG_CODE[case], "", _words(10), ""])
    document = check_invariants(text, strategy, **PARAGRAPH_LIMITS[strategy])
    for chunk in document.chunks:
        assert empty_code_blocks(chunk.text) == [], chunk.text
    assert any("word0 word1" in c.text and "```bash" in c.text for c in document.chunks)
    assert any("word299." in c.text for c in document.chunks)


_HTML_TABLE = ["<table>", "  <tr>", "    <th>Name</th>", "    <th>Text</th>", "  </tr>"]
for _row in range(6):
    _HTML_TABLE += ["  <tr>", f"    <td>row{_row}</td>", "    <td>short text here</td>", "  </tr>"]
_HTML_TABLE.append("</table>")
# a table whose head fits where the paragraph before it ends, its first row not, below a heading
# or a paragraph (ru tutorial/metadata.md in FastAPI: "| Параметр | Тип | Описание |" ended one)
_TABLES = {
    "markdown": [
        "| Name | Text |",
        "|---|---|",
        *(f"| row{n} | short text here |" for n in range(6)),
    ],
    "html": _HTML_TABLE,
}


def _table_head_last(text: str) -> bool:
    """Whether chunk `text` ends with a table's head and no row: a header row (with its delimiter
    row, or alone), or `<table>` and its header row, closed."""
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    while lines and lines[-1] in ("</table>", "</tr>"):
        lines.pop()
    tail = lines[-1] if lines else ""
    return tail.startswith(("| Name", "|---", "<th>", "<table>", "<tr>"))


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("kind", sorted(_TABLES))
@pytest.mark.parametrize("heading", [True, False])
def test_no_chunk_ends_with_a_tables_head_without_a_row(strategy, kind, heading):
    """Whatever room a paragraph leaves before a table, no chunk ends with the table's head and
    none of its rows (repeated atop the next chunk with them): `semantic` seals before the head
    (or the heading above it) where a chunk of their own holds it with the first row. Until
    chunking.REVISION 45 its chunks could end with a markdown table's header row alone, or with
    it and the delimiter row, and, below a heading, with an HTML table's head."""
    for words in range(30, 110, 4):
        above = (
            ["## Options", "", _words(words)] if not heading else [_words(words), "", "## Options"]
        )
        text = "\n".join(["# Guide", "", *above, "", *_TABLES[kind], "", _words(5), ""])
        document = check_invariants(text, strategy, **PARAGRAPH_LIMITS[strategy])
        for chunk in document.chunks:
            assert not _table_head_last(chunk.text), (words, chunk.text)


# -- bad input: chunks or a clear ChunkingError, never a crash or a hang -------------------------


@pytest.mark.timeout(10)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_invalid_utf8_fails_with_chunking_failed(strategy):
    with pytest.raises(ChunkingError) as caught:
        chunk_source(b"# Title\n\nok\n\xc3\x28 broken", strategy=strategy)
    assert caught.value.code == CHUNKING_FAILED
    assert "byte offset 12" in caught.value.message


@pytest.mark.timeout(10)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_binary_file_fails_with_chunking_failed(strategy):
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4
    with pytest.raises(ChunkingError) as caught:
        chunk_source(png, strategy=strategy)
    assert caught.value.code == CHUNKING_FAILED


@pytest.mark.timeout(10)
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("data", [b"", b"   \n\n\t\n", b"\xef\xbb\xbf", b"---\na: 1\n---\n"])
def test_empty_and_blank_files_give_no_chunks(strategy, data):
    document = chunk_source(data, strategy=strategy)
    assert document.chunks == ()
    assert document.is_chunked is False


@pytest.mark.timeout(120)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_five_megabyte_single_line(strategy):
    line = ("lorem ipsum dolor sit amet " * 190_000)[:5_000_000]
    document = check_invariants(f"# Huge\n\n{line}\n", strategy)
    assert document.chunks


@pytest.mark.timeout(60)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_ten_thousand_headings(strategy):
    text = "".join(f"## Heading {i}\n\nText {i}.\n\n" for i in range(10_000))
    document = chunk_source(text, strategy=strategy)
    assert document.chunks
    assert document.chunks[-1].end_line <= 40_000


@pytest.mark.timeout(30)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_unclosed_fence(strategy):
    text = "# T\n\nIntro.\n\n```python\n" + "\n".join(f"# line {i}" for i in range(300)) + "\n"
    document = check_invariants(text, strategy)
    assert all("line" not in " ".join(chunk.headings_path) for chunk in document.chunks)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_lists_nested_500_deep(strategy):
    text = "# T\n\n" + "".join(f"{'  ' * depth}- item {depth}\n" for depth in range(500))
    assert check_invariants(text, strategy).chunks


@pytest.mark.timeout(30)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_twenty_thousand_notes_in_one_block_quote(strategy):
    """A block quote of 20,000 `> /// note`s, cut in hundreds of pieces: each piece closes the
    notes it opens (until chunking.REVISION 43 a note in a block quote was no container), and
    finding the notes around a line is a bisect and a walk out through those around it (a scan
    of every note of the quote took 40 to 80 s a strategy)."""
    text = "# T\n\n" + "".join(f"> /// note\n> Body {i} words.\n> ///\n>\n" for i in range(20_000))
    document = chunk_source(text, strategy=strategy)
    assert len(document.chunks) > 1 or strategy == "headers"
    # a piece starting at a note's closing line repeats its first line: an empty note
    assert all(_balanced(c.text, "> /// note", "> ///", empty=True) for c in document.chunks)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_file_of_headings_only(strategy):
    text = "".join(f"{'#' * (1 + i % 6)} Heading {i}\n" for i in range(2_000))
    check_invariants(text, strategy)


# -- a page titled only in its front matter ------------------------------------------------------

# A Docusaurus page: its title is in the front matter only, and the site renders it as the H1.
TITLED_PAGE = """Run `pip install foo` to install the command-line tool. It needs Python 3.10 or
newer and a network connection. The installer puts a `foo` command on your path.

## Options

Every option has a long form. The common ones follow, and `foo --help` lists the rest of them
with their defaults and the environment variables that set them instead.

- `--config PATH` reads settings from another file than the default one.
- `--quiet` prints errors only, and `--verbose` prints every step it takes.

### Verbose output

With `--verbose` the tool prints each request, each response status and the time it took, so a
slow mirror or a proxy that rewrites responses shows up in the log at once.

## Troubleshooting

If the install fails behind a proxy, set `HTTPS_PROXY` and run the installer again.
"""


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(
    "front_matter",
    [
        "---\ntitle: Installing the CLI\nsidebar_position: 2\n---\n",
        '+++\ntitle = "  Installing the CLI  "\nweight = 2\n+++\n',
    ],
)
def test_a_page_titled_only_in_front_matter_has_its_title_atop_every_path(strategy, front_matter):
    """Docs sites (Docusaurus, MkDocs, Hugo) title many pages in their front matter only and show
    that title as the page's H1; it was in no chunk's header path, title or embedded context, so
    a search for "installing the CLI" missed the page. Chunk text stays the source's."""
    for options in ({}, SMALL[strategy]):
        document = check_invariants(
            front_matter + TITLED_PAGE, strategy, embed_context=True, **options
        )
        assert len(document.chunks) > 1 or not options
        for chunk in document.chunks:
            assert chunk.headings_path[0] == "Installing the CLI"
            assert chunk.header_path.startswith("# Installing the CLI")
            assert chunk.chunk_path.startswith("# Installing the CLI")
            assert chunk.context.startswith("Context: Installing the CLI")
            assert "Installing the CLI" not in chunk.text
    alone = chunk_source(front_matter + "Run `pip install foo`.\n", strategy=strategy)
    (chunk,) = alone.chunks
    assert (chunk.title, chunk.header_path) == ("Installing the CLI", "# Installing the CLI")


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(
    ("title", "body"),
    [
        ("Installing the CLI", "# Install\n\n" + TITLED_PAGE),
        ("Installing the CLI", "Install\n=======\n\n" + TITLED_PAGE),
        ("~", TITLED_PAGE),  # `5` is the title "5" since chunking.REVISION 38
        ('""', TITLED_PAGE),
        ("[Installing, the CLI]", TITLED_PAGE),
    ],
)
def test_a_front_matter_title_beside_an_h1_or_of_no_text_changes_nothing(strategy, title, body):
    """A page with its own H1 (Docusaurus shows that one), or whose title is no string or empty,
    chunks as the same page whose front matter has no title."""
    records = [
        [
            {**chunk.to_dict(), "chunk_id": ""}
            for chunk in chunk_source(
                f"---\n{key}: {title}\n---\n{body}", strategy=strategy, **SMALL[strategy]
            ).chunks
        ]
        for key in ("title", "subtitle")
    ]
    assert records[0] == records[1]


@pytest.mark.parametrize("strategy", ["semantic", "structural", "hierarchical"])
def test_a_chunk_cut_inside_a_nested_container_repeats_every_first_line(strategy):
    """A `!!! note` inside a `=== "pip"` tab (MkDocs Material): a chunk cut inside the note's
    body repeated only the tab's first line, and the note's lines, 8 columns in, were indented
    code inside the tab (their text no hint of the note they continued)."""
    note = [f"        Step {i}: the workers {'drain and stop ' * 4}first." for i in range(14)]
    tip = [f"            Tip {i} {'keep the old schema readable ' * 3}." for i in range(10)]
    text = "\n".join(
        ["# Upgrade", "", '=== "pip"', "", "    Run pip.", "", '    !!! note "Workers"', ""]
        + [line for step in note for line in (step, "")]
        + ["        ??? tip", ""]
        + tip
    )
    document = check_invariants(text + "\n", strategy, **SMALL[strategy])
    inner = [c for c in document.chunks if c.start_line > 9]
    assert len(inner) > 2
    for chunk in inner:
        lines = chunk.text.split("\n")
        assert '=== "pip"' in lines and '    !!! note "Workers"' in lines, chunk.text
        if chunk.start_line > 37:  # inside the tip's body (the tip's first line is line 37)
            assert "        ??? tip" in lines, chunk.text
        kinds = {token.type for token in parse_tokens(chunk.text)}
        assert "code_block" not in kinds, chunk.text
