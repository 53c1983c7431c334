"""The `structural` strategy: seed 002 v1 (normative) boundaries, sizes and overlap.

Walk the top-level blocks in order, keeping the heading stack:
- every heading starts a new chunk (seed 002 section 4.1 "heading level changes", read as "the
  heading path changes"); a heading with no content before a deeper heading rides along with
  that heading's first chunk, so no chunk is a bare title;
- tables and code blocks (fenced or indented) are chunks of their own; an HTML block of opening
  tags alone right before a fenced code block, and one of closing tags alone right after it, are
  the block's wrapper and go with it (FastAPI's `<div class="termy">` and `</div>`);
- a list may follow the prose that introduces it (ending with ":" or "：") in the same chunk, else
  it starts one; the chunk ends when the list context switches between bullet and ordered or the
  list ends (section 4.1);
- paragraphs, block quotes and HTML blocks under one heading path are merged (section 4.2) until
  the chunk reaches the target (350) or the next block would pass the soft maximum (450);
- a block over the hard maximum (520) is cut: prose at sentence boundaries, code between lines
  (fence reopened), tables between rows (header repeated), HTML blocks between an HTML table's
  rows (its head repeated, the table closed), lists, quotes and containers between lines;
  a piece still over the limit is cut into token windows of `target` tokens with 15% overlap.
Overlap (section 6): when a size limit, not structure, ends a prose chunk, the next chunk of the
same section starts with the previous chunk's last whole sentences, at most 15% of its tokens
(a token tail when even one sentence is longer). It never crosses a heading, table, code or list
boundary. Chunk text is the exact source slice (whitespace is not collapsed; see README).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from chunking.blocks import Block, Heading, ParsedDocument, html_tables, indented_containers
from chunking.spans import (
    FENCE_RUN,
    WORD_BOUNDARY,
    Measure,
    SourceText,
    Span,
    UnclosedFences,
    balanced,
    line_kinds,
    line_pieces,
    pack,
    sentences,
    table_pieces,
    trimmed,
)
from chunking.strategy import Draft, Split, Strategy, path_of, register

_PROSE = "prose"
_ALONE = frozenset(("table", "fence", "code_block"))  # kinds that are always chunks of their own
_LISTS = frozenset(("bullet_list", "ordered_list"))
_SAFE_LABEL = re.compile(r"[A-Za-z0-9_.]+")


@register
class StructuralStrategy(Strategy):
    """Seed 002 v1: structural boundaries, 350/450/520 tokens, sentence and window splits."""

    name = "structural"
    defaults = MappingProxyType(
        {"target": 350, "soft_max": 450, "hard_max": 520, "overlap_percent": 15}
    )
    default_tokenizer = "minilm"

    def __init__(self, **options):
        super().__init__(**options)
        target, soft, hard = (self.options[k] for k in ("target", "soft_max", "hard_max"))
        if not 0 < target <= soft <= hard:
            raise ValueError(
                f"structural sizes need 0 < target <= soft_max <= hard_max, got "
                f"{target}/{soft}/{hard}"
            )
        if not 0 <= self.options["overlap_percent"] < 50:
            raise ValueError("option 'overlap_percent' must be in [0, 50)")

    @property
    def hard_max_tokens(self) -> int:
        """Seed 002 section 5: no chunk counts more than `hard_max` tokens."""
        return self.options["hard_max"]

    @property
    def cache_key(self) -> str:
        """e.g. `structural-v1-350-450-520-o15-minilm`; a tokenizer path is shown by its hash,
        and `-context` ends it when `embed_context` is on (its vectors are of other texts)."""
        tokenizer = self.options["tokenizer"]
        if not _SAFE_LABEL.fullmatch(tokenizer):
            tokenizer = hashlib.sha256(tokenizer.encode()).hexdigest()[:8]
        o = self.options
        context = "-context" if o["embed_context"] != self._defaults["embed_context"] else ""
        return (
            f"structural-v1-{o['target']}-{o['soft_max']}-{o['hard_max']}"
            f"-o{o['overlap_percent']}-{tokenizer}{context}"
        )

    def split(self, doc: ParsedDocument) -> Split:
        """Cut `doc` by seed 002's boundary and size rules."""
        return Split(drafts=tuple(_Walker(doc, self).run()))


