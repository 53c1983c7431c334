"""The `headers` strategy: seed 001's markdown-header chunking.

A file of at most `max_document_lines` (500) lines is one chunk and is not "chunked". A longer one
is cut before every top-level H2 and H3 heading; the text before the first of them is a section too.
A section with nothing under its heading is skipped. A section longer than `max_section_lines`
(1000) is cut between top-level blocks (paragraph boundaries), so a code block, list or table is
never split. Chunk texts are exact slices of the source; header paths read `# A > ## B > ### C`.
"""

from __future__ import annotations

from types import MappingProxyType

from chunking.blocks import (
    Block,
    Heading,
    ParsedDocument,
    fence_closer,
    fence_line_kind,
    last_fence_opened,
)
from chunking.strategy import Draft, Split, Strategy, register

_SPLIT_LEVELS = (2, 3)


@register
class HeadersStrategy(Strategy):
    """Seed 001: one chunk up to 500 lines, else one per H2/H3 section."""

    name = "headers"
    defaults = MappingProxyType({"max_document_lines": 500, "max_section_lines": 1000})
    key_options = ("max_document_lines", "max_section_lines")

    def __init__(self, **options):
        super().__init__(**options)
        if self.options["max_document_lines"] < 1 or self.options["max_section_lines"] < 1:
            raise ValueError(
                "headers options max_document_lines and max_section_lines must be >= 1"
            )

    def split(self, doc: ParsedDocument) -> Split:
        """Seed 001's sections of `doc`."""
        unclosed = tuple(fence for fence in doc.fences if not fence.closed)
        stacks = _stacks(doc)
        if len(doc.lines) <= self.options["max_document_lines"]:
            if not doc.blocks:
                return Split(drafts=(), is_chunked=False)
            stack = stacks[doc.blocks[0].start_line]
            return Split(drafts=(_draft(doc, doc.blocks, stack, unclosed),), is_chunked=False)
        drafts = []
        for blocks in _sections(doc):
            if all(block.kind == "heading" for block in blocks):
                continue  # an empty section
            for piece in _pieces(blocks, self.options["max_section_lines"]):
                # A later piece of a long section may start under a deeper heading.
                drafts.append(_draft(doc, piece, stacks[piece[0].start_line], unclosed))
        return Split(drafts=tuple(drafts), is_chunked=bool(drafts))  # none: not chunked


def _sections(doc: ParsedDocument) -> list[tuple[Block, ...]]:
    """The blocks of each section; a section starts at every H2/H3."""
    sections: list[list[Block]] = []
    for block in doc.blocks:
        if not sections or (block.heading is not None and block.heading.level in _SPLIT_LEVELS):
            sections.append([])
        sections[-1].append(block)
    return [tuple(section) for section in sections]


def _pieces(blocks: tuple[Block, ...], max_lines: int) -> list[tuple[Block, ...]]:
    """`blocks` cut between blocks into runs of at most `max_lines` lines; a bigger block stands
    alone, and headings stay with the block after them (those at the end of a run start the
    next; those ending the section stay in the last run)."""
    if blocks[-1].end_line - blocks[0].start_line + 1 <= max_lines:
        return [blocks]
    pieces: list[list[Block]] = [[]]
    for block in blocks:
        run = pieces[-1]
        headings_only = all(b.kind == "heading" for b in run)
        if run and not headings_only and block.end_line - run[0].start_line + 1 > max_lines:
            cut = len(run)
            while run[cut - 1].kind == "heading":
                cut -= 1
            pieces.append(run[cut:])
            del run[cut:]
        pieces[-1].append(block)
    if len(pieces) > 1 and all(b.kind == "heading" for b in pieces[-1]):
        pieces[-2].extend(pieces.pop())
    return [tuple(piece) for piece in pieces]


def _stacks(doc: ParsedDocument) -> dict[int, tuple[Heading, ...]]:
    """The headings active at each block's first line (a heading counts at its own line), keyed
    by that line: one pass (walking the blocks for each piece of a long section was quadratic)."""
    stacks: dict[int, tuple[Heading, ...]] = {}
    stack = {heading.level: heading for heading in doc.implied}
    for block in doc.blocks:
        if block.heading is not None:
            for level in [level for level in stack if level >= block.heading.level]:
                del stack[level]
            stack[block.heading.level] = block.heading
        stacks[block.start_line] = tuple(stack[level] for level in sorted(stack))
    return stacks


def _draft(
    doc: ParsedDocument,
    blocks: tuple[Block, ...],
    stack: tuple[Heading, ...],
    unclosed: tuple[Block, ...],
) -> Draft:
    """The source lines of `blocks` up to their last non-blank line (the line map of a list, or
    of a fence that never closes, takes in the blank lines after it); an unclosed fence at
    their end is closed after that line (well-formed: a list item or block quote that ended it
    ends no more)."""
    start = blocks[0].start_line
    end = next(n for n in range(blocks[-1].end_line, start - 1, -1) if doc.lines[n - 1].strip())
    lines = list(doc.lines[start - 1 : end])
    kinds = bytearray(doc.line_kinds[start - 1 : end])
    fence = last_fence_opened(unclosed, end)  # a bisect: a walk for each draft was quadratic
    if fence is not None and end <= fence.end_line:
        lines.append(fence_closer(doc, fence))
        kinds.append(fence_line_kind(fence))
    return Draft(
        text="\n".join(lines),
        start_line=start,
        end_line=end,
        headings=stack,
        line_kinds=bytes(kinds),
    )
