"""Reading a built index, locally or remotely: stripe-order selections and question lookups."""

from __future__ import annotations

import json
import os
import posixpath
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem
from fsspec.spec import AbstractFileSystem

from chunking.links import spellings
from embedding.files import (
    UnknownProtocol,
    archive_problem,
    cat_one,
    known_protocol,
    missing_bucket,
    protocol_of,
    protocols_of,
    root_filesystem,
    s3_client_refused,
)
from indexing.hal import (
    CHUNK_TABLE_REL,
    MODEL_REL,
    NOT_AN_INDEX,
    SIMHASH_REL,
    TOPIC_SLUG,
    is_index_document,
)
from indexing.paths import (
    EMBEDDING_SETTINGS,
    INDEX,
    chunk_table_path,
    href_of,
    href_path,
    in_topic,
    source_stem,
    topic_id,
    topic_slug,
)
from indexing.simhash import simhash64
from indexing.simhash_tables import MANIFEST as SIMHASH_MANIFEST
from indexing.simhash_tables import ROOT as SIMHASH_ROOT
from indexing.simhash_tables import SimhashMatch, lookup_simhash
from indexing.tables import chunk_table_schema
from indexing.vectors import unit_rows


# The kind of each field the reader takes from a JSON document, as the build writes it; a name
# ending in "?" is of a field that may be absent.
def _is_int(value: Any) -> bool:
    """An integer, not a boolean (JSON's `true` is Python's `1`)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_text(value: Any) -> bool:
    """A string that UTF-8 can hold: JSON's escape of a lone surrogate (`"\\ud800"`) parses to
    one that no output can print (the query ended in a UnicodeEncodeError traceback)."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


KINDS: dict[str, Callable[[Any], bool]] = {
    "string": is_text,
    "int": _is_int,
    "bool": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "list": lambda v: isinstance(v, list),
    "list of ints": lambda v: isinstance(v, list) and all(map(_is_int, v)),
}
INDEX_FIELDS = {"id": "string", "title": "string"}
EMBEDDED_FIELDS = {"topics": "list", "chunks?": "object"}
LINK_FIELDS = {"id": "string"}
ENTRY_FIELDS = {
    "stripe_order": "list of ints",
    "stripe_order_technical?": "list of ints",
    "baseline_conceptual": "int",
    "baseline_technical?": "int",
    "items": "list",
}
ITEM_FIELDS = {
    "index": "int",
    "href": "string",
    "title": "string",
    "prompt_hashes?": "list of ints",
}


def bad_field(where: str, value: Any, fields: dict[str, str]) -> str | None:
    """Why `value` (`where` in its document) is not an object with `fields` of their `KINDS`, or
    None when it is."""
    if not isinstance(value, dict):
        return f"{where} is not an object"
    for name, kind in fields.items():
        key = name.removesuffix("?")
        if (key in value or key == name) and not KINDS[kind](value.get(key)):
            return f"{where} has no {kind} {key!r}"
    return None


def index_problem(doc: dict[str, Any]) -> str | None:
    """The first field of an index document (an object with an `_embedded` object) that the reader
    cannot take for what the build writes there, or a stripe order naming a chunk that its
    items lack; None when there is none."""
    return next(filter(None, _index_checks(doc)), None)


def _index_checks(doc: dict[str, Any]) -> Iterable[str | None]:
    """`index_problem`'s checks in order; each runs once those before it have passed (it reads
    what they vouched for)."""
    embedded = doc["_embedded"]
    yield bad_field("the document", doc, INDEX_FIELDS)
    yield bad_field("_embedded", embedded, EMBEDDED_FIELDS)
    for i, link in enumerate(embedded["topics"]):
        yield bad_field(f"_embedded.topics[{i}]", link, LINK_FIELDS)
    for stem, entry in embedded.get("chunks", {}).items():
        where = f"_embedded.chunks[{stem!r}]"
        yield None if is_text(stem) else f"{where} is named with no text"
        yield bad_field(where, entry, ENTRY_FIELDS)
        for i, item in enumerate(entry["items"]):
            yield bad_field(f"{where}.items[{i}]", item, ITEM_FIELDS)
        listed = {item["index"] for item in entry["items"]}
        for key in ("stripe_order", "stripe_order_technical"):
            unknown = sorted(set(entry.get(key, ())) - listed)
            yield f"{where}.{key} names chunks {unknown} that its items lack" if unknown else None
    yield no_text(doc)


