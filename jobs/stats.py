"""The counters of a build, one small typed record per stage, merged with `+` (datatrove's `Stats`).

Every stage reports the record of each batch it finishes to the run's collector
(`jobs.on_ray.StatsCollector`); the sum is the progress line while the job runs and the report's
counts and timings at the end. This module is the one place that names the counters.

Each stage times its own calls two ways: `seconds`, the wall-clock time inside the call, and
`cpu_seconds`, the CPU time its worker process used meanwhile. On a busy machine the first also
counts time spent waiting for a CPU, so throughput per worker-second uses the second. Its `window`
is when it was at work: from the start of its first call to the end of its last (epoch seconds).
"""

from __future__ import annotations

import dataclasses
import heapq
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

S = TypeVar("S", bound="Stats")

TOKEN_BUCKET = 10  # width of a token-count histogram bucket (the report's charts re-bin these)
SLOWEST = 20  # sources kept by `Slowest`
NOTES = 20  # messages kept by `Notes`
NAMED = 20  # paths a report names of each list it counts: changes, unmatched names, broken links


@dataclass(frozen=True)
class Stats:
    """A record of counters that adds field by field."""

    def __add__(self: S, other: S) -> S:
        if type(other) is not type(self):
            return NotImplemented
        return type(self)(
            **{
                f.name: getattr(self, f.name) + getattr(other, f.name)
                for f in dataclasses.fields(self)
            }
        )

    def to_dict(self) -> dict[str, Any]:
        """The counters as plain JSON values (seconds rounded to milliseconds)."""
        return {
            f.name: (
                value.to_dict()
                if isinstance(value := getattr(self, f.name), Stats)
                else round(value, 3)
                if isinstance(value, float)
                else value
            )
            for f in dataclasses.fields(self)
        }


@dataclass(frozen=True)
class Window(Stats):
    """From the earliest start to the latest end of the calls added up (epoch seconds)."""

    start: float | None = None
    end: float | None = None

    def __add__(self, other: Window) -> Window:
        starts = [t for t in (self.start, other.start) if t is not None]
        ends = [t for t in (self.end, other.end) if t is not None]
        return Window(min(starts, default=None), max(ends, default=None))

    @property
    def seconds(self) -> float | None:
        """The window's length; None when no call was timed."""
        return None if self.start is None or self.end is None else self.end - self.start


@dataclass(frozen=True)
class Clock:
    """When a stage's call started: the wall clock, this process's CPU time and the epoch time."""

    wall: float = dataclasses.field(default_factory=time.perf_counter)
    cpu: float = dataclasses.field(default_factory=time.process_time)
    epoch: float = dataclasses.field(default_factory=time.time)

    def spent(self) -> dict[str, Any]:
        """`seconds` (wall) and `cpu_seconds` (this process's CPU time) since the start, and the
        `window` they cover."""
        return self.until(Clock())

    def until(self, later: Clock) -> dict[str, Any]:
        """What was spent from this clock's start to `later`'s."""
        return {
            "seconds": later.wall - self.wall,
            "cpu_seconds": later.cpu - self.cpu,
            "window": Window(self.epoch, later.epoch),
        }


class SharedClock:
    """The clock of a worker whose calls overlap (an embedding actor runs two batches at once).
    Each call says when it `start`s and reports what it `spent`: the time since the later of
    the last report and the start of the current busy spell (calls running back to back or
    overlapping), so the reports add up to the worker's busy time and CPU time, counted once."""

    def __init__(self):
        self._lock = threading.Lock()
        self._running = 0
        self._counted = Clock()  # what the reports so far have counted up to

    def start(self) -> None:
        """A call starts: when no other is running, a busy spell starts now."""
        with self._lock:
            if self._running == 0:
                self._counted = Clock()
            self._running += 1

    def skip(self) -> None:
        """Leave the time until now out of every report: what a call spent loading a model, which
        was never the stage's work (an actor that loads at its start is not called meanwhile)."""
        with self._lock:
            self._counted = Clock()

    def spent(self) -> dict[str, Any]:
        """A call ends: `seconds` and `cpu_seconds` not yet reported by any call (and their
        `window`)."""
        with self._lock:
            now = Clock()
            last, self._counted = self._counted, now
            self._running -= 1
        return last.until(now)


