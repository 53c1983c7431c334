"""Change detection from listings and the previous manifest (pure: no Ray, no model, no reads)."""

from __future__ import annotations

import json
from dataclasses import replace

from chunking import chunk_source
from indexing import SourceInput
from jobs.manifest import Manifest, SourceEntry, TopicEntry
from jobs.plan import (
    INVALID_FILE_NAME,
    KEEP,
    REBUILD,
    RELINK,
    SYMLINK_SKIPPED,
    excluded,
    interim_manifest,
    keep_directory,
    make_plan,
    rebuilding,
    unmatched_note,
)
from jobs.stages.topic import link_targets
from jobs.storage import FileInfo, SkippedLink

GLOBS = ("*.md",)


FILES = [
    FileInfo("a/one.md", 1, "v1"),
    FileInfo("a/two.md", 2, "v2"),
    FileInfo("a/qa-pairs.md", 3, "v3"),
    FileInfo("b/c/three.md", 4, "v4"),
    FileInfo("_keywords/words.md", 5, "v5"),
]


def remember(files: list[FileInfo], settings: str = "s1") -> Manifest:
    """The manifest a successful run over `files` leaves behind."""
    plan = make_plan(files, Manifest(), settings, GLOBS)
    return Manifest(
        config_key=settings,
        sources={p: SourceEntry(fp, "sha-" + p) for p, fp in plan.fingerprints.items()},
        topics={t.topic: TopicEntry(t.inputs, t.children, ()) for t in plan.topics},
        directories=tuple(plan.directories),
    )


def actions(plan) -> dict[str, str]:
    return {t.topic: t.action for t in plan.topics}


def test_first_run_rebuilds_everything():
    plan = make_plan(FILES, Manifest(), "s1", GLOBS)
    assert actions(plan) == {"a": REBUILD, "b/c": REBUILD}
    assert plan.changed == {"a/one.md", "a/two.md", "b/c/three.md"}
    assert plan.directories == {"": ["a", "b"], "b": ["b/c"]}
    [a, _] = plan.topics
    assert a.questions == "a/qa-pairs.md" and a.keywords == "_keywords/words.md"


def test_unchanged_listing_keeps_every_topic_without_reading():
    files = FILES
    plan = make_plan(files, remember(files), "s1", GLOBS)
    assert actions(plan) == {"a": KEEP, "b/c": KEEP}
    assert plan.changed == frozenset() and plan.deleted == ()


def test_a_changed_source_or_questions_or_keywords_rebuild_only_their_topic():
    files = FILES
    before = remember(files)
    edited = [FileInfo(f.path, f.size + 10, "new") if f.path == "a/two.md" else f for f in files]
    plan = make_plan(edited, before, "s1", GLOBS)
    assert actions(plan) == {"a": REBUILD, "b/c": KEEP}
    assert plan.changed == {"a/two.md"}
    questions = [FileInfo(f.path, f.size, "new") if "qa-pairs" in f.path else f for f in files]
    assert actions(make_plan(questions, before, "s1", GLOBS)) == {"a": REBUILD, "b/c": KEEP}
    keywords = [FileInfo(f.path, f.size, "new") if "_keywords" in f.path else f for f in files]
    assert actions(make_plan(keywords, before, "s1", GLOBS)) == {"a": REBUILD, "b/c": REBUILD}


def test_new_settings_rebuild_everything():
    files = FILES
    plan = make_plan(files, remember(files), "s2", GLOBS)
    assert set(actions(plan).values()) == {REBUILD}
    assert len(plan.changed) == 3


def test_a_new_child_topic_relinks_its_parent_and_deletions_are_listed():
    files = FILES
    before = remember(files)
    grown = [*files, FileInfo("a/sub/four.md", 9, "v9")]
    plan = make_plan(grown, before, "s1", GLOBS)
    assert actions(plan) == {"a": RELINK, "a/sub": REBUILD, "b/c": KEEP}
    shrunk = [f for f in files if not f.path.startswith("b/")]
    plan = make_plan(shrunk, before, "s1", GLOBS)
    assert plan.deleted == ("b/c/three.md",) and plan.deleted_topics == ("b/c",)
    assert plan.directories == {"": ["a"]}