def no_text(doc: Any) -> str | None:
    """Where in a parsed JSON document a string (a value or a member's name) is one UTF-8 cannot
    hold, JSON's escape of a lone surrogate (`"\\ud800"`), which the reader passes on to its
    output (a keyword's name: `--json` ended in a UnicodeEncodeError traceback); None when there
    is none. orjson, which refuses such strings, tells in one pass whether to look."""
    try:
        orjson.dumps(doc)
        return None
    except orjson.JSONEncodeError:  # such a string, or what orjson alone refuses (deep nesting)
        pass
    pending: list[tuple[str, Any]] = [("", doc)]
    while pending:
        where, value = pending.pop()
        if isinstance(value, str) and not is_text(value):
            return f"{where or 'the document'} is no text"
        members = value.items() if isinstance(value, dict) else ()
        members = enumerate(value) if isinstance(value, list) else members
        for key, member in members:
            if isinstance(key, str) and not is_text(key):
                return f"{where or 'the document'} names a member with no text"
            inner = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}".lstrip(".")
            pending.append((inner, member))
    return None


# Seconds an http(s) index may keep a request waiting with nothing sent (to connect, or between
# bytes of an answer), as `mdindex serve` waits for a client: aiohttp's default waited 5 minutes
# a request, then a TimeoutError naming nothing.
HTTP_STALL_S = 60


def web_options(uri: str, options: dict[str, Any] | None) -> dict[str, Any]:
    """fsspec options for the root `uri`: `options`, and for an http(s) root without its own
    `client_kwargs` a stall limit (`HTTP_STALL_S`), not a limit on a whole download; a
    `client_kwargs.timeout` that is a number of seconds is the stall limit (JSON, which
    `--storage-options` is, cannot spell aiohttp's ClientTimeout, which it asks for)."""
    options = dict(options or {})
    if protocol_of(uri) not in ("http", "https"):
        return options
    client = options.get("client_kwargs", {"timeout": HTTP_STALL_S})
    seconds = client.get("timeout") if isinstance(client, dict) else None
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
        import aiohttp

        stall = aiohttp.ClientTimeout(total=None, sock_connect=seconds, sock_read=seconds)
        options["client_kwargs"] = {**client, "timeout": stall}
    return options


def named_index_json(uri: str) -> str | None:
    """Why `uri` is no index root to open when it names an index.json, the URL a HAL client
    starts from (a local one read as "[Errno 20] Not a directory", an http one as holding no
    index, and its questions found nothing): the root is the folder that holds it. None
    otherwise."""
    folder, _, name = uri.rstrip("/").rpartition("/")
    if name != INDEX:
        return None
    return f"{uri} names an index.json; give the folder that holds it ({folder or '.'})"


class UnsuitedOptions(ValueError):
    """Storage options that the root's filesystem client does not take (`{"endpoint": …}` for an
    http root): its TypeError, raised at the first request, named as bad usage."""

    @classmethod
    def at(cls, where: str, error: TypeError) -> UnsuitedOptions:
        """The error for the options of the root at `where`, which its client refused (`error`)."""
        return cls(f"--storage-options do not suit {where}: {error}")

    @classmethod
    def no_s3_client(cls, where: str, refused: Exception) -> UnsuitedOptions:
        """The error for the S3 root at `where`, whose client cannot be made with the options and
        the environment (`embedding.files.s3_client_refused`)."""
        return cls(f"{where}: no S3 client with --storage-options and the environment: {refused}")


def unusable_root(uri: str, options: dict[str, Any] | None) -> str | None:
    """Why `uri` names no store a command can read with `options` and the environment, which
    is bad usage (exit 2, nothing read): a protocol fsspec does not know (`s4://`, `S3://`;
    `s3:/bucket` read a local folder `s3:`), an archive, an S3 client that cannot be made (each
    was a traceback); None where it names one."""
    try:
        known_protocol(uri)
    except UnknownProtocol as error:
        return str(error)
    if problem := archive_problem(uri):
        return problem
    if refused := s3_client_refused(uri, options):
        return str(UnsuitedOptions.no_s3_client(uri, refused))
    return None


class NotInIndex(KeyError):
    """What was asked of an index (a source, a chunk) is not in it: a KeyError whose str() is its
    message (a KeyError's own str() quotes it)."""

    def __str__(self) -> str:
        return str(self.args[0])


class NotAnIndex(ValueError):
    """An index.json that is no index document at all: not JSON, or JSON without an `_embedded`
    object (a person's own file, which a build leaves as it is: INDEX_JSON_FAILED)."""


