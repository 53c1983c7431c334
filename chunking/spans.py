"""Character spans of a source, their sizes, and the ways structural and hierarchical cut an
oversized block.

A `Span` is a slice `[start, end)` of `SourceText.text` (the whole file joined with LF, so offsets
map back to original line numbers), optionally wrapped in context that is not at that place in
the source: the reopened fence of a code block cut in two, or the header rows of a table cut in
two. A `Measure` sizes ranges of that text in tokens (a block is tokenized once and sub-ranges are
counted from the token start offsets) or in characters.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from chunking.blocks import (
    FENCE_MARK,
    NOT_SPACE,
    Block,
    HtmlTable,
    ParsedDocument,
    block_starting_at,
    check_fence_marker,
    closers_after,
    closers_for_open_fences,
    colon_closers,
    container_body_indent,
    container_openers,
    fence_closer,
    fence_reopener,
    fences_opening,
    html_rows,
    html_tables,
    indented_containers,
    last_fence_opened,
)
from chunking.record import CHUNKING_FAILED, ChunkingError
from chunking.tokens import MARKS, UNSPACED, TokenCounter

# A sentence ends at . ! ? (Devanagari's danda । ॥, the Arabic question mark ؟), then closing
# quotes (straight or curly) or brackets, then whitespace; or at a CJK full stop (。！？) and the
# closing quotes or brackets after it. The closers end the sentence; the gap is the whitespace
# after them.
_SENTENCE_END = re.compile(
    r"[.!?\u0964\u0965\u061f][\"'”’)\]]*(\s+)|[。！？]+[」』）】〕》〉”’\"')\]]*(\s*)"
)
FENCE_RUN = re.compile(r"`{3,}|~{3,}")  # a run of backticks or tildes, which can open a fence
WORD_START = re.compile(r"(?<!\S)\S")  # the first character of a word
# A line of a code block that only closes what lines before it opened (`}`, `]);`), or a bare
# fence marker (the closing line of a fence).
_CLOSING_LINE = re.compile(r"[\s)\]},;]*|\s*(?:`{3,}|~{3,})\s*")
# A line of an HTML block that only closes elements (`</tbody>`, `</table></div>`, `</TabItem>`).
_CLOSING_TAGS = re.compile(r"\s*(?:</[A-Za-z][\w:.-]*\s*>\s*)*")
# Where a chunk may start without cutting a word: a word's first character, or a character next
# to an ideograph or kana (each is a word of its own: `tokens.UNSPACED`) other than punctuation
# that ends or continues what is before it (、。，」), which no word starts with, or a mark
# (`tokens.MARKS`). Korean puts spaces between words: a Hangul syllable starts one only after one.
_NO_WORD_START = "、。，．：；！？」』）】〕》〉”’,.:;!?)\\]}" + MARKS
_MARK = re.compile(f"[{MARKS}]")
WORD_BOUNDARY = re.compile(rf"(?<!\S)\S|(?![{_NO_WORD_START}])(?:[{UNSPACED}]|(?<=[{UNSPACED}])\S)")


@dataclass(frozen=True)
class Span:
    """Source characters `[start, end)` plus context text around them (empty when none)."""

    start: int
    end: int
    prefix: str = ""
    suffix: str = ""


@dataclass(frozen=True)
class SourceText:
    """The whole file as one string with the offset where each line starts, and the lines
    where its top-level blocks start."""

    text: str
    line_starts: tuple[int, ...]
    block_lines: frozenset[int]

    @classmethod
    def of(cls, doc: ParsedDocument) -> SourceText:
        """The source text of a parsed document (front matter lines included, so lines match)."""
        starts, offset = [], 0
        for line in doc.lines:
            starts.append(offset)
            offset += len(line) + 1
        blocks = frozenset(block.start_line for block in doc.blocks)
        return cls("\n".join(doc.lines), tuple(starts), blocks)

    def line_of(self, offset: int) -> int:
        """1-based line number of the character at `offset`."""
        return bisect_right(self.line_starts, offset)

    def lines_starting_in(self, span: Span) -> tuple[int, int]:
        """The first and last of the lines that start inside the span's source characters."""
        starts = self.line_starts
        return bisect_left(starts, span.start) + 1, bisect_left(starts, span.end)

    def lines_span(self, first: int, last: int) -> Span:
        """The span of 1-based lines `first..last`, trailing whitespace trimmed."""
        start = self.line_starts[first - 1]
        end = self.line_starts[last] - 1 if last < len(self.line_starts) else len(self.text)
        # stepped back over the whitespace only: a slice of the lines to strip would copy them
        # all, for each of the thousands of spans cut out of one line of megabytes
        while end > start and self.text[end - 1].isspace():
            end -= 1
        return Span(start, end)

    def has_text(self, start: int, end: int) -> bool:
        """Whether the characters `start..end` hold any but whitespace (searched, not copied)."""
        return NOT_SPACE.search(self.text, start, end) is not None

    def block_span(self, block: Block) -> Span:
        """The span of a block's lines."""
        return self.lines_span(block.start_line, block.end_line)

    def render(self, span: Span) -> str:
        """The span's text: its context prefix, its source characters, its context suffix."""
        return span.prefix + self.text[span.start : span.end] + span.suffix

    def first_line(self, span: Span) -> int:
        """Original line of the span's first source character."""
        return self.line_of(span.start)

    def last_line(self, span: Span) -> int:
        """Original line of the span's last source character."""
        return self.line_of(max(span.start, span.end - 1))


