"""`{output}/_reindex/report.html`: the run report (`jobs.report`) as one self-contained page with
inline SVG charts (`jobs.svg`), for the people who read a nightly run days later.

Sections: the outcome, exit code and key settings; the output's last runs (`jobs.runs`); sources
(numbers and a bar); per-stage worker-seconds and throughput with the efficiency; chunk token
counts per strategy (histogram with min and max marked, truncated chunks and skipped content);
cache outcomes; failures grouped by code (a code of many: its kinds of message counted, its paths
folded); the slowest sources. A report with sections missing (a failed run) renders what it has.
"""

from __future__ import annotations

import json
import math
import re
import signal
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from chunking import CHUNKING_FAILED, INVALID_FRONT_MATTER
from embedding.files import S3_PROTOCOLS, protocol_of
from indexing.hal import INDEX_JSON_FAILED, NOT_JSON
from indexing.keywords import KEYWORDS_FAILED
from indexing.questions import QUESTIONS_FAILED
from indexing.terminal import counted, printable
from indexing.topic_spec import TOPIC_SPEC_FAILED
from jobs.lock import LEASE_S
from jobs.manifest import SETTLED_FAILURES
from jobs.plan import unmatched_note
from jobs.runs import COLUMNS, NUMBERS, SHOWN, run_row
from jobs.signals import STOPPED_CODES
from jobs.stats import NAMED
from jobs.svg import Bar, Bin, bar_chart, histogram, stacked_bar

BINS = 24  # about this many bars in the token histogram
# failures the summary prints one a line (past it: a few of each code), and rows of a code's table
# the page shows open (past it: folded, its kinds above it)
SHOWN_FAILURES = 20
FAIL_ON_BROKEN = "checks.broken_links: fail"  # the setting that makes broken links fail a run
_NUMBER = re.compile(r"\d+")  # "invalid UTF-8 at byte offset 90" and "... 87" are one kind
# where a failure names the line of its file: the chunker's ("YAML front matter at line 3",
# "invalid UTF-8 at byte offset 49 (line 3)", "the code fence opened at line 8", "TOML front
# matter at its end, line 7") and, since 2026-11-30, a topic file's (qa-pairs.md's, topic-spec.md's
# "invalid UTF-8 at byte offset 9 (line 2)", a keywords file's too or "keywords table row 2 (line
# 5)"), and an index.json's that is no JSON ("not JSON (trailing comma is not allowed at line 3,
# column 9)"); only these codes' messages are read, the first match (another's may hold such words
# in a file name; these name the line before any text of the file: of INDEX_JSON_FAILED's, only
# the not-JSON one does, another quotes the file's `id` first)
_LINE = re.compile(r"(?:\bat |\bend, |\()line (\d+)\b")
_LINE_CODES = frozenset(
    {CHUNKING_FAILED, INVALID_FRONT_MATTER, QUESTIONS_FAILED, KEYWORDS_FAILED, TOPIC_SPEC_FAILED}
)
RUN_FACTS = ("host", "pid", "mdindex_version")  # `jobs.report.run_facts`: reports since 2026-11-29
# lower is better: 1.0 is every CPU busy with stage work all along (the label said only the ratio)
EFFICIENCY = "efficiency: wall time / (worker-seconds / CPUs); 1 = every CPU busy, more = idle CPUs"
# why a run whose input did not change reads every source: the log's line, the summary's, the page's
SETTINGS_CHANGED = (
    "changed since the last run (a setting, the model's files, or this version's chunking or "
    "indexing revision): every source counts as changed and every topic is rebuilt"
)
GREEN, BLUE, GREY, RED, ORANGE, TEAL, YELLOW, PURPLE = (
    "#54a24b", "#4c78a8", "#bab0ac", "#e45756", "#f58518", "#72b7b2", "#eeca3b", "#b279a2",
)  # fmt: skip
STAGE_COLORS = {
    "read": TEAL, "chunk": BLUE, "tokenize": PURPLE, "embed": ORANGE,
    "store": YELLOW, "index": GREEN, "finish": GREY,
}  # fmt: skip

