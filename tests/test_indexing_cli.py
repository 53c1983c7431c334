"""`mdindex query` (local and over HTTP) and `mdindex serve` (CORS, byte ranges) on a real index."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import requests
import s3fs
from environment_support import (
    fault_environment,
    mdindex_onto_full_disk,
    needs_full_disk,
    without_aws_credentials,
)
from indexing_support import (
    loaded_models,
    ranked_vectors,
    run_cli,
    serving,
    source,
    topic_input,
    write_index,
    write_topic,
)

from indexing import IndexSettings, build_topic, client, simhash64
from indexing.cli import banner
from indexing.client import IndexReader, query_embedder, select_chunks
from indexing.server import IndexRequestHandler, IndexServer, make_server, parse_range
from indexing.simhash_tables import blocks, shard_path

TOPIC = "guides/intro"
QUESTIONS = ["How do I install the tool?", "What does part seven explain?"]


def big_question() -> str:
    return next(
        q for q in (f"Where is option {i} set?" for i in range(100)) if simhash64(q) >= 2**63
    )


@pytest.fixture(scope="module")
def index_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("index")
    names = ["Overview", "Quick Reference"] + [f"Part {i}" for i in range(2, 10)]
    scores = [1.0, 0.5, 0.95, 0.3, 0.8, 0.6, 0.9, 0.2, 0.7, 0.4]
    vectors = ranked_vectors(scores)
    vectors[:, 2] = np.linspace(0, 1, 10)
    main = source(
        f"{TOPIC}/golden-reference.md", [(n, f"Text about {n.lower()}.") for n in names], vectors
    )
    other = source(f"{TOPIC}/faq.md", [("FAQ", "Questions."), ("Install", "pip install it.")],
                   ranked_vectors([1.0, 0.6]))  # fmt: skip
    questions = QUESTIONS + [big_question()]
    qv = np.stack([vectors[1], vectors[7], vectors[3]])
    out = build_topic(topic_input(TOPIC, [main, other], questions=questions, question_vectors=qv),
                      IndexSettings(prompt_threshold=0.99))  # fmt: skip
    write_index(root, [out])
    return root


@pytest.fixture(scope="module")
def server(index_root):
    with serving(index_root) as url:
        yield url


def index_json_bytes(root) -> bytes:
    return (root / TOPIC / "index.json").read_bytes()


def index_json(root) -> dict:
    return json.loads(index_json_bytes(root))


def test_query_topic_returns_first_n_in_stripe_order(index_root, capsys):
    code, out, _ = run_cli(
        ["query", str(index_root), "--topic", TOPIC, "--n", "3", "--json"], capsys
    )
    assert code == 0
    result = json.loads(out)
    chunks = index_json(index_root)["_embedded"]["chunks"]
    by_source = {s["source"]: s for s in result["sources"]}
    assert sorted(by_source) == ["faq", "golden-reference"]
    main = by_source["golden-reference"]
    assert main["order"] == "conceptual"
    assert [c["index"] for c in main["chunks"]] == chunks["golden-reference"]["stripe_order"][:3]
    # Two chunks: the stripe order holds the non-baseline one; the baseline follows it.
    assert [c["index"] for c in by_source["faq"]["chunks"]] == [1, 0]
    items = chunks["golden-reference"]["items"]
    for chunk in main["chunks"]:
        assert chunk["href"].endswith(f"{TOPIC}/{items[chunk['index']]['href']}")
        assert "text" not in chunk


def test_query_source_technical_and_show(index_root, capsys):
    argv = ["query", str(index_root), "--topic", TOPIC, "--n", "4", "--source", "golden-reference",
            "--technical", "--show", "--json"]  # fmt: skip
    code, out, _ = run_cli(argv, capsys)
    assert code == 0
    (selection,) = json.loads(out)["sources"]
    entry = index_json(index_root)["_embedded"]["chunks"]["golden-reference"]
    assert selection["order"] == "technical"
    assert [c["index"] for c in selection["chunks"]] == entry["stripe_order_technical"][:4]
    for chunk in selection["chunks"]:
        path = index_root / TOPIC / entry["items"][chunk["index"]]["href"]
        assert chunk["text"] == path.read_text()


def test_the_baselines_follow_their_stripe_order_its_own_first(index_root):
    """After the technical order the conceptual baseline came first, then the technical one."""
    index = json.loads(index_json_bytes(index_root))
    entry = index["_embedded"]["chunks"]["golden-reference"]
    order = entry["stripe_order_technical"]
    (technical,) = select_chunks(index, 100, source="golden-reference", technical=True)
    assert [c["index"] for c in technical.items] == order + [1, 0]  # was [0, 1]
    order = entry["stripe_order"]
    (conceptual,) = select_chunks(index, 100, source="golden-reference")
    assert [c["index"] for c in conceptual.items] == order + [i for i in (0, 1) if i not in order]


def test_query_reads_an_index_in_a_folder_named_with_two_colons(index_root, tmp_path, capsys):
    """fsspec's `url_to_fs` reads `::` as a chain of filesystems: `query out::v2` read `out`."""
    named = tmp_path / "out::v2"
    shutil.copytree(index_root, named)
    argv = ["query", "--topic", TOPIC, "--n", "3", "--json"]
    code, expected, _ = run_cli([argv[0], str(index_root), *argv[1:]], capsys)
    assert code == 0
    (tmp_path / "out").mkdir()  # where the chain led
    code, found, _ = run_cli([argv[0], str(named), *argv[1:]], capsys)
    assert code == 0 and found == expected.replace(index_root.as_uri(), named.as_uri())


def test_a_local_indexs_hrefs_are_file_uris_a_client_can_fetch(index_root, tmp_path, capsys):
    """A local index's hrefs were `file://` and the path as it is: in a folder named `out #2?%`,
    a URL reader took `#2?%/...` for a fragment and fetched `out ` (a space, ambiguous too)."""
    named = tmp_path / "out #2?%"
    shutil.copytree(index_root, named)
    for asked in (["--topic", TOPIC, "--n", "2"], ["--question", QUESTIONS[0], "--n", "1"]):
        code, out, _ = run_cli(["query", str(named), *asked, "--json"], capsys)
        result = json.loads(out)
        hrefs = [c["href"] for s in result.get("sources", []) for c in s["chunks"]]
        hrefs += [m["href"] for m in result.get("matches", [])]
        assert code == 0 and hrefs, asked
        for href in hrefs:
            url = urllib.parse.urlsplit(href)
            assert (url.scheme, url.query, url.fragment) == ("file", "", ""), href
            assert Path(urllib.request.url2pathname(url.path)).is_relative_to(named), href


def test_query_text_output_and_errors(index_root, capsys):
    code, out, _ = run_cli(["query", str(index_root), "--topic", TOPIC, "--n", "2"], capsys)
    assert code == 0 and "golden-reference: conceptual stripe order, 2 chunks" in out
    code, out, _ = run_cli(["query", str(index_root), "--topic", TOPIC, "--n", "1"], capsys)
    assert (
        code == 0 and "golden-reference: conceptual stripe order, 1 chunk\n" in out
    )  # not "1 chunks"
    code, _, err = run_cli(["query", str(index_root), "--topic", TOPIC, "--source", "nope"], capsys)
    assert code == 1 and "has no source 'nope'" in err
    code, _, err = run_cli(["query", str(index_root), "--topic", "missing/topic"], capsys)
    assert code == 1 and "no index.json for topic 'missing/topic'" in err
    code, _, err = run_cli(["query", str(index_root)], capsys)
    assert code == 2 and "give a question, --topic or both" in err


@needs_full_disk
@pytest.mark.parametrize("form", [[], ["--json"]])
def test_query_onto_a_full_disk_says_so_in_one_line_and_exits_1(index_root, form):
    """`mdindex query ... > /dev/full` was an OSError (ENOSPC) traceback."""
    done = mdindex_onto_full_disk("query", str(index_root), "--topic", TOPIC, *form)
    assert (done.returncode, done.stderr) == (
        1,
        "mdindex query: cannot write to standard output: No space left on device\n",
    )


def test_question_found_by_simhash_with_exact_uint64(index_root, capsys):
    question = big_question()
    code, out, _ = run_cli(
        ["query", str(index_root), "--question", question.upper(), "--n", "1", "--json"], capsys
    )  # --n as many as SimHash finds: SimHash alone (more: the search's chunks follow)
    assert code == 0
    result = json.loads(out)
    assert result["method"] == "simhash" and result["simhash"] == simhash64(question) >= 2**63
    assert [(m["topic"], m["source"], m["index"]) for m in result["matches"]] == [
        (TOPIC, "golden-reference", 3)
    ]
    assert result["matches"][0]["prompt_hash"] == simhash64(question) and '"prompt_hash": ' in out
    assert str(simhash64(question)) in out  # printed as an exact integer, not a float
    items = index_json(index_root)["_embedded"]["chunks"]["golden-reference"]["items"]
    assert simhash64(question) in items[3]["prompt_hashes"]