def line_kinds(doc: ParsedDocument, src: SourceText, span: Span) -> bytes | None:
    """The kinds of the span's lines as the whole document's parse gave them, for a plain source
    slice; None for a span with context text (its lines are then found by parsing it)."""
    if span.prefix or span.suffix:
        return None
    return doc.line_kinds[src.first_line(span) - 1 : src.last_line(span)]


@dataclass(frozen=True)
class UnclosedFences:
    """The first lines of a document's fences that never close, nested ones too: a chunk that
    holds one gets a closing line, which the size of its source lines does not count."""

    starts: tuple[int, ...]

    @classmethod
    def of(cls, doc: ParsedDocument) -> UnclosedFences:
        return cls(tuple(fence.start_line for fence in doc.fences if not fence.closed))

    def in_block(self, block: Block) -> bool:
        """Whether one of them starts in `block`'s lines (the block, or one inside it)."""
        return self.between(block.start_line, block.end_line)

    def between(self, first: int, last: int) -> bool:
        """Whether one of them starts on lines first..last."""
        index = bisect_left(self.starts, first)
        return index < len(self.starts) and self.starts[index] <= last


@dataclass(frozen=True)
class Measure:
    """Sizes of ranges inside one span of a source: tokens or characters.

    In tokens, the span is tokenized once; a sub-range measures the units (tokens, or words for
    the heuristic counter) that start inside it, turned into tokens by the counter. Ranges cut
    at whitespace count what tokenizing them alone would give.
    """

    counter: TokenCounter | None  # None: characters
    starts: tuple[int, ...] = ()  # source offsets where the span's units start
    text: str = ""  # the source text (characters: cuts move back to a space)

    @classmethod
    def characters(cls, src: SourceText) -> Measure:
        """A character measure of the source."""
        return cls(None, (), src.text)

    @classmethod
    def tokens(cls, counter: TokenCounter, src: SourceText, span: Span) -> Measure:
        """A token measure of `span` (tokenized once here)."""
        return cls.tokens_of_all(counter, src, [span])[0]

    @classmethod
    def tokens_of_all(
        cls, counter: TokenCounter, src: SourceText, spans: list[Span]
    ) -> list[Measure]:
        """Token measures of many spans."""
        texts = [src.text[span.start : span.end] for span in spans]
        return [
            cls(counter, tuple(span.start + offset for offset in starts))
            for span, starts in zip(spans, unit_starts(counter, texts), strict=True)
        ]

    @property
    def unit(self) -> str:
        """What sizes count: "tokens" or "characters"."""
        return "characters" if self.counter is None else "tokens"

    def size(self, start: int, end: int) -> int:
        """Size of the source range `[start, end)`."""
        if self.counter is None:
            return end - start
        units = bisect_left(self.starts, end) - bisect_left(self.starts, start)
        return self.counter.tokens(units)

    def size_of(self, text: str) -> int:
        """Size of a context string that is not in the measured span."""
        return len(text) if self.counter is None else self.counter.count(text)

    def cuts(self, start: int, end: int, budget: int) -> list[int]:
        """Offsets that cut `[start, end)` into pieces of at most `budget` (in units or
        characters; a character cut moves back to the space before the word it would cut when
        that word fits in a piece: a word longer than that is cut where the piece is full, or
        before the mark there (`tokens.MARKS`), not after a space at its start, such as the one
        after a heading's `#`)."""
        if self.counter is not None:
            per_piece = max(1, self.counter.max_units(budget))
            first = bisect_left(self.starts, start)
            last = bisect_left(self.starts, end)
            return list(self.starts[first + per_piece : last : per_piece])
        cuts, position, budget = [], start, max(1, budget)
        while end - position > budget:
            full = position + budget
            while full > position + 1 and _MARK.match(self.text, full):
                full -= 1  # not between a character and its mark (NFD Hangul's jamo)
            space = self.text.rfind(" ", position + 1, full + 1)
            reach = space + budget  # where a piece from that space ends at the latest
            fits = space > position and (end <= reach or self.text.find(" ", full, reach + 1) >= 0)
            position = space if fits else full
            cuts.append(position)
        return cuts

    def tail(self, start: int, end: int, size: int) -> int:
        """Where the last `size` tokens (or characters) of `[start, end)` begin: at the first
        offset after which they all fit (a tokenizer can start several tokens at one character,
        MiniLM the jamo of a Hangul syllable; `end` when none fit)."""
        if self.counter is None:
            return max(start, end - size)
        lo, hi = bisect_left(self.starts, start), bisect_left(self.starts, end)
        keep = self.counter.max_units(size)
        if not 0 < keep < hi - lo:
            return start
        first = bisect_right(self.starts, self.starts[hi - keep - 1])
        return self.starts[first] if first < hi else end

    def windows(self, start: int, end: int, size: int, overlap: int) -> list[tuple[int, int]]:
        """Ranges of `size` tokens (or characters), each repeating the last `overlap` of the one
        before."""
        if self.counter is None:
            points: range | list[int] = range(start, end)
        else:
            size, overlap = self.counter.max_units(size), self.counter.max_units(overlap)
            lo, hi = bisect_left(self.starts, start), bisect_left(self.starts, end)
            points = list(self.starts[lo:hi])
        points = points or [start]
        size = max(1, size)
        step = max(1, size - overlap)
        out, first = [], 0
        while True:
            last = first + size
            stop = points[last] if last < len(points) else end
            out.append((points[first], stop))
            if last >= len(points):
                return out
            first += step


