"""The build job: discover on the driver, stream read+chunk -> embed -> cache writes -> per-topic
reduce on Ray Data, then finish on the driver (`jobs.finish`).

The driver holds the listing, the manifest and one small summary per topic; chunks and vectors
stay in the Ray object store and the workers write every topic's files themselves. Only changed
sources travel through the pipeline: a rebuilt topic's unchanged sources are carried by its reduce
straight from the previous tables.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import ray
import tokenizers

from chunking import strategy_key
from embedding.encoder import encoder_digest, model_encoder
from jobs.config import EmbedResources, JobConfig
from jobs.finish import finish, index_settings
from jobs.lock import Check, output_lock
from jobs.manifest import MANIFEST_PATH, Manifest
from jobs.plan import (
    KEEP,
    REBUILD,
    RELINK,
    Plan,
    TopicPlan,
    keep_directory,
    make_plan,
    settings_digest,
)
from jobs.previous import Expected
from jobs.progress import Goal, Heartbeat, StatsCollector, configure_progress, progress_line
from jobs.records import QUESTIONS, SOURCE, TOPIC, new_row, to_table
from jobs.reduce import reduce_topics
from jobs.report import build_report, key_settings, write_report
from jobs.resources import (
    EmbedPool,
    actor_env,
    actor_stage_args,
    describe_resources,
    embed_batch_size,
    embed_pool,
    infeasible,
    reduce_task_options,
    store_stage_args,
    task_stage_args,
)
from jobs.signals import exit_on_sigterm
from jobs.stages.chunk import ChunkSettings, SourceFailed, read_and_chunk
from jobs.stages.embed import EmbedActor, EmbedSettings
from jobs.stages.store import store_entries
from jobs.stages.topic import KEYWORDS_FAILED, TopicContext
from jobs.stats import RunStats
from jobs.storage import FileInfo, SkippedLink, Storage

log = logging.getLogger("mdindex.build")

BATCHES_PER_CPU = 4  # automatic batch size: the corpus cut into about this many batches per CPU
MIN_BATCH_BYTES, MAX_BATCH_BYTES = 250_000, 16_000_000
# How long the local Ray instance keeps an idle worker process beyond one per CPU (Ray's default:
# 1 s). A build's store tasks (no CPU) and per-topic reduces come in bursts while chunk tasks hold
# the CPUs, so Ray starts extra worker processes for them; killed a second after each burst, they
# were started again for the next, each paying Python, Ray, pyarrow and our imports (about a
# CPU-second). On the FastAPI docs (2 CPUs, stand-in model) a cold build started 7-14 task worker
# processes and took 22.4-26.5 s; keeping them, 4-5 processes and 20.8-23.4 s.
IDLE_WORKER_KEEP_MS = 60_000
NO_POOL = "none (nothing to embed: every source of the rebuilt topics is carried)"


class InputNotFound(FileNotFoundError):
    """The input root does not exist (a usage error: exit code 2)."""


class EmptyInput(InputNotFound):
    """The input lists no sources and the output holds some (a usage error: exit code 2). Going on
    would delete every topic, which is what an unmounted volume, an input emptied while it is
    refreshed or a mistyped prefix look like; `sources.allow_empty: true` goes on."""


class InfeasibleResources(ValueError):
    """A stage asks for more than any node of the private local Ray instance has, which never
    grows: the build would wait for ever (a config error for this machine: exit code 2)."""


@dataclass(frozen=True)
class Built:
    """What the pipeline left for the driver: each rebuilt topic's summary, and the counters."""

    summaries: dict[str, dict[str, Any]]
    stats: RunStats
    cpus: float
    pool: EmbedPool | None = None  # the embedding pool of the run's (first) pipeline


