"""The build job: discover on the driver, stream carry -> read -> chunk -> embed -> per-topic reduce
on Ray Data, then finish on the driver (relinks, deletions, directory indexes, SimHash tables, the
embedding settings `_index/model.json`, manifest, report).

The driver holds the listing, the manifest and one small summary per topic; chunks and vectors
stay in the Ray object store and the workers write every topic's files themselves.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import ray
from ray.data import DataContext
from ray.data.context import ShuffleStrategy

from chunking import strategy_key
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
from indexing.client import EMBEDDING_SETTINGS, embedding_settings
from indexing.paths import INDEX, TOPIC_SPEC, in_topic
from jobs.config import JobConfig
from jobs.manifest import MANIFEST_PATH, REPORT_PATH, Manifest, SourceEntry, TopicEntry
from jobs.plan import KEEP, REBUILD, RELINK, Plan, keep_directory, make_plan, settings_digest
from jobs.previous import Expected
from jobs.progress import Heartbeat, configure_progress
from jobs.records import QUESTIONS, SOURCE, TOPIC, new_row
from jobs.report import Tally, build_report, report_bytes
from jobs.resources import actor_stage_args, actor_threads, reduce_stage_args, task_stage_args
from jobs.stages.carry import CarrySettings, carry_batch
from jobs.stages.chunk import ChunkSettings, chunk_batch
from jobs.stages.embed import EmbedActor, EmbedSettings
from jobs.stages.read import read_batch
from jobs.stages.topic import TopicContext, build_and_write
from jobs.storage import Storage, SymlinkRefused

log = logging.getLogger("mdindex.build")

# Environment that Ray workers of a locally started instance need to reach S3 and stay offline.
FORWARDED_ENV_PREFIXES = ("AWS_", "HF_", "TRANSFORMERS_", "RAY_AUTH_MODE")
MAX_PARTITIONS = 200  # hash partitions of the group-by-topic shuffle (Ray Data's default)


class InputNotFound(FileNotFoundError):
    """The input root does not exist (a usage error: exit code 2)."""


def index_settings(config: JobConfig) -> IndexSettings:
    """The indexing library's settings from the config."""
    return IndexSettings(
        prompt_threshold=config.prompts.threshold, prompt_top_k=config.prompts.top_k
    )


def settings_key(config: JobConfig) -> str:
    """Digest of every setting that changes the outputs (a change rebuilds every topic)."""
    embedding = {
        k: v
        for k, v in vars(config.embedding).items()
        if k not in ("device", "local_dir", "token_budget")
    }
    return settings_digest(
        {
            "strategy": strategy_key(config.chunking.strategy, **config.chunking.options),
            "embedding": embedding,
            "tenant": config.tenant,
            "globs": list(config.sources.globs),
            "prompts": vars(config.prompts),
        }
    )


def run_job(config: JobConfig) -> dict[str, Any]:
    """Run one build and return its report (also written to `{output}/_reindex/report.json`)."""
    wall: dict[str, float] = {}
    started = time.perf_counter()
    follow = config.sources.follow_symlinks
    source = Storage(config.input, config.storage_options, follow_symlinks=follow)
    output = Storage(config.output, config.storage_options, follow_symlinks=follow)
    try:
        files = list(source.walk(keep_directory))
    except FileNotFoundError as exc:
        raise InputNotFound(f"input {config.input}: no such directory") from exc
    previous = Manifest.from_json(output.read_optional(MANIFEST_PATH))
    config_key = settings_key(config)
    plan = make_plan(files, previous, config_key, config.sources.globs)
    rows = work_rows(plan, previous)
    wall["discover"] = time.perf_counter() - started
    log.info(
        "%d sources in %d topics: %d changed, %d deleted; %d topics to rebuild",
        len(plan.fingerprints),
        len(plan.topics),
        len(plan.changed),
        len(plan.deleted),
        sum(1 for t in plan.topics if t.action == REBUILD),
    )

    tally = Tally()
    for failure in plan.skipped:
        log.warning("%s skipped: %s", failure["path"], failure["message"])
        tally.failures.append(failure)
    built: dict[str, dict[str, Any]] = {}
    mark = time.perf_counter()
    if rows:
        rebuilt = sum(1 for t in plan.topics if t.action == REBUILD)
        with Heartbeat(lambda: f"{len(built)} of {rebuilt} topics written"):
            for summary in topic_summaries(config, plan, rows, source, output):
                tally.add(summary)
                built[summary["topic"]] = _compact(summary)
                log.info("topic %r written (%d/%d)", summary["topic"], len(built), rebuilt)
    wall["pipeline"] = time.perf_counter() - mark

    mark = time.perf_counter()
    manifest = finish(config, config_key, output, plan, previous, built)
    wall["finish"] = time.perf_counter() - mark
    wall["total"] = time.perf_counter() - started
    actions = [t.action for t in plan.topics]
    report = build_report(
        tally,
        sources={
            "seen": len(plan.fingerprints),
            "changed": len(plan.changed),
            "unchanged": len(plan.fingerprints) - len(plan.changed),
            "deleted": len(plan.deleted),
        },
        topics={
            "seen": len(plan.topics),
            "rebuilt": actions.count(REBUILD),
            "relinked": actions.count(RELINK),
            "kept": actions.count(KEEP),
            "deleted": len(plan.deleted_topics),
        },
        wall=wall,
        facts={
            "input": source.uri(),
            "output": output.uri(),
            "cache": config.cache,
            "model": config.embedding.model,
            "strategy": config.chunking.strategy,
        },
    )
    output.write_bytes(MANIFEST_PATH, manifest.to_json())
    output.write_bytes(REPORT_PATH, report_bytes(report))
    return report


