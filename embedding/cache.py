"""The content-hash embedding cache of seed 000 section 3, on any fsspec URI.

Layout: {root}/{strategy_key}/{model_key}/{source_hash[:16]}/metadata.json and chunk-{i}.bin,
each .bin holding one vector as raw little-endian float32 (no pickle). metadata.json records the
model key, strategy key, full source hash, chunk count, dimension, the sha256 of each chunk's text,
which chunks were truncated and the sha256 of all vector bytes (so a damaged .bin is caught).

A model folder ({strategy_key}/{model_key}) that does not exist at an object's first lookup in it
is taken as empty until that object writes into it: a build against a cold cache asks once per
folder, not once per document (on object storage, one existence check, not a GET per source).
Entries another process writes there meanwhile are then misses, recomputed to the same vectors.

Reads validate everything they can (keys, source hash, dimension, chunk count, every .bin size,
finite values); anything wrong or unreadable makes the entry a miss, never wrong vectors.
Writes put the .bin files first and metadata.json last. metadata.json is one atomic object
(temporary file and rename on local disks, a single put on object storage); the .bin files are
written in place on local disks (a single put on object storage), since a reader checks their
bytes against metadata's digest anyway. A half-written entry reads as a miss, and concurrent
writers of the same entry (same content) cannot make a wrong entry read as valid.

A damaged entry is logged and recomputed. A cache that cannot be written (a full disk, a
directory where a file should be, a folder whose symbolic links lead out of the cache root) is
not an error: `put_many` removes what it wrote of each such entry and returns one warning per
entry, naming its path.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from fsspec.implementations.local import LocalFileSystem

from embedding.files import (
    fresh_listings,
    is_within,
    read_existing,
    root_filesystem,
    write_atomically,
)

log = logging.getLogger(__name__)

FORMAT = "mdindex-embedding-cache/1"
_VECTOR = np.dtype("<f4")
_SAFE_KEY = re.compile(r"^[A-Za-z0-9._-]+$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class CacheKey:
    """Which entry: the chunking strategy key, the model key and the full sha256 of the source."""

    strategy_key: str
    model_key: str
    source_hash: str

    def __post_init__(self):
        for name in ("strategy_key", "model_key"):
            value = getattr(self, name)
            if not _SAFE_KEY.match(value) or value in (".", ".."):
                raise ValueError(f"cache {name} {value!r} is not filesystem-safe")
        if not _SHA256.match(self.source_hash):
            raise ValueError(f"source_hash {self.source_hash!r} is not a sha256 hex digest")

    @property
    def relpath(self) -> str:
        """The entry's folder relative to the cache root."""
        return f"{self.strategy_key}/{self.model_key}/{self.source_hash[:16]}"


@dataclass(frozen=True)
class _Metadata:
    text_hashes: tuple[str, ...]
    truncated_rows: tuple[int, ...]
    vectors_sha256: str


@dataclass(frozen=True, eq=False)
class CacheEntry:
    """One document's cached vectors (n, dim), with each chunk's text hash and truncation flag."""

    key: CacheKey
    text_hashes: tuple[str, ...]
    vectors: np.ndarray
    truncated_rows: tuple[int, ...] = ()


def text_hashes(texts: Sequence[str]) -> tuple[str, ...]:
    """sha256 hex of each text's UTF-8 bytes."""
    return tuple(hashlib.sha256(text.encode("utf-8")).hexdigest() for text in texts)


