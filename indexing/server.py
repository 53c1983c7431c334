"""A static file server for a built index with CORS and byte ranges (seed 000 Deployment)."""

from __future__ import annotations

import io
import os
import re
from functools import partial
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def parse_range(header: str, size: int) -> tuple[int, int] | None:
    """The inclusive byte span a single `bytes=` range asks of a `size`-byte file.

    Returns None for a header this server ignores (not a single byte range: the whole file is
    sent); raises ValueError when the range cannot be satisfied (416).
    """
    match = _RANGE.match(header.strip())
    if not match or match.group(1) == match.group(2) == "":
        return None
    first, last = match.group(1), match.group(2)
    if first == "":
        length = int(last)
        if length == 0 or size == 0:
            raise ValueError("empty suffix range")
        return max(0, size - length), size - 1
    start = int(first)
    end = size - 1 if last == "" else min(int(last), size - 1)
    if start >= size or (last != "" and int(last) < start):
        raise ValueError(f"range {header!r} outside a {size}-byte file")
    return start, end


class IndexRequestHandler(SimpleHTTPRequestHandler):
    """SimpleHTTPRequestHandler plus CORS headers, OPTIONS preflight and HTTP Range (206)."""

    extensions_map = {
        **SimpleHTTPRequestHandler.extensions_map,
        ".md": "text/markdown; charset=utf-8",
        ".json": "application/json",
        ".parquet": "application/vnd.apache.parquet",
    }

    def end_headers(self) -> None:
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", "Range, If-None-Match, If-Modified-Since")
        self.send_header("Access-Control-Expose-Headers", "Content-Range, Content-Length, ETag")
        self.send_header("Accept-Ranges", "bytes")
        super().end_headers()

    def do_OPTIONS(self) -> None:
        """CORS preflight: no body, the allow headers only."""
        self.send_response(HTTPStatus.NO_CONTENT)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def list_directory(self, path):
        """No directory listings (they would show `.embedding-cache/` and every file)."""
        self.send_error(HTTPStatus.NOT_FOUND, "directory listings are off")

    def send_head(self):
        """Like the base class, but answers a single byte range with 206 Partial Content, and
        404 for anything that resolves (through symbolic links) outside the served directory."""
        header = self.headers.get("Range")
        path = self.translate_path(self.path)
        if not _inside(self.directory, path):
            self.send_error(HTTPStatus.NOT_FOUND, "outside the served directory")
            return None
        if header is None or not os.path.isfile(path):
            return super().send_head()
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            try:
                span = parse_range(header, size)
            except ValueError:
                self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            if span is None:
                return super().send_head()
            start, end = span
            handle.seek(start)
            body = handle.read(end - start + 1)
        self.send_response(HTTPStatus.PARTIAL_CONTENT)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return io.BytesIO(body)

    def log_message(self, format: str, *args) -> None:
        if not getattr(self.server, "quiet", False):
            super().log_message(format, *args)


def _inside(directory: str, path: str) -> bool:
    """Whether `path`, every symbolic link resolved, is `directory` or lies under it."""
    root, real = os.path.realpath(directory), os.path.realpath(path)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def make_server(directory: str, host: str = "127.0.0.1", port: int = 8000, quiet: bool = False):
    """A ThreadingHTTPServer serving `directory` (call serve_forever; port 0 picks a free one)."""
    if not os.path.isdir(directory):
        raise NotADirectoryError(f"not a directory: {directory}")
    server = ThreadingHTTPServer((host, port), partial(IndexRequestHandler, directory=directory))
    server.quiet = quiet
    return server