def test_topics_kept_or_relinked_whose_files_are_gone_are_rebuilt():
    """`rebuilding` turns a kept or relinked topic into a rebuilt one (its index.json or tables
    left the output); a topic already rebuilt stays so, and the others are untouched."""
    before = remember(FILES)
    plan = make_plan([*FILES, FileInfo("a/sub/four.md", 9, "v9")], before, "s1", GLOBS)
    assert actions(plan) == {"a": RELINK, "a/sub": REBUILD, "b/c": KEEP}
    assert actions(rebuilding(plan, ["a", "a/sub"], before)) == {
        "a": REBUILD,
        "a/sub": REBUILD,
        "b/c": KEEP,
    }
    assert actions(rebuilding(plan, ["b/c", "gone"], before)) == {
        "a": RELINK,
        "a/sub": REBUILD,
        "b/c": REBUILD,
    }
    assert rebuilding(plan, [], before) == plan


def test_an_input_topic_spec_edit_rebuilds_its_topic_in_a_separate_output_only():
    """A separate output merges its section into the input's topic-spec.md: an edit of it alone
    rebuilt nothing, so the output kept the notes of the first build for good. In place the file
    is the output's own, which every build rewrites: it rebuilds nothing."""
    spec = [*FILES, FileInfo("a/topic-spec.md", 20, "v1")]
    edited = [*FILES, FileInfo("a/topic-spec.md", 25, "v2")]
    for separate, rebuilt in ((True, REBUILD), (False, KEEP)):
        first = make_plan(spec, Manifest(), "s1", GLOBS, separate=separate)
        before = Manifest(
            config_key="s1",
            sources={p: SourceEntry(fp, "sha-" + p) for p, fp in first.fingerprints.items()},
            topics={t.topic: TopicEntry(t.inputs, t.children, ()) for t in first.topics},
            directories=tuple(first.directories),
        )
        assert actions(make_plan(spec, before, "s1", GLOBS, separate=separate))["a"] == KEEP
        plan = make_plan(edited, before, "s1", GLOBS, separate=separate)
        assert actions(plan) == {"a": rebuilt, "b/c": KEEP} and plan.changed == frozenset()
    # A topic without one keeps the digest it had before the spec took part in it.
    assert make_plan(FILES, Manifest(), "s1", GLOBS, separate=True) == make_plan(
        FILES, Manifest(), "s1", GLOBS
    )


def test_a_source_that_failed_last_time_is_retried():
    files = FILES
    before = remember(files)
    failed = Manifest(
        config_key="s1",
        sources={
            **before.sources,
            "a/one.md": SourceEntry(before.sources["a/one.md"].fingerprint, None, failed=True),
        },
        topics={
            **before.topics,
            "a": TopicEntry(
                before.topics["a"].inputs, before.topics["a"].children, (), failed=True
            ),
        },
    )
    plan = make_plan(files, failed, "s1", GLOBS)
    assert actions(plan)["a"] == REBUILD and plan.changed == {"a/one.md"}


def test_a_settled_failure_is_not_retried_until_the_source_or_the_settings_change():
    files = FILES
    before = remember(files)
    failure = ("CHUNKING_FAILED", "invalid UTF-8 at byte offset 8")
    one = before.sources["a/one.md"]
    settled = Manifest(
        config_key="s1",
        sources={
            **before.sources,
            "a/one.md": SourceEntry(one.fingerprint, one.sha256, True, failure),
        },
        topics=before.topics,  # the run that failed it left the topic with no failure to retry
        directories=before.directories,
    )
    plan = make_plan(files, settled, "s1", GLOBS)
    assert actions(plan) == {"a": KEEP, "b/c": KEEP} and plan.changed == frozenset()
    assert plan.settled == ({"path": "a/one.md", "code": failure[0], "message": failure[1]},)
    # A neighbour's edit rebuilds the topic: the failed source is not changed, and not reported
    # by the plan (the topic's reduce reads it and reports it).
    edited = [FileInfo(f.path, f.size + 10, "new") if f.path == "a/two.md" else f for f in files]
    plan = make_plan(edited, settled, "s1", GLOBS)
    assert actions(plan)["a"] == REBUILD and plan.changed == {"a/two.md"} and plan.settled == ()
    fixed = [FileInfo(f.path, f.size + 1, "new") if f.path == "a/one.md" else f for f in files]
    plan = make_plan(fixed, settled, "s1", GLOBS)
    assert plan.changed == {"a/one.md"} and plan.settled == ()
    plan = make_plan(files, settled, "s2", GLOBS)
    assert len(plan.changed) == 3 and plan.settled == ()
    assert Manifest.from_json(settled.to_json()) == settled
    # A kept topic rebuilt because its files left the output: its reduce reads the source again
    # and reports it, so the plan no longer does (it was reported twice, once "not read again").
    plan = rebuilding(make_plan(files, settled, "s1", GLOBS), ["a"], settled)
    assert actions(plan)["a"] == REBUILD and plan.settled == ()


