"""A static file server for a built index with CORS and byte ranges (seed 000 Deployment), and
optionally a question search."""

from __future__ import annotations

import io
import json
import os
import re
import socket
import string
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from email.message import Message
from email.utils import formatdate, parsedate_to_datetime
from functools import partial
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, BinaryIO
from urllib.parse import parse_qsl, urlsplit

from indexing.paths import is_chunk_file
from indexing.terminal import printable

_RANGE_SPEC = re.compile(r"([0-9]*)-([0-9]*)")  # RFC 9110 14.1.1's int-range or suffix-range
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
# RFC 3986 2.3: the characters whose percent-encoding is the same URI as the character itself.
UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
IDLE_TIMEOUT_S = 60
REQUEST_TIMEOUT_S = 10  # the most a request's head (its line and headers) takes to come in
# An answer's first seconds, after which the client must take it at MIN_ANSWER_RATE on average.
ANSWER_GRACE_S = 60
MIN_ANSWER_RATE = 64 * 1024  # bytes a second
MAX_CONNECTIONS = 256  # served at once, each by its thread; the rest wait in the kernel's backlog
LOGGED_CHARS = 200  # of each request line (or other client text) the log writes
TLS_HANDSHAKE = b"\x16"  # the first byte of a TLS record carrying a ClientHello
ALLOWED_METHODS = "GET, HEAD, OPTIONS"
SEARCH_PATH = "/_search"  # no index file's URL: a topic is never a folder named with "_"
# The parameters SEARCH_PATH takes; any other is a 400 naming it (a misspelt `qestion=` or
# `topik=` was ignored: the answer was another question's, or all topics').
SEARCH_PARAMETERS = ("q", "n", "per_page", "topic", "under", "all_copies")
# The cache-buster jQuery's `$.ajax({cache: false})` and many fetch wrappers add to a GET
# (`_=1700000000000`): taken and ignored (it was a 400, every such client's search failing).
CACHE_BUSTER = "_"
# The build's own folder (its report, run history, manifest, lock): no reader of the index needs
# it, and its report names the build's host, pid, paths and settings. Never served (404).
BUILD_FOLDER = "_reindex"


