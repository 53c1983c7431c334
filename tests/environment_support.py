"""The test processes' environments: no AWS credentials, a build's child process with a Ray of
its own, file faults injected into every process of a build, `mdindex` with its standard output
on a full disk, a cgroup to confine a child process in. No import of the job here: the library
tests use it too."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

FAULTS = Path(__file__).resolve().parent / "faults"
ROOT = Path(__file__).resolve().parents[1]
FULL_DISK = Path("/dev/full")  # every write fails with ENOSPC
needs_full_disk = pytest.mark.skipif(not FULL_DISK.exists(), reason="needs /dev/full")


def without_aws_credentials(monkeypatch, folder: Path) -> None:
    """No AWS credentials anywhere for this test (a cron line without the AWS environment): none
    in the environment, no shared files (paths under `folder` that do not exist), no instance
    metadata to ask."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(folder / "no-aws-files"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(folder / "no-aws-files"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def own_ray_environment() -> dict[str, str]:
    """This process's environment for a build in a child process with a local Ray of its own
    (without RAY_ADDRESS, which would join the session's)."""
    return {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}


def limit_file(folder: Path, name: str, text: str) -> None:
    """A cgroup limit file `name` holding `text` in `folder` (made where missing), as the kernel
    shows one: a tree of them stands for a machine's cgroups in the tests of reading them."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text + "\n")


def new_cgroup(controller: str, limits: tuple[str, ...]) -> Path | None:
    """A new cgroup of `controller` (v2's, else v1's hierarchy of it) this user may make and
    limit (its folder holds one of the files `limits`), or None (a v2 child gets no limit files
    where its parent's `cgroup.subtree_control` lacks the controller)."""
    for base in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup") / controller):
        folder = base / f"mdindex-test-{os.getpid()}"
        try:
            folder.mkdir()
        except OSError:
            continue
        if any((folder / name).exists() for name in limits):
            return folder
        folder.rmdir()
    return None


def run_in_cgroup(cgroup: Path, command: list[str], timeout: int) -> subprocess.CompletedProcess:
    """`command` (a build) run from the repository root inside `cgroup` from its start (a shell
    that moves itself there, then execs it), offline, with a Ray of its own if it starts one; its
    output as text."""
    env = dict(own_ray_environment(), RAY_AUTH_MODE="disabled", HF_HUB_OFFLINE="1")
    moved = ["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$@"', "sh", *command]
    return subprocess.run(moved, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def remove_cgroup(cgroup: Path) -> None:
    """Remove a test's cgroup, ending first what is still in it (a build's Ray, where a build
    went on)."""
    with contextlib.suppress(OSError):
        for pid in (cgroup / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    for _ in range(50):
        with contextlib.suppress(OSError):
            cgroup.rmdir()
            return
        time.sleep(0.1)


def fault_environment(fault: str, root: str, **settings: str) -> dict[str, str]:
    """`own_ray_environment` with the file fault `fault` of `tests/faults/sitecustomize.py` on
    the paths under `root` in every process of the build; `settings` are its other variables
    (match="...": MDINDEX_FAULT_MATCH, count="...": MDINDEX_FAULT_COUNT)."""
    env = own_ray_environment()
    path = [str(FAULTS), *filter(None, [env.get("PYTHONPATH")])]
    env.update(PYTHONPATH=os.pathsep.join(path), MDINDEX_FAULT=fault, MDINDEX_FAULT_ROOT=root)
    env.update({f"MDINDEX_FAULT_{name.upper()}": value for name, value in settings.items()})
    return env


def paused_program(output: Path, fault: str, count: int, command: list[str]) -> subprocess.Popen:
    """`command` (a build writing `output`) in a child process from the repository root, which
    `fault`, "pause" or "pause-after" (`tests/faults/sitecustomize.py`), holds at the `count`-th
    rename onto its report.json; returned once it waits there, until `OUTPUT.go` exists
    (standard error piped as text). A program that ends first, or never pauses within 60 s, is
    killed and its standard error is the assertion's message."""
    env = fault_environment(fault, str(output), match="_reindex/report.json", count=str(count))
    driver = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while not Path(f"{output}.paused").exists():
        if driver.poll() is not None or time.monotonic() > deadline:
            driver.kill()
            raise AssertionError(driver.communicate()[1][-3000:])
        time.sleep(0.05)
    return driver


def mdindex_onto_full_disk(
    *args: str, timeout: int = 120, stderr_too: bool = False
) -> subprocess.CompletedProcess:
    """`mdindex ARGS > /dev/full` in a child process, from the repository root; standard error
    captured as text, or with `stderr_too` on /dev/full as well (`>> build.log 2>&1` on a full
    disk)."""
    with FULL_DISK.open("w") as full:
        return subprocess.run(
            [sys.executable, "-m", "jobs.cli", *args],
            cwd=ROOT, stdout=full, stderr=full if stderr_too else subprocess.PIPE, text=True,
            timeout=timeout,
        )  # fmt: skip
