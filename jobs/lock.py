"""One build per output at a time.

A build holds its output's lock `_reindex/build.lock` from before it reads the previous manifest
until it has written the new one. A second build on that output fails at once with `OutputBusy`
(exit code 75) and writes nothing, not even its report.

- **Local outputs:** an exclusive `fcntl.flock` on the (empty) file. The kernel drops it when the
  process ends, however it ends (SIGKILL included), so no lock outlives its build. The file stays,
  unless the build made its folders and wrote nothing else there (a build that failed before its
  first write leaves no trace).
- **S3:** an object created only if absent (a conditional PUT, `If-None-Match: *`) that names its
  holder and an expiry, renewed every `RENEW_S` while the build runs (`If-Match`: only while it is
  still ours) and deleted at the end. A build that was killed leaves it: once its expiry has passed
  (`LEASE_S` after the last renewal) the next build takes it over, again conditionally, so of two
  builds that find it expired one gets it. Expiries are compared across machines' clocks, which
  `LEASE_S` leaves minutes to differ by.
- **Other object stores** (whose conditional writes fsspec does not reach): no lock, a warning.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime

from jobs.storage import Storage

LOCK_PATH = "_reindex/build.lock"
LEASE_S = 300.0  # an S3 lock not renewed for this long is a killed build's
RENEW_S = 60.0
# Filesystems without flock (some network and FUSE mounts): the build goes on unlocked, warned.
NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)

log = logging.getLogger("mdindex.build")


class OutputBusy(RuntimeError):
    """Another build holds the output's lock (exit code 75: try again later)."""


@contextlib.contextmanager
def output_lock(output: Storage) -> Iterator[None]:
    """Hold the output's build lock meanwhile; `OutputBusy` at once when another build holds it,
    `OutsideRoot` when a local output's `_reindex/` leads out of its root."""
    if output.is_local:
        with _file_lock(output):
            yield
    elif output.protocol in ("s3", "s3a"):
        with _object_lock(output):
            yield
    else:
        log.warning("no build lock on %s: run one build per output at a time", output.uri())
        yield


def busy(output: Storage, holder: str) -> OutputBusy:
    """The error for an output another build holds (`holder`: what is known of it)."""
    return OutputBusy(
        f"another build is running on the output {output.uri()} ({holder}); run one build per "
        "output at a time, or try again when it has finished"
    )


@contextlib.contextmanager
def _file_lock(output: Storage) -> Iterator[None]:
    """`flock` on a local output's lock file (module docstring)."""
    path = output.confined(LOCK_PATH, "lock")
    folder = os.path.dirname(path)
    made = missing_folders(folder)
    os.makedirs(folder, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise busy(output, f"it holds {path}") from None
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


def holder_record(started: float, now: float) -> bytes:
    """The S3 lock object's body: who holds it, since when, and until when unless renewed."""
    return json.dumps(
        {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": started,
            "expires": now + LEASE_S,
        },
        sort_keys=True,
    ).encode()


def describe_holder(record: dict) -> str:
    """A holder record in words."""
    started = datetime.fromtimestamp(record.get("started", 0.0), UTC).isoformat(timespec="seconds")
    return f"the build of pid {record.get('pid')} on {record.get('host')}, since {started}"


@contextlib.contextmanager
def _object_lock(output: Storage) -> Iterator[None]:
    """The S3 lock object (module docstring)."""
    lease = Lease(output, time.time())
    stop = threading.Event()
    renewer = threading.Thread(target=lease.renew, args=(stop,), name="mdindex-lock", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()
        lease.release()


class Lease:
    """The S3 lock object of a build that holds it: taken at construction (`OutputBusy` when a
    live build holds it), renewed while it is still ours, deleted at the end if still ours."""

    def __init__(self, output: Storage, started: float):
        self.output = output
        self.fs = output.filesystem()
        self.path = output.full_path(LOCK_PATH)
        self.started = started
        self.etag = self._take()

    def _record(self) -> bytes:
        return holder_record(self.started, time.time())

    def _take(self) -> str:
        """Create the lock object, or take over an expired one; its ETag."""
        try:
            return self.fs.pipe_file(self.path, self._record(), mode="create")["ETag"]
        except FileExistsError:
            pass
        try:
            etag = self.fs.info(self.path, refresh=True)["ETag"]
            record = json.loads(self.fs.cat_file(self.path))
        except FileNotFoundError:  # released meanwhile: its build has finished
            return self._take()
        except ValueError:  # a damaged record is taken over like an expired one
            record = {}
        where = self.output.uri(LOCK_PATH)
        if record.get("expires", 0.0) > time.time():
            raise busy(self.output, f"{describe_holder(record)}, holds {where}")
        log.warning("taking over the build lock %s: it expired (its build was stopped)", where)
        try:
            return self.fs.pipe_file(self.path, self._record(), IfMatch=etag)["ETag"]
        except OSError:  # another build took it over first
            raise busy(self.output, f"another build took over the expired {where}") from None

    def renew(self, stop: threading.Event) -> None:
        """Push the expiry on every `RENEW_S` until `stop`, while the object is still ours."""
        while not stop.wait(RENEW_S):
            try:
                self.etag = self.fs.pipe_file(self.path, self._record(), IfMatch=self.etag)["ETag"]
            except OSError as error:
                log.error("could not renew the build lock %s: %s", self.path, error)
                return

    def release(self) -> None:
        """Delete the lock object if it is still ours (an endpoint gone: it expires by itself)."""
        with contextlib.suppress(OSError):
            if self.fs.info(self.path, refresh=True)["ETag"] == self.etag:
                self.fs.rm_file(self.path)
