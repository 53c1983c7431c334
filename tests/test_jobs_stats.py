"""Stage records that add up, the progress line, the embedding pool's sizing and size batches."""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from dataclasses import replace

import numpy as np
import pytest
import ray

from embedding.batching import padding_waste, plan_batches
from embedding.keys import DEFAULT_TOKEN_BUDGET
from jobs.config import EmbedResources, IndexResources, JobConfig, ResourcesConfig, TaskResources
from jobs.on_ray import StatsCollector
from jobs.progress import (
    CollectorHandle,
    Goal,
    Heartbeat,
    embedding_progress,
    progress_line,
    report_stats,
)
from jobs.records import SOURCE, entry_to_json, new_row, to_table
from jobs.resources import (
    ACTOR_SOURCE_BYTES,
    GPU_CALL_BYTES,
    actor_stage_args,
    call_rows,
    embed_pool,
    infeasible,
)
from jobs.stages.store import store_entries
from jobs.stats import (
    NAMED,
    SLOWEST,
    ChunkStats,
    EmbedStats,
    Histogram,
    IndexStats,
    Names,
    Paths,
    ReadStats,
    RunStats,
    SharedClock,
    Slowest,
    StoreStats,
    Window,
)
from jobs.work import aligned_rows, embedding_batches, pack_batches, prepare_work


def test_records_add_field_by_field_and_nest():
    one = RunStats(chunk=ChunkStats(sources=2, bytes=100, chunks=5, seconds=0.5))
    two = RunStats(chunk=ChunkStats(sources=1, bytes=50, chunks=2, seconds=0.25))
    total = one + two + RunStats(embed=EmbedStats(embedded=6, cache_hits=1))
    assert total.chunk == ChunkStats(sources=3, bytes=150, chunks=7, seconds=0.75)
    assert total.embed.embedded == 6 and total.index == IndexStats()
    keys = [EmbedStats(model_keys=Names((k,))) for k in ("m-cuda-b8192", "m-cpu", "m-cuda-b8192")]
    assert sum(keys, EmbedStats()).to_dict()["model_keys"] == ["m-cpu", "m-cuda-b8192"]
    assert total.to_dict()["chunk"] == {
        "sources": 3,
        "bytes": 150,
        "chunks": 7,
        "failed": 0,
        "skipped_tail": 0,
        "skipped_tokens": 0,
        "skipped_drafts": 0,
        "empty": {"count": 0, "first": []},
        "files": 0,
        "seconds": 0.75,
        "tokens": {"bucket": 10, "buckets": [], "min": None, "max": None, "count": 0},
        "slowest": [],
        "cpu_seconds": 0.0,
        "window": {"start": None, "end": None},
    }


def test_token_histograms_and_slowest_sources_merge_like_counters():
    one = ChunkStats(
        tokens=Histogram.of([5, 12, 19]),
        slowest=Slowest(tuple((s, f"a{s}.md", 10, 1) for s in range(SLOWEST))),
    )
    two = ChunkStats(tokens=Histogram.of([250, 3]), slowest=Slowest(((7.5, "b.md", 99, 4),)))
    total = (one + two).to_dict()
    assert total["tokens"] == {
        "bucket": 10,
        "buckets": [[0, 2], [10, 2], [250, 1]],
        "min": 3,
        "max": 250,
        "count": 5,
    }
    slowest = total["slowest"]
    assert len(slowest) == SLOWEST and slowest[0]["seconds"] == SLOWEST - 1
    assert {"path": "b.md", "seconds": 7.5, "bytes": 99, "chunks": 4} in slowest
    assert slowest[-1]["path"] == "a1.md"  # a0.md, the fastest, fell off
    assert Histogram() + Histogram.of([]) == Histogram()  # empty: no min or max


def test_paths_keep_their_count_and_the_first_in_path_order_whatever_the_batches():
    names = [f"t/{i:03d}.md" for i in range(NAMED + 5)]
    one, two = Paths.of(names[1::2]), Paths.of(names[::2])
    assert (one + two) == (two + one) == Paths(NAMED + 5, tuple(names[:NAMED]))
    assert Paths() + Paths.of([]) == Paths()


def test_a_source_that_cannot_be_read_is_done_for_the_progress_line():
    """A READ_FAILED source reached no chunk stage: the line stayed at 9/10 sources and its ETA
    grew with the time elapsed once everything else was done."""
    stats = RunStats(
        read=ReadStats(failed=1, failed_sources=1, failed_source_bytes=200_000),
        chunk=ChunkStats(sources=9, bytes=1_800_000, chunks=90, window=Window(0.0, 5.0)),
        embed=EmbedStats(embedded=90, window=Window(4.0, 9.0)),
        index=IndexStats(topics=4, window=Window(8.0, 10.0)),
    )
    for now in (60.0, 600.0):
        line = progress_line(stats, Goal(sources=10, bytes=2_000_000, topics=4), now)
        assert line.startswith("10/10 sources done, 1 failed (2.0 of 2.0 MB"), line
        assert line.endswith("ETA 0 s")


