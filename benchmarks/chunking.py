"""Chunking throughput: every strategy against LangChain on the same markdown files.

    python benchmarks/chunking.py [--corpora DIR] [--corpus fastapi-docs] [--repeat 2]
    python -m benchmarks.chunking ...   (the same, from the repository root)

Unpacks DIR/{corpus}.tar.gz (default DIR: ../shared/corpora next to the repository) into a
temporary directory, then times, on the same files in the same run, each chunking strategy
(parse + chunk + records) and LangChain's MarkdownHeaderTextSplitter (H1-H3) followed by
RecursiveCharacterTextSplitter with its default settings. Prints MB/s (CPU time, best of
--repeat runs, so other processes on the machine disturb the numbers less) and each strategy's
ratio to LangChain. LangChain (langchain-text-splitters) is a benchmark-only dependency.
The line "(block parse)" times markdown-it-py's block parse alone, which every strategy runs
first: no strategy can be faster than it.

Last, it times the job's chunk stage as configs/local.yaml sets it (`semantic`, 150-250 MiniLM
tokens) in MB per worker-second (CPU seconds of this one process) against the 1.5 MB/s target.
The first line names the machine (CPU, vector flags, library versions, commit). Every timed run
starts with fresh token counters, so no run reuses the words an earlier one tokenized.
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if not __package__:  # run as a script, this file's folder would shadow the `chunking` package
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks.pipeline import machine, machine_line  # noqa: E402
from chunking import ChunkingError, chunk_source, list_strategies  # noqa: E402
from chunking.tokens import get_counter  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CORPORA = REPO.parent / "shared" / "corpora"
JOB_CONFIG = REPO / "configs" / "local.yaml"
JOB_TARGET = 1.5  # MB of markdown per worker-second for the job's chunk stage


def load_corpus(archive: Path, into: Path) -> list[bytes]:
    """The bytes of every .md file in `archive`, in sorted path order."""
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return [path.read_bytes() for path in sorted(into.rglob("*.md"))]


def best_cpu_seconds(run: Callable[[], object], repeat: int) -> float:
    """The smallest CPU time of `repeat` calls of `run`, each with fresh token counters (loaded
    before the clock starts)."""
    times = []
    for _ in range(repeat):
        get_counter.cache_clear()
        get_counter("minilm")
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    return min(times)


def job_chunking(config: Path) -> tuple[str, dict[str, object]]:
    """The chunking strategy and options of a job config file."""
    import yaml

    chunking = yaml.safe_load(config.read_text())["chunking"]
    return chunking["strategy"], dict(chunking.get("options") or {})


def langchain_runner(files: list[bytes]) -> Callable[[], int]:
    """LangChain's markdown pipeline over `files`; returns the number of chunks."""
    from langchain_text_splitters import (
        MarkdownHeaderTextSplitter,
        RecursiveCharacterTextSplitter,
    )

    headers = MarkdownHeaderTextSplitter([("#", "h1"), ("##", "h2"), ("###", "h3")])
    recursive = RecursiveCharacterTextSplitter()
    texts = [data.decode("utf-8", errors="replace") for data in files]

    def run() -> int:
        return sum(len(recursive.split_documents(headers.split_text(text))) for text in texts)

    return run


def block_parse_runner(files: list[bytes]) -> Callable[[], int]:
    """markdown-it-py's block parse alone (the parse every strategy starts from); returns the
    number of block tokens. A floor under every strategy's time, printed for reference."""
    from chunking.blocks import parse_tokens

    texts = [data.decode("utf-8", errors="replace") for data in files]

    def run() -> int:
        return sum(len(parse_tokens(text)) for text in texts)

    return run


def strategy_runner(
    files: list[bytes], strategy: str, **options: object
) -> Callable[[], tuple[int, int]]:
    """One strategy over `files` from raw bytes; returns (chunks, failed sources)."""

    def run() -> tuple[int, int]:
        chunks = failed = 0
        for data in files:
            try:
                chunks += len(chunk_source(data, strategy=strategy, **options).chunks)
            except ChunkingError:
                failed += 1
        return chunks, failed

    return run


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print one line per contender."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--corpora-dir", "--corpora", dest="corpora", type=Path, default=DEFAULT_CORPORA,
        help="the folder of the corpus archives, as in pipeline.py and actor.py",
    )  # fmt: skip
    parser.add_argument("--corpus", default="fastapi-docs", help="an archive's name in it")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--strategy",
        action="append",
        choices=sorted(list_strategies()),
        help="only these strategies (repeatable)",
    )
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat: at least 1")
    print(machine_line(machine("cpu")))
    strategies = args.strategy or sorted(list_strategies())
    with tempfile.TemporaryDirectory() as tmp:
        files = load_corpus(args.corpora / f"{args.corpus}.tar.gz", Path(tmp))
    megabytes = sum(len(data) for data in files) / 1e6
    print(f"{args.corpus}: {len(files)} markdown files, {megabytes:.1f} MB")
    lang_run = langchain_runner(files)
    lang_chunks = lang_run()
    lang_rate = megabytes / best_cpu_seconds(lang_run, args.repeat)
    report("langchain", lang_rate, lang_rate, f"{lang_chunks} chunks")
    parse_rate = megabytes / best_cpu_seconds(block_parse_runner(files), args.repeat)
    report("(block parse)", parse_rate, lang_rate, "markdown-it-py parse only")
    for strategy in strategies:
        run = strategy_runner(files, strategy)
        chunks, failed = run()
        rate = megabytes / best_cpu_seconds(run, args.repeat)
        failures = f", {failed} failed sources" if failed else ""
        report(strategy, rate, lang_rate, f"{chunks} chunks{failures}")
    strategy, options = job_chunking(JOB_CONFIG)
    run = strategy_runner(files, strategy, **options)
    chunks, _ = run()
    rate = megabytes / best_cpu_seconds(run, args.repeat)
    settings = ", ".join(f"{key}={value}" for key, value in options.items())
    print(f"\njob chunk stage ({JOB_CONFIG.name}: {strategy}, {settings}): {chunks} chunks")
    print(
        f"  {rate:.2f} MB per worker-second, target >= {JOB_TARGET}: {rate / JOB_TARGET:.2f}x "
        f"({'met' if rate >= JOB_TARGET else 'not met'})"
    )


def report(label: str, rate: float, lang_rate: float, detail: str) -> None:
    """One line: MB/s, the ratio to LangChain's MB/s and a detail."""
    print(f"{label:<14} {rate:6.2f} MB/s  {rate / lang_rate:.2f}x LangChain's  {detail}")


if __name__ == "__main__":
    main()
