"""What `mdindex query --question` answers on an index of real MiniLM vectors: SimHash matches,
then the embedding search's chunks up to `--n`; and what a question's search imports."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from http.server import SimpleHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest
import requests
from embedding_support import embedder
from indexing_support import (
    listing,
    loaded_models,
    ranked_vectors,
    run_cli,
    serving,
    source,
    topic_input,
    write_index,
)

from indexing import IndexSettings, build_topic, directory_index
from indexing.client import IndexReader, chunk_tables, query_embedder, ranked_chunks
from jobs.storage import Storage
from tests.test_jobs_storage import _served
from tests.test_object_store_requests import counted  # noqa: F401 - its counting S3 server

TOPIC = "cli"
CORPUS_RELS = ("mdindex:model", "mdindex:simhash", "mdindex:chunk-table", "mdindex:document-table")
FAQ = "How do I extract a tar.gz file?"
STATUS_FAQ = "How do I change the HTTP status code of a response to 201?"
NEAR_FAQ = "How do I change the HTTP status code of a response dynamically?"  # 5 bits from it
PAGES = {
    "tar": [("tar", "Archiving utility: create, list and extract tar archives, gzip included.")],
    "unp": [("unp", "Unpack any archive: tar, tar.gz, rar, zip and more, by its extension.")],
    "status-code": [("Response Status Code", "Declare it in the decorator: status_code=201.")],
    "change-status-code": [
        ("Change the Status Code", "Set response.status_code in the function, case by case.")
    ],
}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """One topic of four one-chunk pages, its chunks and FAQ questions embedded by MiniLM."""
    model = embedder("minilm", dtype="fp32")
    texts = {stem: f"## {t}\n\n{b}" for stem, ((t, b),) in PAGES.items()}
    sources = [
        source(f"{TOPIC}/{stem}.md", PAGES[stem], model.embed([text]))
        for stem, text in texts.items()
    ]
    asked = model.embed([FAQ, STATUS_FAQ], query=True)
    inp = dataclasses.replace(
        topic_input(TOPIC, sources, questions=[FAQ, STATUS_FAQ], question_vectors=asked),
        model="minilm",
    )
    out = tmp_path_factory.mktemp("index")
    write_index(out, [build_topic(inp, IndexSettings())], k=6)
    return out


def ask(root: Path, question: str, capsys, *extra: str) -> dict:
    code, out, err = run_cli(["query", str(root), "--question", question, "--json", *extra], capsys)
    assert code == 0, err
    return json.loads(out)


def chunk(match: dict) -> tuple[str, str, int]:
    return match["topic"], match["source"], match["index"]


def test_a_simhash_match_is_followed_by_the_searchs_chunks_up_to_n(root, capsys):
    """A question found by its SimHash was answered with the one chunk its FAQ question attached
    to, whatever `--n`: tldr's "How do I extract a tar.gz file?" gave `unp` alone, its `tar`
    page, the embedding search's second, never shown. The search's chunks now follow it, the
    match not twice; `--n` as many as SimHash finds is SimHash alone (no model loaded)."""
    (attached,) = ask(root, FAQ, capsys, "--n", "1")["matches"]
    assert ask(root, FAQ, capsys, "--n", "1")["method"] == "simhash"
    assert attached["distance"] == 0 and "score" not in attached
    result = ask(root, FAQ, capsys, "--n", "4")
    assert result["method"] == "simhash+embedding"
    matches = result["matches"]
    assert [chunk(m) for m in matches][0] == chunk(attached)  # was the one match
    assert sorted(m["source"] for m in matches) == sorted(PAGES)  # every page once
    assert all("score" in m and "distance" not in m for m in matches[1:])
    reader = IndexReader.open(str(root))
    model = embedder("minilm", dtype="fp32")
    searched = ranked_chunks(
        chunk_tables(reader, [TOPIC]), FAQ, lambda _, q: model.embed([q], query=True)[0]
    )
    rest = [(h.topic, h.source, h.index) for h in searched if h.source != attached["source"]]
    assert [chunk(m) for m in matches[1:]] == rest


def test_a_near_match_of_another_pages_question_no_longer_hides_the_right_page(root, capsys):
    """FastAPI's "How do I change the HTTP status code of a response dynamically?" matched the
    FAQ "… to 201?", 5 bits away, and was answered with that page alone: the search's best
    page for it, the one on changing the code case by case, now follows the near match."""
    result = ask(root, NEAR_FAQ, capsys, "--n", "2")
    first, second = result["matches"]
    assert 0 < first["distance"] <= 6 and first["source"] == "status-code"
    assert result["method"] == "simhash+embedding" and second["source"] == "change-status-code"


def test_a_questions_search_imports_no_pandas_and_reads_its_tables_rows(root):
    """pyarrow's `to_numpy` imports pandas on its first call: 0.13-0.2 s of every embedding
    search's time on a 2-core EPYC (0.8 s on a busy one) for nothing it does."""
    probe = f"""
import sys
import numpy as np
from indexing.client import IndexReader, chunk_tables, query_embedder, ranked_chunks
reader = IndexReader.open({str(root)!r})
table = chunk_tables(reader, reader.topics())
hits = list(ranked_chunks(table, "q", lambda model, question: np.ones(384, np.float32)))
print(len(hits), "pandas" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.stdout.split() == ["4", "False"], done.stderr
    # The vectors are read from the Arrow buffer: a table that starts inside it (a slice) gives
    # its own rows' scores, not those of the rows before it.
    reader = IndexReader.open(str(root))
    table = chunk_tables(reader, [TOPIC])
    vector = embedder("minilm", dtype="fp32").embed(["list a directory"], query=True)[0]

    def embed(model: str, question: str):
        return vector

    whole = [(h.source, h.score) for h in ranked_chunks(table, "q", embed)]
    part = [(h.source, h.score) for h in ranked_chunks(table.slice(1), "q", embed)]
    first = Path(table["source"][0].as_py()).stem
    assert part == [hit for hit in whole if hit[0] != first] and len(part) == 3


DOCKER_FAQ = "How do I deploy my app with Docker?"
DEPLOY_PAGES = {  # one page of three sections on Docker, three pages of one section each
    "docker": [
        ("Deploy with Docker", "Build a Docker image of the app and run it in a container."),
        ("Docker image", "Write a Dockerfile: FROM python, COPY the app, CMD to start it."),
        ("Docker container", "docker run -p 80:80 starts the app's Docker container."),
    ],
    "kubernetes": [("Kubernetes", "Deploy the app's container image to a Kubernetes cluster.")],
    "server": [("Run a server manually", "Deploy the app by starting a server process.")],
    "https": [("About HTTPS", "Serve the deployed app over HTTPS with a certificate.")],
}


@pytest.fixture(scope="module")
def deploy_root(tmp_path_factory) -> Path:
    """A topic whose best chunks for a Docker question are all of one page; the FAQ question
    attaches to several of them."""
    model = embedder("minilm", dtype="fp32")
    sources = [
        source(f"deploy/{stem}.md", sections, model.embed([f"## {t}\n\n{b}" for t, b in sections]))
        for stem, sections in DEPLOY_PAGES.items()
    ]
    inp = dataclasses.replace(
        topic_input(
            "deploy",
            sources,
            questions=[DOCKER_FAQ],
            question_vectors=model.embed([DOCKER_FAQ], query=True),
        ),
        model="minilm",
    )
    out = tmp_path_factory.mktemp("deploy")
    write_index(out, [build_topic(inp, IndexSettings())], k=6)
    return out


def test_per_page_gives_at_most_k_chunks_of_one_page(deploy_root, capsys):
    """A question's matches were the nearest chunks whatever their page: on FastAPI's docs the
    top 10 held 3.7 pages on average ("deploy with docker": one page ten times), a search box
    showed one page again and again. `--per-page K` takes at most K chunks of a page, the next
    page's best chunk in place of the rest, in the same order; SimHash matches count too."""
    plain = ask(deploy_root, "deploy with docker", capsys, "--n", "3")["matches"]
    assert [m["source"] for m in plain] == ["docker"] * 3
    one = ask(deploy_root, "deploy with docker", capsys, "--n", "3", "--per-page", "1")
    pages = [m["source"] for m in one["matches"]]
    assert pages[0] == "docker" and len(set(pages)) == 3
    assert chunk(one["matches"][0]) == chunk(plain[0])  # the page's best chunk, first as before
    scores = [m["score"] for m in one["matches"]]
    assert scores == sorted(scores, reverse=True)
    two = ask(deploy_root, "deploy with docker", capsys, "--n", "4", "--per-page", "2")
    assert [chunk(m) for m in two["matches"][:2]] == [chunk(m) for m in plain[:2]]
    assert [m["source"] for m in two["matches"]].count("docker") == 2
    asked = ask(deploy_root, DOCKER_FAQ, capsys, "--n", "3", "--per-page", "1")
    assert asked["method"] == "simhash+embedding"
    assert [m["source"] for m in asked["matches"]][0] == "docker"
    assert len({m["source"] for m in asked["matches"]}) == 3
    assert "distance" in asked["matches"][0] and "score" in asked["matches"][1]
    code, _, err = run_cli(
        ["query", str(deploy_root), "--topic", "deploy", "--per-page", "1"], capsys
    )
    assert code == 2 and "--per-page counts a question's matches" in err
    code, _, err = run_cli(["query", str(deploy_root), "--topic", "deploy", "--all-copies"], capsys)
    assert code == 2 and "--all-copies keeps a question's matches" in err
    code, _, err = run_cli(["query", str(deploy_root), "--topic", "deploy", "--under", ""], capsys)
    assert code == 2 and "--under picks a question's topics, without --topic" in err