def test_progress_line_names_every_counter_and_an_eta():
    stats = RunStats(
        chunk=ChunkStats(sources=50, bytes=1_000_000, chunks=100, window=Window(100.0, 110.0)),
        embed=EmbedStats(embedded=40, cache_hits=10, window=Window(105.0, 110.0)),
        index=IndexStats(topics=1, window=Window(108.0, 110.0)),
    )
    line = progress_line(stats, Goal(sources=100, bytes=2_000_000, topics=4), now=110.0)
    assert line.startswith("50/100 sources done, 0 failed (1.0 of 2.0 MB, 0.10 MB/s)")
    assert "40 chunks embedded, 10 from cache" in line and "1/4 topics written" in line
    # chunking needs 10 s more; embedding has done 50 of an expected 200 chunks in its 5 s: 15 s
    # more; the reduce wrote 1 topic of 4 in its 2 s: 6 s more. The slowest stage's is the ETA.
    assert line.endswith("ETA 15 s")
    assert "ETA" not in progress_line(RunStats(), Goal(1, 1, 1), now=1.0)
    # every source chunked, no batch embedded yet: no pace to go by, so no ETA (it said "ETA 0 s")
    chunked = RunStats(
        chunk=ChunkStats(sources=100, bytes=2_000_000, chunks=200, window=Window(0.0, 9.0))
    )
    assert "ETA" not in progress_line(chunked, Goal(100, 2_000_000, 4), now=10.0)
    # half chunked in 8 s, 2 s ago, nothing embedded yet (an actor loading its model): chunking's
    # wait, and the line says that is all it counts
    half = RunStats(chunk=ChunkStats(sources=50, bytes=1_000_000, chunks=100, window=Window(0, 8)))
    line = progress_line(half, Goal(100, 2_000_000, 4), now=10.0)
    assert line.endswith("ETA 6 s for chunking alone")


def test_progress_eta_goes_by_each_stages_own_pace():
    """The ETA was the time elapsed since the build began times the work left over the work done:
    an embed stage that began late (after Ray's start, the actors' model load and the first
    chunks) was judged by all that time (56 chunks embedded 16 s into a 40 s build: "ETA 160 s",
    392 s at 38 s), and once every chunk was embedded the line said "ETA 0 s" while topics were
    still being written."""
    goal = Goal(sources=100, bytes=2_000_000, topics=4)
    chunked = ChunkStats(sources=100, bytes=2_000_000, chunks=600, window=Window(1000.0, 1010.0))
    # the actors began embedding at 1014 s: 56 of 600 chunks in 2 s
    early = RunStats(chunk=chunked, embed=EmbedStats(embedded=56, window=Window(1014.0, 1016.0)))
    assert progress_line(early, goal, now=1016.0).endswith("ETA 19 s")
    # every chunk embedded, 1 topic of 4 written in the reduce's 10 s: 30 s more, not 0
    embedded = EmbedStats(embedded=600, window=Window(1014.0, 1030.0))
    writing = RunStats(
        chunk=chunked, embed=embedded, index=IndexStats(topics=1, window=Window(1025.0, 1035.0))
    )
    assert progress_line(writing, goal, now=1035.0).endswith("ETA 30 s")
    # chunks still being embedded: a topic is written once its every chunk is, so the topics'
    # pace so far (1 of 4 in 10 s) is the embedding's order, and the wait is the embedding's
    embedding = EmbedStats(embedded=500, window=Window(1014.0, 1030.0))
    waiting = RunStats(
        chunk=chunked, embed=embedding, index=IndexStats(topics=1, window=Window(1020.0, 1030.0))
    )
    assert progress_line(waiting, goal, now=1030.0).endswith("ETA 3 s")
    # no topic written yet: nothing to go by
    assert "ETA" not in progress_line(RunStats(chunk=chunked, embed=embedded), goal, now=1035.0)


def test_the_heartbeat_counts_the_builds_seconds_when_its_status_answers(caplog):
    """ "progress after N s" counted from the heartbeat's start, the pipeline's (Ray's start and
    the plan before it: 26 s of a 73 s tldr-en build), not the build's, which its report's
    `started_at` names; and N was read before the status, which a collector still starting held
    for 10 s ("after 1 s" logged after 11)."""
    answered = threading.Event()

    def slow_status() -> str:
        time.sleep(0.5)
        answered.set()
        return "1/2 sources done"

    with caplog.at_level(logging.INFO, logger="mdindex.build"):
        with Heartbeat(slow_status, 0.01, began=time.time() - 100):
            assert answered.wait(10)
    seconds = [int(n) for n in re.findall(r"progress after (\d+) s: 1/2 sources done", caplog.text)]
    assert seconds and 101 <= seconds[0] < 110, caplog.text  # 100 s, then 0.5 s for the status


