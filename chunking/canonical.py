"""Facts derived from a chunk's text and the kind of each of its lines.

`line_kinds` has one byte per line of `text.split("\\n")` (see chunking.blocks for the kinds).
"""

from __future__ import annotations

import re

from chunking.blocks import FENCE_BODY, LITERAL_KINDS

_LITERAL_RUN = re.compile(b"[" + bytes(sorted(LITERAL_KINDS)) + b"]+")
_BLANKS = re.compile(r"[^\S\n]+")  # whitespace other than line breaks
_EDGES = re.compile(r" *\n *")


def canonical_chunk_text(text: str, line_kinds: bytes) -> str:
    """Seed 002 section 7: internal whitespace collapsed, except in code and table lines.

    Each line outside fenced code, indented code and tables becomes its words joined by one
    space; literal lines are kept byte for byte; line breaks are kept.
    """
    lines = text.split("\n")
    if len(lines) != len(line_kinds):
        raise ValueError(f"{len(line_kinds)} line kinds for {len(lines)} lines")
    parts, done = [], 0
    for run in _LITERAL_RUN.finditer(line_kinds):
        parts.append(_collapse(lines[done : run.start()]))
        parts.append(lines[run.start() : run.end()])
        done = run.end()
    parts.append(_collapse(lines[done:]))
    return "\n".join(line for part in parts for line in part)


def _collapse(lines: list[str]) -> list[str]:
    if not lines:
        return []
    joined = _EDGES.sub("\n", _BLANKS.sub(" ", "\n".join(lines)))
    return joined.strip(" ").split("\n")


def is_code(line_kinds: bytes) -> bool:
    """Seed 000 section 5: more than half of the chunk's lines are inside fenced code blocks.

    Every line of the chunk counts, blank ones too; the ``` fence lines count as lines but not
    as code (one fenced block of n lines is n / (n + 2) code).
    """
    return line_kinds.count(FENCE_BODY) * 2 > len(line_kinds)