def test_query_over_http_matches_local(index_root, server, capsys):
    local = run_cli(["query", str(index_root), "--topic", TOPIC, "--n", "5", "--json"], capsys)[1]
    code, remote, _ = run_cli(
        ["query", server, "--topic", TOPIC, "--n", "5", "--show", "--json"], capsys
    )
    assert code == 0
    local, remote = json.loads(local), json.loads(remote)
    for a, b in zip(local["sources"], remote["sources"], strict=True):
        assert [c["index"] for c in a["chunks"]] == [c["index"] for c in b["chunks"]]
        for chunk in b["chunks"]:
            assert chunk["href"].startswith(server + "/")
            assert requests.get(chunk["href"], timeout=10).text == chunk["text"]
    argv = ["query", server, "--question", QUESTIONS[0], "--n", "1", "--json"]
    code, out, _ = run_cli(argv, capsys)
    assert json.loads(out)["matches"][0]["index"] == 1


class ForbiddenWhenMissing(IndexRequestHandler):
    """A handler that answers 403 where a file is missing, as S3 does (AccessDenied) for a key
    that does not exist when the reader may not list the bucket, and CloudFront before it."""

    def send_error(self, code, message=None, explain=None):
        super().send_error(403 if code == 404 else code, message, explain)


def test_a_file_a_server_forbids_where_it_is_missing_reads_as_missing(index_root, tmp_path, capsys):
    """An index on S3 behind https:// answers 403 for a file it lacks: a question whose SimHash
    shard of one block holds no entry (most questions) ended in aiohttp's ClientResponseError
    (exit 1), where a 404 reads as absent. A 403 reads as absent too."""
    root = tmp_path / "site"
    shutil.copytree(index_root, root)
    h, k = simhash64(QUESTIONS[0]), 3
    (root / shard_path(k, 0, blocks(k)[0], h)).unlink()  # the question's shard of block 0
    httpd = IndexServer("127.0.0.1", 0, partial(ForbiddenWhenMissing, directory=str(root)), True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        assert IndexReader.open(url).read("no/such/file.json") is None
        argv = ["query", url, "--question", QUESTIONS[0], "--n", "1", "--json"]
        code, out, err = run_cli(argv, capsys)
        assert (code, err) == (0, ""), err
        assert json.loads(out)["matches"][0]["index"] == 1
        # A private bucket's root reads as missing too: the message says it may be refused.
        (root / "index.json").unlink()
        code, _, err = run_cli(["query", url, "--topic", "gone"], capsys)
        assert code == 1 and err == (
            f"mdindex query: {url}/ holds no index: it has no index.json (or the server refused it:"
            " a 403 reads as missing)\n"
        ), err
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_serve_sends_cors_and_answers_ranges(index_root, server):
    url = f"{server}/{TOPIC}/index.json"
    body = (index_root / TOPIC / "index.json").read_bytes()
    full = requests.get(url, timeout=10)
    assert full.status_code == 200 and full.content == body
    assert full.headers["Access-Control-Allow-Origin"] == "*"
    assert full.headers["Accept-Ranges"] == "bytes"
    assert full.headers["Content-Type"] == "application/json"
    part = requests.get(
        url, headers={"Range": "bytes=2-9", "Origin": "https://x.example"}, timeout=10
    )
    assert part.status_code == 206 and part.content == body[2:10]
    assert part.headers["Content-Range"] == f"bytes 2-9/{len(body)}"
    assert part.headers["Access-Control-Allow-Origin"] == "*"
    assert "Content-Range" in part.headers["Access-Control-Expose-Headers"]
    tail = requests.get(url, headers={"Range": "bytes=-5"}, timeout=10)
    assert tail.status_code == 206 and tail.content == body[-5:]
    rest = requests.get(url, headers={"Range": f"bytes={len(body) - 3}-"}, timeout=10)
    assert rest.status_code == 206 and rest.content == body[-3:]
    bad = requests.get(url, headers={"Range": f"bytes={len(body)}-"}, timeout=10)
    assert bad.status_code == 416 and bad.headers["Content-Range"] == f"bytes */{len(body)}"
    backwards = requests.get(url, headers={"Range": "bytes=5-2"}, timeout=10)
    assert backwards.status_code == 200 and backwards.content == body  # invalid: ignored
    preflight = requests.options(
        url, headers={"Access-Control-Request-Headers": "range"}, timeout=10
    )
    assert preflight.status_code == 204
    assert "Range" in preflight.headers["Access-Control-Allow-Headers"]
    assert requests.get(f"{server}/nope.json", timeout=10).status_code == 404


def test_parse_range_cases():
    assert parse_range("bytes=0-0", 10) == (0, 0)
    assert parse_range("bytes=5-100", 10) == (5, 9)
    assert parse_range("bytes=-3", 10) == (7, 9)
    assert parse_range("bytes=0-1,4-5", 10) is None  # multiple ranges: whole file
    assert parse_range("items=0-1", 10) is None
    assert parse_range("bytes=5-2", 10) is None  # invalid (RFC 9110 14.2): ignored, was a 416
    for bad in ("bytes=10-", "bytes=-0", "bytes=10-12"):
        with pytest.raises(ValueError):
            parse_range(bad, 10)


@contextlib.contextmanager
def serve_command(root, *options: str, env: dict[str, str] | None = None):
    """`mdindex serve ROOT --port 0 [options]` in a child process: yields its base URL (from its
    banner) and the process; Ctrl-C (SIGINT) stops it after.

    The child sets SIGINT's default handler first: Python keeps a signal ignored that its parent
    ignored (a background job of a script ignores SIGINT, and `mdindex serve` started from one
    then ignores it: checked by hand), and a run of the suite started from such a job once saw
    a test of this time out."""
    main = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from jobs.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", main, "serve", str(root), "--port", "0", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        banner = proc.stdout.readline()
        yield banner.split(" at ")[1].split()[0].rstrip("/"), proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        finally:
            proc.kill()  # a no-op once it has exited; a server left running outlived the suite


@pytest.mark.timeout(120)
def test_mdindex_serve_command_serves_until_interrupted(index_root):
    """Ctrl-C (SIGINT) stops it with exit 0; `--search` answers questions at /_search."""
    with serve_command(index_root) as (base, proc):
        reply = requests.get(
            f"{base}/{TOPIC}/index.json", headers={"Range": "bytes=0-0"}, timeout=10
        )
        assert reply.status_code == 206 and reply.content == b"{"
        assert requests.get(f"{base}/_search?q=", timeout=10).status_code == 404  # static
    assert proc.returncode == 0
    with serve_command(index_root, "--search") as (base, proc):  # a question's 400: no model
        reply = requests.get(f"{base}/_search?q=x&n=0", timeout=10)
        assert reply.status_code == 400 and "n: must be at least 1" in reply.json()["error"]
    assert proc.returncode == 0


def peak_rss(pid: int) -> int:
    """The peak resident memory of a process so far, in bytes (VmHWM)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE).group(1)) * 1024


@pytest.mark.timeout(120)
def test_serve_streams_a_range_instead_of_holding_it_in_memory(tmp_path):
    """`Range: bytes=0-` of a 400 MB shard added 410 MB to the server's memory per request (the
    span was read whole into a buffer); now it is copied from the file in pieces."""
    size = 128 * 2**20
    with (tmp_path / "shard.parquet").open("wb") as handle:
        handle.truncate(size)  # sparse: no disk, read back as zeros
    with serve_command(tmp_path) as (base, proc):
        assert requests.get(f"{base}/shard.parquet", headers={"Range": "bytes=0-0"}).content
        before = peak_rss(proc.pid)
        headers = {"Range": "bytes=0-"}
        with requests.get(f"{base}/shard.parquet", headers=headers, stream=True) as reply:
            assert reply.status_code == 206
            assert reply.headers["Content-Range"] == f"bytes 0-{size - 1}/{size}"
            received = sum(len(piece) for piece in reply.iter_content(2**20))
        grown = peak_rss(proc.pid) - before
    assert received == size and grown < 32 * 2**20, grown


@pytest.mark.timeout(120)
def test_serve_answers_404_for_a_file_deleted_as_it_is_opened(tmp_path):
    """A build deletes stale chunk files while readers fetch them: a file seen by `isfile` and
    gone at its open dropped the connection of a Range request (no answer, a traceback on the
    server's stderr). The fault removes each `gone-*` file as the server opens it."""
    (tmp_path / "_chunks").mkdir()
    for name in ("gone-1.md", "gone-2.md", "kept.md"):
        (tmp_path / "_chunks" / name).write_text("chunk text")
    env = fault_environment("vanish", str(tmp_path), match="gone-")
    with serve_command(tmp_path, env=env) as (base, _):
        ranged = {"Range": "bytes=0-4"}
        assert requests.get(f"{base}/_chunks/gone-1.md", headers=ranged).status_code == 404
        assert requests.get(f"{base}/_chunks/gone-2.md").status_code == 404
        kept = requests.get(f"{base}/_chunks/kept.md", headers=ranged)
        assert kept.status_code == 206 and kept.content == b"chunk"
    assert not (tmp_path / "_chunks" / "gone-1.md").exists()  # the fault did act


def test_serve_is_quiet_about_a_client_that_cancels_its_download(tmp_path, capsys):
    """A client that closed its connection mid-answer (a cancelled download, a reader that had
    the bytes it wanted) printed a 20-line ConnectionResetError traceback on the server's stderr
    for each such request; the server goes on quietly."""
    with (tmp_path / "shard.parquet").open("wb") as handle:
        handle.truncate(64 * 2**20)  # sparse: more than the sockets' buffers hold
    with serving(tmp_path) as base:
        port = int(base.rsplit(":", 1)[1])
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", port)) as client:
                client.sendall(b"GET /shard.parquet HTTP/1.1\r\nHost: x\r\n\r\n")
                assert client.recv(1024).startswith(b"HTTP/1.0 200")
                linger = (1).to_bytes(4, sys.byteorder) + (0).to_bytes(4, sys.byteorder)
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)  # close: a reset
        while any(t.name.endswith("(process_request_thread)") for t in threading.enumerate()):
            time.sleep(0.05)  # until each handler has ended and said what it says
        assert requests.get(f"{base}/shard.parquet", headers={"Range": "bytes=0-0"}).content
    assert "Traceback" not in capsys.readouterr().err


