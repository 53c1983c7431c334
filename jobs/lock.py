"""One build per output at a time.

A build holds its output's lock `_reindex/build.lock` from before it reads the previous manifest
until it has written the new one. A second build on that output fails at once with `OutputBusy`
(exit code 75) and writes nothing, not even its report.

- **Local outputs:** an exclusive `fcntl.flock` on the file, which then names its holder (host,
  pid, start: what a second build's error says, and the landmark by which a worker on another
  machine finds that it has another folder at the output's path, `jobs.landmarks`). The kernel
  drops the lock when the process ends, however it ends (SIGKILL included), so no lock outlives
  its build. The file is emptied at the end and stays, unless the build made its folders and
  wrote nothing else there (a build that failed before its first write leaves no trace).
- **S3:** an object created only if absent (a conditional PUT, `If-None-Match: *`) that names its
  holder and an expiry, renewed every `RENEW_S` while the build runs (`If-Match`: only while it is
  still ours; a renewal that fails for another reason is tried again at the next) and deleted at
  the end. A build that was killed leaves it: once its expiry has passed (`LEASE_S` after the last
  renewal) the next build takes it over, again conditionally, so of two builds that find it
  expired one gets it. Expiries are compared across machines' clocks, which `LEASE_S` leaves
  minutes to differ by.
  A conditional write whose answer was lost on the way, so that the client's retry failed its
  condition against the first try's write, is told by the object's body: an object that holds
  the record this build wrote is this build's.
  A build that lost its lock (taken over, or not renewed for `LEASE_S - RENEW_S`, before anyone
  may take it over) stops with `LockLost` (exit code 75) at its next check: before each topic's
  reduce starts and before the driver's finish (`output_lock` yields the check).
- **S3-compatible stores that ignore conditional writes** (they write over the object all the
  same). Each build first creates an object of its own twice with `If-None-Match: *`, writes over it
  with an `If-Match` that no ETag matches, and deletes it. A second create that succeeds is a store
  that ignores `If-None-Match`, where two builds would both take the lock: no lock, a warning. A
  write over it that succeeds is a store that ignores `If-Match`: the lock is taken (its creation
  is still exclusive), warned that renewals and takeovers cannot tell whose it is. A store that
  refuses either header fails the build there, rather than when the lock cannot be renewed.
- **Other object stores** (whose conditional writes fsspec does not reach): no lock, a warning.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

from embedding.files import S3_PROTOCOLS
from embedding.files import missing_bucket as bucket_missing
from jobs.known import KnownFailure
from jobs.storage import OutsideRoot, Storage

LOCK_PATH = "_reindex/build.lock"
LEASE_S = 300.0  # an S3 lock not renewed for this long is a killed build's
RENEW_S = 60.0
NO_ETAG = '"00000000000000000000000000000000"'  # an If-Match that no object's ETag matches
# Filesystems without flock (some network and FUSE mounts): the build goes on unlocked, warned.
NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)
NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)

log = logging.getLogger("mdindex.build")


Check = Callable[[], None]  # raises `LockLost` once the build no longer holds its lock


class OutputBusy(RuntimeError):
    """Another build holds the output's lock (exit code 75: try again later)."""


class LockLost(OutputBusy):
    """This build no longer holds its output's lock: it stops before its next write (exit 75)."""


class OutputNotFound(FileNotFoundError):
    """The output's or the cache's bucket does not exist, or its root is an object (exit code 2:
    nothing was written)."""


class OutputUnwritable(KnownFailure, PermissionError):
    """This build may not write its output (`unwritable`, `local_unwritable`)."""


class StoreRefused(KnownFailure, OSError):
    """The output's store refused a conditional write that the build lock needs (`refused`)."""


def no_bucket(output: Storage, error: FileNotFoundError, role: str = "output") -> OutputNotFound:
    """The error of an output (or the `role` named) whose bucket the store says does not exist
    (`error`: its 404)."""
    return OutputNotFound(f"{role} {output.uri()}: no such bucket ({error})")


def bucket(storage: Storage) -> str:
    """The bucket of an object-store root (a local root's first folder)."""
    return storage.full_path("").split("/", 1)[0]


