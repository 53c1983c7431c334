"""The per-topic reduce, started for each topic as soon as all its rows are embedded.

Ray Data's group-by waits for every row of the corpus before the first group is reduced (a sort
shuffle of all chunks and vectors). Here the driver follows the embedding stage's output block by
block (references only, never the data): the run's collector actor counts each block's rows per
topic (`jobs.progress.StatsCollector.count_topics`), and once a topic has all the rows its plan
expects (in a second pass, those of its sources the first could not carry, beside the first
pass's blocks), one Ray task reduces it from the blocks that hold them
(`jobs.stages.topic.build_and_write`). Topics are written while later ones are still being
embedded, and nothing is shuffled.
"""

from __future__ import annotations

import queue
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import ray
from ray.data import Dataset

from jobs.blocks import Span, rows_in
from jobs.gc_pause import gc_paused
from jobs.landmarks import check_landmarks
from jobs.lock import Check
from jobs.stages.topic import TopicContext, build_and_write


def _reduce_topic(
    topic: str, spans: list[Span], *blocks: pa.Table, context: TopicContext
) -> dict[str, Any]:
    """Build and write one topic from its rows in the given block spans (Python's collector
    paused: `jobs.gc_pause`), once the local folders are found to be the driver's
    (`jobs.landmarks`)."""
    check_landmarks(context.landmarks)
    tables = [rows_in(block, span) for block, span in zip(blocks, spans, strict=True)]
    rows = pa.concat_tables([t.filter(pc.equal(t.column("topic"), topic)) for t in tables])
    with gc_paused():
        return build_and_write(rows, context=context)


Piece = tuple[Any, Span]  # a block's object reference and the span of it that holds the rows
POLL_S = 0.5  # how often the running reduces are looked at while the next block is awaited
T = TypeVar("T")
_END = object()  # what the thread of `ticking` puts after the last item


def reduce_topics(
    dataset: Dataset,
    expected: Counter,
    context: TopicContext,
    options: dict[str, Any],
    collector,
    check: Check,
    kept: dict[str, list[Piece]],
) -> Iterator[tuple[dict[str, Any], list[Piece]]]:
    """Run `dataset` (rows of the pipeline schema) and yield each topic's summary as its reduce
    finishes, with the pieces of blocks its rows were in; `expected` is the number of rows of
    each topic, `options` the reduce tasks' Ray options, `collector` the run's `StatsCollector`
    (it counts the rows), `check` the build lock's, called before each reduce starts
    (`jobs.lock.LockLost` stops the run there). A topic in `kept` (a last pass's pieces of it)
    is reduced from those pieces and its rows in `dataset`."""
    reduce = ray.remote(_reduce_topic).options(**options)
    # Stored once: passed by value, the context (which names every source of the corpus) was
    # copied into each topic's task, driver memory growing with topics x sources.
    shared = ray.put(context)
    remaining = Counter(expected)
    # a topic's pieces until it has them all
    pending: dict[str, list[Piece]] = {topic: list(pieces) for topic, pieces in kept.items()}
    running: dict[Any, list[Piece]] = {}  # each running reduce's pieces
    # what `iter_internal_ref_bundles` runs, with its executor: the loop below takes the blocks
    # in a thread of its own (`ticking`), which cannot be stopped mid-wait as the loop could
    bundles, _, executor = dataset._execute_to_iterator(capture_executor=False)
    try:
        for bundle in ticking(bundles, POLL_S):
            if bundle is None:  # no block yet: a reduce finished meanwhile is said at once
                yield from _finished(_done(running), running)
                continue
            pieces = [
                (entry.ref, (part.start_offset, part.end_offset) if part else (0, None))
                for entry, part in zip(bundle.blocks, bundle.slices, strict=True)
            ]
            counts = ray.get([collector.count_topics.remote(ref, span) for ref, span in pieces])
            for piece, found in zip(pieces, counts, strict=True):
                for topic, count in found.items():
                    pending.setdefault(topic, []).append(piece)
                    remaining[topic] -= count
                    if remaining[topic] == 0:
                        ready = pending.pop(topic)
                        refs, spans = zip(*ready, strict=True)
                        check()
                        running[reduce.remote(topic, list(spans), *refs, context=shared)] = ready
            yield from _finished(_done(running), running)
        if pending:
            raise RuntimeError(f"rows missing for topics {sorted(pending)}: {dict(remaining)}")
        while running:
            done, _ = ray.wait(list(running), num_returns=1)
            yield from _finished(done, running)
    except BaseException:
        if executor is not None:  # as the iterator's end did, without waiting for its tasks
            executor.shutdown(force=False)
        if running:  # a failed job returns only once none of its topics is still being written
            ray.wait(list(running), num_returns=len(running))
        raise


def ticking(items: Iterator[T], every: float) -> Iterator[T | None]:
    """The items of `items`, which a thread takes as they come, with a None after each `every`
    seconds without one, so that a loop over them can look at other work meanwhile: the reduces
    that finished while the next block was awaited were collected only once it came (their
    "topic written" lines up to 11 s late). An error that ends `items` is raised here; once the
    loop stops early, the thread stops at the next item."""
    taken: queue.Queue = queue.Queue()
    stop = threading.Event()

    def take() -> None:
        try:
            for item in items:
                if stop.is_set():
                    return
                taken.put(item)
        except BaseException as error:  # noqa: BLE001 - raised in the loop's thread
            taken.put(error)
            return
        taken.put(_END)

    threading.Thread(target=take, name="mdindex-blocks", daemon=True).start()
    try:
        while True:
            try:
                item = taken.get(timeout=every)
            except queue.Empty:
                yield None
                continue
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


def _done(running: dict[Any, list[Piece]]) -> list:
    """The references of the reduces in `running` that have finished."""
    if not running:
        return []
    return ray.wait(list(running), num_returns=len(running), timeout=0)[0]


def _finished(
    done: list, running: dict[Any, list[Piece]]
) -> Iterator[tuple[dict[str, Any], list[Piece]]]:
    """The summaries of the `done` reduces, each with its pieces, taken out of `running`."""
    for ref, summary in zip(done, ray.get(done), strict=True):
        yield summary, running.pop(ref)