def ipv6_loopback() -> bool:
    """Whether this machine can bind ::1."""
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback here")
@pytest.mark.timeout(120)
def test_mdindex_serve_binds_an_ipv6_host(index_root):
    """`--host ::1` failed ("Address family for hostname not supported": the server was IPv4
    only); the family now comes from the host, as `python -m http.server` picks it."""
    with serve_command(index_root, "--host", "::1") as (base, _):
        assert base.startswith("http://[::1]:")
        reply = requests.get(f"{base}/{TOPIC}/index.json", timeout=10)
        assert reply.status_code == 200 and reply.content == index_json_bytes(index_root)


@pytest.mark.timeout(120)
def test_mdindex_serve_on_every_address_names_a_url_a_browser_opens(index_root):
    """`--host 0.0.0.0` printed http://0.0.0.0:PORT/, an address to listen on, which browsers
    refuse to open (Chrome's Private Network Access), and nothing of the folder being open to the
    network. It names the loopback URL and says who can read the folder."""
    with serve_command(index_root, "--host", "0.0.0.0") as (base, _):
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", base), base
        reply = requests.get(f"{base}/{TOPIC}/index.json", timeout=10)
        assert reply.status_code == 200 and reply.content == index_json_bytes(index_root)


def test_the_serve_banner_names_the_root_index_a_browser_can_open(index_root, tmp_path):
    """The banner's URL, the folder's, is 404 (every folder is): a browser opened from it showed
    "File not found". It names the root's index.json too, where the folder has one."""
    text = banner(str(index_root), "127.0.0.1", 8000)
    assert text == (
        f"serving {index_root} at http://127.0.0.1:8000/ "
        "(its index: http://127.0.0.1:8000/index.json; Ctrl-C stops)"
    )
    assert (
        banner(str(tmp_path), "::1", 8000)
        == f"serving {tmp_path} at http://[::1]:8000/ (Ctrl-C stops)"
    )


def test_serve_validators_and_if_range(tmp_path):
    """Every answer of a file carries its ETag and Last-Modified; preconditions come before the
    range (a 304 whether or not a range is asked); a range whose If-Range no longer matches (the
    file was replaced: index.json and shards are, in place) gets the whole new file, 200, never
    a splice of old and new bytes."""
    path = tmp_path / "index.json"
    path.write_bytes(b'{"version": 1}')
    with serving(tmp_path) as base:
        url = f"{base}/index.json"
        full = requests.get(url, timeout=10)
        etag, modified = full.headers["ETag"], full.headers["Last-Modified"]
        assert full.status_code == 200 and etag.startswith('"') and modified.endswith(" GMT")
        part = requests.get(url, headers={"Range": "bytes=0-1"}, timeout=10)
        assert part.status_code == 206 and part.content == b'{"'
        assert (part.headers["ETag"], part.headers["Last-Modified"]) == (etag, modified)
        for validator in (etag, modified):
            reply = requests.get(url, headers={"Range": "bytes=0-1", "If-Range": validator})
            assert reply.status_code == 206 and reply.content == b'{"', validator
        future, past = "Fri, 01 Jan 2100 00:00:00 GMT", "Thu, 01 Jan 1970 00:00:00 GMT"
        for conditions in ({"If-None-Match": etag}, {"If-None-Match": f"W/{etag}, \"x\""},
                           {"If-Modified-Since": future}):  # fmt: skip
            for ranged in ({}, {"Range": "bytes=0-1"}):
                reply = requests.get(url, headers={**conditions, **ranged}, timeout=10)
                assert reply.status_code == 304 and reply.content == b"", (conditions, ranged)
                assert (reply.headers["ETag"], reply.headers["Last-Modified"]) == (etag, modified)
        since = requests.get(url, headers={"If-Modified-Since": past, "Range": "bytes=0-1"})
        assert since.status_code == 206
        changed = requests.get(url, headers={"If-None-Match": '"other"'}, timeout=10)
        assert changed.status_code == 200 and changed.content == b'{"version": 1}'

        replacement = tmp_path / "index.json.new"
        replacement.write_bytes(b'{"version": 22}')
        os.utime(replacement, (os.stat(path).st_mtime + 5,) * 2)
        os.replace(replacement, path)
        for stale in (etag, modified, f"W/{etag}", past):
            for span in ("bytes=0-1", "bytes=100-"):  # a stale If-Range: no 206, no 416 either
                reply = requests.get(url, headers={"Range": span, "If-Range": stale}, timeout=10)
                assert reply.status_code == 200, (stale, span)
                assert reply.content == b'{"version": 22}' and reply.headers["ETag"] != etag


def test_mdindex_serve_rejects_a_missing_directory(tmp_path, capsys, monkeypatch):
    """A remote root is named as no local folder ("not a directory: s3://b/out"); a folder given
    as query and build take one (a file:// URI, `~/site` quoted) is served: it was "not a
    directory" too. Served here means past that check: it then meets a port already taken."""
    code, _, err = run_cli(["serve", str(tmp_path / "absent"), "--port", "0"], capsys)
    assert code == 2 and "not a directory" in err
    code, _, err = run_cli(["serve", "s3://b/out", "--port", "0"], capsys)
    assert (code, err) == (2, "mdindex serve: s3://b/out is no local folder: serve serves one "
                              "(copy the index to one first); mdindex query s3://b/out reads it "
                              "where it is\n")  # fmt: skip
    (tmp_path / "site").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        for folder in (f"file://{tmp_path}/site", "~/site"):
            code, _, err = run_cli(["serve", folder, "--port", port], capsys)
            assert code == 2 and "Address already in use" in err, (folder, err)


