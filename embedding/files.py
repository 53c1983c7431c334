"""Whole-file writes that no reader can see half done, and batched reads, on any fsspec
filesystem; the protocol of a root URI, and a typo in one refused."""

from __future__ import annotations

import copy
import inspect
import os
import re
import stat
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

import fsspec
from fsspec.asyn import AsyncFileSystem, _run_coros_in_chunks, sync
from fsspec.core import split_protocol
from fsspec.implementations.local import LocalFileSystem

LOCAL_PROTOCOLS = ("file", "local")
S3_PROTOCOLS = ("s3", "s3a")  # `s3a://` is Hadoop's name for the same store
# RFC 8089: `file://localhost/p` is `file:///p`; fsspec reads `localhost/p` as a relative path.
_LOCALHOST = re.compile(r"^((?:file|local)://)localhost(?=/)", re.IGNORECASE)
# Requests an async filesystem (s3fs) runs at once in a batched `pipe` or `cat`. fsspec's default,
# 1,280, made each completion cost a scan of every pending request (asyncio.wait): 30% of the
# client's CPU per small object, while s3fs's connection pool (10 by default) sends no more at once.
GATHER_BATCH = 64


def fresh_listings(options: dict[str, Any] | None) -> dict[str, Any]:
    """fsspec filesystem options with directory listings never cached (fsspec's `DirCache`).

    fsspec keeps one filesystem per process and options, and s3fs keeps every listing it makes,
    with no expiry, and answers `ls`, `walk`, `exists` and `isdir` from them. A process that
    builds twice (a program calling the job twice, a test, a worker of a Ray instance that builds
    share) saw its first listings: an edited S3 input read as unchanged, a chunk file another
    process wrote was missing from a topic's listing and stayed an orphan, a cache folder read as
    absent."""
    return {**(options or {}), "use_listings_cache": False}


