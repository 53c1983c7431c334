"""The CPU time a process's cgroups allow it (`jobs.cgroups`): a build without Ray sizes its
model's torch threads to it, as a local Ray instance sizes itself to a container's. The quota read
from v2's and v1's files, then one real build confined by root to one CPU's worth of time."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from environment_support import limit_file, new_cgroup, remove_cgroup, run_in_cgroup

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