def test_a_settled_failure_of_a_topics_questions_is_reported_while_the_topic_is_kept():
    files = FILES
    before = remember(files)
    failure = ("a/qa-pairs.md", "QUESTIONS_FAILED", "invalid UTF-8 at byte offset 3")
    topic = replace(before.topics["a"], settled_failures=(failure,))
    settled = replace(before, topics={**before.topics, "a": topic})
    plan = make_plan(files, settled, "s1", GLOBS)
    assert actions(plan) == {"a": KEEP, "b/c": KEEP}
    assert plan.settled == ({"path": failure[0], "code": failure[1], "message": failure[2]},)
    questions = [FileInfo(f.path, f.size, "new") if "qa-pairs" in f.path else f for f in files]
    plan = make_plan(questions, settled, "s1", GLOBS)
    assert actions(plan)["a"] == REBUILD and plan.settled == ()
    assert Manifest.from_json(settled.to_json()) == settled


def test_the_root_keywords_files_settled_failure_is_reported_once_for_every_topic_it_serves():
    before = remember(FILES)
    failure = ("_keywords/words.md", "KEYWORDS_FAILED", "row 1: no score")
    topics = {name: replace(t, settled_failures=(failure,)) for name, t in before.topics.items()}
    plan = make_plan(FILES, replace(before, topics=topics), "s1", GLOBS)
    assert actions(plan) == {"a": KEEP, "b/c": KEEP}
    assert plan.settled == ({"path": failure[0], "code": failure[1], "message": failure[2]},)


def test_manifest_round_trips_through_json():
    files = FILES
    manifest = remember(files)
    assert Manifest.from_json(manifest.to_json()) == manifest
    assert b"settled_failure" not in manifest.to_json()  # written only for a settled failure
    # Formats 3 (before settled failures) and 4 (before link targets) are read as they were: no
    # source has a settled failure, and no topic's link targets are known.
    older = json.loads(manifest.to_json())
    assert older.pop("format") == 5
    for topic in older["topics"].values():
        topic.pop("link_targets")
    unknown = replace(
        manifest, topics={t: replace(e, link_targets=None) for t, e in manifest.topics.items()}
    )
    for format_ in (3, 4):
        assert Manifest.from_json(json.dumps({**older, "format": format_}).encode()) == unknown
    assert Manifest.from_json(unknown.to_json()) == unknown
    assert Manifest.from_json(None) == Manifest()
    assert Manifest.from_json(b'{"format": 0}') == Manifest()
    # stamps (qa-pairs.md, keywords files) only where there are some: the same bytes without
    stamped = replace(manifest, stamps={"t/qa-pairs.md": ("12:34.5", "ab" * 32)})
    assert Manifest.from_json(stamped.to_json()) == stamped
    assert b'"stamps"' in stamped.to_json() and b'"stamps"' not in manifest.to_json()


