"""The `semantic` strategy: seed 003's sliding-window chunking at heading boundaries.

Seed 003 rules, applied line by line over the document (headings come from the block parse):
- at a heading: seal when the chunk started at H1 and this is its second H2 (the H1 rule); else seal
  when the heading is at or above the chunk's start level, or at or above the deepest level seen in
  the chunk, and the chunk has min_tokens (250); else (going deeper) when it has
  min_tokens_deeper (500);
- before any line that would take the chunk over max_tokens (750): seal;
- a sealed chunk gets its parent headings prepended (BuildChunkWithHierarchy);
- the final chunk is kept only with min_tokens or when it is the only chunk.

Additions (see the README's Decisions): the prepended parents are those active when the chunk
started; the hard maximum covers the whole emitted text (prepended headings and fence lines
included); a seal inside a fenced block closes the fence and reopens it in the next chunk; a line
longer than the maximum is cut into pieces at word boundaries; a dropped final chunk is reported in
`skipped_tail_tokens` and kept with `keep_short_tail=True`; a chunk that starts with text before
its first heading (a preamble) takes that heading's level as its start level.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

from chunking.blocks import (
    FENCE_MARK,
    TEXT,
    Block,
    Heading,
    ParsedDocument,
    fence_closer,
    fence_reopener,
)
from chunking.strategy import Draft, Split, Strategy, register
from chunking.tokens import TokenCounter


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
        window = _Window(doc, self.counter, self.options)
        return window.run()


@dataclass
class _Chunk:
    """The chunk being collected."""

    parents: tuple[Heading, ...] = ()  # active headings above the chunk's start
    prefix: tuple[Heading, ...] = ()  # the parents prepended to the text (see _Window.start)
    reopen: str = ""  # fence opener repeated at the top when the chunk starts inside a fence
    overhead: int = 0  # tokens of the prefix and reopen lines
    lines: list[tuple[int, str]] = field(default_factory=list)  # (source line, text)
    tokens: int = 0  # tokens of the chunk's own lines (what seed 003 compares)
    has_content: bool = False  # any non-blank own line
    start_level: int | None = None
    deepest: int | None = None
    seen_h2: bool = False
    first_heading: Heading | None = None


class _Window:
    """One pass of seed 003 over one document."""

    def __init__(self, doc: ParsedDocument, counter: TokenCounter, options):
        self.doc = doc
        self.counter = counter
        self.min_tokens = options["min_tokens"]
        self.min_deeper = options["min_tokens_deeper"]
        self.max_tokens = options["max_tokens"]
        self.keep_short_tail = options["keep_short_tail"]
        self.headings = {b.start_line: b for b in doc.blocks if b.kind == "heading"}
        self.fence_of_line = _fence_index(doc)
        self.hierarchy: dict[int, Heading] = {}
        self.drafts: list[Draft] = []
        self.chunk = _Chunk()

    def run(self) -> Split:
        line = self.doc.source.body_start + 1
        while line <= len(self.doc.lines):
            block = self.headings.get(line)
            if block is None:
                self.add_line(line)
                line += 1
            else:
                self.heading(block)
                for number in range(block.start_line, block.end_line + 1):
                    self.add_line(number)
                line = block.end_line + 1
        skipped = 0
        if self.chunk.has_content:
            if self.chunk.tokens >= self.min_tokens or not self.drafts or self.keep_short_tail:
                self.seal()
            else:
                skipped = self.counter.count(self.draft(self.chunk).text)
        return Split(drafts=tuple(self.drafts), skipped_tail_tokens=skipped)

    # -- headings ---------------------------------------------------------------------------

    def heading(self, block: Block) -> None:
        """Seal before the heading if seed 003 says so, then track it in the hierarchy."""
        heading = block.heading
        chunk = self.chunk
        if not chunk.has_content or self.seals_at(heading, self.heading_tokens(block)):
            self.seal()
            parents = tuple(self.hierarchy[level] for level in sorted(self.hierarchy))
            self.start(tuple(h for h in parents if h.level < heading.level))
        for level in [level for level in self.hierarchy if level >= heading.level]:
            del self.hierarchy[level]
        self.hierarchy[heading.level] = heading
        chunk = self.chunk
        if chunk.start_level is None:
            chunk.start_level = chunk.deepest = heading.level
        chunk.deepest = max(chunk.deepest, heading.level)
        chunk.seen_h2 = chunk.seen_h2 or heading.level == 2
        if chunk.first_heading is None:
            chunk.first_heading = heading

    def seals_at(self, heading: Heading, tokens: int) -> bool:
        """Seed 003's decision at a heading, plus the hard maximum."""
        chunk = self.chunk
        if chunk.start_level == 1 and heading.level == 2 and chunk.seen_h2:
            return True
        if chunk.overhead + chunk.tokens + tokens > self.max_tokens:
            return True
        if chunk.start_level is None:
            return chunk.tokens >= self.min_deeper
        if heading.level <= chunk.start_level or heading.level <= chunk.deepest:
            return chunk.tokens >= self.min_tokens
        return chunk.tokens >= self.min_deeper

    def heading_tokens(self, block: Block) -> int:
        lines = self.doc.lines[block.start_line - 1 : block.end_line]
        return sum(self.counter.count(text) for text in lines)

    # -- lines ------------------------------------------------------------------------------

    def add_line(self, number: int) -> None:
        """Add source line `number`, sealing first when it would break the hard maximum."""
        text = self.doc.lines[number - 1]
        tokens = self.counter.count(text)
        closer = self.closer_tokens(number)
        chunk = self.chunk
        if chunk.has_content and chunk.overhead + chunk.tokens + tokens + closer > self.max_tokens:
            self.seal()
            self.continue_at(number)
        if self.chunk.overhead + tokens + closer <= self.max_tokens:
            self.append(number, text, tokens)
            return
        # Longer than any chunk can hold: cut at word boundaries, one piece per chunk.
        budget = (
            self.max_tokens - closer - max(self.chunk.overhead, self.continuation(number).overhead)
        )
        for index, piece in enumerate(self.counter.split(text, max(budget, 1))):
            if index:
                self.seal()
                self.continue_at(number)
            self.append(number, piece, self.counter.count(piece))

    def append(self, number: int, text: str, tokens: int) -> None:
        self.chunk.lines.append((number, text))
        self.chunk.tokens += tokens
        self.chunk.has_content = self.chunk.has_content or bool(text.strip())

    def closer_tokens(self, number: int) -> int:
        """Tokens of the closing fence line needed if the chunk ended right after line `number`."""
        fence = self.open_fence_after(number)
        return self.counter.count(fence_closer(self.doc, fence)) if fence else 0

    def open_fence_after(self, number: int) -> Block | None:
        """The fence still open after line `number` (None outside fences or on a closing line)."""
        fence = self.fence_of_line.get(number)
        if fence is None or (fence.closed and number == fence.end_line):
            return None
        return fence

    # -- chunks -----------------------------------------------------------------------------

    def new_chunk(self, parents: tuple[Heading, ...], reopen: str = "") -> _Chunk:
        """A chunk with `parents` prepended, outermost dropped while they take over half the max."""
        prefix = parents
        while prefix and self.counter.count(_heading_lines(prefix)) > self.max_tokens // 2:
            prefix = prefix[1:]
        overhead = self.counter.count(_heading_lines(prefix)) + self.counter.count(reopen)
        return _Chunk(parents=parents, prefix=prefix, reopen=reopen, overhead=overhead)

    def start(self, parents: tuple[Heading, ...]) -> None:
        self.chunk = self.new_chunk(parents)

    def continuation(self, number: int) -> _Chunk:
        """The chunk that continues the current section at line `number` after a max-token seal."""
        parents = tuple(self.hierarchy[level] for level in sorted(self.hierarchy))
        fence = self.fence_of_line.get(number)
        reopen = fence_reopener(self.doc, fence) if fence and number > fence.start_line else ""
        chunk = self.new_chunk(parents, reopen)
        chunk.start_level = chunk.deepest = parents[-1].level if parents else None
        return chunk

    def continue_at(self, number: int) -> None:
        self.chunk = self.continuation(number)

    def seal(self) -> None:
        """Emit the current chunk (if it has content) and start an empty one."""
        if self.chunk.has_content:
            self.drafts.append(self.draft(self.chunk))
        self.start(parents=())

    def draft(self, chunk: _Chunk) -> Draft:
        """BuildChunkWithHierarchy: parents, fence reopen, own lines, fence close."""
        lines = chunk.lines
        first = next(i for i, (_, text) in enumerate(lines) if text.strip())
        last = max(i for i, (_, text) in enumerate(lines) if text.strip())
        own = lines[first : last + 1]
        texts = [h.markdown for h in chunk.prefix]
        kinds = [TEXT] * len(texts)
        if chunk.reopen:
            texts.append(chunk.reopen)
            kinds.append(FENCE_MARK)
        texts.extend(text for _, text in own)
        kinds.extend(self.doc.line_kinds[number - 1] for number, _ in own)
        fence = self.open_fence_after(own[-1][0])
        if fence is not None:
            texts.append(fence_closer(self.doc, fence))
            kinds.append(FENCE_MARK)
        first_heading = (chunk.first_heading,) if chunk.first_heading else ()
        return Draft(
            text="\n".join(texts),
            start_line=own[0][0],
            end_line=own[-1][0],
            headings=chunk.parents + first_heading,
            title=self.target_heading(own, chunk.prefix),
            line_kinds=bytes(kinds),
        )

    def target_heading(self, own: list[tuple[int, str]], prefix: tuple[Heading, ...]) -> str:
        """Seed 003's target heading: the first heading among the chunk's own lines with content
        under it; else its last heading; else the innermost prepended parent; else ""."""
        found: list[Heading] = []
        with_content: set[int] = set()
        skip_until = 0
        for number, text in own:
            block = self.headings.get(number)
            if block is not None:
                if not found or found[-1] is not block.heading:
                    found.append(block.heading)
                skip_until = block.end_line
            elif number > skip_until and text.strip() and found:
                with_content.add(len(found) - 1)
        for index, heading in enumerate(found):
            if index in with_content:
                return heading.text
        if found:
            return found[-1].text
        return prefix[-1].text if prefix else ""


def _fence_index(doc: ParsedDocument) -> dict[int, Block]:
    """Every line inside a fenced block (its opening and closing lines too) mapped to the fence."""
    return {
        number: fence
        for fence in doc.fences
        for number in range(fence.start_line, fence.end_line + 1)
    }


def _heading_lines(headings: tuple[Heading, ...]) -> str:
    return "\n".join(h.markdown for h in headings)