class SearchError(Exception):
    """A question the search cannot answer: `status` (400 for its parameters, 404 for a topic
    the index lacks, 500 for a damaged index) and a message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


Search = Callable[[str], dict[str, Any]]  # a request's query string -> the JSON-ready answer


def unknown_search_parameter(query: str) -> str | None:
    """The first parameter of a `SEARCH_PATH` query string that is none of `SEARCH_PARAMETERS`
    (its name decoded, bytes that are not UTF-8 replaced), or None."""
    for name, _ in parse_qsl(query, keep_blank_values=True, errors="replace"):
        if name not in SEARCH_PARAMETERS and name != CACHE_BUSTER:
            return name
    return None


def ascii_target(target: str) -> str:
    """A request target as `http.server` has it (its bytes read as Latin-1) with each byte
    above 0x7F percent-encoded, as RFC 3986 has a client send it: curl sends what it is given,
    `?q=café` or a path naming `指南` as raw UTF-8, which was read as `cafÃ©` (a question
    answered, the wrong one) and a path no file has (404). A byte that is no UTF-8 is then
    refused as its `%XX` is."""
    return "".join(c if c < "\x80" else f"%{ord(c):02X}" for c in target)


def origin_form(target: str) -> str:
    """A request target in origin-form (`/path?query`): one in absolute-form
    (`http://127.0.0.1:8000/path?query`, which RFC 9112 3.2.2 has a server accept; a proxy and
    some clients send it) without its scheme and authority (this server routes by neither, nor
    by Host, which the authority overrides), its path begun by one `/` as the stdlib has an
    origin-form's (`//x` is `/x`). It was 404 (a path naming a folder `http:`), and
    `http://[/x` no answer at all (a traceback). Any other target (`/…`, `*`, another scheme's
    URI) as it is; ValueError for an `http` or `https` one naming no host, which RFC 9110 4.2.1
    has a recipient reject, or one `urlsplit` cannot read."""
    if target.startswith("/"):
        return target
    url = urlsplit(target)
    if url.scheme not in ("http", "https"):
        return target
    if not url.hostname:
        raise ValueError(f"{url.scheme}:// naming no host")
    return "/" + url.path.lstrip("/") + (f"?{url.query}" if url.query else "")


def unreserved_decoded(path: str) -> str:
    """`path` with each percent-encoded unreserved character (`UNRESERVED`) decoded, which RFC
    3986 6.2.2.2 makes the same URI (`/%5Fsearch` is `/_search`); every other escape (`%2F`,
    `%25`, `%00`) is kept, and nothing is decoded twice (`/%255F` stays)."""

    def decoded(escape: re.Match[str]) -> str:
        char = chr(int(escape[1], 16))
        return char if char in UNRESERVED else escape[0]

    return _ESCAPE.sub(decoded, path)


def single_range(header: str) -> tuple[str, str] | None:
    """The first and last positions (each "" where not given) of the one range a `Range` header
    asks, or None for a header that asks several or is no `bytes` ranges-specifier (RFC 9110
    14.1.1, 14.2). The unit is compared in any case (`BYTES=`, `Bytes=`: they got the whole
    file); optional whitespace may come around the range set's commas, never around `=`; empty
    list elements are skipped (RFC 9110 5.6.1: `bytes=0-99,` asks one range)."""
    unit, equals, ranges = header.strip(" \t").partition("=")
    if not equals or unit.lower() != "bytes" or ranges[:1] in (" ", "\t"):
        return None
    specs = [spec for spec in (each.strip(" \t") for each in ranges.split(",")) if spec]
    match = _RANGE_SPEC.fullmatch(specs[0]) if len(specs) == 1 else None
    return (match[1], match[2]) if match else None


def parse_range(header: str, size: int) -> tuple[int, int] | None:
    """The inclusive byte span a single `bytes=` range asks of a `size`-byte file.

    Returns None for a header this server ignores (not a single valid byte range
    (`single_range`), `bytes=5-2` included, whose last byte comes before its first: RFC 9110
    14.2 ignores an invalid range; the whole file is sent); raises ValueError when the range
    cannot be satisfied (416).
    """
    first, last = single_range(header) or ("", "")
    if first == last == "" or (first != "" and last != "" and int(last) < int(first)):
        return None
    if first == "":
        length = int(last)
        if length == 0 or size == 0:
            raise ValueError("empty suffix range")
        return max(0, size - length), size - 1
    start = int(first)
    end = size - 1 if last == "" else min(int(last), size - 1)
    if start >= size:
        raise ValueError(f"range {header!r} outside a {size}-byte file")
    return start, end


@dataclass(frozen=True)
class Validators:
    """A file's validators: a strong entity tag (its modification time in ns and its size) and
    its Last-Modified date."""

    etag: str
    last_modified: str

    @classmethod
    def of(cls, stat: os.stat_result) -> Validators:
        """The validators of the file `stat` describes."""
        etag = f'"{stat.st_mtime_ns:x}-{stat.st_size:x}"'
        return cls(etag=etag, last_modified=formatdate(stat.st_mtime, usegmt=True))


def not_modified(headers: Message, validators: Validators, mtime: float) -> bool:
    """Whether a GET or HEAD with these headers gets 304 (RFC 9110 13.2.2): If-None-Match when
    present (weak comparison, `*` matches), else If-Modified-Since not before `mtime` (seconds)."""
    match = headers.get("If-None-Match")
    if match is not None:
        tags = {tag.strip().removeprefix("W/") for tag in match.split(",")}
        return "*" in tags or validators.etag in tags
    since = headers.get("If-Modified-Since")
    if since is None:
        return False
    try:
        date = parsedate_to_datetime(since)
    except (TypeError, ValueError, IndexError, OverflowError):
        return False  # not an HTTP-date: ignored
    if date.tzinfo is None:  # "-0000": UTC
        date = date.replace(tzinfo=UTC)
    return int(mtime) <= date.timestamp()


def range_applies(headers: Message, validators: Validators) -> bool:
    """Whether a Range is answered (RFC 9110 13.1.5): no If-Range, or one that exactly matches the
    file's entity tag or Last-Modified; else the whole file is sent (the range asked of a file
    that has since been replaced would splice old and new bytes)."""
    condition = headers.get("If-Range")
    return condition is None or condition.strip() in (validators.etag, validators.last_modified)


@dataclass
class Span:
    """At most `left` bytes of an open file from its position, read in the pieces asked: the body
    of a 206, streamed instead of held in memory."""

    handle: BinaryIO
    left: int

    def read(self, size: int = -1) -> bytes:
        """Up to `size` bytes (all that is left when negative); b"" at the span's end."""
        data = self.handle.read(self.left if size < 0 else min(size, self.left))
        self.left -= len(data)
        return data

    def close(self) -> None:
        """Close the file."""
        self.handle.close()


