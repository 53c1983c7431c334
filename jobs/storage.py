"""Storage through fsspec: one `Storage` per root URI (local path, file://, s3://, memory://).

Paths handed to a `Storage` are POSIX paths relative to its root. s3fs lists objects as
`bucket/key` without the scheme, so listings are turned back into root-relative paths here and
nowhere else. Writes are atomic per file: a temporary file renamed into place on local disk, a
single PUT on object stores (an object is never visible half-written).

Confinement (local roots; object stores have no symbolic links): a write or delete whose folder
resolves outside the root's real path is refused (`OutsideRoot`), whatever the links on the way.
Unless `follow_symlinks` is set, the listing does not follow symbolic links (it reports them as
`SkippedLink`) and a read refuses a path that is one (`SymlinkRefused`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import posixpath
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property
from stat import S_ISREG
from typing import Any

import fsspec

from embedding.files import (
    GATHER_BATCH,
    LOCAL_PROTOCOLS,
    cat_many,
    cat_one,
    change_tag,
    fresh_listings,
    info_many,
    is_within,
    listed_many,
    protocol_of,
    root_filesystem,
    write_atomically,
)
from indexing.paths import href_of, href_path
from indexing.terminal import counted
from jobs.known import KnownFailure

# What `embedding.files.write_atomically` names its temporary files on local disk (mkstemp with
# the prefix ".tmp-": eight characters of [a-z0-9_]); a process killed mid-write leaves one.
_TEMPORARY = re.compile(r"^\.tmp-[a-z0-9_]{8}$")
log = logging.getLogger(__name__)
NOT_FOLLOWED = "symbolic link, not followed (sources.follow_symlinks is false)"


class OutsideRoot(KnownFailure, PermissionError):
    """A write or delete whose folder resolves, through a symbolic link, outside the root."""


class SymlinkRefused(OSError):
    """A read of a symbolic link on a storage that does not follow them."""


@dataclass(frozen=True)
class FileInfo:
    """One listed file: its root-relative path, size, and a version tag (ETag or mtime)."""

    path: str
    size: int
    version: str

    @property
    def fingerprint(self) -> str:
        """What must match the previous run's listing for the file to count as unchanged."""
        return f"{self.size}:{self.version}"


def fingerprint_size(fingerprint: str) -> str:
    """The size a `FileInfo.fingerprint` records (as text; "" for one that records none)."""
    return fingerprint.partition(":")[0]


@dataclass(frozen=True)
class SkippedLink:
    """A symbolic link the listing did not follow: its root-relative path, why, and whether it
    leads to a folder."""

    path: str
    reason: str
    directory: bool


