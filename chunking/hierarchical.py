"""The `hierarchical` strategy: seed 004's context-aware chunks with hierarchy and cross-references.

The document becomes a tree of sections (one per heading, plus the text before the first heading);
each section's own content (up to the next heading of any level) gets one content type:
code_example, table_based, link_list, introduction, descriptive_text or default (see `classify`).
Sizes are in CHARACTERS, overlap included (seed 004 measures its 1000 in characters but takes its
overlap as 200 words; we take at most 200 characters: whole sentences, else whole words): a split
descriptive section is packed into pieces of max_chunk_size - overlap_size, so that a piece with
its overlap stays within max_chunk_size.
- Atomic types (all but descriptive_text) stay one chunk up to `hard_max_size` (4000) characters;
  a bigger one is cut between blocks, then between lines (fences closed and reopened), table rows
  (header repeated; an HTML table's head too, the table closed) or sentences, into pieces of at
  most `hard_max_size`.
- descriptive_text over `max_chunk_size` (1000) is cut between blocks (seed 004 cuts between
  paragraphs); each later piece starts with the last <= `overlap_size` (200) characters of the
  piece before (whole sentences, else whole words), taken from the source so the text stays a
  source slice; overlap never comes from or goes into code or table lines, nor comes from a
  container (`!!! note`, `:::tip`, `/// tip`).
Chunk text is the source section (its heading line included in its first chunk); the seed's
`enhanced_content` ("Context: A > B\n\n", then "## B\n\n" from the heading's level and title for a
piece without its heading line, then the text) goes in extras with `formatted_path`,
`hierarchy_levels`, `header_level`, `related_chunks` and `related_sections`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from operator import attrgetter
from types import MappingProxyType

from chunking.blocks import (
    FENCE_BODY,
    FENCE_MARK,
    INDENTED_CODE,
    LITERAL_KINDS,
    TABLE,
    Block,
    Heading,
    ParsedDocument,
    html_tables,
    in_container,
)
from chunking.record import CHUNKING_FAILED, Chunk, ChunkingError
from chunking.spans import (
    FENCE_RUN,
    WORD_START,
    Measure,
    SourceText,
    Span,
    UnclosedFences,
    balanced,
    cut,
    line_kinds,
    line_pieces,
    packed_pieces,
    sentences,
    table_pieces,
)
from chunking.strategy import Draft, Split, Strategy, path_of, register

# Content types kept whole (up to the hard maximum); descriptive_text is the one that is split.
ATOMIC = frozenset(("introduction", "code_example", "table_based", "link_list", "default"))
_INTRO_TITLES = frozenset(("introduction", "overview"))
_CODE = frozenset(("fence", "code_block"))
_LISTS = frozenset(("bullet_list", "ordered_list"))
_PROSE = frozenset(("paragraph", "blockquote", "admonition")) | _LISTS
# What a line of an admonition (or content tab, colon fence, MyST note) weighs as, by its kind;
# any other line is prose.
_WEIGHED_AS = MappingProxyType(
    {FENCE_MARK: "fence", FENCE_BODY: "fence", INDENTED_CODE: "code_block", TABLE: "table"}
)
# Same-title and sibling groups relate each section to its nearest BAND members on each side
# (all of them in any group of up to 2 * BAND + 1), so a file of 10,000 sibling sections stays
# linear instead of quadratic.
BAND = 16


@dataclass(frozen=True)
class Section:
    """One node of the document tree: a heading (None for the preamble) and its own blocks."""

    index: int
    heading: Block | None
    headings: tuple[Heading, ...]  # the heading stack, this section's heading last
    parent: int | None  # index of the enclosing section (None at the top)
    blocks: tuple[Block, ...]  # the section's own content blocks, no headings

    @cached_property
    def titled(self) -> tuple[Heading, ...]:
        """The heading stack without the headings of empty title, which seed 004 leaves out."""
        return tuple(heading for heading in self.headings if heading.title)

    @cached_property
    def path(self) -> str:
        """Seed 004 formatted path, e.g. `Pydantic > API Documentation > Fields`."""
        return " > ".join(heading.title for heading in self.titled)


@register
class HierarchicalStrategy(Strategy):
    """Seed 004: content types, atomic units, overlapping descriptive text, cross-references."""

    name = "hierarchical"
    default_embed_context = True  # seed 004 embeds `enhanced_content`, the context-enriched text
    defaults = MappingProxyType(
        {"max_chunk_size": 1000, "overlap_size": 200, "hard_max_size": 4000}
    )
    key_options = ("max_chunk_size", "overlap_size", "hard_max_size")

    def __init__(self, **options):
        super().__init__(**options)
        size, overlap, hard = (
            self.options[key] for key in ("max_chunk_size", "overlap_size", "hard_max_size")
        )
        if not 0 <= overlap < size <= hard:
            raise ValueError(
                "hierarchical sizes need 0 <= overlap_size < max_chunk_size <= hard_max_size, "
                f"got {size}/{overlap}/{hard}"
            )

    def split(self, doc: ParsedDocument) -> Split:
        """Seed 004's chunks of `doc`, with hierarchy context and cross-references."""
        src = SourceText.of(doc)
        measure = Measure.characters(src)
        pieces: list[tuple[Section, str, Span, bool]] = []  # section, type, span, has heading
        first_content = True
        lines_with_links = sorted({link.line for link in doc.links if not link.is_image})
        unclosed = UnclosedFences.of(doc)
        for section in sections(doc):
            if not section.blocks:
                continue
            kind = classify(doc, section, first_content, lines_with_links)
            first_content = False
            for span in self._pieces(doc, src, measure, section, kind, unclosed):
                at_heading = section.heading is not None and not span.prefix
                at_heading = at_heading and span.start == _start(src, section)
                pieces.append((section, kind, span, at_heading))
        related = cross_references([(section.index, section) for section, *_ in pieces])
        drafts = []
        for ordinal, (section, kind, span, has_heading) in enumerate(pieces):
            span = balanced(src, span, unclosed)
            text = src.render(span)
            heading = section.headings[-1] if section.heading is not None else None
            context = f"Context: {section.path}\n\n"  # seed 004's enhanced_content, to the letter
            if heading is not None and heading.title and not has_heading:
                context += path_of((heading,)) + "\n\n"  # seed 004: its level and title
            drafts.append(
                Draft(
                    text=text,
                    start_line=src.first_line(span),
                    end_line=src.last_line(span),
                    headings=section.headings,
                    content_type=kind,
                    line_kinds=line_kinds(doc, src, span),
                    context=context,
                    extras={
                        "formatted_path": section.path,
                        "hierarchy_levels": [h.level for h in section.titled],
                        "header_level": heading.level if heading else 0,
                        "enhanced_content": context + text,
                        "related_chunks": related[ordinal],
                        "related_sections": [pieces[other][0].path for other in related[ordinal]],
                    },
                )
            )
        return Split(drafts=tuple(drafts))

    def validate(self, doc: ParsedDocument, chunks: list[Chunk]) -> None:
        """Seed 002 section 11, plus this strategy's hard maximum in characters."""
        super().validate(doc, chunks)
        limit = self.options["hard_max_size"]
        for chunk in chunks:
            if len(chunk.text) > limit:
                raise ChunkingError(
                    CHUNKING_FAILED,
                    f"strategy 'hierarchical' produced an invalid chunk {chunk.ordinal}: "
                    f"{len(chunk.text)} characters, over the hard maximum of {limit}",
                )

    def _pieces(
        self,
        doc: ParsedDocument,
        src: SourceText,
        measure: Measure,
        section: Section,
        kind: str,
        unclosed: UnclosedFences,
    ) -> list[Span]:
        """The spans one section becomes: itself when it fits, else cut (with overlap for
        descriptive text)."""
        end = src.block_span(section.blocks[-1]).end
        whole = balanced(src, Span(_start(src, section), end), unclosed)
        limit = self.options["hard_max_size" if kind in ATOMIC else "max_chunk_size"]
        if len(src.render(whole)) <= limit:
            return [whole]
        if kind in ATOMIC:
            return self._cut(doc, src, measure, section, limit, unclosed)
        # Room for the overlap inside max_chunk_size.
        limit -= self.options["overlap_size"]
        pieces = self._cut(doc, src, measure, section, limit, unclosed)
        return [pieces[0]] + [
            Span(
                self._overlap_start(doc, src, before, piece, unclosed),
                piece.end,
                piece.prefix,
                piece.suffix,
            )
            for before, piece in zip(pieces, pieces[1:], strict=False)
        ]

    def _cut(
        self,
        doc: ParsedDocument,
        src: SourceText,
        measure: Measure,
        section: Section,
        limit: int,
        unclosed: UnclosedFences,
    ) -> list[Span]:
        """A section's content packed by blocks into spans of at most `limit` characters; a
        block over `limit`, or holding a fence that never closes (its closing line is added
        later), is cut on its own (rows, lines or sentences), the section's heading line staying
        with its first row, line or sentence."""
        units: list[Span] = []
        for index, block in enumerate(section.blocks):
            span = src.block_span(block)
            start = _start(src, section) if index == 0 else span.start
            if span.end - start <= limit and not unclosed.in_block(block):
                units.append(Span(start, span.end))
            elif block.kind == "table":
                units += table_pieces(src, block, measure, limit, start)
            elif block.kind == "paragraph":
                parts = sentences(src, span)
                parts[0] = Span(start, parts[0].end)
                units += _packed(src, measure, parts, limit, unclosed)
            else:
                units += line_pieces(doc, src, span, measure, limit, start, closers_kept=True)
        out: list[Span] = []
        plain: list[Span] = []
        for unit in units:
            if unit.prefix or unit.suffix:
                out += _packed(src, measure, plain, limit, unclosed)
                out.append(unit)
                plain = []
            else:
                plain.append(unit)
        out += _packed(src, measure, plain, limit, unclosed)
        return [piece for unit in out for piece in _fit(src, measure, unit, limit, unclosed)]

    def _overlap_start(
        self,
        doc: ParsedDocument,
        src: SourceText,
        before: Span,
        piece: Span,
        unclosed: UnclosedFences,
    ) -> int:
        """Where `piece` starts once the end of `before` is repeated: its last whole sentences
        within `overlap_size` characters, else its last whole words within them, the piece
        staying within `max_chunk_size` (with the line that closes a fence it opens, such as a
        quote's `> ~~~`); never from code, table or container lines, nor from a run of
        backticks or tildes (the chunk would open a fence), nor into a piece with context: a
        reopened fence, or a closing line (a piece cut before a line's `~~~` opens a fence alone,
        and its closing line would open one once the overlap brings back the start of that
        line). The first sentence that allows all this, so a code block ending early in that
        text leaves the sentences after it. `piece.start` when nothing fits."""
        if piece.prefix or piece.suffix or before.suffix or not self.options["overlap_size"]:
            return piece.start
        room = self.options["max_chunk_size"] - (piece.end - before.end)
        earliest = max(before.start, before.end - min(self.options["overlap_size"], room))
        if earliest >= before.end:
            return piece.start
        tail = sentences(src, Span(earliest, before.end))
        word = WORD_START.search(src.text, earliest, before.end)
        starts = (
            [part.start for part in tail[1:]] if len(tail) > 1 else [word.start()] if word else []
        )
        fitting = (
            start for start in starts if self._overlap_fits(doc, src, start, piece, unclosed)
        )
        return next(fitting, piece.start)

    def _overlap_fits(
        self,
        doc: ParsedDocument,
        src: SourceText,
        start: int,
        piece: Span,
        unclosed: UnclosedFences,
    ) -> bool:
        """Whether `piece` may start at `start` (`_overlap_start`): no code or table line (an
        HTML table's too) nor container line from there to the piece, no run of backticks or
        tildes there, and the piece within `max_chunk_size`."""
        first, last = src.line_of(start), src.line_of(piece.start)
        if any(doc.line_kinds[n - 1] in LITERAL_KINDS for n in range(first, last + 1)):
            return False
        if _in_html_table_or_container(doc, first, last):
            return False
        if FENCE_RUN.match(src.text, start):
            return False
        overlapped = Span(start, piece.end, piece.prefix, piece.suffix)
        return _rendered_size(src, overlapped, unclosed) <= self.options["max_chunk_size"]


