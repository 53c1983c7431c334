"""Chunk files written by the chunk tasks, ahead of the topic reduce (`jobs.stages.chunk_files`):
only for topics with no index.json yet, all of a batch or none. Real files on local disk."""

from __future__ import annotations

from pathlib import Path

from chunking import chunk_source
from indexing.paths import chunk_file
from jobs.stages.chunk_files import write_chunk_files
from jobs.stages.topic import switch
from jobs.storage import Storage

TEXT = (
    "# Retries\n\nThe client retries a request after a timeout, with a growing delay.\n\n"
    "## Settings\n\nSet the retry count and the base delay in the client options.\n"
)


def chunked(path: str):
    return chunk_source(TEXT.encode(), strategy="structural", document_id=path, document_path=path)


def files_under(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_new_topic_gets_its_chunk_files_and_a_topic_with_an_index_does_not(tmp_path):
    output = tmp_path / "out"
    (output / "old").mkdir(parents=True)
    (output / "old" / "index.json").write_text("{}")
    docs = [chunked("new/a.md"), None, chunked("old/b.md"), chunked("new/c.md")]
    assert docs[0].chunks

    written = write_chunk_files(
        ["new", "new", "old", "new"],
        ["new/a.md", "new/failed.md", "old/b.md", "new/c.md"],
        docs,
        Storage(str(output)),
    )

    expected = {
        f"new/{chunk_file(stem, i, chunk.text)}": chunk.text.encode()
        for stem, doc in (("a", docs[0]), ("c", docs[3]))
        for i, chunk in enumerate(doc.chunks)
    }
    assert written[1] is None and written[2] is None  # failed source; topic with an index.json
    assert sorted(written[0] + written[3]) == sorted(expected)
    assert files_under(output) == {**expected, "old/index.json": b"{}"}


def test_a_chunk_folder_linked_outside_the_root_gets_nothing(tmp_path):
    output = tmp_path / "out"
    outside = tmp_path / "outside"
    outside.mkdir()
    (output / "a").mkdir(parents=True)
    (output / "b").mkdir(parents=True)
    (output / "b" / "_chunks").symlink_to(outside, target_is_directory=True)

    written = write_chunk_files(
        ["a", "b"],
        ["a/x.md", "b/y.md"],
        [chunked("a/x.md"), chunked("b/y.md")],
        Storage(str(output)),
    )

    assert written == [None, None]  # left to the reduce, which refuses and names the path
    assert list(outside.iterdir()) == []
    assert not (output / "a" / "_chunks").exists()  # nothing of the batch was written


def test_a_linked_index_counts_as_an_index(tmp_path):
    output = tmp_path / "out"
    (output / "t").mkdir(parents=True)
    (output / "t" / "index.json").symlink_to(tmp_path / "nowhere.json")

    written = write_chunk_files(["t"], ["t/a.md"], [chunked("t/a.md")], Storage(str(output)))

    assert written == [None]
    assert not (output / "t" / "_chunks").exists()


def test_a_switch_to_a_version_without_chunks_removes_the_emptied_chunk_folder(tmp_path):
    """`switch` (the topic reduce's writes): when the new version has no chunk files, the old
    ones go and so does their folder, as a fresh build makes none; with chunk files it stays."""
    output = tmp_path / "out"
    old = "t/_chunks/retries-0123456789abcdef-0.md"
    for path in (old, "u/_chunks/retries-0123456789abcdef-0.md"):
        (output / path).parent.mkdir(parents=True)
        (output / path).write_text("old text")
    storage = Storage(str(output))

    switch(storage, "t", {"t/index.json": b"{}"}, named=frozenset({old}), live={"t/index.json"})
    kept = "u/_chunks/retries-fedcba9876543210-0.md"
    files = {"u/index.json": b"{}", kept: b"new"}
    switch(storage, "u", files, named=frozenset(), live=set(files))

    assert files_under(output) == {"t/index.json": b"{}", "u/index.json": b"{}", kept: b"new"}
    assert not (output / "t" / "_chunks").exists()