def unit_starts(counter: TokenCounter, texts: list[str]) -> list[list[int]]:
    """For each text, the offsets where the counter's units (tokens, or heuristic words) start."""
    # One encode per text: encode_batch would start a thread per core inside a worker that a
    # scheduler gave one core.
    return [counter.starts(text) for text in texts]


def trimmed(src: SourceText, start: int, end: int) -> Span:
    """`[start, end)` without surrounding whitespace."""
    text = src.text[start:end]
    lead = len(text) - len(text.lstrip())
    return Span(start + lead, start + len(text.rstrip()))


def sentences(src: SourceText, span: Span) -> list[Span]:
    """The sentences of a prose span, each trimmed; together they cover the span's words."""
    text = src.text[span.start : span.end]
    pieces, begin = [], 0
    for match in _SENTENCE_END.finditer(text):
        end = match.start(1) if match.group(1) is not None else match.start(2)
        if end > begin:
            pieces.append(Span(span.start + begin, span.start + end))
        begin = match.end()
    if begin < len(text):
        pieces.append(Span(span.start + begin, span.end))
    return pieces or [span]


def line_spans(src: SourceText, span: Span) -> list[Span]:
    """The non-blank lines of a span, each trimmed at its end, blank lines dropped."""
    out = []
    for number in range(src.first_line(span), src.last_line(span) + 1):
        start = max(span.start, src.line_starts[number - 1])
        stop = src.line_starts[number] - 1 if number < len(src.line_starts) else len(src.text)
        line = src.text[start : min(span.end, stop)].rstrip()
        if line.strip():
            out.append(Span(start, start + len(line)))
    return out


