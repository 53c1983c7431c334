"""The CPU time a process's cgroups allow it (`jobs.cgroups`): a build without Ray sizes its
model's torch threads to it, and a local Ray instance its CPUs. The quota read
from v2's and v1's files, then one real build confined by root to one CPU's worth of time; and a
local Ray instance started with the CPUs a program pinned to one of them may use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from environment_support import (
    limit_file,
    new_cgroup,
    own_ray_environment,
    remove_cgroup,
    run_in_cgroup,
)

from jobs.cgroups import cpu_quota

ROOT = Path(__file__).resolve().parent.parent
CONFIG = str(ROOT / "configs" / "local.yaml")


def test_the_quota_is_the_smallest_of_the_process_cgroup_and_those_above_it(tmp_path):
    """`docker run --cpus=2` shows the container's own quota at the root; `systemd-run -p
    CPUQuota=150%` and a cgroup made by hand only under the process's path."""
    root = tmp_path / "cgroup"
    v2 = tmp_path / "v2"
    v2.write_text("0::/ci/job\n")
    limit_file(root, "cpu.max", "max 100000")
    assert cpu_quota(str(root), str(v2)) is None  # no quota
    limit_file(root / "ci" / "job", "cpu.max", "150000 100000")
    assert cpu_quota(str(root), str(v2)) == 1.5
    limit_file(root / "ci", "cpu.max", "50000 100000")  # a parent's smaller quota holds
    assert cpu_quota(str(root), str(v2)) == 0.5

    v1 = tmp_path / "v1"
    v1.write_text("4:memory:/other\n1:cpu,cpuacct:/runner\n0::/\n")
    limit_file(root / "cpu" / "runner", "cpu.cfs_quota_us", "-1")  # unlimited
    limit_file(root / "cpu" / "runner", "cpu.cfs_period_us", "100000")
    assert cpu_quota(str(root), str(v1)) is None  # and v2's root says "max"
    assert cpu_quota(str(tmp_path / "elsewhere"), str(v1)) is None  # no such files: no quota
    v1root = tmp_path / "v1root"
    limit_file(v1root / "cpu" / "runner", "cpu.cfs_quota_us", "300000")
    limit_file(v1root / "cpu" / "runner", "cpu.cfs_period_us", "100000")
    assert cpu_quota(str(v1root), str(v1)) == 3.0

    # a container's own cgroup at the root, its /proc/self/cgroup saying "/"
    container = tmp_path / "container"
    limit_file(container, "cpu.max", "200000 100000")
    (tmp_path / "inside").write_text("0::/\n")
    assert cpu_quota(str(container), str(tmp_path / "inside")) == 2.0


def test_a_build_without_ray_in_a_cgroup_of_one_cpu_runs_one_torch_thread(tmp_path):
    """A one-page build (without Ray, the default for it) in a cgroup whose quota is one CPU's
    time: its model runs on one torch thread, not on one per CPU of the machine, which the quota
    would throttle (`os.cpu_count()` counts the machine)."""
    cgroup = new_cgroup("cpu", ("cpu.max", "cpu.cfs_quota_us")) if os.geteuid() == 0 else None
    if cgroup is None:
        pytest.skip("needs root and a cpu cgroup to confine a build in")
    docs = tmp_path / "docs" / "t"
    docs.mkdir(parents=True)
    (docs / "a.md").write_text("# A\n\nHow a request is retried after a timeout.\n")
    build = [sys.executable, "-m", "jobs.reindex", "--config", CONFIG]
    build += ["--input", str(docs.parent), "--output", str(tmp_path / "out")]
    try:
        if (cgroup / "cpu.max").exists():
            (cgroup / "cpu.max").write_text("100000 100000")
        else:
            (cgroup / "cpu.cfs_period_us").write_text("100000")
            (cgroup / "cpu.cfs_quota_us").write_text("100000")
        done = run_in_cgroup(cgroup, build, timeout=300)
    finally:
        remove_cgroup(cgroup)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the model on 1 torch thread" in done.stderr, done.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "_reindex" / "report.json").read_text())
    pool = report["timings"]["embed_pool"]
    assert (pool["in_driver"], pool["threads"]) == (True, 1)
    assert report["timings"]["cpus"] == 1


# A program on one CPU of this machine (`taskset -c N`, as a Slurm job's or a pod's cpuset puts
# it), whose Ray processes inherit its affinity: the local node its dry run expects, and the one
# its build's `start_ray` starts (on Ray: `in_process_sources` null).
ON_ONE_CPU = """
import json, os, sys
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
import ray
from jobs.config import load_config
from jobs.local_fit import expected_local_node
from jobs.local_ray import start_ray
config = load_config(
    sys.argv[1], overrides={"input": sys.argv[2]}, settings=["resources.in_process_sources=null"]
)
expected = expected_local_node(config)["CPU"]
start_ray(config)
print(json.dumps({"expected": expected, "started": ray.cluster_resources()["CPU"]}))
ray.shutdown()
"""


def test_a_local_ray_instance_has_the_cpus_the_process_may_run_on(tmp_path):
    """Ray counts every CPU of the machine (a container's root quota aside): a build pinned to one
    CPU started an instance of all of them, as many chunk tasks at once and an embedding actor
    per CPU on that one. The instance and the dry run's expectation are the CPUs it may use."""
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs to pin a program to one of them")
    done = subprocess.run(
        [sys.executable, "-c", ON_ONE_CPU, CONFIG, str(tmp_path)],
        cwd=ROOT,
        env=own_ray_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"expected": 1.0, "started": 1.0}