@dataclass(frozen=True)
class Storage:
    """Files under one root URI, addressed by root-relative POSIX paths."""

    root: str
    options: dict[str, Any] = field(default_factory=dict)
    follow_symlinks: bool = False  # local roots: whether listings and reads follow symbolic links

    @property
    def protocol(self) -> str:
        return protocol_of(self.root)

    @property
    def is_local(self) -> bool:
        return self.protocol in LOCAL_PROTOCOLS

    @cached_property
    def _web(self) -> bool:
        """Whether the root is an http(s) URL, whose paths are URL-encoded (`my%20doc.md`)."""
        return self.protocol in ("http", "https")

    def filesystem(self) -> fsspec.AbstractFileSystem:
        """The fsspec filesystem for this root (fsspec caches instances); on an object store its
        listings are never cached (`embedding.files.fresh_listings`)."""
        return self._located()[0]

    def _located(self) -> tuple[fsspec.AbstractFileSystem, str]:
        options = {} if self.is_local else fresh_listings(self.options)
        return root_filesystem(self.root, options)

    @cached_property
    def _root_path(self) -> str:
        """The root as a filesystem path (no scheme; looked up once, not for every file)."""
        return self._located()[1]

    def full_path(self, relpath: str) -> str:
        """The filesystem path (no scheme) of a root-relative path."""
        root = self._root_path
        if not relpath:
            return root
        return f"{root}/{href_of(relpath) if self._web else relpath}"

    def uri(self, relpath: str = "") -> str:
        """The full URI of a root-relative path, scheme included (plain path for local roots)."""
        path = self.full_path(relpath)
        return path if self.is_local else self.filesystem().unstrip_protocol(path)

    @cached_property
    def real_root(self) -> str:
        """The root's real path, every symbolic link resolved (local roots; looked up once)."""
        return os.path.realpath(self._root_path)

    def read_bytes(self, relpath: str) -> bytes:
        """The whole file; FileNotFoundError when it does not exist, SymlinkRefused when it is a
        symbolic link that this storage does not follow, OSError when it is no regular file. On
        an object store one GET (`cat_one`: s3fs's `cat_file` sent a HEAD before it)."""
        if not self.is_local:
            return cat_one(self.filesystem(), self.full_path(relpath))
        return _read_local(self.full_path(relpath), self.follow_symlinks)

    def read_optional(self, relpath: str) -> bytes | None:
        """The whole file, or None when it does not exist."""
        try:
            return self.read_bytes(relpath)
        except FileNotFoundError:
            return None

    def read_many(self, relpaths: list[str]) -> dict[str, bytes | Exception]:
        """Several files in one call (concurrent GETs on object stores); errors per path."""
        if not relpaths:
            return {}
        if self.is_local:
            return {p: _attempt(self.read_bytes, p) for p in relpaths}
        fs = self.filesystem()
        full = {self.full_path(p): p for p in relpaths}
        found = cat_many(fs, list(full))
        return {full[key]: value for key, value in found.items()}

    def exists(self, relpath: str) -> bool:
        """Whether anything is at a path: a file, a folder, or a symbolic link (followed or not,
        dangling or not: a link counts as there)."""
        if self.is_local:
            return os.path.lexists(self.full_path(relpath))
        return self.filesystem().exists(self.full_path(relpath))

    def existing(self, relpaths: list[str]) -> set[str]:
        """Those of `relpaths` at which something is (`exists`). Their folders are listed rather
        than each path asked about: a topic's thousands of chunk files cost a few LISTs on object
        stores (concurrent), not a HEAD each, and one directory read on local disk, not a stat
        each (a round trip each on a network filesystem)."""
        full = {self.full_path(relpath): relpath for relpath in relpaths}
        if self.is_local:
            return _local_existing(full)
        fs = self.filesystem()
        listed = listed_many(fs, sorted({posixpath.dirname(path) for path in full}))
        listed = {fs._strip_protocol(path).rstrip("/") for path in listed}
        return {relpath for path, relpath in full.items() if path in listed}

    def write_bytes(self, relpath: str, data: bytes) -> None:
        """Write a whole file atomically, creating parent directories as needed; OutsideRoot when
        its folder resolves outside the root."""
        self.write_many({relpath: data})

    def write_many(self, files: dict[str, bytes], *, in_place: bool = False) -> None:
        """`write_bytes` for many files in one call (concurrent PUTs on object stores); every
        path is checked before anything is written. `in_place`: local files are written
        directly, without a temporary file and rename (for new files nothing refers to yet)."""
        full = self._confined(list(files), "write")
        write_atomically(
            self.filesystem(), dict(zip(full, files.values(), strict=True)), in_place=in_place
        )

    def write_if_changed(self, relpath: str, data: bytes) -> bool:
        """Write only when the stored bytes differ; True when something was written."""
        if self.read_optional(relpath) == data:
            return False
        self.write_bytes(relpath, data)
        return True

    def delete(self, relpaths: list[str]) -> None:
        """Delete files (missing ones are ignored); OutsideRoot, and nothing deleted, when the
        folder of one resolves outside the root."""
        fs = self.filesystem()
        for path in self._confined(relpaths, "delete"):
            try:
                fs.rm_file(path)
            except FileNotFoundError:
                continue

    def remove_empty_folder(self, relpath: str) -> None:
        """Remove a local folder when nothing is left in it (a folder with anything in it, a
        symbolic link or a missing folder stays as it is); object stores have no folders."""
        if not self.is_local:
            return
        path = self.confined(relpath, "delete")
        with contextlib.suppress(OSError):  # not empty, not a folder, or gone: left as it is
            os.rmdir(path)

    def temporaries(self, folders: Iterable[str]) -> list[str]:
        """The temporary files that interrupted writes left directly inside `folders`, sorted
        (none on object stores, where a write is one PUT)."""
        return self.temporaries_among(
            path for folder in set(folders) for path in self.list_files(folder)
        )

    def temporaries_among(self, listing: Iterable[str]) -> list[str]:
        """The temporary files of interrupted writes among `listing` (paths a `list_files` call
        returned), sorted; none on object stores, whose listing is then not even read."""
        if not self.is_local:
            return []
        return sorted(path for path in listing if is_temporary(path))

    def list_files(self, relpath: str = "") -> list[str]:
        """Root-relative paths of the files directly inside a directory (empty when missing).
        Local folders are read with `os.scandir` (fsspec's `ls` looks each file up again: 0.2 s
        for the 6,000 chunk files of a large topic)."""
        base = self.full_path(relpath)
        if self.is_local:
            try:
                with os.scandir(base) as entries:
                    names = [entry.name for entry in entries if entry.is_file()]
            except (FileNotFoundError, NotADirectoryError):
                return []
            return sorted(f"{relpath.rstrip('/')}/{name}" if relpath else name for name in names)
        fs = self.filesystem()
        try:
            entries = fs.ls(base, detail=True)
        except FileNotFoundError:
            return []
        root = self._root_path
        names = (_relative(fs, root, e["name"]) for e in entries if e["type"] == "file")
        return sorted(map(href_path, names) if self._web else names)

    def walk(
        self, keep_dir: Callable[[str], bool] = lambda name: True
    ) -> Iterator[FileInfo | SkippedLink]:
        """Every file under the root, pruning directories for which `keep_dir(name)` is false.

        On local roots, symbolic links are followed only with `follow_symlinks` (never into a
        folder the walk is already inside); a link not followed comes out as a `SkippedLink`.
        """
        root = self._root_path
        if self.is_local:
            if not os.path.isdir(root):
                raise FileNotFoundError(f"{self.root}: no such directory")
            yield from _walk_local(root, keep_dir, self.follow_symlinks)
            return
        fs = self.filesystem()
        if not fs.isdir(root):
            raise FileNotFoundError(f"{self.root}: no such directory")
        for found in _walk_store(fs, root, keep_dir):  # an http(s) page's links are URL-encoded
            yield replace(found, path=href_path(found.path)) if self._web else found

    def confined(self, relpath: str, action: str) -> str:
        """The full path of `relpath`, once its folder is known to resolve inside the root
        (`OutsideRoot` otherwise, naming `action`): for a file opened directly, not by fsspec."""
        [path] = self._confined([relpath], action)
        return path

    def _confined(self, relpaths: list[str], action: str) -> list[str]:
        """The full paths of `relpaths`, once every folder they lie in is known to resolve inside
        the root (each folder resolved once: a topic's thousands of chunk files share one)."""
        full = [self.full_path(relpath) for relpath in relpaths]
        if self.is_local:
            first: dict[str, str] = {}  # folder -> the first path in it, for the message
            for path in full:
                first.setdefault(os.path.dirname(path), path)
            for folder, path in first.items():
                real = os.path.realpath(folder)
                if not is_within(real, self.real_root):
                    raise OutsideRoot(
                        f"refusing to {action} {path}: {folder} resolves to {real}, outside the "
                        f"root {self.real_root} (a symbolic link leads out of it)"
                    )
        return full