Parsed = TypeVar("Parsed")
Version = tuple[int, int, int]  # a local file's inode, size and modification time in ns
SETTLED_NS = 2_000_000_000  # a file's age from which its parse is kept (`read_parsed`)


@dataclass(frozen=True)
class IndexReader:
    """An index's output root on any fsspec filesystem (a local path, s3://..., http(s)://...).
    `kept`: where a reader that answers many questions (`mdindex serve --search`) keeps what it
    parsed of a local root's files (`read_parsed`); None: each read parses again. `fetched`:
    what a reader of a remote root (any but a local one) has read of its files, each file's
    bytes (None: it does not exist) read once in the reader's life (`read`)."""

    fs: AbstractFileSystem
    root: str
    kept: dict[str, tuple[Version, Any]] | None = field(default=None, compare=False, repr=False)
    fetched: dict[str, bytes | None] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def open(cls, uri: str, storage_options: dict | None = None, keep: bool = False) -> IndexReader:
        """A reader for the index rooted at `uri`; `keep`: one that keeps what it parsed of a
        local root's files (`read_parsed`). ValueError for a `uri` that names an index.json
        (`named_index_json`)."""
        if named := named_index_json(uri):
            raise ValueError(named)
        fs, root = root_filesystem(uri, web_options(uri, storage_options))
        return cls(fs=fs, root=root, kept={} if keep else None)

    @property
    def web(self) -> bool:
        """Whether the index is read over http(s)."""
        return bool(protocols_of(self.fs) & {"http", "https"})

    def _path(self, relpath: str) -> str:
        """Where the filesystem finds an output-root-relative path (URL-encoded over HTTP)."""
        return f"{self.root}/{href_of(relpath) if self.web else relpath}"

    def location(self, relpath: str) -> str:
        """The full path or URL of an output-root-relative path, as a message names it."""
        return self.fs.unstrip_protocol(self._path(relpath))

    def href(self, relpath: str) -> str:
        """The URL of an output-root-relative file, as a client would fetch it: `location`, but a
        local file's is a percent-encoded file: URI (a `#`, `?` or `%` of a name is the path's)."""
        if isinstance(self.fs, LocalFileSystem):
            return Path(self._path(relpath)).as_uri()
        return self.location(relpath)

    def _inside(self, relpath: str) -> None:
        """ValueError naming an output-root-relative path that leads out of the root."""
        if relpath.startswith("/") or ".." in relpath.split("/"):
            raise ValueError(f"{self.location(relpath)} leads out of the index: it is damaged")

    def read(self, relpath: str) -> bytes | None:
        """The bytes of an output-root-relative file, or None when it does not exist; ValueError
        naming a path that leads out of the root (a damaged index's `../` href, which
        `--show` printed: any file of a local root's machine); UnsuitedOptions when the
        filesystem's client refuses an option the reader was opened with. An http(s) server's
        403 is a file's absence too: S3 answers a key it lacks so where the reader may not list
        its bucket. A remote root's file is read once in the reader's life (`fetched`): one
        `mdindex query` read the root index.json up to 4 times (the links to the corpus files,
        then the topics), each an HTTP request, on S3 a billed GET. A failed read is not kept."""
        self._inside(relpath)
        if isinstance(self.fs, LocalFileSystem):
            return self._fetch(relpath)
        if relpath not in self.fetched:
            self.fetched[relpath] = self._fetch(relpath)
        return self.fetched[relpath]

    def _fetch(self, relpath: str) -> bytes | None:
        """`read` of an output-root-relative file inside the root, from its filesystem: one GET
        on S3 (`cat_one`; s3fs's own `cat_file` sent a HEAD before it, and a LIST after a HEAD
        that found nothing)."""
        import aiohttp  # fsspec's http client, whose errors a read over http(s) raises

        path = self._path(relpath)
        try:
            return cat_one(self.fs, path)
        except FileNotFoundError:
            return None
        except aiohttp.ClientResponseError as error:
            if error.status != 403:  # S3 behind https://: AccessDenied for a key it lacks
                raise
            return None
        except TypeError as error:  # an option the client refused: aiohttp's, aiobotocore's
            raise UnsuitedOptions.at(self.location(""), error) from error

    def read_parsed(self, relpath: str, parse: Callable[[bytes | None], Parsed]) -> Parsed:
        """`parse` of the bytes of an output-root-relative file (None when it does not exist), as
        `read` reads them (a remote root's once, parsed again at each call). A reader that keeps
        (`kept`) a local file's parse gives it again while the file is the version it was parsed
        from: its inode, size and modification time, taken from the open file it reads (a build
        replaces a file whole, by a rename: a new inode).
        A file modified less than `SETTLED_NS` before it is read is not kept (git's rule for
        "racy" files): a rewrite in place within the clock's tick, to the same size, would pass
        for the version kept. A parse that fails is not kept. Each path is parsed one way, and
        what is kept is shared: never changed by its caller."""
        if self.kept is None or not isinstance(self.fs, LocalFileSystem):
            return parse(self.read(relpath))
        self._inside(relpath)
        try:
            handle = open(self._path(relpath), "rb")
        except FileNotFoundError:
            self.kept.pop(relpath, None)  # a deleted topic's files: not kept for ever
            return parse(None)
        with handle:
            stat = os.fstat(handle.fileno())
            version = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
            kept = self.kept.get(relpath)
            if kept is not None and kept[0] == version:
                return kept[1]
            value = parse(handle.read())
        if time.time_ns() - stat.st_mtime_ns >= SETTLED_NS:
            self.kept[relpath] = (version, value)
        else:
            self.kept.pop(relpath, None)
        return value

    def parsed(self, relpath: str, data: bytes) -> Any:
        """`data`, the bytes of an output-root-relative file, parsed as JSON; ValueError naming
        the file when they are not UTF-8 JSON (truncated, damaged, nested deeper than the parser
        goes)."""
        try:
            return json.loads(data)
        except (ValueError, RecursionError) as error:  # JSONDecodeError, UnicodeDecodeError
            raise ValueError(f"{self.location(relpath)} is not JSON: {error}") from error

    def index(self, topic: str) -> dict[str, Any]:
        """The parsed index.json of a topic or directory; FileNotFoundError naming it if absent
        (naming the root instead when the root has no index.json either, or when the root's is
        a folder's of an index: opened below its root, no topic it links is found),
        NotAnIndex naming it when it is not an index (not JSON; `[]`, say), ValueError when it is
        damaged (naming the field: `index_problem`). A topic may be spelled as a person does
        (`topic_id`)."""
        topic = topic_id(topic)
        return self.read_parsed(in_topic(topic, INDEX), partial(self._index, topic))

    def _index(self, topic: str, data: bytes | None) -> dict[str, Any]:
        """`index` of the topic id `topic`, whose index.json holds `data` (None: it has none)."""
        relpath = in_topic(topic, INDEX)
        if data is None and (not topic or self.read(INDEX) is None):  # a root mistyped, say
            if missing_bucket(self.fs, self.root):
                raise FileNotFoundError(f"{self.fs.unstrip_protocol(self.root)}: no such bucket")
            refused = " (or the server refused it: a 403 reads as missing)" if self.web else ""
            raise FileNotFoundError(
                f"{self.location('')} holds no index: it has no index.json{refused}"
            )
        if data is None:
            raise FileNotFoundError(f"no index.json for topic {topic!r} under {self.location('')}")
        try:
            doc = self.parsed(relpath, data)
        except ValueError as error:
            raise NotAnIndex(str(error)) from error
        if not is_index_document(doc):
            raise NotAnIndex(f"{self.location(relpath)} is {NOT_AN_INDEX}")
        problem = index_problem(doc)
        if problem:
            raise ValueError(f"{self.location(relpath)} is damaged: {problem}")
        if not topic and doc["id"]:  # links name topics by their ids from the index's root
            raise FileNotFoundError(
                f"{self.location('')} is the folder {doc['id']!r} of an index, not its root: "
                f"give the folder that holds {doc['id'].split('/')[0]!r}"
            )
        return doc

    def _found_index(self, topic: str, data: bytes | None) -> dict[str, Any] | None:
        """`_index` of a topic whose index.json holds `data`, or None when it has none."""
        return None if data is None else self._index(topic, data)

    def topic(self, topic: str) -> dict[str, Any]:
        """`index` of a topic that holds sources; NotInIndex naming the topics below it when it
        is a folder of topics alone (a directory index, whose stripe orders are none)."""
        return _holding_sources(topic, self.index(topic))

    def spelled(self, folder: str) -> tuple[str, dict[str, Any]]:
        """`folder` (a topic, or a folder of topics) as the index spells it, and its `index`: the
        topic id (`topic_id`), or that id in the other Unicode normal form where only that one has
        an index.json (a folder named on macOS is NFD, `cafe` and U+0301, which a copy keeps,
        while a keyboard types NFC, U+00E9). Each index.json is read once; a name the same in
        both forms (ASCII) probes no other."""
        folder = topic_id(folder)
        for form in spellings((folder,)):
            doc = self.read_parsed(in_topic(form, INDEX), partial(self._found_index, form))
            if doc is not None:
                return form, doc
        return folder, self._index(folder, None)

    def spelled_topic(self, topic: str) -> tuple[str, dict[str, Any]]:
        """`spelled` of a topic that holds sources (`topic`)."""
        form, doc = self.spelled(topic)
        return form, _holding_sources(form, doc)

    def topics(self) -> list[str]:
        """Ids of every topic with chunks, found by walking `_embedded.topics` from the root
        (each topic once, however many links lead to it: a damaged index can link in a cycle).
        A linked topic without an index.json is left out: while a build runs, or after one
        stopped, a folder can link a new topic not yet written (a root without one is named).
        So is one whose index.json is no index (`NotAnIndex`): a person's own file, which the
        build leaves as it is, failing that topic alone (every question over the index failed)."""
        found, pending, seen = [], [""], {""}
        while pending:
            topic = pending.pop()
            try:
                doc = self.index(topic)
            except (FileNotFoundError, NotAnIndex):
                if not topic:
                    raise
                continue
            if "chunks" in doc["_embedded"]:
                found.append(topic)
            links = [link["id"] for link in doc["_embedded"]["topics"]]
            pending += [child for child in links if child not in seen]
            seen.update(links)
        self._forget_beyond(seen)
        return sorted(found)

    def _forget_beyond(self, linked: set[str]) -> None:
        """Drop what a keeping reader kept of the topics the walk from the root no longer
        reaches (`linked`: the topics it reaches): a topic a rebuild deleted or moved, whose
        index.json and chunk table were kept until the server stopped."""
        if self.kept is None:
            return
        live = {
            path for topic in linked for path in (in_topic(topic, INDEX), chunk_table_path(topic))
        }
        for relpath in list(self.kept):  # a copy: other threads add to it meanwhile
            if relpath not in live and relpath != EMBEDDING_SETTINGS:
                self.kept.pop(relpath, None)


