"""The driver's finish, after every rebuilt topic is written: relinks of topics whose children
changed, deletions of topics and sources that are gone, directory indexes, the corpus SimHash
tables, the embedding settings `_index/model.json`, and the manifest the next run compares against.
"""

from __future__ import annotations

import posixpath
from dataclasses import replace
from typing import Any

from chunking import ChunkingError
from chunking.normalize import decode
from indexing import (
    IndexSettings,
    build_simhash_tables,
    chunk_table_path,
    directory_index,
    document_table_path,
    orphaned_topic_files,
    set_child_topics,
    topic_spec_without_section,
)
from indexing.client import embedding_settings
from indexing.paths import (
    CHUNK_TABLES,
    CHUNKS_DIR,
    DOCUMENT_TABLES,
    EMBEDDING_SETTINGS,
    INDEX,
    TOPIC_SPEC,
    in_topic,
)
from indexing.simhash_tables import ROOT as SIMHASH_ROOT
from jobs.config import JobConfig
from jobs.manifest import MANIFEST_PATH, SETTLED_FAILURES, Manifest, SourceEntry, TopicEntry
from jobs.plan import REBUILD, RELINK, Plan, TopicPlan
from jobs.stages.topic import existing_index_of, index_left
from jobs.storage import Storage, SymlinkRefused


def _conflicts(topic: TopicPlan, plan: Plan, previous: Manifest) -> dict[str, SourceEntry]:
    """The manifest entries of a topic's sources that share a stem: failed, never read (their
    content hash, if any, is that of the bytes last indexed), and read again once the listing no
    longer fails them (`jobs.plan`)."""
    entries = {}
    for path, _ in topic.conflicts:
        before = previous.sources.get(path)
        entries[path] = SourceEntry(plan.fingerprints[path], before and before.sha256, True)
    return entries


def index_settings(config: JobConfig) -> IndexSettings:
    """The indexing library's settings from the config."""
    return IndexSettings(
        prompt_threshold=config.prompts.threshold,
        prompt_top_k=config.prompts.top_k,
        technical_titles=config.index.technical_titles,
        simhash_k=config.index.simhash_k,
    )


def finish(
    config: JobConfig,
    config_key: str,
    output: Storage,
    plan: Plan,
    previous: Manifest,
    built: dict[str, dict[str, Any]],
) -> tuple[Manifest, list[dict[str, str]]]:
    """Driver-side side effects after every topic is written; returns the manifest to store and
    the report failures of index.json files left as they were (`existing_index_of`). `previous`
    is the manifest in the output: the last run's, or this run's interim one
    (`jobs.plan.interim_manifest`), which differ only in what this run changes."""
    topics: dict[str, TopicEntry] = {}
    sources: dict[str, SourceEntry] = {}
    failures: list[dict[str, str]] = []
    for topic in plan.topics:
        if topic.action == REBUILD:
            summary = built[topic.topic]
            outcomes, failed = summary["sources"], summary["failures"]
            # path -> (code, message) of the settled failures: its sources' and its own files'
            settled = {
                f["path"]: (f["code"], f["message"])
                for f in failed
                if f["code"] in SETTLED_FAILURES
            }
            topics[topic.topic] = TopicEntry(
                inputs=topic.inputs,
                children=topic.children,
                files=tuple(summary["files"]),
                prompt_entries=tuple(tuple(e) for e in summary["prompt_entries"]),
                failed=any(f["code"] not in SETTLED_FAILURES for f in failed),
                settled_failures=tuple(
                    (path, *failure) for path, failure in settled.items() if path not in outcomes
                ),
                link_targets=tuple(summary["link_targets"]),
                page_links=tuple(summary["page_links"]),
            )
            for path, outcome in outcomes.items():
                sources[path] = SourceEntry(
                    plan.fingerprints[path], outcome.sha256, outcome.failed, settled.get(path)
                )
            sources.update(_conflicts(topic, plan, previous))
            continue
        entry = previous.topics[topic.topic]
        if topic.action == RELINK:
            problem = _relink(output, topic.topic, topic.children)
            if problem:
                path = in_topic(topic.topic, INDEX)
                failures.append(index_left(path, problem, "its child topics are not updated"))
            # The interim manifest marked it failed; a relinked topic was not (or the plan had
            # rebuilt it): failed only while its index.json is left (rebuilt until it is moved).
            # It stayed failed, so the next run rebuilt it for nothing (2026-12-01).
            entry = replace(entry, children=topic.children, failed=problem is not None)
        elif topic.topic == "":  # a root topic kept since a build before 2026-12-01 gains its links
            _relink(output, topic.topic, topic.children)
        topics[topic.topic] = entry
        sources.update({p: previous.sources[p] for p in topic.sources})
        sources.update(_conflicts(topic, plan, previous))

    # Every link to what goes is gone first (relinks above, directory indexes here), so a finish
    # stopped on the way leaves no index.json linking a removed one.
    failures += write_directory_indexes(output, plan.directories)
    for topic in plan.deleted_topics:
        # a folder of topics still: its index.json is now the folder's directory index
        remove_topic(
            output,
            topic,
            keep_index=topic in plan.directories,
            separate=config.output != config.input,
        )
    current = set(topics) | set(plan.directories)
    gone = [d for d in previous.directories if d not in current]
    output.delete([in_topic(d, INDEX) for d in gone if _written_here(output, d)])
    if config.output != config.input:  # in place, a folder left empty is the person's to remove
        remove_empty_folders(output, [*plan.deleted_topics, *gone])

    entries = [
        (h, topic, stem, i)
        for topic, entry in topics.items()
        for h, stem, i in entry.prompt_entries
    ]
    tables = build_simhash_tables(sorted(entries), k=index_settings(config).simhash_k)
    if new := set(tables) - set(previous.simhash_files):  # named before they are written
        named = tuple(sorted({*previous.simhash_files, *new}))
        output.write_bytes(MANIFEST_PATH, replace(previous, simhash_files=named).to_json())
    for path, data in sorted(tables.items()):
        output.write_if_changed(path, data)
    stale = sorted(set(previous.simhash_files) - set(tables))
    output.delete(stale)
    remove_empty_folders(output, _folders_below(SIMHASH_ROOT, stale))  # `_index/` is the job's
    settings = embedding_settings(config.embedding.model, vars(config.embedding))
    output.write_if_changed(EMBEDDING_SETTINGS, settings)  # for `mdindex query --question`
    output.delete(output.temporaries(_shared_folders(plan, tables)))
    manifest = Manifest(
        config_key=config_key,
        sources=sources,
        topics=topics,
        directories=tuple(sorted(plan.directories)),
        simhash_files=tuple(sorted(tables)),
        stamps=plan.stamps,
    )
    return manifest, failures


