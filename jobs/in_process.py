"""A small run's stages in the driver's own process, without Ray.

A local Ray instance costs a 2-CPU machine about 10 s and 20 CPU-seconds before and around any
work (its start, the run's actors, Ray Data's own actors, the worker processes' imports): most of
a re-run that changed a few pages (benchmarks/HISTORY.md, 2026-12-01, eighth session). Where the
config allows it (`resources.in_process_sources`) and the build is on no cluster (it would start
a local instance of its own, or this process holds one of a single node), a run with that few
sources to read runs the same stage functions one after the other here: read and chunk each
batch, embed it with one `EmbedActor` object, write its cache entries, then build and write each
rebuilt topic. The outputs are the same bytes as the Ray pipeline's."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from indexing.terminal import counted
from jobs.built import Built, Rebuild
from jobs.cgroups import usable_cpus
from jobs.config import JobConfig
from jobs.landmarks import Landmark, Plugin
from jobs.local_fit import ray_initialized
from jobs.manifest import Manifest
from jobs.path_set import PathSet
from jobs.plan import Plan
from jobs.progress import Goal, Heartbeat, Tally, progress_line, say_recarry, say_written
from jobs.resources import actor_env, embed_pool
from jobs.stage_args import (
    cache_in_use,
    chunk_encoder,
    chunk_settings,
    embed_settings,
    topic_context,
)
from jobs.stages.chunk import ChunkSettings, read_and_chunk
from jobs.stages.embed import EmbedActor
from jobs.stages.store import store_entries
from jobs.stages.topic import build_and_write
from jobs.storage import Storage
from jobs.work import (
    Work,
    files_to_read,
    new_content,
    prepare_work,
    recarry_rows,
    work_rows,
)

log = logging.getLogger("mdindex.build")


def in_process_rows(
    config: JobConfig, plan: Plan, previous: Manifest, sizes: dict[str, int]
) -> list[dict[str, Any]] | None:
    """The run's work rows (`jobs.work.work_rows`) where its stages run in the driver's process
    (`runs_without_ray`), else None: made only then (a run on Ray makes its own; a large run's
    were made twice, 17 ms for tldr-en's 7,425 sources)."""
    if not runs_without_ray(config, plan, previous):
        return None
    return work_rows(plan.rebuilt, plan, previous, sizes)


def may_run_without_ray(config: JobConfig) -> bool:
    """Whether the config bounds runs without Ray (`resources.in_process_sources`), embeds on the
    CPU, and the build is not on a cluster (`on_a_cluster`)."""
    if config.resources.in_process_sources is None or config.resources.embed.num_gpus > 0:
        return False
    return not on_a_cluster()


def on_a_cluster() -> bool:
    """Whether the build runs on a Ray cluster: the one RAY_ADDRESS names, or one this process
    is connected to (through Ray Client, or with a node other than this process's own). A local
    instance this process started or joined, of one node, is none: a small run on it would pay
    an embedding actor's start and Ray Data's actors, and gain no CPU."""
    if os.environ.get("RAY_ADDRESS"):
        return True
    if not ray_initialized():
        return False
    import ray  # imported already

    if ray.util.client.ray.is_connected():
        return True
    alive = [node["NodeID"] for node in ray.nodes() if node["Alive"]]
    return alive != [ray.get_runtime_context().get_node_id()]


def runs_without_ray(config: JobConfig, plan: Plan, previous: Manifest) -> bool:
    """Whether the run `plan` rebuilds runs its stages in the driver's process: it may
    (`may_run_without_ray`), and it reads no more sources (and questions files) than the bound."""
    if not may_run_without_ray(config):
        return False
    return files_to_read(plan.rebuilt, plan, previous) <= config.resources.in_process_sources


def build_in_process(run: Rebuild, rows: list[dict[str, Any]], *, began: float) -> Built:
    """`jobs.on_ray.build_topics` without Ray, from the run's work `rows` (`in_process_rows`):
    each rebuilt topic's summary, the run's counters, the CPUs, and its one embedder as a pool
    `in_driver` (None where no pass embeds, as there). A topic some of whose unchanged
    sources cannot be carried has those read in another pass and is built again from the rows of
    both, as there. `run.check` is called before each topic is built (`jobs.lock`)."""
    config, plan, previous, sizes = run.config, run.plan, run.previous, run.sizes
    source, output, check, marks = run.source, run.output, run.check, run.marks
    cpus = float(config.resources.num_cpus or usable_cpus())  # a container's quota, not the host's
    tally = Tally()
    topics = plan.rebuilt
    work = prepare_work(
        config,
        rows,
        cpus,
        new_content=new_content(rows, plan, previous, lambda: cache_in_use(config)),
    )
    corpus = PathSet.of(plan.fingerprints)
    encoder = None  # the model's, for the chunk tasks, once a pass embeds
    # one embedder, on every CPU's torch thread (or `embed.num_cpus` of them), whatever actor
    # count the config gives the pool on Ray
    one = replace(config.resources.embed, actors=1, max_actors=None)
    pool = replace(embed_pool(one, cpus, 1), in_driver=True)
    context = topic_context(config, corpus, source, output, tally, marks)
    goal = Goal(work.sources, work.bytes, len(topics), batches=len(work.batches))
    log.info(
        "no Ray: %s to read, at most resources.in_process_sources (%d): the stages run in this "
        "process, the model on %s",
        counted(files_to_read(topics, plan, previous), "file"),
        config.resources.in_process_sources,
        counted(pool.threads, "torch thread"),
    )
    embedder: EmbedActor | None = None
    summaries: dict[str, dict[str, Any]] = {}
    kept: dict[str, pa.Table] = {}

    def status() -> str:
        return progress_line(tally.progress(), goal, time.time())

    with Heartbeat(status, began=began), settings_kept(actor_env(pool)):
        while True:
            if work.embeds and embedder is None:  # a pass with nothing to embed loads nothing
                encoder = chunk_encoder(config)
                settings = embed_settings(config, pool, encoder, tally, work.new_content)
                embedder = EmbedActor(settings)
            # as the pipeline's passes: the chunk tasks tokenize, and the rows are embedded,
            # where the pass embeds
            pass_embedder = embedder if work.embeds else None
            chunking = chunk_settings(config, corpus, encoder if pass_embedder else None)
            table = _stages(config, work, source, output, chunking, marks, tally, pass_embedder)
            recarry: dict[str, list[str]] = {}
            for topic in work.expected:
                rows_of = table.filter(pc.equal(table.column("topic"), topic))
                if topic in kept:
                    rows_of = pa.concat_tables(
                        [kept.pop(topic), rows_of], promote_options="default"
                    )
                check()
                summary = build_and_write(rows_of, context=context)
                if "recarry" in summary:
                    recarry[topic], kept[topic] = summary["recarry"], rows_of
                    continue
                summaries[topic] = summary
                say_written(topic, len(summaries), len(topics))
            if not recarry:
                break
            say_recarry(recarry)
            work = prepare_work(config, recarry_rows(recarry, previous, sizes), cpus)
            goal = goal.and_pass(work.sources, work.bytes, len(work.batches))
    return Built(summaries, tally.total(), cpus, pool if embedder is not None else None)


@contextlib.contextmanager
def settings_kept(env: dict[str, str]) -> Iterator[None]:
    """The process's own values of the variables in `env` and of torch's thread count, put back
    on exit: the embedder sets them for its model (`EmbedSettings.env` before torch loads, then
    a torch thread per CPU), as an actor does for a process that is the build's alone, but the
    program that ran a build without Ray (a notebook, a `run_job` caller) goes on with its own:
    its later torch work ran on the build's thread count, and each process it started with
    MKL's strict reproducible mode and OpenMP's passive wait. A torch first imported by the
    build keeps the build's count: the program had set none."""
    before = {name: os.environ.get(name) for name in env}
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch else None
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if threads is not None:
            torch.set_num_threads(threads)


def _stages(
    config: JobConfig,
    work: Work,
    source: Storage,
    output: Storage,
    chunking: ChunkSettings,
    marks: tuple[Landmark | Plugin, ...],
    tally: Tally,
    embedder: EmbedActor | None,
) -> pa.Table:
    """Every batch of `work` read and chunked, embedded (by `embedder`, where the pass embeds)
    and its cache entries written (the pipeline's stages, one batch after another); their rows
    in one table."""
    tables = []
    for batch in work.batches:
        rows = read_and_chunk(
            batch, source=source, output=output, settings=chunking, landmarks=marks, collector=tally
        )
        if embedder is not None:
            rows = embedder(rows)
            if config.cache:
                rows = store_entries(
                    rows,
                    cache_uri=config.cache,
                    storage_options=dict(config.storage_options),
                    collector=tally,
                )
        tables.append(rows)
    return pa.concat_tables(tables, promote_options="default")
