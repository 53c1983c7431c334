"""The `mdindex cache prune` sub-command: remove the embedding cache's entries that none of the
named outputs still needs (`embedding.prune`): those of sources' old bytes, and of chunking
settings no output's index was built with. What an output needs is read from its manifest (each
source's content hash, and its qa-pairs.md and keywords files') and its documents tables (the
strategy keys its index was built with).

Each build records in its cache that its output uses it and what it needs (`record_output`: a
file per output under OUTPUTS: its URI, when its last build finished, its sources' content hashes
and its strategy keys), so that a prune keeps the entries of every output recorded there, named
or not, without reaching it (a CI runner's folder, another host's disk), until it is told to
forget one (`--forget`): an output not named was a shared cache's other outputs' entries
removed, to be embedded again."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from indexing.cli import json_object
from indexing.terminal import counted

if TYPE_CHECKING:
    from embedding.prune import Needed, PrunePlan
    from jobs.config import JobConfig
    from jobs.manifest import Manifest
    from jobs.storage import Storage

MIN_AGE_HOURS = 24.0  # entries written since are kept: a running build names its own at its end
OUTPUTS = "_outputs"  # the cache's folder of output records (outside its entries' layout)

log = logging.getLogger("mdindex.build")


class PruneRefused(ValueError):
    """A prune that could not tell what an output needs (exit code 2: nothing removed)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `cache` sub-command (`cache prune`) to the `mdindex` parser."""
    cache = subparsers.add_parser("cache", help="look after an embedding cache")
    actions = cache.add_subparsers(dest="action", required=True)
    parser = actions.add_parser(
        "prune",
        help="remove the cache entries no output still needs",
        description="Remove the embedding cache's entries that none of the outputs named needs "
        "(old bytes of edited or deleted sources, chunking settings no longer used), once older "
        "than --min-age. Every output whose build recorded itself in the cache is kept whether "
        "named or not; an output last built before builds recorded themselves (2026-11-30) "
        "must be named.",
    )
    parser.add_argument(
        "--output",
        dest="outputs",
        action="append",
        default=[],
        metavar="OUT",
        help="an output built with the cache (path or URI); with the outputs its builds "
        "recorded in the cache, whose entries are kept too",
    )
    parser.add_argument(
        "--cache",
        help="the cache (default: the one the named outputs' last builds used, from their "
        "reports); without --output, for every output recorded in it",
    )
    parser.add_argument(
        "--forget",
        action="append",
        default=[],
        metavar="OUT",
        help="an output recorded in the cache whose entries are no longer kept (one removed, "
        "or built no more); its record is removed",
    )
    parser.add_argument(
        "--min-age",
        type=float,
        default=MIN_AGE_HOURS,
        metavar="HOURS",
        help=f"keep entries written in the last HOURS hours (default {MIN_AGE_HOURS:g}): a "
        "running build's",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="say what would be removed; remove nothing"
    )
    parser.add_argument(
        "--storage-options", type=json_object, default=None, help="fsspec options as a JSON object"
    )
    parser.set_defaults(run=run_prune)


def run_prune(args: argparse.Namespace) -> int:
    """Print what the cache holds and what is (or would be) removed (0); one line and 2 where an
    output's needs cannot be told or the cache is not clear; 1, naming the store, where one
    cannot be read or written."""
    from embedding.cache import EmbeddingCache
    from embedding.prune import cache_entries, plan_prune, prune
    from indexing.terminal import printable, write_out
    from jobs.lock import missing_bucket
    from jobs.storage import Storage

    options = args.storage_options or {}
    if problem := usage_problem(args, options):
        print(f"mdindex cache prune: {printable(problem)}", file=sys.stderr)
        return 2
    try:
        named = [Storage(uri, options) for uri in args.outputs]
        uri = args.cache or cache_of(named)
        records = Storage(uri, options)
        with naming(f"cache {uri}"):
            if missing_bucket(records) is not None:  # a mistyped bucket: "removed 0", exit 0
                raise PruneRefused(f"cache {uri}: no such bucket (nothing removed)")
            recorded = recorded_outputs(records)
        others, forgotten = unnamed_outputs(
            recorded,
            {output.uri() for output in named},
            {Storage(output, options).uri() for output in args.forget},
        )
        needed = []
        for output in named:  # a mistyped output is named as such, not its cache
            with naming(f"output {output.uri()}"):
                needed.append(output_needs(output))
        with naming(f"cache {uri}"):
            cache = EmbeddingCache(uri, options)
            entries = cache_entries(cache)
        if not (entries or recorded):  # a mistyped prefix or folder: "removed 0", exit 0
            raise PruneRefused(
                f"cache {uri}: no embedding cache there (no entry "
                "{strategy}/{model}/{16 hex}/ and no output's record in _outputs/; nothing "
                "removed)"
            )
        if not (named or others):  # every entry would go: a cache from before records, a typo
            raise PruneRefused(no_output_left(uri, forgotten))
        needed += [other.needed for other in others]
        plan = plan_prune(entries, needed, args.min_age * 3600, time.time())
        if not args.dry_run:  # the records first: a build of a forgotten output writes its own
            with naming(f"cache {uri}"):
                records.delete([gone.path for gone in forgotten])
                prune(cache, plan.remove)
    except (PruneRefused, StoreFailed) as exc:
        print(f"mdindex cache prune: {printable(str(exc))}", file=sys.stderr)
        return 2 if isinstance(exc, PruneRefused) else 1
    removed = counted(len(plan.remove), "entry", "entries")
    done = "dry run: nothing removed" if args.dry_run else f"removed {removed}"
    lines = [f"cache {uri}, for {counted(len(needed), 'output')}:"]
    lines += [
        f"  kept for {other.output}: recorded in the cache by its build of {other.when}"
        for other in others
    ]
    lines += [
        f"  forgotten: {gone.output} (its build of {gone.when}); its record "
        + ("would be removed" if args.dry_run else "removed")
        for gone in forgotten
    ]
    lines += [*plan_lines(plan), done]
    return 0 if write_out("\n".join(lines) + "\n", "mdindex cache prune") else 1


class StoreFailed(RuntimeError):
    """A store (the cache, an output) that could not be read or written: exit code 1, its
    message naming the store."""


@contextlib.contextmanager
def naming(store: str) -> Iterator[None]:
    """Errors of the requests to `store` ("cache URI", "output URI") meanwhile as `StoreFailed`,
    the store before the error's text: an S3 client's NoCredentialsError, an endpoint that
    cannot be reached and a store's AccessDenied named none ("Unable to locate credentials"),
    where a prune reads one or more outputs and the cache."""
    from botocore.exceptions import BotoCoreError

    from jobs.report import error_text

    try:
        yield
    except (OSError, BotoCoreError) as exc:
        raise StoreFailed(f"{store}: {error_text(exc)}") from exc


def usage_problem(args: argparse.Namespace, options: dict[str, Any]) -> str | None:
    """Why the prune's arguments are bad usage (exit code 2, nothing read), naming what: a
    negative or NaN `--min-age`, no output nor cache, or a URI that names no store a prune can
    read with `options` and the environment (`s4://`, `S3://`, an archive, an S3 client that
    cannot be made: each was a traceback)."""
    from indexing.client import unusable_root

    if not args.min_age >= 0:  # NaN too: no entry would have been young
        return "--min-age must be 0 or more hours"
    if not (args.outputs or args.cache):
        return "give --output or --cache"
    uris = [*args.outputs, *([args.cache] if args.cache else []), *args.forget]
    return next(filter(None, (unusable_root(uri, options) for uri in uris)), None)


def plan_lines(plan: PrunePlan) -> list[str]:
    """What `plan` holds, one line per `{strategy}/{model}` folder: its entries, how many of
    them are needed, recent, and to remove with the bytes that frees; a total line last."""
    folders: dict[str, list[list[int]]] = {}
    for kind, entries in enumerate((plan.needed, plan.young, plan.remove)):
        for entry in entries:
            counts = folders.setdefault(entry.folder, [[0, 0], [0, 0], [0, 0]])
            counts[kind][0] += 1
            counts[kind][1] += entry.size
    lines = []
    for folder, ((needed, _), (young, _), (remove, freed)) in sorted(folders.items()):
        lines.append(
            f"  {folder}: {counted(needed + young + remove, 'entry', 'entries')}, {needed} "
            f"needed, {young} not needed but recent, {remove} to remove ({megabytes(freed)})"
        )
    freed = sum(entry.size for entry in plan.remove)
    files = sum(len(entry.files) for entry in plan.remove)
    kept = sum(entry.size for entries in (plan.needed, plan.young) for entry in entries)
    lines.append(
        f"{counted(len(plan.remove), 'entry', 'entries')} to remove ({megabytes(freed)} in "
        f"{counted(files, 'file')}); {len(plan.needed) + len(plan.young)} kept "
        f"({megabytes(kept)})"
    )
    return lines


def megabytes(size: int) -> str:
    """A size in bytes as megabytes, one decimal."""
    return f"{size / 1e6:.1f} MB"


@dataclass(frozen=True)
class Recorded:
    """An output's record in a cache (`record_output`): its URI, the record's path in the cache,
    when the output's last build finished (as its report says it), and what it needs."""

    output: str
    path: str
    when: str
    needed: Needed


