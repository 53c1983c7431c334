"""The stage arguments of `jobs.resources`, scheduled by Ray Data itself on the tests' Ray (2 CPUs):
a build's three Ray Data stages with stand-in work that holds each task's CPU slot a while."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
import ray

from embedding import LazyEmbedder
from jobs.config import EmbedResources, JobConfig, ResourcesConfig, TaskResources
from jobs.manifest import Manifest, SourceEntry
from jobs.plan import NOT_BUILT, REBUILD, make_plan
from jobs.records import QUESTIONS, SOURCE, new_row, to_table
from jobs.resources import (
    actor_env,
    actor_stage_args,
    embed_pool,
    store_stage_args,
    task_stage_args,
)
from jobs.stages.embed import EmbedActor, EmbedSettings
from jobs.storage import FileInfo
from jobs.work import (
    embedding_batches,
    files_to_read,
    new_content,
    pack_batches,
    prepare_work,
    work_rows,
)
from tests.jobs_support import CallSizes, PassingActor, meeting_chunking, passing

pytestmark = pytest.mark.usefixtures("ray_session")
BATCHES = 6
ROOT = Path(__file__).resolve().parent.parent


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of spans that overlap at one moment."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def test_chunk_tasks_use_every_cpu_the_embedding_actors_do_not_take(tmp_path):
    """With a CPU embedding pool (its actors reserve no CPU), two chunk tasks run at once on two
    CPUs: the store stage after the actors declares no CPU, so Ray Data does not set one aside for
    it while the chunk tasks wait (with one-CPU store tasks, they ran one at a time)."""
    pool = embed_pool(EmbedResources(), 2, batches=BATCHES)
    assert pool.num_cpus == 0
    # Ray Data's budget is the CPUs free as it starts, as the GCS last heard: the session's
    # instance is shared with the worker's earlier tests, one of whose tasks or actors held a CPU a
    # moment longer (CI at c5f7ed0: a budget of 1 CPU, the chunk tasks one at a time). The blocks
    # are given as the build gives them (`from_blocks`): `from_arrow` runs a one-CPU task per
    # table, whose CPUs the GCS heard were given back only later on a loaded machine (0 CPUs free
    # as the dataset started: 2 full runs of 4 on 2026-12-01, 1 test of 8 beside busy loops).
    source = ray.data.from_blocks([pa.table({"row": [i]}) for i in range(BATCHES)])
    deadline = time.monotonic() + 60
    while ray.available_resources().get("CPU", 0) < 2:
        assert time.monotonic() < deadline, f"a CPU still held: {ray.available_resources()}"
        time.sleep(0.2)
    out = (
        source.map_batches(
            meeting_chunking,
            batch_format="pyarrow",
            fn_kwargs={"folder": str(tmp_path), "tasks": BATCHES},
            **task_stage_args(TaskResources(), 3),
        )
        .map_batches(PassingActor, batch_format="pyarrow", **actor_stage_args(pool, None, 3))
        .map_batches(passing, batch_format="pyarrow", **store_stage_args(2, 3))
        .to_arrow_refs()
    )
    table = pa.concat_tables(ray.get(out))
    assert sorted(table.column("row").to_pylist()) == list(range(BATCHES))
    spans = list(
        zip(table.column("start").to_pylist(), table.column("end").to_pylist(), strict=True)
    )
    assert _most_at_once(spans) == 2 and any(table.column("met").to_pylist())


def _call_sizes(batches: list[pa.Table], embed: EmbedResources, call_rows: int) -> list[int]:
    """The rows of each call Ray Data makes of chunk tasks' `batches` at `call_rows` a call."""
    pool = embed_pool(embed, 2, batches=len(batches))
    out = (
        ray.data.from_blocks(batches)
        .map_batches(passing, batch_format="pyarrow", **task_stage_args(TaskResources(), 3))
        .map_batches(CallSizes, batch_format="pyarrow", **actor_stage_args(pool, call_rows, 3))
        .to_arrow_refs()
    )
    return pa.concat_tables(ray.get(out)).column("rows").to_pylist()


