"""The block structure of a markdown document, from markdown-it-py's CommonMark block parser.

Only the block stage runs (no inline parse): block tokens carry the line ranges (`Token.map`) that
chunking needs, and skipping inline parsing makes the parse several times cheaper. Headings
nested in containers (`> # x`, `- # x`) are part of their container; only top-level blocks
are listed. Python-Markdown's indented containers (MkDocs and MkDocs Material: admonitions
`!!! note`, collapsible blocks `??? tip`, content tabs `=== "pip"`) are containers too
(`_admonition`), not a title line followed by indented code, and so are colon fences (MyST's
`:::{tip}`, VitePress' `::: warning`, Docusaurus' `:::note`) and pymdownx.blocks' slash fences
(FastAPI's `/// tip | Title`, `//// tab | Python 3.10+`; `_colon_fence`), in list items and block
quotes too (`ParsedDocument.containers`). A MyST directive of markdown content written as a fence
(```{note}) stays a fence whose lines are of its content's kinds (`MARKDOWN_DIRECTIVES`), and a
MyST target line (`(label)=`) or a line of empty HTML anchors (`<a id="v2"></a>`) is part of the
heading it labels.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from operator import attrgetter, itemgetter

from markdown_it import MarkdownIt
from markdown_it.token import Token

from chunking.links import FoundLink, find_links
from chunking.normalize import NormalizedDocument, front_matter_title
from chunking.record import CHUNKING_FAILED, ChunkingError

# Kinds of source lines (one byte per line in `ParsedDocument.line_kinds`).
TEXT = 0
FENCE_MARK = 1  # the opening or closing line of a fenced code block
FENCE_BODY = 2  # a line inside a fenced code block
INDENTED_CODE = 3
TABLE = 4
LITERAL_KINDS = frozenset((FENCE_MARK, FENCE_BODY, INDENTED_CODE, TABLE))
_LITERAL_TOKENS = frozenset(("fence", "code_block", "table_open"))  # tokens of literal lines
NOT_SPACE = re.compile(r"\S")  # what `str.strip` keeps (both read `str.isspace`)
_QUOTE_BEFORE_LIST = re.compile(r">(?=[^\s>])")  # a quote marker with no space after it
_START_LINE = attrgetter("start_line")
_FIRST = itemgetter(0)
# A MyST target line, `(label)=`, or a line of empty HTML anchors, `<a id="v1.2.0"></a>` (GitHub
# changelogs, READMEs): a label for links to the block after it, rendering nothing.
_TARGET = re.compile(
    r"[ \t]{0,3}(?:\([^()\s]+\)=|(?:<a\s[^<>]*\b(?:id|name)\s*=[^<>]*>\s*</a>[ \t]*)+)[ \t]*"
)


# A trailing attribute list (mkdocs attr_list, Pandoc): `{ #anchor .class key=value }`.
_ATTRIBUTE = r"(?:[#.][\w:-]+|[\w-]+=\S+)"
_ATTRIBUTE_LIST = re.compile(rf"\s*\{{\s*{_ATTRIBUTE}(?:\s+{_ATTRIBUTE})*\s*\}}\s*$")
# Trailing badges: self-closing tags (VitePress' `<Badge type="tip" text="v2.0" />`, an MDX
# component) and images, linked or not, inline or by reference (a README's `# tool
# [![CI](https://…/badge.svg)](https://…) ![npm][npm-badge]`).
_IMAGE = r"!\[[^\]]*\](?:\([^)]*\)|\[[^\]]*\])"
_BADGE = rf"<[A-Za-z][\w.:-]*(?:\s[^<>]*)?/>|\[{_IMAGE}\](?:\([^)]*\)|\[[^\]]*\])|{_IMAGE}"
_TRAILING_BADGES = re.compile(rf"(?:\s*(?:{_BADGE}))+\s*$")
# Leading empty anchors, a README's `<a name="opts"></a> Options` (a link target, no text).
_LEADING_ANCHORS = re.compile(r"^(?:<a\s[^<>]*>\s*</a>\s*)+")


@dataclass(frozen=True)
class Heading:
    """One heading: its level (1-6) and its text (raw inline markdown)."""

    level: int
    text: str

    @property
    def markdown(self) -> str:
        """The heading as an ATX line, e.g. `## Install`."""
        return f"{'#' * self.level} {self.text}".rstrip()

    @property
    def title(self) -> str:
        """The text without a trailing attribute list or badge (see `heading_title`)."""
        return heading_title(self.text)


def heading_title(text: str) -> str:
    """A heading's text without a trailing attribute list, `First Steps { #first-steps }` titled
    `First Steps`, then without trailing badges and leading empty anchors where text is left:
    `Options <Badge text="beta" />`, `rustfmt [![linux](…/badge.svg)](…)` and `<a name="o"></a>
    Options` titled `Options`, `rustfmt` and `Options` (chunk text keeps the heading as written)."""
    text = _ATTRIBUTE_LIST.sub("", text)
    return _LEADING_ANCHORS.sub("", _TRAILING_BADGES.sub("", text)) or text


@dataclass(frozen=True)
class Block:
    """One top-level block; lines are 1-based, inclusive, in the original file."""

    # heading, paragraph, fence, code_block, bullet_list, ordered_list, table, blockquote,
    # admonition (an indented container, see `_admonition`, a colon fence, `_colon_fence`, or a
    # MyST directive of markdown content, `MARKDOWN_DIRECTIVES`), html_block, hr or reference
    # (link reference definitions)
    kind: str
    start_line: int
    end_line: int
    heading: Heading | None = None  # for kind "heading" (ATX or setext)
    info: str = ""  # fence info string
    markup: str = ""  # fence marker, e.g. "```" or "~~~~"
    closed: bool = True  # False for a fence without a closing marker


@dataclass(frozen=True)
class ParsedDocument:
    """A normalised document with its top-level blocks and the kind of every line."""

    source: NormalizedDocument
    blocks: tuple[Block, ...]
    # every fenced code block, nested ones too, in document order: each opens after the last
    # line of the one before (`fences_opening` and `last_fence_opened` bisect them)
    fences: tuple[Block, ...]
    line_kinds: bytes  # line_kinds[n - 1] is the kind of original line n
    links: tuple[FoundLink, ...]  # every link, with its original line
    # Headings above the body, in no line of it (see `implied_headings`): every strategy's
    # heading paths start with them; chunk text never holds them.
    implied: tuple[Heading, ...] = ()
    # every indented container and colon or slash fence, nested ones and those in list items
    # and block quotes too, in document order (see `indented_containers`): (first line, last
    # line, first line as a chunk repeats it, `_opener_text`)
    containers: tuple[tuple[int, int, str], ...] = ()
    # container_parents[i]: the index in `containers` of the one around containers[i], -1 none
    container_parents: tuple[int, ...] = ()

    @property
    def lines(self) -> tuple[str, ...]:
        """Every line of the file; lines[n - 1] is original line n."""
        return self.source.lines


# First characters (after indentation) a block rule can start with; the other rules (table, code,
# lheading, paragraph) can start anywhere. markdown-it tries every rule on every line; trying only
# the rules a line's first character allows gives the same tokens for about a third less time
# (tests/test_chunking_blocks.py compares both parsers).
_FIRST_CHARS = {
    "fence": "`~",
    "blockquote": ">",
    "hr": "*-_",
    "list": "*-+0123456789",
    "reference": "[",
    "html_block": "<",
    "heading": "#",
    "admonition": "!?=",
    "colon_fence": ":/",
}


# What a setext underline line can look like in the source: markdown-it's lheading rule only
# matches a line that is, after its indentation and block quote markers, a run of `=` or `-`
# and spaces. A text without such a line is parsed without that rule: lheading tries every
# paragraph (scanning it to its end) and, failing, pushes no token, so the tokens are the same.
_SETEXT_UNDERLINE = re.compile(r"^[ \t>]*(?:=+|-+)[ \t]*$", re.MULTILINE)


# The first line of a Python-Markdown indented container: an admonition (`!!! note "Title"`),
# pymdownx.details' collapsible block (`??? tip`, `???+ tip` open) or pymdownx.tabbed's content tab
# (`=== "pip"`, `===+ "pip"`, `===! "pip"`); the extensions' own expressions, after indentation.
_ADMONITION = re.compile(
    r'(?:!!! ?|\?\?\?\+? ?)[\w-]+(?: +[\w-]+)*(?: +"[^\n]*?")? *'
    r'|===(?:!?\+|\+!|!)? +"[^\n]*?" *'
)


def _admonition(state, start: int, end: int, silent: bool) -> bool:
    """Block rule: an indented container's first line and every line after it that is blank or
    indented 4 more columns, up to its last such non-blank line, as one container (tokens
    `admonition_open`, its body parsed as markdown 4 columns in, `admonition_close`), as
    Python-Markdown reads it; CommonMark reads a paragraph and a block of indented code."""
    if state.sCount[start] - state.blkIndent >= 4:
        return False
    first = state.src[state.bMarks[start] + state.tShift[start] : state.eMarks[start]]
    if _ADMONITION.fullmatch(first) is None:
        return False
    if silent:
        return True
    last = line = start
    while line + 1 < end:
        line += 1
        if state.isEmpty(line):
            continue
        if state.sCount[line] - state.blkIndent < 4:
            break
        last = line
    opener = state.push("admonition_open", "div", 1)
    opener.map, opener.block = [start, last + 1], True
    saved = state.parentType, state.lineMax, state.blkIndent
    state.parentType, state.lineMax, state.blkIndent = "admonition", last + 1, state.blkIndent + 4
    state.md.block.tokenize(state, start + 1, last + 1)
    state.parentType, state.lineMax, state.blkIndent = saved
    state.push("admonition_close", "div", -1).block = True
    state.line = last + 1
    return True


def _repeated_opener(line: str) -> bool:
    """Whether `line` opens an indented container or a colon or slash fence (see
    `indented_containers`); a MyST directive written as a code fence is reopened as one."""
    first = line.lstrip(" \t")
    return bool(_ADMONITION.fullmatch(first) or _fence_marker(first))


# What may come before a container's first line in a list item or block quote: indentation,
# block quote markers and list markers (`> `, `1. `, `- > `).
_CONTAINER_PREFIX = re.compile(r"(?:[ \t>]|(?:[-+*]|[0-9]{1,9}[.)])(?=[ \t]))*")


def _opener_text(line: str) -> str:
    """`line` as a chunk repeats it when it opens a container (`_repeated_opener`) after its
    indentation, block quote markers and list markers, those list markers blanks (`4. /// note`
    repeated as `   /// note`, as `_blank_list_markers` puts a reopened fence); '' otherwise."""
    cut = _CONTAINER_PREFIX.match(line).end()
    rest = line[cut:]
    return _blank_list_markers(line[:cut]) + rest if _repeated_opener(rest) else ""


def container_body_indent(opener: str) -> str:
    """The indentation of the body of the container that `opener` (see `indented_containers`)
    opens, with the block quote markers before it: 4 columns in for an indented container, none
    more for a colon or slash fence."""
    indent = opener[: len(opener) - len(opener.lstrip(" \t>"))]
    return indent if _fence_marker(opener.lstrip(" \t>")) else indent + "    "


def indented_containers(doc: ParsedDocument, block: Block) -> tuple[tuple[int, int, str], ...]:
    """The Python-Markdown indented containers (`!!! note "T"`, `??? tip`, `=== "pip"`) and
    colon or slash fences (`:::{tip}`, `/// tip`) of top-level `block` (see
    `ParsedDocument.containers`), outermost first: the block itself when it is one, those nested
    in it at any depth (a `!!! note` in a `=== "pip"` tab, a `:::{tab-item}` in a
    `::::{tab-set}`, a `/// note` in a `//// tab`), and those in the items and block quotes of a
    list or block quote (FastAPI's `1. Install …` then `    /// note`). Their body lines read
    otherwise without their first line (an indented container's, 4 columns in, as indented code;
    a colon or slash fence's as text whose closing line closes nothing), so a chunk starting
    inside a body repeats them; () for a block holding none."""
    first = bisect_left(doc.containers, block.start_line, key=_FIRST)
    return doc.containers[first : bisect_right(doc.containers, block.end_line, key=_FIRST)]


def block_starting_at(doc: ParsedDocument, line: int) -> Block | None:
    """The top-level block that starts on `line`, None if none."""
    index = bisect_left(doc.blocks, line, key=_START_LINE)
    if index < len(doc.blocks) and doc.blocks[index].start_line == line:
        return doc.blocks[index]
    return None


def container_starting_at(doc: ParsedDocument, line: int) -> tuple[int, int, str] | None:
    """The container (see `ParsedDocument.containers`) whose first line is `line`, None if
    none."""
    index = bisect_left(doc.containers, line, key=_FIRST)
    if index < len(doc.containers) and doc.containers[index][0] == line:
        return doc.containers[index]
    return None


def _around(doc: ParsedDocument, line: int, opened: bool) -> Iterator[int]:
    """Indices in `doc.containers` of the last container whose first line is before `line` (or
    on it, when `opened`), then of the containers around it, innermost first: the only ones
    that can hold `line` (a container before it that does not hold it holds none after it)."""
    find = bisect_right if opened else bisect_left
    index = find(doc.containers, line, key=_FIRST) - 1
    while index >= 0:
        yield index
        index = doc.container_parents[index]


def container_openers(doc: ParsedDocument, line: int) -> str:
    """The first lines (as repeated, see `indented_containers`) of the containers whose body
    holds `line`, outermost first, one a line; '' for none. Found by a bisect and a walk out
    (the lines of 20,000 notes in one block quote were a scan of all of them each)."""
    held = [doc.containers[i][2] for i in _around(doc, line, False) if line <= doc.containers[i][1]]
    return "\n".join(reversed(held))


def colon_closers(
    doc: ParsedDocument, containers: Sequence[tuple[int, int, str]]
) -> tuple[tuple[int, int, str], ...]:
    """The colon and slash fences among `containers` (see `indented_containers`) as (first line,
    closing line, closing line's text): a chunk that holds such a fence's first line (its own or
    repeated) and ends before its closing line ends with that line (markdown-it-container, MyST
    and pymdownx.blocks would read the fence on past the chunk's end), as a cut code fence is
    closed."""
    return tuple(
        (first, last, doc.lines[last - 1].rstrip())
        for first, last, text in containers
        if _fence_marker(text.lstrip(" \t>"))
    )


def closers_after(doc: ParsedDocument, line: int, since: int) -> list[str]:
    """The closing lines of the colon and slash fences (see `colon_closers`) open after `line`
    whose first line is a chunk's line since line `since` (0: all, repeated ones too),
    innermost first."""
    found = []
    for index in _around(doc, line, True):
        first, last, text = doc.containers[index]
        if first < since:
            break  # the containers around it start earlier still
        if line < last and _fence_marker(text.lstrip(" \t>")):
            found.append(doc.lines[last - 1].rstrip())
    return found


def in_container(doc: ParsedDocument, first: int, last: int) -> bool:
    """Whether any of lines first..last is a line of a container (see `indented_containers`),
    from its first line to its last."""
    return any(doc.containers[i][1] >= first for i in _around(doc, last, True))


# An HTML table in a top-level HTML block (`HtmlTable`): its `<table>` tag, a row's `<tr>` tag
# (each at the start of its line), a header cell, and the tags that open or close its parts.
_HTML_TABLE = re.compile(r"[ \t]*<table[\s>]", re.IGNORECASE)
_HTML_ROW = re.compile(r"[ \t]*<tr[\s>]", re.IGNORECASE)
_HTML_HEADER_CELL = re.compile(r"<th[\s>]", re.IGNORECASE)
_HTML_TABLE_PART = re.compile(r"<(/?)(table|thead|tbody|tfoot)(?=[\s>])", re.IGNORECASE)


@dataclass(frozen=True)
class HtmlTable:
    """An HTML table of a top-level HTML block (its `<table>` tag starting a line), with a row
    after its header: a chunk that starts at such a row begins with `head` (valid HTML again,
    as a cut markdown table's rows get its header rows), and one that holds its first line (its
    own or repeated) and ends inside it ends with the lines that close its open parts."""

    first: int  # the line of its `<table>` tag
    body: int  # its first row after the header (`<thead>`'s rows, a first row of `<th>` cells)
    last: int  # the line of its `</table>` tag (the block's last line when none)
    rows: frozenset[int]  # the first lines of its rows (`<tr>` lines) from `body` on
    head: str  # lines first..body - 1: `<table>`, the header row, `<tbody>`
    # closers[n - first]: the lines closing its parts open after line n (`</tbody>\n</table>`),
    # each tag indented as the line it opened on
    closers: tuple[str, ...]

    def closing(self, line: int) -> str:
        """The lines that close the table's parts open after `line`; '' outside it and from
        its last line on."""
        return self.closers[line - self.first] if self.first <= line < self.last else ""


def html_tables(doc: ParsedDocument, block: Block) -> tuple[HtmlTable, ...]:
    """The HTML tables of top-level `block` (see `HtmlTable`), in order; () for any other block.
    A table nested in another is none, nor are the one around it and those after it."""
    if block.kind != "html_block":
        return ()
    lines, found = doc.lines, []
    number = block.start_line
    while number <= block.end_line:
        if _HTML_TABLE.match(lines[number - 1]):
            table = _html_table(lines, number, block.end_line)
            if table is None:
                break
            found.append(table)
            number = table.last
        number += 1
    return tuple(t for t in found if t.rows)


def _html_table(lines: tuple[str, ...], first: int, end: int) -> HtmlTable | None:
    """The table whose `<table>` tag starts line `first`, within lines first..end; None for a
    table in or around another one."""
    stack: list[tuple[str, str]] = []  # open parts: (tag, indentation of its line)
    closers: list[str] = []
    rows: list[int] = []
    head_end = None  # the line that ends a `<thead>`: its `</thead>`, or a `<tbody>` after it
    for number in range(first, end + 1):
        line = lines[number - 1]
        if _HTML_ROW.match(line):
            rows.append(number)
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        for match in _HTML_TABLE_PART.finditer(line):
            tag = match.group(2).lower()
            if not match.group(1):
                if tag == "table" and stack:
                    return None  # nested
                if tag == "tbody" and any(t == "thead" for t, _ in stack):
                    stack = [part for part in stack if part[0] != "thead"]
                    head_end = head_end or number
                stack.append((tag, indent))
            elif any(t == tag for t, _ in stack):
                while stack.pop()[0] != tag:
                    pass
                if tag == "thead":
                    head_end = head_end or number
        if not stack:
            break
        text = "\n".join(f"{indent}</{tag}>" for tag, indent in reversed(stack))
        closers.append(closers[-1] if closers and closers[-1] == text else text)
    if head_end is not None:
        later = [row for row in rows if row > head_end]
    elif rows and any(
        _HTML_HEADER_CELL.search(line)
        for line in lines[rows[0] - 1 : (rows[1] if len(rows) > 1 else number) - 1]
    ):
        later = rows[1:]
    else:
        later = rows
    body = later[0] if later else number
    return HtmlTable(
        first=first,
        body=body,
        last=number,
        rows=frozenset(later),
        head="\n".join(lines[first - 1 : body - 1]),
        closers=tuple(closers),
    )


def html_rows(doc: ParsedDocument, block: Block) -> list[tuple[int, int]]:
    """(first, last) line of each row of HTML block `block` that chunking keeps whole where it
    fits: a `<tr>` line to the line before the next; in an `HtmlTable` its header joined to its
    first row after it (from its `<table>` line), and its last row ending at its `</table>`
    line. Lines in no row (before the first, after a table) are not listed; [] for any other
    block."""
    if block.kind != "html_block":
        return []
    tables = html_tables(doc, block)
    heads = {n for t in tables for n in range(t.first + 1, t.body + 1)}
    firsts = {t.first for t in tables}
    starts = [
        n
        for n in range(block.start_line, block.end_line + 1)
        if n in firsts or (n not in heads and _HTML_ROW.match(doc.lines[n - 1]))
    ]
    lasts = [t.last for t in tables]
    rows = []
    for index, start in enumerate(starts):
        end = starts[index + 1] - 1 if index + 1 < len(starts) else block.end_line
        table = bisect_left(lasts, start)  # the table holding `start`, if any
        if table < len(tables) and tables[table].first <= start:
            end = min(end, tables[table].last)
        rows.append((start, end))
    return rows


# MyST directives whose content is markdown (admonitions, version notes, sphinx-design's tabs,
# cards and dropdowns, docutils' body elements, Jupyter Book's exercises). Written as a fence with
# a braced info string (```{note}), such a directive stays a fence (cut, closed and reopened as
# one), but its lines are of the kinds of its content read as markdown (`_mark`, `_links`): a
# note is text, a code fence in a tab-item code. Any other directive (```{code-block} python,
# ```{code-cell}, ```{math}, ```{eval-rst}, an unknown name) is a fence of code.
MARKDOWN_DIRECTIVES = frozenset(
    (
        "admonition attention caution danger error hint important note seealso tip todo warning "
        "versionadded versionchanged versionremoved deprecated "
        "dropdown card grid grid-item grid-item-card tab-set tab-item "
        "topic sidebar margin epigraph pull-quote highlights compound container div rubric "
        "glossary figure table list-table exercise solution"
    ).split()
)
# How deep directives nested in directives are read as markdown (each level reads the content
# again: a page of 20,000 nested `{note}` openers stays linear).
MAX_DIRECTIVE_DEPTH = 8
_FENCE_OPENER = re.compile(r"(`{3,}|~{3,})[ \t]*(.*)")
_DIRECTIVE_INFO = re.compile(r"\{([\w+:-]+)\}(?:\s.*)?")


def markdown_directive(info: str) -> bool:
    """Whether a fence's info string names a MyST directive of markdown content (`{note}`,
    `{admonition} Title`; see `MARKDOWN_DIRECTIVES`)."""
    directive = _DIRECTIVE_INFO.fullmatch(info.strip())
    return directive is not None and directive.group(1) in MARKDOWN_DIRECTIVES


# A colon fence's first line: MyST's `:::{note}`, VitePress' `::: tip Title`, Docusaurus' `:::note`
# (a name follows the colons).
_COLON_OPENER = re.compile(r"(:{3,}) *(?:\{[\w+:-]+\}|[A-Za-z][\w-]*)")
# A slash fence's first line, pymdownx.blocks' (`/// note | Title`, `//// tab | Python 3.10+`): a
# name, then nothing or a `|` and the title; the extension's own expression, after indentation.
_SLASH_OPENER = re.compile(r"(/{3,}) *[\w-]+ *(?:\|.*)?")


def _fence_marker(first: str) -> str:
    """The run of colons or slashes that opens a colon fence (`:::{tip}`) or a slash fence
    (`/// tip | Title`) whose first line, after its indentation, is `first`; '' for any other."""
    if first.startswith(":"):
        opener = _COLON_OPENER.match(first)
    elif first.startswith("/"):
        opener = _SLASH_OPENER.fullmatch(first)
    else:
        return ""
    return opener.group(1) if opener else ""


def _colon_fence(state, start: int, end: int, silent: bool) -> bool:
    """Block rule: a colon fence (MyST's `:::{tip}`, VitePress' `::: warning Title`, Docusaurus'
    `:::note`) up to the next line of as many colons or more outside fenced code, or a slash fence
    (pymdownx.blocks' `/// note | Title`, FastAPI's) up to the next line of exactly as many
    slashes (`//// tab` holds `/// note` ... `///`), as one container (tokens `admonition_open`,
    its body parsed as markdown, `admonition_close`); without such a line it is no container
    (mkdocstrings' `::: package.name` has none). A slash fence's options (`    type: warning`,
    the lines indented 4 columns right after its first line) are text of the container, not
    indented code."""
    if state.sCount[start] - state.blkIndent >= 4:
        return False
    marker = _fence_marker(
        state.src[state.bMarks[start] + state.tShift[start] : state.eMarks[start]]
    )
    if not marker:
        return False
    bounds = _container_end(state, start, end, marker)
    if bounds is None:
        return False
    if silent:
        return True
    token = state.push("admonition_open", "div", 1)
    token.map, token.block, token.markup = [start, bounds + 1], True, marker
    body = start + 1
    while (
        marker[0] == "/" and not state.isEmpty(body) and state.sCount[body] - state.blkIndent >= 4
    ):
        body += 1  # an option line
    saved = state.parentType, state.lineMax
    state.parentType, state.lineMax = "admonition", bounds
    state.md.block.tokenize(state, body, bounds)
    state.parentType, state.lineMax = saved
    state.push("admonition_close", "div", -1).block = True
    state.line = bounds + 1
    return True


def _container_end(state, start: int, end: int, marker: str) -> int | None:
    """The line that closes the colon or slash fence opened on line `start` with `marker`: colons,
    at least as many, or exactly as many slashes, and spaces, outside fenced code and before its
    parent ends; None where none does.

    Linear for a page of many openers: none is looked for after the last line of colons (or
    slashes) alone, nor between an opener and where a search from an earlier opener whose
    closing lines would close this one found none (the parse's env keeps that search, the last
    for colons and for each count of slashes: each would find none again)."""
    char = marker[0]
    lines = _closing_lines(state, char)
    after = bisect_right(lines, start)
    if after == len(lines) or lines[after] >= end:
        return None
    failed = state.env.setdefault("fences without a close", {})
    # one search kept for colons (none closing n colons, none closes more), one per slash count
    key = state.blkIndent, end, char if char == ":" else marker
    first, last, length = failed.get(key, (0, -1, 0))
    if first < start < last and length <= len(marker):
        return None
    count = f"{{{len(marker)},}}" if char == ":" else f"{{{len(marker)}}}"
    closing = re.compile(rf"{re.escape(char)}{count}[ \t]*")
    inner = None  # the closing line of a fence inside the colon fence, while in it
    line = start + 1
    while line < end:
        begin, stop = state.bMarks[line] + state.tShift[line], state.eMarks[line]
        if begin < stop and state.sCount[line] < state.blkIndent:
            break
        text = state.src[begin:stop]
        if state.sCount[line] - state.blkIndent >= 4:
            pass  # indented code, or a fence's indented content: closes nothing
        elif inner is not None:
            inner = None if inner.fullmatch(text) else inner
        elif closing.fullmatch(text):
            return line
        elif fence := _FENCE_OPENER.fullmatch(text):
            run = fence.group(1)
            inner = re.compile(rf"{re.escape(run[0])}{{{len(run)},}}[ \t]*")
        line += 1
    failed[key] = (start, line, len(marker))
    return None


# Lines of colons or slashes alone (after indentation and block quote markers), by the character.
_CLOSING_LINE = {
    char: re.compile(rf"^[ \t>]*{re.escape(char)}{{3,}}[ \t]*$", re.MULTILINE) for char in ":/"
}


def _closing_lines(state, char: str) -> list[int]:
    """The 0-based lines of the parsed text that are `char` (`:` or `/`) 3 times or more alone
    (after indentation and block quote markers): those that may close a colon or slash fence;
    found once per parse (kept in its env)."""
    key = f"{char} lines"
    lines = state.env.get(key)
    if lines is None:
        # a match starts a line: its number is where the line starts (`bMarks`) are
        starts = state.bMarks
        found = _CLOSING_LINE[char].finditer(state.src)
        lines = [bisect_left(starts, match.start()) for match in found]
        state.env[key] = lines
    return lines


@lru_cache(maxsize=4)
def block_parser(dispatch: bool = True, setext: bool = True) -> MarkdownIt:
    """The shared CommonMark parser with GFM tables and Python-Markdown's indented containers
    (`_admonition`); `dispatch` picks rules by first character, `setext` keeps the setext
    heading rule (lheading)."""
    md = MarkdownIt("commonmark").enable("table")
    md.block.ruler.before("code", "admonition", _admonition)
    md.block.ruler.before(
        "fence",
        "colon_fence",
        _colon_fence,
        {"alt": ["paragraph", "reference", "blockquote", "list"]},
    )
    if not setext:
        md.disable("lheading")
    if dispatch:
        _dispatch_by_first_char(md)
    return md


def _dispatch_by_first_char(md: MarkdownIt) -> None:
    """Replace each compiled block rule chain by one function that tries only the rules the
    line's first character allows, in the chain's order (the first rule that matches wins)."""
    ruler = md.block.ruler
    ruler.getRules("")  # compiles every chain into ruler.__cache__
    names = {rule.fn: rule.name for rule in ruler.__rules__}
    for chain, rules in list(ruler.__cache__.items()):
        anywhere = tuple(rule for rule in rules if names[rule] not in _FIRST_CHARS)
        by_char = {
            char: tuple(rule for rule in rules if char in _FIRST_CHARS.get(names[rule], char))
            for rule in rules
            for char in _FIRST_CHARS.get(names[rule], "")
        }
        ruler.__cache__[chain] = [_chain(by_char, anywhere, tuple(rules))]


def _chain(by_char: dict, anywhere: tuple, every: tuple):
    def dispatch(state, line: int, end: int, silent: bool) -> bool:
        pos = state.bMarks[line] + state.tShift[line]
        rules = by_char.get(state.src[pos], anywhere) if pos < state.eMarks[line] else every
        for rule in rules:
            if rule(state, line, end, silent):
                return True
        return False

    return dispatch


def parse_tokens(text: str, env: dict | None = None) -> list[Token]:
    """Block tokens of `text` (inline tokens keep their raw content and have no children)."""
    md = block_parser(setext=_SETEXT_UNDERLINE.search(text) is not None)
    tokens: list[Token] = []
    if text:
        md.block.parse(text, md, {} if env is None else env, tokens)
    return tokens


def fence_closed(token: Token) -> bool:
    """Whether a `fence` token has a closing marker line.

    markdown-it puts every line after the opener into `content` except a closing marker, so a
    closed fence has exactly two lines (opener and closer) that are not content.
    """
    start, end = token.map
    return token.content.count("\n") == end - start - 2


def parse(source: NormalizedDocument) -> ParsedDocument:
    """Block-parse the body of `source` into top-level blocks (those with text, see `has_text`;
    link reference definitions too, see `_with_references`), fences and per-line kinds."""
    offset = source.body_start
    env: dict = {}
    tokens = parse_tokens(source.body, env)
    kinds = bytearray(len(source.lines))
    blocks: list[Block] = []
    fences: list[Block] = []
    containers: list[tuple[int, int, str]] = []
    parents: list[int] = []
    around: list[int] = []  # per open admonition token: its container's index, or the one around
    for index, token in enumerate(tokens):
        if token.type == "admonition_open":
            first = token.map[0] + offset + 1
            outer = around[-1] if around else -1
            if text := _opener_text(source.lines[first - 1]):
                containers.append((first, token.map[1] + offset, text))
                parents.append(outer)
            around.append(len(containers) - 1 if text else outer)
        elif token.type == "admonition_close":
            around.pop()
        if token.type in _LITERAL_TOKENS:
            start, end = token.map[0] + offset, token.map[1] + offset
            _mark(kinds, token, start, end)
            if token.type == "fence":
                fences.append(_block(token, tokens, index, start, end))
        if token.level == 0 and token.nesting != -1:
            start, end = token.map[0] + offset, token.map[1] + offset
            if has_text(source.lines[start:end]):
                # a paragraph's first lines may hold only U+00A0 and such: blank to chunking
                while not has_text(source.lines[start : start + 1]):
                    start += 1
                blocks.append(_block(token, tokens, index, start, end))
    blocks = _with_references(source, _targets_on_headings(source.lines, blocks))
    return ParsedDocument(
        source=source,
        blocks=tuple(blocks),
        fences=tuple(fences),
        line_kinds=bytes(kinds),
        links=_links(tokens, offset, env.get("references", {})),
        implied=implied_headings(source.front_matter, blocks),
        containers=tuple(containers),
        container_parents=tuple(parents),
    )


def _links(
    tokens: list[Token], offset: int, references: dict, depth: int = 0
) -> tuple[FoundLink, ...]:
    """The links of `tokens` (see `find_links`), and those in the content of MyST directives of
    markdown content (`MAX_DIRECTIVE_DEPTH` deep), in line order."""
    found = list(find_links(tokens, offset, references))
    for token in tokens:
        if _read_as_markdown(token, depth):
            inner = parse_tokens(token.content)
            found += _links(inner, offset + token.map[0] + 1, references, depth + 1)
    return tuple(sorted(found, key=attrgetter("line"))) if len(found) > 1 else tuple(found)


def implied_headings(front_matter: dict, blocks: Sequence[Block]) -> tuple[Heading, ...]:
    """The front matter's title as an H1 above the body, where the body has no level-1 heading
    of its own (docs sites render that title as the page's H1: Docusaurus, MkDocs, Hugo); ()
    otherwise, and for no title (see `front_matter_title`)."""
    title = front_matter_title(front_matter)
    if not title or any(b.heading is not None and b.heading.level == 1 for b in blocks):
        return ()
    return (Heading(level=1, text=title),)


def _targets_on_headings(lines: tuple[str, ...], blocks: list[Block]) -> list[Block]:
    """`blocks`, where a heading follows a paragraph of target lines only (MyST's `(install)=`, the
    label a cross-reference names the heading by, or HTML anchors, `<a id="20.1.0"></a>`), with
    that heading starting at the paragraph: a target is no text of its own (it renders nothing),
    it belongs to the heading it labels."""
    out: list[Block] = []
    for block in blocks:
        before = out[-1] if out else None
        if (
            block.kind == "heading"
            and before is not None
            and before.kind == "paragraph"
            and all(map(_TARGET.fullmatch, lines[before.start_line - 1 : before.end_line]))
        ):
            out[-1] = replace(block, start_line=before.start_line)
        else:
            out.append(block)
    return out


def _with_references(source: NormalizedDocument, blocks: list[Block]) -> list[Block]:
    """`blocks` and, in their place in the document, a block of kind "reference" for each run
    of body lines with text that no block holds: markdown-it makes no token for a link
    reference definition (`[1]: https://example.com`), the only such lines."""
    out: list[Block] = []
    line = source.body_start + 1
    for block in blocks:
        out += _text_runs(source.lines, line, block.start_line)
        out.append(block)
        line = block.end_line + 1
    return out + _text_runs(source.lines, line, len(source.lines) + 1)


def _text_runs(lines: tuple[str, ...], first: int, stop: int) -> list[Block]:
    """A "reference" block for each run of consecutive lines with text among lines
    first..stop - 1."""
    runs: list[Block] = []
    for number in range(first, stop):
        if not NOT_SPACE.search(lines[number - 1]):
            continue
        if runs and runs[-1].end_line == number - 1:
            runs[-1] = Block("reference", runs[-1].start_line, number)
        else:
            runs.append(Block("reference", number, number))
    return runs


def has_text(lines: tuple[str, ...]) -> bool:
    """Whether any of `lines` holds a character other than whitespace.

    CommonMark counts only spaces and tabs as blank, so a line of other whitespace (U+00A0,
    U+3000, a form feed) is a paragraph; it holds no word, and chunking treats it as blank: a
    block of such lines only is no block (`parse` leaves it out), as blank lines are none.
    """
    return any(NOT_SPACE.search(line) for line in lines)


def text_line_kinds(text: str) -> bytes:
    """One kind byte per line of `text` (its lines split on LF), from a block parse of `text`."""
    lines = text.split("\n")
    kinds = bytearray(len(lines))
    for token in parse_tokens(text if text.endswith("\n") else text + "\n"):
        if token.type in _LITERAL_TOKENS:
            _mark(kinds, token, token.map[0], token.map[1])
    return bytes(kinds)


def _read_as_markdown(token: Token, depth: int) -> bool:
    """Whether `token` is a fence that is a MyST directive of markdown content whose content is
    read as markdown: one nested in `depth` such directives, up to `MAX_DIRECTIVE_DEPTH`."""
    return token.type == "fence" and markdown_directive(token.info) and depth < MAX_DIRECTIVE_DEPTH


def _mark(kinds: bytearray, token: Token, start: int, end: int, depth: int = 0) -> None:
    """Record the kinds of the lines [start, end) that `token` covers (literal blocks only; a
    MyST directive of markdown content, by its content's tokens, its fence lines text; deeper
    than `MAX_DIRECTIVE_DEPTH`, text)."""
    if token.type == "fence" and markdown_directive(token.info):
        for child in parse_tokens(token.content) if _read_as_markdown(token, depth) else ():
            if child.type in _LITERAL_TOKENS:
                first, stop = start + 1 + child.map[0], start + 1 + child.map[1]
                _mark(kinds, child, first, stop, depth + 1)
    elif token.type == "fence":
        kinds[start:end] = bytes([FENCE_BODY]) * (end - start)
        kinds[start] = FENCE_MARK
        if fence_closed(token):
            kinds[end - 1] = FENCE_MARK
    elif token.type == "code_block":
        kinds[start:end] = bytes([INDENTED_CODE]) * (end - start)
    elif token.type == "table_open":
        kinds[start:end] = bytes([TABLE]) * (end - start)


def _block(token: Token, tokens: list[Token], index: int, start: int, end: int) -> Block:
    kind = token.type.removesuffix("_open")
    if kind == "heading":
        # A setext heading's text may span lines; a heading is one line wherever it is used.
        text = " ".join(line.strip() for line in tokens[index + 1].content.split("\n"))
        heading = Heading(level=int(token.tag[1]), text=text)
        return Block(kind, start + 1, end, heading=heading)
    if kind == "fence":
        return Block(
            "admonition" if markdown_directive(token.info) else kind,
            start + 1,
            end,
            info=token.info.strip(),
            markup=token.markup,
            closed=fence_closed(token),
        )
    return Block(kind, start + 1, end)


def _opener_parts(doc: ParsedDocument, fence: Block) -> tuple[str, str]:
    return _split_opener(doc.lines[fence.start_line - 1], fence.markup)


def _split_opener(opener: str, markup: str) -> tuple[str, str]:
    """(container prefix, opener from its marker on): the prefix with its list markers blanks
    (`_blank_list_markers`), so it puts a line at the fence's indentation."""
    cut = opener.index(markup)
    return _blank_list_markers(opener[:cut]), opener[cut:]


def _blank_list_markers(prefix: str) -> str:
    """`prefix` (the indentation, block quote and list markers before a fence or container in
    its list item or block quote) with its list markers blanks and its block quote `>` kept. A
    `>` right before a list marker (`>- `, `>1. `) gets the space a quote takes from the lines
    after it."""
    spaced = _QUOTE_BEFORE_LIST.sub("> ", prefix)
    return "".join(char if char in "> \t" else " " for char in spaced)


def fence_line_kind(fence: Block) -> int:
    """The kind of `fence`'s opening or closing line inserted in a chunk (`fence_reopener`,
    `fence_closer`): TEXT for a MyST directive of markdown content, else FENCE_MARK."""
    return TEXT if fence.kind == "admonition" else FENCE_MARK


def fence_closer(doc: ParsedDocument, fence: Block) -> str:
    """A line that closes `fence` where it stands (inside its list item or block quote)."""
    return fence_prefix(doc, fence) + fence.markup


def fence_prefix(doc: ParsedDocument, fence: Block) -> str:
    """What puts a line at `fence`'s indentation, inside its list item or block quote."""
    return _opener_parts(doc, fence)[0]


def fence_reopener(doc: ParsedDocument, fence: Block) -> str:
    """A line that opens `fence` again (same marker and info string) at its indentation.

    An info string holding `|` is left out: markdown-it reads such an opener followed by a table
    delimiter row (`|---|`) as a table's header row, so the fence would not open.
    """
    prefix, rest = _opener_parts(doc, fence)
    return prefix + (fence.markup if "|" in rest else rest)


def fences_opening(fences: Sequence[Block], first: int, last: int) -> Sequence[Block]:
    """Those of `fences` (in line order, as `ParsedDocument.fences`) that open on lines
    first..last: a slice, found by bisects."""
    start = bisect_left(fences, first, key=_START_LINE)
    return fences[start : bisect_right(fences, last, key=_START_LINE)]


def last_fence_opened(fences: Sequence[Block], line: int) -> Block | None:
    """The last of `fences` (in line order, none overlapping the next, as `ParsedDocument.fences`)
    that opens on `line` or before, None if none: the only one of them that can hold `line`."""
    index = bisect_right(fences, line, key=_START_LINE)
    return fences[index - 1] if index else None


def check_fence_marker(fence: Block, size: Callable[[str], int], limit: int, unit: str) -> None:
    """Raise CHUNKING_FAILED when `fence`'s marker, opened and closed again in every piece it
    is cut into, would take over half of a chunk's `limit` (measured by `size`). Only a prefix
    of the marker is measured, so a marker of a million backticks costs no more than a short one.
    """
    marker = size(fence.markup[: 8 * limit + 8])
    if 4 * marker > limit:
        raise ChunkingError(
            CHUNKING_FAILED,
            f"the code fence opened at line {fence.start_line} has a marker of "
            f"{len(fence.markup)} characters ({marker}+ {unit}): too long to reopen and close "
            f"in chunks of at most {limit} {unit}",
        )


def closers_for_open_fences(text: str) -> list[str]:
    """Lines that close the fences still open at the end of `text` (from a parse of `text`)."""
    lines = text.split("\n")
    return [
        _split_opener(lines[token.map[0]], token.markup)[0] + token.markup
        for token in _open_fences(text)
    ]


def unclosed_fences(text: str) -> list[int]:
    """1-based lines of `text` that open a fenced code block still open at the end of `text`.

    A fence that its list item or block quote ends (as CommonMark allows) is not counted.
    """
    return [token.map[0] + 1 for token in _open_fences(text)]


def _open_fences(text: str) -> list[Token]:
    """The fence tokens of a parse of `text` that are still open at its end."""
    text = text if text.endswith("\n") else text + "\n"
    last = text.count("\n")
    return [
        token
        for token in parse_tokens(text)
        if token.type == "fence" and not fence_closed(token) and token.map[1] >= last
    ]
