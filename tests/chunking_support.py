"""Shared helpers of the chunking tests: a hypothesis strategy for random markdown and the
cross-strategy invariant checks."""

from __future__ import annotations

import json
import re

from hypothesis import strategies as st

from chunking import ChunkedDocument, chunk_source
from chunking.blocks import (
    FENCE_MARK,
    NOT_SPACE,
    colon_closers,
    heading_title,
    html_tables,
    indented_containers,
    parse,
    unclosed_fences,
)
from chunking.normalize import normalize
from chunking.strategy import get_strategy

_WORDS = st.sampled_from(
    "the quick brown fox jumps over lazy dog install configure run 安装 指南 設定 설치 "
    "`code` **bold** [link](other.md) <https://example.com> a-very-long-identifier-name_x "
    "# ## ``` ~~~ > - 1. |".split()
)
_SENTENCE = st.lists(_WORDS, min_size=1, max_size=40).map(" ".join)


# A container's first-line and other-lines prefixes: block quotes and list items, nested too.
_CONTAINERS = [
    ("> ", "> "),
    ("- ", "  "),
    ("1. ", "   "),
    ("> - ", ">   "),
    ("- > ", "  > "),
    ("> > ", "> > "),
    ("- - ", "    "),
    ("* ", "\t"),  # a tab continues the item (it reaches column 4)
]


# The first lines of Python-Markdown's indented containers (admonitions, details, content tabs).
_ADMONITIONS = ['!!! note "Read this"', "??? tip", '???+ warning "Open"', '=== "pip"']


# Containers written as fences: MyST directives of markdown content (backticks, colons),
# VitePress' and Docusaurus' colon containers, pymdownx.blocks' slash fences; (opener, closer).
_FENCED_CONTAINERS = [
    ("```{note}", "```"),
    ("````{admonition} Read this", "````"),
    (":::{tip}", ":::"),
    ("::: warning Node version", ":::"),
    ("::::note", "::::"),
    ("/// tip | Read this", "///"),
    ("//// tab | Python 3.10+", "////"),
]


@st.composite
def _fenced_container(draw) -> str:
    """Another block in a container written as a fence, closed or not."""
    opener, closer = draw(st.sampled_from(_FENCED_CONTAINERS))
    inner = draw(_block(nested=False))
    return "\n".join([opener, inner] + ([closer] if draw(st.booleans()) else []))


@st.composite
def _block(draw, nested: bool = True) -> str:
    kind = draw(st.integers(0, 14 if nested else 11))
    if kind == 14:
        return draw(_fenced_container())
    sentence = draw(_SENTENCE)
    if kind == 12:  # another block inside a block quote or a list item (a `/// note` too)
        first, rest = draw(st.sampled_from(_CONTAINERS))
        inner = draw(st.one_of(_block(nested=False), _fenced_container())).split("\n")
        lines = [rest + line if line else rest.rstrip() for line in inner[1:]]
        return "\n".join([first + inner[0], *lines])
    if kind == 13:  # another block in an admonition or content tab, indented 4 columns
        inner = draw(_block(nested=False)).split("\n")
        gap = draw(st.sampled_from(["\n", ""]))
        body = "\n".join(f"    {line}" if line else "" for line in inner)
        return f"{draw(st.sampled_from(_ADMONITIONS))}\n{gap}{body}"
    if kind == 0:
        return f"{'#' * draw(st.integers(1, 6))} {sentence}"
    if kind == 1:
        return f"{sentence}\n{draw(st.sampled_from(['===', '---']))}"
    if kind in (2, 3):
        marker = draw(st.sampled_from(["```", "~~~", "````", "~~~~~"]))
        indent = draw(st.sampled_from(["", " ", "   ", "\t"]))  # a tab: indented code
        body = draw(
            st.lists(st.sampled_from([sentence, "# not a heading", "", "x = 1"]), max_size=30)
        )
        closed = draw(st.booleans()) or kind == 2
        lines = [f"{indent}{marker}{draw(st.sampled_from(['', 'python', 'yaml']))}"]
        lines += [f"{indent}{line}" for line in body]
        return "\n".join(lines + ([f"{indent}{marker}"] if closed else []))
    if kind == 4:
        items = draw(st.lists(_SENTENCE, min_size=1, max_size=6))
        depth = draw(st.integers(0, 3))
        return "\n".join(f"{'  ' * min(i, depth)}- {item}" for i, item in enumerate(items))
    if kind == 5:
        body = draw(st.lists(st.sampled_from([sentence, "# comment", "x = 1"]), max_size=8))
        return "1. item\n\n   ```\n" + "\n".join(f"   {line}" for line in body) + "\n   ```"
    if kind == 6:
        return "\n".join(f"> {line}" for line in draw(st.lists(_SENTENCE, min_size=1, max_size=4)))
    if kind == 7:
        rows = draw(st.lists(_SENTENCE, min_size=1, max_size=5))
        return "| a | b |\n|---|---|\n" + "\n".join(f"| {row} | x |" for row in rows)
    if kind == 8:
        return f"    {sentence}\n    # indented, not a heading"
    if kind == 9:
        return f"<div>\n# {sentence}\n</div>"
    if kind == 10:  # a table without outer pipes: any row may start like another block
        rows = draw(st.lists(_SENTENCE, min_size=2, max_size=5))
        return "\n".join([f"{rows[0]} | b", "--- | ---", *(f"{row} | x" for row in rows[1:])])
    return "\n".join(draw(st.lists(_SENTENCE, min_size=1, max_size=12)))


