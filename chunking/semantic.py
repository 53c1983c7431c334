"""The `semantic` strategy: seed 003's sliding-window chunking at heading boundaries.

Seed 003 rules, applied line by line over the document (headings come from the block parse):
- at a heading: seal when the chunk started at H1 and this is its second H2 (the H1 rule); else seal
  when the heading is at or above the chunk's start level, or at or above the deepest level seen in
  the chunk, and the chunk has min_tokens (250); else (going deeper) when it has
  min_tokens_deeper (500);
- before any line that would take the chunk over max_tokens (750): seal; where that line is the
  first line of content under a heading the chunk has just taken, the seal comes before the
  heading instead, so that no chunk ends with a heading whose content is in the next one (the
  seed's "lookahead optimization", one line ahead; where the heading and that line would not fit
  in a chunk of their own either, the line is cut and its first piece fills the heading's chunk);
  likewise before a fence's opening line whose next line would not fit, so that no chunk ends
  with an empty code block (`opener_ends_chunk`), or a container's first line whose first line
  of content would not fit (`container_ends_chunk`; where that line is cut, its first piece
  follows the first line instead), and before a list's last item, one line ending
  with a colon, whose next block's first line would not fit after it, so that tldr-pages'
  "- Description:" stays with its command (`intro_ends_chunk`; before the heading right above
  it, `ends_chunk`);
- a sealed chunk gets its parent headings prepended (BuildChunkWithHierarchy), and a chunk that
  starts between two rows of a table the header and delimiter rows of that table after them (an
  HTML table's head: `<table>`, its header row), as its rows mean nothing without them, and one
  that starts inside the body of an MkDocs container (`!!! note "T"`, `=== "pip"`) its first
  line, as its body reads as indented code without it (the same context; see
  `_Window.new_chunk`);
- a chunk of nothing but headings is not sealed at a heading by the H1 rule or the minimums
  (the heading joins them), and where the hard maximum seals it, it is not emitted when the next
  chunk prepends all its headings: they head that chunk's content (a heading whose first line
  did not fit after it and its prepended parents stood alone, 27 of FastAPI's chunks with
  configs/local.yaml);
- the final chunk is kept only with min_tokens or when it is the only chunk; we apply this rule
  only where it was meant, to a final section under its own heading: the remainder of a section
  that a max-token seal split is always kept (it never fits into the chunk before it, which was
  sealed because the remainder's first line did not fit), with its heading where the seal came
  before it.

Additions (see the README's Decisions): the prepended parents are those active when the chunk
started; the hard maximum covers the whole emitted text (prepended headings and fence lines
included); a seal inside a fenced block closes the fence and reopens it in the next chunk (a chunk
ending inside a colon fence or an HTML table it holds the first line of ends with their closing
lines, `closing_text`), and a fence that its list item, block quote or the file ends gets a closing
line, so every chunk is well-formed markdown (a chunk starting inside a list, block quote or HTML
block, whose lines can parse otherwise without its start, or holding a table row that starts like a
fence opener, is parsed again alone: an inserted closing line that opens a fence there is dropped,
a fence left open is closed); a line longer than the maximum is cut into pieces at word boundaries;
a dropped final chunk is reported in `skipped_tail_tokens` (its links in the document's
`skipped_links`) and kept with `keep_short_tail=True`; a
chunk that starts with text before its first heading (a preamble) takes that heading's level as its
start level; a chunk continuing a section after a max-token seal starts at the level of the
innermost open heading; a chunk's heading path is the stack active at its first own heading (where
it starts when it holds none).

Whole blocks are added at once when every line of them would fit; otherwise the block is added
line by line, so the result is that of the line-by-line algorithm. With an additive counter each
source line is measured once and a range of lines measures the sum of its lines.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from functools import cached_property
from itertools import accumulate
from types import MappingProxyType

from chunking.blocks import (
    FENCE_MARK,
    INDENTED_CODE,
    TABLE,
    TEXT,
    Block,
    Heading,
    ParsedDocument,
    check_fence_marker,
    closers_after,
    closers_for_open_fences,
    colon_closers,
    container_openers,
    container_starting_at,
    fence_closer,
    fence_line_kind,
    fence_prefix,
    fence_reopener,
    html_rows,
    html_tables,
    indented_containers,
    parse_tokens,
    unclosed_fences,
)
from chunking.strategy import Draft, Split, Strategy, register
from chunking.tokens import TokenCounter

# What opens a fence at the start of a line read alone: a fence marker after blanks, block quote
# markers or list markers. The whole match measures at least the line that would close it.
_OPENS_FENCE = re.compile(r"(?:[ \t>]*(?:[-+*]|\d{1,9}[.)])(?=[ \t]))*[ \t>]*(`{3,}|~{3,})")
_CONTAINERS = frozenset({"bullet_list", "ordered_list", "blockquote", "html_block"})
# Blocks that can end with an intro to the next block (see `_Window.intro`; not paragraphs:
# README, Decisions), and the first line of a list item.
_INTRODUCING = frozenset({"bullet_list", "ordered_list"})
_LIST_ITEM = re.compile(r"( {0,3})(?:[-+*]|\d{1,9}[.)])[ \t]+\S")
# Runs of words that can be such markers, one after another (possessive: linear on any line);
# those holding a fence marker are what `pieces` may move to the end of the piece before a cut.
_MARKER_RUN = re.compile(
    r"(?:[->+*]+|\d{1,9}[.)]|`{3,}|~{3,})(?:[ \t]*(?:[->+*]+|\d{1,9}[.)]|`{3,}|~{3,}))*+"
)


@register
class SemanticStrategy(Strategy):
    """Seed 003: heading-aware sliding window with 250/500/750 token thresholds."""

    name = "semantic"
    defaults = MappingProxyType(
        {"min_tokens": 250, "min_tokens_deeper": 500, "max_tokens": 750, "keep_short_tail": False}
    )
    key_options = ("min_tokens", "max_tokens")

    def __init__(self, **options):
        super().__init__(**options)
        low, deeper, high = (
            self.options["min_tokens"],
            self.options["min_tokens_deeper"],
            self.options["max_tokens"],
        )
        if not 0 < low <= deeper or high < max(low, 16):
            raise ValueError(
                "semantic options need 0 < min_tokens <= min_tokens_deeper and "
                f"max_tokens >= max(min_tokens, 16); got {low}, {deeper}, {high}"
            )

    @property
    def hard_max_tokens(self) -> int:
        """The max_tokens option: no emitted chunk text counts more."""
        return self.options["max_tokens"]

    def split(self, doc: ParsedDocument) -> Split:
        """Run seed 003's algorithm over `doc`."""
        return _Window(doc, self.counter, self.options).run()


