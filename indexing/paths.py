"""Where a topic's files live, relative to the output root, and the hrefs that point at them."""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Iterable
from typing import TypeVar
from urllib.parse import quote, unquote

INDEX = "index.json"
TOPIC_SPEC = "topic-spec.md"
CHUNKS_DIR = "_chunks"
CHUNK_TABLES = "_index/chunks"
DOCUMENT_TABLES = "_index/documents"
EMBEDDING_SETTINGS = "_index/model.json"  # the build's embedding settings, for a question's vector
ROOT_SLUG = "_root"
NAME_MAX = 255  # bytes in a file name on common filesystems (ext4, XFS, APFS; NTFS: 255 units)
_CHUNK_FILE = re.compile(r".+-\d+\.md", re.DOTALL)  # fullmatch: a name may hold a newline
_TEXT_DIGEST = re.compile(r"-([0-9a-f]{16})-\d+\.md\Z")
Strings = TypeVar("Strings", bound=Iterable[str])


def not_one_string(name: str, what: str, values: Strings) -> Strings:
    """`values`, a collection of strings; TypeError naming `name` for a single string, each of
    whose characters was taken for one of them (a glob `"*.md"` held `"*"`)."""
    if isinstance(values, str):
        raise TypeError(f"{name} must be a collection of {what}, got the string {values!r}")
    return values


def in_topic(topic: str, relpath: str) -> str:
    """`relpath` inside the topic directory, relative to the output root ("" is the root)."""
    return f"{topic}/{relpath}" if topic else relpath


def is_below(topic: str, folder: str) -> bool:
    """Whether the topic id `topic` is `folder` or a topic inside it ("" holds every topic)."""
    return not folder or topic == folder or topic.startswith(folder + "/")


def topic_id(name: str) -> str:
    """The topic id a person's spelling of it names: `guides/`, `/guides` and `./guides` are
    `guides`; `""` and `/` are the root; `..` leads nowhere above the root."""
    return posixpath.normpath("/" + name).strip("/")


def href_of(relpath: str) -> str:
    """The URL-encoded href of a path (`%`, `#`, `?`, spaces, newlines, non-ASCII escaped)."""
    return quote(relpath)


def href_path(href: str) -> str:
    """The path an href names (the inverse of `href_of`)."""
    return unquote(href)


def root_href(relpath: str) -> str:
    """The root-absolute href of an output-root-relative path, as `_links` name files."""
    return "/" + href_of(relpath)


def index_href(topic: str) -> str:
    """The root-absolute href of a topic's (or directory's) index.json."""
    return root_href(in_topic(topic, INDEX))


def parent_of(topic: str) -> str | None:
    """The parent directory id, or None for the root."""
    return None if topic == "" else posixpath.dirname(topic)


def source_stem(path: str) -> str:
    """A source's file name without its extension: `guides/intro.md` -> `intro`."""
    return posixpath.splitext(posixpath.basename(path))[0]


def shared_stems(paths: Iterable[str]) -> dict[str, list[str]]:
    """Each of a topic's source `paths` whose stem another one shares (`intro.md` beside
    `intro.mdx`), with the other file names. A stem names one source's index entry and chunk files,
    so such sources cannot be indexed side by side."""
    by_stem: dict[str, list[str]] = {}
    for path in paths:
        by_stem.setdefault(source_stem(path), []).append(path)
    return {
        path: sorted(posixpath.basename(other) for other in group if other != path)
        for group in by_stem.values()
        if len(group) > 1
        for path in group
    }


def chunk_file(stem: str, index: int, text: str) -> str:
    """A chunk file's path relative to its topic directory: `_chunks/{stem}-{digest}-{index}.md`.

    The digest (the first 16 hex digits of the SHA-256 of the file's bytes) makes a name hold one
    text for good: a chunk whose text changes gets a new file, never a rewrite of one that an
    index.json already names, and an unchanged chunk keeps its name. A stem too long for the name
    to fit `NAME_MAX` bytes is cut: the digest and the index still tell chunks apart."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    suffix = f"-{digest}-{index}.md"
    return f"{CHUNKS_DIR}/{_cut(stem, NAME_MAX - len(suffix))}{suffix}"


def _cut(name: str, room: int) -> str:
    """`name` cut to at most `room` bytes of UTF-8 (at a character's end), so that a file name
    made from it fits `NAME_MAX`; a name that fits is unchanged."""
    return name.encode("utf-8")[:room].decode("utf-8", "ignore")


def source_chunk_files(source_path: str, texts: list[str]) -> list[str]:
    """The chunk files of a source's chunk texts, in order, relative to its topic directory."""
    stem = source_stem(source_path)
    return [chunk_file(stem, index, text) for index, text in enumerate(texts)]


def text_digest(relpath: str) -> str | None:
    """The `{digest}` in a chunk file's name (`chunk_file`): the same for every chunk file of the
    same text, in any topic; None for a name without one (`{stem}-{i}.md`, format 2 and before)."""
    found = _TEXT_DIGEST.search(relpath)
    return found[1] if found else None


def is_chunk_file(relpath: str) -> bool:
    """Whether an output-root-relative path names a chunk file: `{topic}/_chunks/{name}-{i}.md`
    (`{stem}-{digest}-{i}.md`, or `{stem}-{i}.md` as outputs of format 2 and before named them)."""
    parent, name = posixpath.split(relpath)
    return posixpath.basename(parent) == CHUNKS_DIR and bool(_CHUNK_FILE.fullmatch(name))


def topic_slug(topic: str) -> str:
    """File-name-safe, collision-free name of a topic for its table shards.

    Every "~" is doubled, then every "/" becomes "~s" (so "guides/intro" -> "guides~sintro"); the
    mapping is reversible. The root topic "" is "_root", which no topic can be (folders starting
    with "_" hold no topics). A slug too long for its shard's file name (`NAME_MAX` bytes with
    ".parquet") is cut and ends in "~h" and 16 hex digits of the topic's SHA-256 instead.
    """
    if topic == "":
        return ROOT_SLUG
    slug = topic.replace("~", "~~").replace("/", "~s")
    room = NAME_MAX - len(".parquet")
    if len(slug.encode("utf-8")) <= room:
        return slug
    digest = hashlib.sha256(topic.encode("utf-8")).hexdigest()[:16]
    return f"{_cut(slug, room - 18)}~h{digest}"


def chunk_table_path(topic: str) -> str:
    """Output-root-relative path of a topic's chunk table shard."""
    return f"{CHUNK_TABLES}/{topic_slug(topic)}.parquet"


def document_table_path(topic: str) -> str:
    """Output-root-relative path of a topic's documents table shard."""
    return f"{DOCUMENT_TABLES}/{topic_slug(topic)}.parquet"
