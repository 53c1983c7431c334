"""Questions from `qa-pairs.md` and the questions each chunk matches (seed 000 section 6)."""

from __future__ import annotations

import re

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
    chunk_vectors: np.ndarray, question_vectors: np.ndarray, threshold: float, top_k: int | None
) -> list[list[int]]:
    """For each chunk, the indices of the questions with cosine >= threshold, best first.

    Cosines are rounded to 4 decimals before the comparison (as every published similarity is);
    ties go to the earlier question; `top_k` caps the list when given.
    """
    if len(question_vectors) == 0 or len(chunk_vectors) == 0:
        return [[] for _ in range(len(chunk_vectors))]
    chunks = unit_rows(chunk_vectors)
    questions = unit_rows(question_vectors)
    scores = np.round(chunks @ questions.T, 4)
    matched = []
    for row in scores:
        order = sorted(
            (q for q in range(len(row)) if row[q] >= threshold), key=lambda q: (-row[q], q)
        )
        matched.append(order if top_k is None else order[:top_k])
    return matched