STYLE = """
body { font-family: sans-serif; margin: 2em auto; max-width: 980px; color: #222;
       overflow-wrap: anywhere; }  /* a long path wraps, the page keeps its width */
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
.status { display: inline-block; padding: .2em .7em; border-radius: 4px; color: #fff; }
.ok { background: #54a24b; } .warn { background: #f58518; } .bad { background: #e45756; }
table { border-collapse: collapse; margin: .6em 0; font-size: .92em; }
td, th { padding: .25em .7em; border-bottom: 1px solid #eee; text-align: left; }
td { vertical-align: top; }
th { white-space: nowrap; vertical-align: top; }  /* beside long paths: not one letter a line */
.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.figures { display: flex; flex-wrap: wrap; gap: .6em; margin: .6em 0; }
.figure { border: 1px solid #ddd; border-radius: 4px; padding: .4em .8em; min-width: 6em; }
.figure b { display: block; font-size: 1.3em; }
.bar { background: #4c78a8; height: .8em; }
.none { color: #777; font-style: italic; }
code { font-size: .92em; }
"""


def render_html(report: dict[str, Any], runs: Sequence[dict[str, Any]] = ()) -> str:
    """The report page for one run report (the dict `jobs.report.build_report` makes), and the
    last of the output's `runs` (`jobs.runs`, oldest first; none: no such section)."""
    sections = [
        _outcome(report),
        _runs(runs),
        _sources(report),
        _stages(report),
        _chunks(report),
        _cache(report),
        _failures(report),
        _slowest(report),
    ]
    title = f"mdindex run report: {report.get('output', '')}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{escape(title)}</h1>{''.join(sections)}</body></html>\n"
    )


def _figures(pairs: list[tuple[str, Any]]) -> str:
    return (
        '<div class="figures">'
        + "".join(
            f'<div class="figure"><b>{escape(_number(v))}</b>{escape(k)}</div>' for k, v in pairs
        )
        + "</div>"
    )


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return "n/a" if value is None else str(value)


def _scaled(value: float | None, factor: float) -> float | None:
    """A rate in other units; None (a run of no wall time) stays "n/a", not 0."""
    return None if value is None else value * factor


def _none(text: str) -> str:
    return f'<p class="none">{escape(text)}</p>'


def _outcome(report: dict[str, Any]) -> str:
    status = report.get("status", "unknown")
    css = {"ok": "ok", "sources_failed": "warn"}.get(status, "bad")
    facts = ("input", "output", "cache", "model", "strategy")
    rows = [(k, report[k]) for k in facts if k in report]
    keys = report.get("counters", {}).get("embed", {}).get("model_keys")
    rows += [("model keys", ", ".join(keys))] if keys else []
    rows += [("started", report["started_at"])] if "started_at" in report else []
    rows += [("finished", report["finished_at"])] if "finished_at" in report else []
    rows += [(k.replace("_", " "), report[k]) for k in RUN_FACTS if k in report]
    rows += _flatten(report.get("settings", {}))
    if report.get("settings_changed"):  # why every source was read: not the input
        rows.append(("settings", SETTINGS_CHANGED))
    if note := before_note(report):  # its own report, replaced by this one
        rows.append(("the run before", note))
    if "error" in report:
        rows.append(("error", report["error"]))
    table = "".join(
        f"<tr><th>{escape(k)}</th><td><code>{escape(_setting(v))}</code></td></tr>" for k, v in rows
    )
    step = next_step(report)
    return (
        f'<p><span class="status {css}">{escape(status)}</span> '
        f"exit code <b>{escape(_number(report.get('exit_code')))}</b></p>"
        + (f"<p><b>Next:</b> {escape(step)}</p>" if step else "")
        + f"<h2>Run and settings</h2><table>{table}</table>"
    )


