"""Facts derived from a chunk's text and the kind of each of its lines.

`line_kinds` has one byte per line of `text.split("\\n")` (see chunking.blocks for the kinds).
"""

from __future__ import annotations

from chunking.blocks import FENCE_BODY, LITERAL_KINDS


def canonical_chunk_text(text: str, line_kinds: bytes) -> str:
    """Seed 002 section 7: internal whitespace collapsed, except in code and table lines.

    Lines outside fenced code, indented code and tables become their words joined by one space;
    literal lines are kept byte for byte. Line breaks are kept.
    """
    lines = text.split("\n")
    return "\n".join(
        line if kind in LITERAL_KINDS else " ".join(line.split())
        for line, kind in zip(lines, line_kinds, strict=True)
    )


def is_code(text: str, line_kinds: bytes) -> bool:
    """Seed 000 section 5: more than half of the chunk's lines are inside fenced code blocks.

    Blank lines are not counted at all; the ``` fence lines themselves are counted as lines but
    not as code (a chunk that is one fenced block of n code lines has n / (n + 2) code lines).
    """
    lines = text.split("\n")
    total = code = 0
    for line, kind in zip(lines, line_kinds, strict=True):
        if line.strip():
            total += 1
            code += kind == FENCE_BODY
    return total > 0 and code * 2 > total
