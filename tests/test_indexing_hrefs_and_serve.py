"""Hrefs of sources with odd names reach their chunk over HTTP (issue 12 item 9), `query --show`
fails loudly on a missing chunk, and `mdindex serve` stays inside its directory (item 11)."""

from __future__ import annotations

import json
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time

import pytest
import requests
from indexing_support import ranked_vectors, run_cli, serving, source, topic_input, write_index

from indexing import IndexSettings, build_topic
from indexing.paths import chunk_file
from indexing.server import (
    MAX_CONNECTIONS,
    IndexRequestHandler,
    IndexServer,
    SearchError,
    make_server,
)
from jobs.cli import main as mdindex

TOPIC = "odd names/t#1"
NAMES = ["50% off", "what?", "c#", "a b", "指南", "new\nline"]


def chunk_name(name: str) -> str:
    """The file name of the one chunk of source `name` (`{stem}-{digest}-0.md`)."""
    return chunk_file(name, 0, f"## About {name}\n\nText of {name}.").removeprefix("_chunks/")


@pytest.fixture(scope="module")
def index_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("odd") / "site"
    sources = [
        source(f"{TOPIC}/{name}.md", [(f"About {name}", f"Text of {name}.")], ranked_vectors([1.0]))
        for name in NAMES
    ]
    write_index(root, [build_topic(topic_input(TOPIC, sources), IndexSettings())])
    return root


@pytest.fixture(scope="module")
def server(index_root):
    with serving(index_root) as url:
        yield url


def test_hrefs_are_url_encoded_and_name_the_chunk_files(index_root):
    index = json.loads((index_root / TOPIC / "index.json").read_bytes())
    assert index["_links"]["self"]["href"] == "/odd%20names/t%231/index.json"
    hrefs = {name: index["_embedded"]["chunks"][name]["items"][0]["href"] for name in NAMES}
    encoded = {"50% off": "50%25%20off", "what?": "what%3F", "c#": "c%23"}
    for name, stem in {**encoded, "new\nline": "new%0Aline"}.items():
        digest = chunk_name(name).removesuffix("-0.md")[-16:]
        assert hrefs[name] == f"_chunks/{stem}-{digest}-0.md"
    for name in NAMES:
        assert (index_root / TOPIC / "_chunks" / chunk_name(name)).read_text().endswith(f"{name}.")


def test_every_href_is_fetched_over_http(index_root, server, capsys):
    index = json.loads((index_root / TOPIC / "index.json").read_bytes())
    for name in NAMES:
        href = index["_embedded"]["chunks"][name]["items"][0]["href"]
        reply = requests.get(f"{server}/{requests.utils.quote(TOPIC)}/{href}", timeout=10)
        assert reply.status_code == 200 and reply.text.endswith(f"Text of {name}.")
    code, out, _ = run_cli(["query", server, "--topic", TOPIC, "--show", "--json"], capsys)
    assert code == 0
    texts = {s["source"]: s["chunks"][0]["text"] for s in json.loads(out)["sources"]}
    assert texts == {name: f"## About {name}\n\nText of {name}." for name in NAMES}


def test_serve_takes_a_raw_utf8_request_target_as_its_percent_encoding(index_root):
    """curl sends a URL as it is typed: `curl 'http://…/_search?q=café'`, or a path naming a
    file `指南`, went as raw UTF-8 bytes, which the server read as Latin-1: the question was
    'cafÃ©' (answered, wrongly) and the file 404. Each byte above 0x7F counts as its
    percent-encoding (RFC 3986); a query byte that is no UTF-8 is a 400 as its `%XX` is."""
    from indexing.cli import question_search

    index = json.loads((index_root / TOPIC / "index.json").read_bytes())
    href = index["_embedded"]["chunks"]["指南"]["items"][0]["href"]
    path = f"/{requests.utils.quote(TOPIC)}/{requests.utils.unquote(href)}"
    with serving(index_root, search=question_search(str(index_root))) as base:
        line, body = _raw_answer(_port(base), f"GET {path} HTTP/1.0\r\n\r\n".encode())
        assert line.startswith(b"HTTP/1.0 200 ") and body.decode().endswith("Text of 指南.")
        asked = "GET /_search?q=x&topic=指南 HTTP/1.0\r\n\r\n".encode()
        line, body = _raw_answer(_port(base), asked)
        assert line.startswith(b"HTTP/1.0 404 ")
        assert "no index.json for topic '指南'" in json.loads(body)["error"]
        line, body = _raw_answer(_port(base), b"GET /_search?q=caf\xe9 HTTP/1.0\r\n\r\n")
        assert line.startswith(b"HTTP/1.0 400 ")
        assert json.loads(body)["error"] == "the query string is not UTF-8 text"