def check_bucket(output: Storage, role: str = "output") -> None:
    """`OutputNotFound` when `output` (or the `role` named: the cache) lies in an S3 bucket that
    the store says does not exist (what the build's lock finds by its first write), for a dry
    run, which writes nothing, and for a cache, whose entries would each fail."""
    error = missing_bucket(output)
    if error is not None:
        raise no_bucket(output, error, role) from error


def missing_bucket(store: Storage) -> FileNotFoundError | None:
    """The store's 404 to a HEAD of `store`'s S3 bucket where it does not exist; None otherwise
    (`embedding.files.missing_bucket`)."""
    if store.is_local:
        return None
    return bucket_missing(store.filesystem(), store.full_path(""))


@contextlib.contextmanager
def output_lock(output: Storage) -> Iterator[Check]:
    """Hold the output's build lock meanwhile, and yield the check to call before each write that
    another build's could interleave with; `OutputBusy` at once when another build holds the lock,
    `OutsideRoot` when a local output's `_reindex/` leads out of its root."""
    if output.is_local:
        with _file_lock(output):
            yield held  # the kernel's lock is never lost while the process lives
    elif output.protocol in S3_PROTOCOLS:
        ignored = ignored_condition(output)
        if ignored == "If-None-Match":
            log.warning(
                "no build lock on %s: the store ignores conditional writes (If-None-Match), so two "
                "builds would both take it; run one build per output at a time",
                output.uri(),
            )
            yield held
            return
        if ignored == "If-Match":
            log.warning(
                "the store of %s ignores If-Match: the build lock is taken, but its renewals and "
                "the takeover of a stopped build's lock cannot tell whose it is; run one build per "
                "output at a time",
                output.uri(),
            )
        with _object_lock(output) as lease:
            yield lease.check
    else:
        log.warning("no build lock on %s: run one build per output at a time", output.uri())
        yield held


@contextlib.contextmanager
def unless_busy(output: Storage) -> Iterator[OutputBusy | None]:
    """For the write of a build that failed before it held the output's lock (its failed report):
    hold the lock meanwhile and yield None, or yield the `OutputBusy` of the build that holds
    it, whose output (its `unfinished` report) is not this build's to write. Where no lock can
    be taken at all (a store that refuses its conditional writes, an output that cannot be
    written, a `_reindex/` that leads out of the output), no build holds it either: None,
    without a lock."""
    busy = None
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(output_lock(output))
        except OutputBusy as error:
            busy = error
        except Exception:  # noqa: BLE001, S110 - the write says what is wrong, as before a lock
            pass
        yield busy


def ignored_condition(output: Storage) -> str | None:
    """The conditional-write header the store ignores, writing all the same ("If-None-Match" or
    "If-Match"; some S3-compatible stores do), or None when it keeps both: an object of this
    build's own is created twice with `If-None-Match: *`, written over with an `If-Match` that no
    ETag matches, then deleted. A store that refuses either header, or lets this build write
    there but not delete (`remove_probe`), fails the build here; a bucket that does not exist is
    `OutputNotFound`."""
    fs = output.filesystem()
    name = f"{LOCK_PATH}.probe-{socket.gethostname()}-{os.getpid()}-{time.time_ns()}"
    path = output.full_path(name)
    try:
        with contextlib.suppress(FileExistsError):  # our own first try, its answer lost on the way
            with refused(output, "If-None-Match"):
                fs.pipe_file(path, b"", mode="create")
    except FileNotFoundError as error:  # a new object's only 404 (NoSuchBucket)
        raise no_bucket(output, error) from error
    try:
        try:
            fs.pipe_file(path, b"", mode="create")
        except FileExistsError:
            pass
        else:
            return "If-None-Match"
        try:
            with refused(output, "If-Match"):
                fs.pipe_file(path, b"", IfMatch=NO_ETAG)
        except OSError as error:
            if not_ours(error):
                return None
            raise
        return "If-Match"
    finally:
        remove_probe(output, path)


