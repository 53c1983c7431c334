"""A write fault for a whole build: Python imports this module at start-up in every process whose
PYTHONPATH holds this folder, so a build run that way (`tests/test_jobs_faults.py`) has it in its
driver and in every Ray worker of its own local Ray instance. An audit hook (`sys.addaudithook`)
sees each file operation before the system call and fails or kills it:

- MDINDEX_FAULT=read-only: every write, create, rename, removal and mkdir under MDINDEX_FAULT_ROOT
  fails with EROFS, as on a file system remounted read-only (root included: no permission helps);
- MDINDEX_FAULT=full: creating a file whose path contains MDINDEX_FAULT_MATCH fails with ENOSPC,
  as on a full disk;
- MDINDEX_FAULT=crash: a rename onto a path that contains MDINDEX_FAULT_MATCH kills the process
  with SIGKILL before the rename (a crash at that point; its temporary file stays behind);
- MDINDEX_FAULT=crash-remove: removing a path that contains MDINDEX_FAULT_MATCH kills the process
  with SIGKILL before the removal;
- MDINDEX_FAULT=crash-nth: the MDINDEX_FAULT_COUNT-th file operation of the build's driver
  (`python -m jobs.reindex`; its Ray workers are left alone) that changes a path under the root
  (open for writing, rename, removal, mkdir) kills it with SIGKILL before the operation;
- MDINDEX_FAULT=vanish: opening a path that contains MDINDEX_FAULT_MATCH to read removes it
  first, so the open fails (a file deleted just after it was seen: a build removing a stale
  chunk file as `mdindex serve` answers for it).
- MDINDEX_FAULT=crash-after-report: the first process whose stage record (`jobs.stats.RunStats`)
  counts MDINDEX_FAULT_MATCH (a `stage.counter`, such as `chunk.sources`) is killed with SIGKILL
  just after the run's collector took it, so Ray tries its call again; once in the build for each
  counter named (a marker file beside the root, `ROOT.crashed-<counter>`, says it happened).
- MDINDEX_FAULT=pause: the MDINDEX_FAULT_COUNT-th rename onto a path that contains
  MDINDEX_FAULT_MATCH waits before the rename, from when it creates `ROOT.paused` until a file
  `ROOT.go` exists (a test's second build, or a signal, comes in between);
- MDINDEX_FAULT=pause-after: as pause, but the wait comes after that rename, at the next file
  operation that changes something, of any path or descriptor (open for writing, rename,
  removal, mkdir, truncate).

MDINDEX_FAULT_MATCH may name several strings, separated by `os.pathsep`: a path matches if it
contains one of them.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import time

_FAULT = os.environ.get("MDINDEX_FAULT")
_ROOT = os.environ.get("MDINDEX_FAULT_ROOT", "")
_MATCHES = os.environ.get("MDINDEX_FAULT_MATCH", "").split(os.pathsep)
_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_CHANGES = ("os.rename", "os.remove", "os.rmdir", "os.mkdir", "os.link", "os.symlink")


def _targeted(path: object) -> bool:
    """Whether a path argument lies under the root and contains the match."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        return False  # a file descriptor
    full = os.path.abspath(os.fsdecode(path))
    return full.startswith(_ROOT + os.sep) and any(match in full for match in _MATCHES)


def _fail(code: int, path: object) -> None:
    raise OSError(code, os.strerror(code), os.fsdecode(path))


def _read_only(event: str, args: tuple) -> None:
    if event == "open" and args[2] & _WRITES and _targeted(args[0]):
        _fail(errno.EROFS, args[0])
    if event in _CHANGES:
        for path in args[:2] if event == "os.rename" else args[:1]:
            if _targeted(path):
                _fail(errno.EROFS, path)


def _full(event: str, args: tuple) -> None:
    if event == "open" and args[2] & os.O_CREAT and _targeted(args[0]):
        _fail(errno.ENOSPC, args[0])


def _crash(event: str, args: tuple) -> None:
    if event == "os.rename" and _targeted(args[1]):
        os.kill(os.getpid(), signal.SIGKILL)


def _crash_remove(event: str, args: tuple) -> None:
    if event == "os.remove" and _targeted(args[0]):
        os.kill(os.getpid(), signal.SIGKILL)


_COUNT = int(os.environ.get("MDINDEX_FAULT_COUNT", "0"))
_seen = 0


def _crash_nth(event: str, args: tuple) -> None:
    global _seen
    if not sys.argv[0].endswith(os.path.join("jobs", "reindex.py")):
        return  # not the driver (a Ray worker), or the driver before `-m` has named its module
    if event == "open" and isinstance(args[2], int) and args[2] & _WRITES:
        path = args[0]
    elif event in _CHANGES:
        path = args[1] if event == "os.rename" else args[0]  # a rename changes its target
    else:
        return
    if _targeted(path):
        _seen += 1
        if _seen == _COUNT:
            os.kill(os.getpid(), signal.SIGKILL)


_paused = False


def _pause(event: str, args: tuple) -> None:
    global _seen
    if event == "os.rename" and _targeted(args[1]):
        _seen += 1
        if _seen == _COUNT:
            _wait()


def _pause_after(event: str, args: tuple) -> None:
    global _seen
    if _seen == _COUNT and not _paused and _changes(event, args):
        _wait()
    elif event == "os.rename" and _targeted(args[1]):
        _seen += 1


def _changes(event: str, args: tuple) -> bool:
    """Whether an audit event changes a file or folder (of any path or descriptor)."""
    writes = event == "open" and isinstance(args[2], int) and args[2] & _WRITES
    return bool(writes) or event in (*_CHANGES, "os.truncate")


def _wait() -> None:
    """Create `ROOT.paused`, then wait until `ROOT.go` exists (once in the process)."""
    global _paused
    _paused = True
    os.close(os.open(f"{_ROOT}.paused", os.O_CREAT | os.O_WRONLY))
    while not os.path.exists(f"{_ROOT}.go"):
        time.sleep(0.01)


def _vanish(event: str, args: tuple) -> None:
    if event == "open" and isinstance(args[2], int) and not args[2] & _WRITES:
        if _targeted(args[0]) and os.path.isfile(args[0]):
            os.remove(args[0])


_HOOKS = {
    "read-only": _read_only,
    "full": _full,
    "crash": _crash,
    "crash-remove": _crash_remove,
    "crash-nth": _crash_nth,
    "vanish": _vanish,
    "pause": _pause,
    "pause-after": _pause_after,
}


def _killing_after(report):
    """`jobs.progress.report_stats` that kills its process after a record counting a matched
    counter is reported, the first time in the build for each counter."""

    def report_stats(collector, stats, *key):
        report(collector, stats, *key)
        for counter in _MATCHES:
            stage, name = counter.split(".")
            if getattr(getattr(stats, stage), name):
                try:
                    os.close(os.open(f"{_ROOT}.crashed-{counter}", os.O_CREAT | os.O_EXCL))
                except FileExistsError:
                    continue
                os.kill(os.getpid(), signal.SIGKILL)

    return report_stats


class _ProgressFinder:
    """A meta path finder that has `jobs.progress` imported as usual, then wraps its
    `report_stats` before any stage imports the name."""

    def find_spec(self, name, path, target=None):
        if name != "jobs.progress":
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module.report_stats = _killing_after(module.report_stats)

        spec.loader.exec_module = exec_module
        return spec


if _FAULT in _HOOKS and _ROOT:
    sys.addaudithook(_HOOKS[_FAULT])
elif _FAULT == "crash-after-report" and _ROOT:
    sys.meta_path.insert(0, _ProgressFinder())