def test_progress_eta_counts_down_between_a_stages_counts():
    """A stage counts a call at a time: a chunk task's batch (tldr-en: 8 of about 930 sources),
    a topic. The pace was over the time from the stage's start to now, so between two counts
    the ETA grew as if the stage had slowed: "ETA 29 s, 36 s, 43 s" with 22 to 20 s left while
    a batch was chunked, and 9 to 27 s with 5 to 2 s left while tldr-en's largest topic was
    written. Then it held from one count to the next, each count's time left: tldr-all's 8
    batches kept its chunking's at 19 s from a count to 1 s before the last batch was done. The
    pace is over the stage's window, up to its last count, and the time since is counted down."""
    goal = Goal(sources=100, bytes=2_000_000, topics=11)
    first = ChunkStats(sources=13, bytes=250_000, chunks=40, window=Window(1000.0, 1003.0))
    for now, eta in ((1003.0, 21), (1004.0, 20), (1007.0, 17), (1030.0, 0)):  # 1.75 MB left
        line = progress_line(RunStats(chunk=first), goal, now)  # at 0.25 MB in 3 s
        assert line.endswith(f"ETA {eta} s for chunking alone"), now
    chunked = replace(first, sources=100, bytes=2_000_000, chunks=300)
    embedded = EmbedStats(embedded=300, window=Window(1010.0, 1020.0))
    two = IndexStats(topics=2, window=Window(1018.0, 1020.0))  # 2 of 11 topics in 2 s
    stats = RunStats(chunk=chunked, embed=embedded, index=two)
    assert progress_line(stats, goal, now=1024.0).endswith("ETA 5 s")  # 9 s at 1020


def test_progress_eta_counts_the_last_batchs_way_through_the_stages_after_chunking():
    """The ETA was the slower of chunking's and embedding's time left: with chunking the slower
    (the stand-in model, or a GPU), it left out that the last chunk batch is then embedded, its
    cache entries written and its topics reduced: tldr-all (8 batches, 2 CPUs) said 34 s with
    45 s to go, 14 s of them after the last batch was chunked."""
    goal = Goal(sources=100, bytes=8_000_000, topics=40, batches=8)
    stats = RunStats(
        chunk=ChunkStats(sources=50, bytes=4_000_000, chunks=400, window=Window(1000.0, 1020.0)),
        embed=EmbedStats(
            documents=40, chunks=320, embedded=320, seconds=3.2, window=Window(1010.0, 1020.0)
        ),
        store=StoreStats(chunks=200, seconds=1.0),
        index=IndexStats(topics=10, seconds=3.0, window=Window(1015.0, 1020.0)),
    )
    # chunking 20 s more; the last batch's 12.5 sources at 80 ms each to embed (1 s), its 100
    # chunks at 5 ms each to store (0.5 s), its 5 topics at 0.3 s each (1.5 s)
    assert progress_line(stats, goal, now=1020.0).endswith("ETA 23 s")


def test_progress_eta_of_the_last_topics_is_their_own_work_not_the_embeddings_pace():
    """Once every chunk is embedded, the topics left went at the pace the reduce had while it
    waited for the embedding: tldr-all said "ETA 46 s" for its last 180 topics, written in 5 s.
    Their busy seconds so far bound it."""
    goal = Goal(sources=100, bytes=2_000_000, topics=11)
    chunked = ChunkStats(sources=100, bytes=2_000_000, chunks=300, window=Window(1000.0, 1010.0))
    embedded = EmbedStats(embedded=300, window=Window(1002.0, 1020.0))
    waited = IndexStats(topics=2, seconds=0.4, window=Window(1000.0, 1020.0))
    stats = RunStats(chunk=chunked, embed=embedded, index=waited)
    assert progress_line(stats, goal, now=1020.0).endswith("ETA 2 s")  # 9 topics at 0.2 s each


def test_progress_mb_per_second_are_over_the_chunk_tasks_window_not_the_time_elapsed():
    """Every source chunked in the first 10 s, then minutes of embedding: the line's MB/s fell
    with the time elapsed (0.05 MB/s at 5 s, 0.03 at 9 s on 502 tldr pages), towards zero."""
    read = ReadStats(bytes=2_000_000, window=Window(1000.0, 1009.0))
    chunk = ChunkStats(sources=100, bytes=2_000_000, chunks=200, window=Window(1000.5, 1010.0))
    stats = RunStats(read=read, chunk=chunk, embed=EmbedStats(embedded=20))
    for now in (1015.0, 1600.0):
        line = progress_line(stats, Goal(100, 2_000_000, 4), now)
        assert line.startswith("100/100 sources done, 0 failed (2.0 of 2.0 MB, 0.20 MB/s)"), line
    assert "0.00 MB/s" in progress_line(RunStats(), Goal(100, 2_000_000, 4), now=5.0)


