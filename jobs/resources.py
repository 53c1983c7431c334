"""The one place where the config's per-stage resources become Ray Data arguments."""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from embedding.batching import REPRODUCIBLE_MKL
from indexing.terminal import counted
from jobs.config import EmbedResources, IndexResources, ResourcesConfig, TaskResources

# Batches an embedding actor runs at once, in threads: the model takes one at a time, and the
# other batch's decoding, cache lookups (object-store round trips) and tokens overlap it, so an
# accelerator does not wait for them.
ACTOR_CONCURRENT_BATCHES = 2
# An embedding actor's calls are tried again while it may restart (Ray: "until the task succeeds, or
# the actor has reached its max_restarts limit").
UNTIL_THE_ACTOR_IS_DEAD = -1
# CPU actors share the cores with chunk tasks; OpenMP's default spin-waiting then makes torch's
# threads thrash (measured: the stand-in model 2.7x slower beside two busy processes). Passive
# waiting costs nothing measurable on an idle machine. The actor sets it in its own process before
# it imports torch (`actor_env`): given as a `runtime_env`, it made Ray prepare that environment
# through its runtime-env agent before starting each actor's process, which was then ready 1.95-2.3
# s after its creation instead of 0.8-0.9 s (2-core AVX2 VM, otherwise idle).
CPU_ACTOR_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}
# Every embedding actor: MKL's strict reproducible mode (CPU and GPU pools: a GPU pool's model can
# run on the CPU), read by MKL at its first call, after the actor sets it.
ACTOR_ENV = REPRODUCIBLE_MKL


# Torch threads per CPU actor when the pool sizes itself: one below 8 CPUs, else two. Much of an
# actor's time is single-threaded (tokenizing, cache I/O, Arrow), so several one-thread actors
# beat one actor with many threads (tldr-en, stand-in, 2 CPUs: 22.6 s against 24.2 s for 1x2).
def auto_threads(cpus: float) -> int:
    """Torch threads per actor of a self-sized CPU pool."""
    return 1 if cpus < 8 else 2


# Bytes of sources that make each CPU embedding actor after the first worth its start, when the
# pool sizes itself. Each actor is a process that imports torch and transformers and loads the
# model: 5.1-5.4 CPU-seconds with MiniLM (2-core AMD EPYC VM, 2026-12-01), about 2.5 s of a 2-core
# machine's wall while chunk tasks want the cores too. MiniLM embeds 12 kB of tldr sources a
# second on one thread, 21 kB on two: one two-thread actor is behind two one-thread ones by 6 ms
# a kB, so a second actor gains its start back from about 400 kB of sources (a small docs site, a
# 1% edit of tldr: one actor, two threads, where there were two actors; that edit with MiniLM ran
# its pipeline stage in 13.2 s against 15.4 s on average, README: Embedding).
ACTOR_SOURCE_BYTES = 400_000


@dataclass(frozen=True)
class EmbedPool:
    """The embedding pool as it runs: actors, logical CPUs per actor, torch threads per actor;
    `in_driver`: one embedder in the driver's process instead (a run without Ray,
    `jobs.in_process`)."""

    actors: int
    max_actors: int | None
    num_cpus: float
    num_gpus: float
    threads: int
    in_driver: bool = False

    def label(self) -> str:
        """The pool in words, e.g. "1 actor × 2 torch threads, on CPU", or "the driver's process
        × 2 torch threads, on CPU"."""
        scales = self.max_actors is not None and self.max_actors != self.actors
        count = f"{self.actors}-{self.max_actors}" if scales else str(self.actors)
        noun = "actor" if count == "1" else "actors"
        who = "the driver's process" if self.in_driver else f"{count} {noun}"
        threads = counted(self.threads, "torch thread")
        place = f"{self.num_gpus:g} GPU each" if self.num_gpus else "on CPU"
        return f"{who} × {threads}, {place}"

    def to_dict(self) -> dict[str, Any]:
        """The pool as the run report records it (its fields and its label)."""
        return {**asdict(self), "label": self.label()}