def pack(parts: list[Span], measure: Measure, budget: int) -> list[list[Span]]:
    """Group consecutive parts greedily so each group stays within `budget` when it can."""
    groups: list[list[Span]] = []
    current: list[Span] = []
    total = 0
    for part in parts:
        # The gap before a part is whitespace: free in tokens, counted in characters.
        if current and total + measure.size(current[-1].end, part.end) <= budget:
            total += measure.size(current[-1].end, part.end)
        else:
            if current:
                groups.append(current)
            current, total = [], measure.size(part.start, part.end)
        current.append(part)
    if current:
        groups.append(current)
    return groups


def packed_pieces(
    parts: list[Span],
    measure: Measure,
    budget: int,
    piece_of: Callable[[list[Span]], Span],
    too_big: Callable[[Span], bool],
) -> list[Span]:
    """`pack`'s groups of `parts`, each made a piece (`piece_of`); a group of several parts whose
    piece is `too_big` (the context or closing line it got did not fit) is halved, and each half
    tried again in turn."""
    pieces: list[Span] = []
    groups = deque(pack(parts, measure, budget))
    while groups:
        group = groups.popleft()
        piece = piece_of(group)
        if len(group) > 1 and too_big(piece):
            half = len(group) // 2
            groups.extendleft((group[half:], group[:half]))
        else:
            pieces.append(piece)
    return pieces


def cut(src: SourceText, measure: Measure, span: Span, budget: int) -> list[Span]:
    """`span` cut where `Measure.cuts` says into pieces of at most `budget`, each trimmed, blank
    ones dropped."""
    cuts = [span.start, *measure.cuts(span.start, span.end, budget), span.end]
    return [trimmed(src, a, b) for a, b in pairwise(cuts) if src.text[a:b].strip()]


