"""Stage 1c: write the chunk files of the sources just chunked, ahead of their topic's reduce, for
topics that have no index.json yet (a cold build, a new topic).

A chunk file's name holds one text for good (`indexing.paths.chunk_file`), and until the reduce
writes the topic's first index.json no reader is sent to it, so the chunk task writes it in place
while the embedding goes on: the reduce of a large topic no longer creates thousands of files after
its last row is embedded. The paths written travel in the row (`chunk_files`) and the reduce writes
only the others; its switch removes those that no index.json names in the end (a source that failed
after chunking). A topic that has an index.json is left to its reduce, which keeps every file that
index names whole for its readers. A write that fails here is left to the reduce too, which reports
it.
Reads `topic`, `path` and the chunked documents; writes `chunk_files`.
"""

from __future__ import annotations

import logging

from chunking import ChunkedDocument
from indexing.paths import INDEX, in_topic, source_chunk_files
from jobs.storage import Storage

log = logging.getLogger("mdindex.build")


def write_chunk_files(
    topics: list[str],
    paths: list[str],
    documents: list[ChunkedDocument | None],
    output: Storage,
) -> list[list[str] | None]:
    """Per row, the chunk files written for it (None: none, the reduce writes them). All files of
    the batch go in one `write_many` call; when it fails, none counts as written."""
    chunked = [i for i, doc in enumerate(documents) if doc is not None and doc.chunks]
    fresh = {t: not output.exists(in_topic(t, INDEX)) for t in {topics[i] for i in chunked}}
    written: list[list[str] | None] = [None] * len(documents)
    files: dict[str, bytes] = {}
    for i in chunked:
        if not fresh[topics[i]]:
            continue
        texts = [chunk.text for chunk in documents[i].chunks]
        names = [in_topic(topics[i], name) for name in source_chunk_files(paths[i], texts)]
        files.update(zip(names, (text.encode("utf-8") for text in texts), strict=True))
        written[i] = names
    if not files:
        return written
    try:
        output.write_many(files, in_place=True)
    except OSError as exc:  # OutsideRoot too: the reduce refuses it and names the path
        log.warning("chunk files left to the topic reduce: %s", exc)
        return [None] * len(documents)
    return written