def test_every_embedding_call_but_the_last_gets_the_batch_size_whole():
    """500 sources of mixed sizes in chunk tasks of 3 KB (about 10 sources each), 40 documents
    per embedding call. Packed by size alone, Ray Data joins tasks' outputs until 40 rows are
    there and cuts them into a call of 40 and a short one; packed as `prepare_work` packs them
    (10 rows a task, 4 tasks a call), every call but the last has 40."""
    rows = [new_row("t", SOURCE, f"p{i}", size=100 + (i * 137) % 400) for i in range(500)]
    embed = EmbedResources(batch_size=40)
    config = JobConfig(resources=ResourcesConfig(chunk=TaskResources(batch_mb=0.003), embed=embed))
    work = prepare_work(config, rows, cpus=2)
    assert work.call_rows == 40 and {batch.num_rows for batch in work.batches} == {10}
    assert embedding_batches(work) == 13
    calls = _call_sizes(work.batches, embed, work.call_rows)
    assert sorted(calls) == [20] + [40] * 12
    by_size = [to_table(batch) for batch in pack_batches(rows, 3000)]
    assert len({batch.num_rows for batch in by_size}) > 1
    calls = _call_sizes(by_size, embed, 40)
    assert sum(calls) == 500 and len([n for n in calls if n != 40]) > 2


def test_a_cpu_embedding_actor_gets_its_environment_without_a_runtime_env():
    """A CPU pool's actors carry no `runtime_env` (Ray prepared one through its runtime-env agent
    before starting each actor's process: ready 1.95-2.3 s after creation instead of 0.8-0.9 s on
    2 cores); the settings they need travel as `actor_env`: MKL's reproducible mode for every
    actor (a GPU pool's can run its model on the CPU), OpenMP's passive waits for CPU pools."""
    pool = embed_pool(EmbedResources(), 2, batches=1)
    assert "runtime_env" not in actor_stage_args(pool, None, 3)
    assert actor_env(pool) == {"MKL_CBWR": "AUTO,STRICT", "OMP_WAIT_POLICY": "PASSIVE"}
    gpu_pool = embed_pool(EmbedResources(num_gpus=1), 2, batches=1)
    assert "runtime_env" not in actor_stage_args(gpu_pool, None, 3)
    assert actor_env(gpu_pool) == {"MKL_CBWR": "AUTO,STRICT"}


def test_a_cpu_pool_sized_to_the_cpus_stays_within_max_actors():
    """`max_actors` below the count a CPU pool sizes itself to (the CPUs, or the CPUs its actors'
    `num_cpus` leave) is its count: a 2-CPU cluster joined through RAY_ADDRESS with
    `max_actors: 1` sized two actors, and Ray Data refused the pool ("min_size must be <=
    max_size", 2, 1), exit 1 after the chunking had begun."""
    pool = embed_pool(EmbedResources(max_actors=1), 2, batches=BATCHES)
    assert (pool.actors, pool.max_actors, pool.threads) == (1, 1, 2)
    assert actor_stage_args(pool, None, 3)["compute"].max_size == 1
    reserving = embed_pool(EmbedResources(num_cpus=1, max_actors=2), 8, batches=BATCHES)
    assert (reserving.actors, reserving.max_actors) == (2, 2)
    assert actor_stage_args(reserving, None, 3)["compute"].min_size == 2
    assert embed_pool(EmbedResources(max_actors=4), 2, batches=BATCHES).actors == 2  # grows


def test_a_cpu_pools_threads_fit_the_largest_node_of_a_cluster():
    """A CPU pool whose actors reserve no CPU shares the cluster's CPUs among its actors' threads,
    but no actor runs more threads than its largest node has CPUs: one actor of a 2-CPU head and
    a 1-CPU node ran 3 torch threads on the 1-CPU node (2026-12-01)."""
    assert embed_pool(EmbedResources(actors=1), 3, batches=BATCHES).threads == 3  # one machine
    assert embed_pool(EmbedResources(actors=1), 3, BATCHES, node_cpus=2).threads == 2
    assert embed_pool(EmbedResources(actors=2), 16, BATCHES, node_cpus=4).threads == 4
    assert embed_pool(EmbedResources(actors=2), 16, BATCHES, node_cpus=16).threads == 8