def line_pieces(
    doc: ParsedDocument,
    src: SourceText,
    span: Span,
    measure: Measure,
    limit: int,
    start: int | None = None,
    closers_kept: bool = False,
) -> list[Span]:
    """A block cut between lines (a line longer than `limit` is cut within itself first), an
    HTML block between its rows where they fit (`blocks.html_rows`); the first piece starts at
    `start` when given (a heading line before the block, kept with the block's first line: cut
    with it when the two do not fit together).

    A piece after the first of an indented container (`!!! note "T"`, `=== "pip"`, whose body
    lines read as indented code without it) or a colon or slash fence (`:::{tip}`, `/// note`),
    top-level or in a list item or block quote, starts with its first line, and those of the
    containers around it that hold the piece's first line (a `!!! note` in a tab), as a piece of
    a table with its header rows (unless those lines would take over half of `limit`); one that
    starts inside a line's indentation gets the rest of it, one inside its text the innermost
    body's indentation (`container_body_indent`); a piece that holds a colon fence's first line
    (its own or repeated) and ends before its closing line ends with that line
    (`blocks.colon_closers`); a container's first line is kept with its body's first line of
    content, and its closing line with its body's last (`_container_rows`): together where they
    fit, else cut at words (no piece ends with a container's head alone, none is an opener and
    its closer alone). A piece that starts at a later row of an HTML table (`blocks.HtmlTable`)
    starts with its `head`, and one that holds its first line (its own or repeated) and ends
    inside it ends with the lines that close its open parts, unless those lines would take
    over half of `limit`.

    A cut inside a fenced code block, at any nesting, closes the fence at the end of one piece
    and reopens it (same marker, info string and indentation; the bare marker when those would
    take over half of `limit`) at the top of the next, so every piece is well-formed markdown; an
    unclosed fence is closed in the last piece.

    With `closers_kept` (hierarchical), a last piece of closing brackets alone (`}`, `]);`, a
    fence's closing line) starts instead at the last line before them that holds more, when both
    pieces still fit: no piece is the end of a code example without any of its code. So does a
    last piece of an HTML block's closing tags alone (`</div>` after a cut table), with or without.
    """
    # bisects: filtering every fence of the document, for each block cut, was quadratic
    fences = fences_opening(doc.fences, *src.lines_starting_in(span))
    reserve = 0
    reopeners: dict[int, str] = {}  # by a fence's first line
    for fence in fences:
        check_fence_marker(fence, measure.size_of, limit, measure.unit)
        closer = fence_closer(doc, fence)
        reopener = fence_reopener(doc, fence)
        context = measure.size_of(reopener + "\n" + closer) + 2
        if 2 * context > limit:
            reopener = closer  # the bare marker opens it as well
            context = measure.size_of(reopener + "\n" + closer) + 2
        reopeners[fence.start_line] = reopener
        if 2 * context > limit:  # every piece would repeat it: quadratic output, or no room
            raise ChunkingError(
                CHUNKING_FAILED,
                f"the code fence opened at line {fence.start_line} needs {context} "
                f"{measure.unit} to reopen and close, over half the chunk limit of {limit}",
            )
        reserve = max(reserve, context)
    block = block_starting_at(doc, src.first_line(span))
    containers = indented_containers(doc, block) if block else ()
    colons = colon_closers(doc, containers)
    openers = [container_openers(doc, first + 1) for first, _, _ in containers]
    closers = ["".join("\n" + c for c in closers_after(doc, n, 0)) for n, _, _ in colons]
    longest = max(openers, key=measure.size_of, default="")
    room = measure.size_of(longest) + 5 * (longest.count("\n") + 1)  # lines, newlines, indent
    room += max(map(measure.size_of, closers), default=0)
    if containers and 2 * (room + reserve) > limit:
        containers = colons = ()
    reserve += room if containers else 0
    found = tables = html_tables(doc, block) if block else ()
    room = max(  # the head, the longest closing lines, a newline after and before them
        (measure.size_of(t.head) + measure.size_of(max(t.closers, key=len)) + 2 for t in tables),
        default=0,
    )
    if tables and 2 * (room + reserve) > limit:
        tables = ()
    reserve += room if tables else 0
    budget = max(1, limit - reserve)
    parts: list[Span] = []
    lines = line_spans(src, span)
    numbers = [src.line_of(line.start) for line in lines]
    if start is not None:
        lines[0] = Span(start, lines[0].end)
    rows = dict(html_rows(doc, block)) if block else {}
    kept = _code_heads(numbers, fences) | _container_rows(doc, numbers, containers, colons)
    rows |= kept
    heads = {table.first: table.body for table in found}  # a header and its first row: a row
    # the piece that starts at a table's head holds it: the room kept to repeat it is its own
    own = {t.first: budget + measure.size_of(t.head) for t in tables}
    for group in _grouped(numbers, rows):
        body = heads.get(numbers[group[0]])
        room = own.get(numbers[group[0]], budget)
        if body is not None and _size(measure, lines, group) > room:
            split = next(i for i, index in enumerate(group) if numbers[index] >= body)
            split_rows = [group[:split], group[split:]]  # the two, each whole where it fits
        else:
            split_rows = [group]
        for row in split_rows:
            if len(row) > 1 and _size(measure, lines, row) <= (room if row is group else budget):
                parts.append(Span(lines[row[0]].start, lines[row[-1]].end))
                continue
            if len(row) > 1 and numbers[row[0]] in kept:  # cut at words, not apart
                parts += cut(src, measure, Span(lines[row[0]].start, lines[row[-1]].end), budget)
                continue
            for line in (lines[index] for index in row):
                if measure.size(line.start, line.end) <= budget:
                    parts.append(line)
                else:
                    parts += cut(src, measure, line, budget)

    def piece_of(group: list[Span]) -> Span:
        start, end = group[0].start, group[-1].end
        first, last = src.line_of(start), src.line_of(max(start, end - 1))
        reopen = _fence_around(fences, first, reopen=True)
        close = _fence_around(fences, last, reopen=False)
        prefix = reopeners[reopen.start_line] + "\n" if reopen else ""
        opener = container_openers(doc, first) if containers else ""
        before = src.text[src.line_starts[first - 1] : start]
        if opener:
            body = container_body_indent(opener[opener.rfind("\n") + 1 :])  # the innermost's
            prefix = opener + "\n" + prefix + (body if before.strip() else before)
        closing = [fence_closer(doc, close)] if close else []
        closing += closers_after(doc, last, 0) if colons else []
        table = _table_at(tables, last)
        at_line = not before.strip()  # the piece starts at its first line's text
        if table is not None:
            at_row = at_line and first in table.rows
            prefix = table.head + "\n" + prefix if at_row else prefix
            holds = at_row or first < table.first or first == table.first and at_line
            closing += [table.closing(last)] if holds and table.closing(last) else []
        suffix = "".join("\n" + line for line in closing)
        return _balanced(src, Span(start, end, prefix=prefix, suffix=suffix))

    def too_big(piece: Span) -> bool:  # its fence context did not fit
        size = measure.size(piece.start, piece.end)
        return size + measure.size_of(piece.prefix + piece.suffix) > limit

    pieces = packed_pieces(parts, measure, budget, piece_of, too_big)
    closing = [_CLOSING_LINE] if closers_kept else []
    closing += [_CLOSING_TAGS] if block is not None and block.kind == "html_block" else []
    if closing and len(pieces) > 1:
        return _closers_kept(src, parts, pieces, piece_of, too_big, closing)
    return pieces