def embed_pool(
    resources: EmbedResources,
    cpus: float,
    batches: int,
    node_gpus: tuple[float, ...] = (),
    grows: bool = False,
    node_cpus: float = math.inf,
    source_bytes: float = math.inf,
) -> EmbedPool:
    """The pool the config asks for; `actors`/`num_cpus` left null are sized to the machine.

    A GPU pool's actors take one CPU each unless the config says; their count, when null, is
    `gpu_actors`, and on a cluster that `grows` (one joined through RAY_ADDRESS, whose autoscaler
    may add GPU nodes during the build) the pool autoscales from there to `gpu_max_actors`. A CPU
    pool runs `auto_threads` torch threads per actor and as many actors as `cpus` holds, but no
    more than there are `batches` or `max_actors` (2 CPUs: two actors with one thread each; with
    `max_actors: 1`, one: it was two, and Ray Data refused a pool of 2 to 1), and one more than
    its `source_bytes` (the bytes of sources to chunk) hold `ACTOR_SOURCE_BYTES`. Fewer actors than
    that, whether `batches` or the config sets their count (its largest, if it autoscales), share
    the CPUs: one actor on 2 CPUs runs two threads. Its actors reserve no logical CPU, so chunk
    tasks run on every CPU while there is chunking to do (then the two share the cores), and the
    actors' threads have the whole machine after. On a cluster an actor's threads are at most
    `node_cpus`, its largest node's CPUs: one actor of a 2-CPU head and a 1-CPU node ran 3
    threads, on the 1-CPU node (2026-12-01). `resources.threads`, where set, is every actor's."""
    pool = _sized_pool(resources, cpus, batches, node_gpus, grows, node_cpus, source_bytes)
    return replace(pool, threads=resources.threads) if resources.threads else pool