def test_query_show_fails_loudly_on_a_missing_chunk(index_root, server, capsys, tmp_path):
    copy = tmp_path / "site"
    for path in index_root.rglob("*"):
        if path.is_file():
            target = copy / path.relative_to(index_root)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    (copy / TOPIC / "_chunks" / chunk_name("c#")).unlink()
    code, out, err = run_cli(["query", str(copy), "--topic", TOPIC, "--show"], capsys)
    assert code == 1 and out == ""
    assert "chunk file" in err and f"{chunk_name('c#')} is missing" in err
    assert run_cli(["query", str(copy), "--topic", TOPIC], capsys)[0] == 0  # no text asked


def test_serve_never_leaves_its_directory_nor_lists_one(tmp_path):
    root = tmp_path / "site"
    (root / "t").mkdir(parents=True)
    (root / "t" / "index.json").write_text("{}")
    (root / ".embedding-cache").mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    (root / "t" / "leak.md").symlink_to(secret)
    (root / "outside").symlink_to(tmp_path)
    (root / "inside.json").symlink_to(root / "t" / "index.json")
    with serving(root) as base:
        for path in ("/t/leak.md", "/outside/secret.txt", "/../secret.txt", "/%2e%2e/secret.txt"):
            reply = requests.get(base + path, timeout=10)
            assert reply.status_code == 404 and "TOP-SECRET" not in reply.text, path
            for target in (f"http://127.0.0.1{path}", f"http://h/t{path}"):
                line, body = _raw_answer(_port(base), f"GET {target} HTTP/1.0\r\n\r\n".encode())
                assert line.startswith(b"HTTP/1.0 404 ") and b"TOP-SECRET" not in body, target
        for path in ("/", "/t/", "/.embedding-cache/", "/outside/"):
            reply = requests.get(base + path, timeout=10)
            assert reply.status_code == 404 and "index.json" not in reply.text, path
        assert requests.get(base + "/inside.json", timeout=10).text == "{}"
        assert requests.get(base + "/t/index.json", timeout=10).text == "{}"


def test_serve_answers_404_for_hidden_files_but_serves_a_chunk_file_named_with_a_dot(tmp_path):
    """An in-place build of a checkout, served: `.git/config` (a remote's credentials), the
    build's `.embedding-cache` and a `.venv` were served to anyone, also through a link named
    like an index file; and so were the dot-named files at the corpus's root, `.env` and
    `.npmrc` (a registry token), and a build's `.tmp-…` files. A dot-named chunk file is served:
    tldr-pages' `..md` has chunk files named `.-{digest}-0.md`."""
    root = tmp_path / "site"
    for folder in (".git", ".embedding-cache/minilm", "t/_chunks", "t/.private"):
        (root / folder).mkdir(parents=True)
    (root / ".git" / "config").write_text("url = https://user:TOKEN@example.com/repo")
    (root / ".embedding-cache" / "minilm" / "ab.bin").write_bytes(b"TOKEN")
    (root / "t" / ".private" / "notes.md").write_text("TOKEN")
    (root / ".env").write_text("API_KEY=TOKEN")
    (root / ".npmrc").write_text("//registry.npmjs.org/:_authToken=TOKEN")
    (root / "t" / "_chunks" / ".tmp-ab12cd34").write_text("TOKEN")
    (root / "t" / "_chunks" / ".-0123abcd-0.md").write_text("a dot-named source's chunk")
    (root / "t" / "looks-fine.md").symlink_to(root / ".git" / "config")
    (root / "t" / "_chunks" / "env-0123abcd-0.md").symlink_to(root / ".env")
    with serving(root) as base:
        for path in ("/.git/config", "/.embedding-cache/minilm/ab.bin", "/t/.private/notes.md",
                     "/t/looks-fine.md", "/%2Egit/config", "/.env", "/%2eenv", "/.npmrc",
                     "/t/_chunks/.tmp-ab12cd34", "/t/_chunks/env-0123abcd-0.md"):  # fmt: skip
            for method in ("GET", "HEAD"):
                reply = requests.request(method, base + path, timeout=10)
                assert reply.status_code == 404 and "TOKEN" not in reply.text, (method, path)
        reply = requests.get(base + "/t/_chunks/.-0123abcd-0.md", timeout=10)
        assert reply.status_code == 200 and reply.text == "a dot-named source's chunk"