def record_path(output_uri: str) -> str:
    """The path in the cache of the record of the output at `output_uri`."""
    return f"{OUTPUTS}/{hashlib.sha256(output_uri.encode()).hexdigest()[:16]}.json"


def record_output(config: JobConfig, report: dict[str, Any]) -> None:
    """Record in `config`'s cache that its output uses it, once a build of it has finished (its
    `report` and manifest in place): the entries its manifest names (`manifest_prefixes`) under
    the run's strategy key and the questions' (a settings change rebuilds every topic). A run
    that rebuilt, relinked and deleted no topic needs what the last record says: a record in
    place stays (a scheduled run that found nothing changed wrote every source's hash again, 20
    MB at a million sources). A cache that cannot be written is a warning (its entries are no
    part of the index)."""
    from jobs.discovery import output_storage
    from jobs.manifest import MANIFEST_PATH, Manifest
    from jobs.report import error_text
    from jobs.stages.embed import QUESTIONS_CACHE_KEY
    from jobs.storage import Storage

    if not config.cache:
        return
    topics = report.get("topics", {})
    changed = any(topics.get(kind, 1) for kind in ("rebuilt", "relinked", "deleted"))
    try:
        output = output_storage(config)
        cache = Storage(config.cache, config.storage_options)
        if not changed and cache.exists(record_path(output.uri())):
            return
        manifest = Manifest.from_json(output.read_optional(MANIFEST_PATH))
        record = {
            "output": output.uri(),
            "finished_at": report.get("finished_at"),
            "strategies": sorted({config.chunking.key, QUESTIONS_CACHE_KEY}),
            "sources": sorted(manifest_prefixes(manifest)),
        }
        cache.write_bytes(
            record_path(output.uri()), json.dumps(record, separators=(",", ":")).encode()
        )
    except Exception as exc:  # noqa: BLE001 - the record is no part of the build, which stands
        log.warning(
            "the cache %s does not record this output (%s): a prune of it keeps this output's "
            "entries only where it is named (--output)",
            config.cache,
            error_text(exc),
        )


