"""A run's stages on Ray: read and chunk -> embed -> cache writes -> per-topic reduce, streamed by
Ray Data (`topic_summaries`), with the run's bookkeeping actor (`StatsCollector`) and a heartbeat.

The driver holds the listing, the manifest and one small summary per topic; chunks and vectors
stay in the Ray object store and the workers write every topic's files themselves. Only changed
sources travel through the pipeline: a rebuilt topic's unchanged sources are carried by its reduce
straight from the previous tables. `jobs.pipeline` imports this module only for a run that starts
or joins Ray: a small run without Ray (`jobs.in_process`) never imports Ray (0.4-0.55 s).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import ray

from jobs.blocks import Span, topic_counts
from jobs.built import Built, Rebuild
from jobs.config import JobConfig
from jobs.landmarks import Landmark, Plugin
from jobs.local_ray import live_resources, on_the_drivers_node, watching_nodes
from jobs.lock import Check
from jobs.logs import quiet_ray_data
from jobs.path_set import PathSet
from jobs.plan import Plan
from jobs.progress import (
    CollectorHandle,
    Goal,
    Heartbeat,
    Tally,
    configure_progress,
    progress_line,
    say_recarry,
    say_written,
)
from jobs.reduce import Piece, reduce_topics
from jobs.resources import (
    EmbedPool,
    actor_stage_args,
    embed_pool,
    reduce_task_options,
    store_stage_args,
    task_stage_args,
)
from jobs.stage_args import (
    cache_in_use,
    chunk_encoder,
    chunk_settings,
    embed_settings,
    topic_context,
)
from jobs.stages.chunk import read_and_chunk
from jobs.stages.embed import EmbedActor
from jobs.stages.store import store_entries
from jobs.stats import RunStats
from jobs.storage import Storage
from jobs.work import Work, embedding_batches, new_content, prepare_work, recarry_rows, work_rows

log = logging.getLogger("mdindex.build")

NO_POOL = "none (nothing to embed: every source of the rebuilt topics is carried)"


@ray.remote(num_cpus=0, concurrency_groups={"counts": 1})
class StatsCollector:
    """The run's one bookkeeping actor, started with it: sums the stage records (a `Tally`), and
    counts the rows of each topic in the blocks the pipeline yields, so the driver never fetches
    their data. One process for both: started first, on a worker process Ray has ready, it leaves
    the processes that start later to the embedding actors (a second actor for the counts,
    starting beside them, delayed their model load by ~0.6 s). The counts run in their own
    thread, so a block being fetched for a count never holds up a task's `add`."""

    def __init__(self) -> None:
        self._tally = Tally()

    def add(self, stats: RunStats, key: str | None = None) -> None:
        """`Tally.add`."""
        self._tally.add(stats, key)

    def embedding(self, key: str, done: RunStats) -> None:
        """`Tally.embedding`."""
        self._tally.embedding(key, done)

    def total(self) -> RunStats:
        """`Tally.total`."""
        return self._tally.total()

    def progress(self) -> RunStats:
        """`Tally.progress`."""
        return self._tally.progress()

    @ray.method(concurrency_group="counts")
    def count_topics(self, block: pa.Table, span: Span) -> dict[str, int]:
        """How many rows of each topic a span of a block holds."""
        return topic_counts(block, span)


