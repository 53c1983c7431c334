"""Local folders on a Ray cluster of several machines.

A local input or output is a path on the driver's machine. A worker on another machine opens the
same path on its own disk, unless every node mounts one filesystem there (NFS, EFS, ...). Without
a check, the topics would be written to disks no one reads (the driver's manifest naming them all)
and sources missing there reported as unreadable. So the driver names what its folders hold
(`landmarks`), and each read-and-chunk task and topic reduce checks them before its first read
or write (`check_landmarks`, once per process): a machine that sees something else stops the
build with `NotTheDriversFolder`. Object stores are the same everywhere and need no landmark.
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
from dataclasses import dataclass

from jobs.known import KnownFailure
from jobs.lock import LOCK_PATH
from jobs.storage import Storage


@dataclass(frozen=True)
class Landmark:
    """A local folder of the build and, when `relpath` is set, the SHA-256 of the file there as
    the driver read it (without one, the folder only has to exist)."""

    folder: str
    relpath: str = ""
    digest: str = ""


class NotTheDriversFolder(KnownFailure, RuntimeError):
    """A worker's machine has another folder, or none, at the path of a local input or output."""


def landmarks(source: Storage, output: Storage) -> tuple[Landmark, ...]:
    """What the driver's local folders hold while its build runs: the output's lock file, which
    names this build (`jobs.lock`), and the input folder, unless it is the output."""
    marks = []
    if output.is_local:
        folder = output.full_path("")
        marks.append(Landmark(folder, LOCK_PATH, _file_digest(folder, LOCK_PATH)))
    in_place = output.is_local and source.is_local and source.real_root == output.real_root
    if source.is_local and not in_place:
        marks.append(Landmark(source.full_path("")))
    return tuple(marks)


@functools.lru_cache(maxsize=8)
def check_landmarks(marks: tuple[Landmark, ...]) -> None:
    """Raise `NotTheDriversFolder` unless this machine's folders hold what the driver's did (a
    check that passed is not made again in this process)."""
    for mark in marks:
        if not mark.relpath:
            found = os.path.isdir(mark.folder)
        else:
            try:
                found = _file_digest(mark.folder, mark.relpath) == mark.digest
            except OSError:
                found = False
        if not found:
            raise NotTheDriversFolder(_message(mark))


def _message(mark: Landmark) -> str:
    what = f"its {mark.relpath} does not name this build" if mark.relpath else "it is not there"
    return (
        f"{mark.folder} is not the driver's folder on the machine of this Ray worker "
        f"({socket.gethostname()}, pid {os.getpid()}): {what}. On a Ray cluster of several "
        "machines a local input or output must be a filesystem that every node mounts at the same "
        "path (NFS, EFS, ...); otherwise use an s3:// URI"
        + (" (or another build took the output meanwhile)" if mark.relpath else "")
    )


def _file_digest(folder: str, relpath: str) -> str:
    """The SHA-256 of a file's bytes, read as the driver and the workers read it."""
    with open(os.path.join(folder, relpath), "rb") as file:
        return hashlib.sha256(file.read()).hexdigest()
