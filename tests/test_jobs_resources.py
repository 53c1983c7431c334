"""The stage arguments of `jobs.resources`, scheduled by Ray Data itself on the tests' Ray (2 CPUs):
a build's three Ray Data stages with stand-in work that holds each task's CPU slot a while."""

from __future__ import annotations

import pyarrow as pa
import pytest
import ray

from jobs.config import EmbedResources, TaskResources
from jobs.resources import actor_stage_args, embed_pool, store_stage_args, task_stage_args
from tests.jobs_support import PassingActor, passing, timed_chunking

pytestmark = pytest.mark.usefixtures("ray_session")
BATCHES = 6


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of spans that overlap at one moment."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def test_chunk_tasks_use_every_cpu_the_embedding_actors_do_not_take():
    """With a CPU embedding pool (its actors reserve no CPU), two chunk tasks run at once on two
    CPUs: the store stage after the actors declares no CPU, so Ray Data does not set one aside for
    it while the chunk tasks wait (with one-CPU store tasks, they ran one at a time)."""
    pool = embed_pool(EmbedResources(), 2, batches=BATCHES)
    assert pool.num_cpus == 0
    out = (
        ray.data.from_arrow([pa.table({"row": [i]}) for i in range(BATCHES)])
        .map_batches(timed_chunking, batch_format="pyarrow", **task_stage_args(TaskResources()))
        .map_batches(PassingActor, batch_format="pyarrow", **actor_stage_args(pool, None))
        .map_batches(passing, batch_format="pyarrow", **store_stage_args(2))
        .to_arrow_refs()
    )
    table = pa.concat_tables(ray.get(out))
    assert sorted(table.column("row").to_pylist()) == list(range(BATCHES))
    spans = list(
        zip(table.column("start").to_pylist(), table.column("end").to_pylist(), strict=True)
    )
    assert _most_at_once(spans) == 2
