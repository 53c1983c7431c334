"""Facts derived from a chunk's text and the kind of each of its lines.

`line_kinds` has one byte per line of `text.split("\\n")` (see chunking.blocks for the kinds).
"""

from __future__ import annotations

from chunking.blocks import FENCE_BODY, FENCE_MARK, LITERAL_KINDS

_FENCED = frozenset((FENCE_MARK, FENCE_BODY))


def canonical_chunk_text(text: str, line_kinds: bytes) -> str:
    """Seed 002 section 7: internal whitespace collapsed, except in code and table lines.

    Each line outside fenced code, indented code and tables becomes its words joined by one
    space; literal lines are kept byte for byte; line breaks are kept.
    """
    lines = text.split("\n")
    if len(lines) != len(line_kinds):
        raise ValueError(f"{len(line_kinds)} line kinds for {len(lines)} lines")
    return "\n".join(
        [
            line if kind in LITERAL_KINDS else " ".join(line.split())
            for line, kind in zip(lines, line_kinds, strict=True)
        ]
    )


def is_code(text: str, line_kinds: bytes) -> bool:
    """Seed 000 section 5: more than half of the chunk's non-blank lines belong to fenced blocks.

    A fenced block's lines are its ``` delimiter lines and the lines between them; blank lines
    count in neither total, so a heading plus one fenced block is code.
    """
    code = total = 0
    for line, kind in zip(text.split("\n"), line_kinds, strict=True):
        if line.strip():
            total += 1
            code += kind in _FENCED
    return code * 2 > total