def is_temporary(path: str) -> bool:
    """Whether a path names a temporary file of `embedding.files.write_atomically`."""
    return bool(_TEMPORARY.match(posixpath.basename(path)))


def _local_existing(full: dict[str, str]) -> set[str]:
    """The values of `full` (local path -> what to return) at whose path something is, as
    `os.path.lexists` says: one `os.listdir` per folder, and `lexists` only for a name the
    listing of its folder lacks (a folder that cannot be read, a filesystem that lists names in
    another Unicode normalisation than the one it was given them in)."""
    by_folder: dict[str, list[str]] = {}
    for path in full:
        by_folder.setdefault(os.path.dirname(path), []).append(path)
    found = set()
    for folder, paths in by_folder.items():
        try:
            names = set(os.listdir(folder))
        except (FileNotFoundError, NotADirectoryError):
            continue  # nothing is below it
        except OSError:
            names = set()
        found.update(
            full[path] for path in paths if os.path.basename(path) in names or os.path.lexists(path)
        )
    return found


def _read_local(path: str, follow: bool) -> bytes:
    """A local file's bytes, refusing (SymlinkRefused) a path that is itself a symbolic link
    unless `follow`, and anything that is not a regular file (a FIFO's read waited for a writer
    for ever, a device's, /dev/zero's, filled the memory)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW)
    try:
        handle = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SymlinkRefused(errno.ELOOP, NOT_FOLLOWED, path) from exc
        raise
    with open(handle, "rb") as file:
        if not S_ISREG(os.fstat(handle).st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, a device, a socket)", path)
        return file.read()


def _attempt(read: Callable[[str], bytes], relpath: str) -> bytes | OSError:
    """`read(relpath)`, or the OSError it raised."""
    try:
        return read(relpath)
    except OSError as exc:
        return exc


Folder = tuple[str, str, tuple[str, ...]]  # (relative path + "/", full path, real paths to it)


def _walk_local(
    root: str, keep_dir: Callable[[str], bool], follow: bool
) -> Iterator[FileInfo | SkippedLink]:
    """The local walk behind `Storage.walk` (regular files with size and mtime; other kinds of
    file are not listed). Each pending folder carries the real paths of the folders the walk went
    through to reach it, so that a link back into one of them (a loop) is never followed."""
    pending: list[Folder] = [("", root, (os.path.realpath(root),))]
    while pending:
        relative, folder, trail = pending.pop()
        for entry in _entries(folder):
            try:
                found = _listed(entry, f"{relative}{entry.name}", trail, keep_dir, follow)
            except FileNotFoundError:  # removed while being listed
                continue
            if isinstance(found, tuple):
                pending.append(found)
            elif found is not None:
                yield found


def _walk_store(
    fs: fsspec.AbstractFileSystem, root: str, keep_dir: Callable[[str], bool]
) -> Iterator[FileInfo]:
    """The object store's walk behind `Storage.walk`: a folder whose listing fails fails the walk
    (fsspec's walk leaves such a folder out, below the top, so the build deleted its topics as if
    their sources were gone: a 403 or a 503 on one prefix). A folder gone since its parent was
    listed has nothing; a folder marker (an empty object `name/`, as the S3 console makes) is no
    file, but an object `name/` with content is listed as `name/`, for the plan to report (it was
    dropped unsaid). Keys with an empty folder name (`a//b.md`) are listed as they are
    (`_after_slashes`), and so are keys with a folder `.` or `..` (`a/./b.md`), which `keep_dir`
    never prunes: no folder of a path on disk, they were skipped as hidden folders, unreported.
    An http(s) input's folders (`sub/`, links of its page) are walked too (left out, unsaid)."""
    pending, untagged = [root], []
    while pending:
        folder = pending.pop()
        try:
            listing = _sized(fs, fs.ls(folder, detail=True), untagged)
        except FileNotFoundError:
            continue
        for info in listing:
            name = fs._strip_protocol(info["name"]).rstrip("/")
            if name == folder and info["type"] == "directory":  # the prefix `folder//`
                yield from _after_slashes(fs, root, folder, keep_dir)
            elif name == folder or (info["name"].endswith("/") and info["type"] != "directory"):
                if info["type"] != "directory" and info.get("size"):  # no marker: it holds bytes
                    yield _stored_file(_below(root, name) + "/", info)
            elif info["type"] == "directory":
                if _kept(keep_dir, posixpath.basename(name)):
                    pending.append(name)
            else:
                yield _stored_file(_below(root, name), info)
    if untagged:
        log.warning(
            "%s of %s came with neither ETag nor Last-Modified from their server (%s%s): "
            "each is read on every run and told changed or not by its content's SHA-256",
            counted(len(untagged), "page"),
            fs.unstrip_protocol(root),
            href_path(_below(root, fs._strip_protocol(untagged[0]))),
            ", …" if len(untagged) > 1 else "",
        )