VERSIONS = ("docs/t", "versioned_docs/version-1.0/t", "versioned_docs/version-2.0/t")


def test_a_versioned_sites_copies_of_a_chunk_are_one_match(tmp_path):
    """A versioned docs site (Docusaurus' `docs/` beside `versioned_docs/version-1.0/`) holds
    each page once per version: on 38 FastAPI pages in three versions, "How do I allow CORS
    origins?" got 10 matches that were 4 texts, each three times, and `--per-page 1` 4 pages
    three times. A chunk whose text was reached already is passed over now (the first kept:
    by score, then topic id), counting toward no page, and a copy of one `per_page` passed over
    goes too (`--per-page 1` gave each page once per version); `all_copies` shows every copy."""
    from indexing.cli import question_result

    use, wild, more = ranked_vectors([1.0, 0.9, 0.8])
    outputs = []
    for topic in VERSIONS:
        info = "Removed in 2.0." if "1.0" in topic else "Now with private networks."
        pages = [
            source(
                f"{topic}/cors.md", [("Use it", "Add the middleware."), ("More", info)], [use, more]
            ),
            source(f"{topic}/wild.md", [("Wildcards", "Allow any origin.")], wild[None, :]),
        ]
        outputs.append(build_topic(topic_input(topic, pages), IndexSettings()))
    write_index(tmp_path, outputs)
    reader = IndexReader.open(str(tmp_path))

    def ask(n: int, per_page=None, all_copies=False, under=None) -> list[tuple]:
        asked = {"n": n, "per_page": per_page, "all_copies": all_copies, "under": under}
        args = argparse.Namespace(question="cors", topic=None, show=False, **asked)
        result = question_result(reader, args, embed=lambda model, q: np.array([1.0, 0, 0]))
        return [(m["topic"], m["source"], m["index"]) for m in result["matches"]]

    latest, old, last = VERSIONS
    assert ask(10) == [
        (latest, "cors", 0),
        (latest, "wild", 0),
        (latest, "cors", 1),
        (old, "cors", 1),  # 1.0's own text of the section
    ]
    assert ask(10, per_page=1) == [(latest, "cors", 0), (latest, "wild", 0), (old, "cors", 1)]
    every = ask(10, all_copies=True)
    assert len(every) == 9 and every[:3] == [(topic, "cors", 0) for topic in VERSIONS]
    # One version asked: `--topic` names one folder of pages, `--under` a version's whole tree.
    assert {m[0] for m in ask(10, under="versioned_docs/version-1.0")} == {old}
    assert [m[0] for m in ask(10, under="versioned_docs")] == [old] * 3 + [last]