def test_mdindex_serve_names_an_address_it_cannot_listen_on(tmp_path, capsys):
    """A port in use was "[Errno 98] Address already in use" and a mistyped host "[Errno -2] Name
    or service not known", naming neither."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        for host, error in [("127.0.0.1", "Address already in use"), ("nohost.invalid", "")]:
            code, _, err = run_cli(["serve", str(tmp_path), "--host", host, "--port", port], capsys)
            assert code == 2 and err.count("\n") == 1, err
            assert err.startswith(f"mdindex serve: cannot listen on {host} port {port}: "), err
            assert error in err


def test_query_an_index_on_s3(index_root, s3_server, capsys):
    # conftest's make_bucket sends LocationConstraint us-east-1, which moto rejects: no region here.
    fs = s3fs.S3FileSystem(skip_instance_cache=True, key="testing", secret="testing",
                           client_kwargs={"endpoint_url": s3_server.endpoint_url})  # fmt: skip
    fs.mkdir("mdindex-query")
    bucket = "s3://mdindex-query"
    s3_server.filesystem().put(str(index_root) + "/", f"{bucket}/site/", recursive=True)
    options = json.dumps(s3_server.storage_options)
    argv = ["query", f"{bucket}/site", "--topic", TOPIC, "--n", "2", "--show", "--json",
            "--storage-options", options]  # fmt: skip
    code, out, _ = run_cli(argv, capsys)
    assert code == 0
    main = {s["source"]: s for s in json.loads(out)["sources"]}["golden-reference"]
    entry = index_json(index_root)["_embedded"]["chunks"]["golden-reference"]
    assert [c["index"] for c in main["chunks"]] == entry["stripe_order"][:2]
    assert main["chunks"][0]["href"].startswith("s3://mdindex-query/site/")
    first = entry["items"][main["chunks"][0]["index"]]["href"]
    assert main["chunks"][0]["text"] == (index_root / TOPIC / first).read_text()


def test_query_of_a_bucket_that_does_not_exist_says_so(s3_server, capsys):
    """A root in a bucket that does not exist said it "holds no index": a bucket mistyped or not
    yet made reads as an index not yet built."""
    argv = ["query", "s3://no-such-bucket/site", "--topic", TOPIC,
            "--storage-options", json.dumps(s3_server.storage_options)]  # fmt: skip
    assert run_cli(argv, capsys) == (
        1,
        "",
        "mdindex query: s3://no-such-bucket/site: no such bucket\n",
    )


def test_baselines_follow_the_stripe_order_when_more_chunks_are_asked():
    from indexing.client import select_chunks

    def item(i):
        return {"index": i, "href": f"_chunks/s-{i}.md", "title": f"t{i}"}

    index = {
        "id": "t",
        "_embedded": {
            "chunks": {
                "single": {"baseline_conceptual": 0, "stripe_order": [], "items": [item(0)]},
                "dual": {
                    "baseline_conceptual": 0,
                    "baseline_technical": 1,
                    "stripe_order": [2, 4, 3],
                    "stripe_order_technical": [4, 3, 2],
                    "items": [item(i) for i in range(5)],
                },
            }
        },
    }
    picked = {s.source: [c["index"] for c in s.items] for s in select_chunks(index, 2)}
    assert picked == {"single": [0], "dual": [2, 4]}  # the seed's behaviour within the stripes
    picked = {s.source: [c["index"] for c in s.items] for s in select_chunks(index, 10)}
    assert picked == {"single": [0], "dual": [2, 4, 3, 0, 1]}
    [technical] = select_chunks(index, 10, source="dual", technical=True)
    assert [c["index"] for c in technical.items] == [4, 3, 2, 1, 0]  # its own baseline first


def test_query_embedder_loads_the_model_once_per_reader(index_root, monkeypatch):
    import embedding

    loads = []
    real = embedding.load_embedder

    def counting_load(*args, **kwargs):
        loads.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(embedding, "load_embedder", counting_load)
    embed = query_embedder(IndexReader.open(str(index_root)))
    first = embed("minilm", "How do I install the tool?")
    second = embed("minilm", "What does part seven explain?")
    assert len(loads) == 1
    assert first.shape == second.shape == (384,) and not np.array_equal(first, second)


def test_a_question_to_an_fp16_index_on_a_cpu_runs_in_the_cpus_own_dtype(
    index_root, tmp_path, monkeypatch
):
    """An index built on GPUs in fp16 (configs/cluster-gpu.yaml) had its questions embedded on a
    CPU under fp16 autocast: 3.8x the time of fp32 on the AMD EPYC. The CPU's own dtype now
    (`auto`: bf16 where it has AVX-512 BF16 or AMX, else fp32); the other options as recorded."""

    root = tmp_path / "index"
    shutil.copytree(index_root, root)
    options = {"dtype": "fp16", "pooling": "mean", "normalize": True}
    (root / "_index").mkdir(exist_ok=True)
    (root / "_index" / "model.json").write_text(json.dumps({"model": "minilm", "options": options}))
    loaded = loaded_models(monkeypatch)
    embed = query_embedder(IndexReader.open(str(root)))
    assert embed("minilm", "How do I install the tool?").shape == (384,)
    assert loaded[0].settings.dtype in ("fp32", "bf16") and loaded[0].settings.pooling == "mean"


def damage(root, relpath: str, how: str) -> None:
    """Damage one file of an index copy: `truncate` it, write `how` over it, or make it a `dir`."""
    path = root / relpath
    if how == "truncate":
        path.write_bytes(path.read_bytes()[:40])
    elif how == "dir":
        path.unlink()
        path.mkdir()
    else:
        path.write_bytes(how.encode("latin-1"))


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("command", [["query", "--topic", TOPIC], ["report"]])
def test_an_empty_root_is_bad_usage_not_the_current_directory(command, index_root):
    """`mdindex query "$OUT"` with OUT unset read the index in the current directory, exit 0."""
    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", command[0], "", *command[1:]],
        capture_output=True, text=True, timeout=60, cwd=index_root,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"mdindex {command[0]}: an empty root (an unset variable?); name a folder or URI\n"
    )


@pytest.mark.parametrize("command", [["query", "--topic", TOPIC], ["report"]])
def test_an_ftp_root_reaches_its_host_and_a_refusal_names_it(command):
    """`ftp://HOST:PORT/x` lost its host on the way to fsspec (which takes it from the URL only
    in `url_to_fs`): a TypeError traceback ("missing 1 required positional argument: 'host'").
    Now the client connects to the URL's host and port; nothing listens there: one line."""
    root = f"ftp://127.0.0.1:{free_port()}/index"
    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", command[0], root, *command[1:]],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"mdindex {command[0]}: {root}: ConnectionRefusedError: [Errno 111] Connection refused\n"
    )


def test_a_query_to_a_server_that_never_answers_ends_naming_it(tmp_path, capsys, monkeypatch):
    """A server that took the connection and sent nothing held `mdindex query` 5 minutes a
    request (aiohttp's default), then ended it with a TimeoutError naming nothing. A stall of
    `HTTP_STALL_S` now ends it, exit 1, naming the root."""
    monkeypatch.setattr(client, "HTTP_STALL_S", 1)
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen()
        root = f"http://127.0.0.1:{mute.getsockname()[1]}"
        done = []
        asking = threading.Thread(
            target=lambda: done.append(run_cli(["query", root, "--topic", TOPIC], capsys)),
            daemon=True,
        )
        asking.start()
        asking.join(timeout=20)
    assert done, "the query still waits"
    code, out, err = done[0]
    assert (code, out) == (1, "") and err.startswith(f"mdindex query: {root}: "), err


def test_a_stall_limit_in_seconds_is_taken_from_the_storage_options(tmp_path, capsys):
    """JSON cannot spell aiohttp's ClientTimeout, so `--storage-options '{"client_kwargs":
    {"timeout": 1}}'`, the way the README gave to change the stall limit, ended at once in
    aiohttp's "timeout parameter cannot be of <class 'int'> type" (exit 1). A number is the
    stall limit in seconds."""
    options = json.dumps({"client_kwargs": {"timeout": 1}})
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen()
        root = f"http://127.0.0.1:{mute.getsockname()[1]}"
        argv = ["query", root, "--topic", TOPIC, "--storage-options", options]
        done = []
        asking = threading.Thread(target=lambda: done.append(run_cli(argv, capsys)), daemon=True)
        asking.start()
        asking.join(timeout=20)
    assert done, "the query still waits"
    code, out, err = done[0]
    assert (code, out) == (1, "") and err.startswith(f"mdindex query: {root}: "), err
    assert "Timeout" in err, err


def test_query_names_what_is_damaged_or_unreachable_in_one_line(
    index_root, tmp_path, capsys, monkeypatch
):
    """Each case ended in a raw traceback (NotADirectoryError, IsADirectoryError, TypeError,
    aiohttp's ClientConnectorError; a SimHash manifest or shard of JSON in another shape: KeyError,
    TypeError) or a line that named nothing ("utf-8", "7", a JSON parser's position): now one line
    naming the file or URL, exit 1."""
    entry = index_json(index_root)["_embedded"]["chunks"]["faq"]
    chunk = f"{TOPIC}/{entry['items'][0]['href']}"
    show = ["--topic", TOPIC, "--show"]
    question = ["--question", "zebra migration patterns"]  # no stored prompt near it
    manifest, k = "_index/simhash/manifest.json", 3  # write_index's k
    shard = shard_path(k, 0, blocks(k)[0], simhash64(question[1]))  # the first one it reads
    # the question's own hash, so that it matches: a source that is a list was a TypeError
    unhashable = json.dumps({"entries": [[f"{simhash64(question[1]):016x}", TOPIC, [], 0]]})
    cases = [
        (f"{TOPIC}/index.json", "[]", show, f"{TOPIC}/index.json is not an mdindex index"),
        (f"{TOPIC}/index.json", "null", show, f"{TOPIC}/index.json is not an mdindex index"),
        (f"{TOPIC}/index.json", "truncate", show, f"{TOPIC}/index.json is not JSON: "),
        (f"{TOPIC}/index.json", "dir", show, f"Is a directory: '{tmp_path}"),
        (chunk, "\xff\xfe bad", show, f"chunk file file://{tmp_path}"),
        (chunk, "dir", show, f"Is a directory: '{tmp_path}"),
        ("_index/simhash/manifest.json", "truncate", question, "simhash/manifest.json: "),
        *[
            (manifest, how, question, "manifest.json: not a SimHash table: no int 'k'")
            for how in ("[]", "null", "{}")
        ],
        *[
            (shard, how, question, f"{shard}: not a SimHash table: ")
            for how in ("[]", '{"entries": [[1]]}', '{"entries": [["ab", "t"]]}', unhashable)
        ],
        ("_index/chunks/guides~sintro.parquet", "truncate", question, "is not a chunk table"),
    ]
    for number, (relpath, how, options, expected) in enumerate(cases):
        copy = tmp_path / f"case{number}"
        shutil.copytree(index_root, copy)
        damage(copy, relpath, how)
        code, out, err = run_cli(["query", str(copy), *options], capsys)
        assert (code, out) == (1, ""), (relpath, how, err)
        assert err.startswith("mdindex query: ") and err.count("\n") == 1, err
        assert expected in err and (relpath.rsplit("/", 1)[-1] in err), (expected, err)
    code, _, err = run_cli(["query", str(index_root / chunk), *show], capsys)  # a file
    assert code == 1 and f"Not a directory: '{index_root / chunk}/" in err
    down = f"http://127.0.0.1:{free_port()}"
    code, _, err = run_cli(["query", down, *show], capsys)
    assert code == 1 and err.startswith(f"mdindex query: {down}: ClientConnectorError: ")
    # An S3 endpoint gone, and no credentials: botocore's errors were tracebacks.
    without_aws_credentials(monkeypatch, tmp_path)
    retries = {"retries": {"max_attempts": 1}}
    options = {"client_kwargs": {"endpoint_url": down}, "config_kwargs": retries}
    keys = {"key": "testing", "secret": "testing"}
    for given, error in [(keys, "EndpointConnectionError: "), ({}, "NoCredentialsError: ")]:
        s3 = [
            "query",
            "s3://gone/out",
            *show,
            "--storage-options",
            json.dumps({**options, **given}),
        ]
        code, _, err = run_cli(s3, capsys)
        assert code == 1 and err.startswith(f"mdindex query: s3://gone/out: {error}"), err