def recorded_outputs(cache: Storage) -> dict[str, Recorded]:
    """The outputs recorded in `cache` (`record_output`), by URI. `PruneRefused` for a record
    that cannot be read: its output's entries could not be kept."""
    from embedding.prune import Needed

    records = {}
    for path in cache.list_files(OUTPUTS):
        data = cache.read_optional(path)
        if data is None:  # removed meanwhile (another prune)
            continue
        try:
            record = json.loads(data)
            output, when = record["output"], record.get("finished_at")
            if not isinstance(output, str) or path != record_path(output):
                raise ValueError("not the record of an output")
            keys = [record["strategies"], record["sources"]]
            if not all(isinstance(k, str) for values in keys for k in values):
                raise TypeError("not lists of strings")
            needed = Needed(frozenset(record["sources"]), frozenset(record["strategies"]))
        except (ValueError, TypeError, KeyError, RecursionError) as exc:
            raise PruneRefused(
                f"{cache.uri(path)}: damaged ({type(exc).__name__}), so the output it records "
                "cannot be kept: build that output again (its build records it) or remove the "
                "file (nothing removed)"
            ) from None
        records[output] = Recorded(output, path, str(when), needed)
    return records


def no_output_left(uri: str, forgotten: list[Recorded]) -> str:
    """Why a prune of cache `uri` that no output would keep an entry of is refused: every output
    it records is to be forgotten (the message said it recorded none), or it records none."""
    if forgotten:
        return (
            f"{uri}: --forget names every output the cache records and no --output is given: every "
            "entry would go. Give --output for an output that still uses it, or remove the cache "
            "folder to drop it whole (nothing removed)"
        )
    return (
        f"{uri}: the cache records no output that uses it (builds record theirs since "
        "2026-11-30) and none is named: give --output for each (nothing removed)"
    )


