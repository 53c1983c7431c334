"""What the driver knows before any work: the input's listing, the previous manifest, the
settings key and the plan (`jobs.plan`), and whether the embedding model can load. Reads the
listing, the manifest, the model's config.json (its tokenizer.json too, given a max_length),
what names the version of its files (`embedding.models.model_digest`: a local model's files
hashed, a remote one's listing), the chunker's tokenizer, and the sources that the listing says
changed at the size they had and the qa-pairs.md and keywords files never hashed
(`restamped`), nothing else."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, replace

import tokenizers

from chunking import REVISION, token_counter
from embedding.encoder import model_encoder
from embedding.models import ModelNotFound, check_model, model_digest
from indexing import REVISION as INDEXING_REVISION
from indexing.terminal import printable
from jobs.config import JobConfig
from jobs.known import KnownFailure
from jobs.lock import OutputNotFound, bucket, check_bucket, missing_bucket, refusal_code
from jobs.manifest import MANIFEST_PATH, Manifest, unreadable_note
from jobs.plan import (
    KEEP,
    RELINK,
    Plan,
    compared_file,
    excluded,
    keep_directory,
    make_plan,
    rebuilding,
    settings_digest,
)
from jobs.storage import FileInfo, SkippedLink, Storage, fingerprint_size


class InputNotFound(FileNotFoundError):
    """The input root does not exist (a usage error: exit code 2)."""


class EmptyInput(InputNotFound):
    """The input lists no sources and the output holds some (a usage error: exit code 2). Going on
    would delete every topic, which is what an unmounted volume, an input emptied while it is
    refreshed or a mistyped prefix look like; `sources.allow_empty: true` goes on."""


class TooManyDeleted(InputNotFound):
    """The build would delete a larger share of the output's sources than
    `sources.max_deleted_fraction` allows (exit code 2): what an input that a sync has only partly
    filled looks like."""


class SharedFolder(InputNotFound):
    """In place, with `sources.follow_symlinks`, two folders that get an index.json are one folder
    on disk (a followed link to a folder inside the input): each would write its index.json,
    `_chunks/` and topic-spec.md over the other's (a usage error: exit code 2)."""


class InputUnlistable(KnownFailure, PermissionError):
    """A folder of the input cannot be listed (a local folder's permissions or an I/O error, an
    object store's 403): the build fails (exit code 1) in one line naming it, before any write."""


log = logging.getLogger(__name__)
NO_DIRECTORY = "no such directory"


def model_version(config: JobConfig) -> str:
    """What names the version of the embedding model's files (`model_digest`), once the model
    is known to load from its name and small files (else `ModelNotFound`, a config error: exit
    code 2). A model whose files cannot be read here (the network) fails the run: the settings
    key, and so what the run rebuilds, depends on them."""
    embedding, options = config.embedding, dict(config.storage_options)
    check_model(
        embedding.model,
        revision=embedding.revision,
        storage_options=options,
        pooling=embedding.pooling,
    )
    check_window(config)
    return model_digest(embedding.model, revision=embedding.revision, storage_options=options)


def window_encoder(config: JobConfig) -> tokenizers.Tokenizer | None:
    """`embedding.encoder.model_encoder` of the config's model and window."""
    embedding = config.embedding
    return model_encoder(
        embedding.model,
        embedding.max_length,
        revision=embedding.revision,
        storage_options=dict(config.storage_options),
    )


def check_window(config: JobConfig) -> None:
    """`ModelNotFound` when `embedding.max_length` leaves a text no token beside the special
    tokens the model's tokenizer adds, or passes the model's positions (each embedding actor
    refused it at its start, after Ray had started); known from the model's tokenizer.json (a
    model without one is left to the actors)."""
    embedding = config.embedding
    if embedding.max_length is None:
        return
    try:
        encoder = window_encoder(config)
    except ValueError as exc:
        raise ModelNotFound(f"embedding.max_length: {exc}") from exc
    specials = len(encoder.encode("").ids) if encoder else 0
    if specials >= embedding.max_length:
        raise ModelNotFound(
            f"embedding.max_length: {embedding.max_length} leaves no room for a text's tokens "
            f"beside the {specials} special tokens of model {embedding.model!r}; give at least "
            f"{specials + 1}, or leave it out for the model's window"
        )


def check_tokenizer(config: JobConfig) -> None:
    """`ModelNotFound` when the chunker's tokenizer (`chunking.options.tokenizer`: a typo such
    as `minlm`, a folder without tokenizer.json) cannot load: every chunk task failed with it,
    exit 1, after Ray had started."""
    chunking = config.chunking
    try:
        token_counter(chunking.strategy, **chunking.options)
    except ValueError as exc:
        raise ModelNotFound(f"chunking.options.tokenizer: {exc}") from exc


