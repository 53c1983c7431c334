"""A build's local Ray instance sized to the memory its cgroup allows (a CI runner of 1-4 GiB):
the limit read from the cgroup files, fewer CPUs where the machine's do not fit, a one-line
refusal where one does not. Library-level, no Ray; one real build, where root may make a cgroup."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from jobs.cgroups import memory_limit
from jobs.config import EmbedResources, JobConfig, ResourcesConfig
from jobs.local_fit import InfeasibleResources, memory_cpus_for
from jobs.resources import memory_need
from tests.environment_support import (
    limit_file,
    new_cgroup,
    own_ray_environment,
    remove_cgroup,
    run_in_cgroup,
)
from tests.jobs_support import ON_RAY, unstamped

ROOT = Path(__file__).resolve().parent.parent
CONFIG = str(ROOT / "configs" / "local.yaml")
CORPUS = ROOT / "tests" / "fixtures" / "corpus"
GIB = 2**30


def _config(**resources) -> JobConfig:
    return JobConfig(input="unused", resources=ResourcesConfig(**resources))


def test_the_limit_is_the_smallest_of_the_process_cgroup_and_those_above_it(tmp_path):
    """A process confined from outside (`systemd-run --scope -p MemoryMax=2G`, a cgroup made by
    hand) sees its limit only under its own cgroup's path, which Ray never reads: it sized its
    object store and memory monitor to the machine's RAM, and the kernel killed the embedding
    actors (2 GiB, FastAPI: 8 kills, exit 1 after 85 s, "ActorDiedError")."""
    root = tmp_path / "cgroup"
    v2 = tmp_path / "v2"
    v2.write_text("0::/ci/job/build\n")
    limit_file(root, "memory.max", "max")
    limit_file(root / "ci", "memory.max", str(3 * GIB))
    limit_file(root / "ci" / "job" / "build", "memory.max", str(2 * GIB))
    assert memory_limit(str(root), str(v2)) == 2 * GIB
    limit_file(root / "ci", "memory.max", str(GIB))  # a parent's smaller limit holds
    assert memory_limit(str(root), str(v2)) == GIB

    v1 = tmp_path / "v1"
    v1.write_text("7:cpu,cpuacct:/\n4:memory:/runner/job\n0::/\n")
    limit_file(root / "memory" / "runner" / "job", "memory.limit_in_bytes", str(3 * GIB // 2))
    assert memory_limit(str(root / "elsewhere"), str(v1)) is None  # no such files: no limit
    limit_file(tmp_path / "v1root" / "memory", "memory.limit_in_bytes", str(2**63 - 4096))
    assert memory_limit(str(tmp_path / "v1root"), str(v1)) is None  # unlimited: the RAM's
    assert memory_limit(str(root), str(v1)) == 3 * GIB // 2

    # a container's own cgroup at the root, its /proc/self/cgroup saying "/"
    container = tmp_path / "container"
    limit_file(container, "memory.max", str(GIB))
    (tmp_path / "inside").write_text("0::/\n")
    assert memory_limit(str(container), str(tmp_path / "inside")) == GIB


def test_a_machine_whose_memory_holds_fewer_cpus_gets_a_smaller_ray_instance(caplog):
    """configs/local.yaml on 2 CPUs: two actors and two chunk tasks held 3.8 GB at 10 minutes
    (FastAPI); in 2 GiB Ray's memory monitor killed chunk tasks and actors, and the build failed
    after 169 s with two tracebacks and Ray's memory report. Ray gets the CPUs the memory holds."""
    config = _config()
    assert memory_cpus_for(config, None, 2) is None  # no limit: Ray takes every CPU
    assert memory_cpus_for(config, 4 * GIB, 2) is None  # it fits
    with caplog.at_level(logging.WARNING, logger="mdindex.build"):
        assert memory_cpus_for(config, 3 * GIB, 2) == 1
    (line,) = caplog.messages
    assert "3.2 GiB of memory" in line and "more than the 3 GiB it may use" in line
    assert line.endswith("the local Ray instance gets 1 of the 2 CPUs (resources.num_cpus)")
    many = memory_cpus_for(config, 8 * GIB, 64)
    assert memory_need(config.resources, many) <= 0.95 * 8 * GIB  # Ray's memory monitor's share
    assert memory_need(config.resources, many + 1) > 0.95 * 8 * GIB
    gpu = _config(embed=EmbedResources(num_gpus=1.0, num_cpus=1.0))
    assert memory_cpus_for(gpu, GIB, 2) is None  # a GPU pool's actors are not these


def test_a_build_that_starts_but_may_outgrow_its_memory_runs_on_one_cpu_with_a_warning(caplog):
    """2 GiB: tldr's 2,000 pages built on one CPU (1.94 GB at the most) where FastAPI's actor,
    grown, was killed; refusing it refused a small docs site a 2 GiB CI runner could build. It
    runs on one CPU, the warning saying a large corpus may run out and what would hold it."""
    for config in (_config(), _config(num_cpus=1)):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="mdindex.build"):
            assert memory_cpus_for(config, 2 * GIB, 2) == 1
        (line,) = caplog.messages
        assert "the local Ray instance gets 1 of the 2 CPUs" in line
        assert line.endswith(
            "it starts, but may run out as its embedding actor grows on a large corpus (give it "
            "at least 2.2 GiB (one CPU))"
        )