def test_serve_closes_a_connection_left_idle(tmp_path, monkeypatch, capsys):
    """A client that sends half a request line and waits held a handler thread for ever (50 such
    clients: 50 more threads), then for 60 s, one of the `max_connections` served at once: its
    connection is closed once its request's head is not in `request_timeout` seconds after the
    server began to wait for it (10 in `mdindex serve`, 1 here; `timeout`, 60 s, for each write
    of the answer), with a log line, and the server goes on answering. So is one whose head
    comes a byte every 0.2 s: that timeout was for each read, and such a client held its place
    for ever."""
    (tmp_path / "index.json").write_text("{}")
    assert IndexRequestHandler.timeout is not None and 0 < IndexRequestHandler.timeout <= 120
    assert 0 < IndexRequestHandler.request_timeout <= IndexRequestHandler.timeout
    monkeypatch.setattr(IndexRequestHandler, "request_timeout", 1)
    with serving(tmp_path, quiet=False) as base:
        with socket.create_connection(("127.0.0.1", _port(base)), timeout=5) as idle:
            idle.sendall(b"GET /index.js")
            assert idle.recv(1024) == b""  # closed by the server, long before our 5 s
        with socket.create_connection(("127.0.0.1", _port(base)), timeout=0.2) as slow:
            slow.sendall(b"GET /index.json HTTP/1.0\r\nX-Slow: ")
            began = time.monotonic()
            while (took := time.monotonic() - began) < 5:
                try:
                    slow.sendall(b"x")
                    if slow.recv(1024) == b"":  # closed by the server
                        break
                except TimeoutError:  # no answer within 0.2 s: the next byte
                    continue
                except ConnectionError:  # closed as the byte came
                    break
        assert took < 3
        assert requests.get(base + "/index.json", timeout=10).text == "{}"
    assert capsys.readouterr().err.count("Request timed out: TimeoutError('timed out')") == 2


def test_serve_resets_a_client_that_takes_its_answer_too_slowly(tmp_path, monkeypatch, capsys):
    """An answer's only bound was 60 s for each 64 KiB write: a client that took 64 KiB every
    59 s held one of the server's places for as long as the file lasted (a 400 MB shard: four
    days), and 256 such clients every place. The client must take an answer at 64 KiB/s on
    average after its first 60 s (`answer_rate`, `answer_grace`: 8 MiB/s after 0.5 s here),
    else its connection is reset, with one log line, and its place goes to the next client. The
    slow client here reads 1 KiB every 0.1 s through a small receive buffer; the server serves
    one connection at once."""
    (tmp_path / "shard.parquet").write_bytes(bytes(8 * 2**20))
    (tmp_path / "index.json").write_text("{}")
    monkeypatch.setattr(IndexServer, "max_connections", 1)
    monkeypatch.setattr(IndexRequestHandler, "answer_grace", 0.5)
    monkeypatch.setattr(IndexRequestHandler, "answer_rate", 8 * 2**20)
    with serving(tmp_path, quiet=False) as base:
        with socket.socket() as slow:
            slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            slow.settimeout(10)
            slow.connect(("127.0.0.1", _port(base)))
            slow.sendall(b"GET /shard.parquet HTTP/1.0\r\n\r\n")
            taken, reset = 0, False

            def trickle() -> None:
                nonlocal taken, reset
                try:
                    while data := slow.recv(1024):
                        taken += len(data)
                        time.sleep(0.1)
                except ConnectionResetError:
                    reset = True

            reader = threading.Thread(target=trickle)
            reader.start()
            reply = requests.get(base + "/index.json", timeout=10)  # waits for the one place
            reader.join(timeout=30)
    assert reply.text == "{}"
    assert not reader.is_alive() and reset and taken < 2**20
    log = capsys.readouterr().err
    assert log.count("Answer timed out: the client took ") == 1 and "Traceback" not in log


def test_serve_answers_404_for_the_builds_own_folder(tmp_path, capsys):
    """`_reindex/` was served: its report.json names the build's host, its pid, the absolute
    paths of its input, output and cache, and its settings; build.lock a running build's host
    and pid. No reader of the index needs it (`query` reads `_index/` and the topics' files), so
    it is 404 at any depth (a served folder may hold several outputs), through a link too;
    `_index/` is served. `mdindex report` of the server's URL, which read the report through
    it, says there is none (exit 2): it reads a local or S3 output."""
    root = tmp_path / "site"
    for folder in ("_reindex", "_index", "docs/_reindex", "t/_chunks"):
        (root / folder).mkdir(parents=True)
    for path in ("_reindex/report.json", "_reindex/build.lock", "docs/_reindex/report.json"):
        (root / path).write_text('{"status": "ok", "host": "TOKEN"}')
    (root / "t" / "_chunks" / "r-0123abcd-0.md").symlink_to(root / "_reindex" / "report.json")
    (root / "_index" / "model.json").write_text("{}")
    with serving(root) as base:
        for path in ("/_reindex/report.json", "/_reindex/build.lock", "/%5Freindex/report.json",
                     "/docs/_reindex/report.json", "/t/_chunks/r-0123abcd-0.md"):  # fmt: skip
            for method in ("GET", "HEAD"):
                reply = requests.request(method, base + path, timeout=10)
                assert reply.status_code == 404 and "TOKEN" not in reply.text, (method, path)
        assert requests.get(base + "/_index/model.json", timeout=10).text == "{}"
        assert mdindex(["report", base]) == 2
    assert capsys.readouterr().err == f"mdindex report: no {base}/_reindex/report.json\n"