def abort_stops(plan: Plan) -> list[str]:
    """What stops a build under `failure_policy: abort` before any work, as the chunk stage
    would stop it: a source the listing fails (a shared stem) or a failure known from the last
    run (a source's or a qa-pairs.md's; a keywords file's failure never stops one). The build
    raises `SourceFailed` with the first, and its dry run names it."""
    from jobs.stages.topic import KEYWORDS_FAILED

    return [printable(f"{f['path']}: {f['code']}: {f['message']}") for f in plan.conflicts] + [
        printable(f"{f['path']}: {f['code']}: {f['message']} (unchanged since it failed)")
        for f in plan.settled
        if f["code"] != KEYWORDS_FAILED
    ]


def check_deletions(config: JobConfig, plan: Plan, previous: Manifest) -> None:
    """Refuse a plan that deletes what the output holds on a listing's say-so alone:
    `EmptyInput` when the listing holds no source (unless `sources.allow_empty`), and
    `TooManyDeleted` when it deletes a larger share of the previous run's sources than
    `sources.max_deleted_fraction` allows."""
    held = len(previous.sources)
    if not held or not plan.fingerprints and config.sources.allow_empty:
        return
    if not plan.fingerprints:
        raise EmptyInput(
            f"input {config.input}: no sources (file names matching {list(config.sources.globs)}),"
            f" and the output {config.output} holds {held} from its last run: "
            "the build would delete every topic. Check the input; to empty the index, set "
            "sources.allow_empty: true"
        )
    limit, deleted = config.sources.max_deleted_fraction, len(plan.deleted)
    if limit is not None and deleted > limit * held:
        raise TooManyDeleted(
            f"input {config.input}: the build would delete {deleted} of the {held} sources the "
            f"output {config.output} holds from its last run ({deleted / held:.0%}), more than "
            f"sources.max_deleted_fraction ({limit:g}): an input that a sync has only partly "
            "filled looks like that. Check the input; to delete them, raise or unset "
            "sources.max_deleted_fraction for this run"
        )


def settings_key(config: JobConfig, model_files: str) -> str:
    """Digest of every setting that changes the outputs (a change rebuilds every topic), and of
    the version of the model's files (`model_files`, `embedding.models.model_digest`): new weights
    under the same model name rebuild every topic too."""
    embedding = {
        k: v
        for k, v in vars(config.embedding).items()
        if k not in ("device", "local_dir", "token_budget", "cuda_graphs")
    }
    return settings_digest(
        {
            "strategy": config.chunking.key,
            "chunking_revision": REVISION,
            "indexing_revision": INDEXING_REVISION,
            "embedding": embedding,
            "model_files": model_files,
            "tenant": config.tenant,
            "globs": list(config.sources.globs),
            "include_drafts": config.sources.include_drafts,
            "prompts": vars(config.prompts),
            "index": vars(config.index),
        }
    )


@dataclass(frozen=True)
class Discovery:
    """What the driver knows before any work: the storages, the previous manifest, the settings
    key, the plan and the listed size of every file."""

    source: Storage
    output: Storage
    previous: Manifest
    config_key: str
    plan: Plan
    sizes: dict[str, int]


def input_storage(config: JobConfig) -> Storage:
    """The input root's storage."""
    follow = config.sources.follow_symlinks
    return Storage(config.input, config.storage_options, follow_symlinks=follow)


def output_storage(config: JobConfig) -> Storage:
    """The output root's storage."""
    follow = config.sources.follow_symlinks
    return Storage(config.output, config.storage_options, follow_symlinks=follow)


def check_output_roots(config: JobConfig) -> None:
    """`OutputNotFound` when a separate output, or the cache, is an object of an object store
    (`--output s3://b/index/index.json`: the build wrote a whole index under its key, as under a
    folder's, beside the object, where no copy onto a disk can hold both; a local file is the
    config's refusal), or when the cache lies in an S3 bucket that does not exist: each of its
    entries would fail to be written, a warning apiece, and every run embed every chunk again.
    A cache in the output's bucket is left to the output's own check, which names the output."""
    output = output_storage(config)
    cache = Storage(config.cache, config.storage_options) if config.cache else None
    for role, root in (
        ("output", output if config.output != config.input else None),
        ("cache", cache),
    ):
        if root and not root.is_local and root.filesystem().isfile(root.full_path("")):
            raise OutputNotFound(f"{role} {root.uri()}: an object, not a folder: name a folder")
    if cache and (cache.protocol, bucket(cache)) != (output.protocol, bucket(output)):
        check_bucket(cache, "cache")