def _closers_kept(
    src: SourceText,
    parts: list[Span],
    pieces: list[Span],
    piece_of: Callable[[list[Span]], Span],
    too_big: Callable[[Span], bool],
    patterns: list[re.Pattern[str]],
) -> list[Span]:
    """`pieces` (packed from `parts`), the last one started at the last part of the one before
    that holds more than closing lines (each matching one of `patterns`) when it holds nothing
    else (`line_pieces`)."""
    starts = [part.start for part in parts]
    first, before = bisect_left(starts, pieces[-1].start), bisect_left(starts, pieces[-2].start)

    def closing(part: Span) -> bool:
        text = src.text[part.start : part.end]
        return all(any(p.fullmatch(line) for p in patterns) for line in text.split("\n"))

    if not all(map(closing, parts[first:])):
        return pieces
    for index in range(first - 1, before, -1):
        if closing(parts[index]):
            continue
        head, tail = piece_of(parts[before:index]), piece_of(parts[index:])
        if too_big(head) or too_big(tail):
            return pieces
        return [*pieces[:-2], head, tail]
    return pieces


def _grouped(numbers: list[int], rows: dict[int, int]) -> list[list[int]]:
    """The indices of lines `numbers` grouped: those of each of `rows` (first line: last line)
    together, every other line alone; rows that overlap are one group."""
    groups: list[list[int]] = []
    end = 0  # the last line of the rows being grouped
    for index, number in enumerate(numbers):
        if number <= end:
            groups[-1].append(index)
        else:
            groups.append([index])
        end = max(end, rows.get(number, 0))
    return groups


def _code_heads(numbers: list[int], fences: Sequence[Block]) -> dict[int, int]:
    """Rows (first line: last line, among `numbers`, a block's non-blank lines) that keep each of
    `fences` (fenced code blocks) from ending a piece with its opening line alone (an empty code
    block, closed there, its code reopened atop the next piece): its opening line to its first
    line of code. `line_pieces` keeps a row together where it fits and cuts it at words where
    it does not."""
    rows = {}
    for fence in fences:
        index = bisect_right(numbers, fence.start_line)
        code = fence.end_line - fence.closed  # its last line of code
        if index < len(numbers) and numbers[index] <= code:
            rows[fence.start_line] = numbers[index]
    return rows


def _container_rows(
    doc: ParsedDocument,
    numbers: list[int],
    containers: Sequence[tuple[int, int, str]],
    colons: Sequence[tuple[int, int, str]],
) -> dict[int, int]:
    """Rows (first line: last line, among `numbers`, a block's non-blank lines) that keep each of
    `containers` (see `blocks.indented_containers`) from ending a piece with its head or starting
    one with its closing line (an empty `/// note`, closed there and repeated atop the next piece
    with its text): its first line to its body's first line of content (the first line after it
    that opens none of them and no fenced code block: an empty code block is none), and, for
    each of `colons` (`blocks.colon_closers`), its body's last line of content (no closing line
    of a fence or of a container) to its closing line. `line_pieces` keeps a row together where
    it fits and cuts it at words where it does not."""
    if not containers:
        return {}
    firsts = {first for first, _, _ in containers}
    closing = {last for _, last, _ in colons}
    fences = {fence.start_line for fence in fences_opening(doc.fences, numbers[0], numbers[-1])}
    rows: dict[int, int] = {}
    for first, last, _ in containers:
        index = bisect_right(numbers, first)
        while index < len(numbers) and (numbers[index] in firsts or numbers[index] in fences):
            index += 1
        if index < len(numbers) and numbers[index] <= last:
            rows[first] = max(rows.get(first, 0), numbers[index])
    for first, last, _ in colons:
        index = bisect_left(numbers, last) - 1
        while index >= 0 and first < numbers[index] and _closes(doc, numbers[index], closing):
            index -= 1
        if index >= 0 and first < numbers[index]:
            rows[numbers[index]] = max(rows.get(numbers[index], 0), last)
    return rows


