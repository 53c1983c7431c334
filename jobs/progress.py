"""Progress while a build runs: stage counters collected in a small Ray actor
(`jobs.on_ray.StatsCollector`, which also counts the topics' rows for the reduce loop,
`jobs.reduce`), or in a `Tally` in the driver's process for a run without Ray
(`jobs.in_process`), and a heartbeat line a person can read (sources done and failed, chunks
embedded and from cache, topics written, MB/s, ETA), in a terminal and under `ray job submit`
alike. Ray Data's own progress bars are drawn only in a terminal (under `ray job submit` they
would spam the job log)."""

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
from typing import Any, Protocol

import pyarrow as pa

from indexing.terminal import counted
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


class Tally:
    """A run's stage records, summed: in the run's `StatsCollector` actor, or in the driver's
    process for a run without Ray (`jobs.in_process`), where the heartbeat's thread reads it while
    the stages add to it (hence the lock)."""

    def __init__(self) -> None:
        self._total = RunStats()
        self._keys: set[str] = set()
        self._running: dict[str, RunStats] = {}  # what each running embedding call has done
        self._lock = threading.Lock()

    def add(self, stats: RunStats, key: str | None = None) -> None:
        """Fold one batch's record into the total, once per `key` (`rows_key`): a call Ray tries
        again (its worker died after it reported) reports the same key, not counted twice."""
        with self._lock:
            if key is not None:
                self._running.pop(key, None)  # its own record counts it now
                if key in self._keys:
                    return
                self._keys.add(key)
            self._total += stats

    def embedding(self, key: str, done: RunStats) -> None:
        """What the running embedding call `key` has done so far (`embedding_progress`); ignored
        for a call tried again after it reported."""
        with self._lock:
            if key not in self._keys:
                self._running[key] = done

    def total(self) -> RunStats:
        """The sum so far."""
        return self._total

    def progress(self) -> RunStats:
        """The sum so far, with what the embedding calls still running have done: for the
        progress line, not the report."""
        with self._lock:
            return sum(self._running.values(), self._total)


class Collector(Protocol):
    """What the stages tell the run's counts to: a `Tally` (a run without Ray), or the run's
    `StatsCollector` actor (`jobs.on_ray`) behind a `CollectorHandle`."""

    def add(self, stats: RunStats, key: str | None = None) -> None:
        """`Tally.add`; the actor's is waited for, so a finished task's counts are in before the
        driver reads."""

    def embedding(self, key: str, done: RunStats) -> None:
        """`Tally.embedding`."""


@dataclass(frozen=True)
class CollectorHandle:
    """The run's `StatsCollector` actor as the stages tell it their counts (a `Collector`). Here,
    beside `Tally`, not with the actor's class: a task worker unpickles it with the stages'
    modules, which it has imported already."""

    actor: Any  # the actor's handle

    def add(self, stats: RunStats, key: str | None = None) -> None:
        """`Tally.add` in the actor, waited for: a finished task's counts are in before the
        driver reads."""
        import ray  # the worker's, imported already: a run without Ray makes no handle

        ray.get(self.actor.add.remote(stats, key))

    def embedding(self, key: str, done: RunStats) -> None:
        """`Tally.embedding` in the actor, not waited for: a running call's word."""
        self.actor.embedding.remote(key, done)


def report_stats(collector: Collector | None, stats: RunStats, key: str | None = None) -> None:
    """Send one batch's record to the run's collector (None: nothing collects, e.g. in tests),
    counted once per `key` (None: every time, e.g. a model loaded again by a restarted actor)."""
    if collector is not None:
        collector.add(stats, key)


def embedding_progress(
    collector: Collector | None,
    key: str,
    every: float = EMBEDDING_PROGRESS_SECONDS,
    loaded: Callable[[], float] | None = None,
) -> CallProgress | None:
    """The progress of an embedding call (`key`: its `rows_key`) for the run's collector;
    `loaded` answers when its actor's model last finished loading (epoch seconds, 0 never).
    None when nothing collects."""
    if collector is None:
        return None
    return CallProgress(collector, key, every, loaded or (lambda: 0.0))


