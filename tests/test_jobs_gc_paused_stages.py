"""The workers' hot paths run with Python's collector paused (`jobs.gc_pause`): a chunk task and
an embedding actor's call, on real files and the real MiniLM, with the collector's thresholds set
so low that any work done with it on would trigger collections."""

from __future__ import annotations

import gc
from contextlib import contextmanager

from jobs_support import chunk_task_inputs

from embedding.documents import Remembered
from embedding.encoder import encoder_digest, model_encoder
from jobs.stages.chunk import chunk_sources, read_and_chunk
from jobs.stages.embed import EmbedActor, EmbedSettings
from jobs.stages.read import read_sources


@contextmanager
def counting_collections():
    """Collections started inside the block (a list that fills as they run), with the collector
    made eager: one young collection per 10 net allocations."""
    started: list[int] = []

    def count(phase, info):
        if phase == "start":
            started.append(info["generation"])

    thresholds = gc.get_threshold()
    gc.set_threshold(10, 2, 2)
    gc.callbacks.append(count)
    try:
        yield started
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*thresholds)


def test_a_chunk_task_and_an_embedding_call_run_with_the_collector_paused(tmp_path):
    """Only the collection that the work's end lets run (and what it cascades into) is seen,
    against dozens when the same work runs unpaused."""
    encoder = model_encoder("minilm")
    inputs = chunk_task_inputs(
        tmp_path, encoder.to_str(), {"min_tokens": 20, "max_tokens": 60, "tokenizer": "minilm"}
    )
    with counting_collections() as paused_chunking:
        batch = read_and_chunk(**inputs)
    with counting_collections() as chunking:
        chunk_sources(
            read_sources(inputs["batch"], inputs["source"])[0], inputs["settings"], inputs["output"]
        )
    assert batch.column("document").null_count == 0  # it did chunk and parse them

    settings = EmbedSettings(
        "minilm",
        {"dtype": "fp32", "device": "cpu"},
        None,
        strategy_key="s",
        encoder_digest=encoder_digest(encoder),
    )
    actor = EmbedActor(settings)
    with counting_collections() as paused_embedding:
        embedded = actor(batch)
    actor.remembered = Remembered()  # the same texts embedded again, not recalled
    with counting_collections() as embedding:
        actor.embed(batch)
    assert embedded.column("vectors").null_count == 0
    # measured: 2 against 45 chunking, 4 against 164 embedding
    assert len(paused_chunking) <= 8 < 20 < len(chunking)
    assert len(paused_embedding) <= 8 < 20 < len(embedding)
