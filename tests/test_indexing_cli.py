"""`mdindex query` (local and over HTTP) and `mdindex serve` (CORS, byte ranges) on a real index."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import numpy as np
import pytest
import requests
import s3fs
from indexing_support import ranked_vectors, run_cli, serving, source, topic_input, write_index

from indexing import IndexSettings, build_topic, simhash64
from indexing.client import IndexReader, query_embedder
from indexing.server import parse_range

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


def index_json(root) -> dict:
    return json.loads((root / TOPIC / "index.json").read_bytes())


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


def test_query_text_output_and_errors(index_root, capsys):
    code, out, _ = run_cli(["query", str(index_root), "--topic", TOPIC, "--n", "2"], capsys)
    assert code == 0 and "golden-reference: conceptual stripe order, 2 chunks" in out
    code, _, err = run_cli(["query", str(index_root), "--topic", TOPIC, "--source", "nope"], capsys)
    assert code == 1 and "has no source 'nope'" in err
    code, _, err = run_cli(["query", str(index_root), "--topic", "missing/topic"], capsys)
    assert code == 1 and "no index.json for topic 'missing/topic'" in err
    code, _, err = run_cli(["query", str(index_root)], capsys)
    assert code == 2 and "--topic, --question" in err


def test_question_found_by_simhash_with_exact_uint64(index_root, capsys):
    question = big_question()
    code, out, _ = run_cli(
        ["query", str(index_root), "--question", question.upper(), "--json"], capsys
    )
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
    code, out, _ = run_cli(["query", server, "--question", QUESTIONS[0], "--json"], capsys)
    assert json.loads(out)["matches"][0]["index"] == 1


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
    for bad in ("bytes=10-", "bytes=5-2", "bytes=-0"):
        with pytest.raises(ValueError):
            parse_range(bad, 10)


@pytest.mark.timeout(120)
def test_mdindex_serve_command_serves_until_interrupted(index_root):
    """Ctrl-C (SIGINT) stops it with exit 0. The child sets SIGINT's default handler first: Python
    keeps a signal ignored that its parent ignored (a background job of a script ignores SIGINT,
    and `mdindex serve` started from one then ignores it: checked by hand), and a run of the suite
    started from such a job once saw this test time out."""
    main = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from jobs.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", main, "serve", str(index_root), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        banner = proc.stdout.readline()
        base = banner.split(" at ")[1].split()[0].rstrip("/")
        reply = requests.get(
            f"{base}/{TOPIC}/index.json", headers={"Range": "bytes=0-0"}, timeout=10
        )
        assert reply.status_code == 206 and reply.content == b"{"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        finally:
            proc.kill()  # a no-op once it has exited; a server left running outlived the suite
    assert proc.returncode == 0


def test_mdindex_serve_rejects_a_missing_directory(tmp_path, capsys):
    code, _, err = run_cli(["serve", str(tmp_path / "absent"), "--port", "0"], capsys)
    assert code == 2 and "not a directory" in err


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
    assert [c["index"] for c in technical.items] == [4, 3, 2, 0, 1]


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
