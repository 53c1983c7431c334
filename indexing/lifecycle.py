"""Seed 001's chunk lifecycle as planned deletions; the caller deletes once index.json is in place.

Order of operations for one topic: write the chunk files the live index.json does not name (a
chunk file's name holds its text's digest, so no file a reader may fetch is ever rewritten), then
index.json (the switch), then the table shards and topic-spec.md, then delete
`stale_files(existing, output.live_paths())`. A topic that lost all its sources: rewrite its
parent's index.json without it (`set_child_topics`), then delete `orphaned_topic_files(...)`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from indexing.paths import INDEX, href_path, in_topic, is_chunk_file, not_one_string


def stale_files(existing: Iterable[str], written: Iterable[str]) -> list[str]:
    """Chunk files among `existing` that the new index no longer refers to, sorted.

    Only paths of the form `.../_chunks/{stem}-{i}.md` are ever returned, so passing a whole
    directory listing cannot delete sources or hand-written files. TypeError for `written` given
    as one path, whose characters were each taken for a live file: the path itself was stale.
    """
    live = set(not_one_string("written", "paths", written))
    return sorted({p for p in existing if is_chunk_file(p) and p not in live})


def entry_files(topic: str, entry: dict[str, Any]) -> list[str]:
    """The chunk files (output-root-relative) of one source's `_embedded.chunks` entry."""
    return [in_topic(topic, href_path(item["href"])) for item in entry["items"]]


def named_files(topic: str, chunks: dict[str, Any]) -> frozenset[str]:
    """Every chunk file named by a topic index.json's `_embedded.chunks` (what its readers may
    fetch)."""
    return frozenset(path for entry in chunks.values() for path in entry_files(topic, entry))


def orphaned_topic_files(topic: str, existing: Iterable[str]) -> list[str]:
    """The index.json and chunk files of a topic that no longer has sources (or of a directory
    that no longer leads to any topic), among the `existing` output-root-relative paths."""
    index = in_topic(topic, INDEX)
    chunk_prefix = in_topic(topic, "_chunks/")
    return sorted(
        {p for p in existing if p == index or (p.startswith(chunk_prefix) and is_chunk_file(p))}
    )
