"""The driver's finish (`jobs.finish`) on a real output folder, without a build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from indexing import directory_index
from indexing.hal import dump_json
from jobs.config import load_config
from jobs.finish import finish
from jobs.manifest import Manifest, TopicEntry
from jobs.plan import KEEP, RELINK, Plan, TopicPlan, interim_manifest
from jobs.stages.topic import existing_index_of
from jobs.storage import Storage

ROOT = Path(__file__).resolve().parents[1]
OWN_INDEX = b'{"pages": ["a", "b"]}\n'  # a person's own index.json
CHUNK = "_chunks/page-0123456789abcdef-0.md"


def all_gone(topics: list[str], directories: list[str]) -> tuple[Manifest, Plan]:
    """The manifest of a run that wrote `topics` (an index.json and one chunk file each) and
    `directories`, and the plan of a run whose input has none of them left."""
    previous = Manifest(
        topics={
            topic: TopicEntry("inputs", (), (f"{topic}/index.json", f"{topic}/{CHUNK}"))
            for topic in topics
        },
        directories=tuple(directories),
    )
    plan = Plan(
        topics=(),
        directories={},
        fingerprints={},
        changed=frozenset(),
        deleted=(),
        deleted_topics=tuple(sorted(topics)),
    )
    return previous, plan


def test_what_is_gone_loses_only_the_index_files_this_job_wrote(tmp_path):
    """Topics that lost their sources and folders that no longer lead to a topic: each index.json
    this job wrote there is deleted, with the topics' chunk files and their emptied folders; one
    that a person's own file, or a symbolic link, has replaced since is left as it is (both were
    deleted)."""
    out = tmp_path / "out"
    files = {
        "ours/index.json": directory_index("ours", []),
        f"ours/{CHUNK}": b"text",
        "mine/index.json": OWN_INDEX,
        f"mine/{CHUNK}": b"text",
        "dir/index.json": directory_index("dir", ["dir/t"]),
        "dir-mine/index.json": OWN_INDEX,
    }
    for path, data in files.items():
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_bytes(data)
    (tmp_path / "theirs.json").write_bytes(OWN_INDEX)
    (out / "dir-linked").mkdir()
    (out / "dir-linked" / "index.json").symlink_to(tmp_path / "theirs.json")
    previous, plan = all_gone(["ours", "mine"], ["dir", "dir-linked", "dir-mine"])
    config = load_config(str(ROOT / "configs" / "local.yaml"), overrides={"input": str(out)})

    manifest, failures = finish(config, "key", Storage(str(out)), plan, previous, {})

    assert manifest.topics == {} and manifest.directories == () and failures == []
    left = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert [p for p in left if not p.startswith(("_index/", "_reindex/"))] == [
        "dir-linked/index.json",
        "dir-mine/index.json",
        "mine/index.json",
    ]
    assert not (out / "ours" / "_chunks").exists() and not (out / "mine" / "_chunks").exists()
    assert (out / "mine" / "index.json").read_bytes() == OWN_INDEX
    assert (out / "dir-mine" / "index.json").read_bytes() == OWN_INDEX
    assert (out / "dir-linked" / "index.json").is_symlink()
    assert (tmp_path / "theirs.json").read_bytes() == OWN_INDEX


def test_a_deleted_topic_loses_the_temporary_files_of_writes_killed_there(tmp_path):
    """A reduce killed in its writes leaves a temporary file in the topic's folder or its
    `_chunks/`; the topic's next rebuild removes it. A topic whose sources all went is never
    rebuilt, and its removal left those files (and so its folders) for good."""
    out = tmp_path / "out"
    (out / "t" / "_chunks").mkdir(parents=True)
    (out / "t" / "index.json").write_bytes(directory_index("t", []))
    (out / "t" / CHUNK).write_bytes(b"text")
    (out / "t" / ".tmp-abcd1234").write_bytes(b'{"half": ')
    (out / "t" / "_chunks" / ".tmp-wxyz5678").write_bytes(b"tex")
    previous, plan = all_gone(["t"], [])
    config = load_config(
        str(ROOT / "configs" / "local.yaml"),
        overrides={"input": str(tmp_path / "docs"), "output": str(out)},
    )

    finish(config, "key", Storage(str(out)), plan, previous, {})

    assert not (out / "t").exists()


NOTES = "# Notes\n\nKept by hand.\n"


def finish_deleting_topic_t(tmp_path, spec: str, in_place: bool):
    """The output folder after `finish` deleted topic `t`, whose topic-spec.md was `spec`."""
    out = tmp_path / "out"
    (out / "t").mkdir(parents=True)
    (out / "t" / "index.json").write_bytes(directory_index("t", []))
    (out / "t" / "topic-spec.md").write_text(spec)
    previous, plan = all_gone(["t"], [])
    source = out if in_place else tmp_path / "docs"
    config = load_config(
        str(ROOT / "configs" / "local.yaml"),
        overrides={"input": str(source), "output": str(out)},
    )
    finish(config, "key", Storage(str(out)), plan, previous, {})
    return out


@pytest.mark.parametrize("in_place", [False, True])
def test_a_deleted_topics_notes_stay_only_in_place(tmp_path, in_place):
    """A person's notes around the generated section of a deleted topic's topic-spec.md stay in
    place, where the file is theirs. In a separate output they were a copy of the input's, gone
    with the topic's folder, yet stayed there for good with the folder (a fresh build has
    neither)."""
    spec = f"{NOTES}\n<!-- mdindex:begin -->\ngenerated\n<!-- mdindex:end -->\n"

    out = finish_deleting_topic_t(tmp_path, spec, in_place)

    if in_place:
        assert (out / "t" / "topic-spec.md").read_text() == NOTES
    else:
        assert not (out / "t").exists()


def test_a_deleted_topics_section_after_a_bom_goes_too(tmp_path):
    """A topic-spec.md saved with a UTF-8 BOM by a person's editor, its generated section first:
    read as a source is, its BOM dropped, the section goes with the topic (the BOM hid its begin
    marker, so the generated tables stayed in the file for good)."""
    spec = f"\ufeff<!-- mdindex:begin -->\ngenerated\n<!-- mdindex:end -->\n\n{NOTES}"

    out = finish_deleting_topic_t(tmp_path, spec, in_place=True)

    assert (out / "t" / "topic-spec.md").read_text() == f"\n{NOTES}"  # the person's blank line


@pytest.mark.parametrize("in_place", [False, True])
def test_folders_left_empty_go_only_from_a_separate_output(tmp_path, in_place):
    """A separate output loses the folders of deleted topics and of directories that no longer
    lead to one once they are empty, as a fresh build makes none; a folder holding a person's
    file stays. In place those folders are the person's, and stay."""
    out = tmp_path / "out"
    topics = {"reference/cli": "reference", "mine": ""}
    for topic in topics:
        (out / topic / "_chunks").mkdir(parents=True)
        (out / topic / "index.json").write_bytes(directory_index(topic, []))
        (out / topic / CHUNK).write_bytes(b"text")
    (out / "reference" / "index.json").write_bytes(directory_index("reference", ["reference/cli"]))
    (out / "mine" / "notes.txt").write_text("a person's file")
    previous, plan = all_gone(list(topics), ["reference"])
    source = out if in_place else tmp_path / "docs"
    config = load_config(
        str(ROOT / "configs" / "local.yaml"),
        overrides={"input": str(source), "output": str(out)},
    )

    finish(config, "key", Storage(str(out)), plan, previous, {})

    left = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_dir())
    kept = ["mine", "reference", "reference/cli"] if in_place else ["mine"]
    assert [p for p in left if not p.startswith("_")] == kept
    assert (out / "mine" / "notes.txt").read_text() == "a person's file"