class CallProgress:
    """What a running embedding call has done, told to the run's collector without waiting: the
    chunks it `found` in the cache, at once, then all it has done since it began, at most once
    every `every` seconds as it embeds the rest (a call on a CPU can take minutes: the line said
    "0 chunks embedded", and gave no ETA, all that time). Its window starts once its actor's
    model is `loaded`: on a CPU the model loads at the first call's first miss, and the first
    word's pace counted that wait (tldr, mostly from the cache: "15 chunks embedded; ETA 299 s"
    with 20 s to go; the call's own record leaves the load out, `SharedClock.skip`)."""

    def __init__(self, collector: Collector, key: str, every: float, loaded: Callable[[], float]):
        self._collector, self._key, self._every, self._loaded = collector, key, every, loaded
        self._began, self._told = time.time(), time.monotonic()
        self._found = self._chunks = self._embedded = 0

    def found(self, hits: int, chunks: int) -> None:
        """Of the call's `chunks`, the `hits` it need not embed (the cache's, or the actor's
        memory's: `embedding.documents.embed_documents`), told at once: the line counted them
        only once the call returned, "0 from cache" all the while it embedded the others, and
        its ETA went by the model's pace alone (a re-run mostly from the cache, tldr with 1 page
        in 7 edited: "ETA 1874 s" with 16 s to go). Told without a window: its cache lookups are
        no pace for the chunks it has still to embed (`_embedding_left`)."""
        self._found, self._chunks = hits, chunks
        if hits:
            self._tell(Window())

    def embedded(self, texts: int) -> None:
        """`texts` more embedded (`embedding.Embedder.embed_encoded`'s `progress`)."""
        self._embedded += texts
        if time.monotonic() - self._told >= self._every:
            # its window up to this count: open at its end, the stage's window ended at the last
            # finished call's end while its count held this call's chunks too, a pace too fast
            # (its ETA low by the share of the calls still running)
            self._tell(Window(max(self._began, self._loaded()), time.time()))

    def _tell(self, window: Window) -> None:
        """Tell the collector all the call has done, over `window`."""
        self._told = time.monotonic()
        done = EmbedStats(
            chunks=self._chunks, embedded=self._embedded, cache_hits=self._found, window=window
        )
        self._collector.embedding(self._key, RunStats(embed=done))


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
    batches: int = 1  # the read-and-chunk tasks' batches: the last one's way through the stages

    def and_pass(self, sources: int, size: int, batches: int) -> Goal:
        """This goal with a further pass's sources, bytes and batches (over the same topics)."""
        return Goal(self.sources + sources, self.bytes + size, self.topics, self.batches + batches)


def say_written(topic: str, written: int, topics: int) -> None:
    """Log that `topic` is written, the `written`-th of the run's `topics` (the root's id is "":
    named as the dry run names it)."""
    shown = repr(topic) if topic else "(root)"
    log.info("topic %s written (%d/%d)", shown, written, topics)


def say_recarry(recarry: dict[str, list[str]]) -> None:
    """Log that the topics in `recarry` could not carry those unchanged sources, read next."""
    log.info(
        "%s could not carry %s; reading them",
        counted(len(recarry), "topic"),
        counted(sum(map(len, recarry.values())), "unchanged source"),
    )


def progress_line(stats: RunStats, goal: Goal, now: float) -> str:
    """One line: sources done (chunked, or failed: the report's `chunked` leaves those out) and
    failed, MB and MB/s, chunks embedded and from cache, topics, ETA. The MB/s are over the
    read-and-chunk tasks' window, from the first one's start to the last one's end, not over the
    time elapsed (which goes on once every source is chunked). `now` is the epoch time, as the
    stages' windows are. The ETA is to the last topic written, "for chunking alone" while nothing
    is embedded (no pace yet for what comes after)."""
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
    if eta is None:
        return line
    seconds, covers = eta
    return line + f"; ETA {seconds:.0f} s{covers}"