@dataclass
class _Chunk:
    """The chunk being collected; sizes are in the counter's additive units."""

    parents: tuple[Heading, ...] = ()  # active headings above the chunk's start
    prefix: tuple[Heading, ...] = ()  # the parents prepended to the text (see _Window.new_chunk)
    reopen: str = ""  # fence opener repeated at the top when the chunk starts inside a fence
    reopen_kind: int = FENCE_MARK  # its line's kind (TEXT for a MyST directive's, with its info)
    header: str = ""  # a table's header and delimiter rows (an HTML table's head), when it
    # starts between its rows
    opener: str = ""  # containers' first lines (`!!! note`, `:::{tip}`), if it starts in their body
    overhead: int = 0  # units of the prefix, opener, header and reopen lines, and the reserve
    # Read again alone: it starts inside a top-level list, block quote or HTML block, whose lines
    # can parse otherwise without the block's start around them (a fence opens or does not), or
    # holds the first piece of a line that starts like a fence opener; `reserve` units are kept
    # for closing a fence that its own lines leave open. `container_end`: the last line of the
    # container it starts in, until it takes a line after it (`_Window.leave_container`), and
    # `container_html` whether that container is an HTML block.
    alone: bool = False
    reserve: int = 0
    container_end: int | None = None
    container_html: bool = False
    # Own content: (first line, last line, None, True) for whole source lines, (n, n, text,
    # ends) for a piece of line n, `ends` saying whether the piece ends where the line does.
    segments: list[tuple[int, int, str | None, bool]] = field(default_factory=list)
    units: int = 0  # units of the own content and its inserted fence closers
    has_content: bool = False  # any non-blank own line
    has_body: bool = False  # any non-blank own line that is no heading line
    start_level: int | None = None
    deepest: int | None = None
    seen_h2: bool = False
    headings: list[Heading] = field(default_factory=list)  # its own headings
    continued: bool = False  # starts with the rest of a section that a max-token seal split
    heading_end: int | None = None  # the last line of the last heading the chunk took