def test_serve_answers_404_for_a_nul_byte_and_for_every_directory(tmp_path):
    """A NUL byte in the path (`%00`), or an encoded lone surrogate (`%ED%A0%80`), got no answer
    at all (os.path.realpath raised: connection dropped, a traceback on stderr); a directory
    without its trailing slash got 301 (which told that `/.embedding-cache` exists) and one
    holding an index.html was served."""
    root = tmp_path / "site"
    (root / "t").mkdir(parents=True)
    (root / "t" / "index.json").write_text("{}")
    (root / ".embedding-cache").mkdir()
    (root / "page").mkdir()
    (root / "page" / "index.html").write_text("<p>a page</p>")
    with serving(root) as base:
        for path in ("/t/index.json%00", "/t/index.json%00.md", "/t%00/index.json", "/t",
                     "/.embedding-cache", "/page", "/page/", "/t/index.json/",
                     "/t/%ED%A0%80.md", "/%ED%B3%BF/index.json"):  # fmt: skip
            for method in ("GET", "HEAD"):
                reply = requests.request(method, base + path, allow_redirects=False, timeout=10)
                assert reply.status_code == 404 and "a page" not in reply.text, (method, path)
                assert "Location" not in reply.headers
        assert requests.get(base + "/page/index.html", timeout=10).text == "<p>a page</p>"