def test_a_set_thread_count_is_every_actors_whatever_the_pool_reserves():
    """`threads` sets each actor's torch threads (and the driver's embedder's, without Ray)
    whatever the pool's sizing gives or `num_cpus` reserves: a CPU pool still reserves no CPU,
    a GPU pool its one CPU per actor. The stand-in of `benchmarks/pipeline.py`, a model too
    small for a second thread to pay, ran 1.8x the CPU time on two for a tenth less wall."""
    sized = embed_pool(EmbedResources(actors=1), 8, batches=BATCHES)
    one = embed_pool(EmbedResources(actors=1, threads=1), 8, batches=BATCHES)
    assert (sized.threads, one.threads) == (8, 1)
    assert (one.actors, one.num_cpus, one.num_gpus) == (sized.actors, 0.0, 0.0)
    assert one.label() == "1 actor × 1 torch thread, on CPU"
    reserving = embed_pool(EmbedResources(num_cpus=4), 8, batches=BATCHES)
    fewer = embed_pool(EmbedResources(num_cpus=4, threads=2), 8, batches=BATCHES)
    assert (reserving.num_cpus, reserving.threads) == (4, 4)
    assert (fewer.actors, fewer.num_cpus, fewer.threads) == (reserving.actors, 4, 2)
    gpu = embed_pool(EmbedResources(num_gpus=1, threads=3), 8, BATCHES, node_gpus=(1.0,))
    assert (gpu.actors, gpu.num_cpus, gpu.num_gpus, gpu.threads) == (1, 1.0, 1.0, 3)
    assert embed_pool(EmbedResources(), 2, batches=1).threads == 2  # unset: as sized


def test_the_embedding_actor_sets_its_environment_before_torch_loads_and_freezes_it():
    """OpenMP reads OMP_WAIT_POLICY when torch loads it, and MKL reads MKL_CBWR at its first call:
    the actor's module does not import torch, and the actor sets `EmbedSettings.env` before it
    does. With MKL's reproducible mode a vector's bits do not depend on the actor's torch threads,
    at a small token budget too (without it, on a 2-core Xeon with AMX, 9 of these 15 texts gave
    other fp32 bits on 1 thread than on 2 at 256). Once loaded, what it loaded is frozen
    (`gc.freeze`): a full collection in the actor then traverses what its batches allocate, not
    the hundreds of thousands of objects of torch, transformers and the model. While it loads,
    the collector is paused: the one collection is the one before the freeze."""
    env = actor_env(embed_pool(EmbedResources(), 2, batches=1))
    script = textwrap.dedent(
        f"""
        import os, sys
        seen = []
        class Watch:
            def find_spec(self, name, path=None, target=None):
                if name == "torch" and not seen:
                    seen.append((os.environ.get("OMP_WAIT_POLICY"), os.environ.get("MKL_CBWR")))
        sys.meta_path.insert(0, Watch())
        from jobs.stages.embed import EmbedActor, EmbedSettings
        assert not seen and "torch" not in sys.modules
        import gc
        runs = []
        gc.callbacks.append(lambda phase, info: phase == "start" and runs.append(info))
        options = {{"device": "cpu", "dtype": "fp32", "token_budget": 256}}
        actor = EmbedActor(EmbedSettings("minilm", options, cache_uri=None, env={env!r}))
        print(seen == [("PASSIVE", "AUTO,STRICT")])
        print(gc.get_freeze_count() > 100_000, len(gc.get_objects()) < 10_000)
        print([info["generation"] for info in runs])
        import torch
        words = "retry the request after a timeout and log how long the client waited".split()
        texts = [" ".join(words[j % len(words)] for j in range(n)) for n in range(64, 184, 8)]
        bits = {{}}
        for threads in (1, 2):
            torch.set_num_threads(threads)
            bits[threads] = [actor.embedder.embed([text])[0].tobytes() for text in texts]
        print(bits[1] == bits[2])
        """
    )
    environ = {k: v for k, v in os.environ.items() if k not in env}
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=environ, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True", "True", "True", "[2]", "True"]