def test_a_topics_page_links_round_trip_and_are_written_only_where_it_has_some():
    """A topic's links to pages no source is, each source's in order, are kept in its entry
    (every run judges the whole index's against its listing); a manifest without any keeps its
    bytes and format 5 (a reader of 5 before them ignores the key), one before them reads as
    none, and one that kept the broken ones alone (`broken_links`, earlier on 2026-11-30) as
    those."""
    manifest = remember(FILES)
    pairs = (("a/two.md", "./gone.md"), ("a/one.md", "../instal.md"), ("a/one.md", "./x"))
    recorded = replace(manifest.topics["a"], page_links=pairs)
    linked = replace(manifest, topics={**manifest.topics, "a": recorded})
    data = linked.to_json()
    assert Manifest.from_json(data) == linked and Manifest.from_json(data).topics["a"] == recorded
    assert json.loads(data)["format"] == 5
    assert json.loads(data)["topics"]["a"]["page_links"] == [list(pair) for pair in pairs]
    assert b'"page_links"' not in manifest.to_json()
    assert Manifest.from_json(manifest.to_json()).topics["a"].page_links == ()
    earlier = data.replace(b'"page_links"', b'"broken_links"')
    assert Manifest.from_json(earlier) == linked
    assert actions(make_plan(FILES, linked, "s1", GLOBS)) == {"a": KEEP, "b/c": KEEP}


def test_a_topic_is_rebuilt_when_a_path_its_links_name_becomes_a_source_or_stops_being_one():
    """A link's `target_document` is its path when that is a source of the corpus: a topic whose
    links name a source that went, or a path that became a source, is rebuilt, though none of
    its own files changed. Targets not recorded (a manifest of format 3 or 4) rebuild it once."""
    before = remember(FILES)
    linked = replace(before.topics["b/c"], link_targets=("a/new.md", "a/one.md"))
    manifest = replace(before, topics={**before.topics, "b/c": linked})
    assert actions(make_plan(FILES, manifest, "s1", GLOBS)) == {"a": KEEP, "b/c": KEEP}
    gone = [f for f in FILES if f.path != "a/one.md"]
    assert actions(make_plan(gone, manifest, "s1", GLOBS)) == {"a": REBUILD, "b/c": REBUILD}
    added = [*FILES, FileInfo("a/new.md", 3, "v9")]
    assert actions(make_plan(added, manifest, "s1", GLOBS)) == {"a": REBUILD, "b/c": REBUILD}
    other = [*FILES, FileInfo("a/other.md", 3, "v9")]  # no link names it
    assert actions(make_plan(other, manifest, "s1", GLOBS))["b/c"] == KEEP
    unknown = replace(manifest, topics={**before.topics, "b/c": replace(linked, link_targets=None)})
    assert actions(make_plan(FILES, unknown, "s1", GLOBS)) == {"a": KEEP, "b/c": REBUILD}


def test_a_link_without_an_extension_rebuilds_its_topic_when_a_page_it_may_name_appears():
    """`[x](../a/new)` names `a/new.md` once that is a source (or `a/new/index.md`, ...): the
    topic's link targets list each page it may name, so adding one rebuilds the topic, as a
    fresh build would resolve the link to it."""
    text = "# Three\n\nSee [new](../../a/new) and [api](/api/).\n"
    document = chunk_source(text, document_path="b/c/three.md", corpus_paths=frozenset())
    targets = link_targets([SourceInput("b/c/three.md", document, None)], GLOBS)
    assert targets == [
        "a/new.md",
        "a/new/README.md",
        "a/new/index.md",
        "api.md",
        "api/README.md",
        "api/index.md",
    ]
    before = remember(FILES)
    linked = replace(before.topics["b/c"], link_targets=tuple(targets))
    manifest = replace(before, topics={**before.topics, "b/c": linked})
    assert actions(make_plan(FILES, manifest, "s1", GLOBS))["b/c"] == KEEP
    added = [*FILES, FileInfo("a/new/index.md", 3, "v9")]
    assert actions(make_plan(added, manifest, "s1", GLOBS))["b/c"] == REBUILD


