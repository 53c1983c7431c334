"""Keyword authority tables (`_keywords/words.md`) and matching them in chunk text."""

from __future__ import annotations

import math
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.token import Token

# The failure a build reports for a keywords file it cannot read (bytes a source's
# `chunking.normalize.decode` refuses: not UTF-8, UTF-16, a NUL byte; or a table `parse_keywords`
# refuses; `jobs.stages.topic`)
KEYWORDS_FAILED = "KEYWORDS_FAILED"
NAME_COLUMNS = ("keyword", "keywords", "name", "term", "phrase")
SCORE_COLUMNS = ("score", "authority", "authority score")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_LIST_ITEM = re.compile(r"^(?P<name>.*\S)\s*:\s*(?P<score>\S+)$")
# The integers a JSON writer (orjson, `indexing.hal.dump_json`) takes: signed or unsigned 64-bit,
# at most 20 digits (Python's int() refuses a string of over 4,300).
_INT_RANGE = range(-(2**63), 2**64)
_INT_DIGITS = 20
_WORD = re.compile(r"\w+")
_BETWEEN_WORDS = r"[*~`]*\s+[*~`]*"  # a keyword's inner whitespace, as markdown may mark it up
# Each character that `re.IGNORECASE` matches with an ASCII letter, as that letter in lower case
# (A-Z and four non-ASCII ones: İ ı K ſ); ASCII digits, `_` and punctuation match only themselves.
_ASCII_FOLD = str.maketrans(
    string.ascii_uppercase + "\u0130\u0131\u212a\u017f", string.ascii_lowercase + "iiks"
)


@dataclass(frozen=True)
class Keyword:
    """One keyword of the global authority table with its score."""

    name: str
    score: int | float


@dataclass(frozen=True)
class KeywordMatcher:
    """Keywords with their compiled word-boundary patterns, in table order; `by_word`: the
    positions of the keywords whose matches all hold that word (see `_index_word`), `unindexed`:
    those of the keywords without one."""

    keywords: tuple[Keyword, ...]
    patterns: tuple[re.Pattern[str], ...]
    by_word: dict[str, tuple[int, ...]]
    unindexed: tuple[int, ...]


def plain_text(inline: Token) -> str:
    """The visible text of an inline token (emphasis and code markers dropped)."""
    parts = [
        " " if child.type in ("softbreak", "hardbreak") else child.content
        for child in inline.children or ()
        if child.type in ("text", "code_inline", "softbreak", "hardbreak")
    ]
    return "".join(parts).strip()


def _score(text: str) -> int | float | None:
    """`text` as an int or float score, or None when it is not a number that JSON can hold: a
    float that overflows (`1e400`) and an integer outside 64 bits are not."""
    if not _NUMBER.fullmatch(text):
        return None
    if re.fullmatch(r"[-+]?\d+", text):
        digits = text.lstrip("+-").lstrip("0") or "0"
        if len(digits) > _INT_DIGITS:
            return None
        value = -int(digits) if text.startswith("-") else int(digits)
        return value if value in _INT_RANGE else None
    return float(text) if math.isfinite(float(text)) else None


def _table_rows(tokens: list[Token], start: int) -> tuple[list[tuple[int, list[str]]], int]:
    """The rows of the table opening at tokens[start], each its line in the file (1-based) and
    its plain cell texts, and the index after the table."""
    rows: list[tuple[int, list[str]]] = []
    i = start
    while tokens[i].type != "table_close":
        if tokens[i].type == "tr_open":
            rows.append((tokens[i].map[0] + 1, []))
        elif tokens[i].type == "inline" and rows:
            rows[-1][1].append(plain_text(tokens[i]))
        i += 1
    return rows, i + 1


def _from_table(rows: list[tuple[int, list[str]]]) -> list[Keyword]:
    """Keywords of one table (`_table_rows`) whose header names a keyword column and a score
    column; none of a table that names neither (prose); a ValueError for one that names only one
    of them (`| Keyword | Weight |` gave no keyword, and no error). An error names the line
    before any text of the file ("at line 4", "row 2 (line 7)": `jobs.report_html.failure_line`
    reads the first; since 2026-11-30)."""
    header = [cell.casefold() for cell in rows[0][1]] if rows else []
    name_col = next((header.index(c) for c in NAME_COLUMNS if c in header), None)
    score_col = next((header.index(c) for c in SCORE_COLUMNS if c in header), None)
    if name_col is None and score_col is None:
        return []
    if name_col is None or score_col is None:
        kind, names = ("keyword", NAME_COLUMNS) if name_col is None else ("score", SCORE_COLUMNS)
        raise ValueError(
            f"keywords table at line {rows[0][0]} with columns {' | '.join(rows[0][1])}: "
            f"no {kind} column (one headed {', '.join(names)})"
        )
    found = []
    for number, (line, row) in enumerate(rows[1:], start=1):
        name, raw = row[name_col].strip(), row[score_col].strip()
        if not name:
            continue
        score = _score(raw)
        if score is None:
            raise ValueError(
                f"keywords table row {number} (line {line}): score {raw!r} of {name!r} is not "
                "a number (a finite one; an integer within 64 bits)"
            )
        found.append(Keyword(name=name, score=score))
    return found