def _runs(runs: Sequence[dict[str, Any]]) -> str:
    """The last SHOWN runs of the output's history, newest first (this one among them)."""
    if not runs:  # a page rendered from a report alone
        return ""
    head = "".join(f"<th>{escape(c)}</th>" for c in COLUMNS) + "<th></th>"
    rows = []
    for run in reversed(runs[-SHOWN:]):
        row = run_row(run)
        cells = "".join(
            f'<td class="n">{escape(row[c])}</td>' if c in NUMBERS else f"<td>{escape(row[c])}</td>"
            for c in COLUMNS
        )
        rows.append(f"<tr>{cells}<td>{escape(row['note'])}</td></tr>")
    kept = (
        f"the last {len(runs[-SHOWN:])} of {len(runs)} in _reindex/runs.jsonl, newest first, "
        "started in UTC"
    )
    return f"<h2>Last runs</h2><p>{escape(kept)}</p><table><tr>{head}</tr>{''.join(rows)}</table>"


def before_note(report: dict[str, Any]) -> str | None:
    """The unfinished run a report names before it (`last_run_unfinished`) in words, None where
    it names none. A report with counts is a run's that built, and so redid what that one
    changed."""
    run = report.get("last_run_unfinished")
    return unfinished_note(run, redone="chunks" in report) if run else None


def unfinished_note(run: dict[str, Any], *, redone: bool) -> str:
    """An unfinished last run (`unfinished_run`) in words, for the log, the summary and the page;
    `redone`: the run saying so builds, and so redoes what that one changed (a run refused or
    failed before its build said it did too, 2026-12-01)."""
    who = "this run" if redone else "the next build"
    return (
        f"pid {run.get('pid')} on {run.get('host')}, started {run.get('started_at')}, never "
        "reported its end (stopped where it could not: kill -9, out of memory, its machine or "
        f"container gone, its S3 lock lost); {who} redoes what it changed"
    )