def _in_html_table_or_container(doc: ParsedDocument, first: int, last: int) -> bool:
    """Whether any of lines first..last is a line of an HTML table (`blocks.HtmlTable`): its
    sentences are cells, and a piece starting inside a row has no header (until 2026-11-30); or
    of a container (`!!! note`, `:::tip`, `/// tip`, ```{note}): a piece starting inside its body
    has no first line, and one starting at its closing line began with a bare `///` or `:::`
    (until 2026-12-01), one in a list item or block quote too (`1. …` then `    /// note`, until
    chunking.REVISION 43)."""
    if in_container(doc, first, last):
        return True
    index = bisect_right(doc.blocks, last, key=attrgetter("start_line"))
    while index and doc.blocks[index - 1].end_line >= first:
        index -= 1
        if doc.blocks[index].kind == "admonition":
            return True
        tables = html_tables(doc, doc.blocks[index])
        if any(t.first <= last and first <= t.last for t in tables):
            return True
    return False


def _packed(
    src: SourceText, measure: Measure, parts: list[Span], limit: int, unclosed: UnclosedFences
) -> list[Span]:
    """`parts` packed into spans of at most `limit` characters, the line that closes a fence a
    span opens counted (`spans.balanced`: a span that starts or ends inside a line can open
    one); a group that its closing line takes past `limit` is halved."""
    return packed_pieces(
        parts,
        measure,
        limit,
        lambda group: Span(group[0].start, group[-1].end),
        lambda span: _rendered_size(src, span, unclosed) > limit,
    )