def work_rows(plan: Plan, previous: Manifest) -> list[dict[str, Any]]:
    """The pipeline's input rows: per rebuilt topic a topic row, its sources and its questions.

    A source unchanged since a run in which it succeeded is marked `carried`: taken from the
    previous tables rather than read, chunked and embedded again.
    """
    rows = []
    for topic in plan.topics:
        if topic.action != REBUILD:
            continue
        facts = {"children": list(topic.children), "keywords": topic.keywords}
        rows.append(new_row(topic.topic, TOPIC, "", payload=json.dumps(facts).encode()))
        for path in topic.sources:
            before = previous.sources.get(path)
            rows.append(
                new_row(
                    topic.topic,
                    SOURCE,
                    path,
                    previous_hash=before.sha256 if before else None,
                    carried=path not in plan.changed and before is not None and bool(before.sha256),
                )
            )
        if topic.questions:
            rows.append(new_row(topic.topic, QUESTIONS, topic.questions))
    return rows


def topic_summaries(
    config: JobConfig, plan: Plan, rows: list[dict[str, Any]], source: Storage, output: Storage
) -> Iterator[dict]:
    """Run the Ray Data pipeline over `rows`; yield one summary per rebuilt topic as it finishes.

    Stages: carry unchanged sources from the previous tables, read, chunk, embed (actor pool),
    group by topic, build and write each topic.
    """
    start_ray(config)
    configure_progress()
    # The sort-based shuffle groups by topic in seconds; the default actor-based hash shuffle
    # adds ~10 s of aggregator start-up to every run on a small machine.
    DataContext.get_current().shuffle_strategy = ShuffleStrategy.SORT_SHUFFLE_PULL_BASED
    resources = config.resources
    key = strategy_key(config.chunking.strategy, **config.chunking.options)
    rebuilt = {row["topic"] for row in rows}
    chunk_settings = ChunkSettings(
        strategy=config.chunking.strategy,
        options=dict(config.chunking.options),
        tenant=config.tenant,
        corpus_paths=frozenset(plan.fingerprints),
        abort_on_failure=config.failure_policy == "abort",
    )
    embed_settings = EmbedSettings(
        model=config.embedding.model,
        options=embedder_options(config),
        cache_uri=config.cache,
        storage_options=dict(config.storage_options),
        strategy_key=key,
        mix_documents=resources.embed.mix_documents,
    )
    expected = Expected(
        model=config.embedding.model,
        strategy=config.chunking.strategy,
        strategy_key=key,
        corpus_paths=frozenset(plan.fingerprints),
    )
    context = TopicContext(
        source=source, output=output, settings=index_settings(config), expected=expected
    )
    dataset = (
        ray.data.from_items(rows)
        .map_batches(
            carry_batch,
            batch_format="pyarrow",
            fn_kwargs={"settings": CarrySettings(output=output, expected=expected)},
            **task_stage_args(resources.chunk),
        )
        .map_batches(
            read_batch,
            batch_format="pyarrow",
            fn_kwargs={"source": source},
            **task_stage_args(resources.chunk),
        )
        .map_batches(
            chunk_batch,
            batch_format="pyarrow",
            fn_kwargs={"settings": chunk_settings},
            **task_stage_args(resources.chunk),
        )
        .map_batches(
            EmbedActor,
            batch_format="pyarrow",
            fn_constructor_kwargs={"settings": embed_settings},
            **actor_stage_args(resources.embed),
        )
        .groupby("topic", num_partitions=max(1, min(MAX_PARTITIONS, len(rebuilt))))
        .map_groups(
            build_and_write,
            batch_format="pyarrow",
            fn_kwargs={"context": context},
            **reduce_stage_args(resources.index),
        )
    )
    for batch in dataset.iter_batches(batch_size=1, batch_format="pyarrow"):
        for text in batch.column("summary").to_pylist():
            yield json.loads(text)