class EmbeddingCache:
    """Get and put document entries under `root_uri` (local path or fsspec URI); ValueError for
    an empty one (an unset variable), which was the current directory."""

    def __init__(self, root_uri: str, storage_options: dict[str, Any] | None = None):
        if not isinstance(root_uri, str) or not root_uri:
            raise ValueError(f"the cache root must be a path or URI, got {root_uri!r}")
        self.root_uri = root_uri
        self.fs, self.root = root_filesystem(root_uri, fresh_listings(storage_options))
        # (strategy key, model key) -> its model folder existed, or was written by us
        self._folder_exists: dict[tuple[str, str], bool] = {}

    def entry_path(self, key: CacheKey) -> str:
        """The entry's folder as a path on `self.fs`."""
        return posixpath.join(self.root, key.relpath)

    def get(self, key: CacheKey, dim: int) -> CacheEntry | None:
        """The valid entry for `key` with vectors of size `dim`, or None (a miss)."""
        return self.get_many([key], dim)[0]

    def get_many(self, keys: Sequence[CacheKey], dim: int) -> list[CacheEntry | None]:
        """`get` for many keys with two batched reads (all metadata, then all vectors); keys
        of a model folder that did not exist at the first lookup in it are misses unread.

        fsspec's `cat` of a list runs the requests concurrently on object storage."""
        # Paths only of keys that may be held: a cold build asks for thousands that cannot be.
        metadata_paths = [self._metadata_path(key) if self._may_hold(key) else None for key in keys]
        blobs = read_existing(self.fs, [path for path in metadata_paths if path is not None])
        metadata = [
            _parse_metadata(blobs.get(path), key, dim) if path is not None else None
            for path, key in zip(metadata_paths, keys, strict=True)
        ]
        vector_paths = [
            [self._chunk_path(key, i) for i in range(len(meta.text_hashes))] if meta else []
            for key, meta in zip(keys, metadata, strict=True)
        ]
        vector_blobs = read_existing(self.fs, [path for paths in vector_paths for path in paths])
        entries: list[CacheEntry | None] = []
        for key, meta, paths, metadata_path in zip(
            keys, metadata, vector_paths, metadata_paths, strict=True
        ):
            vectors = None
            if meta is not None:
                blobs_of_entry = [vector_blobs.get(path) for path in paths]
                vectors = _parse_vectors(blobs_of_entry, dim, meta.vectors_sha256)
                if vectors is None:
                    log.warning(
                        "cache entry %s: vectors missing or damaged; recomputing", key.relpath
                    )
            elif metadata_path in blobs:
                log.warning("cache entry %s: metadata.json damaged; recomputing", key.relpath)
            entries.append(
                None
                if vectors is None
                else CacheEntry(key, meta.text_hashes, vectors, meta.truncated_rows)
            )
        return entries

    def may_hold(self, strategy_key: str, model_key: str) -> bool:
        """Whether this model folder existed at this object's first lookup in it (asked once per
        folder), or this object has written into it since: if not, it holds no entry for us."""
        folder = (strategy_key, model_key)
        if folder not in self._folder_exists:
            path = posixpath.join(self.root, strategy_key, model_key)
            self._folder_exists[folder] = self.fs.exists(path)
        return self._folder_exists[folder]

    def _may_hold(self, key: CacheKey) -> bool:
        return self.may_hold(key.strategy_key, key.model_key)

    def _metadata_path(self, key: CacheKey) -> str:
        return posixpath.join(self.entry_path(key), "metadata.json")

    def _chunk_path(self, key: CacheKey, index: int) -> str:
        return posixpath.join(self.entry_path(key), f"chunk-{index}.bin")

    def put(self, entry: CacheEntry) -> str:
        """Write one entry (vectors first, metadata.json last), replacing what was there; the
        warning when it could not be written ("" when it was; see `put_many`)."""
        return self.put_many([entry]).get(entry.key, "")

    def put_many(self, entries: Sequence[CacheEntry]) -> dict[CacheKey, str]:
        """Write many entries: all .bin files, then all metadata.json files. An entry that
        cannot be written is removed again and gets a warning naming its path (also logged)."""
        warnings: dict[CacheKey, str] = {}
        files = {}
        folders: dict[str, str] = {}  # model folder -> its real path, resolved once per call
        for entry in entries:
            refused = self._refused(entry.key, folders)
            if refused:
                warnings[entry.key] = refused
            else:
                files[entry.key] = self._entry_files(entry)
                self._folder_exists[entry.key.strategy_key, entry.key.model_key] = True
        try:
            self._write(list(files.values()))
        except OSError:  # find out which entries fail, one by one, and leave none half written
            for key, parts in files.items():
                try:
                    self._write([parts])
                except OSError as exc:
                    self._remove(parts)
                    where = exc.filename2 or exc.filename or self.entry_path(key)
                    warnings[key] = (
                        f"cache entry {self.entry_path(key)} not written: "
                        f"{exc.strerror or exc} ({where})"
                    )
        for warning in warnings.values():
            log.warning("%s", warning)
        return warnings

    def _entry_files(self, entry: CacheEntry) -> tuple[dict[str, bytes], dict[str, bytes]]:
        """An entry's ({.bin path: bytes}, {metadata.json path: bytes})."""
        rows = np.ascontiguousarray(entry.vectors, dtype=_VECTOR)
        if rows.ndim != 2 or rows.shape[0] != len(entry.text_hashes):
            raise ValueError(
                f"cache entry {entry.key.relpath}: {rows.shape} vectors for "
                f"{len(entry.text_hashes)} chunks"
            )
        vectors = {self._chunk_path(entry.key, i): row.tobytes() for i, row in enumerate(rows)}
        return vectors, {self._metadata_path(entry.key): _metadata_bytes(entry, rows)}

    def _refused(self, key: CacheKey, folders: dict[str, str]) -> str:
        """Why an entry's folder may not be written ("" when it may): on local disk, a symbolic
        link inside the cache that leads out of its root.

        The model folder's real path is resolved once per `put_many` (`folders`); the entry's
        own folder is resolved only when it is itself a link (one `lstat`; resolving every
        entry's path was a quarter of the time to write a cold build's entries)."""
        if not isinstance(self.fs, LocalFileSystem):
            return ""
        path = self.entry_path(key)
        parent, name = posixpath.split(path)
        if parent not in folders:
            folders[parent] = os.path.realpath(parent)
        real = os.path.realpath(path) if os.path.islink(path) else f"{folders[parent]}/{name}"
        root = self._real_root
        if is_within(real, root):
            return ""
        return (
            f"cache entry {self.entry_path(key)} not written: it resolves to {real}, outside "
            f"the cache root {root} (a symbolic link leads out of it)"
        )

    @cached_property
    def _real_root(self) -> str:
        """The cache root's real path (resolved once, not for every entry written)."""
        return os.path.realpath(self.root)

    def _write(self, parts: list[tuple[dict[str, bytes], dict[str, bytes]]]) -> None:
        """Every .bin file of `parts`, then every metadata.json."""
        vectors = {path: data for bins, _ in parts for path, data in bins.items()}
        metadata = {path: data for _, meta in parts for path, data in meta.items()}
        write_atomically(self.fs, vectors, in_place=True)  # metadata's digest vouches for them
        write_atomically(self.fs, metadata)

    def _remove(self, parts: tuple[dict[str, bytes], dict[str, bytes]]) -> None:
        """Delete the files of an entry that failed to write (what is not there is skipped)."""
        for path in [*parts[1], *parts[0]]:  # metadata.json first: the entry stops reading as valid
            try:
                if self.fs.isfile(path):
                    self.fs.rm_file(path)
            except OSError:
                continue


