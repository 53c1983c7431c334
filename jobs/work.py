"""The pipeline's input rows (one per changed source, per rebuilt topic and per topic's questions)
and their packing into Arrow batches by size."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from jobs.config import JobConfig
from jobs.manifest import Manifest
from jobs.plan import NOT_BUILT, Plan, TopicPlan
from jobs.records import QUESTIONS, SOURCE, TOPIC, new_row, to_table
from jobs.resources import call_rows
from jobs.storage import fingerprint_size

BATCHES_PER_CPU = 4  # automatic batch size: the corpus cut into about this many batches per CPU
MIN_BATCH_BYTES, MAX_BATCH_BYTES = 250_000, 16_000_000


def work_rows(
    topics: Sequence[TopicPlan], plan: Plan, previous: Manifest, sizes: dict[str, int]
) -> list[dict[str, Any]]:
    """The pipeline's input rows: per rebuilt topic a topic row, its changed sources and its
    questions, in topic order.

    A source unchanged since a run in which it succeeded gets no row: the topic row names it, and
    the reduce takes it from the previous tables. One that failed is read again (with a settled
    failure, to fail the same way: the reduce keeps its previous rows)."""
    recorded = recorded_links(previous)
    rows = []
    for topic in topics:
        carried = {}
        sources = []
        for path in topic.sources:
            if is_carried(path, plan, previous):
                carried[path] = previous.sources[path].sha256
                continue
            sources.append(source_row(topic.topic, path, sizes, previous))
        facts = {
            "children": list(topic.children),
            "keywords": topic.keywords,
            "carried": carried,
            # the hrefs the last run recorded for each (`jobs.broken_links.page_links`)
            "carried_links": {path: recorded[path] for path in carried if path in recorded},
            "conflicts": dict(topic.conflicts),  # failed, not read (`jobs.plan.stem_conflicts`)
        }
        rows.append(new_row(topic.topic, TOPIC, "", size=0, payload=json.dumps(facts).encode()))
        rows.extend(sources)
        if topic.questions:
            rows.append(
                new_row(topic.topic, QUESTIONS, topic.questions, size=sizes[topic.questions])
            )
    return rows


def is_carried(path: str, plan: Plan, previous: Manifest) -> bool:
    """Whether a source of a rebuilt topic is carried from the previous tables, not read: it is
    unchanged since a run in which it succeeded."""
    before = previous.sources.get(path)
    unchanged = path not in plan.changed and before is not None
    return unchanged and bool(before.sha256) and not before.failed


def files_to_read(topics: Sequence[TopicPlan], plan: Plan, previous: Manifest) -> int:
    """The sources and questions files that `work_rows` gives rows for, counted without making
    the rows (the carried sources' names and links, for every topic)."""
    sources = sum(1 for t in topics for path in t.sources if not is_carried(path, plan, previous))
    return sources + sum(1 for t in topics if t.questions)


def recorded_links(manifest: Manifest) -> dict[str, list[str]]:
    """The hrefs of each source's links to pages that `manifest`'s topics recorded
    (`TopicEntry.page_links`), in order."""
    found: dict[str, list[str]] = {}
    for entry in manifest.topics.values():
        for path, href in entry.page_links:
            found.setdefault(path, []).append(href)
    return found


def recarry_rows(
    recarry: dict[str, list[str]], previous: Manifest, sizes: dict[str, int]
) -> list[dict[str, Any]]:
    """The rows of a run's next pass: one per unchanged source that its topic's reduce could not
    carry (`recarry`: topic -> paths; the previous tables missing, damaged or without it). The
    topic's other rows are the last pass's, which its next reduce takes again
    (`jobs.reduce.reduce_topics`), and a source with a row of its own is not carried."""
    return [
        source_row(topic, path, sizes, previous)
        for topic, paths in recarry.items()
        for path in paths
    ]


def source_row(topic: str, path: str, sizes: dict[str, int], previous: Manifest) -> dict[str, Any]:
    """The work row of one source to read, chunk and embed."""
    before = previous.sources.get(path)
    previous_hash = before.sha256 if before else None
    return new_row(topic, SOURCE, path, size=sizes[path], previous_hash=previous_hash)


def pack_batches(rows: list[dict[str, Any]], target_bytes: float) -> list[list[dict[str, Any]]]:
    """Consecutive rows cut into batches of about `target_bytes` of listed size each."""
    batches: list[list[dict[str, Any]]] = [[]]
    size = 0
    for row in rows:
        if batches[-1] and size >= target_bytes:
            batches.append([])
            size = 0
        batches[-1].append(row)
        size += row["size"]
    return batches if batches[0] else []


def aligned_rows(block_rows: int, call_rows: int) -> tuple[int, int]:
    """Rows per chunk task and rows per embedding call, near `block_rows` and `call_rows`, one a
    whole multiple of the other.

    Ray Data joins chunk tasks' blocks until a call's rows are there, then cuts what it joined
    into calls of exactly that many rows: a call that is not a whole number of blocks, or a block
    not a whole number of calls, leaves a short call behind. On all of tldr-pages with one GPU,
    9 of a build's 17 calls had 39 to 1,642 documents; a GPU fills each micro-batch to its full
    row count, so 39 documents took 29 ms of model time, 4,197 took 160-330 ms (H200, MiniLM)."""
    if block_rows >= call_rows:
        return call_rows * round(block_rows / call_rows), call_rows
    blocks = round(call_rows / block_rows)
    rows = math.ceil(call_rows / blocks)
    return rows, rows * blocks


def batch_bytes(config: JobConfig, total: int, cpus: float) -> float:
    """Bytes of sources per read-and-chunk task: the config's, or about 4 batches per CPU."""
    if config.resources.chunk.batch_mb is not None:
        return config.resources.chunk.batch_mb * 1e6
    return min(MAX_BATCH_BYTES, max(MIN_BATCH_BYTES, total / (BATCHES_PER_CPU * cpus)))


@dataclass(frozen=True)
class Work:
    """The pipeline's input: work rows packed into Arrow batches, the rows each topic expects,
    the sources (and their bytes) among them, and the rows per embedding call (None: one call per
    chunk task). The rows themselves are not kept."""

    batches: list[pa.Table]
    expected: Counter
    sources: int
    bytes: int
    questions: int = 0  # topics whose qa-pairs.md are embedded (as queries, mostly from the cache)
    call_rows: int | None = None
    new_content: bool = False  # some source holds bytes no run embedded yet (`new_content`)

    @property
    def embeds(self) -> bool:
        """Whether any row has texts to embed: a source to chunk, or a topic's questions. Not so
        when every source of the rebuilt topics is carried (a source deleted, a topic's child)."""
        return bool(self.sources or self.questions)


def embedding_batches(work: Work) -> int:
    """How many calls the embedding actors can run at once: one per chunk task, and no more than
    the sources make calls of `work.call_rows` documents. Ray Data runs the calls cut from one
    chunk task's block one after another, never in parallel."""
    if work.call_rows is None:
        return len(work.batches)
    return max(1, min(len(work.batches), math.ceil(work.sources / work.call_rows)))


def prepare_work(
    config: JobConfig, rows: list[dict[str, Any]], cpus: float, *, new_content: bool = False
) -> Work:
    """`rows` packed into Arrow batches of about `batch_bytes` each, with what the driver keeps
    of them. Where embedding calls have a row count (`jobs.resources.call_rows`), every batch has
    the same number of rows instead (the last fewer), aligned with it (`aligned_rows`).
    `new_content`: see `Work`."""
    sources = [row for row in rows if row["kind"] == SOURCE]
    source_bytes = sum(row["size"] for row in sources)
    batches = pack_batches(rows, batch_bytes(config, sum(row["size"] for row in rows), cpus))
    calls = call_rows(config.resources.embed, source_bytes / max(1, len(sources)))
    if calls is not None and batches:
        per_batch, calls = aligned_rows(math.ceil(len(rows) / len(batches)), calls)
        batches = [rows[i : i + per_batch] for i in range(0, len(rows), per_batch)]
    return Work(
        batches=[to_table(batch) for batch in batches],
        expected=Counter(row["topic"] for row in rows),
        sources=len(sources),
        bytes=source_bytes,
        questions=sum(1 for row in rows if row["kind"] == QUESTIONS),
        call_rows=calls,
        new_content=new_content,
    )


def new_content(
    rows: list[dict[str, Any]], plan: Plan, previous: Manifest, cache_in_use: Callable[[], bool]
) -> bool:
    """Whether a source among the work `rows` holds bytes that no run embedded yet, as far as
    the listing tells: one whose size changed since the last run (an edit; a file only touched
    keeps its size, and one marked by a stopped run, `NOT_BUILT`, is not known to have changed),
    or one new since then where the cache holds nothing of this chunking (`cache_in_use`, asked
    only then: an output built afresh beside a kept cache may find them there). Its chunks are
    expected to miss the embedding cache, so the embedding actors load their model at their
    start, while the chunk tasks run, rather than at their first miss; a guess either way costs
    time only. A run that chunks sources again whose bytes are those of the last (new settings,
    a re-run after a failed build, files touched) loads it only at a miss."""
    new = False
    for row in rows:
        if row["kind"] != SOURCE:
            continue
        before = previous.sources.get(row["path"])
        if before is None:
            new = True
            continue
        size = fingerprint_size(plan.fingerprints[row["path"]])
        if before.fingerprint != NOT_BUILT and fingerprint_size(before.fingerprint) != size:
            return True
    return new and not cache_in_use()