def test_simhash_tables_no_longer_built_leave_no_empty_folders(tmp_path):
    """Tables of a `k` no longer used (or of prompts all gone) are deleted with the folders they
    leave empty, in place too (`_index/` is the job's); `_index/simhash` itself stays."""
    out = tmp_path / "out"
    stale = ["_index/simhash/k6/b0/00.json", "_index/simhash/k6/b1/00.json"]
    for path in stale:
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_text("[]")
    previous, (_, plan) = Manifest(simhash_files=tuple(stale)), all_gone([], [])
    config = load_config(str(ROOT / "configs" / "local.yaml"), overrides={"input": str(out)})

    finish(config, "key", Storage(str(out)), plan, previous, {})

    assert (out / "_index" / "simhash").is_dir()
    assert not (out / "_index" / "simhash" / "k6").exists()


def test_a_deleted_topic_whose_sub_topic_stays_becomes_its_folders_directory_index(tmp_path):
    """A topic that lost its sources but still holds a topic below it loses its chunk files, and
    its index.json becomes the folder's directory index (written before any removal, so no
    directory index links a removed topic while the finish runs)."""
    out = tmp_path / "out"
    for topic in ("guides", "guides/http"):
        (out / topic / "_chunks").mkdir(parents=True)
        (out / topic / "index.json").write_bytes(directory_index(topic, []))
        (out / topic / CHUNK).write_bytes(b"text")
    (out / "index.json").write_bytes(directory_index("", ["guides"]))
    previous = Manifest(
        topics={
            topic: TopicEntry("inputs", (), (f"{topic}/index.json", f"{topic}/{CHUNK}"))
            for topic in ("guides", "guides/http")
        },
        directories=("",),
    )
    kept = TopicPlan("guides/http", (), None, None, (), "inputs", KEEP)
    plan = Plan(
        topics=(kept,),
        directories={"": ["guides"], "guides": ["guides/http"]},
        fingerprints={},
        changed=frozenset(),
        deleted=(),
        deleted_topics=("guides",),
    )
    config = load_config(str(ROOT / "configs" / "local.yaml"), overrides={"input": str(out)})

    manifest, failures = finish(config, "key", Storage(str(out)), plan, previous, {})

    assert failures == [] and manifest.directories == ("", "guides")
    assert (out / "guides" / "index.json").read_bytes() == directory_index(
        "guides", ["guides/http"]
    )
    assert not (out / "guides" / "_chunks").exists()
    assert (out / "guides" / "http" / CHUNK).read_bytes() == b"text"


