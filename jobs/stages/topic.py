"""Stage 3: the per-topic reduce. Build one topic's index with `indexing.build_topic` from its
rows and the unchanged sources it carries from the previous tables (sorted, so arrival order never
matters; a failed source keeps its rows of the previous tables, its index entry and its chunk
files) and switch the topic to it (`switch`): new chunk files (but those the chunk tasks wrote
ahead, `jobs.stages.chunk_files`), then index.json, then the table shards and topic-spec.md, then
the clean-up. Returns one small summary per topic for the driver."""

from __future__ import annotations

import io
import json
import logging
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from chunking import ChunkedDocument, ChunkingError
from chunking.links import target_paths
from chunking.normalize import decode
from indexing import (
    IndexSettings,
    SourceInput,
    TopicInput,
    build_topic,
    chunk_table_path,
    document_table_path,
    parse_keywords,
    stale_files,
)
from indexing.hal import INDEX_JSON_FAILED, moved_index, not_an_index
from indexing.keywords import KEYWORDS_FAILED, Keyword, no_keywords
from indexing.paths import (
    CHUNKS_DIR,
    INDEX,
    TOPIC_SPEC,
    in_topic,
    is_chunk_file,
)
from indexing.questions import no_questions
from indexing.sources import is_source
from indexing.terminal import printable
from indexing.topic_spec import TOPIC_SPEC_FAILED
from jobs.broken_links import page_links
from jobs.gc_pause import gc_paused
from jobs.landmarks import Landmark, Plugin
from jobs.plan import STEM_CONFLICT
from jobs.previous import (
    Expected,
    PreviousTables,
    carried_document,
    read_previous,
    retained_rows,
)
from jobs.progress import report_stats, rows_key
from jobs.records import QUESTIONS, SOURCE, TOPIC, document_from_json, vectors_from_bytes
from jobs.stages.read import READ_FAILED
from jobs.stats import Clock, IndexStats, Notes, RunStats
from jobs.storage import Storage, SymlinkRefused

log = logging.getLogger("mdindex.build")
UTF8_BOM = "\ufeff".encode()


class Outcome(NamedTuple):
    """What became of one source of a topic (a tuple: the driver holds one per source)."""

    sha256: str | None
    failed: bool = False
    carried: bool = False


@dataclass(frozen=True)
class TopicContext:
    """What every topic reduce needs: where to read and write, and the index settings."""

    source: Storage
    output: Storage
    settings: IndexSettings
    expected: Expected  # the model and strategy of this run, for rows kept from the previous one
    collector: Any = None  # the run's `jobs.progress.Collector`, if any
    landmarks: tuple[Landmark | Plugin, ...] = ()  # what each node checks (jobs.landmarks)
    tenant: str = "default"  # the build's tenant, for the documents rows of failed sources


def build_and_write(group: pa.Table, *, context: TopicContext) -> dict[str, Any]:
    """Build and write one topic from all its rows; return its summary for the driver.

    Unchanged sources named in the topic row are carried from the previous tables, but those with
    a row of their own. When one cannot be (tables missing or unusable), nothing is written and
    the summary lists those under `recarry`, for the driver to run them through the pipeline and
    reduce the topic again with their rows. Python's collector is paused meanwhile
    (`jobs.gc_pause`), as in the chunk and embed stages: in a reduce task, and in the driver of a
    run without Ray, where it traversed torch's and transformers' objects again and again."""
    with gc_paused():
        return _build_and_write(group, context)


