"""The pipeline's input rows (one per changed source, per rebuilt topic and per topic's questions)
and their packing into Arrow batches by size."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from jobs.config import EmbedResources, JobConfig
from jobs.manifest import Manifest
from jobs.plan import Plan, TopicPlan
from jobs.records import QUESTIONS, SOURCE, TOPIC, new_row, to_table
from jobs.resources import embed_batch_size

BATCHES_PER_CPU = 4  # automatic batch size: the corpus cut into about this many batches per CPU
MIN_BATCH_BYTES, MAX_BATCH_BYTES = 250_000, 16_000_000


def work_rows(
    topics: list[TopicPlan],
    plan: Plan,
    previous: Manifest,
    sizes: dict[str, int],
    *,
    carry: bool,
) -> list[dict[str, Any]]:
    """The pipeline's input rows: per rebuilt topic a topic row, its changed sources and its
    questions, in topic order.

    A source unchanged since a run in which it succeeded gets no row when `carry`: the topic row
    names it, and the reduce takes it from the previous tables. One that failed is read again
    (with a settled failure, to fail the same way: the reduce keeps its previous rows)."""
    rows = []
    for topic in topics:
        carried = {}
        sources = []
        for path in topic.sources:
            before = previous.sources.get(path)
            if (
                carry
                and path not in plan.changed
                and before is not None
                and before.sha256
                and not before.failed
            ):
                carried[path] = before.sha256
                continue
            sources.append(
                new_row(
                    topic.topic,
                    SOURCE,
                    path,
                    size=sizes[path],
                    previous_hash=before.sha256 if before else None,
                )
            )
        facts = {"children": list(topic.children), "keywords": topic.keywords, "carried": carried}
        rows.append(new_row(topic.topic, TOPIC, "", size=0, payload=json.dumps(facts).encode()))
        rows.extend(sources)
        if topic.questions:
            rows.append(
                new_row(topic.topic, QUESTIONS, topic.questions, size=sizes[topic.questions])
            )
    return rows


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


def batch_bytes(config: JobConfig, total: int, cpus: float) -> float:
    """Bytes of sources per read-and-chunk task: the config's, or about 4 batches per CPU."""
    if config.resources.chunk.batch_mb is not None:
        return config.resources.chunk.batch_mb * 1e6
    return min(MAX_BATCH_BYTES, max(MIN_BATCH_BYTES, total / (BATCHES_PER_CPU * cpus)))


@dataclass(frozen=True)
class Work:
    """The pipeline's input: work rows packed into Arrow batches by size, the rows each topic
    expects, and the sources (and their bytes) among them. The rows themselves are not kept."""

    batches: list[pa.Table]
    expected: Counter
    sources: int
    bytes: int
    questions: int = 0  # topics whose qa-pairs.md are embedded (as queries, mostly from the cache)

    @property
    def embeds(self) -> bool:
        """Whether any row has texts to embed: a source to chunk, or a topic's questions. Not so
        when every source of the rebuilt topics is carried (a source deleted, a topic's child)."""
        return bool(self.sources or self.questions)

    @property
    def block_rows(self) -> int:
        """The most rows one chunk task gets."""
        return max((batch.num_rows for batch in self.batches), default=1)

    @property
    def source_bytes(self) -> float:
        """The mean listed size of a source."""
        return self.bytes / max(1, self.sources)


def embedding_batches(resources: EmbedResources, work: Work) -> int:
    """How many batches the embedding actors can run at once: one per chunk task, and (with a
    batch size set, and on GPUs) no more than the sources make batches of `embed_batch_size`
    documents. Ray Data splits one chunk task's block into batches one after another, never in
    parallel (a 1-document batch size over one block: one task at a time)."""
    rows = embed_batch_size(resources, block_rows=work.block_rows, source_bytes=work.source_bytes)
    if rows is None:
        return len(work.batches)
    return max(1, min(len(work.batches), math.ceil(work.sources / rows)))


def prepare_work(config: JobConfig, rows: list[dict[str, Any]], cpus: float) -> Work:
    """`rows` packed into Arrow batches (`batch_bytes` each), with what the driver keeps of them."""
    target = batch_bytes(config, sum(row["size"] for row in rows), cpus)
    return Work(
        batches=[to_table(batch) for batch in pack_batches(rows, target)],
        expected=Counter(row["topic"] for row in rows),
        sources=sum(1 for row in rows if row["kind"] == SOURCE),
        bytes=sum(row["size"] for row in rows if row["kind"] == SOURCE),
        questions=sum(1 for row in rows if row["kind"] == QUESTIONS),
    )