def test_a_relinked_topic_is_recorded_failed_only_while_its_index_json_is_left(tmp_path):
    """A topic whose child topic went is relinked: its index.json links no child. The finish
    reads the interim manifest, which marks each topic the run changes failed; a relinked one
    kept that mark, so the next run (nothing changed) rebuilt it. One whose index.json is a
    person's own is left as it is, reported, and failed: rebuilt until the file is moved."""
    out = tmp_path / "out"
    for topic in ("ours", "mine"):
        (out / topic).mkdir(parents=True)
    (out / "ours" / "index.json").write_bytes(directory_index("ours", ["ours/sub"]))
    (out / "mine" / "index.json").write_bytes(OWN_INDEX)
    last = Manifest(
        topics={
            topic: TopicEntry("inputs", (f"{topic}/sub",), (f"{topic}/index.json",))
            for topic in ("ours", "mine")
        },
        directories=("",),
    )
    plan = Plan(
        topics=tuple(
            TopicPlan(topic, (), None, None, (), "inputs", RELINK) for topic in ("ours", "mine")
        ),
        directories={"": ["mine", "ours"]},
        fingerprints={},
        changed=frozenset(),
        deleted=(),
        deleted_topics=(),
    )
    interim = interim_manifest(last, plan, "key")
    config = load_config(str(ROOT / "configs" / "local.yaml"), overrides={"input": str(out)})

    manifest, failures = finish(config, "key", Storage(str(out)), plan, interim, {})

    assert manifest.topics["ours"] == TopicEntry("inputs", (), ("ours/index.json",))
    assert (out / "ours" / "index.json").read_bytes() == directory_index("ours", [])
    assert manifest.topics["mine"].failed and [f["path"] for f in failures] == ["mine/index.json"]
    assert (out / "mine" / "index.json").read_bytes() == OWN_INDEX