def unnamed_outputs(
    recorded: dict[str, Recorded], named: set[str], forget: set[str]
) -> tuple[list[Recorded], list[Recorded]]:
    """The `recorded` outputs neither `named` nor to `forget` (their entries are kept too), and
    those to forget, by URI. `PruneRefused` for one to forget that is named too, or that the
    cache does not record (a mistyped path)."""
    if both := sorted(forget & named):
        raise PruneRefused(f"--forget {both[0]}: named with --output too (nothing removed)")
    if unknown := sorted(forget - set(recorded)):
        raise PruneRefused(
            f"--forget {unknown[0]}: not an output the cache records (it records "
            f"{', '.join(sorted(recorded)) or 'none'}; nothing removed)"
        )
    others = [record for uri, record in sorted(recorded.items()) if uri not in named | forget]
    return others, [recorded[uri] for uri in sorted(forget)]


def output_needs(output: Storage) -> Needed:
    """What `output` needs of its cache: the entries of its manifest's content hashes
    (`manifest_prefixes`), under the strategy keys of its documents tables and the questions'
    key; under any strategy key where a table cannot be read. `PruneRefused` where it has no
    manifest this version reads (a mistyped path would have every entry removed)."""
    from embedding.prune import Needed
    from jobs.manifest import MANIFEST_PATH, Manifest
    from jobs.stages.embed import QUESTIONS_CACHE_KEY

    manifest = Manifest.from_json(output.read_optional(MANIFEST_PATH))
    if not manifest.config_key:
        raise PruneRefused(
            f"{output.uri(MANIFEST_PATH)}: no manifest this version reads, so what the output "
            "needs cannot be told; name outputs built with the cache (nothing removed)"
        )
    strategies = built_strategies(output, manifest.topics)
    return Needed(
        manifest_prefixes(manifest),
        None if strategies is None else frozenset({*strategies, QUESTIONS_CACHE_KEY}),
    )


def manifest_prefixes(manifest: Manifest) -> frozenset[str]:
    """The cache entries (first 16 hex digits of a content hash) of the files `manifest` names:
    sources, qa-pairs.md and keywords files."""
    hashes = [entry.sha256 for entry in manifest.sources.values()]
    hashes += [digest for _, digest in manifest.stamps.values()]
    return frozenset(value[:16] for value in hashes if value)


def built_strategies(output: Storage, topics: dict[str, Any]) -> set[str] | None:
    """The strategy keys of the output's documents tables (one column of each topic's), or None
    where one of them cannot be read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from indexing.paths import document_table_path

    paths = [document_table_path(topic) for topic in topics]
    paths = [path for path, kept in zip(paths, topics.values(), strict=True) if path in kept.files]
    found: set[str] = set()
    for data in output.read_many(paths).values():
        if isinstance(data, Exception):
            return None
        try:
            table = pq.read_table(pa.BufferReader(data), columns=["strategy"])
        except (pa.ArrowException, ValueError):
            return None
        found.update(value for value in table.column("strategy").to_pylist() if value)
    return found


def cache_of(outputs: list[Storage]) -> str:
    """The cache the outputs' last builds used (their reports' `cache`; an output without a
    report: its own `.embedding-cache`). `PruneRefused` where they used different ones, or where
    an output's report is of a build running or failed, which names no cache (an output with a
    shared cache was pruned for its own `.embedding-cache`); `StoreFailed` where a report cannot
    be read."""
    from jobs.config import DEFAULT_CACHE
    from jobs.report import stored_report

    caches = set()
    for output in outputs:
        with naming(f"output {output.uri()}"):
            report = stored_report(output) or {}
        used, status = report.get("cache"), report.get("status")
        if not used and status in ("unfinished", "failed"):  # they name no cache
            raise PruneRefused(
                f"output {output.uri()}: its last build is {status}, and its report does not "
                "say which cache it uses: give --cache (nothing removed)"
            )
        caches.add(used if isinstance(used, str) and used else output.uri(DEFAULT_CACHE))
    if len(caches) > 1:
        raise PruneRefused(
            f"the outputs' last builds used different caches ({', '.join(sorted(caches))}): "
            "give --cache and every output that uses it"
        )
    return caches.pop()