@pytest.mark.parametrize("s3_behind", ["refuses the credentials"], indirect=True)
def test_query_on_a_store_that_refuses_the_credentials_names_the_root(s3_behind, capsys):
    """Credentials the store refuses gave "mdindex query: Forbidden", naming no root: which of a
    platform's buckets, or which endpoint, refused them was not said."""
    server, _ = s3_behind
    bucket = server.make_bucket("refused-query")
    root = f"{bucket}/index"
    options = json.dumps(server.storage_options)
    for asked in (["--topic", TOPIC], ["--question", "How do I build?"]):
        code, out, err = run_cli(["query", root, *asked, "--storage-options", options], capsys)
        assert (code, out) == (1, "") and err.count("\n") == 1, err
        assert err.startswith(f"mdindex query: {root}: PermissionError: "), err


DELETE = object()
INDEX = f"{TOPIC}/index.json"
AT_TOPIC = ["--topic", TOPIC]
FAQ = ("_embedded", "chunks", "faq")
ZEBRA = ["--question", "zebra migration patterns"]  # no stored prompt near it: embedding search
MODEL = "sentence-transformers/all-MiniLM-L6-v2"  # the fixture's chunk tables name it


def edited(doc, path: tuple, value):
    """`doc` with the member at `path` (keys and list indexes) set to `value`, or deleted when
    `value` is DELETE; `value` itself for an empty path."""
    if not path:
        return value
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if value is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    "relpath, path, value, options, expected",
    [
        ("index.json", (), {"_embedded": {}}, ZEBRA, "index.json is damaged: the document has no"),
        ("index.json", ("_embedded", "topics", 0, "id"), DELETE, ZEBRA,
         "index.json is damaged: _embedded.topics[0] has no string 'id'"),
        (INDEX, ("title",), DELETE, AT_TOPIC,
         f"{INDEX} is damaged: the document has no string 'title'"),
        (INDEX, ("title",), "Guides \ud800", AT_TOPIC,
         f"{INDEX} is damaged: the document has no string 'title'"),
        (INDEX, (*FAQ, "items", 0, "title"), "\udfff", ["--question", QUESTIONS[0], "--json"],
         "is damaged: _embedded.chunks['faq'].items[0] has no string 'title'"),
        (INDEX, ("_embedded", "chunks", "x\udc80"), {"stripe_order": [], "baseline_conceptual": 0,
         "items": [{"index": 0, "href": "_chunks/x.md", "title": "X"}]}, AT_TOPIC,
         "is damaged: _embedded.chunks['x\\udc80'] is named with no text"),
        (INDEX, ("_embedded", "chunks"), [], AT_TOPIC,
         "is damaged: _embedded has no object 'chunks'"),
        (INDEX, (*FAQ, "stripe_order"), DELETE, AT_TOPIC,
         "is damaged: _embedded.chunks['faq'] has no list of ints 'stripe_order'"),
        (INDEX, (*FAQ, "stripe_order"), [99], AT_TOPIC,
         "is damaged: _embedded.chunks['faq'].stripe_order names chunks [99] that its items lack"),
        (INDEX, (*FAQ, "baseline_conceptual"), None, AT_TOPIC,
         "is damaged: _embedded.chunks['faq'] has no int 'baseline_conceptual'"),
        (INDEX, (*FAQ, "items", 0, "href"), DELETE, AT_TOPIC,
         "is damaged: _embedded.chunks['faq'].items[0] has no string 'href'"),
        (INDEX, (*FAQ, "items", 0, "index"), "x", AT_TOPIC,
         "is damaged: _embedded.chunks['faq'].items[0] has no int 'index'"),
        (INDEX, (*FAQ, "items", 0, "index"), True, AT_TOPIC,
         "is damaged: _embedded.chunks['faq'].items[0] has no int 'index'"),
        (INDEX, (*FAQ, "stripe_order"), [False], AT_TOPIC,
         "is damaged: _embedded.chunks['faq'] has no list of ints 'stripe_order'"),
        (INDEX, (*FAQ, "items", 0, "prompt_hashes"), "x", ["--question", QUESTIONS[0]],
         "is damaged: _embedded.chunks['faq'].items[0] has no list of ints 'prompt_hashes'"),
        (INDEX, (*FAQ, "items", 0, "href"), "_chunks/new%0Aline-0.md", [*AT_TOPIC, "--show"],
         f"{TOPIC}/_chunks/new\\nline-0.md is missing"),
        (INDEX, (*FAQ, "items", 0, "href"), "../../../hosts", [*AT_TOPIC, "--show"],
         f"{TOPIC}/../../../hosts leads out of the index: it is damaged"),
        ("_index/model.json", (), {"model": MODEL, "options": []}, ZEBRA,
         "_index/model.json is damaged: the document has no object 'options'"),
        ("_index/model.json", (), {"model": MODEL, "options": {"query_prefix": 5}}, ZEBRA,
         "_index/model.json is damaged: options has no string 'query_prefix'"),
    ],
)  # fmt: skip
def test_query_names_the_field_of_a_document_of_another_shape_in_one_line(
    index_root, tmp_path, capsys, relpath, path, value, options, expected
):
    """A JSON document the reader uses of a shape the build never writes ended in a traceback
    (KeyError, TypeError, AttributeError: a topic link without `id`, a topic without `title`, a
    source without `stripe_order`, model.json's `options` a list) or a line naming no file (a
    stripe order naming a chunk its items lack; a recorded dtype of "x"), and a file named with a
    line break took two lines; JSON's `true` passed for an int (Python's 1), and a title of a
    lone surrogate's escape ("\\ud800") printed a UnicodeEncodeError traceback: now one line
    naming the file and the field, exit 1."""
    root = tmp_path / "index"
    shutil.copytree(index_root, root)
    document = root / relpath
    doc = edited(json.loads(document.read_bytes()) if path else None, path, value)
    document.write_text(json.dumps(doc))
    code, out, err = run_cli(["query", str(root), *options], capsys)
    assert (code, out) == (1, ""), err
    assert err.startswith("mdindex query: ") and err.count("\n") == 1, err
    assert f"{root}/" in err and expected in err, err


@pytest.mark.parametrize(
    ("relpath", "data", "options", "expected"),
    [
        (INDEX, b"[" * 100_000, AT_TOPIC, f"{INDEX} is not JSON: maximum recursion"),
        ("_index/simhash/manifest.json", b"[" * 100_000, ["--question", QUESTIONS[0]],
         "_index/simhash/manifest.json: maximum recursion"),
        (INDEX, None, [*AT_TOPIC, "--json"],
         f"{INDEX} is damaged: _embedded.chunks.faq.items[0].keywords[0].name is no text"),
    ],
)  # fmt: skip
def test_a_document_nested_too_deep_or_holding_no_text_is_named_in_one_line(
    index_root, tmp_path, capsys, relpath, data, options, expected
):
    """An index file nested deeper than the parser goes ended in a RecursionError traceback, and a
    field the reader does not check (a keyword's name) holding JSON's escape of a lone surrogate
    ("\\ud800") in a UnicodeEncodeError traceback of `--json`: each is one line naming the file,
    exit 1."""
    root = tmp_path / "index"
    shutil.copytree(index_root, root)
    if data is None:
        doc = json.loads((root / relpath).read_bytes())
        edited(doc, (*FAQ, "items", 0, "keywords"), [{"name": "\ud800", "score": 1}])
        data = json.dumps(doc).encode()
    (root / relpath).write_bytes(data)
    code, out, err = run_cli(["query", str(root), *options], capsys)
    assert (code, out) == (1, ""), err
    assert err.startswith(f"mdindex query: {root.as_uri()}/{expected}"), err
    assert err.count("\n") == 1, err


def test_a_recorded_option_the_loader_refuses_is_named_with_its_file(index_root, tmp_path):
    """model.json's `"dtype": "x"` ended `mdindex query` with "dtype must be one of fp32, bf16,
    fp16; got 'x'", naming no file."""
    root = tmp_path / "index"
    shutil.copytree(index_root, root)
    settings = root / "_index/model.json"
    settings.write_text(json.dumps({"model": "minilm", "options": {"dtype": "x"}}))
    with pytest.raises(ValueError) as raised:
        query_embedder(IndexReader.open(str(root)))("minilm", "How do I install the tool?")
    assert str(raised.value) == (
        "dtype must be one of fp32, bf16, fp16; got 'x' "
        f"(loading 'minilm' with the options of file://{settings})"
    )


def _nan_vectors(table: pa.Table) -> pa.Table:
    """`table` with every vector NaN (a model that overflowed, written by something else)."""
    vectors = table["embedding"].type
    nans = pa.array([[float("nan")] * vectors.list_size] * len(table), vectors)
    return table.set_column(table.schema.get_field_index("embedding"), "embedding", nans)


@pytest.mark.parametrize(
    "damage_table, expected",
    [
        (lambda t: t.drop_columns(["href"]), "no column 'href'"),
        (lambda t: t.set_column(t.schema.get_field_index("href"), "href",
                                pa.nulls(len(t), pa.string())), "column 'href' holds a null"),
        (lambda t: t.set_column(t.schema.get_field_index("embedding"), "embedding",
                                t["embedding"].cast(pa.list_(pa.float32()))),
         "column 'embedding' is of type list<element: float>"),
        (_nan_vectors, "column 'embedding' holds a NaN or an infinity"),
    ],
)  # fmt: skip
def test_query_names_a_chunk_table_of_another_shape_in_one_line(
    index_root, tmp_path, capsys, damage_table, expected
):
    """A chunk table without a column a search reads gave Arrow's error over many lines (the
    schema); a null href or source, or vectors in lists of no fixed width, a traceback (TypeError,
    AttributeError); NaN vectors exit 0 with `"score": NaN` (not JSON): now one line naming the
    shard, exit 1."""
    root = tmp_path / "index"
    shutil.copytree(index_root, root)
    shard = root / "_index/chunks/guides~sintro.parquet"
    pq.write_table(damage_table(pq.read_table(shard)), shard)
    code, out, err = run_cli(["query", str(root), *ZEBRA], capsys)
    assert (code, out) == (1, ""), err
    assert err == f"mdindex query: file://{shard} is not a chunk table: {expected}\n"