@dataclass(frozen=True)
class Histogram(Stats):
    """Counts of whole numbers in buckets of TOKEN_BUCKET (bucket start -> count), with the
    smallest and largest value seen (None while empty)."""

    buckets: dict[int, int] = dataclasses.field(default_factory=dict)
    low: int | None = None
    high: int | None = None

    @classmethod
    def of(cls, values: Iterable[int]) -> Histogram:
        """The histogram of `values`."""
        values = list(values)
        buckets: dict[int, int] = {}
        for value in values:
            start = value - value % TOKEN_BUCKET
            buckets[start] = buckets.get(start, 0) + 1
        return cls(buckets, min(values, default=None), max(values, default=None))

    def __add__(self, other: Histogram) -> Histogram:
        if type(other) is not type(self):
            return NotImplemented
        buckets = dict(self.buckets)
        for start, count in other.buckets.items():
            buckets[start] = buckets.get(start, 0) + count
        ends = [v for v in (self.low, other.low, self.high, other.high) if v is not None]
        return Histogram(buckets, min(ends, default=None), max(ends, default=None))

    def to_dict(self) -> dict[str, Any]:
        """Bucket width, buckets as sorted [start, count] pairs, min, max and the count."""
        return {
            "bucket": TOKEN_BUCKET,
            "buckets": [[start, self.buckets[start]] for start in sorted(self.buckets)],
            "min": self.low,
            "max": self.high,
            "count": sum(self.buckets.values()),
        }


@dataclass(frozen=True)
class Slowest(Stats):
    """The SLOWEST sources by chunking time: (seconds, path, bytes, chunks), slowest first."""

    entries: tuple[tuple[float, str, int, int], ...] = ()

    @classmethod
    def of(cls, entries: Iterable[tuple[float, str, int, int]]) -> Slowest:
        """The SLOWEST of `entries`."""
        return cls(tuple(heapq.nlargest(SLOWEST, entries)))

    def __add__(self, other: Slowest) -> Slowest:
        if type(other) is not type(self):
            return NotImplemented
        return Slowest.of(self.entries + other.entries)

    def to_dict(self) -> list[dict[str, Any]]:  # type: ignore[override]
        """One {path, seconds, bytes, chunks} object per source, slowest first."""
        return [
            {"path": path, "seconds": round(seconds, 4), "bytes": size, "chunks": chunks}
            for seconds, path, size, chunks in self.entries
        ]


@dataclass(frozen=True)
class Paths(Stats):
    """Paths counted, and the first NAMED of them in path order (whatever the batches' order)."""

    count: int = 0
    first: tuple[str, ...] = ()

    @classmethod
    def of(cls, paths: Iterable[str]) -> Paths:
        """The record of `paths`."""
        paths = list(paths)
        return cls(len(paths), tuple(heapq.nsmallest(NAMED, paths)))

    def __add__(self, other: Paths) -> Paths:
        if type(other) is not type(self):
            return NotImplemented
        first = tuple(heapq.nsmallest(NAMED, self.first + other.first))
        return Paths(self.count + other.count, first)

    def to_dict(self) -> dict[str, Any]:
        """{count, first}: the count and the first paths."""
        return {"count": self.count, "first": list(self.first)}


@dataclass(frozen=True)
class Notes(Stats):
    """Warning messages, each once (the root's keywords file is read by many topics), the first
    NOTES of them kept (a count, where one is wanted, is a counter beside)."""

    messages: tuple[str, ...] = ()

    def __add__(self, other: Notes) -> Notes:
        if type(other) is not type(self):
            return NotImplemented
        return Notes(tuple(dict.fromkeys(self.messages + other.messages))[:NOTES])

    def to_dict(self) -> list[str]:  # type: ignore[override]
        """The messages, oldest first."""
        return list(self.messages)


@dataclass(frozen=True)
class Names(Stats):
    """Distinct names (e.g. the model keys the embedding actors used), sorted."""

    names: tuple[str, ...] = ()

    def __add__(self, other: Names) -> Names:
        if type(other) is not type(self):
            return NotImplemented
        return Names(tuple(sorted(set(self.names) | set(other.names))))

    def to_dict(self) -> list[str]:  # type: ignore[override]
        """The names, sorted."""
        return list(self.names)


@dataclass(frozen=True)
class StageStats(Stats):
    """The time a stage's calls took (see the module docstring); its counters are added by each
    stage's own record."""

    seconds: float = 0.0
    cpu_seconds: float = 0.0
    window: Window = dataclasses.field(default_factory=Window)