def root_filesystem(uri: str, options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """The fsspec filesystem of `uri` and its path there (no scheme, no trailing slash), `uri`
    taken as one location, as the build's storage takes it: fsspec's `url_to_fs` reads `::` as a
    chain of filesystems, so an output folder named `docs::v2` had its cache in `docs`. What
    the URI itself says (an FTP or SFTP host and port) is passed as `url_to_fs` passes it, below
    `options` (without it, `ftp://host/x` was a TypeError: no host)."""
    protocol = protocol_of(uri)
    from_url = fsspec.get_filesystem_class(protocol)._get_kwargs_from_urls(uri)
    fs = fsspec.filesystem(protocol, **{**from_url, **(options or {})})
    return fs, fs._strip_protocol(_plain(uri)).rstrip("/")


def change_tag(info: dict[str, Any]) -> str:
    """A listed file's change tag: an object store's ETag, else its modification time (an
    http(s) server's `Last-Modified`)."""
    for key in ("ETag", "etag", "e_tag"):
        if info.get(key):
            return str(info[key]).strip('"')
    for key in ("mtime", "LastModified", "last_modified", "Last-Modified", "created"):
        if info.get(key) is not None:
            value = info[key]
            return str(value.timestamp() if hasattr(value, "timestamp") else value)
    return ""


def write_atomically(
    fs: fsspec.AbstractFileSystem, files: dict[str, bytes], *, in_place: bool = False
) -> None:
    """Write each `{path: data}` whole: on local disk to a temporary file in the same folder,
    renamed over the path; on object storage as one put per object (concurrent where the
    filesystem batches puts, as s3fs does). Paths are the filesystem's own (no scheme).

    `in_place=True` writes local files directly, skipping the temporary file and rename (a third
    of the cost of a small file): only for files whose readers check their content anyway, such
    as the cache's vectors, which metadata.json's digest vouches for."""
    if not files:
        return
    if not isinstance(fs, LocalFileSystem):
        fs.pipe(files, **_gather_options(fs))
        return
    for folder in {os.path.dirname(path) for path in files}:  # each folder once, not per file
        os.makedirs(folder, exist_ok=True)
    if in_place:
        for path, data in files.items():
            _write_local(path, data)
        return
    new_mode = 0o666 & ~_umask()  # what open() gives a new file
    for path, data in files.items():
        _replace_local(path, data, new_mode)


def _umask() -> int:
    """The process umask (reading it means setting it, so it is set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write_local(path: str, data: bytes) -> None:
    """Write `data` over `path` directly (a reader may see it half written); a symbolic link
    at `path` is refused (ELOOP), never written through."""
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666)
    _write_and_close(handle, data, path)


def _write_and_close(handle: int, data: bytes, path: str) -> None:
    """Write all of `data` to an open file descriptor and close it; a failure (a full disk:
    ENOSPC) names `path`, which write() alone does not."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(handle, view) :]
    except OSError as exc:
        raise type(exc)(exc.errno, exc.strerror, path) from None
    finally:
        os.close(handle)


def is_within(path: str, root: str) -> bool:
    """Whether the absolute `path` is `root` or lies under it (both real paths)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def _replace_local(path: str, data: bytes, new_mode: int) -> None:
    """Write `data` to a temporary file beside `path` (whose folder exists), then rename it over
    `path`. The file gets the mode `open()` would give it: a file that existed keeps its
    permissions (not a setuid or setgid bit), a new one `new_mode` (mkstemp's own 0600 would hide
    it from a web server), and so does one replacing a symbolic link (whose target's mode it took,
    and which failed with ELOOP for a link to itself)."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        found = None
    regular = found is not None and stat.S_ISREG(found.st_mode)
    mode = stat.S_IMODE(found.st_mode) & 0o777 if regular else new_mode
    handle, temporary = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(path))
    try:
        os.fchmod(handle, mode)
        _write_and_close(handle, data, path)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def cat_many(fs: fsspec.AbstractFileSystem, paths: list[str]) -> dict[str, bytes | Exception]:
    """Each of `paths` read whole (concurrent GETs on an async filesystem such as s3fs), an
    exception in place of each file that cannot be read. A path is a name, never a pattern:
    fsspec's `cat` of a list globs each path with `*`, `?` or `[` in it, so `a[1].md` read
    `a1.md` and `what?.md` read `whatx.md` too. On s3fs each object is one GET: its default
    multi-part download first sends a HEAD per object (plus a LIST when it is missing), which
    tripled a cold build's requests."""
    options = {"max_concurrency": 1} if _takes_max_concurrency(fs) else {}
    found = _each(fs, paths, lambda path: fs._cat_file(path, **options), fs.cat_file)
    return dict(zip(paths, found, strict=True))


def cat_one(fs: fsspec.AbstractFileSystem, path: str) -> bytes:
    """One file read whole as `cat_many` reads it (on s3fs one GET, no HEAD before it); its
    error raised (FileNotFoundError where there is none)."""
    found = cat_many(fs, [path])[path]
    if isinstance(found, Exception):
        raise found
    return found


def info_many(fs: fsspec.AbstractFileSystem, paths: list[str]) -> list[dict[str, Any] | Exception]:
    """What fsspec's `info` says of each of `paths`, in order (concurrent HEADs on an async
    filesystem such as http(s)), an exception in place of each it cannot say."""
    return _each(fs, paths, lambda path: fs._info(path), fs.info)


def listed_many(fs: fsspec.AbstractFileSystem, folders: list[str]) -> set[str]:
    """The paths of everything directly in each of `folders` (a missing folder lists nothing):
    concurrent listings on an async filesystem such as s3fs, one LIST per 1,000 objects."""
    found = _each(
        fs,
        folders,
        lambda folder: fs._ls(folder, detail=False),
        lambda folder: fs.ls(folder, detail=False),
    )
    listed = set()
    for names in found:
        if isinstance(names, FileNotFoundError):
            continue
        if isinstance(names, BaseException):
            raise names
        listed.update(names)
    return listed