def test_files_whose_path_is_not_utf8_are_left_out_and_reported_when_they_would_be_read():
    latin1 = [
        FileInfo("a/caf\udce9.md", 9, "v9"),  # b"caf\xe9.md", listed with a surrogate
        FileInfo("d\udcff/qa-pairs.md", 9, "v9"),
        FileInfo("a/logo\udce9.png", 9, "v9"),  # never read: not reported
    ]
    plan = make_plan([*FILES, *latin1], Manifest(), "s1", GLOBS)
    assert plan.fingerprints == make_plan(FILES, Manifest(), "s1", GLOBS).fingerprints
    assert [(f["path"], f["code"]) for f in plan.skipped] == [
        ("a/caf\\xe9.md", INVALID_FILE_NAME),
        ("d\\xff/qa-pairs.md", INVALID_FILE_NAME),
    ]
    assert "byte 0xE9 at offset 5" in plan.skipped[0]["message"]


def test_files_with_an_empty_folder_name_are_left_out_and_reported_when_they_would_be_read():
    """Object keys with `//` or a leading `/` (listed as they are): `a//one.md` would be
    `a/one.md` on disk, and `/top.md` no path below the output."""
    odd = [FileInfo("a//one.md", 9, "v9"), FileInfo("/top.md", 9, "v9")]
    odd += [FileInfo("b//qa-pairs.md", 9, "v9"), FileInfo("a//logo.png", 9, "v9")]
    plan = make_plan([*FILES, *odd], Manifest(), "s1", GLOBS)
    assert plan.fingerprints == make_plan(FILES, Manifest(), "s1", GLOBS).fingerprints
    assert [t.topic for t in plan.topics] == ["a", "b/c"]
    assert [(f["path"], f["code"]) for f in plan.skipped] == [
        ("/top.md", INVALID_FILE_NAME),
        ("a//one.md", INVALID_FILE_NAME),
        ("b//qa-pairs.md", INVALID_FILE_NAME),
    ]
    assert "empty folder name" in plan.skipped[0]["message"]


def test_an_object_whose_key_ends_in_a_slash_and_holds_bytes_is_left_out_and_reported():
    """`notes.md/` with content (an S3 key, listed as it is): it was dropped unsaid; a `.png/`
    would not have been read, so it goes unreported as the `.png` would."""
    odd = [FileInfo("a/notes.md/", 9, "v9"), FileInfo("a/logo.png/", 9, "v9")]
    plan = make_plan([*FILES, *odd], Manifest(), "s1", GLOBS)
    assert plan.fingerprints == make_plan(FILES, Manifest(), "s1", GLOBS).fingerprints
    assert [(f["path"], f["code"]) for f in plan.skipped] == [("a/notes.md/", INVALID_FILE_NAME)]
    assert "key ends in `/`" in plan.skipped[0]["message"]


def test_generated_and_hidden_directories_are_not_listed():
    assert keep_directory("guides") and keep_directory("_keywords")
    assert not keep_directory("_chunks") and not keep_directory("_index")
    assert not keep_directory(".embedding-cache") and not keep_directory("_reindex")


def test_links_not_followed_are_left_out_and_reported_when_they_would_have_been_read():
    links = [
        SkippedLink("a/x.md", "symbolic link", False),
        SkippedLink("a/qa-pairs.md", "symbolic link", False),
        SkippedLink("a/topic-spec.md", "symbolic link", False),
        SkippedLink("b/_keywords/words.md", "symbolic link", False),
        SkippedLink("b/docs", "symbolic link", True),
        SkippedLink("a/logo.png", "symbolic link", False),  # never read: not reported
    ]
    plan = make_plan([*FILES, *links], Manifest(), "s1", GLOBS)
    assert plan.fingerprints == make_plan(FILES, Manifest(), "s1", GLOBS).fingerprints
    assert [(f["path"], f["code"]) for f in plan.skipped] == [
        ("a/qa-pairs.md", SYMLINK_SKIPPED),
        ("a/topic-spec.md", SYMLINK_SKIPPED),
        ("a/x.md", SYMLINK_SKIPPED),
        ("b/_keywords/words.md", SYMLINK_SKIPPED),
        ("b/docs", SYMLINK_SKIPPED),
    ]
    assert plan.skipped[0]["message"] == "symbolic link"


