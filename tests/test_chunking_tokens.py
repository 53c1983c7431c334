"""Token counters: the CJK-aware words x 1.3 heuristic and the embedded model's tokenizer."""

from __future__ import annotations

import pytest

from chunking.tokens import HFCounter, get_counter, splits_at_whitespace


def test_heuristic_is_ceil_of_words_times_1_3():
    counter = get_counter("heuristic")
    assert counter.count("") == 0
    assert counter.count("one") == 2  # ceil(1.3)
    assert counter.count("one two three four five six seven eight nine ten") == 13
    assert counter.count(" ".join(["w"] * 77)) == 101  # ceil(100.1)


def test_each_cjk_character_is_a_word():
    counter = get_counter("heuristic")
    assert counter.units("本指南介绍如何安装") == 9
    assert counter.units("インストール") == 6
    assert counter.units("설치 프로그램") == 6
    # Mixed text: each CJK character plus each space-separated Latin word.
    assert counter.units("Python 3.10 以降と") == 5
    paragraph = "本指南介绍如何安装软件包并为生产环境进行配置。" * 10
    assert counter.count(paragraph) > 250  # not "one word"


def test_long_runs_count_one_word_per_16_characters():
    counter = get_counter("heuristic")
    assert counter.units("x" * 16) == 1
    assert counter.units("x" * 17) == 2
    assert counter.units("a" * 5_000) == 313


def test_units_are_additive_over_lines():
    counter = get_counter("heuristic")
    lines = ["# Title", "", "some words here", "漢字かな交じり文", "x" * 40]
    assert counter.units("\n".join(lines)) == sum(counter.units(line) for line in lines)


