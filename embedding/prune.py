"""Pruning an embedding cache: the entries that no output using it still needs, removed.

Every edited source leaves the entry of its old bytes in the cache, and a model or chunking
settings change leaves a whole folder of old keys: nothing else removes them. What an output needs
is named by the caller (`Needed`: its sources' content hashes, under the strategy keys its index
was built with); of a strategy's model folders, one that holds fewer of those sources than
another, all among the other's, is a model the output embeds with no longer (`plan_prune`). An
entry is removed only when no output needs it and its newest file is older than a minimum age, so
that entries a running build has just written stay (it names them in its manifest only when it
finishes). Removing an entry a build still wanted costs that build its embedding again, never a
wrong vector: a read validates what it finds (`embedding.cache`).

Only folders of the cache's layout (`{strategy}/{model}/{16 hex digits}/`) are looked at; any other
file stays. On a local disk, nothing reached through a symbolic link is listed or removed. On S3,
a key the store refused to delete is an error (`delete_objects`), never a removal said done.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fsspec.implementations.local import LocalFileSystem

from embedding.cache import EmbeddingCache
from embedding.files import S3_PROTOCOLS, protocols_of

_SAFE_KEY = re.compile(r"^[A-Za-z0-9._-]+$")
_HASH16 = re.compile(r"^[0-9a-f]{16}$")


@dataclass(frozen=True)
class Needed:
    """What one output needs of the cache: the entries of these sources (each source's sha256's
    first 16 hex digits, which name its entry) under these strategy keys (None: under any)."""

    prefixes: frozenset[str]
    strategies: frozenset[str] | None

    def wants(self, strategy: str, prefix: str) -> bool:
        """Whether the entry `{strategy}/{model}/{prefix}` is one of these."""
        in_use = self.strategies is None or strategy in self.strategies
        return in_use and prefix in self.prefixes


@dataclass(frozen=True)
class Entry:
    """One entry folder of the cache: its path relative to the root, its files (the
    filesystem's paths), their bytes and the newest one's modification time (epoch seconds)."""

    relpath: str
    files: tuple[str, ...]
    size: int
    modified: float

    @property
    def strategy(self) -> str:
        """The strategy key it is under."""
        return self.relpath.split("/")[0]

    @property
    def folder(self) -> str:
        """Its `{strategy}/{model}` folder."""
        return self.relpath.rsplit("/", 1)[0]

    @property
    def prefix(self) -> str:
        """Its folder's name: the first 16 hex digits of its source's sha256."""
        return self.relpath.rsplit("/", 1)[1]


@dataclass(frozen=True)
class PrunePlan:
    """The cache's entries sorted: needed by some output, not needed but younger than the minimum
    age (kept), and to remove."""

    needed: tuple[Entry, ...]
    young: tuple[Entry, ...]
    remove: tuple[Entry, ...]


def cache_entries(cache: EmbeddingCache) -> list[Entry]:
    """Every entry folder of the cache, from one recursive listing (on object storage, a LIST per
    thousand objects); files outside the layout are left out, and on a local disk so is anything
    reached through a symbolic link."""
    try:
        listed = cache.fs.find(cache.root, detail=True)
    except FileNotFoundError:
        return []
    local = isinstance(cache.fs, LocalFileSystem)
    real_root = os.path.realpath(cache.root) if local else cache.root
    grouped: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for path, info in listed.items():
        relpath = posixpath.relpath(path, cache.root)
        parts = relpath.split("/")
        if len(parts) != 4 or info.get("type") != "file" or not _in_layout(*parts[:3]):
            continue
        if local and os.path.realpath(path) != posixpath.join(real_root, relpath):
            continue  # a link on the way: never followed out of the cache
        grouped.setdefault("/".join(parts[:3]), []).append((path, info))
    return [
        Entry(
            relpath,
            tuple(sorted(path for path, _ in files)),
            sum(int(info.get("size") or 0) for _, info in files),
            max(_modified(info) for _, info in files),
        )
        for relpath, files in sorted(grouped.items())
    ]


def _in_layout(strategy: str, model: str, hash16: str) -> bool:
    keys = (strategy, model)
    return all(_SAFE_KEY.match(k) and k not in (".", "..") for k in keys) and bool(
        _HASH16.match(hash16)
    )


def _modified(info: dict[str, Any]) -> float:
    """A listed file's modification time in epoch seconds (a local disk's mtime, an object
    store's LastModified); 0 where the listing gives none, which makes it old."""
    for key in ("mtime", "LastModified", "last_modified", "created"):
        value = info.get(key)
        if value is not None:
            return float(value.timestamp() if hasattr(value, "timestamp") else value)
    return 0.0


def plan_prune(
    entries: Iterable[Entry], needed: Iterable[Needed], min_age: float, now: float
) -> PrunePlan:
    """Sort `entries`: needed by one of `needed`, else kept while younger than `min_age` seconds
    at `now` (epoch seconds), else to remove.

    An output needs its sources' entries in each model folder of a strategy it uses, but one
    whose entries of its sources are fewer than, and all among, another's of that strategy: a
    model (or its settings) it no longer embeds with, which holds its sources left unchanged since
    it changed models, and none of those edited since (`stale_folders`)."""
    entries = tuple(entries)
    needed = tuple(needed)
    stale = [stale_folders(entries, output) for output in needed]
    kinds: tuple[list[Entry], list[Entry], list[Entry]] = ([], [], [])
    for entry in entries:
        strategy, prefix = entry.strategy, entry.prefix
        if any(
            output.wants(strategy, prefix) and entry.folder not in old
            for output, old in zip(needed, stale, strict=True)
        ):
            kinds[0].append(entry)
        elif now - entry.modified < min_age:
            kinds[1].append(entry)
        else:
            kinds[2].append(entry)
    return PrunePlan(*(tuple(kind) for kind in kinds))


def stale_folders(entries: Iterable[Entry], output: Needed) -> set[str]:
    """The `{strategy}/{model}` folders whose entries of `output`'s sources are a strict subset of
    another folder's of the same strategy. Where neither of two holds all the other's (a build
    that could not write some entries), both stay."""
    held: dict[str, set[str]] = {}
    for entry in entries:
        if output.wants(entry.strategy, entry.prefix):
            held.setdefault(entry.folder, set()).add(entry.prefix)
    return {
        folder
        for folder, prefixes in held.items()
        if any(
            other != folder and other.split("/")[0] == folder.split("/")[0] and prefixes < more
            for other, more in held.items()
        )
    }


def prune(cache: EmbeddingCache, entries: Iterable[Entry]) -> None:
    """Remove `entries` from the cache: every metadata.json first (each entry stops reading as
    valid), then the rest of their files; on a local disk, then the folders left empty. A file
    already gone (another prune) is passed by."""
    entries = tuple(entries)
    files = [path for entry in entries for path in entry.files]
    first = [path for path in files if path.endswith("/metadata.json")]
    rest = [path for path in files if not path.endswith("/metadata.json")]
    if protocols_of(cache.fs) & set(S3_PROTOCOLS):
        for paths in (first, rest):
            delete_objects(cache.fs, paths)
        return
    if not isinstance(cache.fs, LocalFileSystem):
        for paths in (first, rest):
            if paths:
                cache.fs.rm(paths)
        return
    for path in [*first, *rest]:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
    folders = {posixpath.join(cache.root, entry.relpath) for entry in entries}
    for _ in range(3):  # the entry folders, then their model and strategy folders
        for folder in folders:
            with contextlib.suppress(OSError):  # not empty (a build writes there), or gone
                os.rmdir(folder)
        folders = {posixpath.dirname(folder) for folder in folders}


def delete_objects(fs: Any, paths: list[str]) -> None:
    """Delete the S3 objects at `paths` (the filesystem's own, all in one bucket), a thousand a
    request; PermissionError (or the error the store's code stands for) at the first request in
    which the store refused some. s3fs's `rm` of a list drops the errors of the answer: a store
    that denies `s3:DeleteObject` answers 200 with one AccessDenied per key, so a prune with
    read-only credentials said "removed 1 entry", exit 0, and removed nothing."""
    from botocore.exceptions import ClientError
    from s3fs.errors import translate_boto_error

    for start in range(0, len(paths), 1000):
        batch = paths[start : start + 1000]
        bucket = batch[0].split("/", 1)[0]
        keys = [{"Key": path.split("/", 1)[1]} for path in batch]
        answer = fs.call_s3(
            "delete_objects", Bucket=bucket, Delete={"Objects": keys, "Quiet": True}
        )
        if refused := answer.get("Errors"):
            first = refused[0]
            message = (
                f"the store removed {len(batch) - len(refused)} of {len(batch)} objects, "
                f"{first.get('Code')}: {first.get('Message')} (s3://{bucket}/{first.get('Key')})"
            )
            error = ClientError({"Error": first}, "DeleteObjects")
            raise translate_boto_error(error, message, set_cause=False)