def _each(
    fs: fsspec.AbstractFileSystem,
    items: list[str],
    coroutine: Callable[[str], Awaitable[Any]],
    call: Callable[[str], Any],
) -> list[Any]:
    """What each item gives, in order, an exception in place of each that raised: on an async
    filesystem `coroutine(item)` run concurrently (`GATHER_BATCH` at once), elsewhere `call(item)`
    one after another."""
    if isinstance(fs, AsyncFileSystem):
        return sync(
            fs.loop,
            _run_coros_in_chunks,
            [coroutine(item) for item in items],
            batch_size=GATHER_BATCH,
            nofiles=True,
            return_exceptions=True,
        )
    return [_returned_or_raised(call, item) for item in items]


def _returned_or_raised(call: Callable[[str], Any], item: str) -> Any:
    try:
        return call(item)
    except Exception as exc:  # noqa: BLE001 - returned in its item's place, as fsspec's cat does
        return exc


def _gather_options(fs: fsspec.AbstractFileSystem) -> dict[str, int]:
    """How many requests a batched call of an async filesystem runs at once (see GATHER_BATCH)."""
    return {"batch_size": GATHER_BATCH} if isinstance(fs, AsyncFileSystem) else {}


def _takes_max_concurrency(fs: fsspec.AbstractFileSystem) -> bool:
    cat_file = getattr(fs, "_cat_file", None)  # async filesystems only
    return cat_file is not None and "max_concurrency" in inspect.signature(cat_file).parameters


def read_existing(fs: fsspec.AbstractFileSystem, paths: list[str]) -> dict[str, bytes]:
    """The contents of those of `paths` that can be read (the others are left out), keyed by the
    filesystem's own path. One concurrent `cat` on object stores; plain `open` on local disk,
    where fsspec's per-file layers cost more than the read (a miss: ~80 us against ~15 us)."""
    if not paths:
        return {}
    if isinstance(fs, LocalFileSystem):
        found = {}
        for path in map(fs._strip_protocol, paths):
            try:
                with open(path, "rb") as handle:
                    found[path] = handle.read()
            except OSError:
                continue
        return found
    return {
        fs._strip_protocol(path): data
        for path, data in cat_many(fs, paths).items()
        if isinstance(data, bytes)
    }


def protocols_of(fs: fsspec.AbstractFileSystem) -> set[str]:
    """The protocols a filesystem answers to (fsspec gives one name or a tuple of them)."""
    return {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)


def missing_bucket(fs: fsspec.AbstractFileSystem, path: str) -> FileNotFoundError | None:
    """The store's 404 to a HEAD of the S3 bucket that `path` (no scheme) lies in, where that
    bucket does not exist; None otherwise, and on every other filesystem. Any other answer (a
    403 to credentials for one prefix of it) is left to the caller: fsspec's `exists` took every
    failure for a missing bucket."""
    if protocols_of(fs) & set(S3_PROTOCOLS):
        try:
            fs.call_s3("head_bucket", Bucket=path.split("/", 1)[0])
        except FileNotFoundError as error:
            return error
        except OSError:
            pass
    return None


# What botocore takes from the environment for the S3 client it makes, besides the credentials.
AWS_SETTINGS = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_CONFIG_FILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
)


class S3ClientRefused(ValueError):
    """Options or AWS settings of the environment that no S3 client can be made with."""


def s3_client_refused(uri: str, options: dict[str, Any] | None) -> S3ClientRefused | None:
    """Why no S3 client of `uri` can be made with `options` and the environment (an option
    s3fs, aiobotocore or botocore does not take, a profile that does not exist, an endpoint that
    is no URL: `AWS_ENDPOINT_URL=localhost:9000`), naming the settings the environment gives;
    None where one can, and for other filesystems. Made without a request (credentials aside)."""
    if protocol_of(uri) not in S3_PROTOCOLS:
        return None
    from botocore.exceptions import ProfileNotFound

    # a copy: botocore turns the options' `retries.max_attempts` into another key in place
    try:
        root_filesystem(uri, fresh_listings(copy.deepcopy(options)))[0].connect()
    except (TypeError, ValueError, AttributeError, ProfileNotFound) as exc:
        given = [f"{name}={os.environ[name]}" for name in AWS_SETTINGS if os.environ.get(name)]
        note = f" (the environment sets {', '.join(given)})" if given else ""
        return S3ClientRefused(f"{type(exc).__name__}: {exc}{note}")
    return None