def remove_probe(output: Storage, path: str) -> None:
    """Delete the probe's object at `path`. A store that refuses it (HTTP 403: keys that may
    write under the output but not delete) is `unwritable`: each build would leave its lock to
    block the next for 5 minutes, and its probe, and no replaced file could go. Any other
    failure is let be (an endpoint gone: botocore raises no OSError)."""
    try:
        output.filesystem().rm_file(path)
    except PermissionError as error:
        raise unwritable(output, error) from error
    except Exception:  # noqa: BLE001, S110 - the lock's own writes will say what is wrong
        pass


@contextlib.contextmanager
def refused(output: Storage, header: str) -> Iterator[None]:
    """Name the store and the lock's need in the error of a conditional write (`header`) that
    fails other than by its condition (HTTP 412: `FileExistsError` or `not_ours`)."""
    try:
        yield
    except PermissionError as error:  # refused before any condition: no header's fault
        raise unwritable(output, error) from error
    except OSError as error:
        if isinstance(error, FileExistsError) or not_ours(error):
            raise
        raise StoreRefused(
            f"the store of {output.uri()} refused a conditional write ({header}), which the "
            f"build lock needs: {error}"
        ) from error


def refusal_code(error: PermissionError) -> str:
    """The store's own code for a 403 (`InvalidAccessKeyId`, `AccessDenied`, the default)."""
    response = getattr(error.__cause__, "response", None) or {}
    return response.get("Error", {}).get("Code", "AccessDenied")


def unwritable(output: Storage, error: PermissionError) -> OutputUnwritable:
    """The error of an output this build may not write (HTTP 403: credentials the store refuses,
    or none with the right to write there), named with the store's own code."""
    return OutputUnwritable(
        f"the output {output.uri()} cannot be written ({refusal_code(error)}: {error}): check the "
        "credentials and their permission to write and delete under it"
    )


def local_unwritable(output: Storage, error: OSError) -> OutputUnwritable:
    """The error of a local output this build may not write (a read-only mount, a folder without
    write permission), named as `unwritable` names an object store's."""
    return OutputUnwritable(
        f"the output {output.uri()} cannot be written ({error.strerror}: {error.filename}): "
        "make it writable, or give another output"
    )


def check_writable(output: Storage) -> None:
    """`local_unwritable`'s error when the folder a local output's lock would be made in (its
    nearest folder that exists) may not be written: what the build's lock finds by its first
    write, for a dry run, which writes nothing. An object store tells only by a write."""
    if not output.is_local:
        return
    folder = os.path.dirname(output.confined(LOCK_PATH, "lock"))
    missing = missing_folders(folder)
    folder = os.path.dirname(missing[-1]) if missing else folder
    if os.statvfs(folder).f_flag & os.ST_RDONLY:
        code = errno.EROFS
    elif not os.access(folder, os.W_OK | os.X_OK):
        code = errno.EACCES
    else:
        return
    raise local_unwritable(output, OSError(code, os.strerror(code), folder))


def held() -> None:
    """The check of a lock that cannot be lost (or of no lock): nothing to raise."""


def busy(output: Storage, holder: str, stopped: bool = False) -> OutputBusy:
    """The error for an output another build holds (`holder`: what is known of it; `stopped`:
    a build of this machine that no longer runs, whose S3 lock has not expired yet)."""
    if stopped:
        return OutputBusy(
            f"the output {output.uri()} is locked by a build that no longer runs ({holder})"
        )
    return OutputBusy(
        f"another build is running on the output {output.uri()} ({holder}); run one build per "
        "output at a time, or try again when it has finished"
    )


def _still_at(descriptor: int, path: str) -> bool:
    """Whether the file open at `descriptor` is still the one at `path`: a lock taken on a file
    its last holder had just unlinked locks nothing another build can see (it would lock the
    new file at the path as well)."""
    try:
        there = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(descriptor)
    return (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)