def _flatten(settings: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    rows = []
    for key, value in settings.items():
        if isinstance(value, dict) and value:
            rows += _flatten(value, f"{prefix}{key}.")
        else:
            rows.append((f"{prefix}{key}", value))
    return rows


def _setting(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _sources(report: dict[str, Any]) -> str:
    s, t = report.get("sources"), report.get("topics")
    if not s:
        return "<h2>Sources</h2>" + _none("no source counts in this report")
    keys = (
        "seen",
        "changed",
        "unchanged",
        "deleted",
        "failed",
        "failed_unchanged",
        "chunked",
        "carried",
    )
    figures = [(k, s.get(k)) for k in keys]
    if others := failed_non_sources(report):  # "0 failed" beside "Failures (1)" otherwise
        figures.append((f"other files failed or skipped ({NOT_SOURCES})", others))
    html = "<h2>Sources</h2>" + _figures(figures)
    untouched = max(0, s["seen"] - s["chunked"] - s["carried"] - s["failed"])
    parts = [
        Bar("chunked", s["chunked"], _number(s["chunked"]), GREEN),
        Bar("carried", s["carried"], _number(s["carried"]), BLUE),
        Bar("failed", s["failed"], _number(s["failed"]), RED),
        Bar("untouched", untouched, _number(untouched), GREY),
    ]
    if s["seen"]:
        html += stacked_bar(parts, "sources of this run")
    if t:
        html += _figures([(f"topics {k}", v) for k, v in t.items()])
    if note := unmatched_text(report):
        html += f'<p><span class="status warn">not sources</span> {escape(note)}</p>'
    if note := broken_text(report, shown=NAMED):
        css = "bad" if failing_links(report) else "warn"
        html += f'<p><span class="status {css}">broken links</span> {escape(note)}</p>'
    if note := empty_text(report.get("chunks") or {}, shown=NAMED):
        html += f'<p><span class="status warn">no chunk</span> {escape(note)}</p>'
    for warning in empty_file_warnings(report):
        html += f'<p><span class="status warn">nothing read</span> {escape(printable(warning))}</p>'
    return html + _changes(report)


def _changes(report: dict[str, Any]) -> str:
    rows = ""
    for kind, change in (report.get("changes") or {}).items():  # reports since 2026-11-30
        if not change["count"]:
            continue
        more = change["count"] - len(change["first"])
        paths = ", ".join(f"<code>{escape(printable(path))}</code>" for path in change["first"])
        rows += (
            f'<tr><th>{escape(kind)}</th><td class="n">{_number(change["count"])}</td>'
            f"<td>{paths}{f', and {_number(more)} more' if more else ''}</td></tr>"
        )
    return f"<h3>Sources since the last run</h3><table>{rows}</table>" if rows else ""


def unmatched_text(report: dict[str, Any]) -> str | None:
    """The files named like markdown that no glob made a source, in the log's words (None where
    there are none, or in a report before they were recorded)."""
    unmatched = report.get("unmatched_markdown") or {}
    if not unmatched.get("count"):
        return None
    globs = report.get("settings", {}).get("globs", [])
    return unmatched_note(unmatched["first"], globs, unmatched["count"])


def broken_text(report: dict[str, Any], shown: int = 3) -> str | None:
    """The index's links to pages the corpus does not have, the first `shown` named as
    `source → href` (None where there are none, or in a report before they were counted; one of
    a run before the whole index's were, 2026-11-30, counted its rebuilt topics' alone)."""
    broken = report.get("broken_links") or {}
    if not (count := broken.get("count")):
        return None
    first = broken["first"][:shown]
    named = ", ".join(
        f"{printable(link_place(link))} → {printable(link['href'])}" for link in first
    )
    names = "names a page" if count == 1 else "name pages"
    fails = "" if failing_links(report) else f" ({FAIL_ON_BROKEN} fails the run on them)"
    return (
        f"{counted(count, 'link')} {names} the corpus does not have: "
        f"{named}{', …' if count > len(first) else ''}{fails}"
    )


def empty_text(chunks: dict[str, Any], shown: int = 3) -> str | None:
    """The sources this run chunked that made no chunk (empty, blank or front matter alone), from
    a report's `chunks`, the first `shown` named (None where there are none, or in a report
    before they were counted)."""
    empty = chunks.get("empty_sources") or {}
    if not (count := empty.get("count")):
        return None
    first = empty["first"][:shown]
    named = ", ".join(printable(path) for path in first) + (", …" if count > len(first) else "")
    made = "source made" if count == 1 else "sources made"
    return (
        f"{count} {made} no chunk (empty, blank or front matter alone: nothing to index): {named}"
    )


def next_step(report: dict[str, Any]) -> str | None:
    """What the person reading a run's report (days later, say) should do next, in a sentence;
    None for a run that went well. A report said what happened, never what to do about it."""
    status, code = report.get("status"), report.get("exit_code")
    again = "the next build redoes what this one changed"
    if status == "unfinished":
        process = f"pid {report.get('pid')} on {report.get('host')}"
        if protocol_of(str(report.get("output", ""))) in S3_PROTOCOLS:
            # its S3 lock outlives a build killed where it could not release it: "build again"
            # alone sent the operator to a build that exited 75 for up to LEASE_S
            minutes = f"{LEASE_S / 60:.0f} minutes"
            return (
                f"if {process} no longer runs, build again once its S3 lock has expired, "
                f"{minutes} after its last renewal at most (until then another build of this "
                f"output exits 75, naming the time): {again}"
            )
        return (
            f"if {process} no longer runs, build again: "
            f"{again} (while it runs, another build of this output exits 75)"
        )
    if status == "failed":
        if code in STOPPED_CODES:
            return f"stopped by {signal.Signals(code - 128).name}: build again; {again}"
        return f"its error says what went wrong: put that right and build again; {again}"
    if status != "sources_failed":
        return None
    failures = report.get("failures") or []
    settled = [f for f in failures if f.get("code") in SETTLED_FAILURES]
    others = [f for f in failures if f.get("code") not in SETTLED_FAILURES]
    steps = []
    if settled:
        steps.append(
            f"fix {counted(len(settled), 'file')} whose content failed ({_codes(settled)}): "
            f"unchanged, {'it fails' if len(settled) == 1 else 'they fail'} every build (exit 3)"
        )
    if others:
        steps.append(
            f"see to {counted(len(others), 'other failure')} ({_codes(others)}): every build "
            f"tries {'it' if len(others) == 1 else 'them'} again"
        )
    if failing_links(report):
        links = counted(report["broken_links"]["count"], "broken link")
        steps.append(f"fix the {links} or set checks.broken_links: note")
    return "; ".join([*steps, "all else is written"])


def _codes(failures: list[dict[str, Any]]) -> str:
    return ", ".join(sorted({str(f.get("code")) for f in failures}))


def failing_links(report: dict[str, Any]) -> bool:
    """Whether the report's broken links failed its run (`checks.broken_links: fail`)."""
    broken = report.get("broken_links") or {}
    return broken.get("check") == "fail" and bool(broken.get("count"))


def place(path: str, line: int | None) -> str:
    """`guides/a.md:14`, the path alone where the line is unknown."""
    return path if line is None else f"{path}:{line}"


def failure_line(failure: dict[str, Any]) -> int | None:
    """The line of its source a report's failure is on (1-based; None: unknown): its `line`
    where the record has one (report.json's, since 2026-11-30), else the one its message names
    (a failure as the build records it, or an older report's)."""
    if "line" in failure:
        return failure["line"]
    code, message = failure["code"], failure["message"]
    names = code in _LINE_CODES or (code == INDEX_JSON_FAILED and message.startswith(NOT_JSON))
    found = _LINE.search(message) if names else None
    return int(found[1]) if found else None


def failure_place(failure: dict[str, Any]) -> str:
    """Where a report's failure is (`place`): `guides/c.md:2`, its path alone where its line is
    unknown."""
    return place(failure["path"], failure_line(failure))


def link_place(link: dict[str, Any]) -> str:
    """Where a broken link of a report is (`place`): its source alone where its line is unknown
    (a report before lines were looked up, 2026-11-30, or a source not read again)."""
    return place(link["source"], link.get("line"))


# What the failed paths that are no source are, as the summary and the page both say it.
NOT_SOURCES = (
    "symbolic links not followed, names no index can hold, qa-pairs.md, keywords or topic files"
)


def failed_non_sources(report: dict[str, Any]) -> int:
    """How many of the paths in `failures` are no source (`sources.failed` counts sources only:
    a skipped link, a qa-pairs.md, a keywords or topic file fails the run, exit 3, too)."""
    paths = {failure["path"] for failure in report.get("failures", [])}
    return max(0, len(paths) - report.get("sources", {}).get("failed", 0))


def empty_file_warnings(report: dict[str, Any]) -> list[str]:
    """The warnings of the qa-pairs.md files without a question and keywords files without a
    keyword that the run read (`jobs.stats.IndexStats.warnings`: the run's outcome stands);
    none in a report before 2026-11-30, when they were said nowhere."""
    return report.get("counters", {}).get("index", {}).get("warnings", [])


def unwritten_cache_entries(report: dict[str, Any]) -> tuple[int, list[str]]:
    """How many embedding cache entries the run could not write, and the warnings kept for the
    first of them (the run is "ok": its vectors are in the index)."""
    store = report.get("counters", {}).get("store", {})
    return store.get("failures", 0), store.get("warnings", [])


def _stages(report: dict[str, Any]) -> str:
    timings = report.get("timings")
    if not timings:
        return "<h2>Stages</h2>" + _none("no timings in this report")
    units = {
        "bytes_per_second": ("MB/s", 1e-6),
        "sources_per_second": ("sources/s", 1),
        "chunks_per_second": ("chunks/s", 1),
        "topics_per_second": ("topics/s", 1),
    }
    bars = []
    for name, stage in timings.get("stages", {}).items():
        rates = [
            f"{_number(rate * units[key][1])} {units[key][0]}"
            for key, rate in stage.items()
            if key in units and rate is not None
        ]
        busy = stage.get("busy_seconds")
        rates += [f"busy {busy:.2f} s"] if busy is not None else []
        note = f"{stage['worker_seconds']:.2f} s" + (f" ({', '.join(rates)})" if rates else "")
        bars.append(Bar(name, stage["worker_seconds"], note, STAGE_COLORS.get(name, GREY)))
    wall = timings.get("wall_seconds", {})
    phases = [Bar(k, v, f"{v:.2f} s", GREY if k == "total" else TEAL) for k, v in wall.items()]
    throughput = timings.get("throughput", {})
    return (
        "<h2>Stages</h2>"
        + _figures(
            [
                (EFFICIENCY, timings.get("efficiency")),
                ("CPUs", timings.get("cpus")),
                ("embedding pool", (timings.get("embed_pool") or {}).get("label")),
                ("wall seconds", wall.get("total")),
                ("MB/s overall", _scaled(throughput.get("bytes_per_second"), 1e-6)),
                ("chunks/s overall", throughput.get("chunks_per_second")),
            ]
        )
        + "<p>Worker-seconds per stage (CPU time, summed over workers; stages overlap), with "
        "throughput per worker-second and the wall time of the stage's calls (busy):</p>"
        + (bar_chart(bars, "worker-seconds per stage") if bars else _none("no stage ran"))
        + "<p>Wall-clock seconds per phase of the driver:</p>"
        + (bar_chart(phases, "wall seconds per phase") if phases else "")
    )


def token_bins(histogram: dict[str, Any], target: int = BINS) -> list[Bin]:
    """The report's fine token buckets merged into about `target` equal bins from min to max."""
    bucket = histogram["bucket"]
    low, high = histogram["min"], histogram["max"]
    width = max(bucket, math.ceil((high - low + 1) / target / bucket) * bucket)
    start = low - low % width
    counts: dict[int, int] = defaultdict(int)
    for first, count in histogram["buckets"]:
        counts[(max(first, low) - start) // width] += count
    return [
        Bin(start + i * width, start + (i + 1) * width, counts.get(i, 0))
        for i in range((high - start) // width + 1)
    ]


def _chunks(report: dict[str, Any]) -> str:
    c = report.get("chunks")
    if not c:
        return "<h2>Chunks</h2>" + _none("no chunk counts in this report")
    html = "<h2>Chunks</h2>" + _figures(
        [
            ("chunks in rebuilt topics", c.get("total")),
            ("truncated to the model window", c.get("truncated")),
            ("sources with a skipped final chunk", c.get("skipped_tail")),
            ("tokens skipped", c.get("skipped_tokens")),
            ("drafts left out", c.get("skipped_drafts")),
        ]
    )
    for strategy, hist in (c.get("tokens") or {}).items():
        html += f"<p>Token counts of the chunks made this run, <code>{escape(strategy)}</code>:</p>"
        if not hist["count"]:
            html += _none("no chunks were made in this run")
            continue
        marks = [(f"min {hist['min']}", hist["min"]), (f"max {hist['max']}", hist["max"])]
        html += histogram(token_bins(hist), marks, f"token counts, {strategy}")
    return html


def _cache(report: dict[str, Any]) -> str:
    c = report.get("chunks")
    if not c:
        return ""
    whole = c["cache_hits"] - c.get("cache_reused", 0)
    parts = [
        Bar("cache hits", whole, _number(whole), GREEN),
        Bar("chunk-level reuse", c.get("cache_reused", 0), _number(c.get("cache_reused", 0)), TEAL),
        Bar("embedded", c["embedded"], _number(c["embedded"]), ORANGE),
        Bar("carried from the last run", c["reused"], _number(c["reused"]), BLUE),
    ]
    html = "<h2>Embedding cache</h2>" + _figures([(p.label, p.value) for p in parts])
    if sum(p.value for p in parts):
        html += stacked_bar(parts, "where each chunk's vector came from")
    else:
        html += _none("no chunk needed a vector in this run")
    failed, kept = unwritten_cache_entries(report)
    if failed:  # the run is "ok": this is the only place it shows
        more = f", the first {len(kept)} of them" if len(kept) < failed else ""
        items = "".join(f"<li><code>{escape(printable(w))}</code></li>" for w in kept)
        html += (
            f'<p><span class="status warn">{_number(failed)} cache entries not written</span> '
            f"(their vectors are in the index; a later build that needs them embeds them again)"
            f"{escape(more)}:</p><ul>{items}</ul>"
        )
    return html


@dataclass(frozen=True)
class FailureGroup:
    """The failures of one code, sorted by path, and their kinds (messages alike but for their
    numbers, such as a byte offset): each kind's count and first failure, most first."""

    code: str
    failures: tuple[dict[str, str], ...]
    kinds: tuple[tuple[int, dict[str, str]], ...]

    def examples(self, count: int) -> list[dict[str, str]]:
        """`count` of the failures: the first of each kind, most first, then the next by path."""
        firsts = [first for _, first in self.kinds]
        rest = (f for f in self.failures if not any(f is first for first in firsts))
        return [*firsts, *rest][:count]


def failure_groups(failures: list[dict[str, str]]) -> list[FailureGroup]:
    """The failures grouped by code, the most frequent code first (then by name)."""
    by_code: dict[str, list[dict[str, str]]] = defaultdict(list)
    for failure in sorted(failures, key=lambda f: f["path"]):
        by_code[failure["code"]].append(failure)
    groups = []
    for code, members in by_code.items():
        kinds: dict[str, list[dict[str, str]]] = defaultdict(list)
        for failure in members:
            kinds[_NUMBER.sub("N", failure["message"])].append(failure)
        ranked = sorted(kinds.values(), key=lambda kind: -len(kind))  # stable: first seen first
        groups.append(FailureGroup(code, tuple(members), tuple((len(k), k[0]) for k in ranked)))
    return sorted(groups, key=lambda group: (-len(group.failures), group.code))


def _failures(report: dict[str, Any]) -> str:
    if "failures" not in report:  # a failed or unfinished run's: not "none", not known
        return "<h2>Failures</h2>" + _none("not known: the run did not finish (see its error)")
    failures = report["failures"]
    if not failures:
        return "<h2>Failures</h2>" + _none("none")
    html = f"<h2>Failures ({len(failures)})</h2>"
    for group in failure_groups(failures):
        count = len(group.failures)
        rows = "".join(
            f"<tr><td><code>{escape(printable(failure_place(f)))}</code></td>"
            f"<td>{escape(printable(f['message']))}</td></tr>"
            for f in group.failures
        )
        table = f"<table><tr><th>path</th><th>message</th></tr>{rows}</table>"
        html += f"<h3>{escape(group.code)} ({count})</h3>"
        if count > SHOWN_FAILURES:  # a table of thousands of rows buried the sections below
            kinds = "".join(
                f'<tr><td class="n">{_number(n)}</td><td>{escape(printable(first["message"]))}'
                f"</td><td><code>{escape(printable(failure_place(first)))}</code></td></tr>"
                for n, first in group.kinds
            )
            table = (
                '<table><tr><th class="n">paths</th><th>message (the first path\'s)</th>'
                f"<th>first path</th></tr>{kinds}</table><details><summary>all "
                f"{_number(count)} paths</summary>{table}</details>"
            )
        html += table
    return html


def _slowest(report: dict[str, Any]) -> str:
    if "slowest_sources" not in report:  # a failed or unfinished run's
        return "<h2>Slowest sources</h2>" + _none("no chunking times in this report")
    slowest = report["slowest_sources"]
    if not slowest:
        return "<h2>Slowest sources</h2>" + _none("no source was chunked in this run")
    top = slowest[0]["seconds"] or 1
    rows = "".join(
        f"<tr><td><code>{escape(printable(s['path']))}</code></td>"
        f'<td class="n">{s["seconds"] * 1000:.1f}</td><td class="n">{s["bytes"]:,}</td>'
        f'<td class="n">{s["chunks"]:,}</td>'
        f'<td style="width:180px"><div class="bar" style="width:{100 * s["seconds"] / top:.0f}%">'
        "</div></td></tr>"
        for s in slowest
    )
    return (
        f"<h2>Slowest sources ({len(slowest)})</h2><p>Chunking time per source:</p>"
        "<table><tr><th>path</th><th>ms</th><th>bytes</th><th>chunks</th><th></th></tr>"
        f"{rows}</table>"
    )