def test_chunk_tables_of_two_widths_are_named_not_joined(index_root, tmp_path):
    """Two topics' shards of other vector widths (built with other models) ended in Arrow's
    "Schema at index 1 was different" and both schemas over many lines, naming no file."""
    from indexing.client import chunk_tables
    from indexing.paths import chunk_table_path

    root = tmp_path / "index"
    shutil.copytree(index_root, root)
    table = pq.read_table(root / chunk_table_path(TOPIC))
    width = table["embedding"].type.list_size
    wider = pa.array([[1.0] * (width + 1)] * len(table), pa.list_(pa.float32(), width + 1))
    other = root / chunk_table_path("other")
    pq.write_table(table.set_column(table.schema.get_field_index("embedding"), "embedding", wider),
                   other)  # fmt: skip
    with pytest.raises(ValueError) as raised:
        chunk_tables(IndexReader.open(str(root)), [TOPIC, "other"])
    assert str(raised.value) == (
        f"file://{other} holds {width + 1}-dimensional vectors of {MODEL!r}, "
        f"file://{root / chunk_table_path(TOPIC)} {width}-dimensional vectors of {MODEL!r}"
    )


@pytest.mark.timeout(120)
def test_question_walks_a_topic_cycle_once_and_names_a_vector_width_mismatch(tmp_path, capsys):
    """A root index.json linking to itself made `--question` walk for ever; a chunk table of 3-wide
    vectors searched with MiniLM's 384 ended in numpy's matmul error."""
    out = build_topic(
        dataclasses.replace(topic_input(TOPIC, [source(f"{TOPIC}/a.md", [("A", "Alpha.")],
                                                       ranked_vectors([1.0]))]), model="minilm"),
        IndexSettings(),
    )  # fmt: skip
    write_index(tmp_path, [out])
    root = json.loads((tmp_path / "index.json").read_bytes())
    root["_embedded"]["topics"] += [{"id": ""}, {"id": TOPIC}, {"id": "guides"}]
    (tmp_path / "index.json").write_text(json.dumps(root))
    assert IndexReader.open(str(tmp_path)).topics() == [TOPIC]  # listed once
    code, out, err = run_cli(["query", str(tmp_path), "--question", "zebra migrations"], capsys)
    assert (code, out) == (1, "")
    assert "the index was built with 3-dimensional vectors, model 'minilm' gives 384" in err


def test_question_with_a_mistyped_topic_fails_as_the_topic_alone_does(index_root, capsys):
    """`--question` with a `--topic` that does not exist exited 0 with "0 matches"."""
    argv = ["query", str(index_root), "--topic", "guides/intr0"]
    for extra in ([], ["--question", QUESTIONS[0]]):
        code, out, err = run_cli([*argv, *extra], capsys)
        assert (code, out) == (1, "") and "no index.json for topic 'guides/intr0'" in err, extra


def test_a_topic_is_found_however_spelled_and_a_folder_of_topics_is_no_topic(index_root, capsys):
    """`--topic guides/intro/` (a shell's completion) read the topic, yet `--question` with it
    found nothing (exit 0, "none, 0 matches": matches and tables compared ids with the slash);
    `--topic guides`, a folder of topics, printed its title and nothing (exit 0)."""
    argv = ["query", str(index_root), "--n", "2", "--json"]
    code, expected, _ = run_cli([*argv, "--topic", TOPIC], capsys)
    assert code == 0
    reader = IndexReader.open(str(index_root))
    for spelled in (f"{TOPIC}/", f"/{TOPIC}", f"./{TOPIC}"):
        assert run_cli([*argv, "--topic", spelled], capsys) == (0, expected, ""), spelled
        # The library too: `/guides/intro` was "… leads out of the index: it is damaged".
        assert reader.topic(spelled) == reader.topic(TOPIC), spelled
        asked = [*argv, "--topic", spelled, "--question", QUESTIONS[0], "--n", "1"]
        code, out, _ = run_cli(asked, capsys)
        result = json.loads(out)
        assert code == 0 and result["method"] == "simhash", spelled
        assert [(m["topic"], m["index"]) for m in result["matches"]] == [(TOPIC, 1)], spelled
    for folder, below in (("guides", "['guides/intro']"), ("", "['guides']")):
        for extra in ([], ["--question", QUESTIONS[0]]):
            code, out, err = run_cli([*argv, "--topic", folder, *extra], capsys)
            assert (code, out) == (1, ""), (folder, extra)
            assert f"{folder!r} is a folder of topics, not a topic; it links {below}" in err


def test_a_question_leaves_out_simhash_matches_the_index_no_longer_holds(tmp_path, capsys):
    """While a build runs (or after one stopped), the corpus SimHash tables, rewritten at its end,
    lag the topics it has switched: a match naming a chunk since renumbered was answered with
    whatever chunk has that number now (a wrong chunk, "distance 0"), and one naming a topic
    since deleted ended the query (exit 1, "no index.json for topic"). Both are left out."""
    question = QUESTIONS[0]

    def topic(name: str, sections: list[tuple[str, str]], similarities: list[float]):
        vectors = ranked_vectors(similarities)
        sections = [(title, f"{body} ({name})") for title, body in sections]  # no copies of one
        doc = source(f"t/{name}/s.md", sections, vectors)
        inp = topic_input(f"t/{name}", [doc], questions=[question], question_vectors=vectors[-1:])
        return build_topic(inp, IndexSettings(prompt_threshold=0.99))

    first = [("Overview", "About it."), ("Install", "pip install it.")]
    write_index(tmp_path, [topic(name, first, [1.0, 0.6]) for name in ("one", "two", "three")])
    renumbered = topic("one", [("Release notes", "New."), *first], [1.0, 0.3, 0.6])
    assert [e[1:] for e in renumbered.prompt_entries] == [("t/one", "s", 2)]
    write_topic(tmp_path, renumbered)  # its switch; the tables still say chunk 1
    argv = ["query", str(tmp_path), "--question", question, "--json", "--n", "2"]
    code, out, _ = run_cli(argv, capsys)
    matches = [(m["topic"], m["index"], m["title"]) for m in json.loads(out)["matches"]]
    assert code == 0 and matches == [("t/three", 1, "Install"), ("t/two", 1, "Install")]
    shutil.rmtree(tmp_path / "t" / "three")  # deleted, its table entries not yet
    code, out, _ = run_cli([*argv[:-1], "1"], capsys)
    matches = [(m["topic"], m["index"], m["title"]) for m in json.loads(out)["matches"]]
    assert code == 0 and matches == [("t/two", 1, "Install")]


def test_the_topics_walk_leaves_out_a_linked_topic_not_yet_written(tmp_path):
    """While a build runs (or after one stopped) a folder's index.json can link a new topic whose
    own index.json is not written yet (README, Known limitations): `topics()`, which a question's
    embedding search walks, ended every such question (exit 1, "no index.json for topic"), as
    SimHash matches of it no longer do. The topic is left out; a root without index.json is
    still named."""
    doc = source("t/one/s.md", [("Overview", "About it.")], ranked_vectors([1.0]))
    write_index(tmp_path, [build_topic(topic_input("t/one", [doc]), IndexSettings())])
    index = json.loads((tmp_path / "t" / "index.json").read_bytes())
    index["_embedded"]["topics"].append({"id": "t/two"})  # linked, not yet written
    (tmp_path / "t" / "index.json").write_text(json.dumps(index))
    assert IndexReader.open(str(tmp_path)).topics() == ["t/one"]
    (tmp_path / "index.json").unlink()
    with pytest.raises(FileNotFoundError, match="holds no index"):
        IndexReader.open(str(tmp_path)).topics()


def test_an_empty_question_is_bad_usage(index_root, capsys):
    """`--question ""` (an unset variable in a script) listed the topic's chunks instead with
    `--topic` (exit 0), and without it failed on a topic named None (exit 1); a blank one searched
    for nothing and printed five chunks (exit 0). Now exit 2."""
    for question in ("", "  \n"):
        for topic in ([], ["--topic", TOPIC]):
            with pytest.raises(SystemExit) as stop:
                run_cli(["query", str(index_root), "--question", question, *topic], capsys)
            assert stop.value.code == 2, (question, topic)
            assert "argument --question: must not be empty" in capsys.readouterr().err


def test_a_question_that_is_not_utf8_is_bad_usage(index_root, capsys):
    """A question holding a byte that is not UTF-8 (`caf\\xe9` from a Latin-1 terminal, which
    Python's argv holds as a surrogate escape) went to the embedding, which refused it: exit 1,
    "embed: item 0 is not valid Unicode". It is bad usage (exit 2), naming --question."""
    with pytest.raises(SystemExit) as stop:
        run_cli(["query", str(index_root), "--question", "caf\udce9 au lait"], capsys)
    assert stop.value.code == 2
    assert "argument --question: is not UTF-8 text" in capsys.readouterr().err