def topics_missing_files(output: Storage, plan: Plan, previous: Manifest) -> list[str]:
    """The topics `plan` keeps or relinks of which a file their last build wrote (the manifest's
    `files`: `index.json`, chunk files, table shards) is not in the output: a person removed the
    topic's folder or its `_chunks/` (in place, the output's files lie among the sources) or a
    sync deleted what its copy lacks, and the input was then put back as it was. The manifest
    still names such a topic unchanged, so nothing else would write it again. Logged, naming the
    first file gone."""
    standing = {
        topic.topic: previous.topics[topic.topic].files
        for topic in plan.topics
        if topic.action in (KEEP, RELINK)
    }
    there = output.existing([path for files in standing.values() for path in files])
    missing = [topic for topic, files in standing.items() if not set(files) <= there]
    for topic in missing:
        gone = [path for path in standing[topic] if path not in there]
        log.warning(
            "topic %r: %s (%d file(s) in all) gone from the output: rebuilding it",
            topic, printable(gone[0]), len(gone),
        )  # fmt: skip
    return missing


def missing_root(storage: Storage) -> str:
    """Why an input root cannot be walked: no such bucket, a file (or object) where the corpus's
    folder is meant (`--input docs/guide.md`, which said "no such directory" of a path that
    exists), or no such directory."""
    if missing_bucket(storage):
        return "no such bucket"
    if storage.filesystem().isfile(storage.full_path("")):
        return "a file, not a folder: give the folder that holds the corpus"
    return NO_DIRECTORY


def list_input(config: JobConfig) -> list[FileInfo | SkippedLink]:
    """The input's listing (`InputNotFound` when its root or its bucket does not exist,
    `InputUnlistable` naming the input where an object store refuses a listing, or the folder
    that a local walk cannot list). An object-store prefix that lists nothing in a bucket that
    exists is an empty input under `sources.allow_empty`, as an emptied local folder is. What
    `sources.exclude` names is left out (walked all the same: its folders are not pruned)."""
    storage = input_storage(config)
    exclude = config.sources.exclude
    try:
        return [f for f in storage.walk(keep_directory) if not excluded(f.path, exclude)]
    except FileNotFoundError as exc:
        why = missing_root(storage)
        if why == NO_DIRECTORY and not storage.is_local and config.sources.allow_empty:
            return []  # an object store has no folders: its last source deleted, none is left
        raise InputNotFound(f"input {config.input}: {why}") from exc
    except OSError as exc:
        if storage.is_local:  # a folder of the walk (`Storage.walk`): its traceback said no more
            raise unlistable(config.input, exc) from exc
        if not isinstance(exc, PermissionError):
            raise
        # a 403: credentials the store refuses, a policy's prefixes
        raise InputUnlistable(
            f"the input {config.input} cannot be listed ({refusal_code(exc)}: {exc}): check the "
            "credentials and their permission to list and read under it"
        ) from exc


def unlistable(root: str, error: OSError) -> InputUnlistable:
    """The error of a local input `root` whose walk failed (`error`, naming the folder it could
    not list): the system's reason, the folder and, for a permission, what to check (a scheduled
    build may run as another user than the one who wrote the corpus)."""
    reason = os.strerror(error.errno) if error.errno else type(error).__name__
    where = printable(str(error.filename or root))
    what = f"the input {root} cannot be listed ({reason}: {where})"
    if isinstance(error, PermissionError):
        what += ": give the user the build runs as permission to list and read it"
    return InputUnlistable(what)


def check_shared_folders(config: JobConfig, plan: Plan) -> None:
    """`SharedFolder` when an in-place build over followed links would have two of the index's
    folders (topics and directories) be one folder on disk."""
    source = input_storage(config)
    if config.output != config.input or not config.sources.follow_symlinks or not source.is_local:
        return
    seen: dict[str, str] = {}
    for folder in sorted({*(topic.topic for topic in plan.topics), *plan.directories}):
        real = os.path.realpath(source.full_path(folder))
        if (first := seen.setdefault(real, folder)) != folder:
            raise SharedFolder(
                f"input {config.input}: {first!r} and {folder!r} are one "
                f"folder, {printable(real)} (a symbolic link followed there): in place each would "
                "write its index.json and _chunks/ over the other's. Build with --output, or "
                "remove the link"
            )


# Bytes of sources read at once to tell a new modification time from new bytes (`restamped`): a
# bound on the driver's memory (one larger source is read alone).
RESTAMP_BATCH_BYTES = 64 * 2**20


