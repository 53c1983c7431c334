"""The counters of a build, one small typed record per stage, merged with `+` (datatrove's `Stats`).

Every stage reports the record of each batch it finishes to the run's collector
(`jobs.progress.StatsCollector`); the sum is the progress line while the job runs and the report's
counts and timings at the end. This module is the one place that names the counters.

Each stage times its own calls two ways: `seconds`, the wall-clock time inside the call, and
`cpu_seconds`, the CPU time its worker process used meanwhile. On a busy machine the first also
counts time spent waiting for a CPU, so throughput per worker-second uses the second.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, TypeVar

S = TypeVar("S", bound="Stats")


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
class Clock:
    """When a stage's call started: the wall clock and this process's CPU time."""

    wall: float = dataclasses.field(default_factory=time.perf_counter)
    cpu: float = dataclasses.field(default_factory=time.process_time)

    def spent(self) -> dict[str, float]:
        """`seconds` (wall) and `cpu_seconds` (this process's CPU time) since the start."""
        return {
            "seconds": time.perf_counter() - self.wall,
            "cpu_seconds": time.process_time() - self.cpu,
        }


@dataclass(frozen=True)
class ReadStats(Stats):
    """Sources and qa-pairs.md files read (bytes) or failed to read."""

    files: int = 0
    bytes: int = 0
    failed: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0


@dataclass(frozen=True)
class ChunkStats(Stats):
    """Sources chunked (and their bytes), the chunks made, sources that failed."""

    sources: int = 0
    bytes: int = 0
    chunks: int = 0
    failed: int = 0
    skipped_tail: int = 0  # sources whose final chunk the strategy skipped (seed 003)
    seconds: float = 0.0
    cpu_seconds: float = 0.0


@dataclass(frozen=True)
class EmbedStats(Stats):
    """Chunks embedded or taken from the cache, and the model's token slots."""

    documents: int = 0
    chunks: int = 0
    embedded: int = 0
    cache_hits: int = 0  # chunks not embedded: a whole cache entry, or a chunk of an older one
    truncated: int = 0
    questions: int = 0  # qa-pairs.md questions embedded as queries (or taken from the cache)
    tokens: int = 0
    padded_tokens: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0


@dataclass(frozen=True)
class IndexStats(Stats):
    """Topics built and written, with their chunks; carried sources taken from the last run."""

    topics: int = 0
    chunks: int = 0
    carried: int = 0
    reused: int = 0  # chunks of carried sources
    seconds: float = 0.0
    cpu_seconds: float = 0.0


@dataclass(frozen=True)
class RunStats(Stats):
    """All stages of one build."""

    read: ReadStats = dataclasses.field(default_factory=ReadStats)
    chunk: ChunkStats = dataclasses.field(default_factory=ChunkStats)
    embed: EmbedStats = dataclasses.field(default_factory=EmbedStats)
    index: IndexStats = dataclasses.field(default_factory=IndexStats)