class HeadReader(io.RawIOBase):
    """A connection's reading side, under the handler's buffered `rfile`: while `deadline` (a
    `time.monotonic()` time) is set, each read waits only until then, and one after it raises
    TimeoutError, so a request's head must come in whole by then. With a timeout for each read,
    a client sending a byte every 9 s held one of the server's places for ever."""

    def __init__(self, connection: socket.socket) -> None:
        super().__init__()
        self.connection = connection
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        """Bytes received into `buffer`, waiting at most until `deadline` where one is set."""
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("timed out")  # as the socket's own timeout says it
            self.connection.settimeout(left)
        return self.connection.recv_into(buffer)


class AnswerTimedOut(Exception):
    """A client that did not take its answer in time (`AnswerWriter`)."""


class AnswerWriter(io.BufferedIOBase):
    """A connection's writing side, the handler's `wfile`: the client must take the answer's
    bytes at `rate` bytes a second on average after its first `grace` seconds (its n-th byte
    within `grace + n / rate` seconds of the first write), and no send waits over `idle`
    seconds; else AnswerTimedOut. With only a timeout for each write (60 s for each 64 KiB), a
    client that took 64 KiB every 59 s held one of the server's places for as long as the file
    lasted (a 400 MB shard: four days), and a few such clients every place."""

    def __init__(self, connection: socket.socket, grace: float, rate: float, idle: float) -> None:
        super().__init__()
        self.connection = connection
        self.grace, self.rate, self.idle = grace, rate, idle
        self.started: float | None = None  # the first write's `time.monotonic()`
        self.sent = 0

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.connection.fileno()

    def write(self, data) -> int:
        """Send all of `data` (bytes-like) within the answer's bounds; AnswerTimedOut else."""
        with memoryview(data) as view, view.cast("B") as flat:
            if self.started is None:
                self.started = time.monotonic()
            deadline = self.started + self.grace + (self.sent + len(flat)) / self.rate
            done = 0
            while done < len(flat):
                wait = min(deadline - time.monotonic(), self.idle)
                try:
                    if wait <= 0:
                        raise TimeoutError
                    self.connection.settimeout(wait)
                    sent = self.connection.send(flat[done:])
                except TimeoutError:
                    took = time.monotonic() - self.started
                    raise AnswerTimedOut(
                        f"the client took {self.sent:,} bytes in {took:.0f} s (an answer goes "
                        f"at {self.rate / 1024:g} KiB/s or more after its first {self.grace:g} "
                        f"s, no send waiting over {self.idle:g} s)"
                    ) from None
                done += sent
                self.sent += sent
            return len(flat)


