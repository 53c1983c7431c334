"""One build per output at a time.

A build holds an exclusive lock on its local output's `_reindex/build.lock` from before it reads
the previous manifest until it has written the new one (`fcntl.flock`). The kernel drops the lock
when the process ends, however it ends (SIGKILL included), so no lock outlives its build and there
is nothing to clean up; the file itself stays, empty, unless the build made its folders and wrote
nothing else there (a build that failed before its first write leaves no trace). A second build on
that output fails at once with `OutputBusy` (exit code 75) and writes nothing, not even its report.
Object stores offer no such lock: on S3 one build per output is the scheduler's to ensure (README,
Known limitations).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
from collections.abc import Iterator

from jobs.storage import Storage

LOCK_PATH = "_reindex/build.lock"
# Filesystems without flock (some network and FUSE mounts): the build goes on unlocked, warned.
NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)

log = logging.getLogger("mdindex.build")


class OutputBusy(RuntimeError):
    """Another build holds the output's lock (exit code 75: try again later)."""


@contextlib.contextmanager
def output_lock(output: Storage) -> Iterator[None]:
    """Hold the output's build lock meanwhile (local outputs; elsewhere nothing); `OutputBusy`
    at once when another build holds it, `OutsideRoot` when `_reindex/` leads out of the root."""
    if not output.is_local:
        yield
        return
    path = output.confined(LOCK_PATH, "lock")
    folder = os.path.dirname(path)
    made = missing_folders(folder)
    os.makedirs(folder, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputBusy(
                f"another build is running on the output {output.uri()} (it holds {path}); "
                "run one build per output at a time, or try again when it has finished"
            ) from None
        except OSError as error:
            if error.errno not in NO_LOCKS:
                raise
            log.warning("no build lock on %s (%s): run one build per output at a time", path, error)
        yield
    finally:
        if made and os.listdir(folder) == [os.path.basename(path)]:
            os.unlink(path)  # before the lock goes, so no other build locks a file being removed
            for empty in made:
                with contextlib.suppress(OSError):  # not empty: the build wrote there after all
                    os.rmdir(empty)
        os.close(descriptor)  # releases the lock


def missing_folders(folder: str) -> list[str]:
    """`folder` and those of its ancestors that do not exist yet, deepest first."""
    missing = []
    while not os.path.isdir(folder) and folder != os.path.dirname(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    return missing