def test_serve_search_answers_as_query_json_does_and_refuses_bad_parameters(deploy_root, capsys):
    """A docs search box on `mdindex serve` had no question to ask: the server was static, and a
    browser cannot embed one. `serve --search` answers `GET /_search?q=...` with `query
    --question --json`'s answer (`n`, `per_page`, `topic`), hrefs the server's own URLs, the
    model loaded once; a bad parameter is a 400 naming it, in JSON, and never a traceback."""
    from indexing.cli import banner, question_search

    assert "/_search?q=" in banner(str(deploy_root), "127.0.0.1", 8000, search=True)
    with serving(deploy_root) as base:  # static unless asked
        assert requests.get(f"{base}/_search?q=docker", timeout=10).status_code == 404
    with serving(deploy_root, search=question_search(str(deploy_root))) as base:
        params = {"q": "deploy with docker", "n": "3", "per_page": "1"}
        reply = requests.get(f"{base}/_search", params=params, timeout=120)
        assert reply.status_code == 200 and reply.headers["Access-Control-Allow-Origin"] == "*"
        answer = reply.json()
        asked = ask(deploy_root, "deploy with docker", capsys, "--n", "3", "--per-page", "1")
        assert {**answer, "matches": None} == {**asked, "matches": None}
        for served, queried in zip(answer["matches"], asked["matches"], strict=True):
            assert {**served, "href": None} == {**queried, "href": None}
            chunk_file = requests.get(base + served["href"], timeout=10)
            assert chunk_file.status_code == 200 and chunk_file.text.startswith("## ")
        with ThreadPoolExecutor(6) as pool:  # the handler's threads share one model
            replies = list(pool.map(lambda _: requests.get(reply.url, timeout=120), range(6)))
        assert all(r.status_code == 200 and r.json() == answer for r in replies)
        for query, status, said in (
            ("", 400, "q: give a question"),
            ("q=%20", 400, "q: give a question"),
            ("q=a&q=b", 400, "q: given 2 times"),
            ("q=%FF", 400, "not UTF-8"),
            ("q=x&n=abc", 400, "n: must be a whole number, got 'abc'"),
            ("q=x&n=101", 400, "n: must be at most 100"),
            ("q=x&per_page=0", 400, "per_page: must be at least 1"),
            ("q=x&all_copies=yes", 400, "all_copies: must be 0 or 1, got 'yes'"),
            ("q=x&topic=deploy&under=deploy", 400, "under: picks a question's topics"),
            ("q=x&under=nope", 404, "no index.json for topic 'nope' under /"),
            ("q=x&topic=nope", 404, "no index.json for topic 'nope' under /"),
        ):
            refused = requests.get(f"{base}/_search?{query}", timeout=10)
            assert refused.status_code == status and said in refused.json()["error"], query
            assert str(deploy_root) not in refused.text  # the server's folder is its own


