"""The `mdindex cache prune` sub-command: remove the embedding cache's entries that none of the
named outputs still needs (`embedding.prune`): those of sources' old bytes, and of chunking
settings no output's index was built with. What an output needs is read from its manifest (each
source's content hash, and its qa-pairs.md and keywords files') and its documents tables (the
strategy keys its index was built with)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from indexing.cli import json_object

if TYPE_CHECKING:
    from embedding.prune import Needed
    from jobs.storage import Storage

MIN_AGE_HOURS = 24.0  # entries written since are kept: a running build names its own at its end


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
        "than --min-age. Name every output that uses the cache: the entries of one not named "
        "are removed, and its next build embeds them again.",
    )
    parser.add_argument(
        "--output",
        dest="outputs",
        action="append",
        required=True,
        metavar="OUT",
        help="an output built with the cache (path or URI); give every one that uses it",
    )
    parser.add_argument(
        "--cache",
        help="the cache (default: the one the outputs' last builds used, from their reports)",
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
    output's needs cannot be told or the cache is not clear; 1 where a store cannot be read."""
    from botocore.exceptions import BotoCoreError

    from embedding.cache import EmbeddingCache
    from embedding.prune import cache_entries, plan_prune, prune
    from indexing.terminal import counted, write_out
    from jobs.report import error_text
    from jobs.storage import Storage

    options = args.storage_options or {}
    if args.min_age < 0:
        print("mdindex cache prune: --min-age must be 0 or more hours", file=sys.stderr)
        return 2
    try:
        outputs = [Storage(uri, options) for uri in args.outputs]
        needed = [output_needs(output) for output in outputs]
        uri = args.cache or cache_of(outputs)
        cache = EmbeddingCache(uri, options)
        plan = plan_prune(cache_entries(cache), needed, args.min_age * 3600, time.time())
        if not args.dry_run:
            prune(cache, plan.remove)
    except PruneRefused as exc:
        print(f"mdindex cache prune: {exc}", file=sys.stderr)
        return 2
    except (OSError, BotoCoreError) as exc:
        print(f"mdindex cache prune: {error_text(exc)}", file=sys.stderr)
        return 1
    done = "dry run: nothing removed" if args.dry_run else f"removed {len(plan.remove)} entries"
    lines = [f"cache {uri}, for {counted(len(outputs), 'output')}:", *plan.lines(), done]
    return 0 if write_out("\n".join(lines) + "\n", "mdindex cache prune") else 1


def output_needs(output: Storage) -> Needed:
    """What `output` needs of its cache: the entries of its manifest's content hashes (sources,
    qa-pairs.md and keywords files), under the strategy keys of its documents tables and the
    questions' key; under any strategy key where a table cannot be read. `PruneRefused` where it
    has no manifest this version reads (a mistyped path would have every entry removed)."""
    from embedding.prune import Needed
    from jobs.manifest import MANIFEST_PATH, Manifest
    from jobs.stages.embed import QUESTIONS_CACHE_KEY

    manifest = Manifest.from_json(output.read_optional(MANIFEST_PATH))
    if not manifest.config_key:
        raise PruneRefused(
            f"{output.uri(MANIFEST_PATH)}: no manifest this version reads, so what the output "
            "needs cannot be told; name outputs built with the cache (nothing removed)"
        )
    hashes = [entry.sha256 for entry in manifest.sources.values()]
    hashes += [digest for _, digest in manifest.stamps.values()]
    strategies = built_strategies(output, manifest.topics)
    return Needed(
        frozenset(value[:16] for value in hashes if value),
        None if strategies is None else frozenset({*strategies, QUESTIONS_CACHE_KEY}),
    )


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
    report: its own `.embedding-cache`). `PruneRefused` where they used different ones."""
    from jobs.config import DEFAULT_CACHE
    from jobs.report import stored_report

    caches = set()
    for output in outputs:
        used = (stored_report(output) or {}).get("cache")
        caches.add(used if isinstance(used, str) and used else output.uri(DEFAULT_CACHE))
    if len(caches) > 1:
        raise PruneRefused(
            f"the outputs' last builds used different caches ({', '.join(sorted(caches))}): "
            "give --cache and every output that uses it"
        )
    return caches.pop()
