"""The build job: discover on the driver, stream read+chunk -> embed -> cache writes -> per-topic
reduce on Ray Data, then finish on the driver (`jobs.finish`).

The driver holds the listing, the manifest and one small summary per topic; chunks and vectors
stay in the Ray object store and the workers write every topic's files themselves. Only changed
sources travel through the pipeline: a rebuilt topic's unchanged sources are carried by its reduce
straight from the previous tables.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import ray

from indexing.terminal import counted
from jobs.broken_links import index_broken_links
from jobs.built import Built, Rebuild
from jobs.cgroups import usable_cpus
from jobs.config import JobConfig
from jobs.discovery import (
    abort_stops,
    check_output_roots,
    discover,
    list_input,
    output_storage,
)
from jobs.finish import finish
from jobs.in_process import build_in_process, in_process_rows
from jobs.landmarks import Landmark, Plugin, config_plugins, landmarks
from jobs.local_ray import live_resources, on_the_drivers_node, start_ray, watching_nodes
from jobs.lock import Check, output_lock
from jobs.logs import quiet_ray_data
from jobs.manifest import MANIFEST_PATH
from jobs.path_set import PathSet
from jobs.plan import (
    KEEP,
    REBUILD,
    RELINK,
    Plan,
    interim_manifest,
    plan_warnings,
    settings_differ,
)
from jobs.progress import (
    Goal,
    Heartbeat,
    StatsCollector,
    configure_progress,
    progress_line,
    say_recarry,
    say_written,
)
from jobs.reduce import Piece, reduce_topics
from jobs.report import (
    build_report,
    key_settings,
    run_facts,
    source_changes,
    unfinished_run,
    write_report,
    write_unfinished_report,
)
from jobs.report_html import SETTINGS_CHANGED, unfinished_note
from jobs.resources import (
    EmbedPool,
    actor_stage_args,
    embed_pool,
    reduce_task_options,
    store_stage_args,
    task_stage_args,
)
from jobs.signals import held
from jobs.stage_args import (
    cache_in_use,
    chunk_encoder,
    chunk_settings,
    embed_settings,
    topic_context,
)
from jobs.stages.chunk import SourceFailed, read_and_chunk
from jobs.stages.embed import EmbedActor
from jobs.stages.store import store_entries
from jobs.stats import NAMED, RunStats
from jobs.storage import FileInfo, SkippedLink, Storage
from jobs.work import (
    Work,
    embedding_batches,
    new_content,
    prepare_work,
    recarry_rows,
    work_rows,
)

log = logging.getLogger("mdindex.build")

NO_POOL = "none (nothing to embed: every source of the rebuilt topics is carried)"


def run_job(
    config: JobConfig,
    *,
    began: float | None = None,
    failed: Callable[[BaseException, bool], None] | None = None,
    reported: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run one build and return its report (also written to `{output}/_reindex/report.json`).

    The input is listed first (a missing one touches nothing), then the output's build lock is
    held throughout (`jobs.lock`: a second build on the output fails at once). `began`: when the
    run began (epoch seconds; now if not given), which its reports name. `failed` is called
    with the error that ends the run (a signal's too) and whether the run held the lock then,
    for the caller to report it, before the lock is released; a report written after the
    release stood for the run of a build that took the lock meanwhile. A failure before the
    lock (listing the input, taking the lock) comes without it: the caller may write only where
    no other build holds it (`jobs.lock.unless_busy`), or its report replaced a running build's.
    `reported` is called with the run's report once it is in place, the lock still held
    (`jobs.build_cli`: a signal from there on ends the process with the run's exit code). From
    the run's end on (its report's write, or `failed`'s) to the lock's release, a signal waits
    for the release (`jobs.signals.held`), then is taken: the run's report is whole, and one."""
    started = time.perf_counter()
    began = time.time() if began is None else began
    if note := config.s3_note():
        log.info("%s", note)
    with contextlib.ExitStack() as end:  # the signals held from the run's end, after the lock
        with contextlib.ExitStack() as lock:  # released after a failure is reported
            locked = False
            try:
                listing = list_input(config)
                check_output_roots(config)
                output = output_storage(config)
                check = lock.enter_context(output_lock(output))
                locked = True
                report = _run_locked(config, listing, check, began=began, started=started)
                end.enter_context(held())
                write_report(output, report)
                if reported:
                    reported(report)
            except BaseException as error:
                end.enter_context(held())
                if failed:
                    failed(error, locked)
                raise
    return report