def test_the_files_a_run_reads_are_counted_without_its_work_rows():
    """Whether a run fits the bound of a run without Ray is decided from the plan
    (`files_to_read`), where the rows of every rebuilt topic were made first and, for a run on
    Ray, again by the pipeline: the count is the work rows' own, for sources changed, carried,
    failed before, new, and questions files."""
    files = [FileInfo(f"t/{name}.md", 10, name) for name in ("same", "edited", "failed", "new")]
    files += [FileInfo("t/qa-pairs.md", 10, "q"), FileInfo("u/same.md", 10, "u")]
    built = {f.path: SourceEntry(f.fingerprint, f"sha-{f.path}") for f in files}
    built["t/edited.md"] = SourceEntry("old", "sha-edited")
    built["t/failed.md"] = SourceEntry("failed", None, failed=True)
    del built["t/new.md"]
    previous = Manifest("s1", built)
    plan = make_plan(files, previous, "s1", ("*.md",))
    rebuilt = [replace(t, action=REBUILD) for t in plan.topics]
    rows = work_rows(rebuilt, plan, previous, {f.path: f.size for f in files})
    read = [(row["kind"], row["path"]) for row in rows if row["kind"] in (SOURCE, QUESTIONS)]
    assert sorted(path for _, path in read) == [
        "t/edited.md",
        "t/failed.md",
        "t/new.md",
        "t/qa-pairs.md",
    ]
    assert files_to_read(rebuilt, plan, previous) == len(read) == 4
    assert files_to_read(rebuilt[1:], plan, previous) == 0  # u/: its one source carried


def test_an_embedding_actor_loads_its_model_at_its_start_where_the_run_has_new_content(tmp_path):
    """On a CPU an actor loads its model at its first cache miss (a run whose chunks are all
    cached never loads it), so a cold build's actor waited for its first batch, then for torch
    and transformers. Where the listing says some source holds new bytes (an edit that changed its
    size; a first build with an empty cache) it loads at its start, while the chunk tasks run."""
    files = [FileInfo("t/a.md", 10, "a1"), FileInfo("t/b.md", 10, "b1")]
    probes = []  # the cache is asked only where a source is new and no edit decided it

    def guess(listing, previous, cache_in_use=False, settings="s1"):
        plan = make_plan(listing, previous, settings, ("*.md",))
        rebuilt = [replace(t, action=REBUILD) for t in plan.topics]
        sizes = {f.path: f.size for f in listing}
        rows = work_rows(rebuilt, plan, previous, sizes)
        return new_content(rows, plan, previous, lambda: probes.append(1) or cache_in_use)

    assert guess(files, Manifest())  # a first build
    assert not guess(files, Manifest(), cache_in_use=True)  # beside a kept cache: maybe there
    built = Manifest("s1", {f.path: SourceEntry(f.fingerprint, f"sha-{f.path}") for f in files})
    edited = [files[0], FileInfo("t/b.md", 11, "b2")]
    probes.clear()
    assert guess(edited, built, cache_in_use=True) and not probes
    assert not guess([files[0], FileInfo("t/b.md", 10, "b2")], built)  # touched: its size kept
    assert not guess(files, built, settings="s2")  # new settings, the same bytes
    stopped = replace(built, sources={**built.sources, "t/b.md": SourceEntry(NOT_BUILT, "sha")})
    assert not guess(files, stopped)  # a re-run after a stopped one

    options = {"device": "cpu", "dtype": "fp32"}
    settings = EmbedSettings("minilm", options, cache_uri=str(tmp_path / "cache"))
    assert not EmbedActor(settings).embedder.is_loaded
    loaded = EmbedActor(replace(settings, load_at_start=True)).embedder
    assert isinstance(loaded, LazyEmbedder) and loaded.is_loaded  # its keys checked, as at a miss