@st.composite
def markdown_documents(draw) -> str:
    """Random markdown mixing headings, setext headings, fences (closed or not), lists, quotes,
    tables (with and without outer pipes), indented code, HTML, MkDocs admonitions and containers
    written as fences (MyST, VitePress, pymdownx.blocks; in list items and quotes too), with CJK
    words and heading-like lines inside code."""
    blocks = draw(st.lists(_block(), max_size=25))
    separator = draw(st.sampled_from(["\n\n", "\n"]))
    return separator.join(blocks) + draw(st.sampled_from(["", "\n"]))


# A fence line; block quote markers may precede it, a ~~~ fence's info may hold backticks.
_FENCE_LINE = re.compile(r"^[\s>]*(`{3,}[^`]*|~{3,}.*)$")


def _collapse(text: str) -> str:
    return " ".join(text.split())


def own_lines(text: str, context_lines: set[str]) -> list[str]:
    """The chunk's own content lines: its non-blank lines except `context_lines` (headings of the
    document, which may be prepended, tables' header rows, repeated above a table's rows cut
    from them, and indented containers' first lines, repeated above their body's lines cut from
    them) and bare fence lines (which may close or reopen a split fence)."""
    return [
        line
        for line in text.split("\n")
        if line.strip() and _collapse(line) not in context_lines and not _FENCE_LINE.match(line)
    ]


def _holds(line: str, source: str) -> bool:
    """Whether `source` (collapsed) holds chunk line `line`; a piece of a cut line in a block
    quote may repeat the quote's markers."""
    return _collapse(line) in source or _collapse(line.lstrip("> ")) in source


def check_invariants(data: bytes | str, strategy: str, **options) -> ChunkedDocument:
    """Chunk `data` twice and assert every cross-strategy invariant; returns the document."""
    first = chunk_source(data, strategy=strategy, document_id="doc", **options)
    second = chunk_source(data, strategy=strategy, document_id="doc", **options)
    as_json = [json.dumps(c.to_dict(), ensure_ascii=False) for c in first.chunks]
    assert as_json == [json.dumps(c.to_dict(), ensure_ascii=False) for c in second.chunks]

    chunker = get_strategy(strategy, **options)
    doc = parse(normalize(data))
    written = {b.heading.text for b in doc.blocks if b.heading is not None}
    headings = {heading_title(text) for text in written}  # as headings_path names them
    headings |= {heading.title for heading in doc.implied}  # a front-matter title
    heading_lines = {_collapse(f"{'#' * n} {text}") for text in written for n in range(1, 7)}
    table_headers = {
        _collapse(doc.lines[number - 1])
        for b in doc.blocks
        if b.kind == "table"
        for number in (b.start_line, b.start_line + 1)
    }
    # the first lines of indented containers (`!!! note`, nested ones too), repeated above lines
    # cut from their body
    openers = {_collapse(text) for b in doc.blocks for _, _, text in indented_containers(doc, b)}
    # colon fences' closing lines, which end a chunk that ends inside one, and HTML tables'
    # heads, repeated above their later rows, and the lines closing their parts
    closers = {
        _collapse(text)
        for b in doc.blocks
        for _, _, text in colon_closers(doc, indented_containers(doc, b))
    }
    html = {
        _collapse(line)
        for b in doc.blocks
        for table in html_tables(doc, b)
        for text in {table.head, *table.closers}
        for line in text.split("\n")
    }
    context = heading_lines | table_headers | openers | closers | html
    limit = chunker.hard_max_tokens
    assert [c.ordinal for c in first.chunks] == list(range(len(first.chunks)))
    sources: dict[tuple[int, int], str] = {}  # collapsed line ranges (many chunks share one)
    collapsed: dict[int, str] = {}  # collapsed first and last lines
    for chunk in first.chunks:
        assert chunk.text.strip(), f"chunk {chunk.ordinal} is empty"
        assert 1 <= chunk.start_line <= chunk.end_line <= len(doc.lines)
        lines = (chunk.start_line, chunk.end_line)
        if lines not in sources:
            sources[lines] = _collapse("\n".join(doc.lines[lines[0] - 1 : lines[1]]))
        source = sources[lines]
        for line in own_lines(chunk.text, context):
            assert _holds(line, source), (
                f"chunk {chunk.ordinal}: {line!r} is not in lines "
                f"{chunk.start_line}..{chunk.end_line}"
            )
        # First and last lines: the text starts and ends with a non-blank line, and start_line
        # and end_line are non-blank lines that the chunk holds (not prepended context or an
        # added fence line only), so they are its first and last own non-blank lines.
        text_lines = chunk.text.split("\n")
        assert text_lines[0].strip() and text_lines[-1].strip(), (
            f"chunk {chunk.ordinal} starts or ends with a blank line"
        )
        # its own lines first: `any` below then stops at one, instead of first searching a
        # megabyte line for a prepended heading it does not hold (16 s on a 5 MB line)
        text_lines.sort(key=lambda own: _collapse(own) in context)
        for number in lines:
            if number not in collapsed:
                collapsed[number] = _collapse(doc.lines[number - 1])
            line = collapsed[number]
            assert line, f"chunk {chunk.ordinal}: line {number} is blank"
            assert any(own.strip() and _holds(own, line) for own in text_lines), (
                f"chunk {chunk.ordinal}: line {number} is not one of its lines"
            )
        assert unclosed_fences(chunk.text) == [], f"chunk {chunk.ordinal} leaves a fence open"
        assert chunk.token_count == chunker.counter.count(chunk.text)
        if limit is not None:
            assert chunk.token_count <= limit
        assert set(chunk.headings_path) <= headings, "a heading that is not a document heading"
    return first