def test_a_run_stopped_before_its_manifest_is_redone_whatever_the_input_then_holds():
    """The interim manifest (stored before a run writes anything) makes the next run rebuild each
    topic the stopped run rebuilt, relinked or removed and read each source it read or deleted,
    even with the input put back as it was, and delete each topic and directory it added, once
    gone from the input; a topic the run kept stays kept."""
    before = remember(FILES)
    edited = [FileInfo("a/one.md", 9, "v9"), *FILES[1:3], FileInfo("d/new.md", 6, "v6")]
    run = make_plan(edited, before, "s1", GLOBS)
    assert actions(run) == {"a": REBUILD, "d": REBUILD} and run.deleted_topics == ("b/c",)

    stopped = interim_manifest(before, run, "s1")

    assert make_plan(FILES, stopped, "s1", GLOBS).deleted_topics == ("d",)
    again = make_plan(FILES, stopped, "s1", GLOBS)  # the input put back as it was
    assert actions(again) == {"a": REBUILD, "b/c": REBUILD}
    assert again.changed == {"a/one.md", "b/c/three.md"}  # a/two.md: carried, not read
    assert set(stopped.directories) == {"", "b"}  # `d` is a topic: no directory index of its own
    relinked = make_plan(FILES + [FileInfo("b/c/e/x.md", 7, "v7")], before, "s1", GLOBS)
    assert actions(relinked) == {"a": KEEP, "b/c": RELINK, "b/c/e": REBUILD}
    assert interim_manifest(before, relinked, "s1").sources == before.sources
    back = make_plan(FILES, interim_manifest(before, relinked, "s1"), "s1", GLOBS)
    assert actions(back) == {"a": KEEP, "b/c": REBUILD} and back.deleted_topics == ("b/c/e",)


def test_files_named_like_markdown_that_no_glob_matches_are_named():
    """`GUIDE.MD`, `x.markdown` and `page.mdx` were silently no source under the default `*.md`:
    the plan names them (the build logs them, the dry run says them); a hidden or `_` folder's,
    a topic file and a glob's own matches are not named."""
    names = ["a/GUIDE.MD", "a/x.markdown", "b/page.mdx", "a/one.md", "_site/x.MD", "a/QA-PAIRS.MD"]
    files = [FileInfo(name, 1, "v1") for name in names]
    plan = make_plan(files, Manifest(), "s1", GLOBS)
    assert plan.unmatched == ("a/GUIDE.MD", "a/x.markdown", "b/page.mdx")
    assert (
        make_plan(files, Manifest(), "s1", ("*.md", "*.MD", "*.markdown", "*.mdx")).unmatched == ()
    )
    note = unmatched_note(plan.unmatched, GLOBS)
    assert note == (
        "3 files named like markdown are no source, as no glob of sources.globs ['*.md'] matches "
        "(a/GUIDE.MD, a/x.markdown, b/page.mdx): add a glob to index them"
    )


def test_exclude_patterns_match_a_path_or_one_of_its_folders():
    """`sources.exclude`: `node_modules` leaves out all below every such folder, at any depth, as
    .gitignore reads a pattern without a `/` (until 2026-12-01 only a top-level one: a
    Docusaurus root's `website/node_modules/**/README.md` were sources), `*/drafts` one at any
    depth below the top, `*.draft.md` a file anywhere (fnmatch's `*` crosses `/`); nothing
    else."""
    patterns = ("node_modules", "*/drafts", "*.draft.md")
    assert excluded("node_modules/pkg/README.md", patterns)
    assert excluded("website/node_modules/pkg/README.md", patterns)
    assert excluded("a/b/node_modules/c/node_modules/d.md", patterns)
    assert not excluded("website/node_modules.md", patterns)  # a file of another name
    assert excluded("guides/drafts/a.md", patterns) and excluded("a/b/drafts/c/d.md", patterns)
    assert excluded("guides/intro.draft.md", patterns) and excluded("x.draft.md", patterns)
    assert not excluded("guides/intro.md", patterns)
    assert not excluded("docs/node_modules.md", patterns)  # a file, not the folder
    assert not excluded("drafts/a.md", patterns)  # `*/drafts` needs a folder above it
    assert not excluded("guides/intro.md", ())
