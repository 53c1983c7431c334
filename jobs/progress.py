"""Progress while a build runs: stage counters collected in a small Ray actor (which also counts
the topics' rows for the reduce loop, `jobs.reduce`), and a heartbeat line a person can read
(sources done and failed, chunks embedded and from cache, topics written, MB/s, ETA), in a
terminal and under `ray job submit` alike. Ray Data's own progress bars are drawn only in a
terminal (under `ray job submit` they would spam the job log)."""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import ray

from jobs.blocks import Span, topic_counts
from jobs.stats import EmbedStats, RunStats, Window

log = logging.getLogger("mdindex.build")
HEARTBEAT_SECONDS = 30.0
EMBEDDING_PROGRESS_SECONDS = 5.0  # how often a running embedding call tells its progress


def interactive() -> bool:
    """True in a terminal outside a Ray job: progress bars are worth drawing."""
    return "RAY_JOB_ID" not in os.environ and stderr_is_a_terminal()


@functools.cache
def stderr_is_a_terminal() -> bool:
    """Whether standard error was a terminal when first asked, before a build's filter
    (`jobs.logs.clean_logs`) put a pipe on descriptor 2: asked during the build, it said no, and
    a build in a terminal never drew its progress bars."""
    return sys.stderr.isatty()


def configure_progress() -> None:
    """Turn Ray Data's progress bars on or off for this driver."""
    from ray.data import DataContext

    DataContext.get_current().enable_progress_bars = interactive()


@ray.remote(num_cpus=0, concurrency_groups={"counts": 1})
class StatsCollector:
    """The run's one bookkeeping actor, started with it: sums the stage records, and counts the
    rows of each topic in the blocks the pipeline yields, so the driver never fetches their data.
    One process for both: started first, on a worker process Ray has ready, it leaves the processes
    that start later to the embedding actors (a second actor for the counts, starting beside them,
    delayed their model load by ~0.6 s). The counts run in their own thread, so a block being
    fetched for a count never holds up a task's `add`."""

    def __init__(self) -> None:
        self._total = RunStats()
        self._keys: set[str] = set()
        self._running: dict[str, RunStats] = {}  # what each running embedding call has done

    def add(self, stats: RunStats, key: str | None = None) -> None:
        """Fold one batch's record into the total, once per `key` (`rows_key`): a call Ray tries
        again (its worker died after it reported) reports the same key, not counted twice."""
        if key is not None:
            self._running.pop(key, None)  # its own record counts it now
            if key in self._keys:
                return
            self._keys.add(key)
        self._total += stats

    def embedding(self, key: str, done: RunStats) -> None:
        """What the running embedding call `key` has done so far (`embedding_progress`); ignored
        for a call tried again after it reported."""
        if key not in self._keys:
            self._running[key] = done

    def total(self) -> RunStats:
        """The sum so far."""
        return self._total

    def progress(self) -> RunStats:
        """The sum so far, with what the embedding calls still running have done: for the
        progress line, not the report."""
        return sum(self._running.values(), self._total)

    @ray.method(concurrency_group="counts")
    def count_topics(self, block: pa.Table, span: Span) -> dict[str, int]:
        """How many rows of each topic a span of a block holds."""
        return topic_counts(block, span)


def report_stats(collector, stats: RunStats, key: str | None = None) -> None:
    """Send one batch's record to the run's collector (None: nothing collects, e.g. in tests),
    counted once per `key` (None: every time, e.g. a model loaded again by a restarted actor).

    The call waits for the actor, so a finished task's counts are in before the driver reads."""
    if collector is not None:
        ray.get(collector.add.remote(stats, key))


def embedding_progress(
    collector, key: str, every: float = EMBEDDING_PROGRESS_SECONDS
) -> Callable[[int], None] | None:
    """The `progress` of an embedding call (`key`: its `rows_key`), which tells the run's
    collector the texts it has embedded since it began, at most once every `every` seconds,
    without waiting (a call on a CPU can take minutes: the line said "0 chunks embedded", and gave
    no ETA, all that time); None when nothing collects."""
    if collector is None:
        return None
    began, told, done = time.time(), time.monotonic(), 0

    def progress(texts: int) -> None:
        nonlocal told, done
        done += texts
        if time.monotonic() - told >= every:
            told = time.monotonic()
            record = RunStats(embed=EmbedStats(embedded=done, window=Window(began)))
            collector.embedding.remote(key, record)

    return progress


def rows_key(stage: str, batch: pa.Table) -> str:
    """The key of one stage's call on a batch of work rows: the same when Ray tries the call
    again, different for any other rows."""
    columns = [batch.column(name).to_pylist() for name in ("topic", "kind", "path")]
    return hashlib.sha256(json.dumps([stage, *columns]).encode()).hexdigest()


