"""The per-topic reduce, started for each topic as soon as all its rows are embedded.

Ray Data's group-by waits for every row of the corpus before the first group is reduced (a sort
shuffle of all chunks and vectors). Here the driver follows the embedding stage's output block by
block (references only, never the data): the run's collector actor counts each block's rows per
topic (`jobs.on_ray.StatsCollector.count_topics`), and once a topic has all the rows its plan
expects (in a second pass, those of its sources the first could not carry, beside the first
pass's blocks), one Ray task reduces it from the blocks that hold them
(`jobs.stages.topic.build_and_write`). Topics are written while later ones are still being
embedded, and nothing is shuffled. A daemon thread fetches the bundles (`Bundles`), so the driver
waits on them and on the running reduces together, and yields each topic as its reduce finishes.
"""

from __future__ import annotations

import ctypes
import queue
import threading
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import ray

from jobs.blocks import Span, rows_in
from jobs.landmarks import check_landmarks
from jobs.local_ray import live_resources, settling
from jobs.lock import Check
from jobs.resources import some_node_holds
from jobs.stages.topic import TopicContext, build_and_write

if TYPE_CHECKING:
    from ray.data import Dataset


def _reduce_topic(
    topic: str, spans: list[Span], *blocks: pa.Table, context: TopicContext
) -> dict[str, Any]:
    """Build and write one topic from its rows in the given block spans, once the local folders
    are found to be the driver's (`jobs.landmarks`)."""
    check_landmarks(context.landmarks)
    tables = [rows_in(block, span) for block, span in zip(blocks, spans, strict=True)]
    rows = pa.concat_tables([t.filter(pc.equal(t.column("topic"), topic)) for t in tables])
    return build_and_write(rows, context=context)


Piece = tuple[Any, Span]  # a block's object reference and the span of it that holds the rows

# How long the driver waits for the dataset's next bundle before it looks at its running reduces
# again; also how soon it takes a stop `jobs.local_ray.NodeWatch` asks for (`interrupt_main`
# sends no signal: a wait without a bound would not wake for it).
WAIT_SECONDS = 0.2
_END = object()  # in the queue of `Bundles`: the dataset has no more bundles


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
    bundles = Bundles(dataset)
    try:
        for pieces in bundles.pieces(WAIT_SECONDS):
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
            if running:
                done, _ = ray.wait(list(running), num_returns=len(running), timeout=0)
                yield from _finished(done, running)
        if pending:
            raise RuntimeError(f"rows missing for topics {sorted(pending)}: {dict(remaining)}")
        while running:
            done, _ = ray.wait(list(running), num_returns=1)
            yield from _finished(done, running)
    except BaseException:
        bundles.stop()  # the dataset's execution shut down, as the driver's own wait once was
        if running:  # a failed job returns only once none of its topics is still being written
            settle(list(running), options)
        raise


def settle(reduces: list, options: dict[str, Any]) -> None:
    """Wait until none of the `reduces` (their Ray tasks' references) still runs. Where no live
    node can hold one (`options`: their Ray options), none started and none will: they are
    cancelled, not waited for for ever (a build stopped while its reduces waited for such a node,
    by `resources.node_wait_seconds` or a SIGTERM, hung there). A `NodeWatch` does not cut
    the wait short (`jobs.local_ray.settling`)."""
    with settling():
        if not some_node_holds(live_resources(), options["num_cpus"]):
            for ref in reduces:
                ray.cancel(ref)
        ray.wait(reduces, num_returns=len(reduces))


def _finished(
    done: list, running: dict[Any, list[Piece]]
) -> Iterator[tuple[dict[str, Any], list[Piece]]]:
    """The summaries of the `done` reduces, each with its pieces, taken out of `running`."""
    for ref, summary in zip(done, ray.get(done), strict=True):
        yield summary, running.pop(ref)


class _Stopped(BaseException):
    """Raised in the thread of `Bundles` where it waits for the dataset: Ray Data's iterator shuts
    the dataset's execution down on any exception (its running tasks cancelled, its actors
    killed), as it did when a signal or an error ended the driver's own wait there."""

    def __str__(self) -> str:
        return "the build failed or was stopped on the driver"  # Ray Data's log: "failed with …"


class Bundles:
    """The output bundles of a dataset (`iter_internal_ref_bundles`), fetched by a daemon thread
    into a queue, for a driver that waits on other work too: one that waited in the iterator
    alone yielded a topic whose reduce had finished only once the next bundle came (tldr linux,
    osx and windows: 2 topics written 104 s in, their lines at 119 s in the same millisecond)."""

    def __init__(self, dataset: Dataset) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        # `stop` raises in the thread only while it fetches: raised before or after (a failed
        # dataset's error just handed over, the thread ending), it came out of threading's own
        # code, a traceback on stderr
        self._fetching = self._stopped = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._fetch, args=(dataset,), name="mdindex-bundles", daemon=True
        )
        self._thread.start()

    def _fetch(self, dataset: Dataset) -> None:
        try:
            with self._lock:
                if self._stopped:  # before the thread began: the dataset never starts
                    return
                self._fetching = True
            try:
                for bundle in dataset.iter_internal_ref_bundles():
                    self._queue.put(bundle)
                last = _END
            except BaseException as error:  # noqa: BLE001 - the dataset's failure, for `pieces`
                last = error
            with self._lock:
                self._fetching = False
            self._queue.put(last)
        except _Stopped:  # `stop`'s, come just before or after the loop above: nothing to stop
            pass

    def pieces(self, wait: float) -> Iterator[list[Piece]]:
        """The pieces of each bundle as it comes, and none each time no bundle came within `wait`
        seconds, until the dataset ends; the error that failed the dataset is raised here."""
        while True:
            try:
                item = self._queue.get(timeout=wait)
            except queue.Empty:
                yield []
                continue
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield _pieces(item)

    def stop(self) -> None:
        """Stop fetching, the dataset's execution shut down, and return once the thread ended."""
        with self._lock:
            self._stopped = True
            if self._fetching:
                ident, stopped = ctypes.c_ulong(self._thread.ident), ctypes.py_object(_Stopped)
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ident, stopped)
        self._thread.join()


def _pieces(bundle: Any) -> list[Piece]:
    """The blocks of a bundle (Ray Data's `RefBundle`), each with the span of it that it holds."""
    return [
        (entry.ref, (part.start_offset, part.end_offset) if part else (0, None))
        for entry, part in zip(bundle.blocks, bundle.slices, strict=True)
    ]
