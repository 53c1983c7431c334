"""Token counters: the CJK-aware words x 1.3 heuristic and the embedded model's tokenizer."""

from __future__ import annotations

import pytest

from chunking.tokens import get_counter


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