def _build_and_write(group: pa.Table, context: TopicContext) -> dict[str, Any]:
    """`build_and_write`, the collector paused."""
    clock = Clock()
    rows = group.to_pylist()
    facts = json.loads(next(r for r in rows if r["kind"] == TOPIC)["payload"])
    topic = rows[0]["topic"]
    source_rows = [r for r in rows if r["kind"] == SOURCE]
    read = {r["path"] for r in source_rows}
    unchanged = {p: sha256 for p, sha256 in facts["carried"].items() if p not in read}
    conflicts = facts["conflicts"]  # reported by the plan: failed rows here, nothing else
    rows = sorted(rows, key=lambda r: (r["kind"], r["path"]))
    existing_index, problem = existing_index_of(context.output, topic)
    if problem:
        return _not_written(topic, problem, source_rows, unchanged)
    failed = conflicts or any(r["error_code"] is not None for r in source_rows)
    previous = (  # read before writing
        read_previous(context.output, topic) if failed or unchanged else None
    )
    carried = {
        path: _carried(previous, path, sha256, context.expected)
        for path, sha256 in sorted(unchanged.items())
    }
    if recarry := sorted(path for path, found in carried.items() if found is None):
        return _summary(topic, {"recarry": recarry})
    spec_path = in_topic(topic, TOPIC_SPEC)
    existing_spec, spec_left, spec_failure = _existing_spec(context, spec_path)
    failures = [_failure(r) for r in rows if r["error_code"] is not None] + spec_failure
    keywords, keyword_failure, warnings = read_keywords(context.source, facts["keywords"])
    failures += keyword_failure
    questions, question_vectors, question_warnings = _questions(rows)
    warnings += question_warnings
    sources = sorted(
        [_source_input(r, previous, context.expected) for r in source_rows]
        + [SourceInput(path, *found) for path, found in carried.items()]
        + [
            _failed_input(path, (STEM_CONFLICT, message), previous, context.expected)
            for path, message in conflicts.items()
        ],
        key=lambda source: source.path,
    )
    output = build_topic(
        TopicInput(
            topic=topic,
            sources=sources,
            questions=questions,
            question_vectors=question_vectors,
            keywords=keywords,
            child_topics=facts["children"],
            previous_index=existing_index,
            existing_topic_spec=existing_spec,
            model=context.expected.model,
            strategy=context.expected.strategy_key,
            tenant_id=context.tenant,
        ),
        context.settings,
    )
    tables = {
        chunk_table_path(topic): output.chunk_rows,
        document_table_path(topic): output.document_rows,
    }
    ahead = {path for row in source_rows for path in row["chunk_files"] or ()}  # written
    files = {
        path: data
        for path, data in output.files.items()
        if not (path == spec_path and spec_left) and path not in ahead
    }
    files.update({path: _parquet(table) for path, table in tables.items()})
    live = output.live_paths()
    switch(context.output, topic, files, named=output.previous, live=live)
    reused = sum(len(document.chunks) for document, _ in carried.values())
    report_stats(
        context.collector,
        RunStats(
            index=IndexStats(
                topics=1,
                chunks=sum(len(s.document.chunks) for s in sources if s.document is not None),
                carried=len(carried),
                reused=reused,
                warnings=Notes(tuple(warnings)),
                **clock.spent(),
            )
        ),
        rows_key("index", group),
    )
    outcomes = {r["path"]: Outcome(r["sha256"], r["error_code"] is not None) for r in source_rows}
    outcomes.update({path: Outcome(unchanged[path], carried=True) for path in carried})
    return _summary(
        topic,
        {
            "files": sorted(live | set(tables)),
            "prompt_entries": [[h, stem, i] for h, _, stem, i in output.prompt_entries],
            "failures": failures,
            "sources": outcomes,
            "link_targets": link_targets(sources, context.expected.source_globs),
            "page_links": page_links(
                sources, {path: facts["carried_links"].get(path, ()) for path in carried}
            ),
        },
    )


def link_targets(sources: list[SourceInput], globs: tuple[str, ...]) -> list[str]:
    """The paths the relative links of a topic's chunked sources may name that could be sources
    (their file names match `globs`; `./setup` may name `setup.md`, `setup/index.md`, ...),
    sorted: whether each is one decides its links' `target_document`, so the plan rebuilds the
    topic when one appears or goes (`jobs.plan`).
    A failed source's kept rows are left as they were, and not counted."""
    return sorted(
        {
            target
            for source in sources
            if source.document is not None
            for chunk in source.document.chunks
            for link in chunk.links
            for target in target_paths(link, source.path)
            if is_source(target, globs)
        }
    )


