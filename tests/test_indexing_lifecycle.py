"""Seed 001 chunk lifecycle on real files: a source shrinks, a source goes, a topic empties."""

from __future__ import annotations

import json

import pytest
from indexing_support import listing, ranked_vectors, source, topic_input, write_index, write_topic

from indexing import (
    IndexSettings,
    build_topic,
    directory_index,
    index_tree,
    orphaned_topic_files,
    set_child_topics,
    stale_files,
    topic_spec_without_section,
)
from indexing.paths import chunk_file, topic_slug
from indexing.topic_spec import render_section

TOPIC = "guides/intro"


def chunks(count: int) -> list[tuple[str, str]]:
    return [(f"Part {i}", f"Body {i}.") for i in range(count)]


def chunk_path(stem: str, i: int, body: str | None = None) -> str:
    """Where chunk i of `chunks(...)` (or with another body) lives, output-root-relative."""
    return f"{TOPIC}/" + chunk_file(stem, i, f"## Part {i}\n\n{body or f'Body {i}.'}")


def vectors(count: int):
    return ranked_vectors([1.0] + [0.9 - i / 100 for i in range(1, count)])


def build(sources, previous=None, spec=None, topic=TOPIC):
    return build_topic(topic_input(topic, sources, previous=previous, spec=spec), IndexSettings())


def test_a_shrinking_source_loses_its_surplus_chunk_files(tmp_path):
    path = f"{TOPIC}/golden-reference.md"
    write_index(tmp_path, [build([source(path, chunks(5), vectors(5))])])
    assert (tmp_path / chunk_path("golden-reference", 4)).exists()
    (tmp_path / TOPIC / "golden-reference.md").write_text("# the source itself\n")
    deleted = write_topic(tmp_path, build([source(path, chunks(3), vectors(3))]))
    assert deleted == sorted(chunk_path("golden-reference", i) for i in (3, 4))
    remaining = [p for p in listing(tmp_path) if p.startswith(f"{TOPIC}/_chunks/")]
    assert remaining == sorted(chunk_path("golden-reference", i) for i in range(3))
    entry = json.loads((tmp_path / TOPIC / "index.json").read_bytes())["_embedded"]["chunks"]
    assert entry["golden-reference"]["count"] == 3
    assert (tmp_path / TOPIC / "golden-reference.md").exists()  # never a stale file


def test_a_changed_chunk_gets_a_new_file_and_unchanged_ones_keep_theirs(tmp_path):
    """A name holds one text: the edit of chunk 1 writes a new file beside the one the previous
    index.json names (never over it), and that one is stale only once the new index is in."""
    path = f"{TOPIC}/a.md"
    first = build([source(path, chunks(3), vectors(3))])
    write_index(tmp_path, [first])
    edited = [("Part 0", "Body 0."), ("Part 1", "Edited."), ("Part 2", "Body 2.")]
    second = build([source(path, edited, vectors(3))])
    assert set(first.files) - set(second.files) == {chunk_path("a", 1)}
    assert set(second.files) - set(first.files) == {chunk_path("a", 1, "Edited.")}
    assert write_topic(tmp_path, second) == [chunk_path("a", 1)]
    assert (tmp_path / chunk_path("a", 1, "Edited.")).read_text() == "## Part 1\n\nEdited."


def test_stale_files_only_ever_names_chunk_files():
    existing = [
        f"{TOPIC}/index.json", f"{TOPIC}/topic-spec.md", f"{TOPIC}/golden-reference.md",
        f"{TOPIC}/_keywords/words.md", f"{TOPIC}/_chunks/notes.md", f"{TOPIC}/_chunks/a-1.md",
        f"{TOPIC}/_chunks/a-0.md", f"{TOPIC}/old-7.md", chunk_path("a", 0), chunk_path("a", 1),
        f"{TOPIC}/_chunks/.tmp-k2j4x9_q",
    ]  # fmt: skip
    live = [f"{TOPIC}/_chunks/a-0.md", chunk_path("a", 0)]
    # Chunk files of either naming (format 2's `{stem}-{i}.md` too), nothing else.
    assert stale_files(existing, live) == sorted([f"{TOPIC}/_chunks/a-1.md", chunk_path("a", 1)])


def test_stale_files_refuses_the_live_files_given_as_one_path():
    """`stale_files(existing, "t/_chunks/a-0.md")` took each character for a live file, so the
    one live chunk file was named stale: a caller deleting what it returns deleted it."""
    live = f"{TOPIC}/_chunks/a-0.md"
    with pytest.raises(TypeError, match="written must be a collection of paths, got the string"):
        stale_files([live], live)
    assert stale_files([live], [live]) == []


