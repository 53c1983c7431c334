"""What the cgroups this process runs in allow it: memory and CPU time.

A container sees its own cgroup at the root of the hierarchy (Docker, Kubernetes, GitLab's
runners), and Ray reads its limits there; a process confined from outside (`systemd-run --scope
-p MemoryMax=2G -p CPUQuota=200%`, a cgroup made by hand) sees them only under its own cgroup's
path (`/proc/self/cgroup`), which Ray never reads. Both are read here, v2's one hierarchy and v1's
controllers, and the smallest limit of a cgroup and those above it holds."""

from __future__ import annotations

import os

# Where the kernel shows cgroups: v2's one hierarchy, or v1's folder of each controller.
CGROUP_ROOT = "/sys/fs/cgroup"


def cgroup_folders(
    controller: str, root: str = CGROUP_ROOT, self_cgroup: str = "/proc/self/cgroup"
) -> set[str]:
    """The folders where a limit on this process may be: a container's own at the root (v2's, and
    v1's `controller` folder), and those of the cgroups this process runs in and above them, in
    v2's hierarchy and in v1's of `controller`."""
    try:
        with open(self_cgroup, encoding="utf-8") as lines:
            entries = [line.rstrip("\n").split(":", 2) for line in lines]
    except OSError:
        entries = []
    folders = {root, os.path.join(root, controller)}
    for entry in entries:
        if len(entry) != 3:
            continue
        _, controllers, path = entry
        if controllers == "":  # v2
            base = root
        elif controller in controllers.split(","):
            base = os.path.join(root, controller)
        else:
            continue
        parts = [part for part in path.split("/") if part]
        folders.update(os.path.join(base, *parts[:depth]) for depth in range(len(parts) + 1))
    return folders


def memory_limit(root: str = CGROUP_ROOT, self_cgroup: str = "/proc/self/cgroup") -> int | None:
    """The memory limit, in bytes, of the cgroup this process runs in (v2's `memory.max`, v1's
    `memory.limit_in_bytes`), or of one above it, the smallest; None where there is none, or none
    below the machine's RAM. (Ray took the machine's RAM for its object store and its memory
    monitor under a limit set from outside.)"""
    limits = []
    for folder in cgroup_folders("memory", root, self_cgroup):
        for name in ("memory.max", "memory.limit_in_bytes"):
            text = _read(os.path.join(folder, name))
            if text.isdigit():
                limits.append(int(text))
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    least = min(limits, default=ram)
    return least if least < ram else None


def cpu_quota(root: str = CGROUP_ROOT, self_cgroup: str = "/proc/self/cgroup") -> float | None:
    """The CPUs' worth of time the cgroup this process runs in may use (v2's `cpu.max`, v1's
    `cpu.cfs_quota_us` over `cpu.cfs_period_us`), or one above it, the smallest; None where
    there is no quota."""
    quotas = []
    for folder in cgroup_folders("cpu", root, self_cgroup):
        v2 = _read(os.path.join(folder, "cpu.max")).split()
        if len(v2) == 2 and v2[0].isdigit() and v2[1].isdigit() and int(v2[1]) > 0:
            quotas.append(int(v2[0]) / int(v2[1]))
        quota = _read(os.path.join(folder, "cpu.cfs_quota_us"))
        period = _read(os.path.join(folder, "cpu.cfs_period_us"))
        if quota.isdigit() and period.isdigit() and int(quota) > 0 and int(period) > 0:
            quotas.append(int(quota) / int(period))
    return min(quotas, default=None)


def usable_cpus() -> int:
    """The CPUs this process may keep busy: those it may run on (its affinity, `taskset`), at
    most its cgroups' quota, truncated as Ray truncates a container's (at least 1)."""
    if hasattr(os, "sched_getaffinity"):
        cpus = len(os.sched_getaffinity(0))
    else:
        cpus = os.cpu_count() or 1
    quota = cpu_quota()
    return cpus if quota is None else max(1, min(cpus, int(quota)))


def _read(path: str) -> str:
    """A cgroup file's text, stripped; empty where it cannot be read."""
    try:
        with open(path, encoding="ascii") as file:
            return file.read().strip()
    except (OSError, UnicodeDecodeError):
        return ""