def _holding_sources(topic: str, doc: dict[str, Any]) -> dict[str, Any]:
    """`doc`, the index of `topic`, when it holds sources; NotInIndex otherwise (`topic`)."""
    if "chunks" not in doc["_embedded"]:
        below = [link["id"] for link in doc["_embedded"]["topics"]]
        raise NotInIndex(f"{topic!r} is a folder of topics, not a topic; it links {below}")
    return doc


@dataclass(frozen=True)
class Selection:
    """The chunks picked from one source, in the order they were picked."""

    source: str
    order: str  # "conceptual" | "technical"
    items: list[dict[str, Any]]


def select_chunks(
    index: dict[str, Any], n: int, source: str | None = None, technical: bool = False
) -> list[Selection]:
    """The first `n` chunks of each source (or of `source`) in stripe order.

    `technical` uses `stripe_order_technical` where a source has one, else the conceptual order.
    Stripe orders leave the baselines out; they follow the stripe order (the order's own
    baseline first: the technical one after the technical order), so a source of one chunk
    still gives its chunk. `index` is of the shape `IndexReader.index` checks.
    ValueError for a negative `n` (`order[:-1]` gave every chunk but the last).
    """
    if n < 0:
        raise ValueError(f"n must be 0 or more chunks per source, got {n}")
    chunks = index["_embedded"].get("chunks", {})
    if source is not None and source not in chunks:
        stored = _spelled_otherwise(source, chunks)
        if stored is None:
            names = sorted(chunks)
            raise NotInIndex(f"topic {index['id']!r} has no source {source!r}; it has {names}")
        source = stored
    selected = []
    for stem, entry in chunks.items():
        if source is not None and stem != source:
            continue
        use_technical = technical and "stripe_order_technical" in entry
        order = entry["stripe_order_technical" if use_technical else "stripe_order"]
        items = {item["index"]: item for item in entry["items"]}
        baselines = (entry["baseline_conceptual"], entry.get("baseline_technical"))
        baselines = baselines[::-1] if use_technical else baselines  # the order's own first
        order = order + [i for i in baselines if i in items and i not in order]
        picked = [items[i] for i in order[:n]]
        selected.append(Selection(stem, "technical" if use_technical else "conceptual", picked))
    return selected


