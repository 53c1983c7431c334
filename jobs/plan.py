"""Discovery and change detection: from a listing and the previous manifest to the work of this run.

Pure functions over `FileInfo` listings. A topic is rebuilt when anything its index depends on
changed (a source's fingerprint, its qa-pairs.md, its keywords file, the settings, whether a path
its links name is a source) or when it had a failure to retry last time; it is relinked (only
`_embedded.topics` rewritten) when only its child topics changed; otherwise it is kept as it is,
without reading anything. A source, qa-pairs.md or keywords file whose failure its bytes and the
settings decide (a settled failure: invalid UTF-8, bad front matter, a malformed keywords table)
is not retried while both stay the same; the run reports it again. Read failures, timeouts and
unexpected errors are retried. Sources of a topic that share a stem (`intro.md` beside
`intro.mdx`) fail here, from the listing: none of them is read, and no run rebuilds the topic for
them. Symbolic links the listing did not follow, and files whose path is not UTF-8 or has an empty
folder name (`a//b.md`), are not part of the corpus; those that would have mattered are reported.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from indexing import group_sources, nearest_keywords_path
from indexing.paths import TOPIC_SPEC, shared_stems, source_stem
from indexing.sources import KEYWORDS_FILE, QA_PAIRS, TOPIC_FILES, index_tree, is_source
from indexing.terminal import counted, printable
from jobs.manifest import Manifest, TopicEntry
from jobs.storage import FileInfo, SkippedLink

NOT_BUILT = ""  # the fingerprint and inputs of an entry a run stopped before finishing
REBUILD = "rebuild"
RELINK = "relink"
KEEP = "keep"
SYMLINK_SKIPPED = "SYMLINK_SKIPPED"
INVALID_FILE_NAME = "INVALID_FILE_NAME"
STEM_CONFLICT = "STEM_CONFLICT"


@dataclass(frozen=True)
class TopicPlan:
    """One topic of this run and what to do with it."""

    topic: str
    sources: tuple[str, ...]  # those to index: all but `conflicts`
    questions: str | None  # the topic's qa-pairs.md, if any
    keywords: str | None  # the nearest _keywords/words.md, if any
    children: tuple[str, ...]
    inputs: str  # fingerprint of everything the index depends on except the children
    action: str
    conflicts: tuple[tuple[str, str], ...] = ()  # (path, message) of sources sharing a stem


@dataclass(frozen=True)
class Plan:
    """The work of one run, decided on the driver from listings (and, for the topics it would
    keep, whether their files are still in the output)."""

    topics: tuple[TopicPlan, ...]
    directories: dict[str, list[str]]  # ancestor dirs that are not topics -> their children
    fingerprints: dict[str, str]  # source path -> listing fingerprint
    changed: frozenset[str]  # sources whose content, settings or last outcome differ
    deleted: tuple[str, ...]  # sources gone since the previous run
    deleted_topics: tuple[str, ...]
    # report failures for files left out of the corpus: links not followed, unusable names
    skipped: tuple[dict[str, str], ...] = ()
    settled: tuple[dict[str, str], ...] = ()  # report failures of files not read again
    unmatched: tuple[str, ...] = ()  # files named like markdown that no glob makes a source
    # the manifest's `stamps` for this run's listing (`jobs.discovery.restamped`)
    stamps: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def rebuilt(self) -> tuple[TopicPlan, ...]:
        """The topics this run rebuilds."""
        return tuple(t for t in self.topics if t.action == REBUILD)

    @property
    def conflicts(self) -> tuple[dict[str, str], ...]:
        """Report failures (STEM_CONFLICT) of the sources that share a stem in their topic, never
        read; sorted by path."""
        found = sorted(c for topic in self.topics for c in topic.conflicts)
        return tuple({"path": path, "code": STEM_CONFLICT, "message": m} for path, m in found)


def keep_directory(name: str) -> bool:
    """Directories worth listing: not hidden, not generated ("_" prefix) except `_keywords`."""
    return not name.startswith(".") and (not name.startswith("_") or name == "_keywords")


def _is_keywords_file(path: str) -> bool:
    """Whether a corpus-relative path is a `_keywords/words.md` (of the root or of a folder)."""
    return path == KEYWORDS_FILE or path.endswith("/" + KEYWORDS_FILE)


def compared_file(path: str, globs: tuple[str, ...], separate: bool) -> bool:
    """Whether the plan compares a listed file that is no source: a qa-pairs.md, a keywords
    file, and in a `separate` output an input's topic-spec.md (in place it is the output's)."""
    name = posixpath.basename(path)
    return not is_source(path, globs) and (
        name == QA_PAIRS or _is_keywords_file(path) or (separate and name == TOPIC_SPEC)
    )


def _would_be_read(path: str, globs: tuple[str, ...]) -> bool:
    """Whether a build reads a file at `path`: a source, qa-pairs.md, topic-spec.md or a
    keywords file."""
    return (
        is_source(path, globs) or posixpath.basename(path) in TOPIC_FILES or _is_keywords_file(path)
    )


def excluded(path: str, patterns: tuple[str, ...]) -> bool:
    """Whether `sources.exclude` leaves a listed path out: a pattern (`fnmatch`'s, whose `*`
    also matches `/`) that matches the path relative to the input or one of its folders, or,
    for a pattern without a `/`, the name of the file or of one of its folders, at any depth
    (as .gitignore reads one): `node_modules` leaves out everything below every folder of that
    name (until 2026-12-01 only a top-level one: `website/node_modules/**/README.md` were
    sources), `*/drafts` below every `drafts` folder but a top-level one."""
    if not patterns:
        return False
    parts = path.rstrip("/").split("/")
    folders = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    names = [p for p in patterns if "/" not in p]
    return any(fnmatch.fnmatchcase(folder, p) for folder in folders for p in patterns) or any(
        fnmatch.fnmatchcase(part, p) for part in parts for p in names
    )


# Names of markdown files that `sources.globs` may miss: `GUIDE.MD`, `x.markdown`, `page.mdx`.
MARKDOWN_NAMES = ("*.md", "*.markdown", "*.mdx")


def unmatched_markdown(files: Iterable[str], globs: tuple[str, ...]) -> tuple[str, ...]:
    """The listed paths named like markdown (`MARKDOWN_NAMES` in any case) that no glob makes a
    source, sorted: the default `*.md` misses a `GUIDE.MD` and every `.markdown` file, unsaid."""
    found = []
    for path in files:
        folder, _, name = path.rpartition("/")
        lower = f"{folder}/{name.lower()}" if folder else name.lower()
        if is_source(lower, MARKDOWN_NAMES) and not is_source(path, globs):
            found.append(path)
    return tuple(sorted(found))


def unmatched_note(paths: Sequence[str], globs: Sequence[str], count: int | None = None) -> str:
    """`unmatched_markdown`'s paths in words, the first three named (control characters
    escaped), for the build's log, its report and the dry run; `count`: how many in all, where
    `paths` are the first of them (a report's)."""
    count = len(paths) if count is None else count
    named = ", ".join(printable(path) for path in paths[:3]) + (", …" if count > 3 else "")
    files, are = counted(count, "file"), "is" if count == 1 else "are"
    return (
        f"{files} named like markdown {are} no source, as no glob of sources.globs "
        f"{list(globs)} matches ({named}): add a glob to index them"
    )


LOGGED = 20  # paths of each kind of plan warning the build's log names one a line


def plan_warnings(plan: Plan, globs: tuple[str, ...]) -> list[str]:
    """The build's warnings for the plan (names escaped: a newline in one would forge a log
    line): the first LOGGED links and names skipped, sources sharing a stem and settled failures,
    one a line, then how many more of each (2,000 failed sources logged 2,000 lines on every
    run that left them unchanged); the markdown names no glob matches."""
    kinds = [
        ("skipped", [f"{f['path']} skipped: {f['message']}" for f in plan.skipped]),
        ("not indexed", [f"{f['path']} not indexed: {f['message']}" for f in plan.conflicts]),
        (
            "still failing, unchanged since",
            [
                f"{f['path']} still fails, unchanged since (not read again): {f['code']}: "
                f"{f['message']}"
                for f in plan.settled
            ],
        ),
    ]
    lines = []
    for what, found in kinds:
        lines += found[:LOGGED]
        if len(found) > LOGGED:
            lines.append(
                f"... and {len(found) - LOGGED} more {what} (of {len(found)}: every one in "
                "_reindex/report.json's failures)"
            )
    lines += [unmatched_note(plan.unmatched, globs)] if plan.unmatched else []
    return [printable(line) for line in lines]


def skipped_links(links: list[SkippedLink], globs: tuple[str, ...]) -> tuple[dict[str, str], ...]:
    """Report failures (SYMLINK_SKIPPED) for the links not followed that would have been read:
    folders, sources, qa-pairs.md, topic-spec.md and keywords files; sorted by path."""
    return tuple(
        {"path": shown(link.path), "code": SYMLINK_SKIPPED, "message": link.reason}
        for link in sorted(links, key=lambda link: link.path)
        if link.directory or _would_be_read(link.path, globs)
    )


def name_problem(path: str) -> str | None:
    """Why no index can name a listed path, or None: a path that is not UTF-8 (a local file or
    folder name in Latin-1, say, which Python lists with surrogate escapes; chunk files, hrefs,
    tables and report are UTF-8), an object key ending in `/` that holds bytes, one with an
    empty folder name (an object key with `//`, or
    starting with `/`: on disk `a//b.md` is `a/b.md`, and the folder `/` of `/b.md` is its own
    parent, no path below the output), or one with a folder or file `.` or `..` (`a/./b.md` is
    `a/b.md` on disk, `a/../b.md` is `b.md`: either may be another object's path)."""
    try:
        path.encode("utf-8", "surrogateescape").decode("utf-8")
    except UnicodeDecodeError as exc:
        return (
            f"the path is not UTF-8 (byte 0x{exc.object[exc.start]:02X} at offset {exc.start}), "
            "so no index can name it: rename the file or its folder"
        )
    if path.endswith("/"):
        return (
            "the object's key ends in `/`, as a folder's does, but it holds bytes, so no index can "
            "name it: rename the object"
        )
    if "" in path.split("/"):
        return (
            "the path has an empty folder name (a `//` in the object's key, or a key starting "
            "with `/`), so no index can name it: rename the object"
        )
    if {".", ".."} & set(path.split("/")):
        return (
            "the path has a folder or file named `.` or `..` (in the object's key), which no path "
            "on disk can hold (`a/./b.md` is `a/b.md`, `a/../b.md` is `b.md`), so no index can "
            "name it: rename the object"
        )
    return None


def shown(path: str) -> str:
    """A listed path as a report shows it: bytes that are not UTF-8 escaped (`bad\\xff.md`)."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _undotted(path: str) -> str:
    """A listed path without its trailing `/` and its folders `.` and `..` (`t/../a.md` is
    `t/a.md`)."""
    *folders, name = path.rstrip("/").split("/")
    return "/".join([*(f for f in folders if f not in (".", "..")), name])


def invalid_names(files: list[FileInfo], globs: tuple[str, ...]) -> tuple[dict[str, str], ...]:
    """Report failures (INVALID_FILE_NAME) for the files with a `name_problem` that would have
    been read, were their folders `.` and `..` gone (no hidden folders: `is_source` passes over
    those) (`shown`); sorted by path."""
    failures = [
        {"path": shown(file.path), "code": INVALID_FILE_NAME, "message": problem}
        for file in files
        if (problem := name_problem(file.path)) and _would_be_read(_undotted(file.path), globs)
    ]
    return tuple(sorted(failures, key=lambda failure: failure["path"]))


def make_plan(
    listing: list[FileInfo | SkippedLink],
    previous: Manifest,
    settings: str,
    globs: tuple[str, ...],
    *,
    separate: bool = False,
) -> Plan:
    """Decide what this run rebuilds, relinks, keeps and deletes (`settings`: the settings key;
    `separate`: the output is not the input, so a topic's `topic-spec.md` in the input is the one
    a person writes, and a change to it rebuilds the topic)."""
    files = [f for f in listing if isinstance(f, FileInfo)]
    misnamed = [f for f in files if name_problem(f.path)]  # each path checked once
    left_out = {f.path for f in misnamed}
    by_path = {f.path: f for f in files if f.path not in left_out}
    topics = group_sources(by_path, globs)
    keyword_files = frozenset(p for p in by_path if _is_keywords_file(p))  # once, not per topic
    tree = index_tree(topics)
    settings_changed = previous.config_key != settings
    fingerprints = {p: by_path[p].fingerprint for paths in topics.values() for p in paths}
    conflicts = {topic: stem_conflicts(sources) for topic, sources in topics.items()}
    unread = {path for found in conflicts.values() for path, _ in found}

    def changed(path: str) -> bool:
        entry = previous.sources.get(path)
        return path not in unread and (
            settings_changed
            or entry is None
            or (entry.failed and entry.settled_failure is None)
            or entry.fingerprint != fingerprints[path]
        )

    plans = []
    for topic, listed in topics.items():
        sources = [path for path in listed if path not in unread]
        qa = posixpath.join(topic, QA_PAIRS) if topic else QA_PAIRS
        questions = qa if qa in by_path else None
        keywords = nearest_keywords_path(topic, keyword_files)
        facts = {
            "config": settings,
            "sources": [[p, fingerprints[p]] for p in sources],
            "questions": questions and by_path[questions].fingerprint,
            "keywords": keywords and [keywords, by_path[keywords].fingerprint],
        }
        if conflicts[topic]:  # their failed rows are in its tables: only then, as topic_spec
            facts["conflicts"] = [path for path, _ in conflicts[topic]]
        spec = posixpath.join(topic, TOPIC_SPEC) if topic else TOPIC_SPEC
        if separate and spec in by_path:  # only then: a topic without one keeps its digest
            facts["topic_spec"] = by_path[spec].fingerprint
        inputs = _digest(facts)
        children = tuple(tree[topic])
        before = previous.topics.get(topic)
        if (
            before is None
            or before.failed
            or before.inputs != inputs
            or settings_changed
            or links_moved(before.link_targets, fingerprints, previous)
        ):
            action = REBUILD
        elif before.children != children:
            action = RELINK
        else:
            action = KEEP
        plans.append(
            TopicPlan(
                topic,
                tuple(sources),
                questions,
                keywords,
                children,
                inputs,
                action,
                conflicts=conflicts[topic],
            )
        )
    return Plan(
        topics=tuple(plans),
        settled=settled_failures(plans, previous),
        directories={d: c for d, c in tree.items() if d not in topics},
        fingerprints=fingerprints,
        changed=frozenset(p for p in fingerprints if changed(p)),
        deleted=tuple(sorted(set(previous.sources) - set(fingerprints))),
        deleted_topics=tuple(sorted(set(previous.topics) - set(topics))),
        skipped=skipped_links([f for f in listing if isinstance(f, SkippedLink)], globs)
        + invalid_names(misnamed, globs),
        unmatched=unmatched_markdown(by_path, globs),
    )


def stem_conflicts(sources: list[str]) -> tuple[tuple[str, str], ...]:
    """The (path, message) of each of a topic's `sources` whose stem another one shares
    (`intro.md` beside `intro.mdx`, which `sources.globs` can both match), sorted: a stem names one
    source's index.json entry and chunk files, so none of them is indexed. The listing decides
    it, so no run reads them; one indexed before keeps its entry, as a failed source does."""
    return tuple(
        (
            path,
            f"{posixpath.basename(path)} shares its stem {source_stem(path)!r} with "
            f"{', '.join(others)} in this topic; a stem names one source's index.json entry and "
            "chunk files, so none of them is indexed: rename all but one",
        )
        for path, others in sorted(shared_stems(sources).items())
    )


def rebuilding(plan: Plan, topics: Iterable[str], previous: Manifest) -> Plan:
    """`plan` with each of `topics` rebuilt, whatever it would have done (the files of a kept or
    relinked topic are gone from the output: `jobs.discovery.topics_missing_files`), and its
    settled failures left to its reduce, which reads those sources again and reports them."""
    gone = set(topics)
    if not gone:
        return plan
    rebuilt = [
        replace(topic, action=REBUILD) if topic.topic in gone else topic for topic in plan.topics
    ]
    return replace(plan, topics=tuple(rebuilt), settled=settled_failures(rebuilt, previous))


def interim_manifest(previous: Manifest, plan: Plan, settings: str) -> Manifest:
    """The manifest to store while `plan` runs, before its first write into the output: the
    previous one, with each topic the run rebuilds (new ones too), relinks or removes marked
    failed, each source it reads or deletes given a fingerprint no file has (`NOT_BUILT`), and
    its directories added. A run that stops before its own manifest (a crash, a kill, a failure)
    leaves this one, so the next run rebuilds those topics and reads those sources again
    whatever the input holds by then (an input put back as it was included), and removes those
    of them and the directory indexes that are no longer in it.

    It names the run's settings key `settings` (where the previous one had another, the run
    rebuilds every topic and reads every source, so each entry is marked): a first run's had
    none, the mark of a manifest this version cannot read, and the next run warned that it was
    damaged."""
    touched = plan.changed | set(plan.deleted)
    sources = {
        path: replace(entry, fingerprint=NOT_BUILT) if path in touched else entry
        for path, entry in previous.sources.items()
    }
    changing = [t.topic for t in plan.topics if t.action != KEEP] + list(plan.deleted_topics)
    topics = dict(previous.topics)
    for topic in changing:
        topics[topic] = replace(topics.get(topic) or TopicEntry(NOT_BUILT, (), ()), failed=True)
    directories = tuple(sorted({*previous.directories, *plan.directories}))
    return replace(
        previous,
        config_key=settings,
        sources=sources,
        topics=topics,
        directories=directories,
    )


def settings_differ(previous: Manifest, settings: str) -> bool:
    """Whether the last run built the output under other settings than `settings` (this run's
    key): every source then counts as changed and every topic is rebuilt. False on a first run."""
    return bool(previous.config_key) and previous.config_key != settings


def links_moved(
    targets: tuple[str, ...] | None, fingerprints: dict[str, str], previous: Manifest
) -> bool:
    """Whether a path a topic's links name became a source, or stopped being one, since the last
    run: its links' `target_document` changed. Unknown targets (a manifest of format 3 or 4)
    count as moved."""
    if targets is None:
        return True
    return any((path in fingerprints) != (path in previous.sources) for path in targets)


def settled_failures(topics: list[TopicPlan], previous: Manifest) -> tuple[dict[str, str], ...]:
    """Report failures (the previous run's path, code and message) of the settled failures of
    the topics this run does not rebuild, their sources' and their qa-pairs.md's and keywords
    file's: unchanged, so not read again; each once, sorted by path. (A rebuilt topic reads them
    again, and its reduce reports them.)"""
    failures = []
    for topic in topics:
        if topic.action == REBUILD:
            continue
        for path in topic.sources:
            if settled := previous.sources[path].settled_failure:
                failures.append({"path": path, "code": settled[0], "message": settled[1]})
        for path, code, message in previous.topics[topic.topic].settled_failures:
            failures.append({"path": path, "code": code, "message": message})
    return tuple(distinct_failures(failures))


def distinct_failures(failures: Iterable[dict[str, str]]) -> list[dict[str, str]]:
    """Report failures once each, sorted by path, code and message. A keywords file that several
    topics read (the root's serves every topic without its own) fails in each of them, the same
    way: the report names it once."""
    unique = {(f["path"], f["code"], f["message"]): f for f in failures}
    return [unique[key] for key in sorted(unique)]


def settings_digest(settings: dict) -> str:
    """A short digest of every setting that changes the outputs."""
    return _digest(settings)[:16]


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()