def test_cpu_pool_sizes_itself_to_the_machine_and_gpu_pools_to_the_gpus():
    two = embed_pool(EmbedResources(), 2, batches=8)
    assert (two.actors, two.threads, two.num_cpus, two.num_gpus) == (2, 1, 0.0, 0.0)
    sixteen = embed_pool(EmbedResources(), 16, batches=64)
    assert (sixteen.actors, sixteen.threads, sixteen.num_cpus) == (8, 2, 0.0)
    # no idle actor loading a model: fewer batches, fewer actors, whose threads share the CPUs
    few = embed_pool(EmbedResources(), 16, batches=3)
    assert (few.actors, few.threads) == (3, 5)
    tiny = embed_pool(EmbedResources(), 2, batches=1)
    assert (tiny.actors, tiny.threads) == (1, 2)
    # actors that reserve CPUs leave one to the chunk tasks (two of one CPU on 2 CPUs left them
    # none: the build waited for ever)
    reserving = embed_pool(EmbedResources(num_cpus=1), 2, batches=8)
    assert (reserving.actors, reserving.threads, reserving.num_cpus) == (1, 1, 1)
    assert embed_pool(EmbedResources(num_cpus=2), 16, batches=8).actors == 7
    explicit = embed_pool(EmbedResources(actors=2, num_cpus=0.5), 16, batches=1)
    assert (explicit.actors, explicit.threads, explicit.num_cpus) == (2, 1, 0.5)
    # a set actor count shares the CPUs between its actors' threads (its largest, if it scales)
    one = embed_pool(EmbedResources(actors=1), 2, batches=8)
    assert (one.actors, one.threads, one.num_cpus) == (1, 2, 0.0)
    assert embed_pool(EmbedResources(actors=3), 16, batches=1).threads == 5
    assert embed_pool(EmbedResources(actors=1, max_actors=4), 16, batches=8).threads == 4
    assert embed_pool(EmbedResources(actors=4), 2, batches=8).threads == 1
    gpu = embed_pool(EmbedResources(num_gpus=1, max_actors=4), 64, batches=1)
    assert (gpu.actors, gpu.max_actors, gpu.num_cpus, gpu.num_gpus) == (1, 4, 1.0, 1)
    assert gpu.label() == "1-4 actors × 1 torch thread, 1 GPU each"
    assert two.label() == "2 actors × 1 torch thread, on CPU"


def test_a_cpu_pool_starts_an_actor_beyond_the_first_only_for_400_kb_of_sources_each():
    """Each CPU actor imports torch and transformers and loads the model (about 5 CPU-seconds with
    MiniLM), so a small build's pool is one actor with the CPUs' threads (`ACTOR_SOURCE_BYTES`):
    a docs site of 100 kB or a 1% edit of tldr-en (several batches: two actors before)."""

    def pool(cpus, source_bytes, batches=64, **config):
        made = embed_pool(EmbedResources(**config), cpus, batches, source_bytes=source_bytes)
        return made.actors, made.threads

    assert ACTOR_SOURCE_BYTES == 400_000
    assert pool(2, 0) == (1, 2)  # questions alone (qa-pairs.md)
    assert pool(2, 399_999) == (1, 2)
    assert pool(2, 400_000) == (2, 1)
    assert pool(2, 5_000_000) == (2, 1)  # the CPUs' bound
    assert pool(16, 1_000_000) == (3, 5)
    assert pool(16, 1_000_000, batches=2) == (2, 8)  # the batches' bound
    assert pool(2, 100_000, actors=2) == (2, 1)  # a set count wins
    assert pool(16, 100_000, max_actors=4) == (1, 4)  # room to grow: threads for four
    gpu = embed_pool(EmbedResources(num_gpus=1), 16, 64, (4,), source_bytes=100_000)
    assert gpu.actors == 4  # a GPU pool fills the GPUs present (a GPU embeds 400 kB in a blink)


def test_a_gpu_pool_whose_actor_count_is_null_fills_the_gpus_present_at_the_start():
    """`num_gpus: 0.25` on one GPU: four actors share it (measured on an H200: 1.9x one actor's
    chunks/s for MiniLM on all of tldr), within max_actors, the batches and the CPUs."""

    def actors(num_gpus, gpus, cpus=16, batches=64, **config):
        resources = EmbedResources(num_gpus=num_gpus, **config)
        return embed_pool(resources, cpus, batches, gpus).actors

    assert actors(0.25, gpus=(1,)) == 4
    assert actors(1, gpus=(8,), cpus=64) == 8  # one per GPU of an 8-GPU node, not one in all
    assert actors(0.1, gpus=(3,), cpus=64) == 30  # 1 / 0.1 is 9.999... in floats
    assert actors(1, gpus=()) == 1  # an autoscaling cluster without a GPU node yet
    assert actors(0.25, gpus=(1,), max_actors=2) == 2  # it may grow to max_actors, not beyond
    assert actors(0.25, gpus=(1,), batches=3) == 3  # no actor without a batch to embed
    assert actors(0.5, gpus=(1,), cpus=2) == 1  # one CPU left to the chunk tasks
    assert actors(0.5, gpus=(1,), cpus=2, num_cpus=0.5) == 2
    assert actors(0.25, gpus=(1,), actors=1) == 1  # a set count wins
    # A share must fit on one GPU: two GPUs at 0.4 hold four actors, not the five the total
    # held (the fifth waited for a GPU for the whole build, an autoscaler's demand for one more)
    assert actors(0.4, gpus=(1, 1), cpus=64) == 4
    assert actors(0.75, gpus=(4,), cpus=64) == 4
    assert actors(0.6, gpus=(8,), cpus=64) == 8