def _fit(
    src: SourceText,
    measure: Measure,
    span: Span,
    limit: int,
    unclosed: UnclosedFences,
    room: int | None = None,
) -> list[Span]:
    """`span` as is, or cut at spaces into pieces of at most `limit` characters when a single
    sentence or line is longer, or the line that closes a fence it opens takes it past `limit`
    (only plain spans are ever that long); with `room` for the line that closes a fence a piece
    of backticks or tildes can open (`spans.balanced`), and a piece whose closing line is longer
    (container markers before it: `   >   ~~~`) cut again with room for that line."""
    size = _rendered_size(src, span, unclosed)
    if size <= limit or room is not None and room >= limit - 1:
        return [span]
    if room is None:
        runs = FENCE_RUN.findall(src.text, span.start, span.end)
        room = 4 + max(map(len, runs)) if runs else 0  # a newline, an indentation, the marker
    else:
        room = max(room + 1, size - (span.end - span.start))
    return [
        piece
        for part in cut(src, measure, span, max(1, limit - room))
        for piece in _fit(src, measure, part, limit, unclosed, room)
    ]


def _rendered_size(src: SourceText, span: Span, unclosed: UnclosedFences) -> int:
    """Characters of `span`'s chunk text, with the line that closes a fence it opens."""
    return len(src.render(balanced(src, span, unclosed)))