def _eta(stats: RunStats, goal: Goal, now: float) -> tuple[float, str] | None:
    """Seconds left to the last topic written, and what they leave out ("" none): the slower of
    chunking (by bytes) and embedding (by the chunks expected), each at its own pace (`_left`),
    so a stage that began late (the actors loading their model) is not judged by the time before
    it, then the last batch's way through the stages after (`_after`); once every chunk is
    embedded, the topics' reduce at its pace or at its busy seconds per topic, the sooner. A
    topic is written once its every chunk is embedded, so until then the topics' wait is the
    embedding's. While nothing is embedded, chunking's time alone, and the line says so. None
    while there is no pace to go by (nothing chunked; every source chunked and nothing embedded;
    every chunk embedded and no topic written)."""
    if stats.chunk.bytes <= 0:
        return None
    readable = goal.bytes - stats.read.failed_source_bytes  # chunks come from these bytes alone
    expected_chunks = stats.chunk.chunks * readable / stats.chunk.bytes
    chunked = _bytes_done(stats) >= goal.bytes
    chunking = _left(stats.read.window + stats.chunk.window, _bytes_done(stats), goal.bytes, now)
    embedded = stats.embed.embedded + stats.embed.cache_hits
    embedding = _embedding_left(stats.embed, expected_chunks, now)
    if embedding is None:  # no pace for what follows the chunking yet
        return None if chunked else (chunking or 0.0, " for chunking alone")
    if not chunked or embedded < expected_chunks:
        embed, store, reduce = _after(stats, goal, expected_chunks)
        # the last batch is embedded after it is chunked, its topics written after that
        return max(embedding, 0.0 if chunked else (chunking or 0.0) + embed) + store + reduce, ""
    writing = _left(stats.index.window, stats.index.topics, goal.topics, now)
    if writing is None:
        return None
    # the reduce's pace so far was the embedding's (a topic waits for its every chunk); now the
    # rest is its own work: tldr-all's 180 topics left "ETA 46 s" by that pace with 5 s to go
    busy = _per(stats.index.seconds, stats.index.topics) * (goal.topics - stats.index.topics)
    return (min(writing, busy) if busy else writing), ""


def _embedding_left(embed: EmbedStats, expected_chunks: float, now: float) -> float | None:
    """The embedding's seconds left (`_left`): its chunks at its pace, and, where some are found
    in the cache, the chunks it is expected to embed at the pace it embeds them, the longer. A
    call finds its cache hits in a moment, then embeds the rest (its misses): a re-run mostly
    from the cache (tldr, 2,702 pages, 1 in 7 edited: 2,866 chunks from the cache, 492 embedded)
    had found most of its hits in its first 15 s: by the pace of all its chunks alone, the line
    said "ETA 0 s" for the 12 s its misses took. The misses expected are the chunks' share that
    missed so far (the calls' `chunks`, a running one's once it has looked them up, less their
    hits). None while that pace is unknown (nothing embedded yet where chunks miss)."""
    done = embed.embedded + embed.cache_hits
    chunks = _left(embed.window, done, expected_chunks, now)
    if not embed.cache_hits or chunks is None:
        return chunks
    looked_up = max(embed.chunks, done)
    misses = expected_chunks * (looked_up - embed.cache_hits) / looked_up
    embedding = _left(embed.window, embed.embedded, misses, now)
    return None if embedding is None else max(chunks, embedding)


def _after(stats: RunStats, goal: Goal, expected_chunks: float) -> tuple[float, float, float]:
    """The seconds the last read-and-chunk batch takes in each stage after chunking (embedding,
    writing its cache entries, reducing its topics): its share of the sources (embedding), the
    chunks (cache writes) or topics at the stage's busy seconds per source, chunk or topic so
    far, of its finished calls (a running embedding call's own time would count twice where two
    overlap; its word counts its chunks, not its sources: `CallProgress`); 0 for a stage that has
    timed none. The stages run batch by batch, so once chunking (or embedding) ends, this much
    is still ahead: left out, tldr-all's ETA was 34 s with 45 s to go (stand-in model, 2 CPUs,
    8 batches, the last one's 14 s from its chunks to its topics)."""
    batches = max(goal.batches, 1)
    chunks = expected_chunks / batches
    return (
        _per(stats.embed.seconds, stats.embed.documents) * goal.sources / batches,
        _per(stats.store.seconds, stats.store.chunks) * chunks,
        _per(stats.index.seconds, stats.index.topics) * goal.topics / batches,
    )


def _per(seconds: float, done: int) -> float:
    """Seconds per thing done; 0 before any."""
    return seconds / done if done else 0.0


def _left(window: Window, done: float, total: float, now: float) -> float | None:
    """A stage's seconds left at its pace over its window, from its first call's start to its
    last count (its last call's end, or a running embedding call's last word), less the time
    since that count (the calls running meanwhile go on; not below 0). Its pace is never over the
    time up to `now`, which between two counts (a chunk task's batch, a topic) made the stage
    seem to slow down: tldr-en's line said "ETA 29 s, 36 s, 43 s" with 22 to 20 s left while a
    batch of 930 sources was chunked; and not counted down, with tldr-all's 8 batches its
    chunking's ETA stayed 19 s from a count to 1 s before the last batch was done. 0 once done,
    None before it has done anything."""
    if done >= total:
        return 0.0
    if not done or window.start is None:
        return None
    last = now if window.end is None else window.end
    at_count = (total - done) * max(last - window.start, 0.0) / done
    return max(at_count - max(now - last, 0.0), 0.0)


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