def _sized(fs: fsspec.AbstractFileSystem, listing: list[dict], untagged: list[str]) -> list[dict]:
    """`listing`, each file it gives no size looked up (an http(s) page of links; concurrent
    HEADs), for its size and change tag: listed as 0 bytes and no tag, an edited page counted as
    unchanged on every run, never read again. A page whose server sends neither ETag nor
    Last-Modified is read, its content's SHA-256 its change tag (`_content_tagged`; its name
    added to `untagged`): its size alone counted an edit that kept it unchanged. A file gone
    since its folder was listed is left out; another failure fails the walk, as a folder's does."""
    unsized = [
        info["name"] for info in listing if info["type"] == "file" and info.get("size") is None
    ]
    if not unsized:
        return listing
    found = dict(zip(unsized, info_many(fs, unsized), strict=True))
    bare = [name for name, info in found.items() if isinstance(info, dict) and not change_tag(info)]
    untagged.extend(bare)
    found |= _content_tagged(fs, {name: found[name] for name in bare})
    for info in found.values():
        if isinstance(info, Exception) and not isinstance(info, FileNotFoundError):
            raise info
    return [
        found.get(info["name"], info)
        for info in listing
        if not isinstance(found.get(info["name"]), FileNotFoundError)
    ]


def _content_tagged(
    fs: fsspec.AbstractFileSystem, infos: dict[str, dict]
) -> dict[str, dict | Exception]:
    """Each of `infos` (name -> what a HEAD said) with its content's size and SHA-256 as its
    change tag (`sha256:…`, read `GATHER_BATCH` at a time), or the exception its read raised."""
    tagged: dict[str, dict | Exception] = {}
    names = list(infos)
    for start in range(0, len(names), GATHER_BATCH):
        for name, data in cat_many(fs, names[start : start + GATHER_BATCH]).items():
            if isinstance(data, Exception):
                tagged[name] = data
            else:
                digest = hashlib.sha256(data).hexdigest()
                tagged[name] = {**infos[name], "size": len(data), "ETag": f"sha256:{digest}"}
    return tagged