def _start(src: SourceText, section: Section) -> int:
    """Offset where a section's text starts: its heading line, or its first block."""
    first = section.heading if section.heading is not None else section.blocks[0]
    return src.block_span(first).start


def sections(doc: ParsedDocument) -> list[Section]:
    """The document tree, flattened in document order (preamble first when it has content)."""
    found: list[Section] = []
    # (heading, index of its section; None for a heading above the body: `doc.implied`)
    stack: list[tuple[Heading, int | None]] = [(heading, None) for heading in doc.implied]
    heading_block: Block | None = None
    blocks: list[Block] = []

    def close() -> None:
        if heading_block is None and not blocks:
            return
        headings = tuple(h for h, _ in stack)
        parent = stack[-2][1] if heading_block is not None and len(stack) > 1 else None
        found.append(Section(len(found), heading_block, headings, parent, tuple(blocks)))

    for block in doc.blocks:
        if block.kind != "heading":
            blocks.append(block)
            continue
        close()
        while stack and stack[-1][0].level >= block.heading.level:
            stack.pop()
        stack.append((block.heading, len(found)))
        heading_block, blocks = block, []
    close()
    return found


def classify(
    doc: ParsedDocument, section: Section, first_content: bool, lines_with_links: list[int]
) -> str:
    """Seed 004 content type of a section from its own blocks, weighed in characters
    (`lines_with_links`: the sorted lines that hold a link other than an image).

    Each block weighs the characters of its lines, indentation and blank lines aside (characters,
    not lines: a prose paragraph is often one long line); link reference definitions weigh
    nothing; an admonition or content tab (`!!! note`, `=== "pip"`) weighs each of its lines by its
    kind (its fenced code as code, its text as prose), as the same content unindented would. In
    this order, the first that holds:
    code_example (code is more than half the weight), table_based (tables more than half),
    link_list (lists more than half, at least two list lines with a link, and a link on at
    least half of the lists' non-blank lines), introduction (the document's first section with
    content when it is the preamble or an H1, or a section titled Introduction or Overview),
    descriptive_text (paragraphs, quotes and lists more than half), default.
    """
    weight: dict[str, int] = defaultdict(int)
    list_lines = link_lines = 0
    for block in section.blocks:
        if block.kind == "reference":
            continue  # link reference definitions: where links point, not what a section holds
        lines = [line.strip() for line in doc.lines[block.start_line - 1 : block.end_line]]
        if block.kind == "admonition":
            for number, line in enumerate(lines, block.start_line):
                kind = _WEIGHED_AS.get(doc.line_kinds[number - 1], block.kind)
                weight[kind] += len(line)
        else:
            weight[block.kind] += sum(len(line) for line in lines)
        if block.kind in _LISTS:
            list_lines += sum(1 for line in lines if line)
            link_lines += bisect_right(lines_with_links, block.end_line) - bisect_left(
                lines_with_links, block.start_line
            )
    total = sum(weight.values())
    title = section.headings[-1].title.strip().lower() if section.heading is not None else ""
    if 2 * sum(weight[kind] for kind in _CODE) > total:
        return "code_example"
    if 2 * weight["table"] > total:
        return "table_based"
    lists = sum(weight[kind] for kind in _LISTS)
    if 2 * lists > total and link_lines >= 2 and 2 * link_lines >= list_lines:
        return "link_list"
    top = section.heading is None or section.headings[-1].level == 1
    if (first_content and top) or title in _INTRO_TITLES:
        return "introduction"
    if 2 * sum(weight[kind] for kind in _PROSE) > total:
        return "descriptive_text"
    return "default"


