"""The build job: discover on the driver, rebuild the topics the plan says to, on Ray Data
(`jobs.on_ray`) or, for a small run, in the driver's own process (`jobs.in_process`), then finish
on the driver (`jobs.finish`) and write the run's report."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

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
from jobs.landmarks import config_plugins, landmarks
from jobs.lock import Check, output_lock
from jobs.manifest import MANIFEST_PATH
from jobs.plan import (
    KEEP,
    REBUILD,
    RELINK,
    interim_manifest,
    plan_warnings,
    settings_differ,
)
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
from jobs.signals import held
from jobs.stages.chunk import SourceFailed
from jobs.stats import NAMED, RunStats
from jobs.storage import FileInfo, SkippedLink

log = logging.getLogger("mdindex.build")


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
            from jobs.local_ray import start_ray  # here: a run without Ray never imports Ray

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
            from jobs.on_ray import build_topics

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