def _spelled_otherwise(name: str, names: Iterable[str]) -> str | None:
    """The one of `names` that is `name` in another Unicode normal form, or None: macOS names a
    file in NFD (`cafe` and U+0301), which a copy keeps, while a keyboard types NFC (U+00E9)."""
    key = unicodedata.normalize("NFC", name)
    found = [other for other in names if unicodedata.normalize("NFC", other) == key]
    return found[0] if len(found) == 1 else None


def corpus_link(reader: IndexReader, rel: str, template: bool = False) -> str | None:
    """The output-root-relative path that the root index.json links as `rel`
    (`indexing.hal.corpus_links`; a `template`'s holds `TOPIC_SLUG`), or None where it links
    none: an index built before 2026-12-01, or whose root index.json is none or a person's own
    (the reader then takes the path the build writes). ValueError naming the root's index.json
    when the link is damaged (no root-absolute href, a template without `TOPIC_SLUG`)."""
    try:
        root = reader.index("")
    except (FileNotFoundError, NotAnIndex):
        return None
    links = root.get("_links")
    link = links.get(rel) if isinstance(links, dict) else None
    if link is None:
        return None
    href = link.get("href") if isinstance(link, dict) else None
    if not is_text(href) or not href.startswith("/") or href.startswith("//"):
        problem = "has no root-absolute href"
    elif template and TOPIC_SLUG not in href:
        problem = f"is no template of {TOPIC_SLUG}"
    else:
        return href_path(href[1:])
    raise ValueError(f"{reader.location(INDEX)} is damaged: _links[{rel!r}] {problem}")


