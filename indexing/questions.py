"""Questions from `qa-pairs.md` and the questions each chunk matches (seed 000 section 6)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
from markdown_it import MarkdownIt

from chunking.blocks import heading_title
from indexing.keywords import plain_text
from indexing.vectors import unit_rows

# The failure a build reports for a qa-pairs.md it cannot read (bytes a source's
# `chunking.normalize.decode` refuses: not UTF-8, UTF-16, a NUL byte; `jobs.stages.chunk`)
QUESTIONS_FAILED = "QUESTIONS_FAILED"
# A question's marker: "Q:", emphasised as writers do ("**Q:**", "**Q**:", "*Q:*", "__Q:__"), or
# opening an emphasis that closes at the question's end ("**Q: Why?**": `closer`). Until
# 2026-11-30 only "Q:" and "**Q:**" were, and a file of "**Q**:" lines had no question, unsaid.
_Q_LINE = re.compile(
    r"^(?:(?P<em>\*\*|__|\*|_)Q(?:(?P=em):|:(?P=em))|(?P<closer>\*\*|__|\*|_)?Q:)"
    r"\s*(?P<question>.+)$"
)
_MARKED = re.compile(r"^[*_]{0,2}[QA][*_]{0,2}:")  # a line that starts a question or an answer
_ARGMAX_CELLS = 1 << 20  # scores per np.argmax call in `_first_max_rows` (it copies them)


def parse_questions(markdown: str) -> list[str]:
    """Questions in document order, each once: headings ending in "?", lines starting "Q:"/"**Q:**".

    Code blocks are skipped; a "Q:" line may sit inside a paragraph (e.g. followed by its "A:" line)
    or a list item, or be a heading ("## Q: How…?"); its marker, emphasised or not (`_Q_LINE`), is
    never part of the question, and a question wrapped onto the next lines is whole (`_wrapped`). A
    heading's "?" may sit inside emphasis or code (`## **Why?**`) and before an attribute list
    (`{ #why }`, dropped as from chunk titles); its inline markdown is kept as written.
    """
    tokens = MarkdownIt("commonmark").parse(markdown)
    found: list[str] = []
    for i, token in enumerate(tokens):
        if token.type != "inline":
            continue
        if tokens[i - 1].type == "heading_open":
            text = heading_title(token.content.strip())
            match = _Q_LINE.match(text)
            if match:
                found.append(_wrapped(match, [], 0))
            elif heading_title(plain_text(token)).endswith("?"):
                found.append(text)
            continue
        lines = [line.strip() for line in token.content.splitlines()]
        for number, line in enumerate(lines):
            match = _Q_LINE.match(line)
            if match:
                found.append(_wrapped(match, lines, number + 1))
    return list(dict.fromkeys(found))


def no_questions(path: str, questions: list[str]) -> list[str]:
    """The warning for the qa-pairs.md at `path` when `parse_questions` found no question in it
    (`questions`), naming what it looks for; none otherwise. A file of "Question:" lines or of a
    numbered list was indexed without questions, unsaid (until 2026-11-30)."""
    if questions:
        return []
    return [
        f"{path}: no question found: a qa-pairs.md question is a heading ending in '?' or a line "
        "starting 'Q:' (or '**Q:**', '**Q**:'); the topic is indexed without questions"
    ]


def _wrapped(marked: re.Match[str], lines: list[str], after: int) -> str:
    """A "Q:" line's question (`marked`: its `_Q_LINE` match) with the lines it wraps onto (`lines`
    from index `after` on): while it has no "?" yet, the lines up to the one that ends in "?" (none
    that starts "Q:" or "A:"); the first line alone where no such line comes (the answer may
    follow unmarked). The emphasis its marker opened is closed at its end and dropped with it.
    Reads only up to the next marked line, so a paragraph of many "Q:" lines stays linear."""
    closer = marked["closer"] or ""
    question = marked["question"].strip().removesuffix(closer).rstrip()
    if question.endswith("?"):
        return question
    parts = [question]
    for number in range(after, len(lines)):
        line = lines[number]
        if _MARKED.match(line):
            break
        parts.append(line.removesuffix(closer).rstrip())
        if parts[-1].endswith("?"):
            return " ".join(parts)
    return question


def match_questions(
    chunk_vectors: np.ndarray,
    question_units: np.ndarray,
    threshold: float,
    top_k: int | None,
    best: Sequence[tuple[int, int]] = (),
) -> list[list[int]]:
    """For each chunk, the indices of the questions with cosine >= threshold, best first (`top_k`
    caps that list when given), then the questions whose best chunk it is (`best`: (question,
    chunk) pairs in question order, see `best_chunks`) that the list lacks.

    `question_units` are the question vectors as `unit_rows` gives them. Cosines are rounded to
    4 decimals before the comparison (as every published similarity is); ties go to the earlier
    question.
    """
    if len(question_units) == 0 or len(chunk_vectors) == 0:
        return [[] for _ in range(len(chunk_vectors))]
    matched = [_ranked(row, threshold, top_k) for row in _scores(chunk_vectors, question_units)]
    for question, chunk in best:
        if question not in matched[chunk]:
            matched[chunk].append(question)
    return matched


def _ranked(row: np.ndarray, threshold: float, top_k: int | None) -> list[int]:
    """The questions of one chunk's cosine row with cosine >= threshold, best first, ties to the
    earlier question, at most `top_k`."""
    above = np.flatnonzero(row >= threshold)
    return above[np.argsort(-row[above], kind="stable")][:top_k].tolist()


def best_chunks(sources: Sequence[np.ndarray], question_units: np.ndarray) -> list[tuple[int, int]]:
    """Each question's best chunk among several sources' chunk vectors, as (source position,
    chunk index): the highest rounded cosine, ties to the earlier source, then chunk. (-1, -1)
    when there is no chunk at all. A question attaches there whatever the threshold, so every
    question of qa-pairs.md can be found through its SimHash. `question_units` are the question
    vectors as `unit_rows` gives them."""
    count = len(question_units)
    score = np.full(count, -2.0)
    position = np.full(count, -1)
    chunk = np.full(count, -1)
    for at, vectors in enumerate(sources):
        if len(vectors) == 0 or count == 0:
            continue
        scores = _scores(vectors, question_units)
        top = _first_max_rows(scores)
        top_score = scores[top, np.arange(count)]
        better = top_score > score  # an equal score keeps the earlier source
        score[better] = top_score[better]
        position[better] = at
        chunk[better] = top[better]
    return list(zip(position.tolist(), chunk.tolist(), strict=True))


def _first_max_rows(scores: np.ndarray) -> np.ndarray:
    """Per column, the row of its first maximum (the earliest chunk): np.argmax over axis 0, a
    band of columns at a time, since np.argmax copies a matrix it reads across rows."""
    step = max(1, _ARGMAX_CELLS // len(scores))
    bands = [np.argmax(scores[:, j : j + step], axis=0) for j in range(0, scores.shape[1], step)]
    return np.concatenate(bands)


def _scores(chunk_vectors: np.ndarray, question_units: np.ndarray) -> np.ndarray:
    """Cosines (chunks x questions) rounded to 4 decimals, in place (one matrix, not two)."""
    scores = unit_rows(chunk_vectors) @ question_units.T
    return np.round(scores, 4, out=scores)
