"""Text for a terminal or a page: names read from an index or a listing, made safe to show."""

from __future__ import annotations

import codecs
import contextlib
import json
import sys


def printable(text: str) -> str:
    """`text` with what a terminal or a page would act on or hide written as Python escapes
    (`\\x1b`, `\\n`, `\\u202e`): a file name cannot move the cursor, start a line of its own
    or reverse the text after it."""
    return "".join(c if c.isprintable() or c == " " else ascii(c)[1:-1] for c in text)


def counted(count: int, one: str, many: str | None = None) -> str:
    """`count` and the noun it takes: "1 chunk", "2 chunks", "0 matches"."""
    return f"{count} {one if count == 1 else many or one + 's'}"


def write_out(text: str, program: str) -> bool:
    """`text` on standard output, flushed; False, with one line on standard error saying why,
    where it could not be written (a full disk: `mdindex query ... > /dev/full` was an ENOSPC
    traceback; so is one on standard error too, said nowhere). A reader that stopped early
    (`BrokenPipeError`) is left to the caller."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        # standard error on the same full disk (`>> build.log 2>&1`): nowhere to say it, and a
        # build's exit code was 1 where its report said 0
        why = exc.strerror or exc
        with contextlib.suppress(OSError):
            print(f"{program}: cannot write to standard output: {why}", file=sys.stderr)
        return False
    return True


def names_no_place(error: BaseException) -> bool:
    """Whether a command's error must have its root put before it: an HTTP, S3 or FTP client's
    error names only the host, or nothing; a request that stalled and a lost connection name
    nothing; nor does a store's refusal (s3fs's "Forbidden", a PermissionError without the file
    name a local one has)."""
    import aiohttp  # the clients' errors: imported for the commands that read a store alone
    from botocore.exceptions import BotoCoreError
    from fsspec.exceptions import FSTimeoutError

    clients = (aiohttp.ClientError, BotoCoreError, FSTimeoutError, ConnectionError)
    refused = isinstance(error, PermissionError) and error.filename is None
    return isinstance(error, clients) or refused


def escape_what_stdout_cannot_encode() -> None:
    """Standard output writes each character its encoding cannot hold (`PYTHONIOENCODING=ascii`,
    a Latin-1 locale: `mdindex chunk` of a Japanese page, `mdindex query` of a topic named `tutorial
    é`, a build's summary naming `out ü`) as JSON's escape (`\\u00e9`): text stays readable and
    JSON Lines stay valid JSON of the same strings. It was a UnicodeEncodeError traceback, exit 1
    (a build's after all its work)."""
    codecs.register_error(_JSON_ESCAPE, _json_escape)
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors=_JSON_ESCAPE)


_JSON_ESCAPE = "mdindex.json_escape"


def _json_escape(error: UnicodeError) -> tuple[str, int]:
    """The codec error handler of `escape_what_stdout_cannot_encode`."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    return json.dumps(error.object[error.start : error.end])[1:-1], error.end