def _unit_kind(block: Block) -> str:
    """Tables, code and lists keep their block kind; everything else is prose."""
    if block.kind in _ALONE or block.kind in _LISTS:
        return block.kind
    return _PROSE


# An HTML tag alone on its line: an opening one (not self-closing, as `<img …/>` or `<br/>` is:
# content) and a closing one.
_OPENING_TAG = re.compile(r"[ \t]*<[A-Za-z][\w-]*(?:\s[^<>]*)?(?<!/)>[ \t]*")
_CLOSING_TAG = re.compile(r"[ \t]*</[A-Za-z][\w-]*[ \t]*>[ \t]*")


def _wrapped_fences(doc: ParsedDocument) -> list[Block]:
    """The top-level blocks, each fenced code block widened over the HTML blocks that wrap it:
    one of opening tags alone right before it (`<div class="termy">`) and one of closing tags
    alone right after it (`</div>`, `</details>`). Apart, seed 002's rule that code stands alone
    made chunks of those tags alone (182 of FastAPI's chunks until chunking.REVISION 46), and
    left the tags unbalanced in the chunks around them."""
    blocks: list[Block] = []
    for block in doc.blocks:
        last = blocks[-1] if blocks else None
        if last is not None and block.kind == "fence" and _tags_alone(doc, last, _OPENING_TAG):
            blocks[-1] = replace(block, start_line=last.start_line)
        elif last is not None and last.kind == "fence" and _tags_alone(doc, block, _CLOSING_TAG):
            blocks[-1] = replace(last, end_line=block.end_line)
        else:
            blocks.append(block)
    return blocks


def _tags_alone(doc: ParsedDocument, block: Block, tag: re.Pattern[str]) -> bool:
    """Whether `block` is an HTML block whose every non-blank line is one `tag`."""
    lines = doc.lines[block.start_line - 1 : block.end_line]
    return block.kind == "html_block" and all(tag.fullmatch(line) for line in lines if line.strip())


# The container named at the end of a chunk's chunk_path (seed 002 section 8).
_CONTAINERS = MappingProxyType(
    {
        "table": "table",
        "fence": "code",
        "code_block": "code",
        "bullet_list": "bullet list",
        "ordered_list": "ordered list",
    }
)


@dataclass
class _Open:
    """The chunk being assembled: its source span, token total and what it holds."""

    start: int = -1
    end: int = -1
    tokens: int = 0
    kind: str = ""  # kind of the last block added ("heading" while it holds headings only)
    last: Span | None = None  # the last block added; its sentences feed the overlap
    measure: Measure | None = None  # token measure of `last` (None: no overlap from it)

    @property
    def empty(self) -> bool:
        return self.start < 0

    @property
    def headings_only(self) -> bool:
        return not self.empty and self.kind == "heading"


