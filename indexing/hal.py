"""HAL+JSON index documents (seed 000 "Index.json Schema Extensions"), byte-deterministic."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from typing import Any

import orjson

from chunking.normalize import decode
from chunking.record import ChunkingError
from indexing.paths import (
    CHUNK_TABLES,
    DOCUMENT_TABLES,
    EMBEDDING_SETTINGS,
    index_href,
    parent_of,
    root_href,
)
from indexing.simhash_tables import MANIFEST as SIMHASH_MANIFEST

ROOT_TITLE = "Index"
NOT_AN_INDEX = "not an mdindex index (no _embedded object)"
NOT_JSON = "not JSON ("  # how `not_an_index` starts for a file that is no JSON
# The failure a build reports for an index.json it did not write, which it leaves as it is (a
# person's own, or a symbolic link; `jobs.stages.topic`)
INDEX_JSON_FAILED = "INDEX_JSON_FAILED"
# The root index.json's link relations to the corpus-wide files (HAL CURIEs: "mdindex:model" is
# the relation `RELATIONS` names with "model"; `corpus_links`). The chunk and documents tables
# are one per topic: their links are URI templates of `TOPIC_SLUG` (`indexing.paths.topic_slug`).
CURIE = "mdindex"
# No site documents the relations (RFC 6761's .invalid, as tests/schemas' `$id`): the README does
RELATIONS = "https://mdindex.invalid/rels/{rel}"
MODEL_REL = f"{CURIE}:model"
SIMHASH_REL = f"{CURIE}:simhash"
CHUNK_TABLE_REL = f"{CURIE}:chunk-table"
DOCUMENT_TABLE_REL = f"{CURIE}:document-table"
TOPIC_SLUG = "{topic_slug}"


def dump_json(doc: Any) -> bytes:
    """Deterministic JSON: keys in insertion order, 2-space indent, UTF-8, trailing newline.

    orjson writes the bytes `json.dumps(doc, ensure_ascii=False, indent=2)` would, 30x faster (an
    index.json of 4,600 sources took the stdlib's pure-Python indenting encoder 0.5 s). The two
    spell a float alike in positional notation, which every float of an index has: they are
    cosines rounded to 4 decimals (`indexing.stripes`, `indexing.questions`)."""
    return orjson.dumps(
        doc, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS
    )


def directory_title(directory: str) -> str:
    """The fallback title of a directory: its name, or "Index" for the root."""
    return posixpath.basename(directory) or ROOT_TITLE


def links(directory: str) -> dict[str, Any]:
    """`_links` of a directory's index.json: self, and parent except at the root, which links
    the corpus-wide files instead (`corpus_links`)."""
    result = _own_links(directory)
    if directory == "":
        result.update(corpus_links())
    return result


def _own_links(directory: str) -> dict[str, Any]:
    """`links` without the root's `corpus_links`: all that an index.json linked before
    2026-12-01."""
    result: dict[str, Any] = {"self": {"href": index_href(directory)}}
    parent = parent_of(directory)
    if parent is not None:
        result["parent"] = {"href": index_href(parent)}
    return result


def corpus_links() -> dict[str, Any]:
    """The root index.json's links to the files of the whole output, for a client that starts
    there (a static site's, `mdindex serve`'s) and knows no path: the embedding settings that
    embed a question as the chunks were (`_index/model.json`), the SimHash tables' manifest (its
    shards beside it, `indexing.simhash_tables`) and, templated, a topic's chunk and documents
    tables (`{topic_slug}`: `indexing.paths.topic_slug`). Hrefs are root-absolute, as `self`."""
    return {
        "curies": [{"name": CURIE, "href": RELATIONS, "templated": True}],
        MODEL_REL: {"href": root_href(EMBEDDING_SETTINGS)},
        SIMHASH_REL: {"href": root_href(SIMHASH_MANIFEST)},
        CHUNK_TABLE_REL: {"href": _table_href(CHUNK_TABLES), "templated": True},
        DOCUMENT_TABLE_REL: {"href": _table_href(DOCUMENT_TABLES), "templated": True},
    }


def _table_href(folder: str) -> str:
    """The URI template of a topic's table shard in `folder`."""
    return f"{root_href(folder)}/{TOPIC_SLUG}.parquet"


def topic_links(child_topics: Iterable[str]) -> list[dict[str, Any]]:
    """`_embedded.topics`: one link per child directory, sorted by id."""
    return [
        {"id": child, "_links": {"self": {"href": index_href(child)}}}
        for child in sorted(set(child_topics))
    ]


def index_document(
    directory: str, title: str, child_topics: Iterable[str], chunks: dict[str, Any] | None
) -> dict[str, Any]:
    """The index.json document; `chunks` None leaves `_embedded.chunks` out (a plain directory)."""
    embedded: dict[str, Any] = {"topics": topic_links(child_topics)}
    if chunks is not None:
        embedded["chunks"] = chunks
    return {"id": directory, "title": title, "_links": links(directory), "_embedded": embedded}


def not_an_index(data: bytes, directory: str) -> str | None:
    """Why an existing `{directory}/index.json` is not an index this library wrote for that
    directory (a person's own file, say), or None when it is one."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return f"{NOT_JSON}{_json_problem(data, exc)})"
    if not is_index_document(doc):
        return NOT_AN_INDEX
    if doc.get("id") != directory:
        return f"the index of {doc.get('id')!r}, not of {directory!r}"
    return None


def _json_problem(data: bytes, error: orjson.JSONDecodeError) -> str:
    """Why `data` is no JSON, naming its line as a writer's editor goes to it: what
    `chunking.normalize.decode` says of bytes that are no UTF-8 text, as of a source's ("looks
    like UTF-16 (byte order mark FF FE); save it as UTF-8", "invalid UTF-8 at byte offset 9
    (line 2): ...": orjson put those at "line 1 column 1"), else orjson's reason "at line 3,
    column 9" (until 2026-11-30 "...: line 3 column 9 (char 20)", which no report read as a
    line: `jobs.report_html.failure_line`)."""
    try:
        decode(data)
    except ChunkingError as exc:
        return exc.message
    return f"{error.msg} at line {error.lineno}, column {error.colno}"


def moved_index(data: bytes, directory: str) -> bool:
    """Whether an existing `{directory}/index.json` is one this library wrote for another folder
    (its `id` and `_links` as written there): it came with its folder when a person moved or
    copied one (an in-place build's folder renamed), so it is the job's to replace, as if the
    folder had none. Its `_links` are this version's or, for a root, those of a build before
    2026-12-01 (no `corpus_links`)."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    if not is_index_document(doc) or not isinstance(found := doc.get("id"), str):
        return False
    return found != directory and doc.get("_links") in (links(found), _own_links(found))


def is_index_document(doc: Any) -> bool:
    """Whether parsed JSON has an index's shape: an object with an `_embedded` object."""
    return isinstance(doc, dict) and isinstance(doc.get("_embedded"), dict)


def directory_index(directory: str, child_topics: list[str]) -> bytes:
    """index.json of an ancestor directory that is not itself a topic."""
    return dump_json(index_document(directory, directory_title(directory), child_topics, None))


def set_child_topics(index_json: bytes, child_topics: list[str]) -> bytes:
    """The same index.json with `_embedded.topics` replaced by links to `child_topics`, and its
    `_links` as this version writes them (a root topic's of a build before 2026-12-01 gains its
    `corpus_links`)."""
    doc = orjson.loads(index_json)
    doc["_links"] = links(doc["id"])
    doc["_embedded"]["topics"] = topic_links(child_topics)
    return dump_json(doc)
