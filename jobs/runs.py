"""The output's run history, `{output}/_reindex/runs.jsonl`: one compact JSON object a run, newest
last, the last `KEPT` runs, written with the report (`jobs.report.write_report`: under the build
lock, each file whole, local or S3). A nightly run's report replaced the night before's, so a run
that failed on Monday left no trace once Tuesday's went well; its line stays here.

A run's line is written with its `unfinished` report as it starts and replaced by its own at its
end (ok, sources failed, failed or stopped), so a run killed where it could not report (kill -9,
out of memory) stays `unfinished`; a run whose report names such a run before it
(`last_run_unfinished`) adds its line where the history lacks it (a history begun after it).
A history that is not such lines (damaged, or another program's file) is replaced, never a
reason to fail a build.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from indexing.terminal import counted

if TYPE_CHECKING:
    from jobs.storage import Storage

log = logging.getLogger("mdindex.build")

RUNS_PATH = "_reindex/runs.jsonl"
# A nightly build's three months, in about 40 KB that every run reads and writes whole twice (at
# its start and at its end: one GET and one PUT each on S3); a build every ten minutes keeps 16 h.
KEPT = 100
SHOWN = 10  # the last runs report.html shows
COLUMNS = ("started", "status", "exit", "time", "changed", "deleted", "failed", "embedded")
NUMBERS = frozenset(COLUMNS[2:])  # right-aligned
# The note of a run's unfinished line once a later run found that it had stopped without a word
# (that run's `last_run_unfinished`): it said "still running, or killed" for good (2026-12-01).
NEVER_ENDED = (
    "no end reported: stopped where it could not (kill -9, out of memory), the next run found"
)


class DamagedHistory(ValueError):
    """A runs.jsonl that is not one run's JSON object a line."""


def run_entry(report: dict[str, Any]) -> dict[str, Any]:
    """A report's line in the history: when, how it ended, where it ran, its counts (a report
    that has them), its failure codes with their counts, and a failed run's error."""
    entry = {key: report.get(key) for key in ("started_at", "finished_at", "status", "exit_code")}
    entry |= {key: report.get(key) for key in ("host", "pid")}
    if sources := report.get("sources"):
        changes = report.get("changes") or {}
        added = changes.get("added", {}).get("count", 0)
        entry["sources"] = {
            "seen": sources["seen"],
            "added": added,
            "changed": changes.get("changed", {}).get("count", sources["changed"] - added),
            "deleted": sources["deleted"],
            "failed": sources["failed"],
        }
        chunks, topics = report["chunks"], report["topics"]
        entry["chunks"] = {"embedded": chunks["embedded"], "cache_hits": chunks["cache_hits"]}
        entry["topics"] = {"rebuilt": topics["rebuilt"], "deleted": topics["deleted"]}
        entry["broken_links"] = (report.get("broken_links") or {}).get("count", 0)
    if "failures" in report:
        codes: dict[str, int] = {}
        for failure in report["failures"]:
            codes[failure["code"]] = codes.get(failure["code"], 0) + 1
        entry["failures"] = dict(sorted(codes.items()))
    if "error" in report and report.get("status") != "unfinished":  # its error says it runs
        entry["error"] = report["error"]
    return entry


def parse_runs(data: bytes | None) -> list[dict[str, Any]]:
    """The runs in runs.jsonl's bytes, oldest first (none: no file); DamagedHistory where a line
    is not a run's JSON object (with a `status` string)."""
    runs = []
    try:
        for number, line in enumerate((data or b"").decode().splitlines(), 1):
            if not line.strip():
                continue
            run = json.loads(line)
            if not isinstance(run, dict) or not isinstance(run.get("status"), str):
                raise DamagedHistory(f"line {number} is not a run")
            runs.append(run)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
        raise DamagedHistory(str(exc) or type(exc).__name__) from exc
    return runs


def stored_runs(output: Storage) -> list[dict[str, Any]]:
    """The output's history, oldest first; none where it has none, or where it is damaged or
    cannot be read: then one warning says it is replaced (no reason to fail a build)."""
    try:
        return parse_runs(output.read_optional(RUNS_PATH))
    except (DamagedHistory, OSError) as exc:
        log.warning(
            "the run history %s is damaged (%s): it is replaced by one that starts here",
            output.uri(RUNS_PATH),
            exc,
        )
        return []