def settings_key(config: JobConfig) -> str:
    """Digest of every setting that changes the outputs (a change rebuilds every topic)."""
    embedding = {
        k: v
        for k, v in vars(config.embedding).items()
        if k not in ("device", "local_dir", "token_budget", "cuda_graphs")
    }
    return settings_digest(
        {
            "strategy": strategy_key(config.chunking.strategy, **config.chunking.options),
            "embedding": embedding,
            "tenant": config.tenant,
            "globs": list(config.sources.globs),
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


def list_input(config: JobConfig) -> list[FileInfo | SkippedLink]:
    """The input's listing (`InputNotFound` when its root does not exist)."""
    try:
        return list(input_storage(config).walk(keep_directory))
    except FileNotFoundError as exc:
        raise InputNotFound(f"input {config.input}: no such directory") from exc


def discover(config: JobConfig, listing: list[FileInfo | SkippedLink]) -> Discovery:
    """Read the previous manifest and plan the run from the input's listing (reads nothing
    else); `EmptyInput` when the listing holds no source and the output some."""
    output = output_storage(config)
    previous = Manifest.from_json(output.read_optional(MANIFEST_PATH))
    config_key = settings_key(config)
    plan = make_plan(listing, previous, config_key, config.sources.globs)
    if not plan.fingerprints and previous.sources and not config.sources.allow_empty:
        raise EmptyInput(
            f"input {config.input}: no sources (file names matching {list(config.sources.globs)}),"
            f" and the output {config.output} holds {len(previous.sources)} from its last run: "
            "the build would delete every topic. Check the input; to empty the index, set "
            "sources.allow_empty: true"
        )
    sizes = {f.path: f.size for f in listing if isinstance(f, FileInfo)}
    return Discovery(input_storage(config), output, previous, config_key, plan, sizes)


def run_job(config: JobConfig) -> dict[str, Any]:
    """Run one build and return its report (also written to `{output}/_reindex/report.json`).

    The input is listed first (a missing one touches nothing), then the output's build lock is
    held throughout (`jobs.lock`: a second build on the output fails at once)."""
    started = time.perf_counter()
    if note := config.s3_note():
        log.info("%s", note)
    listing = list_input(config)
    with output_lock(output_storage(config)) as check:
        return _run_locked(config, listing, started, check)


def _run_locked(
    config: JobConfig, listing: list[FileInfo | SkippedLink], started: float, check: Check
) -> dict[str, Any]:
    """`run_job`'s build from the input's `listing`, once the lock is held (`started`: when the
    run began, by `time.perf_counter`; `check`: raises `LockLost` once it is no longer held,
    called before each topic's reduce and before the finish)."""
    wall: dict[str, float] = {}
    found = discover(config, listing)
    source, output, plan = found.source, found.output, found.plan
    rebuilt = [t.topic for t in plan.topics if t.action == REBUILD]
    wall["discover"] = time.perf_counter() - started
    log.info(
        "%d sources in %d topics: %d changed, %d deleted; %d topics to rebuild",
        len(plan.fingerprints),
        len(plan.topics),
        len(plan.changed),
        len(plan.deleted),
        len(rebuilt),
    )
    for failure in plan.skipped:
        log.warning("%s skipped: %s", failure["path"], failure["message"])
    for failure in plan.settled:
        log.warning("%s still fails, unchanged since (not read again): %s: %s", *failure.values())
    # Under `abort`, a failure known from the last run stops the job as the chunk stage would
    # (a source's or a qa-pairs.md's; a keywords file's failure never stops one).
    stops = [f for f in plan.settled if f["code"] != KEYWORDS_FAILED]
    if stops and config.failure_policy == "abort":
        stop = stops[0]
        raise SourceFailed(
            f"{stop['path']}: {stop['code']}: {stop['message']} (unchanged since it failed)"
        )

    built = Built({}, RunStats(), float(os.cpu_count() or 1))
    if rebuilt:
        mark = time.perf_counter()
        start_ray(config)
        wall["ray_start"] = time.perf_counter() - mark
        mark = time.perf_counter()
        built = build_topics(config, plan, found.previous, found.sizes, source, output, check)
        wall["pipeline"] = time.perf_counter() - mark

    mark = time.perf_counter()
    check()
    manifest = finish(config, found.config_key, output, plan, found.previous, built.summaries)
    wall["finish"] = time.perf_counter() - mark
    wall["total"] = time.perf_counter() - started
    actions = [t.action for t in plan.topics]
    outcomes = [o for s in built.summaries.values() for o in s["sources"].values()]
    settled_sources = sum(1 for failure in plan.settled if failure["path"] in plan.fingerprints)
    rebuilt_failures = (f for s in built.summaries.values() for f in s["failures"])
    report = build_report(
        built.stats,
        failures=[*plan.skipped, *plan.settled, *rebuilt_failures],
        sources={
            "seen": len(plan.fingerprints),
            "changed": len(plan.changed),
            "unchanged": len(plan.fingerprints) - len(plan.changed),
            "deleted": len(plan.deleted),
            "failed": sum(1 for o in outcomes if o.failed) + settled_sources,
            "failed_unchanged": settled_sources,
            "chunked": sum(1 for o in outcomes if not o.carried),
            "carried": sum(1 for o in outcomes if o.carried),
        },
        topics={
            "seen": len(plan.topics),
            "rebuilt": actions.count(REBUILD),
            "relinked": actions.count(RELINK),
            "kept": actions.count(KEEP),
            "deleted": len(plan.deleted_topics),
        },
        wall=wall,
        cpus=built.cpus,
        pool=built.pool.to_dict() if built.pool else None,
        facts={
            "input": source.uri(),
            "output": output.uri(),
            "cache": config.cache,
            "model": config.embedding.model,
            "strategy": config.chunking.strategy,
            "settings": key_settings(config),
        },
    )
    output.write_bytes(MANIFEST_PATH, manifest.to_json())
    write_report(output, report)
    return report


def build_topics(
    config: JobConfig,
    plan: Plan,
    previous: Manifest,
    sizes: dict[str, int],
    source: Storage,
    output: Storage,
    check: Check,
) -> Built:
    """Rebuild every topic the plan says to, with a heartbeat; collect summaries and counters.
    `check` is called before each topic's reduce starts (`jobs.lock`).

    A topic whose carried sources turn out unusable (previous tables missing or damaged) is run
    once more with every source through the pipeline."""
    configure_progress()
    collector = StatsCollector.remote()
    cluster = ray.cluster_resources()  # one round trip to Ray's control store
    cpus, gpus = float(cluster.get("CPU", 1)), float(cluster.get("GPU", 0))
    topics = [t for t in plan.topics if t.action == REBUILD]
    work = prepare_work(config, work_rows(topics, plan, previous, sizes, carry=True), cpus)
    goal = Goal(sources=work.sources, bytes=work.bytes, topics=len(topics))
    summaries: dict[str, dict[str, Any]] = {}
    first_pool = None

    def status(elapsed: float) -> str:
        return progress_line(ray.get(collector.total.remote()), goal, elapsed)

    try:
        with Heartbeat(status):
            for carry in (True, False):
                recarry = set()
                pool = None
                if work.embeds:
                    batches = embedding_batches(config.resources.embed, work)
                    pool = embed_pool(config.resources.embed, cpus, batches, gpus)
                    first_pool = first_pool or pool
                log.info("embedding pool: %s", pool.label() if pool else NO_POOL)
                for summary in topic_summaries(
                    config, plan, work, source, output, collector, cpus, pool, check
                ):
                    if "recarry" in summary:
                        recarry.add(summary["topic"])
                        continue
                    summaries[summary["topic"]] = summary
                    log.info(
                        "topic %r written (%d/%d)", summary["topic"], len(summaries), len(topics)
                    )
                if not recarry or not carry:
                    break
                log.info(
                    "%d topics could not carry their unchanged sources; reading them", len(recarry)
                )
                again = [t for t in topics if t.topic in recarry]
                work = prepare_work(
                    config, work_rows(again, plan, previous, sizes, carry=False), cpus
                )
        stats = ray.get(collector.total.remote())
    finally:
        ray.kill(collector)
    return Built(summaries, stats, cpus, first_pool)


def work_rows(
    topics: list[TopicPlan],
    plan: Plan,
    previous: Manifest,
    sizes: dict[str, int],
    *,
    carry: bool,
) -> list[dict[str, Any]]:
    """The pipeline's input rows: per rebuilt topic a topic row, its changed sources and its
    questions, in topic order.

    A source unchanged since a run in which it succeeded gets no row when `carry`: the topic row
    names it, and the reduce takes it from the previous tables. One that failed is read again
    (with a settled failure, to fail the same way: the reduce keeps its previous rows)."""
    rows = []
    for topic in topics:
        carried = {}
        sources = []
        for path in topic.sources:
            before = previous.sources.get(path)
            if (
                carry
                and path not in plan.changed
                and before is not None
                and before.sha256
                and not before.failed
            ):
                carried[path] = before.sha256
                continue
            sources.append(
                new_row(
                    topic.topic,
                    SOURCE,
                    path,
                    size=sizes[path],
                    previous_hash=before.sha256 if before else None,
                )
            )
        facts = {"children": list(topic.children), "keywords": topic.keywords, "carried": carried}
        rows.append(new_row(topic.topic, TOPIC, "", size=0, payload=json.dumps(facts).encode()))
        rows.extend(sources)
        if topic.questions:
            rows.append(
                new_row(topic.topic, QUESTIONS, topic.questions, size=sizes[topic.questions])
            )
    return rows


def pack_batches(rows: list[dict[str, Any]], target_bytes: float) -> list[list[dict[str, Any]]]:
    """Consecutive rows cut into batches of about `target_bytes` of listed size each."""
    batches: list[list[dict[str, Any]]] = [[]]
    size = 0
    for row in rows:
        if batches[-1] and size >= target_bytes:
            batches.append([])
            size = 0
        batches[-1].append(row)
        size += row["size"]
    return batches if batches[0] else []


def batch_bytes(config: JobConfig, total: int, cpus: float) -> float:
    """Bytes of sources per read-and-chunk task: the config's, or about 4 batches per CPU."""
    if config.resources.chunk.batch_mb is not None:
        return config.resources.chunk.batch_mb * 1e6
    return min(MAX_BATCH_BYTES, max(MIN_BATCH_BYTES, total / (BATCHES_PER_CPU * cpus)))


@dataclass(frozen=True)
class Work:
    """The pipeline's input: work rows packed into Arrow batches by size, the rows each topic
    expects, and the sources (and their bytes) among them. The rows themselves are not kept."""

    batches: list[pa.Table]
    expected: Counter
    sources: int
    bytes: int
    questions: int = 0  # topics whose qa-pairs.md are embedded (as queries, mostly from the cache)

    @property
    def embeds(self) -> bool:
        """Whether any row has texts to embed: a source to chunk, or a topic's questions. Not so
        when every source of the rebuilt topics is carried (a source deleted, a topic's child)."""
        return bool(self.sources or self.questions)

    @property
    def block_rows(self) -> int:
        """The most rows one chunk task gets."""
        return max((batch.num_rows for batch in self.batches), default=1)

    @property
    def source_bytes(self) -> float:
        """The mean listed size of a source."""
        return self.bytes / max(1, self.sources)


def embedding_batches(resources: EmbedResources, work: Work) -> int:
    """How many batches the embedding actors can run at once: one per chunk task, and (with a
    batch size set, and on GPUs) no more than the sources make batches of `embed_batch_size`
    documents. Ray Data splits one chunk task's block into batches one after another, never in
    parallel (a 1-document batch size over one block: one task at a time)."""
    rows = embed_batch_size(resources, block_rows=work.block_rows, source_bytes=work.source_bytes)
    if rows is None:
        return len(work.batches)
    return max(1, min(len(work.batches), math.ceil(work.sources / rows)))


def prepare_work(config: JobConfig, rows: list[dict[str, Any]], cpus: float) -> Work:
    """`rows` packed into Arrow batches (`batch_bytes` each), with what the driver keeps of them."""
    target = batch_bytes(config, sum(row["size"] for row in rows), cpus)
    return Work(
        batches=[to_table(batch) for batch in pack_batches(rows, target)],
        expected=Counter(row["topic"] for row in rows),
        sources=sum(1 for row in rows if row["kind"] == SOURCE),
        bytes=sum(row["size"] for row in rows if row["kind"] == SOURCE),
        questions=sum(1 for row in rows if row["kind"] == QUESTIONS),
    )


def topic_summaries(
    config: JobConfig,
    plan: Plan,
    work: Work,
    source: Storage,
    output: Storage,
    collector,
    cpus: float,
    pool: EmbedPool | None,
    check: Check,
) -> Iterator[dict]:
    """Run the Ray Data pipeline over `work`; yield one summary per rebuilt topic as it finishes.

    Stages: read and chunk (CPU tasks, batches packed by size), embed (actor `pool`), write the
    new cache entries (CPU tasks), then each topic built and written as soon as all its rows are
    embedded (`jobs.reduce`). Without a `pool` (nothing to embed) the rows go from the chunk
    tasks to the reduces, and no actor starts."""
    resources = config.resources
    key = strategy_key(config.chunking.strategy, **config.chunking.options)
    corpus = frozenset(plan.fingerprints)
    encoder = chunk_encoder(config) if pool else None
    chunk_settings = ChunkSettings(
        strategy=config.chunking.strategy,
        options=dict(config.chunking.options),
        tenant=config.tenant,
        corpus_paths=corpus,
        abort_on_failure=config.failure_policy == "abort",
        time_budget=config.chunking.timeout_seconds,
        encoder=encoder.to_str() if encoder else None,
    )
    expected = Expected(
        model=config.embedding.model,
        strategy=config.chunking.strategy,
        strategy_key=key,
        corpus_paths=corpus,
    )
    context = TopicContext(
        source=source,
        output=output,
        settings=index_settings(config),
        expected=expected,
        collector=collector,
    )
    # `from_blocks` (a developer API) keeps the batches as they are and reads their metadata here;
    # `from_arrow` ran a remote task per batch for it and waited for them before the pipeline began.
    dataset = ray.data.from_blocks(work.batches).map_batches(
        read_and_chunk,
        batch_format="pyarrow",
        fn_kwargs={
            "source": source,
            "output": output,
            "settings": chunk_settings,
            "collector": collector,
        },
        **task_stage_args(resources.chunk),
    )
    if pool:
        embed_settings = EmbedSettings(
            model=config.embedding.model,
            options=embedder_options(config, pool),
            cache_uri=config.cache,
            storage_options=dict(config.storage_options),
            strategy_key=key,
            collector=collector,
            encoder_digest=encoder_digest(encoder) if encoder else None,
            env=actor_env(pool),
        )
        embed_rows = embed_batch_size(
            resources.embed, block_rows=work.block_rows, source_bytes=work.source_bytes
        )
        dataset = dataset.map_batches(
            EmbedActor,
            batch_format="pyarrow",
            fn_constructor_kwargs={"settings": embed_settings},
            **actor_stage_args(pool, embed_rows),
        )
    if pool and config.cache:
        dataset = dataset.map_batches(
            store_entries,
            batch_format="pyarrow",
            fn_kwargs={
                "cache_uri": config.cache,
                "storage_options": dict(config.storage_options),
                "collector": collector,
            },
            **store_stage_args(cpus),
        )
    yield from reduce_topics(
        dataset, work.expected, context, reduce_task_options(resources.index), collector, check
    )


def chunk_encoder(config: JobConfig) -> tokenizers.Tokenizer | None:
    """The model's window encoder for the chunk tasks (`jobs.stages.tokenize`), read from its
    small files; None leaves the tokenizing to the embedding actors, which is also what happens
    when those files cannot be read here (the actors then report the model's problem)."""
    embedding = config.embedding
    try:
        return model_encoder(
            embedding.model,
            embedding.max_length,
            revision=embedding.revision,
            storage_options=dict(config.storage_options),
        )
    except Exception as error:  # noqa: BLE001 - any failure only means the actors tokenize
        log.warning("the embedding actors tokenize: %s (%s)", error, type(error).__name__)
        return None


def embedder_options(config: JobConfig, pool: EmbedPool) -> dict[str, Any]:
    """`load_embedder` keyword arguments: the set embedding options, threads, storage options."""
    options = {k: v for k, v in vars(config.embedding).items() if k != "model" and v is not None}
    options["num_threads"] = pool.threads
    if config.storage_options:
        options["storage_options"] = dict(config.storage_options)
    return options


def start_ray(config: JobConfig) -> None:
    """Join this process's Ray (a test's) or the cluster RAY_ADDRESS names (`ray job submit` sets
    it); otherwise start a private local instance, never one that `ray start` left running here,
    which keeps idle worker processes `IDLE_WORKER_KEEP_MS`."""
    if ray.is_initialized():
        return
    # Ray's own INFO lines stay out of the log (ours say what happened; jobs.logs).
    if os.environ.get("RAY_ADDRESS"):
        # the job's runtime_env already reaches every worker
        context = ray.init(address="auto", logging_level=logging.WARNING)
        exit_on_sigterm()
        log.info("joined the Ray cluster at %s", context.address_info["gcs_address"])
        if missing := infeasible(config.resources, _live_nodes()):
            log.warning(
                "%s, and no node of the cluster has that: the build waits until the autoscaler "
                "adds one (its node types must offer it)",
                "; ".join(missing),
            )
        return
    # Workers of a local instance inherit this process's environment (AWS_*, HF_*, ...); a
    # runtime_env to forward it would cost every new worker process about a second.
    context = ray.init(
        address="local",
        num_cpus=config.resources.num_cpus,
        include_dashboard=False,
        logging_level=logging.WARNING,
        _system_config={"idle_worker_killing_time_threshold_ms": IDLE_WORKER_KEEP_MS},
    )
    exit_on_sigterm()
    log.info("started a local Ray instance (logs in %s)", context.address_info["session_dir"])
    if missing := infeasible(config.resources, nodes := _live_nodes()):
        node = nodes[0] if nodes else {}  # a local instance is one node
        here = describe_resources(node.get("CPU", 0.0), node.get("GPU", 0.0))
        hint = (
            " Without a GPU, set embedding.device: cpu and resources.embed.num_gpus: 0 (as"
            " configs/local.yaml does); for GPUs, run on their cluster (RAY_ADDRESS, ray job"
            " submit)."
            if config.resources.embed.num_gpus
            else ""
        )
        raise InfeasibleResources(
            f"this machine's Ray instance has {here}, and a local instance never grows: "
            f"{'; '.join(missing)}, so the build would wait for ever.{hint}"
        )


def _live_nodes() -> list[dict[str, float]]:
    """The total resources of each live node of the Ray instance this process is connected to."""
    return [node["Resources"] for node in ray.nodes() if node["Alive"]]