def _after_slashes(
    fs: fsspec.AbstractFileSystem, root: str, folder: str, keep_dir: Callable[[str], bool]
) -> Iterator[FileInfo]:
    """The objects whose key goes on from `folder` with `//` (`a//b.md`; under a bucket's root,
    a key starting with `/`), found by one listing of that prefix without a delimiter: `fs.ls`
    never reaches them (s3fs strips a key's leading and trailing `/`), and the walk dropped them
    unreported. The plan leaves them out of the corpus, reported (`jobs.plan.name_problem`)."""
    for name, info in sorted(fs.find(folder, prefix="/", detail=True).items()):
        relpath = _relative(fs, root, name)
        marker = name.endswith("/")  # a folder marker, unless it holds bytes
        if (
            name.startswith(f"{folder}//")
            and (not marker or info.get("size"))
            and all(_kept(keep_dir, part) for part in relpath.split("/")[:-1])
        ):
            yield _stored_file(relpath + "/" * marker, info)


def _kept(keep_dir: Callable[[str], bool], name: str) -> bool:
    """Whether an object store's walk goes below the folder `name` of a key: as `keep_dir` says,
    but always below `.` and `..`, which name no folder (the plan reports what lies there)."""
    return name in (".", "..") or keep_dir(name)


def _stored_file(relpath: str, info: dict) -> FileInfo:
    """The `FileInfo` of an object a listing gave, at `relpath` below the root."""
    return FileInfo(relpath, int(info.get("size") or 0), change_tag(info))


def _entries(folder: str) -> list[os.DirEntry]:
    """A folder's entries; none when it is gone. One that cannot be read (no permission, an I/O
    error) fails the walk, naming it: taken as empty, its sources read as deleted, and the build
    deleted their topics."""
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        reason = f"cannot list the input folder: {exc.strerror}"
        raise type(exc)(exc.errno, reason, folder) from None


def _listed(
    entry: os.DirEntry,
    path: str,
    trail: tuple[str, ...],
    keep_dir: Callable[[str], bool],
    follow: bool,
) -> FileInfo | SkippedLink | Folder | None:
    """What one directory entry adds to a local walk: a file, a skipped link, a folder to walk
    next, or nothing (pruned folders, fifos, sockets, devices)."""
    if not entry.is_symlink():
        if entry.is_dir(follow_symlinks=False):
            real = posixpath.join(trail[-1], entry.name)
            return (f"{path}/", entry.path, (*trail, real)) if keep_dir(entry.name) else None
        if entry.is_file(follow_symlinks=False):
            stat = entry.stat(follow_symlinks=False)
            return FileInfo(path, stat.st_size, str(stat.st_mtime))
        return None
    directory = _leads_to_folder(entry)
    if directory and not keep_dir(entry.name):
        return None
    if not follow:
        return SkippedLink(path, NOT_FOLLOWED, directory)
    try:
        stat = entry.stat()
    except OSError as exc:
        return SkippedLink(path, f"symbolic link that cannot be followed: {exc.strerror}", False)
    if not directory and not S_ISREG(stat.st_mode):  # its read would wait on a FIFO for ever
        return SkippedLink(path, "symbolic link to no regular file (a FIFO, a device)", False)
    if not directory:
        return FileInfo(path, stat.st_size, str(stat.st_mtime))
    real = os.path.realpath(entry.path)
    if real in trail:
        return SkippedLink(path, "symbolic link to a folder it is in (a loop), not followed", True)
    return (f"{path}/", entry.path, (*trail, real))


def _leads_to_folder(entry: os.DirEntry) -> bool:
    """Whether a symbolic link leads to a folder (False when it cannot be followed)."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _relative(fs: fsspec.AbstractFileSystem, root: str, full: str) -> str:
    """A listed name relative to `root` (both looked up once per listing, not per file)."""
    return _below(root, fs._strip_protocol(full).rstrip("/"))


def _below(root: str, name: str) -> str:
    """A name without its scheme, relative to `root`."""
    return name[len(root) + 1 :] if root else name.lstrip("/")
