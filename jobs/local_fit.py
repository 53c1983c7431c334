"""What a build's local Ray instance gets, decided before Ray starts, and by the dry run, which
starts none: its CPUs (those this process may use, at most what its memory limit holds) and
whether each stage fits on its one node. No Ray here: a dry run imports none."""

from __future__ import annotations

import logging
import os
import sys

from jobs.cgroups import memory_limit, usable_cpus
from jobs.config import JobConfig
from jobs.resources import (
    describe_resources,
    infeasible,
    memory_advice,
    memory_cpus,
    memory_shortfall,
    memory_starts,
    too_many_actors,
)

log = logging.getLogger("mdindex.build")


def ray_initialized() -> bool:
    """`ray.is_initialized()`, without importing Ray: a process that has not imported it has not
    started or joined it either."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


class InfeasibleResources(ValueError):
    """A stage asks for more than the private local Ray instance, which never grows, can give:
    more than any node has, so the build would wait for ever, or more CPU embedding actors than
    CPUs (a config error for this machine: exit code 2)."""


def check_local_fit(config: JobConfig, node: dict[str, float]) -> None:
    """`InfeasibleResources` where a stage asks for more than the local instance's one `node`
    has (its total resources), so the build would wait for ever, or the CPU embedding pool for
    more actors than it has CPUs (`too_many_actors`)."""
    if crowd := too_many_actors(config.resources.embed, node.get("CPU", 0.0)):
        raise InfeasibleResources(f"this machine's Ray instance, which never grows: {crowd}")
    if missing := infeasible(config.resources, [node]):
        here = describe_resources(node.get("CPU", 0.0), node.get("GPU", 0.0))
        hint = (
            " Without a GPU, set embedding.device: cpu and resources.embed.num_gpus: 0 (as"
            " configs/local.yaml does); for GPUs, run on their cluster (RAY_ADDRESS, ray job"
            " submit)."
            if config.resources.embed.num_gpus
            else ""
        )
        raise InfeasibleResources(
            f"this machine's Ray instance has {here}, and a local instance never grows: "
            f"{'; '.join(missing)}, so the build would wait for ever.{hint}"
        )


def memory_cpus_for(config: JobConfig, limit: int | None, cpus: int) -> int | None:
    """The CPUs to start a local instance with where `cpus` CPUs are usable and the memory is
    `limit` bytes (None: the machine's RAM, not checked): `resources.num_cpus` where the build fits
    (`jobs.resources.memory_need`; a GPU pool is not checked); with `resources.num_cpus` null, the
    most that fit, with a warning where that is fewer than the machine's; one CPU, with a warning
    that a large corpus may still run out, where a build starts but its grown actors would not
    fit (`jobs.resources.memory_starts`: tldr's 2,000 pages built in 2 GiB, FastAPI's did not).
    `InfeasibleResources` naming the memory and what to set where not even a one-CPU build
    starts, or `resources.num_cpus` as set does not fit. Ray's workers were killed instead, and
    the build failed minutes later, Ray's tracebacks on the screen: in a 2 GiB cgroup Ray's
    memory monitor killed chunk tasks, tried again for ever, then actors (FastAPI, two actors:
    exit 1 after 169 s, 230 lines); where Ray did not see the limit, the kernel killed the actors
    (85 s, "ActorDiedError"); at 1 GiB, 32 s for the tests' 11 pages."""
    resources = config.resources
    if limit is None or resources.embed.num_gpus:
        return resources.num_cpus
    asked = resources.num_cpus or cpus
    shortfall = memory_shortfall(resources, asked, limit)
    if shortfall is None:
        return resources.num_cpus
    grown = memory_cpus(resources, asked, limit)  # the CPUs whose grown actors fit
    fits = grown or int(memory_starts(resources, limit))
    if not fits or fits < (resources.num_cpus or 0):
        advice = memory_advice(resources, asked, limit)
        raise InfeasibleResources(f"this machine's Ray instance: {shortfall}: {advice}")
    risk = ""
    if not grown:
        risk = (
            "; it starts, but may run out as its embedding actor grows on a large corpus "
            f"({memory_advice(resources, 1, limit)})"
        )
    log.warning(
        "%s: the local Ray instance gets %d of the %d CPUs (resources.num_cpus)%s",
        shortfall,
        fits,
        cpus,
        risk,
    )
    return fits


def expected_local_node(config: JobConfig) -> dict[str, float] | None:
    """The one node a build's local Ray instance would have, for a dry run, which starts none:
    `resources.num_cpus` or the CPUs this process may use (`local_cpus`), or those its memory
    limit holds, or the build's `InfeasibleResources` where it holds none. None where the build
    would join a cluster (RAY_ADDRESS) or this process's own Ray, or would ask for GPUs, which
    only a started Ray counts."""
    if os.environ.get("RAY_ADDRESS") or ray_initialized() or config.resources.embed.num_gpus:
        return None
    return {"CPU": float(local_cpus(config, memory_limit())), "GPU": 0.0}


def local_cpus(config: JobConfig, limit: int | None) -> int:
    """The CPUs a local instance starts with: `resources.num_cpus`, or those this process may keep
    busy (`jobs.cgroups.usable_cpus`: its affinity and its cgroups' quota), at most those its
    memory `limit` holds (`memory_cpus_for`). Ray itself counts every CPU of the machine but a
    container's root quota: `taskset -c 0-3`, a Slurm job's or a Kubernetes pod's cpuset, or
    `systemd-run -p CPUQuota=` gave a 64-core machine's instance 64 CPUs, so 64 chunk tasks at
    once and a CPU embedding pool of up to 64 actors, each loading the model."""
    usable = usable_cpus()
    return memory_cpus_for(config, limit, usable) or usable