def settled(root: Path) -> None:
    """Every file of `root` dated 10 s back: past the age from which a reader keeps a parse."""
    for path in root.rglob("*"):
        if path.is_file():
            stamp = path.stat().st_mtime - 10
            os.utime(path, (stamp, stamp))


def versions(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    """A served copy of a topic of two pages, and two builds of it (`v1`, `v2`) whose chunks'
    titles name their build and whose vectors rank the pages the other way round."""
    near, far = ranked_vectors([1.0, 0.2])
    builds = {}
    for name, vectors in (("v1", (near, far)), ("v2", (far, near))):
        pages = [
            source(f"t/{stem}.md", [(f"{name} {stem}", f"Text of {stem}.")], vector[None, :])
            for stem, vector in zip("ab", vectors, strict=True)
        ]
        builds[name] = tmp_path / name
        write_index(builds[name], [build_topic(topic_input("t", pages), IndexSettings())])
        settled(builds[name])
    shutil.copytree(builds["v1"], tmp_path / "served")
    return tmp_path / "served", builds


def switch(served: Path, build: Path, relpath: str) -> None:
    """Put `build`'s `relpath` in place as a build's switch does: by a rename over the file."""
    staged = served / "staged"
    shutil.copy2(build / relpath, staged)
    os.replace(staged, served / relpath)


def test_a_serving_reader_keeps_what_it_parsed_until_a_file_changes(tmp_path):
    """`serve --search` parsed every topic's index.json and chunk table again at each question
    (topics 3.5 ms, tables 7 ms at 779 chunks, 10-100x that on a busy machine); it keeps them
    now, parsed again once a file is replaced (a build's rename), deleted, or was written in
    the last seconds (a rewrite in place within the clock's tick keeps its size and date); a
    topic the root no longer links is forgotten (it was kept till the server stopped)."""
    served, builds = versions(tmp_path)
    reader = IndexReader.open(str(served), keep=True)
    assert reader.index("t") is reader.index("t")
    assert chunk_tables(reader, ["t"]).column("title").to_pylist() == ["v1 a", "v1 b"]
    table = "_index/chunks/t.parquet"
    kept = reader.kept[table][1]
    assert reader.read_parsed(table, lambda data: pytest.fail("parsed again")) is kept
    for relpath in ("t/index.json", table):
        switch(served, builds["v2"], relpath)
    assert reader.index("t")["_embedded"]["chunks"]["a"]["items"][0]["title"] == "v2 a"
    assert chunk_tables(reader, ["t"]).column("title").to_pylist() == ["v2 a", "v2 b"]
    assert reader.topics() == ["t"] and "t/index.json" in reader.kept
    (served / "index.json").write_bytes(directory_index("", []))  # a rebuild deleted the topic
    assert reader.topics() == [] and not {"t/index.json", table} & set(reader.kept)
    (served / table).write_bytes((builds["v1"] / table).read_bytes())  # in place, just now
    parsed = reader.read_parsed(table, lambda data: data)
    assert reader.read_parsed(table, lambda data: data) is not parsed  # not kept yet
    (served / table).unlink()
    assert chunk_tables(reader, ["t"]) is None and table not in reader.kept


def test_a_question_asked_while_a_build_switches_reads_one_version_of_each_table(tmp_path):
    """Questions asked while the chunk table is replaced again and again (each version kept
    once read) get each chunk's title and score from one version, never a crash."""
    from indexing.cli import question_result

    served, builds = versions(tmp_path)
    reader = IndexReader.open(str(served), keep=True)
    table = "_index/chunks/t.parquet"
    expected = {"v1 a": 1.0, "v1 b": 0.2, "v2 a": 0.2, "v2 b": 1.0}
    asked = {"topic": None, "under": None, "n": 2, "per_page": None, "all_copies": False}
    args = argparse.Namespace(question="which page", show=False, **asked)
    done = threading.Event()

    def ask() -> list[tuple[str, float]]:
        seen = []
        while not done.is_set():
            result = question_result(reader, args, embed=lambda model, q: np.array([1.0, 0, 0]))
            seen += [(m["title"], m["score"]) for m in result["matches"]]
        return seen

    with ThreadPoolExecutor(2) as pool:
        asking = [pool.submit(ask) for _ in range(2)]
        for i in range(40):
            switch(served, builds[("v2", "v1")[i % 2]], table)
            time.sleep(0.005)
        done.set()
        seen = [pair for future in asking for pair in future.result()]
    assert seen and all(expected[title] == score for title, score in seen)
    assert {title[:2] for title, _ in seen} == {"v1", "v2"}


def test_serve_search_loads_the_model_a_rebuild_records(root, tmp_path, monkeypatch):
    """`serve --search` read `_index/model.json` at its first question and kept that model for
    good: an index rebuilt with other options (or another model) was searched with the old
    query vectors, or the new model under its defaults, until a restart. The recorded options
    are read at every question now, and a change loads the model with them, in the old one's
    place."""
    from indexing.cli import question_search

    loaded = loaded_models(monkeypatch)
    served = tmp_path / "served"
    shutil.copytree(root, served)
    settings = served / "_index" / "model.json"

    def record(**options) -> None:
        settings.write_text(json.dumps({"model": "minilm", "options": options}))

    def scores() -> list[float]:
        return [m["score"] for m in answer("q=extract+an+archive&n=4")["matches"]]

    record(dtype="fp32")
    answer = question_search(str(served))
    mean = scores()
    assert scores() == mean and len(loaded) == 1  # kept while the settings stay
    record(dtype="fp32", pooling="cls")
    assert scores() != mean and len(loaded) == 2
    assert [e.settings.pooling for e in loaded] == ["mean", "cls"]
    assert loaded[1].settings.dtype == "fp32"


def test_a_question_reads_the_corpus_files_the_root_index_json_links(root, tmp_path):
    """A HAL client that starts from the root index.json finds the SimHash tables, the topics'
    chunk tables and the embedding settings by its links (`indexing.hal.corpus_links`; it knew
    their paths from the README alone), and the reader follows them: moved with its links, an
    index answers as before. One whose root links none (built before 2026-12-01) is read at
    the paths the build writes; a damaged link is named."""
    from indexing.cli import question_result

    asked = {"topic": None, "under": None, "n": 4, "per_page": None, "all_copies": False}
    args = argparse.Namespace(question=FAQ, show=False, **asked)

    def answer(folder: Path) -> tuple[str, list[dict]]:
        reader = IndexReader.open(str(folder))
        result = question_result(reader, args, embed=lambda model, q: np.ones(384, np.float32))
        return result["method"], [{**m, "href": None} for m in result["matches"]]

    def relinked(name: str, change) -> Path:
        """A copy of the index whose root's `_links` `change` changed in place."""
        copy = tmp_path / name
        shutil.copytree(root, copy)
        index = json.loads((copy / "index.json").read_bytes())
        change(index["_links"])
        (copy / "index.json").write_bytes(json.dumps(index).encode())
        return copy

    def elsewhere(links: dict) -> None:
        for rel in CORPUS_RELS:
            links[rel]["href"] = links[rel]["href"].replace("/_index/", "/the%20tables/")

    expected = answer(root)
    assert expected[0] == "simhash+embedding" and len(expected[1]) == 4
    moved = relinked("moved", elsewhere)
    (moved / "_index").rename(moved / "the tables")
    assert answer(moved) == expected
    (moved / "the tables" / "model.json").write_text('{"model": "minilm", "options": []}')
    with pytest.raises(ValueError, match="the tables/model.json is damaged: the doc"):
        query_embedder(IndexReader.open(str(moved)))("minilm", FAQ)
    before = relinked("before", lambda links: [links.pop(r) for r in [*CORPUS_RELS, "curies"]])
    assert answer(before) == expected
    for rel, href, problem in (
        ("mdindex:chunk-table", "/_index/chunks/t.parquet", "is no template of {topic_slug}"),
        ("mdindex:simhash", "_index/simhash/manifest.json", "has no root-absolute href"),
    ):
        damaged = relinked(rel[8:], lambda links, rel=rel, href=href: links[rel].update(href=href))
        with pytest.raises(ValueError, match=f"index.json is damaged: _links.'{rel}'. {problem}"):
            answer(damaged)


# `query --question` asked in two ways: its matches' texts shown, and within a folder; each read
# the root index.json 4 times over http and S3, a topic's up to 3 times.
ASKED_REMOTELY = (("--n", "4", "--show"), ("--under", TOPIC, "--n", "4"))


def answered(where: str, href_root: str, capsys, *extra: str) -> dict:
    """`ask`'s answer of the index at `where`, each href relative to `href_root` (its root's)."""
    result = ask(where, FAQ, capsys, *extra)
    for match in result["matches"]:
        assert match["href"].startswith(href_root), match["href"]
        match["href"] = match["href"].removeprefix(href_root)
    return result


def read_once(gets: Counter, prefix: str, extra: tuple[str, ...]) -> None:
    """Every path in `gets` (paths below `prefix`: GETs of each) was read once, the root's
    index.json, the topic's and the corpus files among them (with `--show`, the chunk files)."""
    assert gets and set(gets.values()) == {1}, gets
    named = {"index.json", f"{TOPIC}/index.json", "_index/model.json"}
    named |= {"_index/simhash/manifest.json", f"_index/chunks/{TOPIC}.parquet"}
    assert {f"{prefix}/{path}" for path in named} <= set(gets)
    shown = [path for path in gets if path.startswith(f"{prefix}/{TOPIC}/_chunks/")]
    assert len(shown) == (4 if "--show" in extra else 0)


class _CountedGets(SimpleHTTPRequestHandler):
    """Python's file server, counting the GETs of each path in `gets`, logging nothing."""

    def __init__(self, *args, gets: Counter, **kwargs):
        self.gets = gets
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:
        self.gets[self.path] += 1
        super().do_GET()

    def log_message(self, format: str, *args) -> None:
        pass


def test_a_question_over_http_reads_each_file_once(root, capsys):
    """`mdindex query --question` over http(s) read the root index.json up to 4 times (the
    links to the SimHash tables, the chunk tables and the embedding settings, then the topics),
    a topic's up to 3 times: a request each. A reader of a remote root reads each file once
    now, and answers as the local index does."""
    gets: Counter[str] = Counter()
    with _served(root, partial(_CountedGets, gets=gets)) as site:
        for extra in ASKED_REMOTELY:
            gets.clear()
            result = answered(site, f"{site}/", capsys, *extra)
            read_once(gets, "", extra)
            assert result == answered(str(root), f"{root.as_uri()}/", capsys, *extra)


class _GetsByPath:
    """A WSGI layer counting the GETs of each path (`gets`) that the app it wraps answers."""

    def __init__(self, app):
        self.app, self.gets = app, Counter()

    def __call__(self, environ, start_response):
        if environ["REQUEST_METHOD"] == "GET":
            self.gets[environ["PATH_INFO"]] += 1
        return self.app(environ, start_response)


def test_a_question_on_s3_sends_one_get_per_file(root, counted, capsys):  # noqa: F811
    """On S3 a `query --question` read the root index.json up to 4 times, each read a HEAD and
    a GET (s3fs's `cat_file`), each file it lacks a HEAD and a LIST: 34 requests for 12 files
    (`--under`), 40 for 16 (`--show`). Each file is one GET now, once, and the answer is the
    local index's."""
    bucket, options, counter = counted
    files = {path: (root / path).read_bytes() for path in listing(root)}
    Storage(f"s3://{bucket}/site", options=options).write_many(files)
    where = f"s3://{bucket}/site"
    counter.app = paths = _GetsByPath(counter.app)
    try:
        for extra in ASKED_REMOTELY:
            counter.take()
            paths.gets.clear()
            asked = (*extra, "--storage-options", json.dumps(options))
            result = answered(where, f"{where}/", capsys, *asked)
            assert counter.take() == {"GET": len(paths.gets)}
            read_once(paths.gets, f"/{bucket}/site", extra)
            assert result == answered(str(root), f"{root.as_uri()}/", capsys, *extra)
    finally:
        counter.app = paths.app