def question_matches(
    reader: IndexReader, question: str, topic: str | None = None
) -> list[SimhashMatch]:
    """Stored prompts within the corpus tables' distance k of the question's SimHash, from the
    tables the root index.json links (`corpus_link`); ValueError naming a table that is damaged
    (not UTF-8 JSON, a bad k)."""
    read: list[str] = []
    manifest = corpus_link(reader, SIMHASH_REL) or SIMHASH_MANIFEST
    folder = posixpath.dirname(manifest)

    def fetch(relpath: str) -> bytes | None:
        """A table file's bytes: the manifest the root links, its shards beside it."""
        if relpath == SIMHASH_MANIFEST:
            relpath = manifest
        else:
            relpath = posixpath.join(folder, relpath.removeprefix(f"{SIMHASH_ROOT}/"))
        read.append(relpath)
        return reader.read(relpath)

    try:
        matches = lookup_simhash(fetch, simhash64(question))
    except (ValueError, RecursionError) as error:  # the file read last is the one being parsed
        raise ValueError(f"{reader.location(read[-1])}: {error}") from error
    return [m for m in matches if topic is None or m.topic == topic]


@dataclass(frozen=True)
class ChunkHit:
    """One chunk found by embedding search; `path`: its file, output-root-relative (from the
    same row of the chunk table as its vector)."""

    topic: str
    source: str
    index: int
    title: str
    score: float
    path: str


EmbedQuery = Callable[[str, str], np.ndarray]  # (model name, question) -> query vector

# `load_embedder` options that change vectors, recorded by the build. A query honours all of them
# but trust_remote_code: an index never makes its reader run a model's own code.
VECTOR_OPTIONS = ("dtype", "pooling", "normalize", "max_length", "query_prefix", "revision")
RECORDED_OPTIONS = (*VECTOR_OPTIONS, "trust_remote_code")
SETTINGS_FIELDS = {"model": "string", "options": "object"}
OPTION_FIELDS = {
    "dtype?": "string",
    "pooling?": "string",
    "normalize?": "bool",
    "max_length?": "int",
    "query_prefix?": "string",
    "revision?": "string",
    "trust_remote_code?": "bool",
}


def embedding_settings(model: str, options: dict[str, Any]) -> bytes:
    """`_index/model.json`: the model and the options that change its vectors (None left out)."""
    recorded = {k: options[k] for k in RECORDED_OPTIONS if options.get(k) is not None}
    return (
        json.dumps({"model": model, "options": recorded}, indent=1, sort_keys=True) + "\n"
    ).encode()


def _recorded_settings(reader: IndexReader, relpath: str, data: bytes | None) -> dict[str, Any]:
    """The parsed `_index/model.json` of `reader`'s index (at `relpath`), which holds `data`
    (None: there is none, `{}`); ValueError naming it when it is not JSON or is damaged (a field
    of another kind than the build writes)."""
    if data is None:
        return {}
    recorded = reader.parsed(relpath, data)
    problem = bad_field("the document", recorded, SETTINGS_FIELDS) or bad_field(
        "options", recorded["options"], OPTION_FIELDS
    )
    if problem:
        raise ValueError(f"{reader.location(relpath)} is damaged: {problem}")
    return recorded


