"""The run report (`{output}/_reindex/report.json`) and the human summary printed at the end.

Timings: `wall_seconds` are the driver's clock per phase (discover, pipeline, finish, total).
`stages` gives per stage the seconds its workers spent, summed over all workers (stages overlap
and run in parallel, so these add up to more than the wall time), with that stage's throughput per
worker-second: carry (unchanged sources taken from the previous tables), read (bytes), chunk
(sources chunked), embed (chunks embedded), index (topics built and written), finish (the driver's
relinks, deletions, directory indexes and SimHash tables). `throughput` is per wall-clock second of
the whole run.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any


class Tally:
    """Totals accumulated from per-topic summaries as they arrive (driver memory: a few numbers)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.seconds: Counter[str] = Counter()
        self.failures: list[dict[str, str]] = []

    def add(self, summary: dict[str, Any]) -> None:
        """Fold one topic's summary into the totals."""
        for key in (
            "chunks",
            "skipped_tail",
            "embedded",
            "cache_hits",
            "reused",
            "truncated",
            "bytes_read",
            "carried",
            "chunked",
        ):
            self.counts[key] += summary[key]
        self.counts["topics_built"] += 1
        self.counts["sources_failed"] += sum(1 for s in summary["sources"].values() if s["failed"])
        self.seconds.update(summary["seconds"])
        self.failures.extend(summary["failures"])


def build_report(
    tally: Tally,
    *,
    sources: dict[str, int],
    topics: dict[str, int],
    wall: dict[str, float],
    facts: dict[str, Any],
) -> dict[str, Any]:
    """The report document: counts, timings with throughput, failures sorted by path."""
    counts, seconds = tally.counts, tally.seconds + Counter(finish=wall["finish"])
    failures = sorted(tally.failures, key=lambda f: (f["path"], f["code"]))

    def stage(name: str, **per_second: float) -> dict[str, float | None]:
        spent = seconds[name]
        rates = {k: round(v / spent, 3) if spent > 0 else None for k, v in per_second.items()}
        return {"worker_seconds": round(spent, 3), **rates}

    def per_wall(items: float) -> float | None:
        return round(items / wall["total"], 3) if wall["total"] > 0 else None

    return {
        "status": "sources_failed" if failures else "ok",
        **facts,
        "sources": {
            **sources,
            "failed": counts["sources_failed"],
            "chunked": counts["chunked"],
            "carried": counts["carried"],
        },
        "topics": topics,
        "chunks": {
            "total": counts["chunks"],
            "embedded": counts["embedded"],
            "cache_hits": counts["cache_hits"],
            "reused": counts["reused"],
            "truncated": counts["truncated"],
            "skipped_tail": counts["skipped_tail"],
        },
        "bytes_read": counts["bytes_read"],
        "timings": {
            "wall_seconds": {k: round(v, 3) for k, v in wall.items()},
            "stages": {
                "carry": stage("carry", sources_per_second=counts["carried"]),
                "read": stage("read", bytes_per_second=counts["bytes_read"]),
                "chunk": stage("chunk", sources_per_second=counts["chunked"]),
                "embed": stage("embed", chunks_per_second=counts["embedded"]),
                "index": stage("index", topics_per_second=counts["topics_built"]),
                "finish": stage("finish", topics_per_second=topics["seen"]),
            },
            "throughput": {
                "bytes_per_second": per_wall(counts["bytes_read"]),
                "chunks_per_second": per_wall(counts["chunks"]),
            },
        },
        "failures": failures,
    }


def report_bytes(report: dict[str, Any]) -> bytes:
    """The report as indented JSON bytes."""
    return (json.dumps(report, indent=2) + "\n").encode()


def summary(report: dict[str, Any]) -> str:
    """A few lines for a person: what changed, what was embedded, what failed, how long it took."""
    s, c, t = report["sources"], report["chunks"], report["topics"]
    lines = [
        f"mdindex build: {s['seen']} sources in {t['seen']} topics -> {report['output']}",
        f"  sources: {s['changed']} changed, {s['unchanged']} unchanged, {s['deleted']} deleted, "
        f"{s['failed']} failed; {s['chunked']} chunked, {s['carried']} carried",
        f"  topics:  {t['rebuilt']} rebuilt, {t['relinked']} relinked, {t['kept']} kept, "
        f"{t['deleted']} deleted",
        f"  chunks:  {c['total']} built, {c['embedded']} embedded, {c['cache_hits']} from cache, "
        f"{c['reused']} reused, {c['truncated']} truncated",
        f"  time:    {report['timings']['wall_seconds']['total']:.1f} s",
    ]
    for failure in report["failures"]:
        lines.append(f"  FAILED {failure['path']}: {failure['code']}: {failure['message']}")
    return "\n".join(lines)
