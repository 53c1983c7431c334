"""Local folders and third-party classes on a Ray cluster of several machines.

A local input or output is a path on the driver's machine. A worker on another machine opens the
same path on its own disk, unless every node mounts one filesystem there (NFS, EFS, ...). Without
a check, the topics would be written to disks no one reads (the driver's manifest naming them all)
and sources missing there reported as unreadable. So the driver names what its folders hold
(`landmarks`), and each read-and-chunk task and topic reduce checks them before its first read
or write (`check_landmarks`, once per process): a machine that sees something else stops the
build with `NotTheDriversFolder`. Object stores are the same everywhere and need no landmark.

A third-party chunking strategy or embedding backend the config names (`Plugin`,
`config_plugins`) is a landmark too: each Ray worker imports it itself, and a node without its
package failed every chunk task on "unknown chunking strategy". The same check finds it
(`PluginNotOnNode`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
from dataclasses import dataclass
from importlib.metadata import entry_points
from importlib.util import find_spec
from typing import TYPE_CHECKING

from jobs.known import KnownFailure
from jobs.lock import LOCK_PATH
from jobs.storage import Storage

if TYPE_CHECKING:
    from jobs.config import JobConfig


@dataclass(frozen=True)
class Landmark:
    """A local folder of the build and, when `relpath` is set, the SHA-256 of the file there as
    the driver read it (without one, the folder only has to exist)."""

    folder: str
    relpath: str = ""
    digest: str = ""


STRATEGY, BACKEND = "chunking strategy", "embedding backend"


@dataclass(frozen=True)
class Plugin:
    """A third-party class the config names (`plugins.named_class`), found by the driver."""

    kind: str  # STRATEGY or BACKEND
    name: str  # as the config names it: an entry point's name or `package.module:Class`


class NotTheDriversFolder(KnownFailure, RuntimeError):
    """A worker's machine has another folder, or none, at the path of a local input or output."""


class PluginNotOnNode(KnownFailure, ValueError):
    """A node of the joined cluster cannot import a third-party class the config names, which
    the driver found (a config error for this cluster)."""


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


def config_plugins(config: JobConfig) -> tuple[Plugin, ...]:
    """The third-party chunking strategy and embedding backend the config names, if any."""
    from chunking.strategy import strategy_names
    from embedding.models import backend_class

    found = []
    if config.chunking.strategy not in strategy_names():
        found.append(Plugin(STRATEGY, config.chunking.strategy))
    if backend_class(config.embedding.model) is not None:
        found.append(Plugin(BACKEND, config.embedding.model))
    return tuple(found)


@functools.lru_cache(maxsize=8)
def check_landmarks(marks: tuple[Landmark | Plugin, ...]) -> None:
    """Raise `NotTheDriversFolder` unless this machine's folders hold what the driver's did, and
    `PluginNotOnNode` unless this process finds each third-party class the driver found (a
    check that passed is not made again in this process)."""
    for mark in marks:
        if isinstance(mark, Plugin):
            _check_plugin(mark)
            continue
        if not mark.relpath:
            found = os.path.isdir(mark.folder)
        else:
            try:
                found = _file_digest(mark.folder, mark.relpath) == mark.digest
            except OSError:
                found = False
        if not found:
            raise NotTheDriversFolder(_message(mark))


def _check_plugin(plugin: Plugin) -> None:
    """`PluginNotOnNode` where this process (a Ray worker) cannot import `plugin`: its chunk
    tasks failed on "unknown chunking strategy", and its embedding actors took an entry point's
    name for a Hugging Face model's (exit 1, a traceback, or another model). A strategy is
    imported, as the chunk tasks do; a backend's module is only found (`find_spec`), as only the
    embedding actors import it (torch and the like, in every chunk and reduce worker)."""
    from chunking.strategy import ENTRY_POINTS, strategy_class
    from embedding.models import BACKEND_ENTRY_POINTS

    group = ENTRY_POINTS if plugin.kind == STRATEGY else BACKEND_ENTRY_POINTS
    module, dotted, _ = plugin.name.partition(":")
    points = () if dotted else entry_points(group=group, name=plugin.name)
    why = None
    if not dotted and not points:
        why = f"no entry point {plugin.name!r} of {group!r} is installed here"
    elif plugin.kind == STRATEGY:
        try:
            strategy_class(plugin.name)
        except ValueError as exc:
            why = str(exc)
    else:
        module = module if dotted else next(iter(points)).module
        try:
            found = find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package missing, or no spec
            found = False
        if not found:
            why = f"{plugin.kind} {plugin.name!r}: no module {module!r} is found here"
    if why:
        import ray  # a Ray worker's, imported already

        raise PluginNotOnNode(
            f"the {plugin.kind} {plugin.name!r}, which the driver found, is not on node "
            f"{ray.util.get_node_ip_address()} ({socket.gethostname()}, pid {os.getpid()}): "
            f"{why}. Each Ray worker imports it itself: ship its package with the job "
            """(ray job submit --runtime-env-json '{"py_modules": ["/path/to/package"]}', """
            "and its .dist-info folder for an entry point's name) or install it on every node"
        )


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