@pytest.mark.parametrize(
    ("limit", "resources", "advice"),
    [
        (3 * GIB // 2, {}, "give it at least 2.2 GiB (one CPU)"),
        (2 * GIB, {"num_cpus": 2}, "set resources.num_cpus: 1 (a large corpus may run out), or"),
        (GIB, {"embed": EmbedResources(actors=2)}, "(one CPU), or set resources.embed.actors: 1"),
    ],
)
def test_too_little_memory_for_one_cpu_is_refused_in_one_line(limit, resources, advice):
    """1-2 GiB: the workers killed over and over, a failure minutes later; now refused before
    Ray starts (exit 2), the line naming the memory and what to set."""
    with pytest.raises(InfeasibleResources) as refused:
        memory_cpus_for(_config(**resources), limit, 2)
    message = str(refused.value)
    assert "\n" not in message and f"more than the {limit / GIB:g} GiB it may use" in message
    assert advice in message


def test_cpus_set_that_the_memory_does_not_hold_are_refused_naming_the_ones_it_does():
    config = _config(num_cpus=4)
    with pytest.raises(InfeasibleResources, match=r"set resources.num_cpus: 2 \(about 3.2 GiB\)"):
        memory_cpus_for(config, 4 * GIB, 8)
    assert memory_cpus_for(replace(config, resources=ResourcesConfig(num_cpus=2)), 4 * GIB, 8) == 2


def test_a_build_in_a_one_gib_cgroup_stops_at_once_with_one_line(tmp_path):
    """The real CLI confined to 1 GiB: the dry run and the build on Ray exit 2 before Ray starts,
    one line naming the memory (the dry run said nothing, and the build failed 32 s later). The
    same small build without Ray (the default for its 9 files) needs no Ray's memory: it runs,
    and its dry run says so."""
    limits = ("memory.max", "memory.limit_in_bytes")
    if os.geteuid() != 0 or (cgroup := new_cgroup("memory", limits)) is None:
        pytest.skip("needs root and a memory cgroup to confine a build in")
    build = [sys.executable, "-m", "jobs.cli", "build", "--config", CONFIG]
    build += ["--input", str(CORPUS), "--output", str(tmp_path / "out")]
    on_ray = [*build, *ON_RAY]
    try:
        name = "memory.max" if (cgroup / "memory.max").exists() else "memory.limit_in_bytes"
        (cgroup / name).write_text(str(GIB))
        runs = [
            run_in_cgroup(cgroup, command, timeout=120)
            for command in ([*on_ray, "--dry-run"], on_ray, [*build, "--dry-run"], build)
        ]
    finally:
        remove_cgroup(cgroup)
    dry, alone = runs[2:]
    assert dry.returncode == 0 and "without Ray: yes" in dry.stdout, dry.stderr
    assert alone.returncode == 3 and "no Ray: 9 files to read" in alone.stderr, alone.stderr
    for done in runs[:2]:
        assert done.returncode == 2, done.stderr
        last = unstamped(done.stderr.splitlines()[-1])
        assert last.startswith("mdindex build: this machine's Ray instance: a build on ")
        assert "more than the 1 GiB it may use" in last and "give it at least" in last
        assert "Traceback" not in done.stderr


# A one-CPU build's Ray (`start_ray`, `resources.retries: 1`) whose memory monitor kills every
# worker at once (RAY_memory_usage_threshold=0.01), and a task with a reduce's options, by the
# reduce's name: each try leaves a mark in `argv[1]`; what the build says of its error is printed
# last (after Ray's lines, which it forwards to standard output).
MEMORY_KILLED_REDUCE = """
import os, sys, time
import ray
from jobs.build_cli import ending
from jobs.config import JobConfig, ResourcesConfig
from jobs.local_ray import start_ray
from jobs.resources import reduce_task_options

config = JobConfig(input="unused", resources=ResourcesConfig(num_cpus=1, retries=1))
start_ray(config)

@ray.remote
def _reduce_topic(marks):
    open(os.path.join(marks, str(time.monotonic_ns())), "w").close()
    time.sleep(60)

task = _reduce_topic.options(**reduce_task_options(config.resources.index, 1)).remote(sys.argv[1])
try:
    ray.get(task, timeout=60)
except Exception as error:
    print(ending(error).message, flush=True)
os._exit(0)  # not Ray's shutdown at exit: seconds more
"""


def test_a_task_the_memory_monitor_kills_is_tried_as_often_as_the_config_says_then_one_line(
    tmp_path,
):
    """Ray tries a task its memory monitor killed again for ever (its `task_oom_retries`, -1),
    whatever `resources.retries`: a build whose tasks were killed again and again never ended
    ("There are infinite oom retries remaining"). Once they ran out, the build's last line and
    its report's error were Ray's 45-line message, under two tracebacks of it (93-230 lines).
    Now a killed task is tried `resources.retries` times more, and the error is one line naming
    memory, what was killed and what to set (found by use, helper 106)."""
    env = own_ray_environment()
    env.pop("RAY_task_oom_retries", None)
    env.update(RAY_memory_usage_threshold="0.01", RAY_memory_monitor_refresh_ms="100")
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_KILLED_REDUCE, str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    # Ray's words for each kill of a task it will try again, forwarded to the driver's output
    assert "infinite oom retries" not in done.stdout
    assert done.stdout.count("Task _reduce_topic failed due to oom. There are ") == 1
    assert len(list(tmp_path.iterdir())) <= 2  # a try killed before it began leaves none
    line = done.stdout.splitlines()[-1]
    assert line.startswith(
        "mdindex build: the job failed: MemoryKilled: out of memory: Ray's memory monitor killed "
        "a topic's reduce (_reduce_topic, pid "
    )
    assert "(it kills above 1%, RAY_memory_usage_threshold)" in line
    assert line.endswith("or on a machine with more memory")
