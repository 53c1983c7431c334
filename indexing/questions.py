"""Questions from `qa-pairs.md` and the questions each chunk matches (seed 000 section 6)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
from markdown_it import MarkdownIt

from indexing.vectors import unit_rows

_Q_LINE = re.compile(r"^(?:\*\*Q:\*\*|Q:)\s*(?P<question>.+)$")


def parse_questions(markdown: str) -> list[str]:
    """Questions in document order, each once: headings ending in "?", lines starting "Q:"/"**Q:**".

    Code blocks are skipped; a "Q:" line may sit inside a paragraph (e.g. followed by its "A:" line)
    or a list item.
    """
    tokens = MarkdownIt("commonmark").parse(markdown)
    found: list[str] = []
    for i, token in enumerate(tokens):
        if token.type != "inline":
            continue
        if tokens[i - 1].type == "heading_open":
            text = token.content.strip()
            if text.endswith("?"):
                found.append(text)
            continue
        for line in token.content.splitlines():
            match = _Q_LINE.match(line.strip())
            if match:
                found.append(match["question"].strip())
    return list(dict.fromkeys(found))


def match_questions(
    chunk_vectors: np.ndarray,
    question_vectors: np.ndarray,
    threshold: float,
    top_k: int | None,
    best: Sequence[int] = (),
) -> list[list[int]]:
    """For each chunk, the indices of the questions with cosine >= threshold, best first (`top_k`
    caps that list when given), then the questions whose best chunk it is (`best`, see
    `best_chunks`) that the list lacks.

    Cosines are rounded to 4 decimals before the comparison (as every published similarity is);
    ties go to the earlier question.
    """
    if len(question_vectors) == 0 or len(chunk_vectors) == 0:
        return [[] for _ in range(len(chunk_vectors))]
    scores = _scores(chunk_vectors, question_vectors)
    matched = []
    for row in scores:
        order = sorted(
            (q for q in range(len(row)) if row[q] >= threshold), key=lambda q: (-row[q], q)
        )
        matched.append(order if top_k is None else order[:top_k])
    for question, chunk in enumerate(best):
        if chunk >= 0 and question not in matched[chunk]:
            matched[chunk].append(question)
    return matched


def best_chunks(
    sources: Sequence[np.ndarray], question_vectors: np.ndarray
) -> list[tuple[int, int]]:
    """Each question's best chunk among several sources' chunk vectors, as (source position,
    chunk index): the highest rounded cosine, ties to the earlier source, then chunk. (-1, -1)
    when there is no chunk at all. A question attaches there whatever the threshold, so every
    question of qa-pairs.md can be found through its SimHash."""
    best = [(-2.0, -1, -1)] * len(question_vectors)
    for position, vectors in enumerate(sources):
        if len(vectors) == 0 or len(question_vectors) == 0:
            continue
        scores = _scores(vectors, question_vectors)
        top = np.argmax(scores, axis=0)  # the first maximum: the earliest chunk
        for question, chunk in enumerate(top):
            score = float(scores[chunk, question])
            if score > best[question][0]:
                best[question] = (score, position, int(chunk))
    return [(position, chunk) for _, position, chunk in best]


def _scores(chunk_vectors: np.ndarray, question_vectors: np.ndarray) -> np.ndarray:
    """Cosines (chunks x questions) rounded to 4 decimals."""
    return np.round(unit_rows(chunk_vectors) @ unit_rows(question_vectors).T, 4)
