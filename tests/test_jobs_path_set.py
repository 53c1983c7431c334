"""The corpus's paths as the build hands them to its tasks (`jobs.path_set.PathSet`): the same
answers as a frozenset, and a task gets them from Ray's object store without a copy."""

from __future__ import annotations

import pickle
import random

import pytest

from chunking import chunk_source
from jobs.path_set import PathSet

PATHS = [
    "a.md",
    "a/b.md",
    "a/b.md.md",
    "ab.md",
    "docs/ü.md",
    "docs/日本.md",
    "docs/z.md",
    "..md",
    "a b/c.md",
]


def test_a_path_set_answers_as_a_frozenset_does():
    rng = random.Random(7)
    paths = PATHS + [f"t{rng.randint(0, 50)}/p{rng.randint(0, 500)}.md" for _ in range(400)]
    ours, theirs = PathSet.of(paths), frozenset(paths)
    assert len(ours) == len(theirs) and set(ours) == theirs
    probes = paths + ["", "a", "a/", "a/b", "b.md", "docs/ü", "zzz.md", "a\ud800.md", 3, None]
    probes += [f"t{rng.randint(0, 60)}/p{rng.randint(0, 600)}.md" for _ in range(400)]
    assert [p in ours for p in probes] == [p in theirs for p in probes]
    assert list(ours) == sorted(theirs, key=lambda p: p.encode())
    assert "a.md" not in PathSet.of([]) and len(PathSet.of([])) == 0
    assert set(pickle.loads(pickle.dumps(ours))) == theirs


def test_a_path_set_says_whether_a_folder_holds_a_path_as_a_scan_does():
    """`has_folder`: a listed folder, for a link to it (`jobs.broken_links`); `a` holds `a/b.md`,
    `a b` and `ab.md` (which sort between `a/` and its paths' byte neighbours) do not make it."""
    rng = random.Random(8)
    paths = PATHS + [f"t{rng.randint(0, 50)}/p{rng.randint(0, 500)}/x.md" for _ in range(400)]
    ours = PathSet.of(paths)
    folders = ["a", "a/b", "a b", "ab", "docs", "doc", "t1", "t10/p1", "..md", "", "a\ud800"]
    folders += [f"t{rng.randint(0, 60)}/p{rng.randint(0, 600)}" for _ in range(200)]
    scanned = [any(path.startswith(folder + "/") for path in paths) for folder in folders]
    assert [ours.has_folder(folder) for folder in folders] == scanned
    assert scanned[:4] == [True, False, True, False]


def test_chunking_resolves_links_against_a_path_set_as_against_a_frozenset():
    text = "# Page\n\nSee [b](b.md), [gone](gone.md) and [up](../a.md).\n"
    paths = ["docs/page.md", "docs/b.md", "a.md"]
    links = [
        [c.links for c in chunk_source(text, document_path="docs/page.md", corpus_paths=s).chunks]
        for s in (frozenset(paths), PathSet.of(paths))
    ]
    assert links[0] == links[1]
    targets = [link.target_document for chunk in links[1] for link in chunk]
    assert targets == ["docs/b.md", None, "a.md"]


@pytest.mark.usefixtures("ray_session")
def test_a_task_reads_the_paths_from_the_object_store_without_a_copy():
    """Its arrays are the object store's read-only memory, not copies unpickled in the task (a
    frozenset of every path was rebuilt in each chunk task and each topic's reduce)."""
    import ray

    @ray.remote
    def look_up(paths: PathSet, probes: list[str]) -> tuple[list[bool], bool]:
        return [p in paths for p in probes], paths.data.flags.writeable

    paths = PathSet.of(f"topic-{i // 10}/page-{i}.md" for i in range(50_000))
    probes = ["topic-3/page-31.md", "topic-3/page-310.md", "topic-4999/page-49999.md"]
    found, writeable = ray.get(look_up.remote(ray.put(paths), probes))
    assert found == [True, False, True]
    assert not writeable