def updated_runs(
    runs: list[dict[str, Any]], report: dict[str, Any], unreported: bool = False
) -> list[dict[str, Any]]:
    """The history with `report`'s line last, in place of its run's unfinished line (the same
    start, host and pid: two runs of one process in one second are two lines), after a line for
    the unfinished run it names before it where the history has none, that run's line noted as
    found stopped (`NEVER_ENDED`); the last KEPT.
    `unreported`: the output's report.json still says this run is unfinished; where the history
    has no unfinished line of it but ends with its line, its end's report stopped between
    runs.jsonl and report.json (a SIGTERM there, then its failed report), and this line replaces
    that one (one run was two lines, "ok 0" and "failed 143")."""
    entry = run_entry(report)
    kept = [run for run in runs if run["status"] != "unfinished" or not same_run(run, entry)]
    if unreported and len(kept) == len(runs) and kept and same_run(kept[-1], entry):
        kept.pop()
    before = report.get("last_run_unfinished")
    if before and not any(same_run(run, before) for run in kept):
        kept.append({**before, "status": "unfinished", "exit_code": None, "finished_at": None})
    if before:
        kept = [
            {**run, "error": NEVER_ENDED}
            if run["status"] == "unfinished" and same_run(run, before)
            else run
            for run in kept
        ]
    return [*kept, entry][-KEPT:]


def same_run(run: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether two lines (or a line and `last_run_unfinished`) name one run: its start, host and
    pid (a run without a start is its own)."""
    keys = ("started_at", "host", "pid")
    return run.get("started_at") is not None and all(run.get(k) == other.get(k) for k in keys)


def runs_bytes(runs: list[dict[str, Any]]) -> bytes:
    """runs.jsonl's bytes: one compact JSON object a line."""
    return "".join(json.dumps(run, separators=(",", ":")) + "\n" for run in runs).encode()


def run_row(run: dict[str, Any]) -> dict[str, str]:
    """A run's cells in the history's table (`COLUMNS`; "-" where its line has no figure), and
    its note: the failure codes with their counts and the broken links, or a failed run's
    error. A figure of another shape (a line another version of mdindex wrote, or one edited by
    hand) shows as it is, or "-": a `sources` that was a list stopped every build that rendered
    the history (its report not written: exit 1) and `mdindex report --runs` with a traceback."""
    sources = _mapping(run.get("sources"))
    both = (sources.get("added", 0), sources.get("changed", 0))
    changed = sum(both) if sources and all(isinstance(n, int) for n in both) else None
    code = run.get("exit_code")
    notes = [f"{n} {name}" for name, n in _mapping(run.get("failures")).items()]
    if isinstance(broken := run.get("broken_links"), int) and broken > 0:
        notes.append(counted(broken, "broken link"))  # the reason for a fail check's exit 3
    failures = ", ".join(notes)
    cells = {
        "started": _when(run.get("started_at") or run.get("finished_at")),
        "status": str(run.get("status")),
        "exit": "-" if code is None else str(code),
        "time": _duration(run.get("started_at"), run.get("finished_at")),
        "changed": _figure(changed),
        "deleted": _figure(sources.get("deleted")),
        "failed": _figure(sources.get("failed")),
        "embedded": _figure(_mapping(run.get("chunks")).get("embedded")),
    }
    if run.get("status") == "unfinished":
        failures = "no end reported: still running, or killed (kill -9, out of memory)"
    return {**cells, "note": str(run.get("error") or failures)}


def runs_table(runs: list[dict[str, Any]]) -> str:
    """The history as a text table, newest first, a run's note after its figures."""
    rows = [dict(zip(COLUMNS, COLUMNS, strict=True))] + [run_row(run) for run in reversed(runs)]
    widths = {column: max(len(row[column]) for row in rows) for column in COLUMNS}

    def line(row: dict[str, str]) -> str:
        cells = [
            row[c].rjust(widths[c]) if c in NUMBERS else row[c].ljust(widths[c]) for c in COLUMNS
        ]
        return "  ".join([*cells, row.get("note", "")]).rstrip()

    return "\n".join(line(row) for row in rows)


def _mapping(value: Any) -> dict[str, Any]:
    """A line's section (`sources`, `chunks`, `failures`) where it is one, else none."""
    return value if isinstance(value, dict) else {}


def _figure(value: Any) -> str:
    return "-" if value is None else str(value)


def _when(stamp: Any) -> str:
    """An ISO time as "2026-11-30 11:27" (UTC, as the reports write it); "-" where unknown."""
    return stamp[:16].replace("T", " ") if isinstance(stamp, str) else "-"


def _duration(started: Any, finished: Any) -> str:
    """How long a run took, "42 s", "7 min 05 s", "2 h 03 min"; "-" where a time is unknown."""
    try:
        seconds = round(
            (datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds()
        )
    except (TypeError, ValueError):  # unfinished, or a run without a start
        return "-"
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