def check_container_pieces(document: ChunkedDocument, opener: str) -> None:
    """Every chunk of a document of headings and one indented container (`opener`), read alone,
    is headings and that container: a chunk cut from its body repeats its first line, so no line
    of it reads as indented code."""
    for chunk in document.chunks:
        blocks = parse(normalize(chunk.text)).blocks
        assert [b.kind for b in blocks if b.kind != "heading"] == ["admonition"], chunk.text
        assert opener in chunk.text.split("\n")


def html_table(rows: int, thead: bool) -> tuple[str, str, str]:
    """An HTML table of `rows` rows, a `<td>` per cell on its own line (as Node.js' API docs
    write them), its header row in a `<thead>` then a `<tbody>` (`thead`) or first; returns
    the table, its head (its lines before its first row after the header, repeated above a
    later row) and the lines that close it after a row."""
    head = ["<table>", "  <thead>"] if thead else ["<table>"]
    head += ["  <tr>", "    <th>Constant</th>", "    <th>Description</th>", "  </tr>"]
    head += ["  </thead>", "  <tbody>"] if thead else []
    body = [
        f"  <tr>\n    <td><code>SIG{i}</code></td>\n"
        f"    <td>Sent to a process when event number {i} happens.</td>\n  </tr>"
        for i in range(rows)
    ]
    closing = "  </tbody>\n</table>" if thead else "</table>"
    return "\n".join([*head, *body, closing]), "\n".join(head), closing


def check_html_table_pieces(document: ChunkedDocument, table: tuple[str, str, str]) -> None:
    """Every chunk of a document of headings, an HTML `table` (see `html_table`) and text after
    it holds whole rows, every row once, and reads as the table with its header: one cut from
    its rows starts with its head, and one ending inside it ends with the tags closing it."""
    text, head, closing = table
    cells = []
    for index, chunk in enumerate(c for c in document.chunks if "<tr>" in c.text):
        lines = [line for line in chunk.text.split("\n") if not line.startswith("#")]
        if index:
            assert "\n".join(lines).startswith(f"{head}\n  <tr>\n"), chunk.text
        table = "\n".join(lines).split(closing)[0]
        assert chunk.text.count(closing) == 1 and table.endswith("  </tr>\n"), chunk.text
        assert table.count("<tr>") == table.count("</tr>"), chunk.text  # whole rows
        cells += [line for line in lines if "<td>" in line]
    assert len(cells) == len(set(cells)) == text.count("<td>")


def empty_containers(text: str) -> list[str]:
    """The first lines of the containers (`//// tab`, `/// note`, `:::tip`, `!!! note`) of a parse
    of chunk `text` with no line of body: none but the first lines of containers, the closing
    lines of colon and slash fences and fence marker lines (an empty code block) after their
    first line, up to their last."""
    doc = parse(normalize(text))
    marks = {first for first, _, _ in doc.containers}
    marks |= {last for _, last, _ in colon_closers(doc, doc.containers)}
    marks |= {n for n, kind in enumerate(doc.line_kinds, 1) if kind == FENCE_MARK}
    return [
        opener
        for first, last, opener in doc.containers
        if not any(
            n not in marks and NOT_SPACE.search(doc.lines[n - 1])
            for n in range(first + 1, last + 1)
        )
    ]


def empty_code_blocks(text: str) -> list[str]:
    """The opening lines of the fenced code blocks of a parse of chunk `text` that hold no line
    of code (blank lines alone, or none)."""
    doc = parse(normalize(text))
    return [
        doc.lines[fence.start_line - 1]
        for fence in doc.fences
        if not any(
            NOT_SPACE.search(doc.lines[n - 1])
            for n in range(fence.start_line + 1, fence.end_line + (not fence.closed))
        )
    ]