def test_an_index_json_an_editor_saved_with_a_bom_is_still_this_jobs(tmp_path):
    """The job's own index.json that a person opened and saved in an editor that writes a UTF-8
    BOM (Notepad) is read without it, as a source is: it was "not JSON", left untouched, and its
    topic failed INDEX_JSON_FAILED on every run until the file was moved away by hand."""
    (tmp_path / "t").mkdir()
    index = directory_index("t", [])
    (tmp_path / "t" / "index.json").write_bytes("\ufeff".encode() + index)
    assert existing_index_of(Storage(str(tmp_path)), "t") == (index, None)


def before_corpus_links(index: bytes) -> bytes:
    """An index.json as a build before 2026-12-01 wrote it: the root's without `corpus_links`."""
    doc = json.loads(index)
    doc["_links"] = {"self": doc["_links"]["self"]}
    return dump_json(doc)


def written(out: Path) -> dict[str, tuple[int, int]]:
    """Each file of the output with its inode and modification time: a write (a rename over the
    file, or in place) changes them."""
    return {
        p.relative_to(out).as_posix(): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in out.rglob("*")
        if p.is_file()
    }


@pytest.mark.parametrize("root_topic", [False, True])
def test_an_output_built_before_the_roots_corpus_links_gains_them_alone(tmp_path, root_topic):
    """The root index.json links the files of the whole output (`corpus_links`: a HAL client that
    starts there found no `_index/model.json`, SimHash tables or chunk tables). An output built
    before 2026-12-01 gets them on its next run with nothing changed, its root index.json alone
    written, every topic kept: a folder's directory index as any that changed, a root topic
    (markdown at the corpus root) as a relinked one; the run after writes nothing. A person's own
    root index.json is left as it is: reported where the root is a folder, not where it is a
    topic kept (as before)."""
    out = tmp_path / "out"
    (out / "guides").mkdir(parents=True)
    (out / "guides" / "index.json").write_bytes(directory_index("guides", []))
    root = json.loads(directory_index("", ["guides"]))
    if root_topic:
        root["_embedded"]["chunks"] = {}
    (out / "index.json").write_bytes(dump_json(root))
    kept = [TopicPlan("guides", (), None, None, (), "inputs", KEEP)]
    kept += [TopicPlan("", (), None, None, ("guides",), "inputs", KEEP)] if root_topic else []
    previous = Manifest(
        topics={
            p.topic: TopicEntry("inputs", p.children, (f"{p.topic}/index.json",)) for p in kept
        },
        directories=() if root_topic else ("",),
    )
    plan = Plan(
        topics=tuple(kept),
        directories={} if root_topic else {"": ["guides"]},
        fingerprints={},
        changed=frozenset(),
        deleted=(),
        deleted_topics=(),
    )
    config = load_config(str(ROOT / "configs" / "local.yaml"), overrides={"input": str(out)})
    previous, _ = finish(config, "key", Storage(str(out)), plan, previous, {})  # a first build
    assert (out / "index.json").read_bytes() == dump_json(root)
    (out / "index.json").write_bytes(before_corpus_links(dump_json(root)))
    before = written(out)

    manifest, failures = finish(config, "key", Storage(str(out)), plan, previous, {})

    after = written(out)
    assert [p for p in after if after[p] != before.get(p)] == ["index.json"] and failures == []
    assert manifest.topics == previous.topics
    assert (out / "index.json").read_bytes() == dump_json(root)  # as test_indexing_hal has it
    assert (out / "_index" / "model.json").is_file()
    assert (out / "_index" / "simhash" / "manifest.json").is_file()
    finish(config, "key", Storage(str(out)), plan, previous, {})
    assert written(out) == after
    (out / "index.json").write_bytes(OWN_INDEX)  # a person's own, left as it is: reported only
    _, failures = finish(config, "key", Storage(str(out)), plan, previous, {})  # for a directory
    assert (out / "index.json").read_bytes() == OWN_INDEX and len(failures) == (not root_topic)