def _raw_answer(port: int, request: bytes) -> tuple[bytes, bytes]:
    """The status line and body a raw request gets (the server closes the connection)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(request)
        answer = b"".join(iter(lambda: client.recv(65536), b""))
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0], body


def test_serve_answers_errors_in_json(tmp_path):
    """A web client's `response.json()` of an error was a SyntaxError: `http.server` wrote an
    HTML page for a 404, a POST (501), a request line too long (414). Each is JSON now, with
    CORS, naming the status (a method's name as the client wrote it, quote and backslash
    escaped); a HEAD's error has no body. A method HTTP defines that would change something
    (a search form's POST, a PUT) is 405 with `Allow`: it was 501, as for one HTTP lacks."""
    (tmp_path / "index.json").write_text("{}")
    with serving(tmp_path) as base:
        for method, path, status in (
            ("GET", "/missing.json", 404),
            ("GET", "/", 404),
            ("POST", "/index.json", 405),
            ("PUT", "/index.json", 405),
            ("DELETE", "/index.json", 405),
            ("GET", "/" + "a" * 70_000, 414),
        ):
            reply = requests.request(method, base + path, timeout=10)
            assert reply.status_code == status, (method, path[:20])
            assert reply.headers["Content-Type"] == "application/json"
            assert reply.headers["Access-Control-Allow-Origin"] == "*"
            assert reply.json()["status"] == status and reply.json()["error"]
            assert reply.headers.get("Allow") == ("GET, HEAD, OPTIONS" if status == 405 else None)
        head = requests.head(base + "/missing.json", timeout=10)
        assert head.status_code == 404 and head.content == b""
        line, body = _raw_answer(
            int(base.rsplit(":", 1)[1]), b'B"\\W /x HTTP/1.1\r\nHost: h\r\n\r\n'
        )
        assert line.startswith(b"HTTP/1.0 501 ")
        assert json.loads(body) == {"status": 501, "error": "Unsupported method ('B\"\\\\W')"}


def test_serve_answers_a_head_of_the_search_as_its_get(tmp_path):
    """A HEAD of `/_search` (a monitor's `curl -I`) was 404 while its GET answered: it gets the
    GET's status and headers, without a body; a refused question's status too."""

    def search(query: str) -> dict:
        if query == "q=":
            raise SearchError(400, "q: give a question (q=...)")
        return {"question": query}

    with serving(tmp_path, search=search) as base:
        get = requests.get(base + "/_search?q=deploy", timeout=10)
        head = requests.head(base + "/_search?q=deploy", timeout=10)
        assert get.json() == {"question": "q=deploy"}
        assert (head.status_code, head.content) == (200, b"")
        for name in ("Content-Type", "Content-Length", "Cache-Control"):
            assert head.headers[name] == get.headers[name], name
        assert requests.head(base + "/_search?q=", timeout=10).status_code == 400


def test_serve_search_refuses_a_parameter_it_does_not_take(index_root):
    """`/_search` ignored a parameter it did not know: `qestion=` was "q: give a question",
    `topik=` searched every topic, `limit=` gave 5 matches. Such a parameter is a 400 naming it
    and the ones it takes, the search never asked; each of the six the README documents still
    reaches the search, which names it in its own 400 or 404 (none loads a model). An error
    naming a topic `指南` got no answer at all (the stdlib wrote the message into the status
    line, in Latin-1: UnicodeEncodeError); the status line says the code's own phrase."""
    from indexing.cli import question_search

    with serving(index_root, search=question_search(str(index_root))) as base:
        for query, unknown in (
            ("qestion=deploy", "qestion"),
            ("q=deploy&topik=odd%20names", "topik"),
            ("q=deploy&n=3&limit=1", "limit"),
            ("q=deploy&=1", ""),
            ("q=deploy&%E6%8C%87=1", "指"),
        ):
            head = requests.head(f"{base}/_search?{query}", timeout=10)
            reply = requests.get(f"{base}/_search?{query}", timeout=10)
            assert head.status_code == reply.status_code == 400, query
            assert reply.json()["error"] == (
                f"{unknown!r}: no such parameter "
                "(/_search takes q, n, per_page, topic, under, all_copies)"
            ), query
        for query, status, said in (
            ("q=", 400, "q: give a question"),
            ("q=x&n=0", 400, "n: must be at least 1"),
            ("q=x&per_page=0", 400, "per_page: must be at least 1"),
            ("q=x&all_copies=2", 400, "all_copies: must be 0 or 1"),
            ("q=x&topic=nope", 404, "no index.json for topic 'nope'"),
            ("q=x&under=nope", 404, "no index.json for topic 'nope'"),
            ("q=x&topic=%E6%8C%87%E5%8D%97", 404, "no index.json for topic '指南'"),
        ):
            reply = requests.get(f"{base}/_search?{query}", timeout=10)
            assert reply.status_code == status and said in reply.json()["error"], query


def test_serve_search_ignores_jquerys_cache_busting_underscore(index_root):
    """jQuery's `$.ajax({cache: false})` and many fetch wrappers add `_=<timestamp>` to a GET's
    query string: each such search was a 400 ("'_': no such parameter"). `_` (also as `%5F`)
    reaches the search, which ignores it; any other name (`__`) is still a 400."""
    from indexing.cli import question_search

    with serving(index_root, search=question_search(str(index_root))) as base:
        for query, status, said in (
            ("q=&_=1700000000000", 400, "q: give a question"),
            ("_=1700000000000&q=x&n=0", 400, "n: must be at least 1"),
            ("q=x&topic=nope&%5F=1", 404, "no index.json for topic 'nope'"),
            ("q=x&__=1", 400, "'__': no such parameter"),
        ):
            for method in ("HEAD", "GET"):
                reply = requests.request(method, f"{base}/_search?{query}", timeout=10)
                assert reply.status_code == status, (method, query)
            assert said in reply.json()["error"], query


def test_serve_search_answers_its_path_with_unreserved_characters_percent_encoded(index_root):
    """`/%5Fsearch` is `/_search` (RFC 3986 6.2.2.2: a percent-encoded unreserved character is
    the character), as a client normalising URLs its own way may send it: it was 404, "File
    not found". Any spelling of the path's unreserved characters reaches the search, as a file
    is reached by any; a reserved character's escape (`%2F`) or an escape of `%` (`%25`, no
    second decoding) is no spelling of it."""
    from indexing.cli import question_search

    quoted = requests.utils.quote(TOPIC)
    with serving(index_root, search=question_search(str(index_root))) as base:
        for path in ("/%5Fsearch", "/%5fsearch", "/_%73earch", "/%5F%73%65%61%72%63%68"):
            line, body = _raw_answer(_port(base), f"GET {path}?q= HTTP/1.0\r\n\r\n".encode())
            assert line.startswith(b"HTTP/1.0 400 "), path
            assert json.loads(body)["error"] == "q: give a question (q=...)", path
        for path in ("/_%2573earch", "/%2F_search", "/_search%2F"):
            line, body = _raw_answer(_port(base), f"GET {path}?q= HTTP/1.0\r\n\r\n".encode())
            assert line.startswith(b"HTTP/1.0 404 "), path
            assert json.loads(body)["error"] == "File not found", path
        reply = requests.get(f"{base}/%6F{quoted[1:]}/%69ndex%2Ejson", timeout=10)
        assert reply.content == (index_root / TOPIC / "index.json").read_bytes()


def test_serve_takes_a_request_target_in_absolute_form(index_root, tmp_path):
    """`GET http://127.0.0.1:8000/topic/index.json HTTP/1.1`, which RFC 9112 3.2.2 has a
    server accept (a proxy sends it, and some clients), was 404 (the path read as a folder
    `http:`): it is served as its origin-form `/topic/index.json`, its authority (which wins over
    Host) not routed by; the search too. An `http` URI naming no host is a 400 (RFC 9110 4.2.1),
    and so is `http://[/x`, which got no answer at all (a traceback)."""
    from indexing.cli import question_search

    path = f"/{requests.utils.quote(TOPIC)}/index.json"
    with serving(index_root, search=question_search(str(index_root))) as base:
        port = _port(base)
        for target in (f"http://127.0.0.1:{port}{path}", f"HTTP://elsewhere.example{path}"):
            asked = f"GET {target} HTTP/1.1\r\nHost: other.example\r\nConnection: close\r\n\r\n"
            line, body = _raw_answer(port, asked.encode())
            assert line.startswith(b"HTTP/1.0 200 "), target
            assert body == (index_root / TOPIC / "index.json").read_bytes(), target
        line, body = _raw_answer(port, b"GET https://h/_search?q= HTTP/1.1\r\nHost: h\r\n\r\n")
        assert line.startswith(b"HTTP/1.0 400 ")
        assert json.loads(body)["error"] == "q: give a question (q=...)"
        for target, said in (
            (b"http:///index.json", "not a request target: http:// naming no host"),
            (b"http://[/x", "not a request target: Invalid IPv6 URL"),
        ):
            line, body = _raw_answer(port, b"GET " + target + b" HTTP/1.1\r\nHost: h\r\n\r\n")
            assert line.startswith(b"HTTP/1.0 400 ") and json.loads(body)["error"] == said, target
        line, _ = _raw_answer(port, b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n")
        assert line.startswith(b"HTTP/1.0 204 ")


def test_serve_asks_an_http_1_1_request_for_one_host(tmp_path):
    """RFC 9112 3.2: a server answers 400 to an HTTP/1.1 request without a Host header, and to
    any with two; each was answered as any other. HTTP/1.0 needs none."""
    (tmp_path / "index.json").write_text("{}")
    with serving(tmp_path) as base:
        port = _port(base)
        for request, status, error in (
            (b"GET /index.json HTTP/1.1\r\n\r\n", b"400", "0 Host headers: HTTP asks for one"),
            (b"GET /index.json HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", b"400", "2 Host"),
            (b"GET /index.json HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n", b"400", "2 Host"),
            (b"GET /index.json HTTP/1.0\r\n\r\n", b"200", None),
            (b"GET /index.json HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", b"200", None),
        ):
            line, body = _raw_answer(port, request)
            assert line.split()[1] == status, request
            assert body == b"{}" if error is None else json.loads(body)["error"].startswith(error)


@pytest.mark.timeout(120)
def test_mdindex_serve_stops_with_exit_0_on_sigterm_and_ctrl_c(tmp_path):
    """systemd stops a service with SIGTERM: `mdindex serve` exited 143 without a word, which
    systemd counts a failure (the unit "failed", status=143). SIGTERM and Ctrl-C are a
    server's ordinary stop: exit 0, one line saying which. The program's own entry point
    (`jobs.cli.run`), whose SIGTERM handler gave the 143; SIGINT's default handler first (a
    background job inherits SIGINT ignored). Also while it serves all the connections it may at
    once and waits for one to close (a wait inside socketserver's handling of a request would
    take the SIGTERM for that request's error)."""
    (tmp_path / "index.json").write_text("{}")
    program = (
        "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from jobs.cli import run; run()"
    )
    for signum, said in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "Ctrl-C")):
        proc = subprocess.Popen(
            [sys.executable, "-c", program, "serve", str(tmp_path), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        idle, full = [], f"{MAX_CONNECTIONS} connections open, the most it serves at once"
        try:
            base = proc.stdout.readline().split(" at ")[1].split()[0]
            assert requests.get(base + "index.json", timeout=10).text == "{}"
            port = int(base.rstrip("/").rsplit(":", 1)[1])
            idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(MAX_CONNECTIONS)]
            idle.append(socket.create_connection(("127.0.0.1", port)))  # waits
            give_up = threading.Timer(10, proc.kill)  # the line's end, where none comes
            give_up.start()
            waiting = any(full in line for line in proc.stderr)
            give_up.cancel()
            proc.send_signal(signum)
            _, err = proc.communicate(timeout=30)
        finally:
            proc.kill()  # a no-op once it has exited
            for client in idle:
                client.close()
        assert waiting, err[-500:]
        assert proc.returncode == 0, (said, proc.returncode, err[-500:])
        assert err.endswith(f"mdindex serve: stopped ({said})\n"), err[-500:]


@pytest.mark.timeout(120)
def test_mdindex_serve_stops_on_a_signal_that_lands_as_a_connections_thread_starts(tmp_path):
    """A Ctrl-C (seen once in CI, under load) or SIGTERM that landed in `Thread.start` of a
    connection whose thread had already served it and freed its place: the server freed the
    place a second time, whose ValueError socketserver took for that request's error (a
    traceback on stderr), and served on; the stop was lost, the process never ended. The
    signal is raised there by the program (its thread served and joined first): each stops
    the server, exit 0, with its line and no traceback."""
    (tmp_path / "index.json").write_text("{}")
    for signum, said in ((signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")):
        program = (
            "import signal, threading\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "start = threading.Thread.start\n"
            "def start_then_signal(thread):\n"
            "    start(thread)\n"
            "    if thread.name.endswith('(process_request_thread)'):\n"
            "        thread.join()\n"
            f"        signal.raise_signal({int(signum)})\n"
            "threading.Thread.start = start_then_signal\n"
            "from jobs.cli import run\n"
            "run()\n"
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", program, "serve", str(tmp_path), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            base = proc.stdout.readline().split(" at ")[1].split()[0]
            assert requests.get(base + "index.json", timeout=10).text == "{}"
            _, err = proc.communicate(timeout=20)
        finally:
            proc.kill()  # a no-op once it has exited
        assert proc.returncode == 0, (said, proc.returncode, err[-500:])
        assert err.endswith(f"mdindex serve: stopped ({said})\n") and "Traceback" not in err, err


def test_serve_holds_a_burst_of_connections_until_it_accepts_them(tmp_path):
    """socketserver's listen backlog of 5 dropped the rest of a burst of connections (a page
    fetching its chunk files, a few users at once; one connection per request): their clients
    tried again after 1 s, then 3 s (20 at once, measured: 11 took over 1 s, 50: up to 4.4 s).
    A server accepting nothing yet now has the kernel hold 64 connections; each is answered
    once it serves."""
    (tmp_path / "index.json").write_text("{}")
    server = make_server(str(tmp_path), port=0, quiet=True)  # listening, accepting none yet
    serve = threading.Thread(target=server.serve_forever, daemon=True)
    clients = []
    try:
        for _ in range(64):
            clients.append(socket.create_connection(server.server_address[:2], timeout=5))
            clients[-1].sendall(b"GET /index.json HTTP/1.0\r\n\r\n")
        serve.start()
        for client in clients:
            answer = b"".join(iter(lambda c=client: c.recv(65536), b""))
            assert answer.startswith(b"HTTP/1.0 200 ") and answer.endswith(b"\r\n\r\n{}")
    finally:
        for client in clients:
            client.close()
        if serve.is_alive():
            server.shutdown()
        server.server_close()


def test_serve_has_caches_ask_again_before_each_use(index_root, server):
    """Files came with Last-Modified and no Cache-Control, so a browser kept each fresh for a
    tenth of its age (RFC 9111 4.2.2): an index.json 10 days old at a rebuild was read from the
    cache for a day after it, naming chunk files the rebuild had deleted. Each 200, 206 and 304
    says `no-cache`: used again only once the server answers 304."""
    url = f"{server}/{requests.utils.quote(TOPIC)}/index.json"
    full = requests.get(url, timeout=10)
    ranged = requests.get(url, headers={"Range": "bytes=0-0"}, timeout=10)
    unchanged = requests.get(url, headers={"If-None-Match": full.headers["ETag"]}, timeout=10)
    for reply, status in ((full, 200), (ranged, 206), (unchanged, 304)):
        assert reply.status_code == status
        assert reply.headers["Cache-Control"] == "no-cache", status


def test_serve_takes_a_range_unit_in_any_case(index_root, server):
    """`Range: BYTES=0-99` or `Bytes=0-99` got 200 and the whole file: RFC 9110 14.1 compares a
    range unit in any case. Each is 206 as `bytes=` is; so is a range set with empty elements
    and whitespace around its commas (RFC 9110 5.6.1's list); whitespace around `=` or inside a
    range, or several ranges, still get the whole file."""
    path = f"/{requests.utils.quote(TOPIC)}/index.json"
    whole = (index_root / TOPIC / "index.json").read_bytes()
    for header, status in (
        ("BYTES=0-9", 206),
        ("Bytes=0-9", 206),
        ("bytes=0-9 ,", 206),
        ("bytes=, \t0-9", 206),
        ("bytes=0-9, ,", 206),
        ("bytes= 0-9", 200),
        ("bytes =0-9", 200),
        ("bytes=0 -9", 200),
        ("bytes=0-0, 5-9", 200),
        ("bits=0-9", 200),
    ):
        asked = f"GET {path} HTTP/1.1\r\nHost: h\r\nRange: {header}\r\nConnection: close\r\n\r\n"
        line, body = _raw_answer(_port(server), asked.encode())
        assert line.startswith(b"HTTP/1.0 %d " % status), header
        assert body == (whole[:10] if status == 206 else whole), header


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def test_serve_serves_at_most_max_connections_at_once(tmp_path, monkeypatch):
    """Each connection had its thread, idle for up to 60 s: 1,000 clients that connect and send
    nothing (a scanner, a leak, a slowloris) held 1,000 threads. The server serves at most
    `max_connections` at once (256 in `mdindex serve`, 4 here); the next waits in the kernel's
    backlog and is answered once one closes."""
    (tmp_path / "index.json").write_text("{}")
    monkeypatch.setattr(IndexServer, "max_connections", 4)
    with serving(tmp_path) as base:
        before = set(threading.enumerate())  # an earlier test's threads may end meanwhile
        idle = [socket.create_connection(("127.0.0.1", _port(base)), timeout=10) for _ in range(12)]
        time.sleep(0.5)  # the server takes what it will
        held = len(set(threading.enumerate()) - before)
        waiting = socket.create_connection(("127.0.0.1", _port(base)), timeout=10)
        waiting.sendall(b"GET /index.json HTTP/1.0\r\n\r\n")
        for client in idle:
            client.close()
        answer = b"".join(iter(lambda: waiting.recv(65536), b""))
        waiting.close()
    assert held == 4
    assert answer.startswith(b"HTTP/1.0 200 ") and answer.endswith(b"\r\n\r\n{}")


def test_serve_names_no_python_version(index_root, server):
    """The Server header was `SimpleHTTP/0.6 Python/3.11.7`, telling anyone which Python (and
    its known bugs) answers; it is `mdindex`, on files and errors."""
    for path in ("/" + requests.utils.quote(TOPIC) + "/index.json", "/missing"):
        assert requests.get(server + path, timeout=10).headers["Server"] == "mdindex", path


def test_serve_logs_at_most_200_characters_of_a_request_line(tmp_path, capsys):
    """A 64 KB request line was written to the log whole, on every request: each text in a log
    line is cut to its first 200 characters and "…", its control characters escaped."""
    with serving(tmp_path, quiet=False) as base:
        line, _ = _raw_answer(_port(base), b"GET /\x1b[2J" + b"a" * 60_000 + b" HTTP/1.0\r\n\r\n")
    assert line.startswith(b"HTTP/1.0 404 ")
    log = capsys.readouterr().err
    assert '"GET /\\x1b[2Jaaa' in log and "\x1b" not in log
    assert log.count("…") == 1 and max(len(each) for each in log.splitlines()) < 300


def test_serve_answers_a_tls_handshake_at_once(tmp_path, capsys):
    """`https://` to the plain port: a ClientHello with no newline byte in it (many a
    browser's) got no answer until the 60 s idle timeout, the client hanging; one with such a
    byte (curl's, Python's) a 400 whose log line held the hello's binary bytes. A TLS handshake
    is answered at once, 400 (which a TLS client reads as "wrong version number"), and logged
    in one line saying what it was."""
    hello = b"\x16\x03\x01\x00\x2d\x01\x00\x00\x29\x03\x03" + bytes(32) + b"\x00\x00\x02\x13\x01"
    hello += b"\x01\x00"  # a ClientHello record: TLS 1.2, no session, one cipher, no compression
    with serving(tmp_path, quiet=False) as base:
        with socket.create_connection(("127.0.0.1", _port(base)), timeout=2) as raw:
            raw.sendall(hello)
            assert raw.recv(65536).startswith(b"HTTP/1.0 400 ")
        with socket.create_connection(("127.0.0.1", _port(base)), timeout=2) as raw:
            context = ssl.create_default_context()
            with pytest.raises(ssl.SSLError, match="WRONG_VERSION_NUMBER|wrong version number"):
                context.wrap_socket(raw, server_hostname="localhost")
    log = capsys.readouterr().err
    assert log.count("message a TLS handshake (https://) to a plain HTTP server\n") == 2
    assert "\\x16" not in log


def test_serve_answers_a_bad_http_version_with_a_status_line(index_root, server):
    """A request line without a version (HTTP/0.9's `GET /path`), with `HTTP/9.9` or with no
    version at all got a bare body, no status line nor headers, which a client took for a 200
    (the 0.9 one the file itself, once a blank line came, and until then nothing): each gets a
    status line, 505 or 400, and its JSON error."""
    path = f"/{requests.utils.quote(TOPIC)}/index.json".encode()
    for request, status in (
        (b"GET " + path + b"\r\n", 505),
        (b"GET " + path + b"\r\n\r\n", 505),
        (b"GET " + path + b" HTTP/9.9\r\n\r\n", 505),
        (b"GET " + path + b" HTTP/x\r\n\r\n", 400),
        (b"GET\r\n\r\n", 400),
    ):
        line, body = _raw_answer(_port(server), request)
        assert line.startswith(b"HTTP/1.0 %d " % status), request
        assert json.loads(body)["status"] == status, request
