"""The build's progress lines, read from a real build's log: real Ray, real MiniLM, real files."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from jobs_support import ON_RAY

from jobs import progress
from jobs.reindex import main

CONFIG = str(Path(__file__).resolve().parents[1] / "configs" / "local.yaml")
COUNTS = re.compile(r"(\d+) chunks embedded, (\d+) from cache")

# one local Ray for the builds whose lines are under test (`ON_RAY`: their calls run in actors
# and their reduces in tasks); the builds that fill a cache run without it
pytestmark = pytest.mark.usefixtures("ray_session")


def build(docs: Path, output: Path, cache: Path, *args: str) -> dict:
    """Build `docs` into `output` with the embedding cache `cache` and `args`; the run's report."""
    args = ("--config", CONFIG, "--input", str(docs), "--output", str(output), *args)
    assert main([*args, "--cache", str(cache)]) == 0
    return json.loads((output / "_reindex" / "report.json").read_text())


def write_pages(docs: Path, names: list[str]) -> None:
    """One page of one sentence for each of `names`, in the topic `t`."""
    (docs / "t").mkdir(parents=True, exist_ok=True)
    for name in names:
        (docs / "t" / f"{name}.md").write_text(f"# {name}\n\nHow {name} retries a request.\n")


def test_a_running_embedding_calls_line_counts_its_cache_hits(tmp_path, caplog, monkeypatch):
    """A re-run whose chunks mostly come from the cache (its output deleted, the cache kept):
    a running call told the collector the chunks it had embedded, never those it found in the
    cache, so every line said "0 from cache" until the call returned, and its ETA went by the
    model's pace alone (tldr, 2,702 pages, 1 in 7 edited: "15 chunks embedded, 0 from cache;
    ETA 1874 s" with 16 s to go). The call tells its cache hits as soon as it has looked them
    up, while it still embeds the rest."""
    docs, cache = tmp_path / "docs", tmp_path / "cache"
    cached = [f"cached-{i}" for i in range(8)]
    write_pages(docs, cached)
    build(docs, tmp_path / "first", cache)
    write_pages(docs, [f"new-{i}" for i in range(60)])  # one chunk batch, one embedding call
    monkeypatch.setattr(progress, "HEARTBEAT_SECONDS", 0.05)
    with caplog.at_level(logging.INFO, logger="mdindex.build"):
        report = build(docs, tmp_path / "again", cache, *ON_RAY)
    chunks = report["chunks"]
    assert (chunks["embedded"], chunks["cache_hits"]) == (60, len(cached))
    lines = [line for line in caplog.messages if line.startswith("progress after")]
    counts = [tuple(map(int, COUNTS.search(line).groups())) for line in lines]
    # the call's hits, counted while it embedded its new chunks (before it returned)
    assert any(hits == len(cached) and embedded < 60 for embedded, hits in counts), counts
    # and no pace from its lookups alone: with every source chunked, "ETA 0 s" (and 0 from
    # cache) while it loaded its model and embedded its 60 new chunks
    found_only = [line for line, c in zip(lines, counts, strict=True) if c == (0, len(cached))]
    assert found_only and not any("ETA" in line for line in found_only), found_only


def test_a_topics_written_line_comes_as_its_reduce_finishes(tmp_path, caplog, monkeypatch):
    """A topic whose reduce finishes while a later topic is still being embedded is told at once.
    The driver looked for finished reduces only when the dataset's next bundle came, so its
    "written" line came with that bundle, seconds late (tldr linux, osx and windows: the progress
    line said "2/3 topics written" at 104 s, the lines of both came at 119 s in the same
    millisecond). Here the page of topic `a` is one batch, the long page of `b` (120 chunks) the
    next; `a`'s chunks are in the cache (an earlier build into another output), so its call ends
    at once whichever of the actor's two calls starts first (with both embedding, `a` waited for
    `b`'s model work on a loaded machine): the line of `a` comes within ten heartbeats of 0.1 s of
    the first progress line that counts it written, while `b` is embedded on."""
    docs = tmp_path / "docs"
    (docs / "a").mkdir(parents=True)
    # 1 kB and more: a batch of its own (resources.chunk.batch_mb 0.001)
    (docs / "a" / "short.md").write_text("# Short\n\n" + "How short retries a request. " * 40)
    (docs / "b").mkdir()
    parts = [
        f"## Part {n}\n\n" + " ".join(f"Step {i} retries request {i} on host-{i}." for i in steps)
        for n, steps in enumerate(range(k, k + 30) for k in range(0, 1800, 30))
    ]
    (docs / "b" / "long.md").write_text("# Long\n\n" + "\n\n".join(parts) + "\n")
    sets = {
        "resources.chunk.batch_mb": "0.001",  # a batch, and an embedding call, per page
        "resources.embed.actors": "1",
        "resources.embed.num_cpus": "1",
    }
    settings = [arg for key, value in sets.items() for arg in ("--set", f"{key}={value}")]
    cache = ["--cache", str(tmp_path / "c")]
    earlier = ["--input", str(docs / "a"), "--output", str(tmp_path / "earlier"), *cache]
    assert main(["--config", CONFIG, *earlier, *settings]) == 0
    args = ["--input", str(docs), "--output", str(tmp_path / "out"), *cache, *settings]
    monkeypatch.setattr(progress, "HEARTBEAT_SECONDS", 0.1)
    with caplog.at_level(logging.INFO, logger="mdindex.build"):
        assert main(["--config", CONFIG, *args, *ON_RAY]) == 0
    lines = caplog.messages
    written = lines.index("topic 'a' written (1/2)")
    assert lines.index("topic 'b' written (2/2)") > written
    one_written = [i for i, line in enumerate(lines) if "; 1/2 topics written" in line]
    assert len(one_written) >= 15, lines  # b ran on for 1.5 s and more: the case under test
    # the line of a within ten heartbeats of one that counted it (it came with the bundle of b,
    # 68 lines after the first, before the fix)
    assert len([i for i in one_written if i < written]) < 10, lines