def _relink(output: Storage, topic: str, children: tuple[str, ...]) -> str | None:
    """Rewrite a kept topic's index.json where its links to `children`, or its `_links`, are not
    this version's (`set_child_topics`: a root's `corpus_links`); return why the file there is not
    one this job wrote (`existing_index_of`), left as it is, or None."""
    index, problem = existing_index_of(output, topic, replace_moved=False)
    if index is not None and problem is None:
        relinked = set_child_topics(index, list(children))
        if relinked != index:  # already read: not `write_if_changed`, which reads again
            output.write_bytes(in_topic(topic, INDEX), relinked)
    return problem


def write_directory_indexes(
    output: Storage, directories: dict[str, list[str]]
) -> list[dict[str, str]]:
    """Write each folder's directory index linking its child topics (`directories`: folder ->
    children) where it changed (an output built before 2026-12-01 gets the root's
    `corpus_links` so, its topics kept); return the report failures of folders whose index.json
    is not one this job wrote (left as it is)."""
    failures = []
    for directory, children in directories.items():
        path, data = in_topic(directory, INDEX), directory_index(directory, children)
        index, problem = existing_index_of(output, directory)
        if problem:
            failures.append(index_left(path, problem, "the folder has no directory index"))
        elif index != data:
            output.write_bytes(path, data)
    return failures


def _shared_folders(plan: Plan, tables: dict[str, bytes]) -> set[str]:
    """The folders the finish writes to, and those every topic's tables go to: where a run that
    was interrupted can have left temporary files that no topic's rebuild removes."""
    relinked = [topic.topic for topic in plan.topics if topic.action == RELINK]
    return {
        CHUNK_TABLES,
        DOCUMENT_TABLES,
        posixpath.dirname(EMBEDDING_SETTINGS),
        posixpath.dirname(MANIFEST_PATH),
        *(posixpath.dirname(path) for path in tables),
        *plan.directories,
        *relinked,
    }


def _written_here(output: Storage, folder: str) -> bool:
    """Whether the folder's index.json, if any, is one this job wrote: a person's own file put
    in its place since, a damaged one or a symbolic link is never deleted."""
    return existing_index_of(output, folder)[1] is None


def remove_empty_folders(output: Storage, folders: list[str]) -> None:
    """Remove each of `folders` that is left empty, deepest first (the root never): a fresh build
    makes no folder for a topic, directory or SimHash table it does not have."""
    for folder in sorted(filter(None, folders), key=lambda f: f.count("/"), reverse=True):
        output.remove_empty_folder(folder)


def _folders_below(root: str, paths: list[str]) -> list[str]:
    """The folders holding `paths`, and their parents, below `root` (itself left out)."""
    found = set()
    for path in paths:
        folder = posixpath.dirname(path)
        while folder.startswith(f"{root}/"):
            found.add(folder)
            folder = posixpath.dirname(folder)
    return sorted(found)


def remove_topic(output: Storage, topic: str, *, keep_index: bool, separate: bool) -> None:
    """Delete the outputs of a topic that lost all its sources (seed 001 lifecycle): its
    index.json (unless `keep_index`, or it is not the one this job wrote: `_written_here`), every
    chunk file in its `_chunks/` (those of a run that stopped before its manifest too) and the
    folder once empty, its table shards, the temporary files of interrupted writes in both
    folders, and the generated part of its topic-spec.md (a hand-written part stays; so does a
    symbolic link there), or all of it in a `separate` output, where the hand-written part was the
    input's, gone with the topic's folder."""
    index = in_topic(topic, INDEX)
    chunk_files = output.list_files(in_topic(topic, CHUNKS_DIR))
    doomed = orphaned_topic_files(topic, [index, *chunk_files])
    if keep_index or not _written_here(output, topic):
        doomed.remove(index)
    # index.json first: a build killed on the way leaves no index.json naming a deleted chunk file
    output.delete(sorted(doomed, key=lambda path: path != index))
    output.delete([chunk_table_path(topic), document_table_path(topic)])
    # what a reduce killed in its writes left (no rebuild of the topic will remove them now)
    output.delete(output.temporaries([topic]) + output.temporaries_among(chunk_files))
    output.remove_empty_folder(in_topic(topic, CHUNKS_DIR))
    spec_path = in_topic(topic, TOPIC_SPEC)
    try:
        spec = output.read_optional(spec_path)
    except SymlinkRefused:
        return
    if spec is not None:
        try:
            text = decode(spec)  # as `jobs.stages.topic` reads it: a BOM dropped
        except ChunkingError:
            return  # not ours to rewrite: a person's file we cannot decode stays as it is
        rest = None if separate else topic_spec_without_section(text)
        if rest is None:
            output.delete([spec_path])
        else:
            output.write_bytes(spec_path, rest.encode("utf-8"))