def _open_lock_file(path: str) -> int:
    """The lock file opened to read and write (made when missing); `OutsideRoot` for a symbolic
    link or anything else that is not a plain file there, which the lock's writes would go
    through (a link's target emptied and given the holder's record)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK  # a FIFO: no wait
    try:
        descriptor = os.open(path, flags, 0o644)
    except OSError as error:
        if error.errno != errno.ELOOP:  # a symbolic link
            raise
        descriptor = None
    if descriptor is not None and stat.S_ISREG(os.fstat(descriptor).st_mode):
        return descriptor
    if descriptor is not None:
        os.close(descriptor)
    raise OutsideRoot(
        f"refusing to lock {path}: it is a symbolic link or not a plain file; a build writes its "
        "lock file there, so remove it"
    )


@contextlib.contextmanager
def _file_lock(output: Storage) -> Iterator[None]:
    """`flock` on a local output's lock file (module docstring)."""
    path = output.confined(LOCK_PATH, "lock")
    folder = os.path.dirname(path)
    made = missing_folders(folder)
    try:
        os.makedirs(folder, exist_ok=True)
        descriptor = _open_lock_file(path)
    except OSError as error:
        if error.errno in NOT_WRITABLE:
            raise local_unwritable(output, error) from error
        raise
    taken = False
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise busy(output, holds(_json_record(os.pread(descriptor, 4096, 0)), path)) from None
        except OSError as error:
            if error.errno not in NO_LOCKS:
                raise
            log.warning("no build lock on %s (%s): run one build per output at a time", path, error)
        if not _still_at(descriptor, path):  # the build that held it removed it as it ended
            raise busy(output, f"the build that held {path} was ending, and removed it")
        taken = True
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, holder_record(time.time()), 0)
        yield
    finally:
        if taken:  # held by no one now, it names no one
            os.ftruncate(descriptor, 0)
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


def this_process() -> dict:
    """This process: its host and pid."""
    return {"host": socket.gethostname(), "pid": os.getpid()}


def holder(started: float) -> dict:
    """This process as a build begun at `started` (epoch seconds): its host, pid and start."""
    return {**this_process(), "started": started}


def holder_record(started: float, expires: float | None = None) -> bytes:
    """A lock's body: who holds it, since when, and (an S3 lock's) until when unless renewed."""
    record = holder(started)
    if expires is not None:
        record["expires"] = expires
    return json.dumps(record, sort_keys=True).encode()


def _json_record(body: bytes) -> dict:
    """A lock's record, or {} when its body is none (damaged, or not yet written)."""
    try:
        record = json.loads(body)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def describe_holder(record: dict) -> str:
    """A holder record in words ("since an unknown time" when its start is not a time; "another
    build" when it names no process)."""
    if "pid" not in record:
        return "another build"
    try:
        started = utc(record.get("started"))
    except (TypeError, ValueError, OverflowError, OSError):
        started = "an unknown time"
    return f"the build of pid {record.get('pid')} on {record.get('host')}, since {started}"


def holds(record: dict, where: str) -> str:
    """A lock's holder in words with the lock it holds (`where`: its path or URI)."""
    return f"{describe_holder(record)}, holds {where}"


def live_holder(record: dict, where: str) -> str | None:
    """An S3 lock's record (at `where`) in words while it has not expired; None once it has, or
    where it is damaged (both taken over by the next build)."""
    expires = record.get("expires")
    if not (isinstance(expires, int | float) and expires > time.time()):
        return None
    if _gone_from_this_machine(record):
        # "another build is running … try again when it has finished" was all a re-run after a
        # `kill -9` said: no word that nothing runs, or that waiting for the expiry is the way
        return (
            f"{holds(record, where)} until {utc(expires)}, but no process {record['pid']} runs "
            f"on this machine ({record['host']}): that build was stopped where it could not "
            f"release it (kill -9, out of memory); build again after {utc(expires)}, when it "
            "expires"
        )
    return f"{holds(record, where)} until {utc(expires)} unless it renews it"


def _gone_from_this_machine(record: dict) -> bool:
    """Whether a lock record names a process of this machine (by its host name) that no longer
    runs: a build killed where it could not release its lock."""
    pid = record.get("pid")
    if record.get("host") != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process: it runs
        return False
    return False