def test_a_deleted_source_loses_its_entry_and_files(tmp_path):
    a, b = f"{TOPIC}/a.md", f"{TOPIC}/b.md"
    write_index(
        tmp_path, [build([source(a, chunks(2), vectors(2)), source(b, chunks(3), vectors(3))])]
    )
    deleted = write_topic(tmp_path, build([source(a, chunks(2), vectors(2))]))
    assert deleted == sorted(chunk_path("b", i) for i in range(3))
    doc = json.loads((tmp_path / TOPIC / "index.json").read_bytes())
    assert list(doc["_embedded"]["chunks"]) == ["a"]


def test_a_topic_left_without_sources_is_removed_and_its_parent_updated(tmp_path):
    other = "guides/setup"
    spec = "# Intro notes\n\nKept by hand.\n"
    first = build([source(f"{TOPIC}/a.md", chunks(2), vectors(2))], spec=spec)
    second = build([source(f"{other}/b.md", chunks(2), vectors(2))], topic=other)
    write_index(tmp_path, [first, second])
    parent = json.loads((tmp_path / "guides/index.json").read_bytes())
    assert [t["id"] for t in parent["_embedded"]["topics"]] == [TOPIC, other]

    # Next run: guides/intro has no sources. The new tree decides the parents' children.
    tree = index_tree([other])
    assert tree["guides"] == [other] and TOPIC not in tree
    (tmp_path / "guides/index.json").write_bytes(directory_index("guides", tree["guides"]))
    existing = listing(tmp_path)
    for path in orphaned_topic_files(TOPIC, existing):
        (tmp_path / path).unlink()
    spec_path = tmp_path / TOPIC / "topic-spec.md"
    kept = topic_spec_without_section(spec_path.read_text())
    assert kept == spec
    spec_path.write_text(kept)

    parent = json.loads((tmp_path / "guides/index.json").read_bytes())
    assert [t["id"] for t in parent["_embedded"]["topics"]] == [other]
    assert [p for p in listing(tmp_path) if p.startswith(TOPIC)] == [f"{TOPIC}/topic-spec.md"]
    assert (tmp_path / other / "index.json").exists()


def test_orphaned_files_of_a_topic_and_generated_only_topic_spec():
    existing = [
        "x/index.json", "x/_chunks/a-0.md", "x/a.md", "x/y/index.json", "x/y/_chunks/b-0.md",
        "x/_chunks/readme.txt",
    ]  # fmt: skip
    assert orphaned_topic_files("x", existing) == ["x/_chunks/a-0.md", "x/index.json"]
    generated = build([source(f"{TOPIC}/a.md", chunks(1), vectors(1))]).files[
        f"{TOPIC}/topic-spec.md"
    ]
    assert topic_spec_without_section(generated.decode()) is None


def test_a_topic_that_gains_a_child_gets_its_link_without_rebuilding():
    out = build([source(f"{TOPIC}/a.md", chunks(2), vectors(2))])
    index = out.files[f"{TOPIC}/index.json"]
    linked = json.loads(set_child_topics(index, [f"{TOPIC}/advanced"]))
    assert linked["_embedded"]["topics"][0]["id"] == f"{TOPIC}/advanced"
    assert linked["_embedded"]["chunks"] == json.loads(index)["_embedded"]["chunks"]


def test_names_made_from_long_stems_and_topics_fit_a_file_name():
    """A file name holds at most 255 bytes: a chunk file's stem is cut (at a character's end)
    where `{stem}-{digest}-{i}.md` would not fit, and a topic's shard slug is cut and ends in a
    digest of the topic, which keeps two long topics apart. Short names are unchanged."""
    long_stem = "长" * 80  # 240 bytes
    name = chunk_file(long_stem, 12, "text").removeprefix("_chunks/")
    assert len(name.encode()) <= 255 and name.startswith("长" * 75) and name.endswith("-12.md")
    assert chunk_file("intro", 0, "text").startswith("_chunks/intro-")
    deep = "/".join(["目录" * 10] * 5)  # 304 bytes
    slugs = {topic_slug(deep), topic_slug(deep + "x"), topic_slug(deep[:-1] + "x")}
    assert len(slugs) == 3 and all(len(f"{s}.parquet".encode()) <= 255 for s in slugs)
    assert topic_slug("a/b~c") == "a~sb~~c"


def test_topic_spec_counts_one_chunk_in_the_singular():
    entry = {"source": "t/a.md", "stripe_order": [0], "items": []}
    one = render_section("T", {"a": {**entry, "count": 1}})
    two = render_section("T", {"a": {**entry, "count": 2, "stripe_order": [1, 0]}})
    assert "\n1 chunk; stripe order: [0]\n" in one  # "1 chunks" it said
    assert "\n2 chunks; stripe order: [1, 0]\n" in two