def query_embedder(reader: IndexReader) -> EmbedQuery:
    """Embeds a question the way the index was built: with `_index/model.json`'s options when it
    names the model asked for, else with the model's defaults. The model is loaded on its first
    question and kept while the model asked for and the options recorded for it stay the same;
    the file, the one the root index.json links (`corpus_link`), is read at every question (a
    reader that keeps its parses reads it again only once it changed), so a rebuild with
    another model or other options loads that one in its place (`mdindex serve --search`
    answered with the old one's vectors, or with the new model under the defaults, until it
    was restarted). ValueError naming the file when it is damaged or loading the model with
    its options fails (the loader refuses a value)."""
    held: dict[tuple[str, tuple], Any] = {}  # one model at most: (model, options) -> embedder

    def embed(model: str, question: str) -> np.ndarray:
        relpath = corpus_link(reader, MODEL_REL) or EMBEDDING_SETTINGS
        recorded = reader.read_parsed(relpath, partial(_recorded_settings, reader, relpath))
        options = recorded.get("options", {}) if recorded.get("model") == model else {}
        options = {k: v for k, v in options.items() if k in VECTOR_OPTIONS}
        from embedding.keys import resolve_device

        if options.get("dtype") == "fp16" and resolve_device("auto") == "cpu":
            options["dtype"] = "auto"  # a GPU's fp16: under autocast on a CPU, 3.8x fp32's time
        key = (model, tuple(sorted(options.items())))
        if key not in held:
            from embedding import load_embedder

            held.clear()  # the model of the settings before, released before the next loads
            try:
                held[key] = load_embedder(model, **options)
            except ValueError as error:  # a recorded option's value (a dtype of "x"), say
                if not options:
                    raise
                where = reader.location(relpath)
                raise ValueError(
                    f"{error} (loading {model!r} with the options of {where})"
                ) from error
        return held[key].embed([question], query=True)[0]

    return embed


CHUNK_COLUMNS = ("topic", "source", "ordinal", "title", "href", "model", "embedding")  # searched


def searched_columns(data: bytes) -> pa.Table:
    """`CHUNK_COLUMNS` of a chunk-table shard's bytes; ValueError (or an Arrow error) when they
    are not a chunk table's: a column missing, of another type than the build writes (vectors of
    any width), holding a null, or vectors holding a NaN or an infinity (the build refuses
    those)."""
    parquet = pq.ParquetFile(pa.BufferReader(data))
    missing = [name for name in CHUNK_COLUMNS if name not in parquet.schema_arrow.names]
    if missing:
        raise ValueError(f"no column {missing[0]!r}")
    table = parquet.read(columns=list(CHUNK_COLUMNS))
    vectors = table.schema.field("embedding").type
    written = chunk_table_schema(vectors.list_size if pa.types.is_fixed_size_list(vectors) else 1)
    for name in CHUNK_COLUMNS:
        column = table.column(name)
        if column.type != written.field(name).type:
            raise ValueError(f"column {name!r} is of type {column.type}")
        if column.null_count or (name == "embedding" and pc.list_flatten(column).null_count):
            raise ValueError(f"column {name!r} holds a null")
    if pc.any(pc.invert(pc.is_finite(pc.list_flatten(table.column("embedding"))))).as_py():
        raise ValueError("column 'embedding' holds a NaN or an infinity")
    return table


def _expanded(template: str, topic: str) -> str:
    """The output-root-relative path of a topic's table from the path template the root links."""
    return template.replace(TOPIC_SLUG, topic_slug(topic))


def _vectors(table: pa.Table) -> str:
    """What a chunk table's vectors are, as an error names them: their width and model."""
    width = table.schema.field("embedding").type.list_size
    return f"{width}-dimensional vectors of {table['model'][0].as_py()!r}"


def _chunk_table(where: str, data: bytes | None) -> pa.Table | None:
    """`searched_columns` of the chunk-table shard at `where`, which holds `data` (None: the
    topic has none); ValueError naming it when it is not a chunk table."""
    if data is None:
        return None
    try:
        return searched_columns(data)
    except (ValueError, pa.ArrowException) as error:
        raise ValueError(f"{where} is not a chunk table: {error}") from error