def lock_holder(output: Storage) -> str | None:
    """Who holds the output's build lock, in words, read without taking or changing it: what a
    build would find there now (`OutputBusy`, exit 75), for a dry run; None where no build holds
    it, and for stores without a lock. An S3 lock holds until it expires (`live_holder`: a killed
    build's for up to `LEASE_S`), a local one while its process lives (`file_holder`)."""
    if output.is_local:
        return file_holder(output)
    if output.protocol not in S3_PROTOCOLS:
        return None
    try:
        body = output.filesystem().cat_file(output.full_path(LOCK_PATH))
    except FileNotFoundError:
        return None
    return live_holder(_json_record(body), output.uri(LOCK_PATH))


def file_holder(output: Storage) -> str | None:
    """A local output's lock file in words while a process holds its `flock`, as the kernel's
    table of locks (/proc/locks) tells without a lock taken; None otherwise, and where the system
    has no such table (or a network filesystem's other machines hold it: they are not in it)."""
    path = output.confined(LOCK_PATH, "lock")
    try:
        there = os.stat(path, follow_symlinks=False)
        with open("/proc/locks") as table:
            locks = table.read()
    except OSError:
        return None
    key = f"{os.major(there.st_dev):02x}:{os.minor(there.st_dev):02x}:{there.st_ino}"
    # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:2550358 0 EOF" (a process waiting for it: "1: -> …")
    if not re.search(rf"^\d+: FLOCK +\S+ +\S+ +\S+ +{key} ", locks, re.MULTILINE):
        return None
    try:
        with open(path, "rb") as held:
            record = _json_record(held.read(4096))
    except OSError:
        record = {}
    return holds(record, path)


