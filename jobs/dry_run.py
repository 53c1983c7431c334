"""`mdindex build --dry-run`: what a build would do, from the listing, the previous manifest, the
previous report and the embedding cache's folder names alone; Ray is not started and nothing is
read from the corpus or written anywhere.

The estimate is rough on purpose. Bytes to read are the listed sizes of the files the pipeline
would read. Chunks to embed are counted per source to chunk, at least one each, from its size
at the previous run's chunks per byte of chunked sources (or DEFAULT_BYTES_PER_CHUNK on a first
run), leaving out the sources whose content is unchanged (the same listing fingerprint, re-run for
other reasons such as a settings change) and whose vectors are in the cache already.

With `check` (`--check`), the sources of the topics it would rebuild are read and chunked (not
embedded) as the build reads and chunks them, and their qa-pairs.md and keywords files read as
the build reads them: those that fail are named, with the warnings of those that yield nothing,
and so are the index's broken links once the build has run (`jobs.broken_links`: the other
topics' are in the manifest); the cache is asked for the content of each source to chunk, and
its chunks are counted, not estimated. In GitHub Actions, its failures and broken links are
annotations, as the build's (`annotations`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

from indexing import SourceInput
from indexing.questions import no_questions
from indexing.terminal import counted, printable
from jobs.annotations import dry_run_commands
from jobs.broken_links import BrokenLinks, broken_links_of, page_links
from jobs.config import JobConfig
from jobs.discovery import Discovery, abort_stops, check_output_roots, discover, list_input
from jobs.in_process import runs_without_ray
from jobs.local_fit import check_local_fit, expected_local_node
from jobs.lock import check_bucket, check_writable, lock_holder
from jobs.manifest import REPORT_PATH, Manifest
from jobs.path_set import PathSet
from jobs.plan import KEEP, REBUILD, RELINK, Plan, settings_differ, unmatched_note
from jobs.records import QUESTIONS, SOURCE, TOPIC
from jobs.report import error_text
from jobs.report_html import SETTINGS_CHANGED, place
from jobs.stage_args import chunk_settings
from jobs.stages.chunk import chunk_one_source, questions_json
from jobs.stages.read import READ_FAILED
from jobs.stages.topic import read_keywords
from jobs.storage import Storage
from jobs.work import work_rows

DEFAULT_BYTES_PER_CHUNK = 1000  # first run: no previous counts to go by
READ_AT_ONCE = 256  # sources read (concurrent GETs on object stores), then chunked, at a time

log = logging.getLogger("mdindex.build")


@dataclass(frozen=True)
class DryRun:
    """The work a build would do, and its rough cost."""

    sources: int
    settings_changed: bool  # the last run built the output under other settings (or version)
    topics: dict[str, list[str]]  # action (rebuild, relink, keep, delete) -> topics
    read: list[str]  # files the pipeline would read: sources to chunk and qa-pairs.md
    chunk: list[str]  # sources it would chunk
    carried: list[str]  # unchanged sources of rebuilt topics, taken from the previous tables
    deleted: list[str]  # sources gone since the last run
    # (path, code, message) of the failures the build reports without reading the file: a
    # settled failure, unchanged; a source sharing a stem in its topic; a link not followed or a
    # name no index can name
    still_failing: list[tuple[str, str, str]]
    conflicts: list[tuple[str, str, str]]
    skipped: list[tuple[str, str, str]]
    unmatched: str | None  # files named like markdown that no glob matches, in words
    bytes_to_read: int
    cached: int  # sources to chunk whose vectors the cache holds already
    chunks_to_embed: int  # estimate
    without_ray: bool  # its stages would run in the build's process (`jobs.in_process`)
    stops: list[str]  # under failure_policy abort, the failures that stop the build at once
    locked: str | None  # the build that holds the output's lock, in words (`lock_holder`)
    # with `check`: the sources that fail to be read or chunked, as (path, code, message), the
    # rebuilt topics' qa-pairs.md and keywords files that fail to be read, the warnings of those
    # that yield no question or keyword, and the index's broken links after the build
    failing: list[tuple[str, str, str]] | None = None
    broken: BrokenLinks | None = None
    failing_files: list[tuple[str, str, str]] | None = None
    warnings: list[str] | None = None
    input: str = ""  # the input's URI, as a report's (`jobs.annotations.checkout_prefix`)

    @property
    def fails(self) -> bool:
        """Whether the build would exit 3, as a check tells (None: unchecked, False): a source
        or file fails (a settled failure, a shared stem, a file skipped, a source that fails
        here), or its links break under `checks.broken_links: fail`."""
        if self.broken is None:
            return False
        known = (
            self.still_failing
            or self.conflicts
            or self.skipped
            or self.failing
            or self.failing_files
        )
        return bool(known) or self.broken.fails


@dataclass(frozen=True)
class Checked:
    """The sources of the topics a build would rebuild, read and chunked (`chunk_rebuilt`):
    per source chunked, its content's sha256 and its chunks; the failures, as (path, code,
    message); and their links to pages, as (source, href). Their qa-pairs.md and keywords
    files, read (`read_topic_files`): those that fail, those of them that stop a build under
    failure_policy abort (a qa-pairs.md's), and the warnings of those that yield nothing."""

    chunked: dict[str, tuple[str, int]]
    failing: list[tuple[str, str, str]]
    links: list[tuple[str, str]]
    failing_files: tuple[tuple[str, str, str], ...] = ()
    stopping_files: tuple[tuple[str, str, str], ...] = ()
    warnings: tuple[str, ...] = ()


def dry_run(config: JobConfig, *, check: bool = False) -> DryRun:
    """Plan the build `config` describes, without doing any of it; with `check`, read and chunk
    what it would (`chunk_rebuilt`): its failing sources and broken links too."""
    listing = list_input(config)
    found = discover(config, listing)
    check_output_roots(config)
    plan, previous = found.plan, found.previous
    rebuilt = plan.rebuilt
    rows = work_rows(rebuilt, plan, previous, found.sizes)
    without_ray = bool(rebuilt) and runs_without_ray(config, plan, previous)
    # the build's exit 2 once its Ray has started (a build that rebuilds nothing starts none)
    if rebuilt and not without_ray and (node := expected_local_node(config)) is not None:
        check_local_fit(config, node)
    if previous == Manifest():  # a first run, or an output whose bucket is missing
        check_bucket(found.output)
    check_writable(found.output)
    actions = {REBUILD: [], RELINK: [], KEEP: []}
    for topic in plan.topics:
        actions[topic.action].append(topic.topic)
    read = [row for row in rows if row["kind"] in (SOURCE, QUESTIONS)]
    chunk = [row for row in rows if row["kind"] == SOURCE]
    topic_facts = [json.loads(row["payload"]) for row in rows if row["kind"] == TOPIC]
    carried = sorted(path for facts in topic_facts for path in facts["carried"])
    key = config.chunking.key
    in_cache = cached_sources(Storage(config.cache, config.storage_options), key)
    checked = Checked({}, [], [])
    if check:
        checked = read_topic_files(chunk_rebuilt(config, found), found)
    chunked = checked.chunked

    def content_hash(path: str) -> str | None:
        """The source's content hash: read here, or the last run's for the same listing."""
        if path in chunked:
            return chunked[path][0]
        before = previous.sources.get(path)
        same = before is not None and before.fingerprint == plan.fingerprints[path]
        return before.sha256 if same else None

    cached = [row for row in chunk if (sha := content_hash(row["path"])) and sha[:16] in in_cache]
    density = chunks_per_byte(found.output)
    cached_paths = {row["path"] for row in cached}
    to_embed = sum(
        chunked[row["path"]][1] if row["path"] in chunked else max(1, round(row["size"] * density))
        for row in chunk
        if row["path"] not in cached_paths
    )
    return DryRun(
        sources=len(plan.fingerprints),
        settings_changed=settings_differ(previous, found.config_key),
        topics={**actions, "delete": list(plan.deleted_topics)},
        read=[row["path"] for row in read],
        chunk=[row["path"] for row in chunk],
        carried=carried,
        deleted=list(plan.deleted),
        still_failing=unread(plan.settled),
        conflicts=unread(plan.conflicts),
        skipped=unread(plan.skipped),
        unmatched=plan.unmatched and unmatched_note(plan.unmatched, config.sources.globs),
        bytes_to_read=sum(row["size"] for row in read),
        cached=len(cached),
        chunks_to_embed=to_embed,
        without_ray=without_ray,
        stops=(
            abort_stops(plan)
            + [
                f"{path}: {code}: {why}"
                for path, code, why in [*checked.failing, *checked.stopping_files]
            ]
            if config.failure_policy == "abort"
            else []
        ),
        locked=lock_holder(found.output),
        failing=checked.failing if check else None,
        failing_files=list(checked.failing_files) if check else None,
        warnings=list(checked.warnings) if check else None,
        input=found.source.uri(),
        broken=(
            broken_links_of(
                [*kept_links(plan, previous), *checked.links],
                [f.path for f in listing],
                config.sources.exclude,
                config.checks.broken_links,
                found.source,
            )
            if check
            else None
        ),
    )


def kept_links(plan: Plan, previous: Manifest) -> list[tuple[str, str]]:
    """The links to pages (`jobs.broken_links.page_links`) that the `previous` manifest records
    for each topic `plan` keeps or relinks, which the build's manifest keeps."""
    return [
        pair
        for topic in plan.topics
        if topic.action != REBUILD
        for pair in previous.topics[topic.topic].page_links
    ]


def chunk_rebuilt(config: JobConfig, found: Discovery) -> Checked:
    """Every source of each topic the build planned in `found` would rebuild, read and chunked
    as the build reads and chunks them (`jobs.stages.read`, `jobs.stages.chunk`; embedding
    nothing; the carried ones too, as their links to a page that left are in no manifest),
    READ_AT_ONCE at a time: no document is kept."""
    plan = found.plan
    paths = [path for topic in plan.rebuilt for path in topic.sources]
    settings = chunk_settings(config, PathSet.of(plan.fingerprints), None)
    checked = Checked({}, [], [])
    for start in range(0, len(paths), READ_AT_ONCE):
        documents = []
        for path, data in found.source.read_many(paths[start : start + READ_AT_ONCE]).items():
            if not isinstance(data, bytes):
                message = f"cannot read {found.source.uri(path)}: {data}"
                checked.failing.append((path, READ_FAILED, message))
                continue
            document, failure, _ = chunk_one_source(data, path, settings)
            chunks = len(document.chunks) if document is not None else 0
            checked.chunked[path] = (hashlib.sha256(data).hexdigest(), chunks)
            if failure is not None:
                checked.failing.append((path, *failure))
            documents.append(SourceInput(path, document, None))
        checked.links.extend(page_links(documents))
    return checked


def read_topic_files(checked: Checked, found: Discovery) -> Checked:
    """`checked` with the qa-pairs.md and keywords file of each topic the build planned in
    `found` would rebuild read as the build reads them (`jobs.stages.chunk.questions_json`,
    `jobs.stages.topic.read_keywords`): their failures (each file once: the root's keywords file
    serves many topics), a qa-pairs.md's also stopping a build under failure_policy abort, as its
    chunk stage stops there; and the warnings of those that yield nothing."""
    rebuilt = found.plan.rebuilt
    questions = sorted({topic.questions for topic in rebuilt if topic.questions})
    failing, stopping, warnings = [], [], []
    for path, data in found.source.read_many(questions).items():
        if not isinstance(data, bytes):
            failure = (READ_FAILED, f"cannot read {found.source.uri(path)}: {data}")
        else:
            text, failure = questions_json(data)
            if failure is None:
                warnings += no_questions(path, json.loads(text))
                continue
        failing.append((path, *failure))
        stopping.append((path, *failure))
    for path in sorted({topic.keywords for topic in rebuilt if topic.keywords}):
        _, failures, empty = read_keywords(found.source, path)
        failing += [(f["path"], f["code"], f["message"]) for f in failures]
        warnings += empty
    return Checked(
        checked.chunked,
        checked.failing,
        checked.links,
        tuple(sorted(failing)),
        tuple(sorted(stopping)),
        tuple(sorted(warnings)),
    )


def unread(failures: tuple[dict[str, str], ...]) -> list[tuple[str, str, str]]:
    """The (path, code, message) of report failures of files a build does not read (`jobs.plan`:
    `settled`, `conflicts`, `skipped`)."""
    return [(f["path"], f["code"], f["message"]) for f in failures]


def annotations(plan: DryRun, environ: Mapping[str, str] = os.environ) -> str:
    """In a GitHub Actions job, the workflow commands of a checked dry run's failing sources and
    files (those the build reports without reading them too: settled failures, shared stems,
    links not followed), its warnings and the broken links it names, as the build's
    (`jobs.annotations`), one a line; "" elsewhere, or unchecked."""
    if plan.broken is None:
        return ""
    known = [*plan.still_failing, *plan.conflicts, *plan.skipped]
    failures = [  # by path, as a report's
        {"path": path, "code": code, "message": message}
        for path, code, message in sorted([*known, *plan.failing, *plan.failing_files])
    ]
    warnings = plan.warnings or []
    return dry_run_commands(failures, warnings, plan.broken.to_dict(), plan.input, environ)


def cached_sources(cache: Storage, key: str) -> set[str]:
    """The source-hash prefixes with a passage entry under strategy `key`, for any model (folder
    names only: no entry is read)."""
    fs = cache.filesystem()
    try:
        models = fs.ls(cache.full_path(key), detail=True)
    except FileNotFoundError:
        return set()
    found = set()
    for model in models:
        if model["type"] == "directory" and "-q" not in posixpath.basename(model["name"]):
            found.update(posixpath.basename(e.rstrip("/")) for e in fs.ls(model["name"]))
    return found


def chunks_per_byte(output: Storage) -> float:
    """Chunks per byte of chunked source in the previous run's report, else the default: on a
    first run, after a failed run (no counts), and, with a warning, where the report is damaged
    (only this estimate reads it; the build does not)."""
    data = output.read_optional(REPORT_PATH)
    try:
        density = report_density(data) if data is not None else None
    except (ValueError, TypeError, AttributeError, ArithmeticError, RecursionError) as exc:
        log.warning(
            "the previous report %s is damaged (%s): chunks to embed are estimated at %d bytes "
            "per chunk",
            output.uri(REPORT_PATH),
            error_text(exc),
            DEFAULT_BYTES_PER_CHUNK,
        )
        density = None
    return density or 1 / DEFAULT_BYTES_PER_CHUNK


def report_density(data: bytes) -> float | None:
    """Chunks per byte of chunked source in a run report's bytes; None where it holds no counts
    (a failed run's). Raises where the report is not JSON or its counts are no positive finite
    numbers."""
    counters = json.loads(data).get("counters", {}).get("chunk", {})
    chunks, size = counters.get("chunks"), counters.get("bytes")
    if not (chunks and size):
        return None
    density = chunks / size
    if not (math.isfinite(density) and density > 0):
        raise ValueError(f"{chunks!r} chunks in {size!r} bytes")
    return density


def describe(plan: DryRun) -> str:
    """The dry run for a person (and for a script: one `key: value` summary line each first)."""
    lines = [
        f"sources: {plan.sources}",
        f"topics to rebuild: {len(plan.topics[REBUILD])}",
        f"topics to relink: {len(plan.topics[RELINK])}",
        f"topics to keep: {len(plan.topics[KEEP])}",
        f"topics to delete: {len(plan.topics['delete'])}",
        f"files to read: {len(plan.read)}",
        f"bytes to read: {plan.bytes_to_read}",
        f"sources to chunk: {len(plan.chunk)}",
        f"sources to carry: {len(plan.carried)}",
        f"sources to delete: {len(plan.deleted)}",
        f"files still failing, not read: {len(plan.still_failing)}",
        f"sources sharing a stem, not read: {len(plan.conflicts)}",
        f"files skipped, not read: {len(plan.skipped)}",
        f"sources expected from the cache: {plan.cached}",
        f"chunks to embed (estimate): {plan.chunks_to_embed}",
        f"without Ray: {'yes' if plan.without_ray else 'no'}",
    ]
    if plan.failing is not None:
        lines.append(f"sources failing: {len(plan.failing)}")
        lines.append(f"qa-pairs.md and keywords files failing: {len(plan.failing_files)}")
        lines.append(f"warnings: {len(plan.warnings)}")
    if plan.broken is not None:
        lines.append(f"broken links: {plan.broken.count}")
    if plan.settings_changed:  # why every topic is rebuilt: the build's summary says it too
        lines.append(f"settings: {SETTINGS_CHANGED}")
    if plan.stops:  # the build exits 1 at once, naming the first, and does none of the above
        lines.append(f"build stops at once (failure_policy abort): {plan.stops[0]}")
    if plan.unmatched:
        lines.append(f"not sources: {plan.unmatched}")
    if plan.locked:  # a build exits 75 at once, and does none of the above until it is freed
        lines.append(f"output locked (a build now exits 75): {plan.locked}")
    for action in (REBUILD, RELINK, "delete"):
        lines += [f"  {action} topic {topic or '(root)'}" for topic in plan.topics[action]]
    lines += [f"  read {path}" for path in plan.read]
    lines += [f"  chunk {path}" for path in plan.chunk]
    lines += [f"  carry {path}" for path in plan.carried]
    lines += [f"  delete {path}" for path in plan.deleted]
    lines += [f"  still failing {path}" for path, _, _ in plan.still_failing]
    lines += [f"  stem shared {path}" for path, _, _ in plan.conflicts]
    lines += [f"  skip {path}" for path, _, _ in plan.skipped]
    failing = [*(plan.failing or ()), *(plan.failing_files or ())]
    lines += [f"  fail {path}: {code}: {message}" for path, code, message in failing]
    lines += [f"  warning {warning}" for warning in plan.warnings or ()]
    if plan.broken is not None:  # the first, as the build's report names them, with their lines
        broken = plan.broken
        lines += [f"  broken {place(link.source, link.line)}: {link.href}" for link in broken.first]
        if more := broken.count - len(broken.first):
            lines.append(f"  ... {counted(more, 'more broken link')}")
    return "\n".join(printable(line) for line in lines)  # a name cannot start a line of its own