def test_a_question_may_follow_the_root_as_words(index_root, capsys):
    """`mdindex query OUT "How do I install the tool?"` (or its words unquoted), as a newcomer first
    types it, was "unrecognized arguments" (exit 2): the words after the root are the question,
    as --question gives it. Both at once, or words that are blank, are bad usage."""
    root = str(index_root)
    flagged = run_cli(["query", root, "--question", QUESTIONS[0], "--n", "1", "--json"], capsys)
    assert flagged[0] == 0 and json.loads(flagged[1])["question"] == QUESTIONS[0]
    for words in ([QUESTIONS[0]], QUESTIONS[0].split()):
        assert run_cli(["query", root, *words, "--n", "1", "--json"], capsys) == flagged
    for argv, said in (
        ([root, "install", "--question", "install"], "give the question once"),
        ([root, " ", ""], "argument QUESTION: must not be empty"),
    ):
        code, out, err = run_cli(["query", *argv], capsys)
        assert (code, out) == (2, "") and said in err, err
    with pytest.raises(SystemExit) as stop:
        run_cli(["query", root, "caf\udce9"], capsys)
    assert stop.value.code == 2
    assert "argument QUESTION: is not UTF-8 text" in capsys.readouterr().err


def test_a_topic_or_source_that_is_not_utf8_is_bad_usage(server, capsys):
    """An index names its topics and sources in JSON, UTF-8 text alone. `--topic caf\\xe9` over
    http failed in a message naming nothing ("'utf-8' codec can't encode character '\\udce9'",
    exit 1): it is bad usage (exit 2), naming the argument, as for --question."""
    for flags in (["--topic", "caf\udce9"], ["--topic", TOPIC, "--source", "caf\udce9"]):
        with pytest.raises(SystemExit) as stop:
            run_cli(["query", server, *flags], capsys)
        assert stop.value.code == 2, flags
        assert f"argument {flags[-2]}: is not UTF-8 text" in capsys.readouterr().err


def test_a_file_uri_naming_localhost_is_the_local_path(index_root, capsys):
    """RFC 8089's `file://localhost/p` read the folder `localhost/p` under the current one: "holds
    no index", exit 1."""
    argv = ["--topic", TOPIC, "--json"]
    expected = run_cli(["query", str(index_root), *argv], capsys)
    assert run_cli(["query", f"file://localhost{index_root}", *argv], capsys) == expected


def test_a_root_that_names_an_index_json_is_bad_usage_naming_its_folder(index_root, server, capsys):
    """The URL a HAL client starts from, `OUT/index.json`, as the root: "[Errno 20] Not a
    directory" (over http: no index.json under it), exit 1; `IndexReader.open` took it."""
    for root in (f"{index_root}/index.json", f"{server}/index.json"):
        code, out, err = run_cli(["query", root, "--topic", TOPIC], capsys)
        parent = root.removesuffix("/index.json")
        named = f"{root} names an index.json; give the folder that holds it ({parent})"
        assert (code, out, err) == (2, "", f"mdindex query: {named}\n")
        # The library too: the local one read as "[Errno 20] Not a directory", the served one as
        # holding no index, and its questions' SimHash lookup found nothing (2026-12-01).
        with pytest.raises(ValueError, match=f"^{re.escape(named)}$"):
            IndexReader.open(root)


def test_a_folder_of_an_index_given_as_its_root_is_named_not_searched(index_root, capsys):
    """A folder inside an index given as its root (`OUT/guides` for `OUT`; `mdindex serve
    OUT/guides --search`) found none of its topics, which its index.json links by their ids from
    the index's root: `--question` answered "none, 0 matches" (exit 0), `/_search` 200 with no
    match, and `IndexReader.topics()` was [] (found by use, 2026-12-01)."""
    from indexing.cli import question_search

    folder = index_root / "guides"
    said = "is the folder 'guides' of an index, not its root: give the folder that holds 'guides'"
    with pytest.raises(FileNotFoundError, match=f"^{re.escape(folder.as_uri())} {said}$"):
        IndexReader.open(str(folder)).topics()
    code, out, err = run_cli(["query", str(folder), *ZEBRA], capsys)
    assert (code, out, err) == (1, "", f"mdindex query: {folder.as_uri()} {said}\n")
    with serving(folder, search=question_search(str(folder))) as base:
        for asked in ("q=zebra", "q=zebra&under=intro"):
            reply = requests.get(f"{base}/_search?{asked}", timeout=10)
            assert (reply.status_code, reply.json()) == (404, {"status": 404, "error": f"/ {said}"})
    assert run_cli(["query", str(folder), "--topic", "intro", "--n", "1"], capsys)[0] == 0


def test_a_linked_topic_whose_index_json_is_a_persons_own_fails_alone(tmp_path, capsys):
    """A person's own `index.json` in a topic folder, which the build leaves as it is
    (INDEX_JSON_FAILED, its parent still linking the topic), failed every question over the
    index: `query --question` exit 1 and `/_search` 500, "… is not an mdindex index", where the
    rest of the site was indexed (found by use, 2026-12-01). The walk leaves it out as it does a
    topic not yet written; asked by name, it is still named."""
    from indexing.cli import question_result

    out = build_topic(
        topic_input(TOPIC, [source(f"{TOPIC}/a.md", [("A", "Alpha.")], ranked_vectors([1.0]))]),
        IndexSettings(),
    )
    write_index(tmp_path, [out], k=6)
    root = json.loads((tmp_path / "index.json").read_bytes())
    root["_embedded"]["topics"] += [{"id": "notes"}, {"id": "list"}, {"id": "comma"}]
    (tmp_path / "index.json").write_text(json.dumps(root))
    owned = [("notes", '{"name": "my own"}'), ("list", "[]"), ("comma", '{"id": "x",}')]
    for folder, text in owned:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "index.json").write_text(text)
    reader = IndexReader.open(str(tmp_path))
    assert reader.topics() == [TOPIC]
    args = argparse.Namespace(question="zebra", topic=None, n=2, per_page=None, under=None,
                              all_copies=False, show=False)  # fmt: skip
    result = question_result(reader, args, embed=lambda model, q: np.array([1.0, 0.0, 0.0]))
    assert [(m["topic"], m["source"]) for m in result["matches"]] == [(TOPIC, "a")]
    code, out, err = run_cli(["query", str(tmp_path), "--topic", "notes"], capsys)
    assert (code, out) == (1, "") and "notes/index.json is not an mdindex index" in err


def test_query_text_output_writes_what_a_terminal_acts_on_as_escapes(index_root, tmp_path, capsys):
    """Titles and names come from the index (a remote one too): a title holding an ESC sequence
    (one clears the screen) or a line break reached the terminal as it was."""
    question = ["--question", QUESTIONS[0], "--n", "1"]
    code, out, _ = run_cli(["query", str(index_root), *question, "--json"], capsys)
    match = json.loads(out)["matches"][0]
    root = tmp_path / "index"
    shutil.copytree(index_root, root)
    doc = json.loads((root / INDEX).read_bytes())
    doc["title"] = "Intro\x1b[2J"
    for name, index in [("faq", 0), (match["source"], match["index"])]:
        items = doc["_embedded"]["chunks"][name]["items"]
        next(i for i in items if i["index"] == index)["title"] = "T\nfake: line"
    (root / INDEX).write_text(json.dumps(doc))
    for asked in ([*AT_TOPIC, "--source", "faq", "--n", "2"], question):
        code, out, _ = run_cli(["query", str(root), *asked], capsys)
        assert code == 0 and "\x1b" not in out, asked
        assert "T\\nfake: line" in out and "\nfake" not in out, out
    code, out, _ = run_cli(["query", str(root), *AT_TOPIC, "--n", "1"], capsys)
    assert out.startswith(f"Intro\\x1b[2J ({TOPIC})\n"), out


def test_a_root_that_holds_no_index_is_named_as_such(index_root, tmp_path, capsys):
    """A mistyped root was "no index.json for topic 'guides/intro' under file:///…/absent", as
    if the topic alone were missing (a question: "for topic ''")."""
    for root, asked in [(tmp_path / "absent", AT_TOPIC), (tmp_path, AT_TOPIC), (tmp_path, ZEBRA)]:
        code, out, err = run_cli(["query", str(root), *asked], capsys)
        assert (code, out) == (1, ""), asked
        assert err == f"mdindex query: {root.as_uri()} holds no index: it has no index.json\n"
    code, _, err = run_cli(["query", str(index_root), "--topic", "guides/intr0"], capsys)
    assert code == 1 and "no index.json for topic 'guides/intr0' under " in err


def test_a_root_of_no_known_protocol_is_bad_usage(capsys):
    """`s4://` and `S3://` were exit 1, and `s3:/b/out` (a slash missing) read a local folder
    `s3:` and found no index there (exit 1); `mdindex report` calls each bad usage (exit 2). An
    archive or a chain (`zip://out::file:///r.zip`) was exit 1, "Is a directory", naming the
    working directory."""
    for root, expected in [
        ("s4://b/out", "s4://b/out: Protocol not known: s4"),
        ("S3://b/out", "S3://b/out: Protocol not known: S3; did you mean s3://b/out?"),
        ("s3:/b/out", "s3:/b/out reads as a local folder s3:; did you mean s3://b/out?"),
        ("gs://b/out", "gs://b/out: Please install gcsfs to access Google Storage"),
        (
            "zip://out::file:///r.zip",
            "zip://out::file:///r.zip: an archive or a chain of filesystems (::) is no folder "
            "mdindex can list and write; unpack the archive into a folder or an s3:// prefix, and "
            "give that",
        ),
    ]:
        code, out, err = run_cli(["query", root, "--topic", TOPIC], capsys)
        assert (code, out, err) == (2, "", f"mdindex query: {expected}\n"), root


