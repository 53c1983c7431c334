"""Text for a terminal or a page: names read from an index or a listing, made safe to show."""

from __future__ import annotations

import sys


def printable(text: str) -> str:
    """`text` with what a terminal or a page would act on or hide written as Python escapes
    (`\\x1b`, `\\n`, `\\u202e`): a file name cannot move the cursor, start a line of its own
    or reverse the text after it."""
    return "".join(c if c.isprintable() or c == " " else ascii(c)[1:-1] for c in text)


def write_out(text: str, program: str) -> bool:
    """`text` on standard output, flushed; False, with one line on standard error saying why,
    where it could not be written (a full disk: `mdindex query ... > /dev/full` was an ENOSPC
    traceback). A reader that stopped early (`BrokenPipeError`) is left to the caller."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        print(f"{program}: cannot write to standard output: {exc.strerror or exc}", file=sys.stderr)
        return False
    return True
