"""The run report (`{output}/_reindex/report.json`, and from the same dict its page report.html,
`jobs.report_html`) and the human summary printed at the end.

Counts and timings come from the run's merged stage records (`jobs.stats.RunStats`). Timings:
`wall_seconds` are the driver's clock per phase (discover, ray_start, pipeline, finish, total).
`stages` gives per stage its worker-seconds, the CPU time its worker processes used in its calls,
summed over all workers (stages overlap and run in parallel, so these add up to more than the wall
time); its busy-seconds, the wall-clock time of those calls (which on a saturated machine also
counts waiting for a CPU, and on a GPU waiting for the device); its window, from the start of its
first call to the end of its last (`window` in epoch seconds, `window_seconds` its length; none for
`finish`); and its throughput per worker-second: read (bytes), chunk (sources and bytes), embed
(chunks), store (chunks whose vectors were written to the embedding cache), index (topics built and
written), finish (the driver's relinks, deletions, directory indexes and SimHash tables: its
worker-seconds are the driver process's CPU seconds then, its busy-seconds its wall time).
`throughput` is per wall-clock second of the whole run, and `efficiency` is the wall time over the
worker-seconds spread on the run's CPUs (1.0: every CPU busy with stage work all the time; more:
CPUs idle, or busy with work outside the stages, such as starting workers); null for a run whose
pipeline did not run (no topic rebuilt).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Container, Iterable
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from indexing.terminal import counted, printable
from jobs.build_cli import EXIT_JOB_FAILED, EXIT_OK, EXIT_SOURCES_FAILED
from jobs.config import JobConfig
from jobs.lock import describe_holder, holder, this_process, utc
from jobs.manifest import REPORT_HTML_PATH, REPORT_PATH
from jobs.plan import distinct_failures
from jobs.report_html import (
    FAIL_ON_BROKEN,
    NOT_SOURCES,
    SETTINGS_CHANGED,
    SHOWN_FAILURES,
    before_note,
    broken_text,
    empty_file_warnings,
    empty_text,
    failed_non_sources,
    failing_links,
    failure_groups,
    failure_line,
    failure_place,
    link_place,
    render_html,
    unfinished_note,
    unmatched_text,
    unwritten_cache_entries,
)
from jobs.runs import RUNS_PATH, runs_bytes, same_run, stored_runs, updated_runs
from jobs.stats import NAMED, RunStats, StageStats
from jobs.storage import Storage

if TYPE_CHECKING:
    from jobs.broken_links import BrokenLinks

log = logging.getLogger("mdindex.build")
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # ANSI SGR codes
EXAMPLES = 3  # failures of each code a summary of many prints


def key_settings(config: JobConfig) -> dict[str, Any]:
    """The settings a reader of the report wants next to the outcome (not the whole config)."""
    embed, chunk = config.resources.embed, config.resources.chunk
    return {
        "chunking": {"strategy": config.chunking.strategy, **config.chunking.options},
        "embedding": {
            k: getattr(config.embedding, k) for k in ("model", "device", "dtype", "max_length")
        },
        "resources": {
            "num_cpus": config.resources.num_cpus,
            "chunk_batch_mb": chunk.batch_mb,
            "embed_actors": embed.actors,
            "embed_num_gpus": embed.num_gpus,
            "embed_batch_size": embed.batch_size,
        },
        "globs": list(config.sources.globs),
        **({"exclude": list(config.sources.exclude)} if config.sources.exclude else {}),
        "failure_policy": config.failure_policy,
        "checks": {"broken_links": config.checks.broken_links},
        "tenant": config.tenant,
    }


def build_report(
    stats: RunStats,
    *,
    failures: list[dict[str, str]],
    sources: dict[str, int],
    topics: dict[str, int],
    began: float,
    wall: dict[str, float],
    finish_cpu: float,
    cpus: float,
    facts: dict[str, Any],
    pool: dict[str, Any] | None,
    broken_links: BrokenLinks,
) -> dict[str, Any]:
    """The report document: counts, timings with throughput and the embedding `pool` that ran
    (None: no pipeline ran), the index's `broken_links`, failures once each, sorted by path, each
    with the `line` of its source it is on (`report_html.failure_line`; null: unknown). A run
    with failures, or broken links that fail it (`BrokenLinks.fails`), is `sources_failed`.
    `began`: when the run began (epoch seconds); `finish_cpu`: the driver's CPU seconds in the
    finish (its worker-seconds; its wall time is `wall["finish"]`)."""
    failures = [{**f, "line": failure_line(f)} for f in distinct_failures(failures)]
    total = wall["total"]
    finished = time.time()

    finish = StageStats(seconds=wall["finish"], cpu_seconds=finish_cpu)

    def stage(work: StageStats, **per_second: float) -> dict[str, Any]:
        cpu, window = work.cpu_seconds, work.window
        rates = {k: round(v / cpu, 3) if cpu > 0 else None for k, v in per_second.items()}
        return {
            "worker_seconds": round(cpu, 6),
            "busy_seconds": round(work.seconds, 6),
            "window_seconds": None if window.seconds is None else round(window.seconds, 3),
            "window": window.to_dict(),
            **rates,
        }

    def per_wall(items: float) -> float | None:
        return round(items / total, 3) if total > 0 else None

    worker_seconds = sum(
        work.cpu_seconds
        for work in (
            stats.read,
            stats.chunk,
            stats.tokenize,
            stats.embed,
            stats.store,
            stats.index,
            finish,
        )
    )
    ran = "pipeline" in wall and worker_seconds > 0
    failed = bool(failures) or broken_links.fails  # `checks.broken_links: fail`
    return {
        "status": "sources_failed" if failed else "ok",
        "exit_code": EXIT_SOURCES_FAILED if failed else EXIT_OK,
        "started_at": utc(began),
        "finished_at": utc(finished),
        **facts,
        "sources": sources,
        "topics": topics,
        "chunks": {
            "total": stats.index.chunks,
            "embedded": stats.embed.embedded,
            "cache_hits": stats.embed.cache_hits,
            "cache_reused": stats.embed.cache_reused,
            "reused": stats.index.reused,
            "truncated": stats.embed.truncated,
            "skipped_tail": stats.chunk.skipped_tail,
            "skipped_tokens": stats.chunk.skipped_tokens,
            "skipped_drafts": stats.chunk.skipped_drafts,
            "empty_sources": stats.chunk.empty.to_dict(),
            "tokens": {facts.get("strategy", "chunks"): stats.chunk.tokens.to_dict()},
        },
        # the whole index's links to pages the corpus does not have (`jobs.broken_links`)
        "broken_links": broken_links.to_dict(),
        "slowest_sources": stats.chunk.slowest.to_dict(),
        "bytes_read": stats.read.bytes,
        "timings": {
            "wall_seconds": {k: round(v, 3) for k, v in wall.items()},
            "stages": {
                "read": stage(stats.read, bytes_per_second=stats.read.bytes),
                "chunk": stage(
                    stats.chunk,
                    sources_per_second=stats.chunk.sources,
                    bytes_per_second=stats.chunk.bytes,
                ),
                "tokenize": stage(stats.tokenize, chunks_per_second=stats.tokenize.chunks),
                "embed": stage(stats.embed, chunks_per_second=stats.embed.chunks),
                "store": stage(stats.store, chunks_per_second=stats.store.chunks),
                "index": stage(stats.index, topics_per_second=stats.index.topics),
                "finish": stage(finish, topics_per_second=topics["seen"]),
            },
            "throughput": {
                "bytes_per_second": per_wall(stats.read.bytes),
                "chunks_per_second": per_wall(stats.index.chunks),
            },
            "cpus": cpus,
            "embed_pool": pool,
            # of the pipeline: none ran for a run that rebuilt no topic (its finish alone said 83)
            "efficiency": round(total / (worker_seconds / cpus), 3) if ran else None,
        },
        "counters": stats.to_dict(),
        "failures": failures,
    }


def source_changes(
    changed: Iterable[str], deleted: Iterable[str], before: Container[str]
) -> dict[str, dict[str, Any]]:
    """The sources this run found added (not in the last run's manifest), changed (their bytes,
    the settings or their last outcome differ) and deleted: each kind's count and its first
    NAMED paths in order (the report's counts alone never said which pages a nightly run
    had dropped)."""
    changed = sorted(changed)
    kinds = {
        "added": [path for path in changed if path not in before],
        "changed": [path for path in changed if path in before],
        "deleted": sorted(deleted),
    }
    return {kind: {"count": len(paths), "first": paths[:NAMED]} for kind, paths in kinds.items()}


def change_line(changes: dict[str, dict[str, Any]], seen: int) -> list[str]:
    """The summary's line for `source_changes`, naming the first three of each kind: none where
    nothing was added, changed or deleted, where all `seen` sources were added (a first run),
    or in a report before they were recorded."""
    counts = [change["count"] for change in changes.values()]
    if counts == [seen, 0, 0]:  # added, changed, deleted: every source is new
        return []
    parts = []
    for kind, change in changes.items():
        if count := change["count"]:
            named = ", ".join(change["first"][:3]) + (", …" if count > 3 else "")
            parts.append(f"{count} {kind} ({named})")
    return [f"  changes: {'; '.join(parts)}"] if parts else []


def run_facts() -> dict[str, Any]:
    """What a report says of the process that ran the build: its host, pid and mdindex version
    (a scheduled run's report read days later names the machine whose logs to look at)."""
    try:
        installed = version("mdindex")
    except PackageNotFoundError:  # run from a checkout on PYTHONPATH, not installed
        installed = None
    return {**this_process(), "mdindex_version": installed}


def report_bytes(report: dict[str, Any]) -> bytes:
    """The report as indented JSON bytes."""
    return (json.dumps(report, indent=2) + "\n").encode()


def write_report(output: Storage, report: dict[str, Any], unreported: bool | None = None) -> None:
    """Write `_reindex/report.html`, the run history `_reindex/runs.jsonl` with the report's line
    in it (`jobs.runs`: its unfinished one replaced, or its own line where its end's report.json
    was not written) and then, from the same dict,
    `_reindex/report.json` (a failed run's report too: the page renders whatever sections the
    report has, and the last runs). On local disk the JSON
    is renamed into place last: the run is reported once it is there (`jobs.pipeline.run_job`'s
    `reported`), with its page beside it. `unreported`: whether the output's report.json still
    says this run is unfinished (its own report.json not written), read here where not told."""
    if unreported is None:
        unreported = same_run(unfinished_run(output) or {}, report)
    runs = updated_runs(stored_runs(output), report, unreported)
    output.write_many(
        {
            REPORT_HTML_PATH: render_html(report, runs).encode(),
            RUNS_PATH: runs_bytes(runs),
            REPORT_PATH: report_bytes(report),
        }
    )


def error_text(error: BaseException) -> str:
    """The error as "Type: message", without the terminal colour codes that Ray puts in its
    errors' messages (an actor that died in its `__init__` names its task in cyan)."""
    return _COLOUR.sub("", f"{type(error).__name__}: {error}")


def write_failed_report(
    config: JobConfig,
    error: BaseException,
    exit_code: int = EXIT_JOB_FAILED,
    started: float | None = None,
) -> None:
    """Write the report of a run that failed (exit code 1, 2 refused under the lock, or a
    signal's): what went wrong, no counts, and when it began (`started`: epoch seconds) if told.
    Where the report it replaces is another run's `unfinished` one (a run killed where it could
    not report: this run holds the lock), it names that run (`last_run_unfinished`, logged as
    the run's end does), so that its line in the run history is noted as found stopped: a run
    refused before its own `unfinished` report (`sources.max_deleted_fraction`, an emptied
    input) replaced a killed run's report unsaid, and the next good run named it no more."""
    outcome = {
        "status": "failed",
        "exit_code": exit_code,
        **({} if started is None else {"started_at": utc(started)}),
        "finished_at": utc(time.time()),
        "error": error_text(error),
    }
    try:
        standing = unfinished_run(Storage(config.output, config.storage_options))
    except Exception:  # noqa: BLE001 - a store that cannot be made: the write says so
        standing = None
    outcome, unreported = _naming_killed_run(outcome, standing)
    if "last_run_unfinished" in outcome:  # this run's own had not been written
        log.warning("the last run, %s", unfinished_note(standing, redone=False))
    _write_without_counts(config, outcome, unreported)


def write_unfinished_report(
    config: JobConfig, started: float, standing: dict[str, Any] | None
) -> None:
    """Write the report that stands while this process's run (begun at `started`, epoch
    seconds) goes on, until its own replaces it at its end: status "unfinished", no exit code.
    A run killed where it could not report (kill -9, out of memory, its machine gone) left the
    last run's report, which said "ok"; now it leaves one that says it never finished.
    `standing`: the unfinished run the output's report.json names (`unfinished_run`), as the
    caller read it just before under the build lock; not read again (one GET fewer on S3)."""
    outcome = {
        "status": "unfinished",
        "exit_code": None,
        "started_at": utc(started),
        "error": (
            f"{describe_holder(holder(started))}, has not reported its end: it is still "
            "running, or it was stopped where it could not (kill -9, out of memory, its "
            "machine or container gone); the next build redoes what it changed"
        ),
    }
    _write_without_counts(config, *_naming_killed_run(outcome, standing))


def _naming_killed_run(
    outcome: dict[str, Any], standing: dict[str, Any] | None
) -> tuple[dict[str, Any], bool]:
    """`outcome`, naming the run of the `unfinished` report it replaces (`standing`) as
    `last_run_unfinished` where that is another run's, killed where it could not report (its
    line in the run history is then noted as found stopped, however this run ends), and whether
    `standing` is this process's own run (`unreported`, as `write_report` takes it)."""
    unreported = same_run(standing or {}, {**outcome, **this_process()})
    if standing and not unreported:
        return {**outcome, "last_run_unfinished": standing}, False
    return outcome, unreported


def unfinished_run(output: Storage) -> dict[str, Any] | None:
    """The start, host and pid of the last run where the output's report still says it is
    unfinished: a run killed where it could not report (kill -9, out of memory, its machine
    gone), whose report this run's replaces, which then said nothing of it. None for any other
    report, none, or one that cannot be read (a damaged report is no reason to stop a build)."""
    try:
        last = stored_report(output)
    except OSError:
        return None
    if last is None or last.get("status") != "unfinished":
        return None
    return {key: last.get(key) for key in ("started_at", "host", "pid")}


def stored_report(output: Storage) -> dict[str, Any] | None:
    """The output's report.json as a mapping, for a reader that only looks at it; None where
    there is none or it is damaged (not JSON, nested past the parser, no object). A store that
    cannot be read raises (OSError)."""
    try:
        report = json.loads(output.read_optional(REPORT_PATH) or b"null")
    except (ValueError, RecursionError):
        return None
    return report if isinstance(report, dict) else None


def _write_without_counts(
    config: JobConfig, outcome: dict[str, Any], unreported: bool | None = None
) -> None:
    """Write a report of `outcome` (status, exit code, time, error) and the run's input, output,
    cache (`mdindex cache prune --output` during a run or after a failed one asked for `--cache`)
    and settings. Where the output cannot take even that (a full or read-only disk, an S3 store
    without credentials: botocore's `NoCredentialsError` is no `OSError`), it is only logged.
    `unreported`: as `write_report` takes it."""
    report = {
        **outcome,
        **run_facts(),
        "input": config.input,
        "output": config.output,
        "cache": config.cache,
        "settings": key_settings(config),
    }
    try:
        write_report(Storage(config.output, config.storage_options), report, unreported)
    except Exception as exc:  # noqa: BLE001 - the run's own error, not this one, is its outcome
        log.warning("the run's %s report could not be written: %s", outcome["status"], exc)


def summary(report: dict[str, Any]) -> str:
    """A few lines for a person: what changed, what was embedded, what failed, how long it took
    (a path's control characters escaped: `printable`)."""
    s, c, t = report["sources"], report["chunks"], report["topics"]
    unread = s.get("failed_unchanged")  # absent from reports before it was counted
    settled = f" ({unread} unchanged, not read again)" if unread else ""
    lines = [
        f"mdindex build: {counted(s['seen'], 'source')} in {counted(t['seen'], 'topic')} "
        f"-> {report['output']}",
        f"  sources: {s['changed']} changed, {s['unchanged']} unchanged, {s['deleted']} deleted, "
        f"{s['failed']} failed{settled}; {s['chunked']} chunked, {s['carried']} carried",
        f"  topics:  {t['rebuilt']} rebuilt, {t['relinked']} relinked, {t['kept']} kept, "
        f"{t['deleted']} deleted",
        f"  chunks:  {c['total']} built, {c['embedded']} embedded, {c['cache_hits']} from cache, "
        f"{c['reused']} reused, {c['truncated']} truncated",
        f"  time:    {report['timings']['wall_seconds']['total']:.1f} s",
    ]
    lines[4:4] = chunk_notes(c) + listing_notes(report)
    lines[2:2] = change_line(report.get("changes") or {}, s["seen"])  # since 2026-11-30
    if report.get("settings_changed"):  # absent from reports before it was said
        lines.insert(2, f"  settings: {SETTINGS_CHANGED}")
    lines += before_lines(report) + cache_warnings(report)
    lines += [f"  WARNING {w}" for w in empty_file_warnings(report)]
    if others := failed_non_sources(report):
        lines.append(f"  other:   {others} failed or skipped, not sources ({NOT_SOURCES})")
    lines += failure_lines(report["failures"]) + broken_lines(report)
    return "\n".join(printable(line) for line in lines)


def before_lines(report: dict[str, Any]) -> list[str]:
    """The summary's line for the run a report names before it, killed where it could not report
    (`before_note`); none where it names none."""
    note = before_note(report)
    return [f"  before:  the run before this one, {note}"] if note else []


def failure_lines(failures: list[dict[str, Any]]) -> list[str]:
    """A FAILED line for each failure, `FAILED path:line: CODE: message` as an editor and a CI log
    reader find it (the path alone where the line is unknown), up to SHOWN_FAILURES of them; past
    that, the count of each code and a few of its failures, one of each kind of message first (a
    storm of 2,000 failed sources printed 2,000 lines, and the log of every later run as many
    again)."""

    def line(failure: dict[str, Any]) -> str:
        return f"  FAILED {failure_place(failure)}: {failure['code']}: {failure['message']}"

    if len(failures) <= SHOWN_FAILURES:
        return [line(failure) for failure in failures]
    groups = failure_groups(failures)
    codes = ", ".join(f"{len(group.failures)} {group.code}" for group in groups)
    lines = [
        f"  failed:  {len(failures)} paths, {codes}: a few of each below, every one in "
        "_reindex/report.json ('failures') and report.html"
    ]
    for group in groups:
        shown = group.examples(EXAMPLES)
        lines += [line(failure) for failure in shown]
        if more := len(group.failures) - len(shown):
            lines.append(f"  ...      {more} more {group.code}")
    return lines


def chunk_notes(chunks: dict[str, Any]) -> list[str]:
    """Lines for text the index holds in part: chunks cut to the model's window (a default
    build's 750-token chunks with MiniLM), short final sections the strategy skipped (seed
    003's rule) and drafts left out, each with the option that keeps it, and sources that made
    no chunk, the first three named (counts absent from older reports: none)."""
    notes = []
    if truncated := chunks.get("truncated"):
        notes.append(
            f"  note:    {counted(truncated, 'chunk')} {_were(truncated)} longer than the model's "
            + (
                "window: its end is not in its vector (a smaller chunking.options.max_tokens, as "
                "configs/local.yaml sets, keeps it whole)"
                if truncated == 1
                else "window: their ends are not in their vectors (a smaller "
                "chunking.options.max_tokens, as configs/local.yaml sets, keeps them whole)"
            )
        )
    if tails := chunks.get("skipped_tail"):
        tokens = chunks.get("skipped_tokens")  # absent from reports before 2026-11-22 21:12
        one = "1 source's short final section"
        sections = one if tails == 1 else f"{tails} sources' short final sections"
        size = "" if tokens is None else f"{counted(tokens, 'token')}; "
        notes.append(
            f"  note:    {sections} {_were(tails)} skipped ({size}seed 003's final-chunk rule: "
            f"chunking.options.keep_short_tail: true keeps {'it' if tails == 1 else 'them'})"
        )
    if drafts := chunks.get("skipped_drafts"):
        notes.append(
            f"  note:    {counted(drafts, 'draft')} {_were(drafts)} left out "
            "(front matter draft: true or published: false: pages their site does not show; "
            "sources.include_drafts: true indexes them)"
        )
    if empty := empty_text(chunks):
        notes.append(f"  note:    {empty}")
    return notes


def _were(count: int) -> str:
    """The verb for `count` things: "1 draft was", "2 drafts were"."""
    return "was" if count == 1 else "were"


def listing_notes(report: dict[str, Any]) -> list[str]:
    """A note for the files named like markdown that no glob made a source (the build's log said
    so, its report did not), and one naming the first few links of the index to pages the corpus
    does not have (nothing said so, and their chunks' rows had no `target_document`); none where
    there are none, or in a report before 2026-11-30."""
    broken = None if failing_links(report) else broken_text(report)  # else `broken_lines`
    return [f"  note:    {note}" for note in (unmatched_text(report), broken) if note]


def broken_lines(report: dict[str, Any]) -> list[str]:
    """Where broken links failed the run, a line saying so, then one for each the report names,
    `BROKEN path:line: href` as a writer's editor and CI log reader find them, by path and place
    in it, and how many more there are; none otherwise (a `note:` names the first three)."""
    if not failing_links(report):
        return []
    broken = report["broken_links"]
    count, first = broken["count"], broken["first"]
    names = "names a page" if count == 1 else "name pages"
    lines = [
        f"  links:   {counted(count, 'link')} {names} the corpus does not have ({FAIL_ON_BROKEN})"
    ]
    lines += [f"  BROKEN  {link_place(link)}: {link['href']}" for link in first]
    if more := count - len(first):
        lines.append(f"  ...      {more} more broken links: fix these and build again")
    return lines


def cache_warnings(report: dict[str, Any]) -> list[str]:
    """Lines for the embedding cache entries the run could not write (none: no line): a run
    whose cache cannot be written still exits 0 (the vectors are in the index), and a later
    build that needs those entries embeds their sources again."""
    failed, kept = unwritten_cache_entries(report)
    if not failed:
        return []
    more = f" ({len(kept)} shown)" if len(kept) < failed else ""
    lines = [f"  cache:   {failed} entries could not be written{more}"]
    return lines + [f"  WARNING {warning}" for warning in kept]