def test_a_gpu_pool_whose_actor_count_is_null_grows_as_gpu_nodes_join_a_cluster_that_grows():
    """A cluster whose GPU workers scale from zero has no GPU at the start: the pool was one fixed
    actor, so Ray Data asked for no second GPU node and the whole build ran on one GPU. It now
    starts what the GPUs present hold (at least one) and autoscales up to one actor per
    embedding call, or to max_actors; a local instance, which never grows, keeps it fixed."""

    def pool(gpus, batches=64, cpus=2, grows=True, **config):
        resources = EmbedResources(num_gpus=config.pop("num_gpus", 1), **config)
        return embed_pool(resources, cpus, batches, gpus, grows)

    def sizes(pool):
        compute = actor_stage_args(pool, 64, 3)["compute"]
        return compute.min_size, compute.max_size

    none_yet = pool(gpus=())  # the head alone: 2 CPUs, no GPU
    assert (none_yet.actors, none_yet.max_actors) == (1, 64) and sizes(none_yet) == (1, 64)
    assert none_yet.label() == "1-64 actors × 1 torch thread, 1 GPU each"
    # the GPUs present fill at once (the CPUs present bound only that), the rest as nodes join
    assert sizes(pool(gpus=(0, 1), cpus=16, num_gpus=0.25)) == (4, 64)
    assert sizes(pool(gpus=(1,), batches=10)) == (1, 10)  # no actor without a call to run
    assert sizes(pool(gpus=(), max_actors=8)) == (1, 8)  # max_actors caps the GPUs it takes
    assert sizes(pool(gpus=(), batches=1)) == (1, 1)  # one call: one actor
    assert sizes(pool(gpus=(), actors=2)) == (2, 2)  # a set count, max_actors null: fixed
    assert sizes(pool(gpus=(), actors=2, max_actors=6)) == (2, 6)
    assert sizes(pool(gpus=(), grows=False)) == (1, 1)  # a local instance never grows
    assert sizes(pool(gpus=(), num_gpus=0)) == (2, 2)  # CPU pools as before: one per CPU
    assert pool(gpus=(), num_gpus=0) == pool(gpus=(), num_gpus=0, grows=False)


def _work(embed: EmbedResources, sources: int, size: int, batch_mb: float | None = None):
    """`prepare_work` of one topic's `sources` of `size` listed bytes on 16 CPUs."""
    config = JobConfig(
        resources=ResourcesConfig(chunk=TaskResources(batch_mb=batch_mb), embed=embed)
    )
    rows = [new_row("t", SOURCE, f"p{i}", size=size) for i in range(sources)]
    return prepare_work(config, rows, cpus=16)


def test_a_gpu_pool_starts_no_actor_for_which_there_is_no_gpu_call():
    """A small edit on one GPU shared four ways: its sources fit one GPU call, so one actor (each
    would load the model and capture its graphs), though its rows took three chunk tasks."""
    shared = EmbedResources(num_gpus=0.25)
    edit = _work(shared, 100, 580, batch_mb=0.02)
    assert len(edit.batches) == 3 and embedding_batches(edit) == 1
    assert embed_pool(shared, 16, embedding_batches(edit), (1,)).actors == 1
    assert embedding_batches(_work(EmbedResources(), 100, 580, 0.02)) == 3  # CPUs: one per task
    assert embedding_batches(_work(EmbedResources(batch_size=50), 100, 580, 0.02)) == 2  # by 50
    assert embedding_batches(_work(EmbedResources(batch_size=1), 100, 580, 0.02)) == 3  # no split
    corpus = _work(shared, 2000, 10_000)
    assert embedding_batches(corpus) == 10  # 2 MB of sources per GPU call
    assert embed_pool(shared, 16, embedding_batches(corpus), (1,)).actors == 4


def test_chunk_tasks_and_embedding_calls_get_row_counts_that_divide_one_another():
    """Ray Data joins chunk tasks' blocks into calls of exactly the batch size and leaves a short
    call wherever the two do not divide: each call is whole blocks, or each block whole calls."""
    assert aligned_rows(600, 4197) == (600, 4200)  # 7 blocks a call
    assert aligned_rows(600, 64) == (576, 64)  # 9 calls a block
    assert aligned_rows(100, 1) == (100, 1)
    assert aligned_rows(10, 10) == (10, 10)
    assert aligned_rows(3, 3449) == (3, 3450)
    for block, call in [(430, 3449), (9000, 3449), (35, 50), (7, 1000), (1000, 7)]:
        rows, calls = aligned_rows(block, call)
        assert max(rows, calls) % min(rows, calls) == 0
        assert 0.5 <= rows / block <= 2 and call <= calls < 2 * call
    work = _work(EmbedResources(num_gpus=1), 10_000, 580, batch_mb=0.25)
    sizes = [batch.num_rows for batch in work.batches]
    assert set(sizes[:-1]) == {sizes[0]} and work.call_rows % sizes[0] == 0
    assert sum(sizes) == 10_000  # every source, none lost or repeated