def switch(
    storage: Storage, topic: str, files: dict[str, bytes], *, named: frozenset[str], live: set[str]
) -> None:
    """Write a topic's `files` so that a reader of its index.json sees the old version or the new
    one, never a mix, and a failure before the switch leaves every file of the old version as it
    was: first the chunk files (new names), then index.json (the switch: one rename or one PUT),
    then the table shards and topic-spec.md, then the removal of the chunk files outside `live`
    (the new version's; orphans of an interrupted run too), of temporary files left behind, and
    of a chunk folder left empty.
    `named`: the chunk files of the live index.json; a name holds one text (`chunk_file`), so
    those already there are not written again."""
    index_path = in_topic(topic, INDEX)
    listing = storage.list_files(in_topic(topic, CHUNKS_DIR))
    chunks = {path: data for path, data in files.items() if is_chunk_file(path)}
    # Those no live index.json names are fetched by no reader: written in place (half the
    # directory operations of a temporary file and rename); a half-written one is an orphan,
    # rewritten by the next build of the topic.
    storage.write_many({p: d for p, d in chunks.items() if p not in named}, in_place=True)
    missing = named - set(listing)  # named, yet gone: written whole, as a reader may fetch them
    storage.write_many({p: d for p, d in chunks.items() if p in missing})
    storage.write_bytes(index_path, files[index_path])
    storage.write_many({p: d for p, d in files.items() if p not in chunks and p != index_path})
    leftovers = storage.temporaries([topic]) + storage.temporaries_among(listing)
    storage.delete(stale_files(listing, live) + leftovers)
    if not any(is_chunk_file(path) for path in live):  # as a fresh build: no folder for none
        storage.remove_empty_folder(in_topic(topic, CHUNKS_DIR))


def _not_written(
    topic: str, problem: str, source_rows: list[dict[str, Any]], unchanged: dict[str, str]
) -> dict[str, Any]:
    """The summary of a topic whose index.json is not one this job wrote (a person's own, in an
    in-place build): nothing is written, the file is left as it is, and every source of the topic
    fails (INDEX_JSON_FAILED), to be tried again on the next run."""
    outcomes = {r["path"]: Outcome(r["sha256"], failed=True) for r in source_rows}
    outcomes.update({path: Outcome(sha256, failed=True) for path, sha256 in unchanged.items()})
    outcome = f"the topic's {len(outcomes)} sources are not indexed"
    failure = index_left(in_topic(topic, INDEX), problem, outcome)
    return _summary(
        topic,
        {
            "files": [],
            "prompt_entries": [],
            "failures": [failure],
            "sources": outcomes,
            "link_targets": [],
            "page_links": (),
        },
    )


def existing_index_of(
    storage: Storage, directory: str, *, replace_moved: bool = True
) -> tuple[bytes | None, str | None]:
    """A folder's index.json as this job wrote it before (None when there is none), or why the
    file there is not one: `not_an_index` (a person's own), or a symbolic link (never followed).
    One it wrote for another folder, moved or copied here with its folder (`moved_index`), counts
    as none, to be written anew, unless not `replace_moved` (a relink, which rewrites only the
    file's links: it is then named, and the topic rebuilt on the next run). A UTF-8 BOM before it
    is dropped, as before a source (an editor's, saving the file: it was not JSON to orjson, and
    the folder's topic was never indexed again until the file was moved away by hand)."""
    try:
        data = storage.read_optional(in_topic(directory, INDEX))
    except SymlinkRefused:
        return None, "a symbolic link (not followed)"
    data = data and data.removeprefix(UTF8_BOM)
    if data is None or (replace_moved and moved_index(data, directory)):
        return None, None
    return data, not_an_index(data, directory)


def index_left(path: str, problem: str, outcome: str) -> dict[str, str]:
    """The report failure (INDEX_JSON_FAILED) of an index.json this job did not write, which it
    leaves as it is (`problem`: `not_an_index`; `outcome`: what is not written instead)."""
    message = (
        f"{problem}: left untouched, so {outcome}; move the file away, or build into another "
        "--output"
    )
    return {"path": path, "code": INDEX_JSON_FAILED, "message": message}


def _summary(topic: str, facts: dict[str, Any]) -> dict[str, Any]:
    """The summary the driver reads (small: no chunk data)."""
    return {"topic": topic, **facts}


def _failure(row: dict[str, Any]) -> dict[str, str]:
    return {"path": row["path"], "code": row["error_code"], "message": row["error_message"]}