def _run_locked(
    config: JobConfig,
    listing: list[FileInfo | SkippedLink],
    check: Check,
    *,
    began: float,
    started: float,
) -> dict[str, Any]:
    """`run_job`'s build from the input's `listing`, once the lock is held (`check`: raises
    `LockLost` once it is no longer held, called before the first write, each topic's reduce and
    the finish; `began`, `started`: when the run began, in epoch seconds and by
    `time.perf_counter`); returns its report, for `run_job` to write.

    The run's `unfinished` report, its line in the history, goes in before Ray starts (3-10 s
    on 2 CPUs): a run killed there (kill -9, out of memory) left no report and no line."""
    wall: dict[str, float] = {}
    found = discover(config, listing)
    source, output, plan = found.source, found.output, found.plan
    rebuilt = plan.rebuilt
    wall["discover"] = time.perf_counter() - started
    log.info(
        "%s in %s: %d changed, %d deleted; %s to rebuild",
        counted(len(plan.fingerprints), "source"),
        counted(len(plan.topics), "topic"),
        len(plan.changed),
        len(plan.deleted),
        counted(len(rebuilt), "topic"),
    )
    settings_changed = settings_differ(found.previous, found.config_key)
    if settings_changed:
        log.info("settings %s", SETTINGS_CHANGED)
    for warning in plan_warnings(plan, config.sources.globs):
        log.warning("%s", warning)
    if config.failure_policy == "abort" and (stops := abort_stops(plan)):
        raise SourceFailed(stops[0])

    check()
    left_unfinished = unfinished_run(output)  # a killed run's, which the next line replaces
    if left_unfinished:
        log.warning("the last run, %s", unfinished_note(left_unfinished, redone=True))
    write_unfinished_report(config, began, left_unfinished)  # before any other write
    built = Built({}, RunStats(), float(usable_cpus()))
    grows = False  # whether the Ray cluster may add nodes during the build
    alone = None  # the work rows of a run whose stages run in this process, without Ray
    if rebuilt:
        mark = time.perf_counter()
        marks = landmarks(source, output) + config_plugins(config)
        alone = in_process_rows(config, plan, found.previous, found.sizes)
        if alone is None:
            grows = start_ray(config, marks)
            wall["ray_start"] = time.perf_counter() - mark
        check()
    # The manifest in the output while this run goes on: what a run stopped from here leaves.
    stored = interim_manifest(found.previous, plan, found.config_key)
    if stored != found.previous:  # the run changes something
        output.write_bytes(MANIFEST_PATH, stored.to_json())
    if rebuilt:
        mark = time.perf_counter()
        run = Rebuild(config, plan, found.previous, found.sizes, source, output, check, marks)
        if alone is None:
            built = build_topics(run, grows, began=began)
        else:
            built = build_in_process(run, alone, began=began)
        wall["pipeline"] = time.perf_counter() - mark

    mark, cpu_mark = time.perf_counter(), time.process_time()
    check()
    manifest, left = finish(config, found.config_key, output, plan, stored, built.summaries)
    wall["finish"] = time.perf_counter() - mark
    finish_cpu = time.process_time() - cpu_mark
    wall["total"] = time.perf_counter() - started
    actions = [t.action for t in plan.topics]
    outcomes = [o for s in built.summaries.values() for o in s["sources"].values()]
    settled_sources = sum(1 for failure in plan.settled if failure["path"] in plan.fingerprints)
    rebuilt_failures = (f for s in built.summaries.values() for f in s["failures"])
    report = build_report(
        built.stats,
        failures=[*plan.skipped, *plan.conflicts, *plan.settled, *rebuilt_failures, *left],
        sources={
            "seen": len(plan.fingerprints),
            "changed": len(plan.changed),
            "unchanged": len(plan.fingerprints) - len(plan.changed),
            "deleted": len(plan.deleted),
            "failed": sum(1 for o in outcomes if o.failed) + settled_sources + len(plan.conflicts),
            "failed_unchanged": settled_sources,
            "chunked": sum(1 for o in outcomes if not o.carried and not o.failed),
            "carried": sum(1 for o in outcomes if o.carried),
        },
        topics={
            "seen": len(plan.topics),
            "rebuilt": actions.count(REBUILD),
            "relinked": actions.count(RELINK),
            "kept": actions.count(KEEP),
            "deleted": len(plan.deleted_topics),
        },
        began=began,
        wall=wall,
        finish_cpu=finish_cpu,
        cpus=built.cpus,
        pool=built.pool.to_dict() if built.pool else None,
        broken_links=index_broken_links(
            manifest.topics.values(),
            (f.path for f in listing),
            config.sources.exclude,
            check=config.checks.broken_links,
            source=source,
        ),
        facts={
            **run_facts(),
            "input": source.uri(),
            "output": output.uri(),
            "cache": config.cache,
            "model": config.embedding.model,
            "strategy": config.chunking.strategy,
            "settings": key_settings(config),
            "settings_changed": settings_changed,
            "last_run_unfinished": left_unfinished,
            "changes": source_changes(plan.changed, plan.deleted, found.previous.sources),
            "unmatched_markdown": {
                "count": len(plan.unmatched),
                "first": list(plan.unmatched[:NAMED]),
            },
        },
    )
    if manifest != stored:  # an unchanged run writes its report alone
        output.write_bytes(MANIFEST_PATH, manifest.to_json())
    return report


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
    collector = StatsCollector.options(**on_the_drivers_node()).remote()
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
        line = progress_line(ray.get(collector.progress.remote()), goal, time.time())
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
        stats = ray.get(collector.total.remote())
    finally:
        ray.kill(collector)
    return Built(summaries, stats, cpus, first_pool)


def topic_summaries(
    config: JobConfig,
    plan: Plan,
    work: Work,
    source: Storage,
    output: Storage,
    collector,
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
        dataset, work.expected, context, reduce_options, collector, check, kept
    )