def test_a_stage_that_no_node_can_hold_is_named_with_what_one_task_or_actor_asks_for():
    gpu = ResourcesConfig(embed=EmbedResources(actors=2, num_cpus=2, num_gpus=0.5))
    actor = "an embedding actor (resources.embed) asks for 2 CPUs and 0.5 GPU"
    assert infeasible(gpu, [{"CPU": 2.0}]) == [actor]
    assert infeasible(gpu, [{"CPU": 5.0, "GPU": 1.0}]) == []
    assert infeasible(gpu, [{"CPU": 16.0}, {"CPU": 8.0, "GPU": 1.0}]) == []  # on the GPU node
    assert infeasible(gpu, [{"CPU": 1.0, "GPU": 8.0}, {"CPU": 64.0}]) == [actor]  # on neither
    assert infeasible(ResourcesConfig(), [{"CPU": 1.0}]) == []  # a CPU actor reserves no CPU
    big = ResourcesConfig(index=IndexResources(num_cpus=4))
    reduce = "a topic's reduce (resources.index) asks for 4 CPUs and no GPU"
    assert infeasible(big, [{"CPU": 2.0, "GPU": 1.0}]) == [reduce]
    assert infeasible(big, [{"CPU": 2.0}, {"CPU": 4.0}]) == []
    # A pass with nothing to embed (every changed topic's sources carried) starts no actor: the
    # GPU no node has yet is no wait, nor the CPUs its actors would hold (the node watch counted
    # it, and a long such pass on a cluster whose GPU nodes scale to zero failed NodeWaitTooLong).
    assert infeasible(gpu, [{"CPU": 2.0}], embeds=False) == []
    assert infeasible(replace(gpu, index=big.index), [{"CPU": 2.0}], embeds=False) == [reduce]
    crowded = ResourcesConfig(embed=EmbedResources(actors=2, num_cpus=1))
    assert infeasible(crowded, [{"CPU": 2.0}], embeds=False) == []