@dataclass(frozen=True)
class ReadStats(StageStats):
    """Sources and qa-pairs.md files read (bytes) or failed to read, and the sources among the
    failed with their listed bytes (done, for the progress line: no chunk stage counts them)."""

    files: int = 0
    bytes: int = 0
    failed: int = 0
    failed_sources: int = 0
    failed_source_bytes: int = 0


@dataclass(frozen=True)
class ChunkStats(StageStats):
    """Sources chunked (and their bytes), the chunks made, sources that failed, chunk files
    written."""

    sources: int = 0
    bytes: int = 0
    chunks: int = 0
    failed: int = 0
    skipped_tail: int = 0  # sources whose final chunk the strategy skipped (seed 003)
    skipped_tokens: int = 0  # the tokens of those skipped final chunks
    skipped_drafts: int = 0  # drafts left out: no chunks (`chunking.ChunkedDocument.is_draft`)
    # sources (drafts aside) that made no chunk: empty, blank, front matter alone (or, for
    # `hierarchical`, headings alone); a page a change emptied was said nowhere
    empty: Paths = dataclasses.field(default_factory=Paths)
    files: int = 0  # chunk files written ahead of the topic reduce (`jobs.stages.chunk_files`)
    tokens: Histogram = dataclasses.field(default_factory=Histogram)  # token counts of the chunks
    slowest: Slowest = dataclasses.field(default_factory=Slowest)


@dataclass(frozen=True)
class TokenizeStats(StageStats):
    """Chunks tokenized for the model in the chunk tasks (not in the embedding actors), and
    their tokens (`jobs.stages.tokenize`)."""

    chunks: int = 0
    tokens: int = 0


@dataclass(frozen=True)
class EmbedStats(StageStats):
    """Chunks embedded or taken from the cache, the model's token slots, and the wall time the
    actors held their model (`embedding.Embedded.model_seconds`): of the stage's busy seconds,
    the rest is the actors' own work around it (decoding, cache lookups, Arrow)."""

    documents: int = 0
    chunks: int = 0
    embedded: int = 0
    cache_hits: int = 0  # chunks not embedded: a whole cache entry, or a chunk of an older one
    cache_reused: int = 0  # of cache_hits, chunks of an older entry (found by their text's hash)
    truncated: int = 0
    pretokenized: int = 0  # of embedded, chunks whose ids the tokenize stage made
    questions: int = 0  # qa-pairs.md questions embedded as queries (or taken from the cache)
    tokens: int = 0
    padded_tokens: int = 0
    model_seconds: float = 0.0
    # Embedding actors that loaded their model: on a CPU, one whose every chunk was in the cache
    # never does (`embedding.LazyEmbedder`).
    models_loaded: int = 0
    # The actors' model keys (`embedding.Embedder.key`): the cache namespace of their vectors,
    # naming what the config leaves to the machine: weights digest, dtype, device, token budget and
    # whether the forward passes replayed from CUDA graphs.
    model_keys: Names = dataclasses.field(default_factory=Names)


@dataclass(frozen=True)
class StoreStats(StageStats):
    """Embedding cache entries written (documents, and their chunks), and those that could not be
    (a warning each, naming the path)."""

    entries: int = 0
    chunks: int = 0
    failures: int = 0
    warnings: Notes = dataclasses.field(default_factory=Notes)


@dataclass(frozen=True)
class IndexStats(StageStats):
    """Topics built and written, with their chunks; carried sources taken from the last run."""

    topics: int = 0
    chunks: int = 0
    carried: int = 0
    reused: int = 0  # chunks of carried sources
    # a topic's qa-pairs.md without a question, its keywords file without a keyword (read, not
    # failed: the run stays ok), a warning each (`indexing.no_questions`, `no_keywords`)
    warnings: Notes = dataclasses.field(default_factory=Notes)


@dataclass(frozen=True)
class RunStats(Stats):
    """All stages of one build."""

    read: ReadStats = dataclasses.field(default_factory=ReadStats)
    chunk: ChunkStats = dataclasses.field(default_factory=ChunkStats)
    tokenize: TokenizeStats = dataclasses.field(default_factory=TokenizeStats)
    embed: EmbedStats = dataclasses.field(default_factory=EmbedStats)
    store: StoreStats = dataclasses.field(default_factory=StoreStats)
    index: IndexStats = dataclasses.field(default_factory=IndexStats)