def chunk_tables(reader: IndexReader, topics: list[str]) -> pa.Table | None:
    """The chunk-table shards of `topics` (those that exist; where the root index.json links
    them, `corpus_link`) as one table, or None; ValueError naming a shard that is not a chunk
    table (truncated, damaged: `searched_columns`) or whose vectors are of another width than
    those of the shard before it (another model's)."""
    tables: dict[str, pa.Table] = {}
    linked = corpus_link(reader, CHUNK_TABLE_REL, template=True)
    for topic in topics:
        relpath = chunk_table_path(topic) if linked is None else _expanded(linked, topic)
        table = reader.read_parsed(relpath, partial(_chunk_table, reader.location(relpath)))
        if table is not None and table.num_rows:
            tables[reader.location(relpath)] = table
    for (previous, before), (where, table) in pairwise(tables.items()):
        if table.schema != before.schema:  # the columns' types are the build's: the widths differ
            raise ValueError(f"{where} holds {_vectors(table)}, {previous} {_vectors(before)}")
    return pa.concat_tables(tables.values()) if tables else None


def ranked_chunks(table: pa.Table, question: str, embed: EmbedQuery) -> Iterator[ChunkHit]:
    """The chunks of `table` from the nearest the question (embedded by the model the table
    records) on: by score rounded to 6 places, then by row; each row read as it is reached.
    ValueError, at the first, when the table holds several models or vectors of another width
    than the model's."""
    models = sorted(set(table.column("model").to_pylist()))
    if len(models) != 1:
        raise ValueError(f"the chunk tables were built with several models: {models}")
    query = unit_rows(np.asarray(embed(models[0], question), dtype=np.float32)[None, :])[0]
    embeddings = table.column("embedding").combine_chunks()
    if embeddings.type.list_size != len(query):
        raise ValueError(
            f"the index was built with {embeddings.type.list_size}-dimensional vectors, "
            f"model {models[0]!r} gives {len(query)}"
        )
    matrix = _float32_matrix(embeddings)
    scores = (unit_rows(matrix) @ query).tolist()  # Python floats: numpy's, one by one, cost
    nearest = [-round(score, 6) for score in scores]
    named = table.select(["topic", "source", "ordinal", "title", "href"])
    for i in sorted(range(len(table)), key=nearest.__getitem__):  # a stable sort: then by row
        row = named.slice(i, 1).to_pylist()[0]  # `take` imports pandas, as below
        yield ChunkHit(
            topic=row["topic"],
            source=source_stem(row["source"]),
            index=row["ordinal"],
            title=row["title"],
            score=round(scores[i], 4),
            path=href_path(row["href"]),
        )


def _float32_matrix(vectors: pa.FixedSizeListArray) -> np.ndarray:
    """A chunk table's vectors (float32, as `searched_columns` checked) as a rows x width array,
    read from the Arrow buffer: pyarrow's `to_numpy` (and `take`, `pa.array` of numbers) imports
    pandas on its first call: 0.13-0.2 s of every question's time on the 2-core EPYC (0.8 s on
    one busy with other work) for nothing pandas does."""
    values = vectors.flatten()  # the array's own rows, whatever its offset
    flat = np.frombuffer(
        values.buffers()[1], dtype=np.float32, count=len(values), offset=values.offset * 4
    )
    return flat.reshape(len(vectors), vectors.type.list_size)


def current_matches(
    reader: IndexReader, matches: list[SimhashMatch]
) -> Iterator[tuple[SimhashMatch, dict[str, Any]]]:
    """Each SimHash match with its chunk's `items` entry in its topic's index.json, leaving a
    stale one out. The corpus tables are rewritten at a build's end, after every topic's switch,
    so while a build runs (or after one stopped) they can name a topic since deleted or a chunk
    since renumbered; a match holds while its chunk lists the match's hash in `prompt_hashes`.
    A topic whose index.json is no index (`NotAnIndex`) holds none, as `IndexReader.topics`
    leaves it out."""
    indexes: dict[str, dict[str, Any] | None] = {}
    for match in matches:
        if match.topic not in indexes:
            try:
                indexes[match.topic] = reader.index(match.topic)
            except (FileNotFoundError, NotAnIndex):  # as `IndexReader.topics` leaves it out
                indexes[match.topic] = None
        index = indexes[match.topic]
        chunks = {} if index is None else index["_embedded"].get("chunks", {})
        items = chunks.get(match.source, {}).get("items", [])
        item = next((item for item in items if item["index"] == match.index), None)
        if item is not None and match.hash in item.get("prompt_hashes", ()):
            yield match, item
