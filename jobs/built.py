"""What a build's stages start from and leave for the driver (`jobs.on_ray`, on Ray, and
`jobs.in_process`, without it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobs.config import JobConfig
from jobs.landmarks import Landmark, Plugin
from jobs.lock import Check
from jobs.manifest import Manifest
from jobs.plan import Plan
from jobs.resources import EmbedPool
from jobs.stats import RunStats
from jobs.storage import Storage


@dataclass(frozen=True)
class Rebuild:
    """What a run's stages rebuild its topics from: the config, the plan, the previous manifest,
    the listed sizes, the input and the output, the build lock's `check` (called before each
    topic is built: `jobs.lock`), and the driver's landmarks and third-party classes for the
    workers to check (`jobs.landmarks`)."""

    config: JobConfig
    plan: Plan
    previous: Manifest
    sizes: dict[str, int]
    source: Storage
    output: Storage
    check: Check
    marks: tuple[Landmark | Plugin, ...]


@dataclass(frozen=True)
class Built:
    """What the pipeline left for the driver: each rebuilt topic's summary, and the counters."""

    summaries: dict[str, dict[str, Any]]
    stats: RunStats
    cpus: float
    pool: EmbedPool | None = None  # the embedding pool of the run's (first) pipeline
