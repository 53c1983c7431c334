"""The embedding actor alone, without Ray: what one actor process can feed a GPU.

    python benchmarks/actor.py                                   # CPU, the stand-in, all of tldr
    python benchmarks/actor.py --device cuda --model minilm      # a GPU

A corpus is discovered, planned and chunked as a build does it (`read_and_chunk`, here in a
process pool), and its chunk tasks' output is cut into the calls a build's embedding actors get
(`prepare_work`: on a GPU, `call_rows` documents each; on a CPU, one chunk task each). One
`EmbedActor` is made from the build's own settings and fed those calls `--repeat` times over, in
one thread and in `--threads` threads at once (a build runs two calls at once per actor). Printed
per pass: chunks/s, microseconds per chunk, the model's share of the wall (`model_seconds`: its
lock held) and, on a GPU, its busy share (`nvidia-smi` every 0.25 s). Also printed: the model's
calls alone (`Embedder.embed_encoded` on the calls' token ids), and the actor's own work, one
thread's wall less the model's share. A cold cache throughout: the actor never writes entries,
and remembers none of its vectors (`Remembered` of no bytes: each is looked up and put as in a
build, and gone at once). Remembering them, the passes after the first were recalls: 149,062
chunks/s on two threads, the model 0% of the wall (2026-12-01).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from functools import partial
from pathlib import Path

import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.pipeline import (  # noqa: E402
    CORPORA,
    JOB_CONFIG,
    GpuSampler,
    machine,
    machine_line,
    model_settings,
    unpack,
)
from embedding.documents import Remembered  # noqa: E402
from jobs.config import load_config  # noqa: E402
from jobs.discovery import discover, list_input  # noqa: E402
from jobs.gc_pause import gc_paused  # noqa: E402
from jobs.records import chunk_tokens  # noqa: E402
from jobs.resources import embed_pool  # noqa: E402
from jobs.stage_args import chunk_encoder, chunk_settings, embed_settings  # noqa: E402
from jobs.stages.chunk import read_and_chunk  # noqa: E402
from jobs.stages.embed import EmbedActor  # noqa: E402
from jobs.work import prepare_work, work_rows  # noqa: E402


def chunked_calls(config, cpus: int) -> tuple[list[pa.Table], list, object]:
    """The corpus's embedding calls as a build cuts them, the pool and the chunk tasks' encoder."""
    found = discover(config, list_input(config))
    rows = work_rows(found.plan.rebuilt, found.plan, found.previous, found.sizes)
    work = prepare_work(config, rows, cpus)
    encoder = chunk_encoder(config)
    settings = chunk_settings(config, frozenset(found.plan.fingerprints), encoder)
    with ProcessPoolExecutor(cpus) as pool:
        chunk = partial(read_and_chunk, source=found.source, output=found.output, settings=settings)
        chunked = list(pool.map(chunk, work.batches))
    if work.call_rows is not None:
        table = pa.concat_tables(chunked)
        chunked = [table.slice(i, work.call_rows) for i in range(0, table.num_rows, work.call_rows)]
    node_gpus = (1.0,) if config.resources.embed.num_gpus else ()  # the one GPU an actor uses
    return chunked, embed_pool(config.resources.embed, cpus, len(chunked), node_gpus), encoder


def timed(actor: EmbedActor, call: pa.Table) -> tuple[int, float]:
    """One call's chunks and the model's seconds in it."""
    with gc_paused():
        _, stats = actor.embed(call)
    return stats.chunks, stats.model_seconds


def report(name: str, results: list[tuple[int, float]], began: float, gpu: GpuSampler | None):
    """One line per pass."""
    wall = time.time() - began
    chunks = sum(c for c, _ in results)
    model = sum(m for _, m in results)
    busy = ""
    if gpu is not None:
        summary = gpu.summary({"start": began, "end": began + wall})
        busy = (
            f", GPU busy {summary['embed_busy_percent']:.0f}% ({summary['embed_samples']} samples)"
        )
    print(
        f"  {name:<34}{chunks / wall:>9,.0f} chunks/s {1e6 * wall / chunks:6.1f} µs/chunk, "
        f"model {100 * model / wall:3.0f}% of the wall{busy}",
        flush=True,
    )
    return wall, model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=sorted(CORPORA), default="tldr-all")
    parser.add_argument("--model", choices=("standin", "minilm", "bert-large-random"))
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--repeat", type=int, default=2, help="passes over the calls per line")
    parser.add_argument("--threads", type=int, default=2, help="calls at once in the threaded pass")
    parser.add_argument("--corpora-dir", type=Path, default=REPO.parent / "shared" / "corpora")
    parser.add_argument("--cache-dir", type=Path, default=REPO / ".bench")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat: at least 1")
    print(machine_line(machine(args.device)))
    root = unpack(args.corpora_dir, args.cache_dir, CORPORA[args.corpus])
    with tempfile.TemporaryDirectory(prefix="mdindex-actor-") as scratch:
        return measure(args, root, Path(scratch))


def measure(args: argparse.Namespace, root: Path, scratch: Path) -> int:
    """Chunk the corpus at `root`, start one actor and print its passes (output and cache in
    `scratch`)."""
    model = args.model or ("minilm" if args.device == "cuda" else "standin")
    settings = [f"input={root}", f"output={scratch / 'out'}", f"cache={scratch / 'cache'}"]
    settings += model_settings(args.cache_dir, model, args.device)
    config = load_config(str(JOB_CONFIG), settings=settings)
    cpus = os.cpu_count() or 1
    began = time.perf_counter()
    calls, pool, encoder = chunked_calls(config, cpus)
    rows = sum(call.num_rows for call in calls)
    print(
        f"{args.corpus}: {rows} rows chunked in {time.perf_counter() - began:.1f} s on {cpus} "
        f"processes, {len(calls)} calls; {model} on {args.device}"
    )
    began = time.perf_counter()
    actor = EmbedActor(embed_settings(config, pool, encoder))
    actor.remembered = Remembered(max_bytes=0)  # every pass embeds every chunk (docstring)
    print(f"actor start {time.perf_counter() - began:.1f} s, model key {actor.embedder.key}")
    for call in calls[:2]:
        timed(actor, call)  # warm
    work = [call for _ in range(args.repeat) for call in calls]
    encoded = [chunk_tokens(call) for call in calls]
    with GpuSampler() if args.device == "cuda" else contextlib.nullcontext() as gpu:
        start = time.time()
        results = [timed(actor, call) for call in work]
        wall, model = report("the actor, one thread", results, start, gpu)
        own, chunks = wall - model, sum(c for c, _ in results)
        print(
            f"  {'its own work (wall less the model)':<34}{chunks / own:>9,.0f} chunks/s "
            f"{1e6 * own / chunks:6.1f} µs/chunk"
        )
        start = time.time()
        with ThreadPoolExecutor(args.threads) as threads:
            results = list(threads.map(lambda call: timed(actor, call), work))
        report(f"the actor, {args.threads} threads", results, start, gpu)
        start = time.time()
        results = []
        for _ in range(args.repeat):
            for ids in encoded:
                embedded = actor.embedder.embed_encoded(ids)
                results.append((len(ids.ids), embedded.model_seconds))
        report("the model's calls alone", results, start, gpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