def cross_references(chunk_sections: list[tuple[int, Section]]) -> list[list[int]]:
    """Related chunk ordinals of each chunk; symmetric: j is in i's list iff i is in j's.

    Sections are related when they share a title but not a path, when one is the other's
    parent (seed 004's parent-path rule, made two-way), or when they are siblings (same parent,
    seed 004's stated intent). Same-title and sibling groups relate members at most BAND apart
    in the group. Related sections are linked through their first chunks ("lead" chunks); a
    section's later chunks are linked to its lead chunk.
    """
    lead: dict[int, int] = {}
    section_of: dict[int, Section] = {}
    related: list[set[int]] = [set() for _ in chunk_sections]
    for ordinal, (index, section) in enumerate(chunk_sections):
        if index in lead:
            related[ordinal].add(lead[index])
            related[lead[index]].add(ordinal)
        else:
            lead[index] = ordinal
            section_of[index] = section

    def link(a: int, b: int) -> None:
        related[lead[a]].add(lead[b])
        related[lead[b]].add(lead[a])

    by_title: dict[str, list[Section]] = defaultdict(list)
    by_parent: dict[int, list[Section]] = defaultdict(list)
    for section in section_of.values():
        if section.heading is not None and section.headings[-1].title:
            by_title[section.headings[-1].title].append(section)
        if section.parent is not None:
            by_parent[section.parent].append(section)
            if section.parent in lead:
                link(section.index, section.parent)
    for group in by_title.values():
        for i, a in enumerate(group):
            for b in group[i + 1 : i + 1 + BAND]:
                if a.path != b.path:
                    link(a.index, b.index)
    for group in by_parent.values():
        for i, a in enumerate(group):
            for b in group[i + 1 : i + 1 + BAND]:
                link(a.index, b.index)
    return [sorted(ordinals) for ordinals in related]