class _Window:
    """One pass of seed 003 over one document."""

    def __init__(self, doc: ParsedDocument, counter: TokenCounter, options):
        self.doc = doc
        self.counter = counter
        # Units and non-blank lines among lines 1..n for every n (with an additive counter a
        # range of lines measures the sum of its lines).
        self.lines_total = (
            list(accumulate(counter.line_units(doc.lines), initial=0)) if counter.additive else None
        )
        self.nonblank_total = list(
            accumulate((bool(line.strip()) for line in doc.lines), initial=0)
        )
        headings = {
            n
            for b in doc.blocks
            if b.kind == "heading"
            for n in range(b.start_line, b.end_line + 1)
        }
        self.body_total = list(  # the same for lines that are no heading line
            accumulate(
                (bool(line.strip()) and n not in headings for n, line in enumerate(doc.lines, 1)),
                initial=0,
            )
        )
        self.context: dict[str, int] = {}  # units of lines that are not in the source
        self.min_tokens = options["min_tokens"]
        self.min_deeper = options["min_tokens_deeper"]
        self.max_tokens = options["max_tokens"]
        self.limit = counter.max_units(self.max_tokens)  # most units a chunk text may measure
        self.keep_short_tail = options["keep_short_tail"]
        self.fence_starts = [fence.start_line for fence in doc.fences]
        self.fence_ends = [_fence_end(doc, fence) for fence in doc.fences]
        self.block_starts = [block.start_line for block in doc.blocks]
        self.tables = [(b.start_line, b.end_line) for b in doc.blocks if b.kind == "table"]
        self.table_starts = [first for first, _ in self.tables]
        # the top-level blocks holding containers (`closing_text`)
        self.indented = [
            (b.start_line, b.end_line) for b in doc.blocks if indented_containers(doc, b)
        ]
        self.indented_starts = [first for first, _ in self.indented]
        html = [b for b in doc.blocks if b.kind == "html_block"]
        self.html_tables = [table for block in html for table in html_tables(doc, block)]
        self.html_firsts = [t.first for t in self.html_tables]
        # Units of the lines that close the colon fences or HTML table open after a line (see
        # `closing_text`), by line: room is kept for them as for a fence's closing line.
        self.closing: dict[int, int] = {}
        for first, last, text in colon_closers(doc, doc.containers):
            units = self.context_units(text)
            for number in range(first, last):
                self.closing[number] = self.closing.get(number, 0) + units
        for table in self.html_tables:
            for number in range(table.first, table.last):
                self.closing[number] = self.context_units(table.closing(number))
        self.closing_lines = sorted(self.closing)
        self.containers = [(b.start_line, b.end_line) for b in doc.blocks if b.kind in _CONTAINERS]
        self.container_starts = [first for first, _ in self.containers]
        self.html_starts = {b.start_line for b in html}
        # A fence its list item or block quote ends (or the end of the file) gets a closing line
        # after its last non-blank line in the chunk text, since a chunk may not hold that
        # container.
        self.unclosed_ends = {
            end: fence
            for fence, end in zip(doc.fences, self.fence_ends, strict=True)
            if not fence.closed
        }
        self.unclosed_sorted = sorted(self.unclosed_ends)
        self.hierarchy: dict[int, Heading] = {}
        self.drafts: list[Draft] = []
        self.chunk = _Chunk()

    def run(self) -> Split:
        sections = _sections(self.doc)
        for (heading, blocks), content in zip(sections, self.content_after(sections), strict=True):
            if heading is not None:
                self.heading(heading, content)
                self.add_range(heading.start_line, heading.end_line)
                self.chunk.heading_end = heading.end_line
            if blocks:
                self.add_blocks(blocks)
        skipped, tail = 0, None
        chunk = self.chunk
        if chunk.has_content:
            tokens = self.counter.tokens(chunk.units)
            keep = chunk.continued or self.keep_short_tail or tokens >= self.min_tokens
            if not self.drafts or (chunk.has_body and keep):
                self.seal()
            else:
                tail = self.draft(chunk)
                skipped = self.counter.count(tail.text)
        return Split(drafts=tuple(self.drafts), skipped_tail_tokens=skipped, skipped_tail=tail)

    # -- headings ---------------------------------------------------------------------------

    def content_after(self, sections: list[tuple[Block | None, list[tuple[int, int]]]]) -> list:
        """For each section, the first non-blank line of its body, or of the next section's when
        it has none (a heading right below a heading): the first line a heading's content
        starts with (None at the end of the file)."""
        found: list[int | None] = []
        following = None
        for _, blocks in reversed(sections):
            for first, last in blocks:
                before = self.nonblank_total[first - 1]
                if self.nonblank_total[last] > before:
                    following = bisect_right(self.nonblank_total, before, first, last + 1)
                    break
            found.append(following)
        return found[::-1]

    def heading(self, block: Block, content: int | None) -> None:
        """Seal before the heading if seed 003 says so, or if it would end the chunk (`ends_chunk`),
        then track it in the hierarchy."""
        heading = block.heading
        sealed = not self.chunk.has_content or self.seals_at(heading, self.units_of(block))
        early = not sealed and self.ends_chunk(block, content)
        if sealed or early:
            parents = tuple(self.hierarchy[level] for level in sorted(self.hierarchy))
            following = self.new_chunk(tuple(h for h in parents if h.level < heading.level))
            following.continued = early  # the max-token seal, one heading early: kept when final
            self.seal(following)
        for level in [level for level in self.hierarchy if level >= heading.level]:
            del self.hierarchy[level]
        self.hierarchy[heading.level] = heading
        chunk = self.chunk
        if chunk.start_level is None:
            chunk.start_level = chunk.deepest = heading.level
        chunk.deepest = max(chunk.deepest, heading.level)
        chunk.seen_h2 = chunk.seen_h2 or heading.level == 2
        chunk.headings.append(heading)

    def seals_at(self, heading: Heading, units: int) -> bool:
        """Seed 003's decision at a heading, plus the hard maximum; only the maximum seals a
        chunk of nothing but headings (the heading joins them)."""
        chunk = self.chunk
        if chunk.overhead + chunk.units + units > self.limit:
            return True
        if not chunk.has_body:
            return False
        if chunk.start_level == 1 and heading.level == 2 and chunk.seen_h2:
            return True
        tokens = self.counter.tokens(chunk.units)
        if chunk.start_level is None:
            return tokens >= self.min_deeper
        if heading.level <= chunk.start_level or heading.level <= chunk.deepest:
            return tokens >= self.min_tokens
        return tokens >= self.min_deeper

    def ends_chunk(self, block: Block, content: int | None) -> bool:
        """Whether the heading would be the chunk's last content: its first line of content
        (`content`, after any headings right below it) would not fit after it, so the max-token
        seal would come between them (`lead_units`: a fence's opening line is measured with its
        next line, a container's first line with its first line of content, and a table's head
        with its first row, so that the chunk does not end with the heading and an empty code
        block, container or table either). Where
        the two would not fit in a chunk of their own either, and the line would not fit below
        the heading prepended to a chunk (it is cut; below a container's first lines, those
        repeated too), its first piece stays with the heading (`add_line`, where the heading and
        the lines before its content take at most half the chunk, or, below a container's first
        lines, where that gives the piece more room than this chunk, `moves_head`): the seal
        comes before the heading then too, unless it is right below another heading, which the
        piece follows as well."""
        if content is None:
            return False
        parents = tuple(
            h for level, h in sorted(self.hierarchy.items()) if level < block.heading.level
        )
        overhead = self.new_chunk(parents).overhead
        intro = self.intro(content)
        if intro is not None:  # the heading, its intro and the first line of what it introduces
            units = self.lines_units(block.start_line, intro[0] - 1) + intro[1]
            if not self.fits(units) and overhead + units <= self.limit:
                return True
        units = self.lead_units(block.start_line, content)
        if self.fits(units):
            return False
        if overhead + units <= self.limit:
            return True
        # the line cut: a container's or code block's first line of content, below its head
        content = self.content_line(content)
        opener = self.indented_opener(content)  # a container's first lines, repeated above it
        line = self.lines_units(content, content) + self.closer_units(content)
        fresh = self.new_chunk((*parents, block.heading), opener=opener)
        cut = fresh.overhead + line > self.limit
        head = self.lines_units(block.start_line, content - 1)
        half = overhead + head <= self.limit // 2
        half = half or bool(opener) and self.moves_head(overhead, head)
        return cut and half and not self.below_heading(block.start_line)

    def below_heading(self, number: int) -> bool:
        """Whether the chunk took a heading and no non-blank line after it, before line `number`."""
        end = self.chunk.heading_end
        return end is not None and self.nonblank_total[number - 1] == self.nonblank_total[end]

    # -- lines ------------------------------------------------------------------------------

    def units_of(self, block: Block) -> int:
        return self.lines_units(block.start_line, block.end_line)

    def lines_units(self, first: int, last: int) -> int:
        """Units of source lines first..last joined by newlines."""
        if self.lines_total is not None:
            return self.lines_total[last] - self.lines_total[first - 1]
        return self.counter.units("\n".join(self.doc.lines[first - 1 : last]))

    def context_units(self, text: str) -> int:
        """Units of a text that is not in the source (prepended headings, fence lines), each
        measured once per document."""
        if text not in self.context:
            self.context[text] = self.counter.units(text)
        return self.context[text]

    def add_blocks(self, blocks: list[tuple[int, int]]) -> None:
        """Add the line ranges of a heading-free stretch: all at once when they fit, else one by
        one (each range at once or line by line)."""
        if not self.try_add(blocks[0][0], blocks[-1][1]):
            for first, last in blocks:
                intro = self.intro(first)
                if intro is not None and self.intro_ends_chunk(first, last, *intro):
                    if intro[0] > first:  # a list's items before its last
                        self.add_range(first, intro[0] - 1)
                    first = intro[0]
                    self.seal(self.continuation(first))
                if self.try_add(first, last):
                    continue
                after = first  # the first line not added yet
                for row, end in self.html_rows(first):
                    for number in range(after, row):
                        self.add_line(number)
                    self.add_row(row, end)
                    after = end + 1
                for number in range(after, last + 1):
                    self.add_line(number)

    def html_rows(self, first: int) -> list[tuple[int, int]]:
        """The rows (see `blocks.html_rows`) of the HTML block starting on line `first`; []
        when no HTML block does."""
        if first not in self.html_starts:
            return []
        return html_rows(self.doc, self.doc.blocks[bisect_left(self.block_starts, first)])

    def add_row(self, first: int, last: int) -> None:
        """Add an HTML table's row, lines first..last (`<tr>` to the next row, a table's header
        with its first row after it): at once when it fits, else in the next chunk when it fits
        there, whole as a markdown table's row is (until 2026-11-30 a chunk could end between a
        row's cells), else line by line (a table's header and its first row each as a row)."""
        if self.try_add(first, last):
            return
        fresh = self.continuation(first)
        units = self.lines_units(first, last) + self.largest_closer(first, last)
        if (
            self.chunk.has_content
            and not self.below_heading(first)
            and fresh.overhead + units <= self.limit
        ):
            self.seal(fresh)
            if self.try_add(first, last):
                return
        index = bisect_left(self.html_firsts, first)
        table = self.html_tables[index] if index < len(self.html_tables) else None
        if table is not None and table.first == first and table.body <= last:
            self.add_row(first, table.body - 1)
            self.add_row(table.body, last)
            return
        for number in range(first, last + 1):
            self.add_line(number)

    def add_range(self, first: int, last: int) -> None:
        """Add source lines first..last: at once when every line of them fits, else line by line."""
        if not self.try_add(first, last):
            for number in range(first, last + 1):
                self.add_line(number)

    def try_add(self, first: int, last: int) -> bool:
        """Add lines first..last at once if no line of them would break the hard maximum."""
        closers = [self.unclosed_ends[end] for end in self.unclosed_within(first, last)]
        units = self.lines_units(first, last) + sum(map(self.closer_units_of, closers))
        closer = self.largest_closer(first, last)
        self.leave_container(last)
        if self.chunk.overhead + self.chunk.units + units + closer > self.limit:
            return False
        content = self.nonblank_total[last] > self.nonblank_total[first - 1]
        self.append(first, last, None, units, content)
        return True

    def unclosed_within(self, first: int, last: int) -> list[int]:
        """The end lines of unclosed fences within lines first..last, in order (a bisect: walking
        every unclosed fence per call was quadratic, 23 s for 16k of them)."""
        ends = self.unclosed_sorted
        return ends[bisect_left(ends, first) : bisect_right(ends, last)]

    def add_line(self, number: int) -> None:
        """Add source line `number`, sealing first when it would break the hard maximum."""
        text = self.doc.lines[number - 1]
        ending = self.unclosed_ends.get(number)
        tail = self.closer_units_of(ending) if ending else 0  # closer inserted after the line
        units = self.lines_units(number, number) + tail
        # A table row that starts like a fence opener opens one in a chunk without the table's
        # header and delimiter rows (a piece of a row, a table in a list or block quote, a header
        # too long to repeat): room is kept to close it.
        row = self.doc.line_kinds[number - 1] == TABLE and _OPENS_FENCE.match(text)
        row_closer = self.context_units(row.group()) if row else 0
        closer = max(self.closer_units(number), row_closer)
        self.leave_container(number)
        if self.chunk.has_content and self.fits(units + closer) and self.opener_ends_chunk(number):
            self.seal(self.continuation(number))
        elif self.chunk.has_content and self.fits(units) and self.container_ends_chunk(number):
            self.seal(self.continuation(number))
        elif self.chunk.has_content and self.fits(units) and self.table_ends_chunk(number):
            self.seal(self.continuation(number))
        if self.chunk.has_content and not self.fits(units + closer):
            alone = self.continuation(number).overhead + units + closer <= self.limit
            # below a container's first lines its first piece stays, where it gets an eighth
            # of a chunk (`container_ends_chunk` moved the seal before them where that helps)
            head = self.below_head(number) and self.fits(closer + self.limit // 8)
            below = self.below_heading(number)
            if not head and (alone or not below or not self.fits(self.limit // 2)):
                self.seal(self.continuation(number))
        if self.fits(units + closer):
            self.append(number, number, None, units, bool(text.strip()))
            if row:
                self.keep_room(row_closer)
            return
        # Longer than any chunk can hold: cut at word boundaries, one piece per chunk (the first
        # in the chunk of the heading it follows, which has half its room left). A piece
        # after the first of a line in a fence inside a block quote repeats the quote markers, so
        # that it stays inside the fence its chunk reopens, and one of a line in an indented
        # container's body (or of indented code) the line's indentation, so that it stays inside
        # the container whose first line its chunk repeats (or stays code). A line outside
        # fences that starts like an opener (backticks in its info string: "``` a ```") opens a
        # fence in the chunk of its first piece alone: that chunk is read again and closed, with
        # room kept for the closer; so does a later piece that starts like an opener (its marker
        # did not fit in the piece before), and a piece in a fence that starts like a fence line
        # can close it (the chunk is read again: the closer added after it, which would open a
        # fence, is dropped).
        fence = self.fence_at(number)
        quote = fence_prefix(self.doc, fence) if fence else ""
        quote = quote if ">" in quote else ""
        code = self.doc.line_kinds[number - 1] == INDENTED_CODE  # its pieces stay code
        if not quote and (code or self.indented_opener(number)):
            quote = text[: len(text) - len(text.lstrip(" \t"))]
        opener = None if fence else _OPENS_FENCE.match(text)
        room = self.context_units(quote) + (self.context_units(opener.group()) if opener else 0)
        # the pieces after the first carry no table header (no piece of a row is a row)
        header = self.context_units(self.chunk.header) if self.chunk.header else 0
        later = self.continuation(number, mid_line=True).overhead
        overhead = max(self.chunk.overhead - header, later)
        reserved = max(closer, tail) + room
        budget = self.limit - overhead - reserved
        first = self.limit - self.chunk.overhead - self.chunk.units - reserved
        pieces = self.pieces(text, budget, first)
        for index, piece in enumerate(pieces):
            if index:
                self.seal(self.continuation(number, mid_line=True))
                piece = quote + piece
                if marker := _OPENS_FENCE.match(piece):
                    self.keep_room(self.context_units(marker.group()))
            elif opener or fence and _OPENS_FENCE.match(piece):
                self.chunk.alone = True
            last = index == len(pieces) - 1
            units = self.counter.units(piece) + (tail if last else 0)
            self.append(number, number, piece, units, bool(piece.strip()), last)

    def intro_ends_chunk(self, first: int, last: int, start: int, units: int) -> bool:
        """Whether the block of lines first..last ends with an intro from line `start` on (see
        `intro`, whose `units` reach the first line of the block it introduces) and fits in the
        chunk, while that first line would not fit after it: the max-token seal would part the
        item from the block it introduces (a tldr page's description from its command), so it
        comes before the item. Not where the two would not fit in a chunk of their own either,
        nor right below a heading the chunk took (`ends_chunk` moved the seal before the heading
        where that helps)."""
        before = self.lines_units(first, start - 1) if start > first else 0
        if not before and (not self.chunk.has_body or self.below_heading(first)):
            return False
        if self.fits(before + units) or not self.fits(self.lines_units(first, last)):
            return False
        return self.continuation(start).overhead + units <= self.limit

    def intro(self, number: int) -> tuple[int, int] | None:
        """(line, units) of the intro that ends the top-level list starting on line `number`: its
        last item, where that is one line ending with a colon (tldr-pages' "- Description:"
        above its command); its units count it, the lines after it and the first line of the
        block it introduces (a fence's opening line with its next line and closing line), as
        `opener_units` measures them. None for any other block, or where a heading (or nothing)
        follows it."""
        index = bisect_left(self.block_starts, number)
        blocks = self.doc.blocks
        if index + 1 >= len(blocks) or blocks[index].start_line != number:
            return None
        block, following = blocks[index], blocks[index + 1]
        if following.kind == "heading" or block.kind not in _INTRODUCING:
            return None
        end = self.nonblank_total[block.end_line]  # its last non-blank line (a list's map
        start = bisect_left(self.nonblank_total, end, number, block.end_line + 1)  # takes blanks)
        text = self.doc.lines[start - 1]
        if not text.rstrip().endswith((":", "\uff1a")):
            return None
        if not _is_item_of(text, self.doc.lines[number - 1]):
            return None
        return start, self.lead_units(start, following.start_line)

    def opener_ends_chunk(self, number: int) -> bool:
        """Whether line `number` opens a fence whose next line would not fit after it, so the
        max-token seal would leave the opener last in the chunk: an empty code block, its
        content reopened in the next chunk (`head_ends_chunk`). Not right below a heading the
        chunk took (`ends_chunk` moved the seal before the heading where that helps), nor below
        a container's first lines (measured with them, `container_ends_chunk`)."""
        units = self.opener_units(number)
        if units is None or self.below_heading(number) or self.below_head(number):
            return False
        return self.head_ends_chunk(number, units, number)

    def table_ends_chunk(self, number: int) -> bool:
        """Whether line `number` is the header row of a top-level markdown table whose delimiter
        and first rows would not fit after it, so the max-token seal would leave its head last in
        the chunk (a table of no row, or a header row alone, which reads as a paragraph),
        repeated atop the next with the rows: the seal comes before it where a chunk of its own
        holds the head and the first row, or, where that row is cut (longer than a chunk), where
        this chunk would keep less than half its room for its first piece and a chunk of its own
        more (`add_line` keeps that piece below the head, `below_head`). Not right below a
        heading the chunk took (`ends_chunk` measured the heading with them). An HTML table's
        head goes with its first row in `add_row`."""
        row = self.first_row_end(number)
        if row is None or number in self.html_firsts or self.below_heading(number):
            return False
        return self.head_ends_chunk(number, self.lead_units(number, number), number + 1)

    def container_ends_chunk(self, number: int) -> bool:
        """Whether line `number` is the first line of an MkDocs container, colon or slash fence
        (`!!! note`, `=== "pip"`, `:::tip`, `//// tab`, in a list item too) whose first line of
        content (`lead_units`: through a `/// note` in the tab, a code block's opening line)
        would not fit after it, so the max-token seal would leave an empty container last in
        the chunk, repeated atop the next with its text: the seal comes before it where a chunk
        of its own holds the two, or, where that line is cut (longer than a chunk), where this
        chunk would keep less than half its room for the first piece and a chunk of its own
        more (`add_line` keeps that piece below the container's first lines). Not right below a
        heading the chunk took (as `opener_ends_chunk`), nor below another container's first
        line (measured with this one's)."""
        opened = container_starting_at(self.doc, number)
        if opened is None or self.below_heading(number) or self.below_head(number):
            return False
        units = self.lead_units(number, number)
        return self.head_ends_chunk(number, units, self.content_line(number) - 1)

    def head_ends_chunk(self, number: int, units: int, last: int) -> bool:
        """Whether the seal comes before line `number`, the first of a head (lines
        number..`last`: a code block's opening line, a container's first lines, a table's header
        and delimiter rows) that takes `units` with its first line of content and what closes
        after it: where they do not fit after the chunk's text but a chunk of their own holds
        them, or, where that line is cut (longer than a chunk), where a seal gives its first
        piece more room (`moves_head`)."""
        if self.fits(units):
            return False
        overhead = self.continuation(number).overhead
        if overhead + units <= self.limit:
            return True
        return self.moves_head(overhead, self.lines_units(number, last))

    def moves_head(self, overhead: int, head: int) -> bool:
        """Whether a seal before lines of `head` units, above a line that is cut (longer than
        a chunk), gives its first piece more room: this chunk would keep less than half its room
        for it, a chunk of its own, starting with `overhead`, more."""
        held = self.chunk.overhead + self.chunk.units
        return not self.fits(head + self.limit // 2) and overhead < held

    def content_line(self, number: int) -> int:
        """The first line of content at line `number`: itself, or where it is the first line of
        a container with a line of body after it, that of the first non-blank line after it
        (through the containers nested there, a `/// note` in a `//// tab`), or the line after
        a code block's opening line there."""
        while (opened := container_starting_at(self.doc, number)) is not None:
            after = bisect_left(self.nonblank_total, self.nonblank_total[number] + 1)
            if not number < after <= opened[1]:
                break
            number = after
        return number + 1 if self.opener_units(number) is not None else number

    def lead_units(self, start: int, number: int) -> int:
        """Units of lines start..number and of what a chunk holds with line `number` at its end:
        the lines up to its first line of content (`content_line`; through a table's first row,
        `first_row_end`) and those closing what is open after that line."""
        last = self.content_line(number)
        if last > number and self.opener_units(last - 1) is not None:  # a code block's first
            return self.lines_units(start, last - 2) + self.opener_units(last - 1)
        last = self.first_row_end(last) or last  # a table's head with its first row
        return self.lines_units(start, last) + self.closer_units(last)

    def first_row_end(self, number: int) -> int | None:
        """The last line of the first row of the top-level table whose first line is line
        `number`: a markdown table's first row after its header and delimiter rows, an HTML
        table's first row after its head (`HtmlTable.body`); None where no such table (or none
        with a row) starts there."""
        index = bisect_left(self.table_starts, number)
        if index < len(self.tables) and self.tables[index][0] == number:
            return number + 2 if number + 2 <= self.tables[index][1] else None
        index = bisect_left(self.html_firsts, number)
        if index < len(self.html_tables) and self.html_tables[index].first == number:
            table = self.html_tables[index]
            later = [row for row in table.rows if row > table.body]
            return min(later) - 1 if later else table.last
        return None

    def below_head(self, number: int) -> bool:
        """Whether the chunk's last non-blank own lines, right before line `number`, are the head
        of what line `number` is the first content of: the first lines of containers whose body
        holds it (a `//// tab` and a `/// note`), a code block's opening line, or both; or a
        top-level table's header and delimiter rows (the header row may be repeated), line
        `number` its first row."""
        segments = self.chunk.segments
        if not segments or segments[-1][2] is not None or segments[-1][1] != number - 1:
            return False
        if number > 2 and self.first_row_end(number - 2) is not None:
            return number - 2 not in self.html_firsts
        found = False
        for line in range(number - 1, segments[-1][0] - 1, -1):
            if not self.doc.lines[line - 1].strip():
                continue
            opened = container_starting_at(self.doc, line)
            if opened is not None and number <= opened[1]:
                found = True
            elif not found and line == number - 1 and self.opener_units(line) is not None:
                found = True
            else:
                return found
        return found

    def opener_units(self, number: int) -> int | None:
        """Units of fence opening line `number`, the line after it and the closing line needed
        after that (none where that is the fence's own closing line); None where line `number`
        opens no fence with a line after it."""
        index = bisect_right(self.fence_starts, number) - 1
        if index < 0 or self.fence_starts[index] != number or number >= self.fence_ends[index]:
            return None
        fence = self.doc.fences[index]
        closed = fence.closed and number + 1 == self.fence_ends[index]
        closer = 0 if closed else self.closer_units_of(fence)
        return self.lines_units(number, number + 1) + closer + self.closing.get(number + 1, 0)

    def fits(self, units: int) -> bool:
        """Whether `units` more fit in the chunk."""
        return self.chunk.overhead + self.chunk.units + units <= self.limit

    def pieces(self, text: str, budget: int, first: int) -> list[str]:
        """`text` cut into pieces of at most `budget` units, the first of at most `first`."""
        if first >= budget:
            return self.cut(text, budget)
        head = self.cut(text, first)[0]
        return [head, *self.cut(text[len(head) :], budget)]

    def cut(self, text: str, budget: int) -> list[str]:
        """`text` cut into pieces of at most `budget` units: a fence marker at a cut, with the
        quote or list markers before it, goes to the end of the piece before where it fits (with
        room for the line closing it if that piece then starts like a fence line: "1. - " and
        "```"), so that few pieces start like one."""
        runs = (run.group() for run in _MARKER_RUN.finditer(text))
        moved = [self.counter.units(run) for run in runs if "```" in run or "~~~" in run]
        room = min(max([self.counter.units("`" * 16), *moved]), budget // 2)
        pieces: list[str] = []
        for piece in self.counter.split(text, max(budget - room, 1)):
            while pieces and (marker := _OPENS_FENCE.match(piece)):
                joined = pieces[-1] + marker.group()
                opens = _OPENS_FENCE.match(joined)
                closer = self.counter.units(opens.group()) if opens else 0
                if self.counter.units(joined) + closer > budget:
                    break
                pieces[-1] += marker.group()
                piece = piece[marker.end() :]
            if piece:
                pieces.append(piece)
        return pieces

    def append(
        self,
        first: int,
        last: int,
        piece: str | None,
        units: int,
        content: bool,
        ends: bool = True,
    ) -> None:
        """Add lines first..last, or a piece of line `first` (`ends`: the piece ends where the
        line does), that measure `units`."""
        chunk = self.chunk
        segments = chunk.segments
        if piece is None and segments and segments[-1][2] is None and segments[-1][1] == first - 1:
            segments[-1] = (segments[-1][0], last, None, True)
        else:
            segments.append((first, last, piece, ends))
        chunk.units += units
        chunk.has_content = chunk.has_content or content
        body = (
            bool(piece.strip())
            if piece is not None
            else self.body_total[last] > self.body_total[first - 1]
        )
        chunk.has_body = chunk.has_body or body

    def closer_units(self, number: int) -> int:
        """Units of the closing fence line needed if the chunk ended right after line `number`,
        and of the lines closing the colon fences or HTML table open there."""
        fence = self.open_fence_after(number)
        return (self.closer_units_of(fence) if fence else 0) + self.closing.get(number, 0)

    def closer_units_of(self, fence: Block) -> int:
        return self.context_units(fence_closer(self.doc, fence))

    def largest_closer(self, first: int, last: int) -> int:
        """The most closer units needed after any line of first..last (a fence's closing line,
        and the lines closing the colon fences or HTML table open there)."""
        low = max(bisect_right(self.fence_starts, first) - 1, 0)
        high = bisect_right(self.fence_starts, last)
        fence = max(
            (
                self.closer_units_of(fence)
                for fence in self.doc.fences[low:high]
                if fence.end_line >= first
            ),
            default=0,
        )
        lines = self.closing_lines
        if not lines:
            return fence
        closing = lines[bisect_left(lines, first) : bisect_right(lines, last)]
        return fence + max(map(self.closing.__getitem__, closing), default=0)

    def fence_at(self, number: int) -> Block | None:
        """The fence that line `number` belongs to (its opening line included)."""
        index = bisect_right(self.fence_starts, number) - 1
        if index < 0 or number > self.doc.fences[index].end_line:
            return None
        return self.doc.fences[index]

    def open_fence_after(self, number: int) -> Block | None:
        """The fence still open after line `number`: None outside fences and from a fence's
        last line on (its closing line, or the line an inserted closer follows)."""
        index = bisect_right(self.fence_starts, number) - 1
        if index < 0:
            return None
        return self.doc.fences[index] if number < self.fence_ends[index] else None

    # -- chunks -----------------------------------------------------------------------------

    def new_chunk(
        self,
        parents: tuple[Heading, ...],
        fence: Block | None = None,
        bare: bool = False,
        header: str = "",
        opener: str = "",
    ) -> _Chunk:
        """A chunk with `parents` prepended, then an indented container's `opener` line, then a
        table's `header` rows (or `fence` reopened); the outermost parents are dropped while these
        lines take over half the max, the header (the innermost context) only when it alone
        does, the opener when it and the fence line do, and the fence's info string too if that
        line alone does (or if `bare`)."""
        if fence:
            check_fence_marker(fence, self.counter.units, self.limit, "units")
        reopen = fence_reopener(self.doc, fence) if fence else ""
        reopen_kind = fence_line_kind(fence) if fence else FENCE_MARK
        if fence and (bare or self.context_units(reopen) > self.limit // 2):
            reopen = fence_closer(self.doc, fence)  # the bare marker opens it as well
            reopen_kind = FENCE_MARK  # a fence of code, without the info string
        if header and self.context_units(header) > self.limit // 2:
            header = ""
        if opener and self.context_units(opener) + self.context_units(reopen) > self.limit // 2:
            opener = ""
        prefix = parents
        fixed = self.context_units(reopen) + (self.context_units(header) if header else 0)
        fixed += self.context_units(opener) if opener else 0
        while prefix and self.context_units(_heading_lines(prefix)) + fixed > self.limit // 2:
            prefix = prefix[1:]
        overhead = self.context_units(_heading_lines(prefix)) + fixed
        return _Chunk(
            parents=parents,
            prefix=prefix,
            reopen=reopen,
            reopen_kind=reopen_kind,
            header=header,
            opener=opener,
            overhead=overhead,
        )

    def continuation(self, number: int, mid_line: bool = False) -> _Chunk:
        """The chunk that continues the current section at line `number` (inside that line when
        `mid_line`) after a max-token seal; a fence open there is reopened (a fence's opening
        line cut in pieces reopens with its bare marker, the rest of the line inside it), a
        table's header and delimiter rows are repeated above its row `number`, and an indented
        container's first line above a line of its body."""
        parents = tuple(self.hierarchy[level] for level in sorted(self.hierarchy))
        fence = self.open_fence_after(number - 1)
        opening = self.fence_at(number) if mid_line else None
        opener = self.indented_opener(number)
        if fence is None and opening is not None and opening.start_line == number:
            chunk = self.new_chunk(parents, opening, bare=True, opener=opener)
        else:
            header = "" if mid_line else self.table_header(number)
            chunk = self.new_chunk(parents, fence, header=header, opener=opener)
        container = self.container_at(number, mid_line)
        if container is not None:
            chunk.alone = True
            chunk.container_end = container[1]
            chunk.container_html = container[0] in self.html_starts
            chunk.reserve = self.fence_room(number, container[1])
            chunk.overhead += chunk.reserve
        chunk.start_level = chunk.deepest = parents[-1].level if parents else None
        chunk.continued = True
        return chunk

    def table_header(self, number: int) -> str:
        """The header and delimiter rows of the top-level table that line `number` is a later
        line of (the header row alone above its delimiter row), or the `HtmlTable.head` of the
        HTML table that line `number` starts a later row of; '' elsewhere. A table in a list
        or block quote gets none (only top-level tables are repeated, as in `structural`)."""
        index = bisect_right(self.html_firsts, number) - 1
        if index >= 0 and number in self.html_tables[index].rows:
            return self.html_tables[index].head
        index = bisect_right(self.table_starts, number) - 1
        if index < 0 or not self.tables[index][0] < number <= self.tables[index][1]:
            return ""
        first = self.tables[index][0]
        return "\n".join(self.doc.lines[first - 1 : min(number - 1, first + 1)])

    def indented_opener(self, number: int) -> str:
        """The first lines of the indented containers (`!!! note`, `=== "pip"`) and colon or
        slash fences (`:::{tip}`, `/// note`) whose body holds line `number`, outermost first
        (see `indented_containers`); '' elsewhere."""
        return container_openers(self.doc, number)

    def fence_room(self, first: int, last: int) -> int:
        """Units of the longest fence-like line (`_OPENS_FENCE`) among lines first..last (bisects
        and a table lookup: matching every line of the range per call was quadratic, 3.9 s for a
        list of 10,000 items)."""
        lines, table = self.fence_like
        return _range_max(table, bisect_left(lines, first), bisect_right(lines, last))

    @cached_property
    def fence_like(self) -> tuple[list[int], list[list[int]]]:
        """The fence-like lines, in order, and the `_max_table` of their units (on first use)."""
        lines = enumerate(self.doc.lines, 1)
        markers = [(n, m.group(0)) for n, line in lines if (m := _OPENS_FENCE.match(line))]
        return [n for n, _ in markers], _max_table([self.counter.units(m) for _, m in markers])

    def leave_container(self, last: int) -> None:
        """Before the chunk takes lines up to `last`: when a chunk read alone goes past the end
        of the container it started in, and its lines to that end leave a fence open there, the
        fences after it pair otherwise than in the file; so do the lines after it where that
        container is an HTML block and its lines, read as markdown alone, end inside an MkDocs
        container (a `!!! note` line the block ran on over: indented code after the block is
        its body there, and a fence in it). Room is then kept for the longest fence-like line of
        the rest of the file."""
        chunk = self.chunk
        end = chunk.container_end
        if end is None or last <= end:
            return
        chunk.container_end = None
        after = chunk.segments[-1][1] + 1 if chunk.segments else end + 1
        rest = [(after, end, None, True)] if after <= end else []
        own = "\n".join([chunk.reopen, *self.own_lines(chunk.segments + rest)[0]])
        if unclosed_fences(own) or (chunk.container_html and _ends_in_admonition(own)):
            self.keep_room(self.fence_room(end + 1, len(self.doc.lines)))

    def keep_room(self, units: int) -> None:
        """Read the chunk again alone when it is drafted, with `units` kept for the line that
        closes a fence its own lines leave open."""
        chunk = self.chunk
        chunk.alone = True
        chunk.overhead += max(units - chunk.reserve, 0)
        chunk.reserve = max(units, chunk.reserve)

    def container_at(self, number: int, mid_line: bool = False) -> tuple[int, int] | None:
        """(first, last) line of the top-level list, block quote or HTML block that line
        `number` continues, or, for a chunk starting inside line `number` (`mid_line`), of the
        top-level block that holds it: alone, "<td> a" cut after "<td>" is no HTML block, and
        "a - b" cut before "- b" is a list, whose item the block's next lines can continue."""
        if mid_line:
            index = bisect_right(self.block_starts, number) - 1
            block = self.doc.blocks[index] if index >= 0 else None
            inside = block is not None and number <= block.end_line
            return (block.start_line, block.end_line) if inside else None
        index = bisect_right(self.container_starts, number) - 1
        if index >= 0 and self.containers[index][0] < number <= self.containers[index][1]:
            return self.containers[index]
        return None

    def seal(self, following: _Chunk | None = None) -> None:
        """Emit the current chunk (if it has content) and start `following` (an empty chunk when
        None); a chunk of nothing but headings is not emitted when `following` prepends them all."""
        chunk = self.chunk
        headed = following is not None and not chunk.has_body  # headings alone, a chunk after
        if chunk.has_content and not (
            headed and all(h in following.prefix for h in chunk.headings)
        ):
            self.drafts.append(self.draft(chunk))
        self.chunk = following if following is not None else _Chunk()

    def own_lines(
        self, segments: list[tuple[int, int, str | None, bool]]
    ) -> tuple[list[str], bytearray, list[int], list[int]]:
        """A chunk's own lines (from its `segments`), their kinds and source line numbers, and
        the indices of the inserted lines among them: a closing line follows the last line of
        every fence that its container (or the file) ends."""
        lines, kinds = self.doc.lines, self.doc.line_kinds
        own: list[str] = []
        own_kinds = bytearray()
        numbers: list[int] = []
        inserted: list[int] = []

        def take(first: int, last: int) -> None:
            own.extend(lines[first - 1 : last])
            own_kinds.extend(kinds[first - 1 : last])
            numbers.extend(range(first, last + 1))

        def close(end: int) -> None:
            inserted.append(len(own))
            own.append(fence_closer(self.doc, self.unclosed_ends[end]))
            own_kinds.append(FENCE_MARK)
            numbers.append(end)

        for first, last, piece, ends in segments:
            if piece is not None:
                own.append(piece)
                own_kinds.append(kinds[first - 1])
                numbers.append(first)
                if ends and first in self.unclosed_ends:
                    close(first)
                continue
            for end in self.unclosed_within(first, last):
                take(first, end)
                close(end)
                first = end + 1
            if first <= last:
                take(first, last)
        return own, own_kinds, numbers, inserted

    def draft(self, chunk: _Chunk) -> Draft:
        """BuildChunkWithHierarchy: parents, container opener, table header or fence reopen, own
        lines, fence close, then the lines closing the colon fences or HTML table left open."""
        own, own_kinds, numbers, inserted = self.own_lines(chunk.segments)
        start = next(i for i, text in enumerate(own) if text.strip())
        end = next(i for i in range(len(own) - 1, -1, -1) if own[i].strip())
        texts = [h.markdown for h in chunk.prefix]
        if chunk.opener:
            texts.extend(chunk.opener.split("\n"))
        line_kinds = bytearray([TEXT] * len(texts))
        if chunk.header:
            rows = chunk.header.split("\n")
            texts.extend(rows)
            line_kinds.extend([own_kinds[start]] * len(rows))  # its rows' kind: an HTML row's TEXT
        if chunk.reopen:
            texts.append(chunk.reopen)
            line_kinds.append(chunk.reopen_kind)
        inserted = [len(texts) + i - start for i in inserted]
        numbers = numbers[start : end + 1]
        own, own_kinds = own[start : end + 1], own_kinds[start : end + 1]
        units = chunk.overhead - chunk.reserve + chunk.units
        texts.extend(own)
        line_kinds += own_kinds
        fence = self.open_fence_after(numbers[-1])
        _, _, piece, ends = chunk.segments[-1]
        if fence is None and piece is not None and not ends:
            fence = self.fence_at(numbers[-1])  # cut inside a fence's line
        if fence is not None:
            inserted.append(len(texts))
            texts.append(fence_closer(self.doc, fence))
            line_kinds.append(fence_line_kind(fence))
            units += self.counter.units(texts[-1])
        exact = self.counter.additive
        if chunk.alone:
            exact = _drop_openers(texts, line_kinds, inserted) and exact
            closers = closers_for_open_fences("\n".join(texts))
            texts.extend(closers)
            line_kinds.extend([FENCE_MARK] * len(closers))
            exact = exact and not closers
        closing = self.closing_text(chunk, numbers[0], numbers[-1])
        if closing:
            rows = closing.split("\n")
            texts.extend(rows)
            line_kinds.extend([TEXT] * len(rows))
            units += self.context_units(closing)
        return Draft(
            text="\n".join(texts),
            start_line=numbers[0],
            end_line=numbers[-1],
            headings=self.doc.implied + _heading_stack(chunk),
            title=self.target_heading(numbers[0], numbers[-1]),
            line_kinds=bytes(line_kinds),
            token_count=self.counter.tokens(units) if exact else None,
        )

    def closing_text(self, chunk: _Chunk, first: int, last: int) -> str:
        """The lines that close the colon fences or the HTML table open after line `last`, of a
        chunk whose own lines start on line `first`: those whose first line it holds, its own or
        repeated (`opener`, `header`), innermost first; '' for none."""
        index = bisect_right(self.indented_starts, last) - 1
        if index >= 0 and last <= self.indented[index][1]:
            closers = closers_after(self.doc, last, 0 if chunk.opener else first)
            return "\n".join(closers)
        index = bisect_right(self.html_firsts, last) - 1
        table = self.html_tables[index] if index >= 0 else None
        if table is None or not (first <= table.first or chunk.header):
            return ""
        return table.closing(last)

    def target_heading(self, first: int, last: int) -> str | None:
        """Seed 003's target heading: the first heading among the chunk's own lines with content
        under it; else its last heading; else None: the innermost heading of its path (its
        parents, prepended unless they take over half the chunk; else the heading above the
        body), as `Strategy.chunk` titles a draft without one."""
        starts = self.block_starts
        inside = self.doc.blocks[bisect_left(starts, first) : bisect_right(starts, last)]
        headings = [(i, b.heading) for i, b in enumerate(inside) if b.kind == "heading"]
        for i, heading in headings:
            if i + 1 < len(inside) and inside[i + 1].kind != "heading":
                return heading.title
        if headings:
            return headings[-1][1].title
        return None


def _sections(doc: ParsedDocument) -> list[tuple[Block | None, list[tuple[int, int]]]]:
    """(heading block or None, line ranges up to the next heading): every body line once, the
    lines between blocks (blank lines, link reference definitions) as ranges of their own."""
    sections: list[tuple[Block | None, list[tuple[int, int]]]] = [(None, [])]
    line = doc.source.body_start + 1
    for block in doc.blocks:
        if block.start_line > line:
            sections[-1][1].append((line, block.start_line - 1))
        if block.kind == "heading":
            sections.append((block, []))
        else:
            sections[-1][1].append((block.start_line, block.end_line))
        line = block.end_line + 1
    if line <= len(doc.lines):
        sections[-1][1].append((line, len(doc.lines)))
    return sections


def _is_item_of(line: str, first: str) -> bool:
    """Whether `line` starts an item of the list whose first line is `first` (a marker at its
    indentation), not one nested in an item."""
    item, top = _LIST_ITEM.match(line), _LIST_ITEM.match(first)
    return item is not None and top is not None and item.group(1) == top.group(1)


def _ends_in_admonition(text: str) -> bool:
    """Whether the last line of `text` is in a top-level MkDocs container (`!!! note`), which
    indented lines after it continue."""
    text = text if text.endswith("\n") else text + "\n"
    last = text.count("\n")
    return any(
        token.level == 0 and token.type == "admonition_open" and token.map[1] >= last
        for token in parse_tokens(text)
    )


def _fence_end(doc: ParsedDocument, fence: Block) -> int:
    """A fence's last line: its closing line, or for a fence that never closes its last
    non-blank line (markdown-it's line map of one takes in the blank lines after it)."""
    return next(
        n for n in range(fence.end_line, fence.start_line - 1, -1) if doc.lines[n - 1].strip()
    )


def _max_table(values: list[int]) -> list[list[int]]:
    """A sparse table of `values`: row k holds the max of each run of 2**k of them."""
    table = [values]
    while 2 ** len(table) <= len(values):
        row, half = table[-1], 2 ** (len(table) - 1)
        table.append(list(map(max, row, row[half:])))
    return table


def _range_max(table: list[list[int]], low: int, high: int) -> int:
    """The max of values[low:high] (0 when empty), from their `_max_table`."""
    if low >= high:
        return 0
    k = (high - low).bit_length() - 1
    return max(table[k][low], table[k][high - 2**k])


def _drop_openers(texts: list[str], kinds: bytearray, inserted: list[int]) -> bool:
    """Remove the inserted closing lines that, read in the chunk alone, open a fence; True when
    none was removed.

    Out of its list item or block quote a chunk's lines can parse otherwise than in the whole
    document (an indented opener becomes indented code), so a line inserted to close a fence
    that its container ended can open one instead.
    """
    removed = False
    while opened := {line - 1 for line in unclosed_fences("\n".join(texts))} & set(inserted):
        index = min(opened)
        del texts[index], kinds[index]
        inserted = [i - (i > index) for i in inserted if i != index]
        removed = True
    return not removed


def _heading_stack(chunk: _Chunk) -> tuple[Heading, ...]:
    """The headings active at the chunk's first own heading (at its start when it has none): a
    continuation chunk's parents are the whole stack where it starts, and that heading closes
    those at its level or deeper."""
    if not chunk.headings:
        return chunk.parents
    first = chunk.headings[0]
    return tuple(h for h in chunk.parents if h.level < first.level) + (first,)


def _heading_lines(headings: tuple[Heading, ...]) -> str:
    return "\n".join(h.markdown for h in headings)
