"""The run report's counts agree with each other: each source, chunk and question is counted once,
by real builds (one local Ray for the module, MiniLM on the CPU, files on local disk)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from jobs_support import fault_environment

from indexing import chunk_table_path
from jobs.reindex import main

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "local.yaml")
QUESTIONS = (
    "# Questions\n\nQ: How does a page retry?\nA: Twice.\n\nQ: When does it give up?\nA: Never.\n"
)

pytestmark = pytest.mark.usefixtures("ray_session")


def build(docs: Path, out: Path) -> int:
    """`python -m jobs.reindex` in-process with the shipped local config."""
    return main(["--config", CONFIG, "--input", str(docs), "--output", str(out)])


def report_of(out: Path) -> dict:
    return json.loads((out / "_reindex" / "report.json").read_text())


def page(name: str, extra: str = "") -> str:
    return f"# {name}\n\nHow {name} retries a request.{extra}\n"


def test_a_topic_read_again_for_its_damaged_tables_counts_each_source_once(tmp_path, caplog):
    """A rebuilt topic whose previous tables cannot be read is read again whole (a second pass):
    its edited source, read and chunked in both passes, counted twice ('1 embedded, 4 from
    cache' of 4 chunks; 5 sources chunked of 4, the edited one twice among the slowest)."""
    docs, out = tmp_path / "docs", tmp_path / "out"
    (docs / "t").mkdir(parents=True)
    for name in "abcd":
        (docs / "t" / f"{name}.md").write_text(page(name))
    (docs / "t" / "qa-pairs.md").write_text(QUESTIONS)
    assert build(docs, out) == 0
    (docs / "t" / "a.md").write_text(page("a", " And how it gives up."))
    (out / chunk_table_path("t")).write_bytes(b"not a parquet file")
    with caplog.at_level(logging.INFO, logger="mdindex.build"):
        assert build(docs, out) == 0
    assert "1 topics could not carry their unchanged sources" in caplog.text

    report = report_of(out)
    sources, chunks, counters = report["sources"], report["chunks"], report["counters"]
    assert sources["carried"] == 0 and sources["chunked"] == 4
    assert counters["chunk"]["sources"] == 4 and counters["embed"]["documents"] == 4
    assert chunks["total"] == 4 and chunks["reused"] == 0  # one chunk a page, none carried
    assert chunks["embedded"] == 1  # the edited page's new text, in the first pass
    assert chunks["embedded"] + chunks["cache_hits"] == chunks["total"]
    assert counters["chunk"]["chunks"] == counters["embed"]["chunks"] == chunks["total"]
    assert counters["tokenize"]["chunks"] == chunks["total"]
    assert chunks["tokens"]["semantic"]["count"] == chunks["total"]
    assert sorted(s["path"] for s in report["slowest_sources"]) == [f"t/{n}.md" for n in "abcd"]
    assert counters["embed"]["questions"] == 2
    files = sorted(p for p in (docs / "t").iterdir())
    assert counters["read"]["files"] == len(files)  # 4 pages and qa-pairs.md, each once
    assert report["bytes_read"] == sum(p.stat().st_size for p in files)


def test_a_call_ray_tries_again_after_its_worker_died_is_counted_once(tmp_path):
    """A worker that dies after its record reached the collector (a chunk task, the embedding
    actor, a topic's reduce) has its call tried again, which reported it again: 12 sources
    chunked of 6, 12 chunks embedded of 6, 2 topics written of 1. Each call's record is now
    counted once (its key: the stage and its rows)."""
    docs, out = tmp_path / "docs", tmp_path / "out"
    (docs / "t").mkdir(parents=True)
    for name in "abcdef":
        (docs / "t" / f"{name}.md").write_text(page(name))
    killed = ("chunk.sources", "embed.chunks", "index.topics")
    env = fault_environment("crash-after-report", str(out), match=os.pathsep.join(killed))
    child = subprocess.run(
        [sys.executable, "-m", "jobs.reindex", "--config", CONFIG,
         "--input", str(docs), "--output", str(out)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert child.returncode == 0, child.stderr[-3000:]
    assert all(Path(f"{out}.crashed-{counter}").exists() for counter in killed)

    report = report_of(out)
    counters, chunks = report["counters"], report["chunks"]
    assert report["sources"]["chunked"] == counters["chunk"]["sources"] == 6
    assert counters["read"]["files"] == 6 and len(report["slowest_sources"]) == 6
    assert chunks["total"] == counters["embed"]["chunks"] == chunks["embedded"] == 6
    assert counters["index"]["topics"] == report["topics"]["rebuilt"] == 1