def _closes(doc: ParsedDocument, number: int, closing: set[int]) -> bool:
    """Whether line `number` is one of the `closing` lines of containers, or a fence marker line
    (walking back from a closing line, the first met closes a fenced code block)."""
    return number in closing or doc.line_kinds[number - 1] == FENCE_MARK


def _size(measure: Measure, lines: list[Span], group: list[int]) -> int:
    """The size of `lines` from the first to the last of indices `group`."""
    return measure.size(lines[group[0]].start, lines[group[-1]].end)


def _table_at(tables: Sequence[HtmlTable], line: int) -> HtmlTable | None:
    """The one of `tables` (in line order) that holds `line`, None if none."""
    index = bisect_right([t.first for t in tables], line) - 1
    return tables[index] if index >= 0 and line <= tables[index].last else None


def balanced(src: SourceText, span: Span, unclosed: UnclosedFences) -> Span:
    """`span`, closed by a marker line if it holds a fence that never closes, or holds a fence
    marker and starts or ends inside a line (a line cut in two can open a fence when read alone,
    such as "``` a ```" cut after its "a") or starts partway into a block (lines of an HTML
    block or a list item, read alone, are markdown of their own); only such a span is parsed
    again."""
    first, last = src.first_line(span), src.last_line(span)
    if unclosed.between(first, last):
        return _balanced(src, span)
    lines = src.lines_span(first, last)  # its whole lines
    cut = src.has_text(lines.start, span.start) or src.has_text(span.end, lines.end)
    if (cut or first not in src.block_lines) and FENCE_RUN.search(src.render(span)):
        return _balanced(src, span)
    return span


def _balanced(src: SourceText, piece: Span) -> Span:
    """`piece` with a closing marker added when, read on its own, its text leaves a fence open.

    Cut out of a deep container, lines can parse differently than in the whole document (a
    marker line that was lazy paragraph text becomes a fence opener); closing what the piece's
    own parse leaves open keeps every chunk well-formed.
    """
    for closer in closers_for_open_fences(src.render(piece))[:1]:
        return Span(piece.start, piece.end, piece.prefix, piece.suffix + "\n" + closer)
    return piece


def _fence_around(fences: Sequence[Block], line: int, reopen: bool) -> Block | None:
    """The fence a piece must reopen (its first line is a body or closing line) or close (its
    last line is the opener or a body line; a fence without a closing line, which runs to the
    end of its container, counts its last line as a body line). A bisect: walking the block's
    fences for each piece was quadratic."""
    fence = last_fence_opened(fences, line - 1 if reopen else line)
    if fence is None:
        return None
    inside = line <= fence.end_line if reopen else line < fence.end_line + (not fence.closed)
    return fence if inside else None


def table_pieces(
    src: SourceText, block: Block, measure: Measure, limit: int, start: int | None = None
) -> list[Span]:
    """A table cut between rows; each piece after the first repeats the header and delimiter.
    The first piece starts at `start` when given (a heading line before the table).

    A single row over `limit` is a piece of its own (the caller cuts it further).
    """
    span = src.block_span(block)
    start = span.start if start is None else start
    rows = line_spans(src, span)
    if len(rows) < 3:
        return [Span(start, span.end)]
    header = src.text[rows[0].start : rows[1].end]
    lead = measure.size(start, rows[0].start) + measure.size_of(header)
    first = pack(rows[2:], measure, max(1, limit - lead - 1))[0]
    groups = pack(rows[2 + len(first) :], measure, max(1, limit - measure.size_of(header) - 1))
    pieces = [Span(start, first[-1].end)]
    pieces += [Span(group[0].start, group[-1].end, prefix=header + "\n") for group in groups]
    return pieces
