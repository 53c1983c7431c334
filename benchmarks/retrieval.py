"""Retrieval quality of the index, measured (issue 10 A): the English FastAPI docs (tutorial/ and
advanced/) built with the job once per chunk set, asked the questions of two authors
(`benchmarks/retrieval_questions.yaml`, `benchmarks/retrieval_questions_second.yaml`, whose author
had not seen the first set), each with a paraphrase, its answering files and section.

Prints: file-level recall@1, recall@5 and MRR@10 and chunk-level recall@5 for every strategy,
with and without context-enriched text, against a naive baseline (1000-character windows, 200
overlap, same model); stripe orders against runtime MMR and plain similarity order; the
prompt-matching numbers (attachment, SimHash precision, paraphrase distances, collisions); and
the final-chunk rule's counts. The recall table is printed for each author's set and for both.

    python benchmarks/retrieval.py [--variants semantic,headers,...] [--questions N]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.pipeline import machine, machine_line  # noqa: E402
from chunking import chunk_source  # noqa: E402
from chunking.tokens import get_counter  # noqa: E402
from indexing import simhash64  # noqa: E402
from indexing.questions import best_chunks  # noqa: E402
from indexing.stripes import stripe_order  # noqa: E402
from indexing.vectors import unit_rows  # noqa: E402

TARBALL = ROOT.parent / "shared" / "corpora" / "fastapi-docs.tar.gz"
WORK = ROOT / ".bench" / "retrieval"
# Two authors' question sets; the second author wrote theirs without seeing the first or any result.
QUESTION_SETS = {
    "first author": Path(__file__).with_name("retrieval_questions.yaml"),
    "second author": Path(__file__).with_name("retrieval_questions_second.yaml"),
}
# Unpacked by benchmarks/pipeline.py; counted for the final-chunk rule when present.
EXTRA_CORPORA = {
    "tldr-pages English": ROOT / ".bench" / "corpora" / "tldr-pages" / "tldr-pages" / "pages",
    "FastAPI, all languages": ROOT / ".bench" / "corpora" / "fastapi-docs" / "fastapi-docs",
}
DOCS = "fastapi-docs/en/docs/"
PARTS = ("tutorial/", "advanced/")
SEMANTIC = {"tokenizer": "minilm", "min_tokens": 150, "max_tokens": 250}  # configs/local.yaml
LOCAL = [f"{key}: {value}" for key, value in SEMANTIC.items()]
# name -> (strategy, chunking options as YAML flow mapping items)
VARIANTS = {
    "semantic": ("semantic", LOCAL),
    "semantic+ctx": ("semantic", [*LOCAL, "embed_context: true"]),
    "semantic-250-750": ("semantic", ["tokenizer: minilm"]),
    "headers": ("headers", []),
    "headers+ctx": ("headers", ["embed_context: true"]),
    "structural": ("structural", []),
    "structural+ctx": ("structural", ["embed_context: true"]),
    "hierarchical-raw": ("hierarchical", ["embed_context: false"]),
    "hierarchical": ("hierarchical", []),
}
# Variants of a question, from a different user's paraphrase down to small edits.
EDITS = {
    "paraphrase": lambda q: q.paraphrase,
    "lower case, no '?'": lambda q: q.text.lower().rstrip("?"),
    "first word dropped": lambda q: q.text.split(" ", 1)[1],
    "'please' added": lambda q: q.text.rstrip("?") + " please?",
    "one word changed": lambda q: (
        q.text.replace(" I ", " we ", 1) if " I " in q.text else q.text.replace(" a ", " the ", 1)
    ),
}
HEADING = re.compile(r"^(#{1,6}) .*?(?:\{ #([^ }]+) \})?\s*$")


@dataclass(frozen=True)
class Question:
    text: str
    paraphrase: str
    files: tuple[str, ...]
    section: str


@dataclass(frozen=True)
class ChunkSet:
    """One variant's chunks: source file, line range, text and unit vectors; plus index rows."""

    files: list[str]
    lines: list[tuple[int, int]]
    vectors: np.ndarray
    rows: list[dict]


def load_questions(path: Path, first: int = 0) -> list[Question]:
    """A question set's questions (the first `first` of them; 0: all)."""
    raw = yaml.safe_load(path.read_text())
    found = [Question(q["q"], q["p"], tuple(q["files"]), q["section"]) for q in raw]
    return found[: first or None]