@dataclass(frozen=True)
class Goal:
    """What this run has to do, from the plan: for the progress line's fractions and ETA."""

    sources: int
    bytes: int
    topics: int


def progress_line(stats: RunStats, goal: Goal, now: float) -> str:
    """One line: sources done (chunked, or failed: the report's `chunked` leaves those out) and
    failed, MB and MB/s, chunks embedded and from cache, topics, ETA. The MB/s are over the
    read-and-chunk tasks' window, from the first one's start to the last one's end, not over the
    time elapsed (which goes on once every source is chunked). `now` is the epoch time, as the
    stages' windows are."""
    mb = _bytes_done(stats) / 1e6
    window = (stats.read.window + stats.chunk.window).seconds
    rate = mb / window if window else 0.0
    failed = stats.chunk.failed + stats.read.failed_sources
    line = (
        f"{stats.chunk.sources + failed}/{goal.sources} sources done, {failed} failed "
        f"({mb:.1f} of {goal.bytes / 1e6:.1f} MB, {rate:.2f} MB/s); "
        f"{stats.embed.embedded} chunks embedded, {stats.embed.cache_hits} from cache; "
        f"{stats.index.topics}/{goal.topics} topics written"
    )
    eta = _eta(stats, goal, now)
    return line + (f"; ETA {eta:.0f} s" if eta is not None else "")


def _eta(stats: RunStats, goal: Goal, now: float) -> float | None:
    """Seconds left: the slower of chunking (by bytes) and embedding (by the chunks expected),
    each at its own pace (`_left`), so a stage that began late (the actors loading their model)
    is not judged by the time before it; then the topics' reduce at its pace. A topic is written
    once its every chunk is embedded, so until then the topics' wait is the embedding's. None
    while there is no pace to go by (nothing chunked; every source chunked and nothing
    embedded; every chunk embedded and no topic written)."""
    if stats.chunk.bytes <= 0:
        return None
    readable = goal.bytes - stats.read.failed_source_bytes  # chunks come from these bytes alone
    expected_chunks = stats.chunk.chunks * readable / stats.chunk.bytes
    chunking = _left(stats.read.window + stats.chunk.window, _bytes_done(stats), goal.bytes, now)
    embedded = stats.embed.embedded + stats.embed.cache_hits
    embedding = _left(stats.embed.window, embedded, expected_chunks, now)
    if embedding is None:
        return chunking or None
    if chunking or embedding:
        return max(chunking or 0.0, embedding)
    return _left(stats.index.window, stats.index.topics, goal.topics, now)


def _left(window: Window, done: float, total: float, now: float) -> float | None:
    """A stage's seconds left at its pace over its window, from its first call's start to its
    last call's end (`now` while none has ended: a running embedding call's count has no end),
    so that between two counts (a chunk task's batch, a topic) it does not seem to slow down:
    over the time up to `now`, tldr-en's line said "ETA 29 s, 36 s, 43 s" with 22 to 20 s left
    while a batch of 930 sources was chunked, and 9 s to 27 s with 5 to 2 s left while its
    largest topic was written. 0 once done, None before it has done anything."""
    if done >= total:
        return 0.0
    if not done or window.start is None:
        return None
    last = now if window.end is None else window.end
    return (total - done) * max(last - window.start, 0.0) / done


def _bytes_done(stats: RunStats) -> int:
    """The listed bytes of the sources done: chunked, failed to chunk, or failed to read (an
    unreadable source's never reached the chunk stage, so the line never reached its goal)."""
    return stats.chunk.bytes + stats.read.failed_source_bytes


class Heartbeat:
    """A daemon thread that logs `status()` every `interval` seconds (default: HEARTBEAT_SECONDS,
    as it is when the heartbeat starts) until stopped, each line with the seconds since `began`
    (epoch seconds: when the build began, its report's `started_at`) at the time `status()`
    answered."""

    def __init__(self, status: Callable[[], str], interval: float | None = None, *, began: float):
        self._status = status
        self._interval = interval or HEARTBEAT_SECONDS
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mdindex-heartbeat", daemon=True)
        self._began = began

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                line = self._status()
            except Exception as exc:  # noqa: BLE001 - a progress line must never stop the build
                # its first line: Ray's OutOfMemoryError (its stats actor killed) was 45 lines
                first = str(exc).partition("\n")[0] or type(exc).__name__
                line = f"unavailable ({first})"
            log.info("progress after %.0f s: %s", time.time() - self._began, line)
