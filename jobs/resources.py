"""The one place where the config's per-stage resources become Ray Data arguments."""

from __future__ import annotations

from typing import Any

from ray.data import ActorPoolStrategy, TaskPoolStrategy

from jobs.config import EmbedResources, IndexResources, TaskResources

# Ray Data fuses a task stage into the next actor stage when their remote arguments match, which
# would run chunking serially inside the embedding actors. Options given per task through
# `ray_remote_args_fn` are never fused, so the CPU stages keep their own tasks, in parallel with
# embedding; the option itself retries a task whose worker died.
TASK_RETRIES = 3
# An embedding actor whose process dies (OOM kill, lost node, preempted GPU) is restarted, and the
# batches it was working on are run again on the pool: the output is unchanged. Ray Data's own
# defaults are unbounded; a bound turns a crash loop into a failed job (exit 1) instead of a hang.
ACTOR_RESTARTS = 3
ACTOR_TASK_RETRIES = 3


def _task_options() -> dict[str, Any]:
    return {"max_retries": TASK_RETRIES}


def task_stage_args(resources: TaskResources) -> dict[str, Any]:
    """`map_batches` arguments of a CPU stage run as tasks."""
    args: dict[str, Any] = {
        "num_cpus": resources.num_cpus,
        "batch_size": resources.batch_size,
        "ray_remote_args_fn": _task_options,
    }
    if resources.concurrency is not None:
        args["compute"] = TaskPoolStrategy(size=resources.concurrency)
    return args


def actor_stage_args(resources: EmbedResources) -> dict[str, Any]:
    """`map_batches` arguments of the embedding actor pool (fixed, or autoscaling to max_actors)."""
    if resources.max_actors is None or resources.max_actors == resources.actors:
        compute = ActorPoolStrategy(size=resources.actors)
    else:
        compute = ActorPoolStrategy(min_size=resources.actors, max_size=resources.max_actors)
    return {
        "compute": compute,
        "num_cpus": resources.num_cpus,
        "num_gpus": resources.num_gpus,
        "batch_size": resources.batch_size,
        "max_restarts": ACTOR_RESTARTS,
        "max_task_retries": ACTOR_TASK_RETRIES,
    }


def actor_threads(resources: EmbedResources) -> int:
    """Torch threads for one embedding actor: its CPU share, at least one."""
    return max(1, round(resources.num_cpus))


def reduce_stage_args(resources: IndexResources) -> dict[str, Any]:
    """`map_groups` arguments of the per-topic reduce."""
    return {"num_cpus": resources.num_cpus}