@dataclass
class _Walker:
    """One pass over the top-level blocks of one document."""

    doc: ParsedDocument
    strategy: StructuralStrategy
    src: SourceText = field(init=False)
    drafts: list[Draft] = field(default_factory=list)
    stack: list[Heading] = field(init=False)  # the headings above the body first
    open: _Open = field(default_factory=_Open)

    def __post_init__(self) -> None:
        self.src = SourceText.of(self.doc)
        self.stack = list(self.doc.implied)
        opts = self.strategy.options
        self.counter = self.strategy.counter
        self.target, self.soft, self.hard = opts["target"], opts["soft_max"], opts["hard_max"]
        self.percent = opts["overlap_percent"]
        self.unclosed = UnclosedFences.of(self.doc)

    def run(self) -> list[Draft]:
        blocks = _wrapped_fences(self.doc)
        spans = [self.src.block_span(block) for block in blocks]
        measures = Measure.tokens_of_all(self.counter, self.src, spans)
        for block, span, measure in zip(blocks, spans, measures, strict=True):
            if block.kind == "heading":
                self._heading(block, measure.size(span.start, span.end))
            else:
                self._unit(block, span, measure)
        self._emit()
        return self.drafts

    def _heading(self, block: Block, tokens: int) -> None:
        """Every heading starts a chunk; an empty parent heading rides along with its child."""
        heading = block.heading
        span = self.src.block_span(block)
        current = self.open
        deeper = current.headings_only and heading.level > self.stack[-1].level
        if deeper and current.tokens + tokens <= self.soft:
            current.end, current.tokens = span.end, current.tokens + tokens
        else:
            self._emit()
            self.open = _Open(span.start, span.end, tokens, "heading")
        while self.stack and self.stack[-1].level >= heading.level:
            self.stack.pop()
        self.stack.append(heading)

    def _unit(self, block: Block, span: Span, measure: Measure) -> None:
        """Add one content block, closing the open chunk first where seed 002 says so."""
        kind = _unit_kind(block)
        tokens = measure.size(span.start, span.end)
        oversized = tokens > self.hard or self.unclosed.in_block(block)
        current = self.open
        if not current.empty and not current.headings_only:
            if self._structural_break(kind):
                self._emit()
            elif current.tokens >= self.target or current.tokens + tokens > self.soft:
                # A block cut on its own starts no chunk with an overlap in front of it.
                overlap = kind == _PROSE == current.kind and not oversized
                self._emit(overlap_room=self.soft - tokens if overlap else 0)
        if oversized:
            self._oversized(block, kind, span, measure)
            return
        current = self.open
        if current.tokens + tokens > self.hard:
            self._emit()
            current = self.open
        # No overlap from an HTML table: its sentences are cells, and the next chunk would start
        # inside a row, with no header (until 2026-11-30); nor from a container (`!!! note`,
        # `:::tip`, `/// tip`, ```{note}): the next chunk would start inside its body, without its
        # first line, and with its closing line after the overlap (until 2026-12-01); nor from a
        # block quote holding one (`> /// note`, until chunking.REVISION 43).
        container = block.kind == "admonition" or bool(indented_containers(self.doc, block))
        measure = None if container or html_tables(self.doc, block) else measure
        if current.empty:
            self.open = _Open(span.start, span.end, tokens, kind, span, measure)
        else:
            current.end, current.tokens = span.end, current.tokens + tokens
            current.kind, current.last, current.measure = kind, span, measure

    def _structural_break(self, kind: str) -> bool:
        """Seed 002 section 4.1: tables and code stand alone; a list ends on switch or exit.

        A list also starts a chunk of its own unless the prose right before it ends with a
        colon, or CJK's full-width one (it introduces the list): otherwise each chunk of
        alternating lists and paragraphs would pair one item's paragraph with the next item.
        """
        before = self.open.kind
        if kind in _ALONE or before in _ALONE:
            return True
        if before in _LISTS:
            return kind != before
        if kind in _LISTS:
            last = self.open.last
            return last is None or not self.src.text[last.start : last.end].endswith((":", "："))
        return False

    def _oversized(self, block: Block, kind: str, span: Span, measure: Measure) -> None:
        """A block over the hard maximum (or holding an unclosed fence): emit it cut into pieces."""
        if block.kind == "table":
            pieces = table_pieces(self.src, block, measure, self.soft)
        elif block.kind == "paragraph":
            pieces = self._prose_pieces(span, measure)
        else:
            pieces = line_pieces(self.doc, self.src, span, measure, self.soft)
        heading = self.open if self.open.headings_only else None
        if heading and not pieces[0].prefix:
            size = heading.tokens + measure.size(pieces[0].start, pieces[0].end)
            if size + self.counter.count(pieces[0].suffix) <= self.hard:
                pieces[0] = Span(heading.start, pieces[0].end, suffix=pieces[0].suffix)
                self.open = _Open()
        self._emit()
        for piece in pieces:
            # The context a piece carries (a repeated table header, a fence line) counts too.
            context = measure.size_of(piece.prefix + piece.suffix)
            size = measure.size(piece.start, piece.end) + context
            if size > self.hard:  # a table row or a line over the limit: token windows
                for start, end in measure.windows(piece.start, piece.end, *self._window()):
                    self._emit_span(trimmed(self.src, start, end), kind)
            else:
                self._emit_span(piece, kind)
        self.open = _Open(kind=kind)

    def _window(self) -> tuple[int, int]:
        """Seed 002 section 5.3 token windows: `target` tokens, 15% of them repeated."""
        return self.target, (self.target * self.percent + 50) // 100

    def _prose_pieces(self, span: Span, measure: Measure) -> list[Span]:
        """Seed 002 section 5.2: sentences packed up to the target, each piece overlapping the
        last; a sentence over the hard maximum becomes token windows (section 5.3)."""
        pieces: list[Span] = []
        for group in pack(sentences(self.src, span), measure, self.target):
            start, end = group[0].start, group[-1].end
            if measure.size(start, end) > self.hard:
                for first, last in measure.windows(start, end, *self._window()):
                    pieces.append(trimmed(self.src, first, last))
                continue
            if pieces:
                budget = measure.size(pieces[-1].start, pieces[-1].end) * self.percent // 100
                start = self._overlap_start(Span(pieces[-1].start, start), measure, budget, start)
            pieces.append(Span(start, end))
        return pieces

    def _overlap_start(self, tail: Span, measure: Measure, budget: int, start: int) -> int:
        """Where a chunk starting at `start` begins once `tail`'s last sentences are repeated.

        Whole sentences up to `budget` tokens; when even the last sentence is longer, its last
        whole words within `budget` tokens (a token tail began inside a word: 'parseable' of
        'unparseable'). Returns `start` itself when there is nothing to repeat, or when the
        repeated text would begin with a run of backticks or tildes (the chunk would open a fence,
        and the line closing it would take it past the hard maximum).
        """
        if budget <= 0:
            return start
        parts = [s for s in sentences(self.src, tail) if s.end <= start]
        chosen, used = start, 0
        for sentence in reversed(parts):
            used += measure.size(sentence.start, sentence.end)
            if used > budget:
                break
            chosen = sentence.start
        if chosen == start and parts:
            last = parts[-1]
            tail = measure.tail(last.start, last.end, budget)
            word = WORD_BOUNDARY.search(self.src.text, tail, last.end)  # not inside a word
            chosen = start if tail == last.start or word is None else word.start()
        return start if FENCE_RUN.match(self.src.text, chosen) else chosen

    def _emit(self, overlap_room: int = 0) -> None:
        """Close the open chunk; the next one starts with its last sentences (seed 002 section 6)
        when `overlap_room` (tokens the next chunk can spare) allows."""
        current = self.open
        self.open = _Open(kind=current.kind)
        if current.empty:
            return
        span = Span(current.start, current.end)
        if current.tokens > self.hard:  # only a heading can be this long: token windows
            measure = Measure.tokens(self.counter, self.src, span)
            for start, end in measure.windows(span.start, span.end, *self._window()):
                self._emit_span(trimmed(self.src, start, end), current.kind)
            return
        self._emit_span(span, current.kind)
        if overlap_room > 0 and current.measure is not None:
            budget = min(overlap_room, current.tokens * self.percent // 100)
            start = self._overlap_start(current.last, current.measure, budget, current.end + 1)
            if start <= current.end:
                tokens = current.measure.size(start, current.end)
                self.open = _Open(start, current.end, tokens, _PROSE)

    def _emit_span(self, span: Span, kind: str) -> None:
        """Add one draft for `span` under the current heading stack."""
        span = balanced(self.src, span, self.unclosed)
        path = [path_of(self.stack)] if self.stack else []
        if kind in _CONTAINERS:
            path.append(_CONTAINERS[kind])
        self.drafts.append(
            Draft(
                text=self.src.render(span),
                start_line=self.src.first_line(span),
                end_line=self.src.last_line(span),
                headings=tuple(self.stack),
                line_kinds=line_kinds(self.doc, self.src, span),
                chunk_path=" > ".join(path),
            )
        )