class UnknownProtocol(ValueError):
    """A URI fsspec has no filesystem for, or a plain path that reads as a URI with a typo."""


def known_protocol(uri: str) -> str:
    """`uri`'s fsspec protocol; UnknownProtocol where fsspec has no filesystem for it (`s4://`,
    `S3://`, a package not installed) or where a plain path starts with one and a colon
    (`s3:/bucket`, a slash missing, is a local folder `s3:`), and for "" (an unset variable:
    `mdindex query "$OUT"` read the current directory's index)."""
    if not uri:
        raise UnknownProtocol("an empty root (an unset variable?); name a folder or URI")
    protocol = protocol_of(uri)
    try:
        fsspec.get_filesystem_class(protocol)
    except (ValueError, ImportError) as exc:
        lower = protocol.lower()  # `S3://`: RFC 3986 schemes are case-blind, fsspec's are not
        meant = f"{lower}{uri[len(protocol) :]}"
        known = lower != protocol and lower in fsspec.available_protocols()
        hint = f"; did you mean {meant}?" if known else ""
        raise UnknownProtocol(f"{uri}: {exc}{hint}") from exc
    typo = re.match(r"([A-Za-z][\w+.-]*):/*", uri) if "://" not in uri else None
    if typo and typo[1].lower() in fsspec.available_protocols():
        scheme, rest = typo[1].lower(), uri[typo.end() :]
        meant = f"/{rest}" if scheme in LOCAL_PROTOCOLS else f"{scheme}://{rest}"
        raise UnknownProtocol(f"{uri} reads as a local folder {typo[1]}:; did you mean {meant}?")
    return protocol


# fsspec's read-only archive filesystems, which need the archive's own filesystem chained (::).
_ARCHIVES = ("zip", "tar", "libarchive")


def archive_problem(uri: str) -> str | None:
    """Why `uri` can be no root of an output or a corpus where it names an archive or a chain of
    filesystems (`zip://docs::file:///r.zip`: `root_filesystem` takes a root as one location, so
    it was "Is a directory", naming the working directory); None otherwise (`docs::v2`, a local
    folder, too)."""
    protocol = protocol_of(uri)
    if protocol in LOCAL_PROTOCOLS or ("::" not in uri and protocol not in _ARCHIVES):
        return None
    return (
        f"{uri}: an archive or a chain of filesystems (::) is no folder mdindex can list and "
        "write; unpack the archive into a folder or an s3:// prefix, and give that"
    )


def protocol_of(uri: str) -> str:
    """The fsspec protocol of a URI ("file" for plain paths)."""
    protocol, _ = split_protocol(uri)
    return protocol or "file"


def strip_protocol(uri: str) -> str:
    """The URI without its scheme (a plain path stays as it is; `file://localhost/p` is `/p`, and
    `file:///tmp/my%20docs` is `/tmp/my docs`: `_plain`)."""
    return split_protocol(_plain(uri))[1]


def _plain(uri: str) -> str:
    """`uri` as fsspec is to take it: `file://localhost/p` as `file:///p`, and a `file://` URI's
    percent-encoding decoded (RFC 8089: a file manager's, a browser's and `Path.as_uri`'s
    `file:///tmp/my%20docs` is the folder `my docs`; fsspec took it for a folder `my%20docs`;
    `%E9` is the byte of a Latin-1 name). A plain path, fsspec's own `local://` and every other
    scheme stay as they are."""
    uri = _LOCALHOST.sub(r"\1", uri)
    if not uri.startswith("file://"):
        return uri
    return f"file://{unquote(uri[7:], errors='surrogateescape')}"