def _check_no_table(inline: Token) -> None:
    """Raise ValueError for a paragraph whose first line is a keywords table's header (a keyword
    column and a score column, `| keyword | score |`) that markdown reads as no table: without a
    delimiter row under it (`|---|---|`), or with one of another number of cells. Such a file gave
    no keyword and no error, every chunk without its keywords, unsaid (until 2026-11-30)."""
    first = inline.content.split("\n", 1)[0].strip()
    cells = [cell.strip() for cell in first.strip("|").split("|")] if "|" in first else []
    header = {cell.casefold() for cell in cells}
    if header & set(NAME_COLUMNS) and header & set(SCORE_COLUMNS):
        raise ValueError(
            f"keywords table at line {inline.map[0] + 1} with columns {' | '.join(cells)}: no "
            "table to markdown: a delimiter row must follow the header (|---|---|, a cell for "
            "each column)"
        )


def parse_keywords(markdown: str) -> list[Keyword]:
    """Keywords from a markdown table (keyword and score columns) and `- keyword: score` list items.

    Document order; a keyword seen again (case-insensitively) keeps its first score. List items
    whose text is not `name: number` are ordinary prose and ignored; a table row with a
    non-numeric score is an error (ValueError naming the row), and so is a keywords table's header
    that markdown reads as no table (`_check_no_table`).
    """
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    found: list[Keyword] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.type == "table_open":
            rows, i = _table_rows(tokens, i)
            found.extend(_from_table(rows))
            continue
        if token.type == "inline" and tokens[i - 1].type == "paragraph_open":
            _check_no_table(token)
        if token.type == "inline" and i >= 2 and tokens[i - 2].type == "list_item_open":
            match = _LIST_ITEM.match(plain_text(token))
            score = _score(match["score"]) if match else None
            if match and score is not None:
                found.append(Keyword(name=match["name"], score=score))
        i += 1
    unique: dict[str, Keyword] = {}
    for keyword in found:  # one per name as `keyword_pattern` matches it: whitespace runs, case
        unique.setdefault(" ".join(keyword.name.split()).lower(), keyword)
    return list(unique.values())


def no_keywords(path: str, keywords: list[Keyword]) -> list[str]:
    """The warning for the keywords file at `path` when `parse_keywords` found no keyword in it
    (`keywords`), naming what it looks for; none otherwise (such a file gave the topics that read
    it no keyword, unsaid, until 2026-11-30)."""
    if keywords:
        return []
    return [
        f"{path}: no keyword found: a keywords file holds a table with a keyword and a score "
        "column (| keyword | score |, then |---|---|) or '- keyword: score' list items; its "
        "topics' chunks get no keywords"
    ]


def keyword_pattern(name: str) -> re.Pattern[str]:
    """Case-insensitive pattern for `name` on word boundaries; inner whitespace matches any run,
    with emphasis or code markers (`*`, `~`, a backtick) on either side of it: `source generation`
    is in `**source** generation` (it was not). Underscores are word characters, so `_x_ y` stays
    unmatched (the word index rests on that)."""
    body = _BETWEEN_WORDS.join(re.escape(word) for word in name.split())
    return re.compile(rf"(?<!\w){body}(?!\w)", re.IGNORECASE)


def _index_word(name: str) -> str | None:
    """The longest word-character run of an ASCII part of `name` (split on whitespace), in lower
    case, or None when no part is ASCII. Every match of `keyword_pattern(name)` holds it as a whole
    run of word characters once the text is folded by `_ASCII_FOLD`: a part's ASCII letters match
    the characters that fold to their lower case, its other characters only themselves, and its
    bounds (the lookarounds, `\\s+`) match no word character (`test_ascii_fold_is_what_re_matches`).
    """
    runs = [run for part in name.split() if part.isascii() for run in _WORD.findall(part)]
    return max(runs, key=len).lower() if runs else None


def keyword_matcher(keywords: Sequence[Keyword]) -> KeywordMatcher:
    """Compile the patterns of a keyword table and index them by word, for matching many chunks."""
    by_word: dict[str, list[int]] = {}
    unindexed = []
    for i, keyword in enumerate(keywords):
        word = _index_word(keyword.name)
        if word is None:
            unindexed.append(i)
        else:
            by_word.setdefault(word, []).append(i)
    return KeywordMatcher(
        keywords=tuple(keywords),
        patterns=tuple(keyword_pattern(k.name) for k in keywords),
        by_word={word: tuple(ids) for word, ids in by_word.items()},
        unindexed=tuple(unindexed),
    )


def keywords_in(text: str, matcher: KeywordMatcher) -> list[Keyword]:
    """The keywords present in `text`, in the table's order, with their global scores (a pattern
    is searched only when `text` holds its keyword's index word, or the keyword has none)."""
    candidates = set(matcher.unindexed)
    words = _WORD.findall(text.translate(_ASCII_FOLD)) if matcher.by_word else ()
    for word in matcher.by_word.keys() & words:
        candidates.update(matcher.by_word[word])
    return [matcher.keywords[i] for i in sorted(candidates) if matcher.patterns[i].search(text)]
