"""Text for a terminal or a page: names read from an index or a listing, made safe to show."""

from __future__ import annotations


def printable(text: str) -> str:
    """`text` with what a terminal or a page would act on or hide written as Python escapes
    (`\\x1b`, `\\n`, `\\u202e`): a file name cannot move the cursor, start a line of its own
    or reverse the text after it."""
    return "".join(c if c.isprintable() or c == " " else ascii(c)[1:-1] for c in text)