def _metadata_bytes(entry: CacheEntry, rows: np.ndarray) -> bytes:
    document = {
        "format": FORMAT,
        "model": entry.key.model_key,
        "strategy": entry.key.strategy_key,
        "source_hash": entry.key.source_hash,
        "chunk_count": len(entry.text_hashes),
        "dim": rows.shape[1],
        "dtype": "float32-le",
        "vectors_sha256": hashlib.sha256(rows.tobytes()).hexdigest(),
        "chunk_hashes": list(entry.text_hashes),
        "truncated": sorted(entry.truncated_rows),
    }
    # Compact: an indent makes json use its pure-Python encoder, a fifth of a millisecond per entry.
    return (json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n").encode("utf-8")


def _parse_metadata(blob: bytes | None, key: CacheKey, dim: int) -> _Metadata | None:
    """What metadata.json says about the entry, when it is sound and belongs to `key`."""
    if blob is None:
        return None
    try:
        meta = json.loads(blob)
        hashes = tuple(meta["chunk_hashes"])
        truncated = tuple(meta["truncated"])
        sound = (
            meta["format"] == FORMAT
            and meta["model"] == key.model_key
            and meta["strategy"] == key.strategy_key
            and meta["source_hash"] == key.source_hash
            and meta["dim"] == dim
            and meta["chunk_count"] == len(hashes)
            and isinstance(meta["vectors_sha256"], str)
            and all(isinstance(h, str) and _SHA256.match(h) for h in hashes)
            and all(type(i) is int and 0 <= i < len(hashes) for i in truncated)
        )
    except (ValueError, KeyError, TypeError, RecursionError):  # JSON nested past the stack
        return None
    return _Metadata(hashes, truncated, meta["vectors_sha256"]) if sound else None


def _parse_vectors(blobs: list[bytes | None], dim: int, digest: str) -> np.ndarray | None:
    """The (n, dim) float32 matrix, or None when a .bin is missing or its bytes are not the ones
    metadata.json was written for (wrong size, damaged, or from another write)."""
    if any(blob is None or len(blob) != dim * _VECTOR.itemsize for blob in blobs):
        return None
    data = b"".join(blobs)
    if hashlib.sha256(data).hexdigest() != digest:
        return None
    return np.frombuffer(data, dtype=_VECTOR).reshape(len(blobs), dim).astype(np.float32)