def utc(seconds: float) -> str:
    """An epoch time as an ISO 8601 UTC time to the second."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


@contextlib.contextmanager
def _object_lock(output: Storage) -> Iterator[Lease]:
    """The S3 lock object (module docstring), renewed meanwhile."""
    lease = Lease(output, time.time())
    stop = threading.Event()
    renewer = threading.Thread(target=lease.renew, args=(stop,), name="mdindex-lock", daemon=True)
    renewer.start()
    try:
        yield lease
    finally:
        stop.set()
        renewer.join()
        lease.release()


class Lease:
    """The S3 lock object of a build that holds it: taken at construction (`OutputBusy` when a
    live build holds it), renewed while it is still ours, deleted at the end if still ours.
    `renewed` is when its last record was made (its expiry is `LEASE_S` after), `lost` why it is
    no longer this build's, once it is not."""

    def __init__(self, output: Storage, started: float):
        self.output = output
        self.fs = output.filesystem()
        self.path = output.full_path(LOCK_PATH)
        self.started = started
        self.renewed = time.time()
        self.etag = self._take()
        self.lost: str | None = None

    def _record(self) -> bytes:
        return holder_record(self.started, self.renewed + LEASE_S)

    def _take(self) -> str:
        """Create the lock object, or take over an expired one; its ETag."""
        mine = self._record()
        try:
            return self.fs.pipe_file(self.path, mine, mode="create")["ETag"]
        except FileExistsError:
            pass
        try:
            etag, body = self._read()
        except FileNotFoundError:  # released meanwhile: its build has finished
            return self._take()
        if body == mine:  # our own create: its answer was lost on the way (`_landed`)
            return etag
        where = self.output.uri(LOCK_PATH)
        record = _json_record(body)
        holder = live_holder(record, where)
        if holder is not None:
            raise busy(self.output, holder, stopped=_gone_from_this_machine(record))
        log.warning("taking over the build lock %s: it expired (its build was stopped)", where)
        try:
            return self.fs.pipe_file(self.path, mine, IfMatch=etag)["ETag"]
        except OSError:
            landed = self._landed(mine)
            if landed is None:  # another build took it over first
                raise busy(self.output, f"another build took over the expired {where}") from None
            return landed

    def _landed(self, record: bytes) -> str | None:
        """The lock object's ETag if it holds `record`, which this build's conditional write
        failed to make: that write's first try landed, its answer was lost on the way, and the
        client's retry then failed its condition against it. None when it holds another record
        or is gone."""
        try:
            etag, body = self._read()
        except FileNotFoundError:
            return None
        return etag if body == record else None

    def _read(self) -> tuple[str, bytes]:
        """The lock object's ETag and body, as the store has them now."""
        return self.fs.info(self.path, refresh=True)["ETag"], self.fs.cat_file(self.path)

    def renew(self, stop: threading.Event) -> None:
        """Push the expiry on every `RENEW_S` until `stop`, while the object is still ours."""
        while not stop.wait(RENEW_S) and self.renew_once():
            pass

    def renew_once(self) -> bool:
        """Push the expiry on once; False once the object is no longer ours. A renewal that
        fails otherwise (the endpoint, the network) is logged and left to the next one."""
        now = time.time()
        try:
            etag = self._renewal(holder_record(self.started, now + LEASE_S))
        except Exception as error:  # noqa: BLE001 - the renewer must outlive any failure
            log.warning(
                "could not renew the build lock %s (%s: %s); trying again in %.0f s",
                self.path,
                type(error).__name__,
                error,
                RENEW_S,
            )
            return True
        if etag is None:
            self.lost = "another build has taken it over, or deleted it"
            log.error("the build lock %s is no longer ours: %s", self.path, self.lost)
            return False
        self.etag, self.renewed = etag, now
        return True

    def _renewal(self, record: bytes) -> str | None:
        """Write `record` over the lock object if it is still ours: its new ETag, or None when it
        is no longer ours (changed or gone, and not by this write's own first try).

        An earlier renewal can have landed with its answer and every retry's lost (the client
        gave up with a timeout, not a failed condition), leaving an ETag this lease never saw on
        a record of this build's own: the write is made again over that one."""
        written = self._write_if_still(record, self.etag)
        if written is not None:
            return written
        try:
            etag, body = self._read()
        except FileNotFoundError:
            return None
        if body == record:  # this write's own first try landed (`_landed`)
            return etag
        if not self._ours(body):
            return None
        return self._write_if_still(record, etag) or self._landed(record)

    def _write_if_still(self, record: bytes, etag: str) -> str | None:
        """Write `record` over the lock object if its ETag is still `etag`: the new ETag, or None
        when the condition failed (the object changed or went); any other failure raises."""
        try:
            return self.fs.pipe_file(self.path, record, IfMatch=etag)["ETag"]
        except Exception as error:
            if not not_ours(error):
                raise
        return None

    def _ours(self, body: bytes) -> bool:
        """Whether a lock record is one this build made (its host, process and start)."""
        record = _json_record(body)
        return all(record.get(key) == value for key, value in holder(self.started).items())

    def check(self) -> None:
        """`LockLost` once the object is no longer ours, or its last renewal is so old that it
        could expire before the next one (`RENEW_S` to spare)."""
        if self.lost is None and time.time() > self.renewed + LEASE_S - RENEW_S:
            self.lost = f"it could not be renewed since {utc(self.renewed)}"
        if self.lost is not None:
            raise LockLost(
                f"this build lost its lock on the output {self.output.uri()}: {self.lost}. "
                "It stopped before its next write (every topic it switched is whole); run it "
                "again when no other build is running on the output"
            )

    def release(self) -> None:
        """Delete the lock object if it is still ours. An endpoint that cannot be reached (botocore
        raises no OSError for it) is a warning: the lock expires by itself, and the build that
        released it had finished (it failed with exit 1 and overwrote its report)."""
        try:
            if self.fs.info(self.path, refresh=True)["ETag"] == self.etag:
                self.fs.rm_file(self.path)
        except FileNotFoundError:
            pass
        except Exception as error:  # noqa: BLE001 - a release that fails leaves an expiring lock
            log.warning(
                "could not release the build lock %s (%s: %s); it expires by itself within %.0f s",
                self.path, type(error).__name__, error, LEASE_S,
            )  # fmt: skip


def not_ours(error: BaseException) -> bool:
    """Whether a conditional renewal failed because the object changed or went (HTTP 412, 404),
    rather than on the way there."""
    if isinstance(error, FileNotFoundError):
        return True
    response = getattr(error.__cause__, "response", None) or {}
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status == 412 or response.get("Error", {}).get("Code") == "PreconditionFailed"