def test_heuristic_split_pieces_fit_and_rejoin():
    counter = get_counter("heuristic")
    text = " ".join(f"word{i}" for i in range(1000)) + " 中文字符" * 50
    pieces = counter.split(text, 100)
    assert "".join(pieces) == text
    assert all(counter.units(piece) <= 100 for piece in pieces)
    assert len(pieces) == -(-counter.units(text) // 100)


def test_minilm_counter_uses_the_embedded_models_tokenizer():
    counter = get_counter("minilm")
    assert counter.name.startswith("hf:minilm@")
    assert counter.count("Hello world") == 2  # no [CLS] / [SEP]
    long_text = "tokenization " * 1000
    assert counter.count(long_text) > 512  # no truncation at the model's limit
    pieces = counter.split(long_text, 100)
    assert "".join(pieces) == long_text
    assert all(counter.count(piece) <= 100 for piece in pieces)


def test_unknown_tokenizer_is_a_clear_error():
    with pytest.raises(ValueError, match="cannot load tokenizer"):
        get_counter("/no/such/tokenizer-dir")
    # A misspelt name was "cannot load tokenizer 'minlm': We couldn't connect to
    # 'https://huggingface.co'...", which did not say what a tokenizer may be.
    with pytest.raises(ValueError, match=r"'minlm' \(a tokenizer is 'heuristic', 'minilm', a") as e:
        get_counter("minlm")
    assert "\n" not in str(e.value)  # the hub's "Check your internet connection" was a 2nd line


# Text where a count taken from pieces could drift from tokenizing the whole: CJK (Han split
# per character, kana not), emoji with modifiers and joiners, combining accents (stripped by
# MiniLM's normaliser), code, words over WordPiece's 100-character limit, URLs, the model's own
# special tokens, control and non-ASCII space characters.
TRICKY = [
    "本指南介绍如何安装软件包，并为生产环境进行配置。",
    "このDockerイメージは、Uvicornが停止したワーカーの管理をサポートしていなかった",
    "설치 프로그램을 실행하세요 (Windows용)",
    "emoji 🎉👍🏽 family 👨\u200d👩\u200d👧 flag 🇯🇵 keycap 1\ufe0f\u20e3",
    "cafe\u0301 na\u00efve \u00c5ngstr\u00f6m \u0301leading-mark İstanbul ǅemal",
    "def f(x: int) -> dict[str, int]:\n\treturn {'a': x**2}  # ← comment",
    "x" * 99 + " " + "y" * 100 + " " + "z" * 101 + " " + "é" * 120,
    "https://fastapi.tiangolo.com/tutorial/first-steps/?q=1&v=2#anchor-x",
    "[CLS] a[MASK]b [SEP][PAD] [UNK]",
    "control\x0bchars\x1fhere non\u00a0breaking ideo\u3000space zero\u200bwidth \ufffd",
    "  leading and trailing \t ",
    "",
    "\n\n\t\n",
]


def minilm_direct(text: str) -> list[int]:
    """Token start offsets from one call of the model's own tokenizer on `text`."""
    encoding = get_counter("minilm").tokenizer.encode(text, add_special_tokens=False)
    return [start for start, _ in encoding.offsets]


@pytest.mark.parametrize("text", TRICKY)
def test_minilm_counts_from_words_equal_the_tokenizer(text):
    counter = get_counter("minilm")
    assert counter.additive
    assert counter.count(text) == len(minilm_direct(text))
    assert counter.starts(text) == minilm_direct(text)


def test_minilm_ids_from_words_are_the_tokenizers_own_whether_the_words_are_known_or_not():
    tokenizer = get_counter("minilm").tokenizer
    texts = [*TRICKY, "\n".join(TRICKY), "  ".join(reversed(TRICKY))]
    own = [tokenizer.encode(text, add_special_tokens=False).ids for text in texts]
    fresh = HFCounter(name="minilm", tokenizer=tokenizer, additive=True)
    assert fresh.ids(texts) == own  # every word new: tokenized in one call
    assert fresh.ids(texts) == own  # every short word known: none tokenized again
    assert fresh.known and fresh.known_ids.keys() == fresh.known.keys()
    counted = HFCounter(name="minilm", tokenizer=tokenizer, additive=True)
    counted.line_units(TRICKY[:5])  # counting learns some of the words first
    assert counted.ids(texts) == own
    whole = HFCounter(name="minilm", tokenizer=tokenizer, additive=False)
    assert whole.ids(texts) == own and not whole.known_ids  # a tokenizer that is not additive


def test_minilm_ranges_cut_at_whitespace_count_what_the_tokenizer_says():
    counter = get_counter("minilm")
    text = "\n".join(TRICKY)
    starts = counter.starts(text)
    gaps = [0, *(i for i, c in enumerate(text) if c in " \t\n"), len(text)]
    for a in gaps[::3]:
        for b in gaps[::5]:
            if a <= b:
                inside = sum(a <= start < b for start in starts)
                assert inside == len(minilm_direct(text[a:b])), (a, b)


def test_minilm_long_texts_tokenized_window_by_window_give_the_tokenizers_own_cuts_and_ids():
    """A text of many windows (`chunking.tokens._WINDOW` characters, cut at whitespace, so that
    a time budget can stop the work between calls), a run longer than a window among them: the
    cuts of one call on the whole text, and its ids."""
    tokenizer = get_counter("minilm").tokenizer
    gaps = [" ", "\n", "\t", "  "]
    text = "".join(f"{word}{gaps[i % 4]}" for i, word in enumerate(TRICKY * 1500))
    text += "x" * 70_000 + " end"
    assert len(text) > 5 * 65_536
    windowed = HFCounter(name="minilm", tokenizer=tokenizer, additive=True)
    whole = HFCounter(name="minilm", tokenizer=tokenizer, additive=False)  # one call
    for max_units in (7, 250):
        assert windowed.split(text, max_units) == whole.split(text, max_units)
    words = " ".join(f"{word}{i}" for i, word in enumerate(TRICKY * 1500))  # all new: one batch
    assert windowed.ids([words]) == [tokenizer.encode(words, add_special_tokens=False).ids]


def test_minilm_line_units_add_up_to_any_range_of_lines():
    counter = get_counter("minilm")
    lines = "\n".join(TRICKY).split("\n")
    units = counter.line_units(lines)
    for first in range(len(lines)):
        for last in range(first, len(lines)):
            joined = "\n".join(lines[first : last + 1])
            assert sum(units[first : last + 1]) == len(minilm_direct(joined))


def test_only_tokenizers_that_split_at_whitespace_are_additive():
    bert = {"normalizer": {"type": "BertNormalizer"}, "pre_tokenizer": {"type": "BertPreTokenizer"}}
    assert splits_at_whitespace(bert)
    assert not splits_at_whitespace({**bert, "pre_tokenizer": {"type": "ByteLevel"}})
    assert not splits_at_whitespace({**bert, "normalizer": {"type": "Sequence"}})
    mask = {"content": "<mask>", "lstrip": True, "rstrip": False}
    assert not splits_at_whitespace({**bert, "added_tokens": [mask]})
    spaced = {"content": "New York", "lstrip": False, "rstrip": False}
    assert not splits_at_whitespace({**bert, "added_tokens": [spaced]})


def test_ids_of_a_single_string_are_refused():
    """`counter.ids("abc")` gave one row of ids per character."""
    counter = get_counter("minilm")
    with pytest.raises(TypeError, match="got a single string"):
        counter.ids("some text")
    assert counter.ids(["some text"]) == [
        counter.tokenizer.encode("some text", add_special_tokens=False).ids
    ]