def _carried(
    previous: PreviousTables | None, path: str, sha256: str, expected: Expected
) -> tuple[ChunkedDocument, np.ndarray] | None:
    """An unchanged source's document and vectors from the previous tables, or None (never an
    exception: rows that do not parse make the source go through the pipeline)."""
    if previous is None:
        return None
    try:
        found = carried_document(previous, path, sha256, expected)
    except (KeyError, TypeError, ValueError) as exc:
        log.warning("%s: previous rows unusable (%s)", printable(path), exc)
        return None
    if found is None:
        log.info("%s: not in the previous tables as it is now; reading it", printable(path))
    return found


def _source_input(
    row: dict[str, Any], previous: PreviousTables | None, expected: Expected
) -> SourceInput:
    if row["error_code"] is not None:
        error = (row["error_code"], row["error_message"])
        return _failed_input(row["path"], error, previous, expected, row["sha256"])
    return SourceInput(
        path=row["path"],
        document=document_from_json(row["document"]),
        vectors=vectors_from_bytes(row["vectors"], row["dim"]),
    )


def _failed_input(
    path: str,
    error: tuple[str, str],
    previous: PreviousTables | None,
    expected: Expected,
    version: str | None = None,
) -> SourceInput:
    """A source that failed (`error`: code and message; `version`: its content hash, if it was
    read): it keeps its previous rows, index entry and chunk files. Those the plan failed for
    the stem they share (`jobs.plan.stem_conflicts`) are never read."""
    return SourceInput(
        path=path,
        document=None,
        vectors=None,
        error=error,
        source_version_id=version,
        retained=retained_rows(previous, path, expected),
    )


def _questions(rows: list[dict[str, Any]]) -> tuple[list[str], Any, list[str]]:
    """The topic's questions and their vectors from its qa-pairs.md row (none: no file, or one
    that failed), and the warning for a file read without a question (`no_questions`)."""
    row = next((r for r in rows if r["kind"] == QUESTIONS and r["document"] is not None), None)
    questions = json.loads(row["document"]) if row else []
    warnings = no_questions(row["path"], questions) if row else []
    if not questions:
        return [], None, warnings
    return questions, vectors_from_bytes(row["vectors"], row["dim"]), warnings


def read_keywords(
    source: Storage, path: str | None
) -> tuple[list[Keyword], list[dict[str, str]], list[str]]:
    """The keywords of the keywords file at `path` (None: the topic has none), the failures to
    report (READ_FAILED, KEYWORDS_FAILED), and the warning for a file without a keyword
    (`no_keywords`): the topic reduce's and the checked dry run's one way to read it."""
    if path is None:
        return [], [], []
    try:
        data = source.read_bytes(path)
    except OSError as exc:
        return [], [{"path": path, "code": READ_FAILED, "message": str(exc)}], []
    try:
        text = decode(data)
    except ChunkingError as exc:
        return [], [{"path": path, "code": KEYWORDS_FAILED, "message": exc.message}], []
    try:
        keywords = parse_keywords(text)
    except ValueError as exc:
        return [], [{"path": path, "code": KEYWORDS_FAILED, "message": str(exc)}], []
    return keywords, [], no_keywords(path, keywords)


def _existing_spec(
    context: TopicContext, path: str
) -> tuple[str | None, bool, list[dict[str, str]]]:
    """The person-written topic-spec.md to merge into, whether the output's is to be left as it
    is, and the failure to report. In place it is the output's own; in a separate output the
    input's alone, as a fresh build has it (an edit of it rebuilds the topic: `jobs.plan`; the
    output's copy kept notes the input no longer had). Left as it is: a symbolic link (not
    followed), or a file a source's `decode` refuses (TOPIC_SPEC_FAILED: not UTF-8, rewriting it
    would corrupt it; UTF-16; a NUL byte); a UTF-8 BOM is dropped, as from a source (kept, it hid
    a first-line begin marker: a second section was appended and the first never updated). A
    linked input one is not read either (the listing reported it as SYMLINK_SKIPPED)."""
    try:
        data = context.output.read_optional(path)
    except SymlinkRefused:
        return None, True, []
    if context.source.root != context.output.root:
        try:
            data = context.source.read_optional(path)
        except SymlinkRefused:
            data = None
    if data is None:
        return None, False, []
    try:
        return decode(data), False, []
    except ChunkingError as exc:
        message = f"{exc.message}; left untouched, not updated"
        return None, True, [{"path": path, "code": TOPIC_SPEC_FAILED, "message": message}]


def _parquet(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table.combine_chunks(), buffer)
    return buffer.getvalue()