def test_a_question_with_source_or_technical_is_bad_usage(index_root, capsys):
    """A question's matches come from every source, in score order: `--source` and `--technical`
    were left out without a word (exit 0), as if they had narrowed the answer."""
    for flags in (["--source", "faq"], ["--technical"]):
        code, out, err = run_cli(
            ["query", str(index_root), "--topic", TOPIC, "--question", "install", *flags], capsys
        )
        assert (code, out) == (2, ""), flags
        assert err.startswith("mdindex query: --source and --technical pick a topic's chunks")
        assert err.count("\n") == 1


def test_storage_options_that_are_no_json_object_are_bad_usage(index_root, capsys):
    """`--storage-options '"x"'` ended in a TypeError traceback (fsspec's `**` of a string), and
    `'[]'` was taken as no options; both are now exit 2, as JSON that does not parse was, which
    now says why ("invalid json_object value" named a function of the code, not the mistake)."""
    for options in ('"x"', "[]", "3", "{'anon': true}"):
        with pytest.raises(SystemExit) as stop:
            run_cli(["query", str(index_root), "--topic", TOPIC, "--storage-options", options],
                    capsys)  # fmt: skip
        assert stop.value.code == 2, options
        err = capsys.readouterr().err
        assert f"must be a JSON object, got {options!r}" in err and "json_object" not in err
    assert "Expecting property name enclosed in double quotes" in err


def test_storage_options_the_roots_filesystem_does_not_take_are_bad_usage(
    server, capsys, monkeypatch
):
    """An option that the root's client does not take (a typo, another store's) ended in a
    TypeError traceback, exit 1: aiohttp's for an http root, aiobotocore's for S3. It is exit 2,
    one line naming the root and the option. So are an AWS profile or endpoint of the environment
    that no S3 client can be made with (exit 1, "Invalid endpoint: localhost:9000", no root)."""
    from s3fs import S3FileSystem

    s3 = "s3://mdindex-no-such-bucket/site"
    for root, start in ((server, f"--storage-options do not suit {server}/: "), (s3, f"{s3}: ")):
        argv = ["query", root, "--topic", TOPIC, "--storage-options", '{"endpoint": "x"}']
        code, out, err = run_cli(argv, capsys)
        assert (code, out) == (2, ""), root
        assert err.startswith(f"mdindex query: {start}"), err
        assert "'endpoint'" in err and err.count("\n") == 1, err
    for name, value, problem in (
        ("AWS_PROFILE", "mdindex-no-such-profile", "ProfileNotFound: The config profile"),
        ("AWS_ENDPOINT_URL", "localhost:9000", "ValueError: Invalid endpoint: localhost:9000"),
    ):
        S3FileSystem.clear_instance_cache()  # a client made before, in this process, is reused
        with monkeypatch.context() as env:
            env.setenv(name, value)
            code, out, err = run_cli(["query", s3, "--topic", TOPIC], capsys)
        assert (code, out) == (2, "") and err.count("\n") == 1, err
        assert err.startswith(f"mdindex query: {s3}: no S3 client with --storage-options and"), err
        assert problem in err and "(the environment sets " in err and f"{name}={value}" in err


def test_a_number_that_is_none_is_named_without_the_parsers_function(index_root, capsys):
    """`--n abc` said "invalid _positive_int value: 'abc'" and `--port x` "invalid _port value",
    naming a function of the code; both say what the value must be."""
    for argv, expected in (
        (["query", str(index_root), "--topic", TOPIC, "--n", "abc"], "argument --n: must be"),
        (["query", str(index_root), "--topic", TOPIC, "--n", "1.5"], "argument --n: must be"),
        (["serve", str(index_root), "--port", "x"], "argument --port: must be"),
    ):
        with pytest.raises(SystemExit) as stop:
            run_cli(argv, capsys)
        err = capsys.readouterr().err
        assert stop.value.code == 2 and expected in err and "invalid _" not in err, err


@pytest.mark.parametrize("port", ["65536", "99999", "-1"])
def test_mdindex_serve_refuses_a_port_outside_0_to_65535(tmp_path, capsys, port):
    # 99999 was served on 34463 (getaddrinfo wraps it), -1 failed as "Servname not supported".
    with pytest.raises(ValueError, match="port must be an int from 0 to 65535"):
        make_server(str(tmp_path), "127.0.0.1", int(port)).server_close()  # (closed if made)
    with pytest.raises(SystemExit) as exit_:
        run_cli(["serve", str(tmp_path), "--port", port], capsys)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --port: port must be an int from 0 to 65535, got {port}" in err


def test_select_chunks_refuses_a_negative_number_of_chunks():
    """`select_chunks(index, -1)` gave every chunk of a source but its last (`order[:-1]`)."""
    from indexing.client import select_chunks

    items = [{"index": i, "href": f"_chunks/s-{i}.md", "title": f"t{i}"} for i in range(3)]
    entry = {"baseline_conceptual": 0, "stripe_order": [2, 1], "items": items}
    index = {"id": "t", "_embedded": {"chunks": {"s": entry}}}
    with pytest.raises(ValueError, match="n must be 0 or more chunks per source, got -1"):
        select_chunks(index, -1)
    assert [selection.items for selection in select_chunks(index, 0)] == [[]]


def test_a_source_typed_in_another_unicode_form_than_its_file_name_is_found():
    """A page named on macOS is NFD (`cafe` and U+0301), as a copy or a sync keeps it; `--source
    café` typed on a keyboard is NFC (U+00E9). It was "topic 't' has no source 'café'; it has
    ['café']": the one source of that name in either form is taken."""
    from indexing.client import NotInIndex, select_chunks

    nfd, nfc = "cafe\u0301", "caf\u00e9"
    items = [{"index": 0, "href": f"_chunks/{nfd}-0.md", "title": "Café"}]
    entry = {"baseline_conceptual": 0, "stripe_order": [], "items": items}
    index = {"id": "t", "_embedded": {"chunks": {nfd: entry, "other": entry}}}
    [selection] = select_chunks(index, 1, source=nfc)
    assert selection.source == nfd and selection.items == items
    both = {"id": "t", "_embedded": {"chunks": {nfd: entry, nfc: entry}}}
    assert select_chunks(both, 1, source=nfc)[0].source == nfc  # the exact name first
    with pytest.raises(NotInIndex, match="has no source 'cafe'"):
        select_chunks(index, 1, source="cafe")


def test_a_topic_typed_in_another_unicode_form_than_its_folder_name_is_found(
    index_root, tmp_path, capsys
):
    """A folder named on macOS is NFD (`cafe` and U+0301), as a copy or a sync keeps it; `--topic
    café` typed on a keyboard is NFC (U+00E9): it was "no index.json for topic 'café'"."""
    nfd, nfc = "guides/cafe\u0301", "guides/caf\u00e9"
    root = tmp_path / "site"
    shutil.copytree(index_root, root)
    (root / TOPIC).rename(root / nfd)
    code, out, err = run_cli(["query", str(root), "--topic", nfc, "--n", "1", "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["topic"] == nfd
    assert result["sources"][0]["chunks"][0]["href"].startswith((root / nfd).as_uri())
    code, _, err = run_cli(["query", str(root), "--topic", "guides/cafe", "--n", "1"], capsys)
    assert code == 1 and "no index.json for topic 'guides/cafe'" in err
    # `--under`, as `--topic`: it was "no index.json for topic 'guides/café'" (exit 1)
    asked = ["query", str(root), "--question", QUESTIONS[0], "--under", nfc, "--n", "1", "--json"]
    code, out, err = run_cli(asked, capsys)
    assert code == 0, err


def test_a_topic_is_spelled_as_topic_id_names_it_and_its_index_read_once(index_root, tmp_path):
    """`IndexReader.spelling` probed the name as given, not as `topic_id` reads it (a library
    caller's `guides/x/../café`: "leads out of the index"), and a non-ASCII topic's index.json
    was read to probe it, then again to use it. Each index.json is read once now."""
    from fsspec.implementations.local import LocalFileSystem

    class CountedReads(LocalFileSystem):
        def cat_file(self, path, *args, **kwargs):
            self.reads.append(path)
            return super().cat_file(path, *args, **kwargs)

    nfd, nfc = "guides/cafe\u0301", "guides/caf\u00e9"
    root = tmp_path / "site"
    shutil.copytree(index_root, root)
    (root / TOPIC).rename(root / nfd)
    fs = CountedReads(skip_instance_cache=True)
    fs.reads = []
    reader = IndexReader(fs=fs, root=str(root))
    topic, index = reader.spelled_topic("guides/x/../caf\u00e9")
    assert fs.reads == [f"{root}/{nfc}/index.json", f"{root}/{nfd}/index.json"]
    assert topic == nfd and index == reader.topic(nfd)
    fs.reads.clear()
    assert reader.spelled_topic(f"/{nfd}/")[0] == nfd and fs.reads == [f"{root}/{nfd}/index.json"]