def build_topics(run: Rebuild, grows: bool = False, *, began: float) -> Built:
    """Rebuild every topic the plan says to, with a heartbeat; collect summaries and counters.
    `run.check` is called before each topic's reduce starts (`jobs.lock`); `run.marks` are what
    the driver's local folders hold and its third-party classes, for the tasks to check
    (`jobs.landmarks`); `grows`: the cluster may add nodes meanwhile (a GPU pool then grows as
    GPU nodes join, `embed_pool`; a stage no live node holds fails the build after
    `resources.node_wait_seconds`); `began`: when the build began (epoch seconds, its report's
    `started_at`), which the progress lines' seconds count from (not the pipeline's start, 8 to
    25 s later: Ray's start, the plan).

    A topic some of whose unchanged sources cannot be carried (previous tables missing or
    damaged, or without a source's rows) has those read, chunked and embedded in another pass,
    then is reduced again from the rows of both passes. The passes end: a source with a row is
    never carried, so none is sent twice."""
    config, plan, previous, sizes = run.config, run.plan, run.previous, run.sizes
    source, output, check, marks = run.source, run.output, run.check, run.marks
    configure_progress()
    collector = CollectorHandle(StatsCollector.options(**on_the_drivers_node()).remote())
    actor = collector.actor
    nodes = live_resources()  # each live node's CPUs and GPUs: one round trip to Ray's GCS
    cpus = float(sum(node.get("CPU", 0.0) for node in nodes)) or 1.0  # none: a head of 0 CPUs
    node_cpus = max((node.get("CPU", 0.0) for node in nodes), default=cpus)
    gpus = config.resources.embed.num_gpus
    node_gpus = tuple(float(node.get("GPU", 0.0)) for node in nodes) if gpus else ()
    topics = plan.rebuilt
    rows = work_rows(topics, plan, previous, sizes)
    fresh = new_content(rows, plan, previous, lambda: cache_in_use(config))
    work = prepare_work(config, rows, cpus, new_content=fresh)
    del rows  # the batches hold them
    goal = Goal(work.sources, work.bytes, len(topics), batches=len(work.batches))
    summaries: dict[str, dict[str, Any]] = {}
    kept: dict[str, list[Piece]] = {}
    first_pool = None

    def status() -> str:
        line = progress_line(ray.get(actor.progress.remote()), goal, time.time())
        return line + watch.note()  # what no live node of a cluster that grows can hold

    try:
        # on a cluster that grows, a build stopped once no node could hold a stage for
        # resources.node_wait_seconds
        watched = watching_nodes(config.resources, grows, work.embeds)
        with quiet_ray_data(), watched as watch, Heartbeat(status, began=began):
            while True:
                pool = None
                if work.embeds:
                    batches = embedding_batches(work)
                    pool = embed_pool(
                        config.resources.embed,
                        cpus,
                        batches,
                        node_gpus,
                        grows,
                        node_cpus,
                        source_bytes=work.bytes,
                    )
                    first_pool = first_pool or pool
                log.info("embedding pool: %s", pool.label() if pool else NO_POOL)
                recarry: dict[str, list[str]] = {}  # topic -> the sources it could not carry
                pieces_of: dict[str, list[Piece]] = {}  # their topics' rows of this pass
                for summary, pieces in topic_summaries(
                    config,
                    plan,
                    work,
                    source,
                    output,
                    collector,
                    cpus,
                    pool,
                    check,
                    marks,
                    kept,
                ):
                    if "recarry" in summary:
                        recarry[summary["topic"]] = summary["recarry"]
                        pieces_of[summary["topic"]] = pieces
                        continue
                    summaries[summary["topic"]] = summary
                    say_written(summary["topic"], len(summaries), len(topics))
                if not recarry:
                    break
                say_recarry(recarry)
                work = prepare_work(config, recarry_rows(recarry, previous, sizes), cpus)
                watch.expect(work.embeds)  # a pass with nothing to embed asks for no GPU
                kept = pieces_of
                goal = goal.and_pass(work.sources, work.bytes, len(work.batches))
        stats = ray.get(actor.total.remote())
    finally:
        ray.kill(actor)
    return Built(summaries, stats, cpus, first_pool)


def topic_summaries(
    config: JobConfig,
    plan: Plan,
    work: Work,
    source: Storage,
    output: Storage,
    collector: CollectorHandle,
    cpus: float,
    pool: EmbedPool | None,
    check: Check,
    marks: tuple[Landmark | Plugin, ...],
    kept: dict[str, list[Piece]],
) -> Iterator[tuple[dict[str, Any], list[Piece]]]:
    """Run the Ray Data pipeline over `work`; yield one summary per rebuilt topic as it finishes,
    with the pieces of blocks its rows were in (`kept`: a last pass's, reduced again with the
    topic's rows of this pass).

    Stages: read and chunk (CPU tasks, batches packed by size, or by rows aligned with the
    embedding calls: `jobs.work.prepare_work`), embed (actor `pool`), write the
    new cache entries (CPU tasks), then each topic built and written as soon as all its rows are
    embedded (`jobs.reduce`). Without a `pool` (nothing to embed) the rows go from the chunk
    tasks to the reduces, and no actor starts."""
    import ray.data  # here: a run without Ray never imports Ray Data (`jobs.logs.quiet_ray_data`)

    resources = config.resources
    corpus = PathSet.of(plan.fingerprints)
    encoder = chunk_encoder(config) if pool else None
    context = topic_context(config, corpus, source, output, collector, marks)
    # `from_blocks` (a developer API) keeps the batches as they are and reads their metadata here;
    # `from_arrow` ran a remote task per batch for it and waited for them before the pipeline began.
    dataset = ray.data.from_blocks(work.batches).map_batches(
        read_and_chunk,
        batch_format="pyarrow",
        fn_kwargs={
            "source": source,
            "output": output,
            "settings": chunk_settings(config, corpus, encoder),
            "landmarks": marks,
            "collector": collector,
        },
        **task_stage_args(resources.chunk, resources.retries),
    )
    if pool:
        dataset = dataset.map_batches(
            EmbedActor,
            batch_format="pyarrow",
            fn_constructor_kwargs={
                "settings": embed_settings(config, pool, encoder, collector, work.new_content)
            },
            **actor_stage_args(pool, work.call_rows, resources.retries),
        )
    if pool and config.cache:
        dataset = dataset.map_batches(
            store_entries,
            batch_format="pyarrow",
            fn_kwargs={
                "cache_uri": config.cache,
                "storage_options": dict(config.storage_options),
                "collector": collector,
            },
            **store_stage_args(cpus, resources.retries),
        )
    reduce_options = reduce_task_options(resources.index, resources.retries)
    yield from reduce_topics(
        dataset, work.expected, context, reduce_options, collector.actor, check, kept
    )