def test_embedding_actors_that_hold_every_cpu_a_chunk_task_could_take_are_named():
    """Two actors of one CPU on 2 CPUs (or `configs/cluster-gpu.yaml`'s two of 2 CPUs beside a
    GPU on a 2-CPU machine) each fit, but together held every CPU for the whole build: the chunk
    tasks and reduces waited for ever, "0/6 sources done" every 30 s."""
    crowded = ResourcesConfig(embed=EmbedResources(actors=2, num_cpus=1))
    assert infeasible(crowded, [{"CPU": 2.0}]) == [
        "2 embedding actors (resources.embed) hold 1 CPU each for the whole build, leaving no "
        "node the 1 CPU of a read-and-chunk task (resources.chunk) or the 1 CPU of a topic's "
        "reduce (resources.index)"
    ]
    assert infeasible(crowded, [{"CPU": 3.0}]) == []
    assert infeasible(crowded, [{"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 1.0}]) == []  # the third
    whole = ResourcesConfig(embed=EmbedResources(num_cpus=2))  # the one actor it sizes to
    assert infeasible(whole, [{"CPU": 2.0}]) == [
        "an embedding actor (resources.embed) holds 2 CPUs for the whole build, leaving no node "
        "the 1 CPU of a read-and-chunk task (resources.chunk) or the 1 CPU of a topic's reduce "
        "(resources.index)"
    ]
    big_reduce = replace(crowded, index=IndexResources(num_cpus=2))
    assert infeasible(big_reduce, [{"CPU": 3.0}]) == [
        "2 embedding actors (resources.embed) hold 1 CPU each for the whole build, leaving no "
        "node the 2 CPUs of a topic's reduce (resources.index)"
    ]
    gpu = ResourcesConfig(embed=EmbedResources(actors=2, num_cpus=2, num_gpus=0.5))
    assert (
        "leaving no node the 1 CPU of a read-and-chunk task"
        in infeasible(gpu, [{"CPU": 2.0, "GPU": 1.0}])[0]
    )


def test_a_gpu_pool_embeds_calls_of_sources_that_fill_its_fixed_shape_micro_batches():
    """On GPUs each micro-batch is filled to its full row count. A call of one small chunk task
    (430 tldr pages: ~560 chunks over 16 length buckets) computed about half filler (measured on an
    H100); a GPU call now holds GPU_CALL_BYTES of sources unless the config sets a batch size."""
    gpu, cpu = EmbedResources(num_gpus=1), EmbedResources()
    pages = math.ceil(GPU_CALL_BYTES / 580)  # tldr pages: 580 bytes on average
    assert call_rows(gpu, 580) == pages
    assert call_rows(cpu, 580) is None  # one call per chunk task
    assert call_rows(EmbedResources(num_gpus=1, batch_size=64), 580) == 64
    budget = DEFAULT_TOKEN_BUDGET["cuda"]
    one_task = [16 + (i * 37) % 241 for i in range(560)]  # chunk lengths in tokens
    call = [16 + (i * 37) % 241 for i in range(round(pages * 1.3))]  # 1.3 chunks a page
    assert padding_waste(one_task, plan_batches(one_task, budget, 256), full_rows=budget) > 0.4
    assert padding_waste(call, plan_batches(call, budget, 256), full_rows=budget) < 0.15


def test_batches_are_packed_by_listed_size_in_order():
    rows = [new_row("t", SOURCE, f"t/{i}.md", size=size) for i, size in enumerate([5, 5, 30, 1, 1])]
    batches = pack_batches(rows, target_bytes=10)
    assert [[r["path"] for r in batch] for batch in batches] == [
        ["t/0.md", "t/1.md"],
        ["t/2.md"],
        ["t/3.md", "t/4.md"],
    ]
    assert pack_batches([], 10) == []


def test_overlapping_calls_count_their_busy_time_once_and_idle_time_never():
    """An embedding actor runs two batches at once: one nested in the other, then one
    overlapping the other's end, then one after an idle gap."""
    clock = SharedClock()
    begin = time.perf_counter()
    clock.start()  # a
    time.sleep(0.03)
    clock.start()  # b, inside a
    time.sleep(0.03)
    b = clock.spent()
    clock.start()  # c, overlapping a's end
    time.sleep(0.03)
    a = clock.spent()
    time.sleep(0.03)
    c = clock.spent()
    busy = time.perf_counter() - begin
    # Bounds, not equalities: `busy` is read just outside the clock's own readings, and a
    # deschedule or a GC pause in between (under load) made the two differ by more than 5 ms.
    # The spell holds the four sleeps (at least 0.12 s) and lies within `busy`; busy time
    # counted twice (each call's own duration: 0.09 + 0.03 + 0.06) would exceed the spell by
    # the two 0.03 s overlaps, far past the slack over `busy`.
    window = a["window"] + b["window"] + c["window"]  # the three calls' span, once
    assert window.seconds is not None and 0.119 < window.seconds < busy + 0.005
    total = a["seconds"] + b["seconds"] + c["seconds"]
    assert 0.119 < total < busy + 0.005
    assert a["cpu_seconds"] + b["cpu_seconds"] + c["cpu_seconds"] >= 0
    time.sleep(0.2)  # idle: no call running
    clock.start()
    assert clock.spent()["seconds"] < 0.1


def test_windows_add_to_the_earliest_start_and_latest_end():
    early, late = Window(10.0, 12.0), Window(11.0, 15.5)
    assert early + late == late + early == Window(10.0, 15.5)
    assert (early + late).seconds == 5.5
    assert Window() + early == early and (Window() + Window()).seconds is None
    # nested in a stage record, the window merges with the rest of the counters
    one = EmbedStats(chunks=3, seconds=1.0, window=Window(10.0, 11.0))
    two = EmbedStats(chunks=4, seconds=2.0, window=Window(20.0, 22.0))
    assert (one + two).window == Window(10.0, 22.0) and (one + two).seconds == 3.0
    assert (one + two).to_dict()["window"] == {"start": 10.0, "end": 22.0}


@pytest.mark.usefixtures("ray_session")
def test_a_cache_entry_two_rows_carry_is_written_and_counted_once(tmp_path):
    """Rows of the same bytes (a copied page, every empty file) carry the same entry: written
    once, it was counted once for each row in the report's store counters."""
    entry = entry_to_json(("semantic-250-750", "model", "ab" * 32), ["a" * 64, "b" * 64], [])
    vectors = np.arange(8, dtype="<f4").tobytes()
    rows = [
        new_row("t", SOURCE, path, cache_entry=entry, vectors=vectors, dim=4)
        for path in ("t/a.md", "u/copy.md")
    ]
    collector = CollectorHandle(StatsCollector.remote())
    store_entries(to_table(rows), cache_uri=str(tmp_path), storage_options={}, collector=collector)
    store = ray.get(collector.actor.total.remote()).store
    assert (store.entries, store.chunks, store.failures) == (1, 2, 0)
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == [
        "chunk-0.bin",
        "chunk-1.bin",
        "metadata.json",
    ]


def test_a_long_embedding_call_is_counted_as_it_goes(ray_session):
    """An embedding call on a CPU can take minutes (one 400 KB source: 900 chunks in one call,
    45 s with MiniLM): the line said "0 chunks embedded", with no ETA, until it ended. The call
    tells the run's collector what it has embedded as it goes; its own record replaces that."""
    collector = CollectorHandle(StatsCollector.remote())
    goal = Goal(sources=1, bytes=1_000, topics=1)
    chunked = RunStats(chunk=ChunkStats(sources=1, bytes=1_000, chunks=100, window=Window(0, 1)))
    report_stats(collector, chunked)
    # a call that ended 10 s ago, begun 20 s ago, embedded 50 chunks
    began = time.time()
    done = Window(began - 20, began - 10)
    report_stats(collector, RunStats(embed=EmbedStats(embedded=50, window=done)), "done")
    progress = embedding_progress(collector, "call", every=0)
    progress.embedded(15)
    progress.embedded(10)
    running = ray.get(collector.actor.progress.remote())
    assert (
        running.embed.embedded == 75
        and ray.get(collector.actor.total.remote()).embed.embedded == 50
    )
    # 75 of 100 chunks in the 20 s (and the moments) up to the running call's last word: about
    # 7 s more. Its record had no end: the stage's window ended with the finished call's, 10 s
    # before the count it held (75 in 10 s: "ETA 3 s")
    line = progress_line(running, goal, time.time())
    eta = re.search(r"ETA (\d+) s$", line)
    assert "75 chunks embedded" in line and eta and 6 <= int(eta[1]) <= 8, line
    report_stats(collector, RunStats(embed=EmbedStats(embedded=50)), "call")
    assert ray.get(collector.actor.progress.remote()).embed.embedded == 100
    progress.embedded(5)  # the call tried again after it reported (its worker died): counted
    assert ray.get(collector.actor.progress.remote()).embed.embedded == 100
    quiet = embedding_progress(collector, "another call")  # told every few seconds, not yet
    quiet.embedded(7)
    assert ray.get(collector.actor.progress.remote()).embed.embedded == 100
    ray.kill(collector.actor)


def test_a_running_calls_cache_hits_are_told_at_once_without_a_pace(ray_session):
    """A call found its cache hits in a moment and told them only when it returned: "0 from
    cache" all the while it embedded the rest. It tells them (and its chunks) at once, with no
    window: its lookups are no pace for its misses."""
    collector = CollectorHandle(StatsCollector.remote())
    progress = embedding_progress(collector, "call")  # its embedded counts every few seconds
    progress.found(450, 500)
    running = ray.get(collector.actor.progress.remote()).embed
    assert (running.chunks, running.cache_hits, running.embedded) == (500, 450, 0)
    assert running.window == Window()
    progress.embedded(10)  # not yet told
    assert ray.get(collector.actor.progress.remote()).embed.embedded == 0
    report_stats(collector, RunStats(embed=EmbedStats(chunks=500, cache_hits=450)), "call")
    assert ray.get(collector.actor.progress.remote()).embed.cache_hits == 450  # counted once
    ray.kill(collector.actor)


def test_a_running_calls_pace_starts_once_its_actors_model_has_loaded(ray_session):
    """On a CPU an actor loads its model at its first miss, inside a call: the call's first word
    counted that wait as its time (tldr mostly from the cache: "15 chunks embedded; ETA 299 s"
    with 20 s to go). Its window starts at the load's end, as its own record's does."""
    collector = CollectorHandle(StatsCollector.remote())
    began = time.time()
    loaded = began + 3.0  # the model loaded 3 s into the call
    waited = embedding_progress(collector, "waited", every=0, loaded=lambda: loaded)
    waited.embedded(15)
    assert ray.get(collector.actor.progress.remote()).embed.window.start == loaded
    ray.kill(collector.actor)
    collector = CollectorHandle(StatsCollector.remote())
    ready = embedding_progress(collector, "ready", every=0, loaded=lambda: began - 60.0)
    ready.embedded(5)  # its model loaded a minute before: from the call's start
    assert began <= ray.get(collector.actor.progress.remote()).embed.window.start < loaded
    ray.kill(collector.actor)


def test_progress_eta_of_a_run_mostly_from_the_cache_goes_by_its_misses():
    """A re-run mostly from the cache (its output deleted, the cache kept; tldr, 1 page in 7
    edited) finds most chunks in the cache in its first seconds, then embeds the rest: by the
    pace of all its chunks the ETA was 0 s for the 12 s its misses took. The misses expected
    (the share of the chunks looked up that missed) go at the pace they are embedded."""
    goal = Goal(sources=100, bytes=1_000_000, topics=1)
    chunked = ChunkStats(sources=100, bytes=1_000_000, chunks=1000, window=Window(0.0, 10.0))
    # a call found 450 of its 500 chunks in the cache, then embedded 10 of its 50 misses in 5 s:
    # 100 misses expected, 90 left at 2 a second
    running = EmbedStats(chunks=500, embedded=10, cache_hits=450, window=Window(10.0, 15.0))
    line = progress_line(RunStats(chunk=chunked, embed=running), goal, now=15.0)
    assert "10 chunks embedded, 450 from cache" in line and line.endswith("ETA 45 s"), line
    # its hits alone: no pace for its misses yet
    found = EmbedStats(chunks=500, cache_hits=450)
    assert "ETA" not in progress_line(RunStats(chunk=chunked, embed=found), goal, now=15.0)
    # every chunk so far from the cache: the pace of its lookups
    served = EmbedStats(chunks=500, cache_hits=500, window=Window(10.0, 11.0))
    line = progress_line(RunStats(chunk=chunked, embed=served), goal, now=11.0)
    assert line.endswith("ETA 1 s"), line


def test_a_progress_line_whose_counts_cannot_be_had_is_one_line(caplog):
    """Ray's stats actor killed by its memory monitor: each progress line was Ray's 45-line
    OutOfMemoryError, every 30 s (found by use, helper 106). Its first line stands for it."""

    def status() -> str:
        raise RuntimeError("1 worker(s) were killed due to memory\nOOM kill reason: ...\nTop 10")

    with caplog.at_level(logging.INFO, logger="mdindex.build"):
        with Heartbeat(status, 0.01, began=time.time()):
            time.sleep(0.2)
    assert caplog.messages and all("\n" not in line for line in caplog.messages)
    assert caplog.messages[0].endswith(": unavailable (1 worker(s) were killed due to memory)")