def unpack(work: Path) -> Path:
    """tutorial/ and advanced/ of the English docs under `work/input` (once: unpacked beside it,
    then renamed, so a run stopped while unpacking leaves no partial input to reuse)."""
    target = work / "input"
    if not target.is_dir():
        scratch = target.with_name(target.name + ".partial")
        shutil.rmtree(scratch, ignore_errors=True)
        with tarfile.open(TARBALL) as tar:
            members = [
                m for m in tar.getmembers()
                if m.isfile() and m.name.startswith(tuple(DOCS + p for p in PARTS))
            ]  # fmt: skip
            for member in members:
                member.name = member.name[len(DOCS) :]
                tar.extract(member, scratch, filter="data")
        scratch.rename(target)
    return target


def write_questions(corpus: Path, questions: list[Question]) -> None:
    """Each question as a `## ...?` heading of its answering file's topic's qa-pairs.md."""
    by_topic: dict[str, list[str]] = {}
    for q in questions:
        by_topic.setdefault(str(Path(q.files[0]).parent), []).append(q.text)
    for topic, texts in by_topic.items():
        body = "# Questions\n\n" + "".join(f"## {t}\n\nSee the docs.\n\n" for t in texts)
        (corpus / topic / "qa-pairs.md").write_text(body)


def build(corpus: Path, work: Path, name: str) -> Path:
    """The job's build of one variant (configs/local.yaml, the variant's chunking)."""
    strategy, options = VARIANTS[name]
    output = work / "out" / name
    command = [
        sys.executable, "-m", "jobs.reindex", "--config", str(ROOT / "configs" / "local.yaml"),
        "--input", str(corpus), "--output", str(output), "--cache", str(work / "cache"),
        "--set", f"chunking.strategy={strategy}",
        "--set", f"chunking.options={{{', '.join(options)}}}",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.setdefault("RAY_AUTH_MODE", "disabled")
    started = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if result.returncode not in (0, 3):
        sys.exit(f"build {name} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    print(f"  built {name} in {time.perf_counter() - started:.0f} s", flush=True)
    return output


def load_chunks(output: Path) -> ChunkSet:
    """Every chunk of a built index, from its Parquet chunk tables."""
    rows = []
    for path in sorted((output / "_index" / "chunks").glob("*.parquet")):
        rows += pq.read_table(path).to_pylist()
    vectors = unit_rows(np.array([r["embedding"] for r in rows], dtype=np.float32))
    return ChunkSet(
        files=[r["source"] for r in rows],
        lines=[(r["start_line"], r["end_line"]) for r in rows],
        vectors=vectors,
        rows=rows,
    )


def naive_chunks(corpus: Path, embedder) -> ChunkSet:
    """Fixed 1000-character windows overlapping by 200, embedded by the same model."""
    files, lines, texts = [], [], []
    for path in sorted(corpus.rglob("*.md")):
        if path.name == "qa-pairs.md":
            continue
        text = path.read_text()
        start = 0
        while True:
            window = text[start : start + 1000]
            if window.strip():
                files.append(path.relative_to(corpus).as_posix())
                first = text.count("\n", 0, start) + 1
                lines.append((first, first + window.count("\n")))
                texts.append(window)
            if start + 1000 >= len(text):
                break
            start += 800
    vectors = unit_rows(embedder.embed(texts))
    return ChunkSet(files, lines, vectors, [])


def sections(path: Path) -> tuple[dict[str, tuple[int, int]], list[tuple[int, int]]]:
    """The line range of every anchored section, and the line ranges of the H2 sections."""
    lines = path.read_text().split("\n")
    headings = []
    fenced = False
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            headings.append((number, len(match[1]), match[2]))
    ranges, h2 = {}, []
    for i, (number, level, anchor) in enumerate(headings):
        end = next((n - 1 for n, lv, _ in headings[i + 1 :] if lv <= level), len(lines))
        if anchor:
            ranges[anchor] = (number, end)
        if level == 2:
            h2.append((number, end))
    return ranges, h2


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def recall(chunks: ChunkSet, queries: np.ndarray, questions: list[Question], corpus: Path) -> dict:
    """File-level recall@1, recall@5, MRR@10 and chunk-level recall@5; "rr": each question's
    reciprocal rank (0 past rank 10), for the paired comparison with the baseline."""
    scores = queries @ chunks.vectors.T
    r1 = r5 = mrr = c5 = 0.0
    rr: list[float] = []
    for q, row in zip(questions, scores, strict=True):
        order = np.argsort(-row, kind="stable")
        ranked: list[str] = []
        for i in order:
            if chunks.files[i] not in ranked:
                ranked.append(chunks.files[i])
            if len(ranked) == 10:
                break
        hits = [rank for rank, f in enumerate(ranked, 1) if f in q.files]
        r1 += bool(hits) and hits[0] == 1
        r5 += bool(hits) and hits[0] <= 5
        rr.append(1 / hits[0] if hits else 0.0)
        mrr += rr[-1]
        section = sections(corpus / q.files[0])[0][q.section]
        c5 += any(
            chunks.files[i] == q.files[0] and overlaps(chunks.lines[i], section) for i in order[:5]
        )
    n = len(questions)
    return {"r@1": r1 / n, "r@5": r5 / n, "mrr@10": mrr / n, "chunk r@5": c5 / n, "rr": rr}


def recall_table(
    sets: dict[str, ChunkSet], qv: np.ndarray, pv: np.ndarray, questions: list, corpus: Path
) -> None:
    """One row per chunk set: recall, MRR@10 and the paired difference from the naive windows."""
    print("| chunk set | chunks | r@1 | r@5 | MRR@10 | chunk r@5 | paraphrase MRR@10 | vs naive |")
    print("|---|---|---|---|---|---|---|---|")
    naive = sets["naive 1000/200"]
    baseline = [rr for q in (qv, pv) for rr in recall(naive, q, questions, corpus)["rr"]]
    for name, chunks in sets.items():
        ours = recall(chunks, qv, questions, corpus)
        para = recall(chunks, pv, questions, corpus)
        cells = [ours["r@1"], ours["r@5"], ours["mrr@10"], ours["chunk r@5"], para["mrr@10"]]
        mean, low, high = paired_interval(ours["rr"] + para["rr"], baseline)
        print(f"| {name} | {len(chunks.files)} | " + " | ".join(f"{c:.3f}" for c in cells)
              + f" | {mean:+.3f} [{low:+.3f}, {high:+.3f}] |")  # fmt: skip


def paired_interval(ours: list[float], baseline: list[float], draws: int = 10_000) -> tuple:
    """95% paired-bootstrap interval of the mean difference in reciprocal rank (fixed seed):
    a margin is clear when the whole interval is above 0."""
    diff = np.asarray(ours) - np.asarray(baseline)
    picks = np.random.default_rng(0).integers(0, len(diff), (draws, len(diff)))
    low, high = np.percentile(diff[picks].mean(axis=1), [2.5, 97.5])
    return float(diff.mean()), float(low), float(high)


def mmr(vectors: np.ndarray, k: int, lam: float = 0.5) -> list[int]:
    """Runtime MMR over chunks 1..n-1 with the baseline chunk 0 as the query."""
    relevance = vectors[1:] @ vectors[0]
    chosen: list[int] = []
    while len(chosen) < min(k, len(vectors) - 1):
        best, best_score = -1, -np.inf
        for i in range(len(vectors) - 1):
            if i in chosen:
                continue
            redundancy = max((float(vectors[i + 1] @ vectors[j + 1]) for j in chosen), default=0)
            score = lam * relevance[i] - (1 - lam) * redundancy
            if score > best_score:
                best, best_score = i, score
        chosen.append(best)
    return [i + 1 for i in chosen]


def orders(chunks: ChunkSet, corpus: Path) -> dict[tuple[str, int], list[float]]:
    """Relevance, diversity and H2 coverage of stripe, MMR and similarity orders, per k."""
    by_source: dict[str, list[int]] = {}
    for i, f in enumerate(chunks.files):
        by_source.setdefault(f, []).append(i)
    totals: dict[tuple[str, int], list[float]] = {}
    for source, rows in by_source.items():
        if len(rows) < 8:
            continue
        vectors = chunks.vectors[rows]
        sims = [round(float(x), 4) for x in vectors @ vectors[0]]
        h2 = sections(corpus / source)[1]
        ranked = sorted(range(1, len(rows)), key=lambda i: (-sims[i], i))
        for k in (3, 6, 12):
            picks = {
                "stripe": stripe_order(sims, {0})[:k],
                "mmr": mmr(vectors, k),
                "similarity": ranked[:k],
            }
            for name, picked in picks.items():
                chosen = vectors[picked]
                pairs = [float(a @ b) for a, b in combinations(chosen, 2)]
                reached = {
                    j for j, sec in enumerate(h2)
                    for i in picked if overlaps(chunks.lines[rows[i]], sec)
                }  # fmt: skip
                values = [
                    float(np.mean(chosen @ vectors[0])),
                    1 - float(np.mean(pairs)) if pairs else 0.0,
                    len(reached) / len(h2) if h2 else 1.0,
                ]
                totals.setdefault((name, k), []).append(values)
    return {key: list(np.mean(values, axis=0)) for key, values in totals.items()}


def prompts(chunks: ChunkSet, qv: np.ndarray, questions: list[Question]) -> None:
    """Seed 000's open questions about prompt matching, answered with numbers."""
    topics = [str(Path(f).parent) for f in chunks.files]
    print("\nPrompt matching (default chunk set; questions embedded as queries)")
    print("| threshold | attached (old rule) | chunks per question | precision | answered |")
    print("|---|---|---|---|---|")
    for t in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
        attached = matched = correct = answered = 0
        for q, vector in zip(questions, qv, strict=True):
            topic = str(Path(q.files[0]).parent)
            rows = [i for i, tp in enumerate(topics) if tp == topic]
            cos = np.round(chunks.vectors[rows] @ vector, 4)
            above = {rows[i] for i in np.flatnonzero(cos >= t)}
            attached += bool(above)
            ((_, best),) = best_chunks([chunks.vectors[rows]], unit_rows(vector[None, :]))
            found = above | {rows[best]}
            matched += len(found)
            hits = sum(chunks.files[i] in q.files for i in found)
            correct += hits
            answered += hits > 0
        n = len(questions)
        print(f"| {t} | {attached}/{n} ({attached / n:.0%}) | {matched / n:.1f} | "
              f"{correct / matched:.0%} | {answered / n:.0%} |")  # fmt: skip
    built = [row.get("prompt_hashes") or [] for row in chunks.rows]
    ours = [simhash64(q.text) for q in questions]
    found = [{i for i, hs in enumerate(built) if h in hs} for h in ours]
    pairs = zip(questions, found, strict=True)
    hit = sum(any(chunks.files[i] in q.files for i in f) for q, f in pairs)
    n, share = len(questions), sum(len(f) > 0 for f in found)
    print(f"\nBuilt index (configs/local.yaml's threshold, best chunk kept): {share}/{n} "
          f"questions attached; {hit}/{n} lead to an answering file")  # fmt: skip
    print("| variant of the question | median distance | within k=3 | k=6 | k=10 |")
    print("|---|---|---|---|---|")
    for name, edit in EDITS.items():
        ds = sorted(bin(simhash64(q.text) ^ simhash64(edit(q))).count("1") for q in questions)
        print(
            f"| {name} | {ds[len(ds) // 2]} | "
            + " | ".join(f"{sum(d <= k for d in ds)}/{len(ds)}" for k in (3, 6, 10))
            + " |"
        )
    texts = [q.text for q in questions] + [q.paraphrase for q in questions]
    hashes = [simhash64(t) for t in texts]
    same = sum(a == b for a, b in combinations(hashes, 2))
    near = sorted(bin(a ^ b).count("1") for a, b in combinations(hashes, 2))
    print(f"Collisions among {len(texts)} questions and paraphrases: {same} equal hashes, "
          f"{sum(d <= 3 for d in near)} pairs within distance 3, {sum(d <= 6 for d in near)} "
          f"within 6 "
          f"(closest pair {near[0]}, median pair {near[len(near) // 2]})")  # fmt: skip


def own_tokens(lines: list[str], first: int, last: int) -> int:
    """MiniLM tokens of source lines first..last: a chunk's own content, without the parent
    headings it repeats (what the seed 003 final-chunk rule measured)."""
    return get_counter("minilm").count("\n".join(lines[first - 1 : last]))


def tail_counts(name: str, corpus: Path) -> None:
    """Seed 003's final-chunk rule: short final sections skipped, size-split remainders kept."""
    skipped = remainders = chunks = tokens = kept = 0
    for path in sorted(corpus.rglob("*.md")):
        if path.name == "qa-pairs.md":
            continue
        document = chunk_source(path.read_bytes(), **SEMANTIC)
        chunks += len(document.chunks)
        tokens += sum(c.token_count for c in document.chunks)
        skipped += bool(document.skipped_tail_tokens)
        last = document.chunks[-1] if len(document.chunks) > 1 else None
        lines = path.read_text(errors="replace").split("\n")
        if last and own_tokens(lines, last.start_line, last.end_line) < SEMANTIC["min_tokens"]:
            remainders += 1
            kept += last.token_count
    print(f"| {name} | {chunks:,} | {skipped:,} | {remainders:,} ({kept / tokens:.1%} of the "
          f"tokens) | {skipped + remainders:,} |")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    parser.add_argument(
        "--questions", type=int, default=0, help="first N questions of each set (0: all)"
    )
    parser.add_argument("--work", type=Path, default=WORK)
    args = parser.parse_args(argv)
    if unknown := sorted(set(args.variants.split(",")) - set(VARIANTS)):
        parser.error(f"--variants: unknown {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    authors = {name: load_questions(path, args.questions) for name, path in QUESTION_SETS.items()}
    questions = [q for found in authors.values() for q in found]
    corpus = unpack(args.work)
    write_questions(corpus, questions)
    print(machine_line(machine("cpu")))
    print(f"{len(questions)} questions, {sum(1 for _ in corpus.rglob('*.md'))} files")

    from embedding import load_embedder

    embedder = load_embedder("minilm", device="cpu", dtype="fp32")
    qv = unit_rows(embedder.embed([q.text for q in questions], query=True))
    pv = unit_rows(embedder.embed([q.paraphrase for q in questions], query=True))
    sets = {name: load_chunks(build(corpus, args.work, name)) for name in args.variants.split(",")}
    sets["naive 1000/200"] = naive_chunks(corpus, embedder)
    default = sets.get("semantic")
    if default is not None:  # what seed 003's rule as written would have dropped
        final = {f: i for i, f in enumerate(default.files)}
        text = {f: (corpus / f).read_text().split("\n") for f in final}
        keep = [
            i for i, f in enumerate(default.files)
            if not (final[f] == i and default.rows[i]["ordinal"] > 0
                    and own_tokens(text[f], *default.lines[i]) < SEMANTIC["min_tokens"])
        ]  # fmt: skip
        sets["semantic, old final-chunk rule"] = ChunkSet(
            [default.files[i] for i in keep], [default.lines[i] for i in keep],
            default.vectors[keep], [default.rows[i] for i in keep],
        )  # fmt: skip

    picks, start = {}, 0
    for author, found in authors.items():  # questions holds each author's set in turn
        picks[author] = slice(start, start + len(found))
        start += len(found)
    picks["both authors"] = slice(None)
    for author, picked in picks.items():
        print(f"\nRecall, {author}: {len(questions[picked])} questions (file level; chunk r@5: a")
        print("top-5 chunk overlaps the answering section; vs naive: mean difference in reciprocal")
        print("rank over questions and paraphrases, with its 95% paired-bootstrap interval)")
        recall_table(sets, qv[picked], pv[picked], questions[picked], corpus)

    if default is not None:
        print("\nStripe order vs runtime MMR (λ=0.5, query = baseline) vs similarity order,")
        print("sources with >= 8 chunks (semantic); mean over sources")
        print("| k | order | relevance | diversity | H2 coverage |")
        print("|---|---|---|---|---|")
        for (name, k), (rel, div, cov) in sorted(orders(default, corpus).items(),
                                                 key=lambda x: (x[0][1], x[0][0])):  # fmt: skip
            print(f"| {k} | {name} | {rel:.3f} | {div:.3f} | {cov:.2f} |")
        prompts(default, qv, questions)
    print("\nFinal-chunk rule (semantic, configs/local.yaml: 150-250 MiniLM tokens)")
    print("| corpus | chunks | short final sections skipped | size-split remainders kept |"
          " the old rule skipped |")  # fmt: skip
    print("|---|---|---|---|---|")
    tail_counts("FastAPI en tutorial/ + advanced/", corpus)
    for name, extra in EXTRA_CORPORA.items():
        if extra.is_dir():
            tail_counts(name, extra)


if __name__ == "__main__":
    main()