class IndexRequestHandler(SimpleHTTPRequestHandler):
    """A static file handler with CORS headers, OPTIONS preflight, validators (ETag,
    Last-Modified, 304) and HTTP Range (206, If-Range); every directory is 404; errors in JSON;
    405 for a method that would change something. With `search`, a GET or HEAD of `SEARCH_PATH`
    is answered by it, in JSON."""

    server_version = "mdindex"  # the Server header; the stdlib's named Python's exact version
    # A request line refused before its version is known (`HTTP/9.9`, `HTTP/x`, no path) is
    # answered with a status line and headers: with the stdlib's "HTTP/0.9" it got a bare body,
    # no status line (`parse_request` refuses an HTTP/0.9 request itself).
    default_request_version = "HTTP/1.0"
    # A client's socket stays idle at most this long (a request sent half, a download not read):
    # without it each such client held a thread for ever (50 half requests: 50 more threads).
    timeout = IDLE_TIMEOUT_S
    # Its request line and headers must come in whole within less, from the first wait for them
    # (`HeadReader`): a connection that sends nothing (a scanner, a browser's unused preconnect)
    # held its place among `max_connections` for 60 s, and one that sends a byte at a time for
    # ever.
    request_timeout = REQUEST_TIMEOUT_S
    # The answer must then be taken at `answer_rate` bytes a second after its first
    # `answer_grace` seconds (`AnswerWriter`), each send waiting at most `timeout`.
    answer_grace = ANSWER_GRACE_S
    answer_rate = MIN_ANSWER_RATE
    extensions_map = {
        **SimpleHTTPRequestHandler.extensions_map,
        ".md": "text/markdown; charset=utf-8",
        ".json": "application/json",
        ".parquet": "application/vnd.apache.parquet",
    }

    def __init__(self, *args, search: Search | None = None, **kwargs) -> None:
        self.search = search  # before the base class answers the request
        super().__init__(*args, **kwargs)

    def setup(self) -> None:
        """The connection's streams; `rfile` reads through a `HeadReader` (`head`), `wfile`
        is an `AnswerWriter`."""
        super().setup()
        self.rfile.close()  # the stdlib's, which waits `timeout` for each read
        self.head = HeadReader(self.connection)
        self.rfile = io.BufferedReader(self.head)
        self.wfile = AnswerWriter(
            self.connection, self.answer_grace, self.answer_rate, self.timeout
        )

    def version_string(self) -> str:
        """The Server header: `mdindex`, not `SimpleHTTP/0.6 Python/3.11.7`."""
        return self.server_version

    def handle_one_request(self) -> None:
        """One request; a TLS handshake (`https://` to this plain port) is answered at once, 400
        in plain HTTP, with a log line saying so. A ClientHello holding no newline byte waited
        for the idle timeout, the client hanging for 60 s; one holding one was a 400 whose log
        line held its binary bytes. The head must be in within `request_timeout` (else the
        stdlib's "Request timed out" log line, and the connection closed); the answer is sent
        within `AnswerWriter`'s bounds, else the connection is reset (its unsent bytes dropped,
        not left to the kernel to send) with one log line, `Answer timed out: …`."""
        self.head.deadline = time.monotonic() + self.request_timeout
        try:
            first = self.rfile.peek(1)[:1]
        except TimeoutError as error:
            self.log_error("Request timed out: %r", error)
            self.close_connection = True
            return
        try:
            if first != TLS_HANDSHAKE:
                super().handle_one_request()
                return
            self.rfile.read1()  # the hello: closing with it unread would reset the connection
            self.command, self.requestline = None, ""
            self.request_version = self.default_request_version
            # Not TLS: curl says "wrong version number", a browser ERR_SSL_PROTOCOL_ERROR.
            self.send_error(
                HTTPStatus.BAD_REQUEST, "a TLS handshake (https://) to a plain HTTP server"
            )
        except AnswerTimedOut as error:
            self.log_error("Answer timed out: %s", str(error))
            self.close_connection = True
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def parse_request(self) -> bool:
        """The request line and headers parsed (False once an error is sent); an HTTP/0.9 one
        (`GET /path`, no version) is 505 at once: it got a bare body, no status line, once the
        client sent a blank line, and until then nothing."""
        line = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        if len(line.split()) != 2:
            parsed = super().parse_request()
            self.head.deadline = None  # the head is in: the answer's pace
            self.connection.settimeout(self.timeout)
            return parsed and self._one_host()
        self.command, self.requestline = None, line
        self.request_version, self.close_connection = self.default_request_version, True
        self.send_error(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, "HTTP/0.9 is not supported")
        return False

    def _one_host(self) -> bool:
        """Whether the request has the Host header HTTP requires (RFC 9112 3.2: one, in an
        HTTP/1.1 request; never two), else a 400 sent: such a request was answered as any."""
        hosts = self.headers.get_all("Host", [])
        if len(hosts) == 1 or (not hosts and self.request_version == "HTTP/1.0"):
            return True
        self.close_connection = True
        self.send_error(HTTPStatus.BAD_REQUEST, f"{len(hosts)} Host headers: HTTP asks for one")
        return False

    def do_GET(self) -> None:
        """A file, or with `search` the answer to a question at `SEARCH_PATH`."""
        self._file_or_answer(body=True)

    def do_HEAD(self) -> None:
        """GET's status and headers without its body, at `SEARCH_PATH` too (it was 404 there
        while GET answered: a monitor's `curl -I` of the search failed)."""
        self._file_or_answer(body=False)

    def _not_allowed(self) -> None:
        """405 with `Allow` for a method HTTP defines that this read-only server does not take (a
        search form's POST): it was 501, "not implemented", as for a method HTTP does not know."""
        self.send_error(HTTPStatus.METHOD_NOT_ALLOWED)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_CONNECT = do_TRACE = _not_allowed

    def _file_or_answer(self, body: bool) -> None:
        """The answer to a GET (`body`) or HEAD: a file, or the search's JSON at `SEARCH_PATH`
        (also spelt with its unreserved characters percent-encoded, `unreserved_decoded`); the
        path's raw bytes above 0x7F taken as their percent-encoding (`ascii_target`), a target in
        absolute-form as its origin-form (`origin_form`; 400 for one that is no URI)."""
        try:
            self.path = origin_form(ascii_target(self.path))
        except ValueError as error:
            self.send_error(HTTPStatus.BAD_REQUEST, f"not a request target: {error}")
            return
        url = urlsplit(self.path)
        if self.search is None or unreserved_decoded(url.path) != SEARCH_PATH:
            if body:
                super().do_GET()
            else:
                super().do_HEAD()
            return
        unknown = unknown_search_parameter(url.query)
        if unknown is not None:
            known = ", ".join(SEARCH_PARAMETERS)
            said = f"{loggable(unknown)!r}: no such parameter ({SEARCH_PATH} takes {known})"
            self.send_error(HTTPStatus.BAD_REQUEST, said)
            return
        try:
            answer = self.search(url.query)
        except SearchError as error:
            self.send_error(error.status, str(error))
            return
        data = json.dumps(answer, ensure_ascii=False).encode() + b"\n"
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")  # the index may be rebuilt meanwhile
        self.end_headers()
        if body:
            self.wfile.write(data)

    def end_headers(self) -> None:
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Access-Control-Allow-Methods", ALLOWED_METHODS)
        self.send_header(
            "Access-Control-Allow-Headers", "Range, If-Range, If-None-Match, If-Modified-Since"
        )
        self.send_header(
            "Access-Control-Expose-Headers", "Content-Range, Content-Length, ETag, Last-Modified"
        )
        self.send_header("Accept-Ranges", "bytes")
        super().end_headers()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """An error answer whose body is JSON, `{"status": 404, "error": "File not found"}`, as
        the index's own files are: a web client's `response.json()` of one was a SyntaxError on
        the HTML page `http.server` writes. No body for a HEAD, a 204 or a 304. The status line
        says the code's own phrase (`Bad Request`), not the message: the stdlib wrote the message
        there, in Latin-1, so one naming a topic `指南` raised UnicodeEncodeError: no answer at
        all, a traceback on stderr."""
        short, _ = self.responses.get(code, ("???", "???"))
        message = short if message is None else message
        self.log_error("code %d, message %s", code, message)
        self.send_response(code, short)
        self.send_header("Connection", "close")
        if code == HTTPStatus.METHOD_NOT_ALLOWED:
            self.send_header("Allow", ALLOWED_METHODS)
        body = b""
        if code >= 200 and code not in (HTTPStatus.NO_CONTENT, HTTPStatus.NOT_MODIFIED):
            body = json.dumps({"status": code, "error": message}).encode() + b"\n"
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def do_OPTIONS(self) -> None:
        """CORS preflight: no body, the allow headers only."""
        self.send_response(HTTPStatus.NO_CONTENT)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def send_head(self) -> Span | BinaryIO | None:
        """The headers of a GET or HEAD, and the body's file (None when there is none to send).

        404 for anything that is not a regular file inside the served directory (symbolic links
        resolved; a directory, a NUL byte in the path, a file that cannot be opened or went
        away since it was listed) or is hidden (`_hidden`: a dot-named folder or file, the
        build's `_reindex/`); 304 when the request's validators still match; 206 for a single
        byte range (unless an If-Range no longer matches: 200), 416 for one past the end.
        """
        path = self.translate_path(self.path)
        handle = _open_inside(self.directory, path)
        if handle is None:
            self.send_error(HTTPStatus.NOT_FOUND, "File not found")
            return None
        try:
            return self._answer(handle, path)
        except BaseException:
            handle.close()
            raise

    def _answer(self, handle: BinaryIO, path: str) -> Span | BinaryIO | None:
        """send_head's answer for an opened regular file."""
        stat = os.fstat(handle.fileno())
        validators = Validators.of(stat)
        if not_modified(self.headers, validators, stat.st_mtime):
            self._send_validated(HTTPStatus.NOT_MODIFIED, validators)
            self.end_headers()
            handle.close()
            return None
        header, span = self.headers.get("Range"), None
        if header is not None and range_applies(self.headers, validators):
            try:
                span = parse_range(header, stat.st_size)
            except ValueError:
                self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                self.send_header("Content-Range", f"bytes */{stat.st_size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                handle.close()
                return None
        if span is None:
            self._send_validated(HTTPStatus.OK, validators)
            self.send_header("Content-Type", self.guess_type(path))
            self.send_header("Content-Length", str(stat.st_size))
            self.end_headers()
            return handle
        start, end = span
        handle.seek(start)
        self._send_validated(HTTPStatus.PARTIAL_CONTENT, validators)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Content-Range", f"bytes {start}-{end}/{stat.st_size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        return Span(handle, end - start + 1)

    def _send_validated(self, status: HTTPStatus, validators: Validators) -> None:
        """The status line, the file's validators and `Cache-Control: no-cache` (the same on 200,
        206 and 304): a cache asks again before each use, a 304 while the file is unchanged.
        Without it a browser kept a file fresh for a tenth of its age since Last-Modified
        (RFC 9111 4.2.2's heuristic): an index.json built 10 days before a rebuild was read from
        the cache for a day after it, its chunk files deleted by then (404)."""
        self.send_response(status)
        self.send_header("ETag", validators.etag)
        self.send_header("Last-Modified", validators.last_modified)
        self.send_header("Cache-Control", "no-cache")

    def log_message(self, format: str, *args) -> None:
        """A log line on standard error (none when the server is `quiet`), each text in it cut
        to its first `LOGGED_CHARS` characters and escaped (`loggable`): a 64 KB request line was
        written whole, on every request. The stdlib's line, without its own escaping (which
        doubles a backslash: each escape `printable` writes had two)."""
        if getattr(self.server, "quiet", False):
            return
        message = format % tuple(loggable(arg) if isinstance(arg, str) else arg for arg in args)
        when = self.log_date_time_string()
        sys.stderr.write(f"{self.address_string()} - - [{when}] {message}\n")


def loggable(text: str) -> str:
    """`text` as a log line shows it: its first `LOGGED_CHARS` characters, and "…" where it was
    longer, control characters escaped (`printable`)."""
    cut = text[:LOGGED_CHARS]
    return printable(cut) + ("…" if len(text) > LOGGED_CHARS else "")


def _inside(directory: str, path: str) -> bool:
    """Whether `path`, every symbolic link resolved, is `directory` or lies under it."""
    root, real = os.path.realpath(directory), os.path.realpath(path)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _hidden(directory: str, path: str) -> bool:
    """Whether `path`, as asked or with its links resolved, lies in a folder below `directory`
    whose name starts with "." (`.git`, `.venv`, the build's `.embedding-cache`) or is
    `BUILD_FOLDER` (`_reindex`, at any depth: a served folder may hold several outputs), or is
    itself a dot-named file other than a chunk file (`.env`, `.npmrc` at the root of an in-place
    build, a build's `.tmp-…` files): no index file is ever there (a build reads no source in a
    hidden folder nor in one named with "_", and links no file but its chunk files and
    index.json files), while a chunk file's name may start with "." (tldr-pages' `..md` has
    chunk files named `.-…-0.md`)."""
    asked = os.path.relpath(path, directory)
    real = os.path.relpath(os.path.realpath(path), os.path.realpath(directory))
    for each in (asked, real):
        *folders, name = each.split(os.sep)
        if any(folder.startswith(".") or folder == BUILD_FOLDER for folder in folders):
            return True
        if name.startswith(".") and not is_chunk_file("/".join((*folders, name))):
            return True
    return False


def _open_inside(directory: str, path: str) -> BinaryIO | None:
    """`path` opened to read when it is a regular file inside `directory` (symbolic links
    resolved) and not hidden (`_hidden`), else None: a directory, a path no file can have (a
    NUL byte; a lone surrogate, which `%ED%A0%80` decodes to), one outside or hidden, one that
    cannot be opened (no permission; deleted or replaced by a directory since it was listed)."""
    try:
        if not _inside(directory, path) or _hidden(directory, path) or not os.path.isfile(path):
            return None
        return open(path, "rb")  # the handler closes it once the body is sent
    except (OSError, ValueError):  # ValueError: the NUL byte, the surrogate
        return None


class IndexServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer on the address family of its host (IPv4 or IPv6), as
    `python -m http.server` picks it; `quiet` turns the request log off. It serves at most
    `max_connections` connections at once, one thread each: past them it accepts none until
    one closes, the kernel holding the rest (`request_queue_size`). Each connection had its
    thread, idle for up to 60 s: 1,000 clients that connect and send nothing, 1,000 threads."""

    max_connections = MAX_CONNECTIONS

    # Connections the kernel holds until the server accepts them: socketserver's 5 dropped the
    # rest of a burst (a page fetching its chunk files, a few users at once, one connection per
    # request), whose clients tried again after 1 s, then 3 s (20 at once: 11 took over 1 s).
    request_queue_size = socket.SOMAXCONN

    def __init__(self, host: str, port: int, handler, quiet: bool = False) -> None:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]
        self.address_family = family
        self.quiet = quiet
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._stopping = threading.Event()
        self._full = False  # waiting for a free place since the last connection that found one
        super().__init__(address, handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        """The next connection, accepted once fewer than `max_connections` are served: until
        then it waits, the kernel holding the connection, with one log line as it starts waiting
        and none again until a connection finds a free place (a flood writes one line). Waiting
        here, before a request is taken, a SIGTERM or Ctrl-C stops the server (`process_request`
        says what one there did). OSError once `shutdown` is called while it waits."""
        if self._slots.acquire(blocking=False):
            self._full = False
        else:
            if not self._full and not self.quiet:
                print(
                    f"mdindex serve: {self.max_connections} connections open, the most it serves "
                    "at once: the next waits until one closes",
                    file=sys.stderr,
                    flush=True,
                )
            self._full = True
            while not self._slots.acquire(timeout=0.5):
                if self._stopping.is_set():
                    raise OSError("the server is stopping")  # socketserver skips the accept
        try:
            return super().get_request()
        except BaseException:
            self._slots.release()
            raise

    def process_request(self, request, client_address) -> None:
        """Serve the connection in a thread of its own (`process_request_thread`), which frees
        its place; an error (a thread that could not start) frees it here. A Ctrl-C or SIGTERM
        landing here, in `Thread.start`, does not: the thread may have served the connection and
        freed it already, and the second release raised ValueError, which socketserver took for
        the request's error, and the server went on serving, its stop lost."""
        try:
            super().process_request(request, client_address)
        except Exception:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        """Serve one connection, then free its place."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def shutdown(self) -> None:
        """Stop `serve_forever`, also while it waits for a connection to close."""
        self._stopping.set()
        super().shutdown()

    def handle_error(self, request, client_address) -> None:
        """A client that went away before its answer was sent (a cancelled download, a reader
        that had the bytes it wanted) is not reported; any other error is, with its traceback."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def checked_port(port: object) -> int:
    """`port` when it is a TCP port (0 picks a free one); ValueError for anything else, a port
    outside 0-65535 included (`getaddrinfo` wraps one above it: 99999 is 34463)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an int from 0 to 65535, got {port!r}")
    return port


def make_server(
    directory: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    quiet: bool = False,
    search: Search | None = None,
):
    """An IndexServer serving `directory` (call serve_forever; port 0 picks a free one), and
    with `search` answering questions at `SEARCH_PATH`. ValueError for a port that is none
    (`checked_port`)."""
    checked_port(port)
    if not os.path.isdir(directory):
        raise NotADirectoryError(f"not a directory: {directory}")
    handler = partial(IndexRequestHandler, directory=directory, search=search)
    return IndexServer(host, port, handler, quiet)