def _sized_pool(
    resources: EmbedResources,
    cpus: float,
    batches: int,
    node_gpus: tuple[float, ...],
    grows: bool,
    node_cpus: float,
    source_bytes: float,
) -> EmbedPool:
    """`embed_pool`'s pool, its threads as sized."""
    if resources.num_gpus > 0:
        num_cpus = resources.num_cpus if resources.num_cpus is not None else 1.0
        slots = gpu_slots(node_gpus, resources.num_gpus)
        actors = resources.actors or gpu_actors(resources, slots, num_cpus, cpus, batches)
        most = gpu_max_actors(resources, batches) if grows else resources.max_actors
        return EmbedPool(actors, most, num_cpus, resources.num_gpus, _threads(num_cpus))
    most = resources.max_actors or math.inf  # a sized count stays within it
    if resources.num_cpus is not None:
        threads = _threads(resources.num_cpus)
        actors = resources.actors or max(1, min(spare_actors(cpus, resources.num_cpus), most))
        return EmbedPool(actors, resources.max_actors, resources.num_cpus, 0.0, threads)
    worth = 1 + source_bytes / ACTOR_SOURCE_BYTES
    actors = resources.actors or max(1, int(min(batches, cpus // auto_threads(cpus), most, worth)))
    threads = max(1, int(min(cpus // max(actors, resources.max_actors or 0), node_cpus)))
    return EmbedPool(actors, resources.max_actors, 0.0, 0.0, threads)


# The memory of a build's local Ray instance on CPUs, measured with MiniLM (configs/local.yaml) in
# a memory cgroup on 2 CPUs, the FastAPI docs and 2,000 tldr pages (2026-11-30; resident anonymous
# memory, what no limit can reclaim without swap): Ray's processes (GCS, raylet, its agents, Ray
# Data's four actors) 0.70 GB and the driver 0.17 GB; a worker process running read-and-chunk
# tasks and reduces 0.15-0.27 GB; an embedding actor 0.63-0.77 GB on tldr, and on FastAPI 0.8 GB
# growing to 1.1 GB in the first 10 minutes of the build. FastAPI's build on 2 CPUs (two actors,
# two chunk tasks) held 3.8 GB at 10 minutes; in 2 GiB, on one CPU, Ray's memory monitor killed
# its actor within 4 minutes (tldr's 2,000 pages passed there, 1.94 GB at the most).
BASE_MEMORY = 900_000_000
TASK_MEMORY = 250_000_000
CPU_ACTOR_MEMORY = 1_000_000_000
STARTING_ACTOR_MEMORY = 700_000_000  # a MiniLM actor before it grows (tldr's stayed there)
# The share of its memory limit above which Ray's memory monitor kills a worker (Ray's
# `memory_usage_threshold`): a build fits where its need is at most that.
MEMORY_MONITOR_SHARE = 0.95


def memory_need(resources: ResourcesConfig, cpus: int, actor_memory: int = CPU_ACTOR_MEMORY) -> int:
    """The bytes a build's local Ray instance of `cpus` CPUs takes at its peak with a CPU embedding
    pool, by the measured sizes above: Ray's processes and the driver, a worker process per
    chunk task that can run at once, and the pool's actors at their most, `actor_memory` each
    (a larger model's actors take more: this is the least)."""
    tasks = max(1, int(cpus / resources.chunk.num_cpus + 1e-9))
    if resources.chunk.concurrency is not None:
        tasks = min(tasks, resources.chunk.concurrency)
    pool = embed_pool(resources.embed, cpus, cpus)  # no more calls at once than CPUs
    actors = max(pool.actors, pool.max_actors or 0)
    return BASE_MEMORY + tasks * TASK_MEMORY + actors * actor_memory


def memory_cpus(resources: ResourcesConfig, cpus: int, limit: int) -> int:
    """The most CPUs, at most `cpus`, whose build `memory_need` fits in `limit` bytes (below
    `MEMORY_MONITOR_SHARE` of it); 0 where not even one CPU's does (the need grows with the CPUs:
    a bisection)."""
    low, high = 0, cpus
    while low < high:
        middle = (low + high + 1) // 2
        if memory_need(resources, middle) <= limit * MEMORY_MONITOR_SHARE:
            low = middle
        else:
            high = middle - 1
    return low


def memory_starts(resources: ResourcesConfig, limit: int) -> bool:
    """Whether a one-CPU build starts in `limit` bytes: Ray's processes and the driver, its chunk
    tasks and its actors as they start (`memory_need` at `STARTING_ACTOR_MEMORY`), below
    `MEMORY_MONITOR_SHARE` of it. Such a build may still run out as its actors grow, on a large
    corpus only: in 2 GiB tldr's 2,000 pages passed (1.94 GB at the most) where FastAPI's actor
    was killed within 4 minutes."""
    return memory_need(resources, 1, STARTING_ACTOR_MEMORY) <= limit * MEMORY_MONITOR_SHARE


def memory_shortfall(resources: ResourcesConfig, cpus: int, limit: int) -> str | None:
    """Why a CPU build's local Ray instance of `cpus` CPUs does not fit in `limit` bytes, in
    words, or None where it fits (`memory_need`, below `MEMORY_MONITOR_SHARE` of the limit)."""
    need = memory_need(resources, cpus)
    if need <= limit * MEMORY_MONITOR_SHARE:
        return None
    return (
        f"a build on {_cpus(cpus)} needs about {_gb(need)} of memory (Ray's processes and the "
        f"driver {_gb(BASE_MEMORY)}, {_gb(TASK_MEMORY)} per chunk task, {_gb(CPU_ACTOR_MEMORY)} "
        f"per embedding actor, measured with MiniLM), more than the {_gb(limit)} it may use (Ray "
        f"kills workers above {MEMORY_MONITOR_SHARE:.0%} of it)"
    )


def memory_advice(resources: ResourcesConfig, cpus: int, limit: int) -> str:
    """What to set where a build of `cpus` CPUs does not fit in `limit` bytes: fewer CPUs where
    some fit (`memory_cpus`), else the limit one CPU needs (or one embedding actor, where more
    are set)."""
    if fits := memory_cpus(resources, cpus, limit):
        need = _gb(memory_need(resources, fits))
        return f"set resources.num_cpus: {fits} (about {need}), or give it more memory"
    if cpus > 1 and memory_starts(resources, limit):
        return "set resources.num_cpus: 1 (a large corpus may run out), or give it more memory"
    least = math.ceil(memory_need(resources, 1) / MEMORY_MONITOR_SHARE / 2**30 * 10) / 10
    advice = f"give it at least {least:g} GiB (one CPU)"
    if (resources.embed.actors or 1) > 1:
        advice += ", or set resources.embed.actors: 1"
    return advice


def _gb(count: float) -> str:
    """Bytes in GiB (Docker's `--memory 2g`), two significant digits: "2.7 GiB", "0.19 GiB"."""
    return f"{count / 2**30:.2g} GiB"


def infeasible(
    resources: ResourcesConfig, nodes: list[dict[str, float]], embeds: bool = True
) -> list[str]:
    """What one task or actor asks for, in words, for each stage that no node can hold (`nodes`:
    each live node's total resources, as `ray.nodes()` gives them); empty when every stage fits.
    Ray Data would wait for such a node for ever; only a cluster that grows can bring one.
    `embeds` False: a pass with nothing to embed, which starts no embedding actor."""
    most_cpus = max((node.get("CPU", 0.0) for node in nodes), default=0.0)
    most_gpus = max((node.get("GPU", 0.0) for node in nodes), default=0.0)
    actor = embed_pool(resources.embed, most_cpus, 1, (most_gpus,))  # what one actor reserves
    asks = {
        "a read-and-chunk task (resources.chunk)": (resources.chunk.num_cpus, 0.0),
        "an embedding actor (resources.embed)": (actor.num_cpus, actor.num_gpus),
        "a topic's reduce (resources.index)": (resources.index.num_cpus, 0.0),
    }
    if not embeds:
        del asks["an embedding actor (resources.embed)"]
    missing = [
        f"{stage} asks for {describe_resources(cpus, gpus)}"
        for stage, (cpus, gpus) in asks.items()
        if not some_node_holds(nodes, cpus, gpus)
    ]
    return missing or (_crowded_out(resources, nodes) if embeds else [])


def some_node_holds(nodes: list[dict[str, float]], cpus: float, gpus: float = 0.0) -> bool:
    """Whether one of the `nodes` (each's total resources, as `ray.nodes()` gives them) can hold a
    task or actor asking for `cpus` and `gpus`."""
    return any(cpus <= n.get("CPU", 0.0) and gpus <= n.get("GPU", 0.0) for n in nodes)


def too_many_actors(resources: EmbedResources, cpus: float) -> str | None:
    """Why a CPU pool whose actors share the CPUs (`num_cpus` null) may not start on a Ray
    instance of `cpus` that never grows: more actors than CPUs (`actors`, or `max_actors` it may
    grow to). Each is a process that loads the model and runs a torch thread or more; such
    actors reserve no CPU, so Ray starts them all (`actors: 10000` on 2 CPUs: the machine
    thrashed, and no source was chunked in 100 s). None where the pool fits."""
    if resources.num_gpus or resources.num_cpus is not None:
        return None
    asked = max(resources.actors or 0, resources.max_actors or 0)
    if asked <= cpus:
        return None
    key = "actors" if asked == resources.actors else "max_actors"
    return (
        f"resources.embed.{key} {asked} asks for more CPU embedding actors than the "
        f"{cpus:g} CPUs: each is a process that loads the model and runs a torch thread, so "
        f"more than one per CPU only contend for them; set at most {int(cpus)}, or null to size "
        "the pool to the machine"
    )


def _crowded_out(resources: ResourcesConfig, nodes: list[dict[str, float]]) -> list[str]:
    """The chunk tasks and reduces that no node has a CPU for once the embedding pool's actors
    are placed (as many on each node as it holds, in turn): the actors hold theirs for the whole
    build, so the tasks waited for ever (2 CPUs, `resources.embed.num_cpus: 1`, `actors: 2`)."""
    cpus = sum(node.get("CPU", 0.0) for node in nodes)
    node_gpus = tuple(node.get("GPU", 0.0) for node in nodes)
    pool = embed_pool(resources.embed, cpus, 1, node_gpus)  # the fewest actors it starts with
    if not pool.num_cpus:
        return []
    left, to_place = [], pool.actors
    for node in nodes:
        held = min(to_place, int(node.get("CPU", 0.0) / pool.num_cpus + 1e-9))
        if pool.num_gpus:
            held = min(held, int(node.get("GPU", 0.0) / pool.num_gpus + 1e-9))
        to_place -= held
        left.append(node.get("CPU", 0.0) - held * pool.num_cpus)
    asks = {
        "a read-and-chunk task (resources.chunk)": resources.chunk.num_cpus,
        "a topic's reduce (resources.index)": resources.index.num_cpus,
    }
    starved = [
        f"the {_cpus(needed)} of {stage}"
        for stage, needed in asks.items()
        if not any(needed <= free + 1e-9 for free in left)
    ]
    if not starved:
        return []
    many = pool.actors > 1
    actors = f"{pool.actors} embedding actors" if many else "an embedding actor"
    hold = f"hold {_cpus(pool.num_cpus)} each" if many else f"holds {_cpus(pool.num_cpus)}"
    return [
        f"{actors} (resources.embed) {hold} for the whole build, leaving no node "
        f"{' or '.join(starved)}"
    ]


def describe_resources(cpus: float, gpus: float) -> str:
    """CPUs and GPUs in words: "2 CPUs and 0.5 GPU", "1 CPU and no GPU"."""
    gpu = f"{gpus:g} GPU" + ("s" if gpus > 1 else "") if gpus else "no GPU"
    return f"{_cpus(cpus)} and {gpu}"


def _cpus(count: float) -> str:
    """A CPU count in words: "1 CPU", "0.5 CPUs"."""
    return f"{count:g} CPU" + ("s" if count != 1 else "")


def gpu_slots(node_gpus: tuple[float, ...], num_gpus: float) -> int:
    """How many actors of `num_gpus` each (at most one GPU) the nodes' GPUs hold (`node_gpus`:
    each node's count): a share must fit on one GPU, so each holds `1 // num_gpus` of them (two
    GPUs at 0.4: four actors, not five; the fifth would wait for a GPU for the whole build)."""
    per_gpu = int(1 / num_gpus + 1e-6)  # 1 / 0.1 is 9.999...: ten
    return sum(int(gpus + 1e-6) * per_gpu for gpus in node_gpus)


def gpu_actors(
    resources: EmbedResources, slots: int, num_cpus: float, cpus: float, batches: int
) -> int:
    """Actors of a GPU pool whose count the config leaves null: as many as the GPUs hold
    (`slots`, `gpu_slots`: `num_gpus: 0.25` on one GPU: four), so no GPU present at the start
    idles, but no more than `max_actors`, than there are `batches`, or than leave one of the
    `cpus` to the chunk tasks at `num_cpus` each; at least one (an autoscaling cluster may have no
    GPU yet: its pool's actor waits for the GPU node its demand brings, and the pool grows to
    `gpu_max_actors` as more join). Measured on an H200, MiniLM on all of tldr: four actors
    sharing the GPU embedded 1.9x as fast as one, until the actor worked on whole columns; since
    then one keeps it 65-86% busy (README, Benchmarks, "GPU")."""
    fill = slots
    return max(1, min(fill, batches, resources.max_actors or fill, spare_actors(cpus, num_cpus)))


def spare_actors(cpus: float, num_cpus: float) -> int:
    """Actors of `num_cpus` each that leave one of the `cpus` to the chunk tasks (actors that
    reserved every CPU left the chunk tasks waiting for ever: 2 CPUs, `num_cpus: 1`)."""
    return int((cpus - 1) / num_cpus)


def gpu_max_actors(resources: EmbedResources, batches: int) -> int | None:
    """The most actors a GPU pool grows to on a cluster that may add GPU nodes during the build:
    `max_actors`; when both counts are null, one per embedding call that can run at once
    (`batches`), so GPU nodes the autoscaler adds join the build, not only those up at its start.

    A fixed pool (one actor where GPU workers scale from zero) kept the whole build on one GPU:
    Ray Data's cluster autoscaler asks for no more actors' resources than the pool's largest size
    (`RateBasedClusterAutoscaler`, the pool's concurrency limit), so no other GPU node came, and
    its actor autoscaler adds actors only within the resources of the nodes present
    (`DefaultActorAutoscaler`, Ray 2.60). Growing to `batches` starts no actor without a call to
    run. The CPUs present do not bound it, unlike `gpu_actors`: GPU nodes bring their own, and Ray
    Data adds an actor only within its budget of the nodes present, after the resources it
    reserves for each stage (the chunk tasks' first). Set `max_actors` to cap the GPUs a build
    takes; `actors` set with `max_actors` null keeps a fixed pool. On Ray's fake autoscaling
    cluster (head of 2 CPUs, GPU workers 0-3 of 1 GPU each; 80 calls of 1.5 s), the fixed pool
    ran on one GPU node, 67.3 s; this one brought the cluster to 3 GPUs and ran two actors,
    52.7 s."""
    if resources.actors is not None:
        return resources.max_actors
    return resources.max_actors or max(1, batches)


def _threads(num_cpus: float) -> int:
    """Torch threads for an actor's CPU share: rounded, at least one."""
    return max(1, round(num_cpus))


def _task_options(retries: int) -> dict[str, Any]:
    return {"max_retries": retries}


def task_stage_args(resources: TaskResources, retries: int) -> dict[str, Any]:
    """`map_batches` arguments of the CPU stage run as tasks (one batch per input block), each
    tried again `retries` times if its worker dies."""
    return _task_args(resources.num_cpus, resources.concurrency, retries)


def store_stage_args(cpus: float, retries: int) -> dict[str, Any]:
    """`map_batches` arguments of the cache-writing stage: tasks that declare no CPU, one batch per
    embedded block, at most one per CPU of the cluster (`cpus`) at once.

    Ray Data sets aside, for each operator, at least the resources of one of its tasks, whether
    or not it has work. Store tasks of one CPU each kept a CPU from the chunk tasks for the whole
    run: on 2 CPUs the chunk tasks ran one at a time, and on 16 logical CPUs with a one-CPU GPU
    actor at most 11 tasks ran at once instead of 15. A store task writes a batch's cache files;
    the OS shares the cores while one runs. The bound keeps Ray from starting a worker process for
    every batch waiting to be stored: a task that needs no CPU runs at once, in a new process if
    no idle one is left."""
    return _task_args(0, max(1, int(cpus)), retries)


def _task_args(num_cpus: float, concurrency: int | None, retries: int) -> dict[str, Any]:
    """`map_batches` arguments of a stage run as retried tasks, one batch per input block, with
    `num_cpus` each and at most `concurrency` at once (None: as many as Ray Data allows).

    Ray Data fuses a task stage into the next actor stage when their remote arguments match, which
    would run chunking serially inside the embedding actors. Options given per task through
    `ray_remote_args_fn` are never fused, so the CPU stage keeps its own tasks, in parallel with
    embedding; the option itself is the tries again of a task whose worker died."""
    args: dict[str, Any] = {
        "num_cpus": num_cpus,
        "batch_size": None,
        "ray_remote_args_fn": functools.partial(_task_options, retries),
    }
    if concurrency is not None:
        from ray.data import TaskPoolStrategy  # on the Ray path alone: `jobs.logs.quiet_ray_data`

        args["compute"] = TaskPoolStrategy(size=concurrency)
    return args


# Source bytes per GPU embedding call when `resources.embed.batch_size` is null. On GPUs every
# fixed-shape micro-batch is filled to its full row count, so a call whose chunks spread thinly over
# the length buckets computes mostly filler rows. Planned over the chunks of tldr-pages (en) and the
# FastAPI docs (configs/local.yaml's chunking, 2.3 chunks per KB of source; cuda token budget
# 8,192), the real share of the computed token slots is 42-55% for calls of 400 chunks, 78-82% for
# 2,000 and 89-90% for 5,000: 2 MB of sources is about 4,600 chunks.
GPU_CALL_BYTES = 2_000_000


def call_rows(resources: EmbedResources, source_bytes: float) -> int | None:
    """Documents per embedding call as asked: the config's batch size; when it is null, None on
    CPUs (each chunk task's output is one call), and on GPUs, where Ray Data needs a number, as
    many sources as `GPU_CALL_BYTES` holds at `source_bytes` (the mean listed size of a source).
    `jobs.work.aligned_rows` then fits it to the chunk tasks."""
    if resources.batch_size is not None or resources.num_gpus == 0:
        return resources.batch_size
    return max(1, math.ceil(GPU_CALL_BYTES / max(1.0, source_bytes)))


def actor_stage_args(pool: EmbedPool, batch_size: int | None, retries: int) -> dict[str, Any]:
    """`map_batches` arguments of the embedding actor pool (fixed, or autoscaling to max_actors).

    An actor whose process dies (OOM kill, lost node, preempted GPU) is restarted up to `retries`
    times, and the batches it was working on run again on the pool: the output is unchanged. Ray
    Data's own defaults are unbounded; a bound turns a crash loop into a failed job (exit 1). The
    bound is on the restarts alone: a call is tried again for as long as its actor may come back
    (`max_task_retries: -1`). With `retries` there too, the calls on an actor whose node was lost
    used their tries up in the 4 s before Ray marked the node dead (each one "connection
    refused") and failed the build with "ActorUnavailableError: The actor … is unavailable"."""
    from ray.data import ActorPoolStrategy  # on the Ray path alone: `jobs.logs.quiet_ray_data`

    if pool.max_actors is None or pool.max_actors == pool.actors:
        sizes = {"size": pool.actors}
    else:
        sizes = {"min_size": pool.actors, "max_size": pool.max_actors}
    compute = ActorPoolStrategy(
        **sizes,
        max_concurrent_calls_per_actor=ACTOR_CONCURRENT_BATCHES,
        enable_true_multi_threading=True,
    )
    return {
        "compute": compute,
        "num_cpus": pool.num_cpus,
        "num_gpus": pool.num_gpus,
        "batch_size": batch_size,
        "max_restarts": retries,
        "max_task_retries": UNTIL_THE_ACTOR_IS_DEAD,
    }


def actor_env(pool: EmbedPool) -> dict[str, str]:
    """Environment variables an embedding actor sets in its process before it loads torch."""
    return ACTOR_ENV | CPU_ACTOR_ENV if pool.num_gpus == 0 else dict(ACTOR_ENV)


def reduce_task_options(resources: IndexResources, retries: int) -> dict[str, Any]:
    """Ray options of the per-topic reduce tasks (retried like the CPU stage's)."""
    return {"num_cpus": resources.num_cpus, **_task_options(retries)}