def restamped(
    listing: list[FileInfo | SkippedLink],
    previous: Manifest,
    source: Storage,
    compared: Callable[[str], bool],
) -> tuple[list[FileInfo | SkippedLink], dict[str, tuple[str, str]]]:
    """The listing, each file whose fingerprint differs from the previous run's while its size
    and bytes do not (read and hashed to tell) given the previous run's fingerprint back, and the
    manifest's `stamps` for it: such a file is unchanged, and its topic kept. A fresh clone or
    copy of the input (`git clone` in a scheduled job, `cp -r`, `rsync` without `-t`) gives every
    file a new modification time: each topic was rebuilt, every source read, chunked and written
    again, and reported changed.

    A source is told by its manifest entry (fingerprint and sha256); the other files the plan
    compares (`compared`: qa-pairs.md, keywords files) by their stamp, (fingerprint, sha256),
    made here for each one whose fingerprint has none (read and hashed)."""
    files = {f.path: f for f in listing if isinstance(f, FileInfo)}
    known = {p: (e.fingerprint, e.sha256) for p, e in previous.sources.items() if e.sha256}
    others = {path for path in files if compared(path)}
    stamps = {p: previous.stamps[p] for p in others if p in previous.stamps}
    known |= stamps

    def to_hash(file: FileInfo) -> bool:
        """A compared file without its stamp, or a file listed otherwise than last time (a
        source at the size it had: one of another size has changed, and is read anyway)."""
        if file.path not in known:
            return file.path in others
        fingerprint = known[file.path][0]
        return file.fingerprint != fingerprint and (
            file.path in others or fingerprint_size(fingerprint) == str(file.size)
        )

    to_read = [f for f in files.values() if to_hash(f)]
    same: dict[str, str] = {}  # path -> the version the previous run listed
    for batch in _batches(to_read, RESTAMP_BATCH_BYTES):
        for path, data in source.read_many(batch).items():
            if not isinstance(data, bytes):
                stamps.pop(path, None)  # the build fails to read it too
                continue
            digest = hashlib.sha256(data).hexdigest()
            fingerprint, sha256 = known.get(path, ("", ""))
            if digest == sha256 and fingerprint_size(fingerprint) == str(files[path].size):
                same[path] = fingerprint.partition(":")[2]
            elif path in others:
                stamps[path] = (files[path].fingerprint, digest)
    if same:
        log.info(
            "%d of the %d files listed with a new modification time or ETag have the same bytes "
            "as in the last run (a fresh clone or copy of the input?): unchanged",
            len(same),
            len(to_read),
        )
    restored = [
        replace(f, version=same[f.path]) if isinstance(f, FileInfo) and f.path in same else f
        for f in listing
    ]
    return restored, stamps


def _batches(files: list[FileInfo], most: int) -> list[list[str]]:
    """The paths of `files` in order, in batches of at most `most` listed bytes (a larger file
    alone)."""
    batches: list[list[str]] = []
    size = 0
    for file in files:
        if not batches or size + file.size > most:
            batches.append([])
            size = 0
        batches[-1].append(file.path)
        size += file.size
    return batches


def discover(config: JobConfig, listing: list[FileInfo | SkippedLink]) -> Discovery:
    """Read the previous manifest and the model's version (`model_version`), and plan the run
    from the input's listing (and whether the topics it would keep still have their files:
    `topics_missing_files`; the bytes of files listed as changed at their previous size, and of
    qa-pairs.md and keywords files never hashed: `restamped`; reads nothing else);
    `EmptyInput` when the listing holds no source and the output some, `TooManyDeleted` past
    `sources.max_deleted_fraction`."""
    output = output_storage(config)
    stored = output.read_optional(MANIFEST_PATH)
    previous = Manifest.from_json(stored)
    if stored and not previous.config_key:
        log.warning(
            "%s %s: every topic is rebuilt, and what it names that the input no longer has is "
            "removed",
            output.uri(MANIFEST_PATH),
            unreadable_note(stored),
        )
    check_tokenizer(config)
    config_key = settings_key(config, model_version(config))
    separate = config.output != config.input
    globs = config.sources.globs
    listing, stamps = restamped(
        listing, previous, input_storage(config), lambda p: compared_file(p, globs, separate)
    )
    plan = make_plan(listing, previous, config_key, globs, separate=separate)
    plan = replace(plan, stamps=stamps)
    check_shared_folders(config, plan)
    plan = rebuilding(plan, topics_missing_files(output, plan, previous), previous)
    check_deletions(config, plan, previous)
    sizes = {f.path: f.size for f in listing if isinstance(f, FileInfo)}
    return Discovery(input_storage(config), output, previous, config_key, plan, sizes)
