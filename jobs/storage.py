"""Storage through fsspec: one `Storage` per root URI (local path, file://, s3://, memory://).

Paths handed to a `Storage` are POSIX paths relative to its root. s3fs lists objects as
`bucket/key` without the scheme, so listings are turned back into root-relative paths here and
nowhere else. Writes are atomic per file: a temporary file renamed into place on local disk, a
single PUT on object stores (an object is never visible half-written).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import fsspec
from fsspec.core import split_protocol

from embedding.files import write_atomically

LOCAL_PROTOCOLS = ("file", "local")


def protocol_of(uri: str) -> str:
    """The fsspec protocol of a URI ("file" for plain paths)."""
    protocol, _ = split_protocol(uri)
    return protocol or "file"


def strip_protocol(uri: str) -> str:
    """The URI without its scheme (a plain path stays as it is)."""
    return split_protocol(uri)[1]


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


@dataclass(frozen=True)
class Storage:
    """Files under one root URI, addressed by root-relative POSIX paths."""

    root: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def protocol(self) -> str:
        return protocol_of(self.root)

    @property
    def is_local(self) -> bool:
        return self.protocol in LOCAL_PROTOCOLS

    def filesystem(self) -> fsspec.AbstractFileSystem:
        """The fsspec filesystem for this root (fsspec caches instances)."""
        options = {} if self.is_local else self.options
        return fsspec.filesystem(self.protocol, **options)

    def _root_path(self) -> str:
        fs = self.filesystem()
        return fs._strip_protocol(self.root).rstrip("/")

    def full_path(self, relpath: str) -> str:
        """The filesystem path (no scheme) of a root-relative path."""
        root = self._root_path()
        return f"{root}/{relpath}" if relpath else root

    def uri(self, relpath: str = "") -> str:
        """The full URI of a root-relative path, scheme included (plain path for local roots)."""
        path = self.full_path(relpath)
        return path if self.is_local else self.filesystem().unstrip_protocol(path)

    def read_bytes(self, relpath: str) -> bytes:
        """The whole file; FileNotFoundError when it does not exist."""
        return self.filesystem().cat_file(self.full_path(relpath))

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
        fs = self.filesystem()
        full = {self.full_path(p): p for p in relpaths}
        found = fs.cat(list(full), on_error="return")
        return {full[key]: value for key, value in found.items()}

    def write_bytes(self, relpath: str, data: bytes) -> None:
        """Write a whole file atomically, creating parent directories as needed."""
        write_atomically(self.filesystem(), {self.full_path(relpath): data})

    def write_if_changed(self, relpath: str, data: bytes) -> bool:
        """Write only when the stored bytes differ; True when something was written."""
        if self.read_optional(relpath) == data:
            return False
        self.write_bytes(relpath, data)
        return True

    def delete(self, relpaths: list[str]) -> None:
        """Delete files (missing ones are ignored)."""
        fs = self.filesystem()
        for relpath in relpaths:
            try:
                fs.rm_file(self.full_path(relpath))
            except FileNotFoundError:
                continue

    def list_files(self, relpath: str = "") -> list[str]:
        """Root-relative paths of the files directly inside a directory (empty when missing)."""
        fs = self.filesystem()
        base = self.full_path(relpath)
        try:
            entries = fs.ls(base, detail=True)
        except FileNotFoundError:
            return []
        root = self._root_path()
        return sorted(_relative(fs, root, e["name"]) for e in entries if e["type"] == "file")

    def walk(self, keep_dir=lambda name: True) -> Iterator[FileInfo]:
        """Every file under the root, pruning directories for which `keep_dir(name)` is false."""
        fs = self.filesystem()
        root = self._root_path()
        if not fs.isdir(root):
            raise FileNotFoundError(f"{self.root}: no such directory")
        for _directory, dirs, files in fs.walk(root, detail=True, topdown=True):
            for name in [d for d in dirs if not keep_dir(d)]:
                del dirs[name]
            for info in files.values():
                yield FileInfo(
                    _relative(fs, root, info["name"]), int(info.get("size") or 0), _version(info)
                )


def _relative(fs: fsspec.AbstractFileSystem, root: str, full: str) -> str:
    """A listed name relative to `root` (both looked up once per listing, not per file)."""
    name = fs._strip_protocol(full).rstrip("/")
    return name[len(root) + 1 :] if root else name.lstrip("/")


def _version(info: dict[str, Any]) -> str:
    """The listing's change tag: an object store's ETag, else the modification time."""
    for key in ("ETag", "etag", "e_tag"):
        if info.get(key):
            return str(info[key]).strip('"')
    for key in ("mtime", "LastModified", "last_modified", "created"):
        if info.get(key) is not None:
            value = info[key]
            return str(value.timestamp() if hasattr(value, "timestamp") else value)
    return ""
