"""What the stages are given, from the config: the chunk tasks' settings and encoder, the
embedding actors' settings and `load_embedder` options, each topic's reduce context, and whether
the cache is in use."""

from __future__ import annotations

import logging
from typing import Any

import tokenizers

from embedding.encoder import encoder_digest
from jobs.config import JobConfig
from jobs.discovery import window_encoder
from jobs.finish import index_settings
from jobs.landmarks import BACKEND, Landmark, Plugin, config_plugins
from jobs.path_set import PathSet
from jobs.previous import Expected
from jobs.resources import EmbedPool, actor_env
from jobs.stages.chunk import ChunkSettings
from jobs.stages.embed import EmbedSettings
from jobs.stages.topic import TopicContext
from jobs.storage import Storage

log = logging.getLogger("mdindex.build")


def chunk_settings(
    config: JobConfig, corpus: PathSet, encoder: tokenizers.Tokenizer | None
) -> ChunkSettings:
    """What the chunk tasks need from the config, the corpus's paths and the model's encoder."""
    return ChunkSettings(
        strategy=config.chunking.strategy,
        options=dict(config.chunking.options),
        tenant=config.tenant,
        corpus_paths=corpus,
        abort_on_failure=config.failure_policy == "abort",
        time_budget=config.chunking.timeout_seconds,
        encoder=encoder.to_str() if encoder else None,
        include_drafts=config.sources.include_drafts,
    )


def embed_settings(
    config: JobConfig,
    pool: EmbedPool,
    encoder: tokenizers.Tokenizer | None,
    collector=None,
    new_content: bool = False,
) -> EmbedSettings:
    """What an embedding actor of `pool` needs from the config, the chunk tasks' encoder and the
    run's collector (`new_content`: chunks are expected to miss the cache, `jobs.work.Work`)."""
    return EmbedSettings(
        model=config.embedding.model,
        options=embedder_options(config, pool),
        cache_uri=config.cache,
        storage_options=dict(config.storage_options),
        strategy_key=config.chunking.key,
        collector=collector,
        encoder_digest=encoder_digest(encoder) if encoder else None,
        env=actor_env(pool),
        load_at_start=new_content,
        plugins=tuple(plugin for plugin in config_plugins(config) if plugin.kind == BACKEND),
        in_driver=pool.in_driver,
    )


def topic_context(
    config: JobConfig,
    corpus: PathSet,
    source: Storage,
    output: Storage,
    collector: Any,
    marks: tuple[Landmark | Plugin, ...],
) -> TopicContext:
    """What each topic's reduce needs: the input and the output, the index settings, what the
    previous tables must match to be carried, the run's collector (`jobs.progress.Collector`) and
    the driver's landmarks."""
    expected = Expected(
        model=config.embedding.model,
        strategy=config.chunking.strategy,
        strategy_key=config.chunking.key,
        corpus_paths=corpus,
        source_globs=config.sources.globs,
    )
    return TopicContext(
        source=source,
        output=output,
        settings=index_settings(config),
        expected=expected,
        collector=collector,
        landmarks=marks,
        tenant=config.tenant,
    )


def cache_in_use(config: JobConfig) -> bool:
    """Whether the embedding cache holds entries of this run's chunking (its strategy key's
    folder is there); True where that cannot be told (the cache's own reads report it)."""
    if not config.cache:
        return False
    try:
        return Storage(config.cache, config.storage_options).exists(config.chunking.key)
    except Exception:  # noqa: BLE001 - a guess: as before, the model loads at a miss
        return True


def chunk_encoder(config: JobConfig) -> tokenizers.Tokenizer | None:
    """The model's window encoder for the chunk tasks (`jobs.stages.tokenize`), read from its
    small files; None leaves the tokenizing to the embedding actors, which is also what happens
    when those files cannot be read here (the actors then report the model's problem)."""
    try:
        return window_encoder(config)
    except Exception as error:  # noqa: BLE001 - any failure only means the actors tokenize
        log.warning("the embedding actors tokenize: %s (%s)", error, type(error).__name__)
        return None


def embedder_options(config: JobConfig, pool: EmbedPool) -> dict[str, Any]:
    """`load_embedder` keyword arguments: the set embedding options, threads, storage options.
    A CPU pool's actors run on the CPU when the device is "auto": Ray hides no GPU from an actor
    that asked for none, so each one found CUDA and loaded its model there, unaccounted for."""
    options = {k: v for k, v in vars(config.embedding).items() if k != "model" and v is not None}
    if not pool.num_gpus and options["device"] == "auto":
        options["device"] = "cpu"
    options["num_threads"] = pool.threads
    if config.storage_options:
        options["storage_options"] = dict(config.storage_options)
    return options
