"""The run report (`{output}/_reindex/report.json`) and the human summary printed at the end."""

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
        for key in ("chunks", "skipped_tail", "embedded", "cache_hits", "truncated", "bytes_read"):
            self.counts[key] += summary[key]
        self.counts["topics_built"] += 1
        self.counts["sources_processed"] += len(summary["sources"])
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
    counts, seconds = tally.counts, tally.seconds
    failures = sorted(tally.failures, key=lambda f: (f["path"], f["code"]))

    def rate(items: float, stage: str) -> float | None:
        return round(items / seconds[stage], 3) if seconds[stage] > 0 else None

    return {
        "status": "sources_failed" if failures else "ok",
        **facts,
        "sources": {**sources, "failed": counts["sources_failed"]},
        "topics": topics,
        "chunks": {
            "total": counts["chunks"],
            "embedded": counts["embedded"],
            "cache_hits": counts["cache_hits"],
            "truncated": counts["truncated"],
            "skipped_tail": counts["skipped_tail"],
        },
        "bytes_read": counts["bytes_read"],
        "timings": {
            "wall_seconds": {k: round(v, 3) for k, v in wall.items()},
            "stages": {
                "read": {
                    "worker_seconds": round(seconds["read"], 3),
                    "bytes_per_second": rate(counts["bytes_read"], "read"),
                },
                "chunk": {
                    "worker_seconds": round(seconds["chunk"], 3),
                    "sources_per_second": rate(counts["sources_processed"], "chunk"),
                },
                "embed": {
                    "worker_seconds": round(seconds["embed"], 3),
                    "chunks_per_second": rate(counts["embedded"], "embed"),
                },
                "index": {
                    "worker_seconds": round(seconds["index"], 3),
                    "topics_per_second": rate(counts["topics_built"], "index"),
                },
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
        f"{s['failed']} failed",
        f"  topics:  {t['rebuilt']} rebuilt, {t['relinked']} relinked, {t['kept']} kept, "
        f"{t['deleted']} deleted",
        f"  chunks:  {c['total']} built, {c['embedded']} embedded, {c['cache_hits']} from cache, "
        f"{c['truncated']} truncated",
        f"  time:    {report['timings']['wall_seconds']['total']:.1f} s",
    ]
    for failure in report["failures"]:
        lines.append(f"  FAILED {failure['path']}: {failure['code']}: {failure['message']}")
    return "\n".join(lines)