def embedder_options(config: JobConfig) -> dict[str, Any]:
    """`load_embedder` keyword arguments: the set embedding options, threads, storage options."""
    options = {k: v for k, v in vars(config.embedding).items() if k != "model" and v is not None}
    options["num_threads"] = actor_threads(config.resources.embed)
    if config.storage_options:
        options["storage_options"] = dict(config.storage_options)
    return options


def start_ray(config: JobConfig) -> None:
    """Join the running Ray (a test's, or the cluster under `ray job submit`) or start one."""
    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address="auto")  # the job's runtime_env already reaches every worker
        return
    env = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV_PREFIXES)}
    ray.init(
        num_cpus=config.resources.num_cpus, include_dashboard=False, runtime_env={"env_vars": env}
    )


def finish(
    config: JobConfig,
    config_key: str,
    output: Storage,
    plan: Plan,
    previous: Manifest,
    built: dict[str, dict[str, Any]],
) -> Manifest:
    """Driver-side side effects after every topic is written; returns the manifest to store."""
    topics: dict[str, TopicEntry] = {}
    sources: dict[str, SourceEntry] = {}
    for topic in plan.topics:
        if topic.action == REBUILD:
            summary = built[topic.topic]
            topics[topic.topic] = TopicEntry(
                inputs=topic.inputs,
                children=topic.children,
                files=tuple(summary["files"]),
                prompt_entries=tuple(tuple(e) for e in summary["prompt_entries"]),
                failed=bool(summary["failures"]),
            )
            for path, outcome in summary["sources"].items():
                sources[path] = SourceEntry(
                    plan.fingerprints[path], outcome["sha256"], outcome["failed"]
                )
            continue
        entry = previous.topics[topic.topic]
        if topic.action == RELINK:
            index = output.read_optional(in_topic(topic.topic, INDEX))
            if index is not None:
                output.write_if_changed(
                    in_topic(topic.topic, INDEX), set_child_topics(index, list(topic.children))
                )
            entry = TopicEntry(
                entry.inputs, topic.children, entry.files, entry.prompt_entries, entry.failed
            )
        topics[topic.topic] = entry
        sources.update({p: previous.sources[p] for p in topic.sources})

    for topic in plan.deleted_topics:
        remove_topic(output, topic, previous.topics[topic].files)
    current = set(topics) | set(plan.directories)
    output.delete([in_topic(d, INDEX) for d in previous.directories if d not in current])
    for directory, children in plan.directories.items():
        output.write_if_changed(in_topic(directory, INDEX), directory_index(directory, children))

    entries = [
        (h, topic, stem, i)
        for topic, entry in topics.items()
        for h, stem, i in entry.prompt_entries
    ]
    tables = build_simhash_tables(sorted(entries), k=index_settings(config).simhash_k)
    for path, data in sorted(tables.items()):
        output.write_if_changed(path, data)
    output.delete(sorted(set(previous.simhash_files) - set(tables)))
    settings = embedding_settings(config.embedding.model, vars(config.embedding))
    output.write_if_changed(EMBEDDING_SETTINGS, settings)  # for `mdindex query --question`
    return Manifest(
        config_key=config_key,
        sources=sources,
        topics=topics,
        directories=tuple(sorted(plan.directories)),
        simhash_files=tuple(sorted(tables)),
    )


def remove_topic(output: Storage, topic: str, files: tuple[str, ...]) -> None:
    """Delete the outputs of a topic that lost all its sources (seed 001 lifecycle); keep any
    hand-written part of its topic-spec.md (a symbolic link there is left as it is)."""
    output.delete(orphaned_topic_files(topic, files))
    output.delete([chunk_table_path(topic), document_table_path(topic)])
    spec_path = in_topic(topic, TOPIC_SPEC)
    try:
        spec = output.read_optional(spec_path)
    except SymlinkRefused:
        return
    if spec is not None:
        rest = topic_spec_without_section(spec.decode("utf-8", errors="replace"))
        if rest is None:
            output.delete([spec_path])
        else:
            output.write_bytes(spec_path, rest.encode("utf-8"))


def _compact(summary: dict[str, Any]) -> dict[str, Any]:
    """What the driver keeps of a topic summary until the end (no counts, no timings)."""
    return {k: summary[k] for k in ("files", "prompt_entries", "failures", "sources")}
