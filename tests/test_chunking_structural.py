"""The `structural` strategy (seed 002 v1): boundaries, sizes, overlap, tokenizer, links, checklist.

Runs the real strategy with the embedded model's tokenizer (loaded once per process).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from chunking import CHUNKING_FAILED, ChunkingError, chunk_source, list_strategies, strategy_key
from chunking.blocks import parse, unclosed_fences
from chunking.normalize import normalize
from chunking.strategy import get_strategy
from chunking.tokens import get_counter
from tests.chunking_support import (
    check_container_pieces,
    check_html_table_pieces,
    check_invariants,
    html_table,
)

FIXTURES = Path(__file__).parent / "fixtures" / "markdown"
# Words that are one WordPiece token each, so token windows can be checked word by word.
WORDS = (
    "apple river stone cloud green paper music light table window garden horse "
    "water silver coffee summer doctor market"
).split()


def structural(text: str, **options):
    return chunk_source(text, strategy="structural", **options)


@pytest.fixture(scope="module")
def minilm():
    return get_counter("minilm")


def test_boundaries_of_section_4(minilm):
    doc = structural(
        (FIXTURES / "structural_boundaries.md").read_bytes(),
        document_path="structural_boundaries.md",
        corpus_paths={"structural_other.md"},
    )
    got = [(c.text.split("\n")[0], c.headings_path, c.chunk_path) for c in doc.chunks]
    assert got == [
        ("Preamble text before any heading.", (), ""),  # root chunk: no heading path
        ("# Guide", ("Guide",), "# Guide"),  # two short paragraphs merged (4.2)
        # a list may follow the prose that introduces it (ends with ":")
        ("## Setup", ("Guide", "Setup"), "# Guide > ## Setup > bullet list"),
        ("1. first ordered", ("Guide", "Setup"), "# Guide > ## Setup > ordered list"),  # switch
        ("After the lists comes prose.", ("Guide", "Setup"), "# Guide > ## Setup"),  # list exit
        ("| Name | Value |", ("Guide", "Setup"), "# Guide > ## Setup > table"),  # table starts
        ("Text after the table.", ("Guide", "Setup"), "# Guide > ## Setup"),  # table ends
        ("```python", ("Guide", "Setup"), "# Guide > ## Setup > code"),  # fence starts
        ("Text after the code.", ("Guide", "Setup"), "# Guide > ## Setup"),  # fence ends
        ("### Details", ("Guide", "Setup", "Details"), "# Guide > ## Setup > ### Details"),
    ]
    assert doc.chunks[1].text.endswith("Intro paragraph two is also short.")
    assert doc.chunks[2].text.endswith("- step two")
    assert [(c.start_line, c.end_line) for c in doc.chunks][:3] == [(1, 1), (3, 7), (9, 14)]
    assert all(c.token_count == minilm.count(c.text) for c in doc.chunks)


def test_an_admonitions_title_line_stays_with_its_body():
    """MkDocs' `!!! tip "Title"` and `=== "pip"` lines were chunks of their own (7 to 12 tokens)
    and each body a chunk of indented code: the body read as indented code stood alone (seed 002
    section 4.1), apart from its title. An admonition is prose; a tab of code is code."""
    text = (
        "# Setup\n\n"
        '!!! tip "Use a virtual environment"\n\n'
        "    Create one with `python -m venv venv` and activate it.\n\n"
        '=== "pip"\n\n'
        "    ```sh\n    pip install mkdocs-material\n    ```\n"
    )
    (chunk,) = structural(text).chunks
    assert chunk.text == text.rstrip("\n")
    assert chunk.chunk_path == "# Setup"  # no "> code"
    (tab,) = structural('=== "pip"\n\n    ```sh\n    pip install x\n    ```\n').chunks
    assert tab.is_code and tab.content_type == "code"


def test_chunk_path_names_the_header_path_without_attribute_lists():
    # mkdocs anchors (every FastAPI heading has one) and an empty heading: chunk_path held the
    # headings as written ('# Guide { #guide } > ## Setup { #setup } > code', '#'), so it did
    # not start with the chunk's header_path as in every other strategy.
    text = (
        "# Guide { #guide }\n\n## Setup { #setup }\n\nIntro.\n\n```sh\npip install x\n```\n"
        "\n# \n\nUnder an empty heading.\n"
    )
    got = [(c.header_path, c.chunk_path) for c in structural(text).chunks]
    assert got == [
        ("# Guide > ## Setup", "# Guide > ## Setup"),
        ("# Guide > ## Setup", "# Guide > ## Setup > code"),
        ("# ", "# "),
    ]


def test_a_front_matter_title_heads_chunk_path_and_embedded_context():
    """A page titled only in its front matter (Docusaurus' rendered H1): chunk_path and the
    context embedded with `embed_context` start with the title, as header paths do."""
    text = "---\ntitle: Installing the CLI\n---\nIntro.\n\n## Setup\n\nFirst.\n\n```sh\nx\n```\n"
    got = [(c.chunk_path, c.context) for c in structural(text, embed_context=True).chunks]
    assert got == [
        ("# Installing the CLI", "Context: Installing the CLI\n\n"),
        ("# Installing the CLI > ## Setup", "Context: Installing the CLI > Setup\n\n"),
        ("# Installing the CLI > ## Setup > code", "Context: Installing the CLI > Setup\n\n"),
    ]


def test_a_list_not_introduced_by_a_colon_starts_its_own_chunk():
    doc = structural("# T\n\nCreate an archive.\n\n- Extract it:\n\n`tar xf a.tar`\n\n- List it:\n")
    assert [c.text for c in doc.chunks] == [
        "# T\n\nCreate an archive.",
        "- Extract it:",
        "`tar xf a.tar`",
        "- List it:",
    ]


def test_every_heading_starts_a_chunk_and_empty_parents_ride_along():
    same_level = structural("## A\n\nalpha\n\n## B\n\nbeta\n")
    assert [c.text for c in same_level.chunks] == ["## A\n\nalpha", "## B\n\nbeta"]
    nested = structural("# T\n\n## A\n\ntext\n")
    assert [(c.text, c.headings_path) for c in nested.chunks] == [
        ("# T\n\n## A\n\ntext", ("T", "A"))
    ]
    empty_sibling = structural("## A\n\n## B\n\ntext\n")
    assert [c.text for c in empty_sibling.chunks] == ["## A", "## B\n\ntext"]


def _paragraphs(count: int, sentences: int) -> str:
    return "\n\n".join(
        " ".join(f"Sentence {p}-{s} talks about topic {s} in detail." for s in range(sentences))
        for p in range(count)
    )


def test_soft_max_emits_and_neighbours_overlap_by_whole_sentences(minilm):
    doc = structural("# T\n\n" + _paragraphs(12, 8))
    chunks = doc.chunks
    assert len(chunks) >= 3
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert before.token_count <= 450
        assert after.text.startswith("Sentence ")
        # The next chunk starts with the previous chunk's last whole sentences (<= 15%).
        overlap = after.text[: after.text.index("\n\n")]
        assert before.text.endswith(overlap)
        assert minilm.count(overlap) <= before.token_count * 15 // 100
        assert after.start_line <= before.end_line


def test_oversized_paragraph_splits_at_sentences():
    sentences = [f"Sentence number {i} talks about topic {i} in more detail." for i in range(120)]
    doc = structural("# T\n\n## Big\n\n" + " ".join(sentences))
    assert len(doc.chunks) > 2
    for chunk in doc.chunks:
        assert chunk.token_count <= 520
        assert chunk.text.endswith("detail.")
        assert chunk.headings_path == ("T", "Big")
    for before, after in zip(doc.chunks, doc.chunks[1:], strict=False):
        assert after.text.startswith("Sentence number ")
        first = after.text[: after.text.index("detail.") + len("detail.")]
        overlap = before.text[before.text.index(first) :]
        assert after.text.startswith(overlap)  # section 6: the last whole sentences repeated
    seen = " ".join(c.text.split("\n\n")[-1] for c in doc.chunks)
    assert all(sentence in seen for sentence in sentences)


def test_a_block_cut_on_its_own_gets_no_overlap_chunk_before_it():
    """A block quote holding a fence that never closes is cut on its own; the overlap meant for
    the chunk after a size limit was emitted alone before it: a chunk holding only the previous
    chunk's last sentences, a copy of its tail."""
    prose = " ".join(f"Sentence number {i} is here." for i in range(70))
    doc = structural(f"# T\n\n{prose}\n\n> ```sh\n> pip install x\n\nAfter.\n")
    assert [(c.start_line, c.end_line) for c in doc.chunks] == [(1, 3), (5, 6), (8, 8)]
    assert doc.chunks[0].text.endswith("Sentence number 69 is here.")
    assert doc.chunks[1].text == "> ```sh\n> pip install x\n> ```"


# Each paragraph is one sentence of about 100 tokens, over 15% of a chunk: the overlap is that
# sentence's tail, and it began at the last 15% of its tokens, inside a word ('zes
# asynchronously' of 'reinitializes', 'parseable' of 'unparseable'). Korean puts spaces between
# words; a Hangul syllable counted as a word of its own, as an ideograph does, so the overlap
# began inside a word ('에도' of '사항에도').
SPACED_WORDS = {
    "english": (
        "# T",
        "Paragraph",
        "internationalization considerations notwithstanding, the configuration subsystem "
        "reinitializes asynchronously whenever unparseable documentation overrides",
    ),
    "korean": (
        "# 제목",
        "문단",
        "국제화 고려 사항에도 불구하고 구성 하위 시스템은 구문 분석할 수 없는 문서가 "
        "재정의할 때마다 비동기적으로 다시 초기화됩니다",
    ),
}


@pytest.mark.parametrize("language", SPACED_WORDS)
def test_an_overlap_shorter_than_the_last_sentence_starts_at_a_word(minilm, language):
    heading, paragraph, text = SPACED_WORDS[language]
    words = text.split()
    sentence = " ".join(words[i % len(words)] for i in range(45)) + "."
    doc = structural(
        f"{heading}\n\n" + "\n\n".join(f"{paragraph} {i} {sentence}" for i in range(12))
    )
    chunks = doc.chunks
    assert len(chunks) >= 3
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert after.start_line <= before.end_line  # still overlapping
        overlap = after.text[: after.text.index("\n\n")]
        assert before.text.endswith(" " + overlap)  # whole words of the sentence's tail
        assert after.text.split()[0] in words
        assert 0 < minilm.count(overlap) <= before.token_count * 15 // 100


def test_a_cjk_overlap_shorter_than_the_last_sentence_is_cut_between_characters(minilm):
    # Each CJK character is a word of its own: a sentence without spaces still overlaps by its
    # last characters (the word rule above left such text without any overlap).
    sentence = (
        "这是一个关于分块策略的很长的句子它没有任何空格并且一直延续下去直到超过了重叠预算的长度"
    )
    doc = structural("# 标题\n\n" + "\n\n".join(f"段落{i}{sentence * 2}。" for i in range(20)))
    chunks = doc.chunks
    assert len(chunks) >= 3
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert after.start_line <= before.end_line
        overlap = after.text[: after.text.index("\n\n")]
        assert before.text.endswith(overlap) and overlap.endswith("。")
        assert 0 < minilm.count(overlap) <= before.token_count * 15 // 100


def test_overlap_never_crosses_a_heading():
    doc = structural("# T\n\n## A\n\n" + _paragraphs(6, 8) + "\n\n## B\n\n" + _paragraphs(6, 8))
    first_of_b = next(c for c in doc.chunks if c.headings_path == ("T", "B"))
    assert first_of_b.text.startswith("## B\n\n")
    assert sum(c.text.startswith("Sentence ") for c in doc.chunks) >= 2  # overlaps inside A, B


def test_cjk_paragraph_splits_at_ideographic_full_stops(minilm):
    sentence = "这是一个关于分块的句子。"
    doc = structural("# 标题\n\n" + sentence * 200)
    assert len(doc.chunks) > 1
    for chunk in doc.chunks:
        assert chunk.token_count <= 520
        assert chunk.text.endswith("。")


def test_sentence_over_hard_max_becomes_token_windows_with_15_percent_overlap(minilm):
    words = [WORDS[i % len(WORDS)] for i in range(1500)]
    assert minilm.count(" ".join(words)) == 1500  # one token per word
    doc = structural("# T\n\n" + " ".join(words))
    texts = [c.text.removeprefix("# T\n\n").split() for c in doc.chunks]
    overlap = (350 * 15 + 50) // 100
    assert [len(t) for t in texts[:-1]] == [350] * (len(texts) - 1)
    for before, after in zip(texts, texts[1:], strict=False):
        assert before[-overlap:] == after[:overlap]
    rebuilt = texts[0] + [w for t in texts[1:] for w in t[overlap:]]
    assert rebuilt == words
    assert all(c.token_count <= 520 for c in doc.chunks)


def test_oversized_code_block_is_cut_between_lines_with_the_fence_reopened():
    code = [f"value_{i} = compute({i}, {i + 1})  # step {i}" for i in range(300)]
    doc = structural("# T\n\n```python\n" + "\n".join(code) + "\n```\n\nafter\n")
    pieces = [c for c in doc.chunks if "```" in c.text]
    assert len(pieces) > 3
    body = []
    for chunk in pieces:
        lines = chunk.text.removeprefix("# T\n\n").split("\n")
        assert lines[0] == "```python" and lines[-1] == "```"
        assert not unclosed_fences(chunk.text)
        assert chunk.token_count <= 520 and chunk.is_code
        body += lines[1:-1]
    assert body == code
    assert doc.chunks[-1].text == "after"


def test_oversized_table_repeats_its_header():
    rows = [f"| row {i} | value {i} with a few more words |" for i in range(200)]
    doc = structural("| Name | Value |\n| --- | --- |\n" + "\n".join(rows) + "\n")
    assert len(doc.chunks) > 1
    assert all(c.text.startswith("| Name | Value |\n| --- | --- |\n") for c in doc.chunks)
    assert [r for c in doc.chunks for r in c.text.split("\n")[2:]] == rows


def test_a_row_that_fits_alone_but_not_under_its_repeated_header_is_windowed(minilm):
    # Found on the fastapi docs (ru/uk tutorial/metadata.md): the repeated header pushed a
    # 505-token row to 525 tokens, over the hard maximum.
    header = "| " + " | ".join(WORDS) + " |\n|" + " --- |" * len(WORDS)
    words = (WORDS * 40)[: 510 - minilm.count("|  |")]
    row = "| " + " ".join(words) + " |"
    assert minilm.count(row) <= 520 < minilm.count(header + "\n" + row)
    filler = "\n".join(f"| {w} |" + " x |" * (len(WORDS) - 1) for w in WORDS)
    doc = structural(f"{header}\n{filler}\n{row}\n")
    assert len(doc.chunks) > 1
    assert all(chunk.token_count <= 520 for chunk in doc.chunks)


def test_unclosed_fence_is_closed_in_its_chunk():
    doc = structural("# T\n\ntext\n\n```python\ncode\nmore\n")
    assert not any(unclosed_fences(c.text) for c in doc.chunks)
    assert doc.chunks[-1].text.endswith("more\n```")


def test_tokenizer_name_and_version_are_recorded():
    doc = structural("# T\n\ntext\n")
    assert doc.tokenizer.startswith("hf:minilm@") and "/tokenizers-" in doc.tokenizer
    heuristic = structural("# T\n\ntext\n", tokenizer="heuristic")
    assert heuristic.tokenizer.startswith("words*1.3")
    assert heuristic.strategy_key != doc.strategy_key


def test_cache_key_names_every_parameter():
    assert strategy_key("structural") == "structural-v1-350-450-520-o15-minilm"
    assert list_strategies()["structural"] == "structural-v1-350-450-520-o15-minilm"
    assert strategy_key("structural", overlap_percent=10) == "structural-v1-350-450-520-o10-minilm"
    assert strategy_key("structural", tokenizer="heuristic").endswith("-heuristic")
    with pytest.raises(ValueError, match="target <= soft_max"):
        get_strategy("structural", target=500)
    with pytest.raises(ValueError, match="unknown option 'window'"):
        get_strategy("structural", window=3)


def test_links_carry_type_and_resolved_target():
    doc = structural(
        (FIXTURES / "structural_boundaries.md").read_bytes(),
        document_path="structural_boundaries.md",
        corpus_paths={"structural_other.md"},
    )
    links = [(link.url, link.link_type, link.target_document) for link in doc.chunks[-1].links]
    assert links == [
        ("structural_other.md#part", "internal", "structural_other.md"),
        ("https://example.com/x", "external", None),
    ]
    nested = structural(
        "# A\n\nSee [b](../b.md) and [c](c.md).\n",
        document_path="guide/a.md",
        corpus_paths={"b.md"},
    )
    assert [link.target_document for link in nested.chunks[0].links] == ["b.md", None]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"token_count": 521}, "over the hard maximum of 520"),
        ({"text": "  \n"}, "empty text"),
        ({"ordinal": 5}, "ordinal 5"),
        ({"headings_path": ()}, "no heading path"),
    ],
)
def test_a_failed_checklist_item_is_an_error(change, problem):
    strategy = get_strategy("structural")
    doc = parse(normalize("# T\n\nalpha\n\n## U\n\nbeta\n"))
    chunks = list(strategy.chunk(doc).chunks)
    strategy.validate(doc, chunks)  # the real output passes
    chunks[1] = dataclasses.replace(chunks[1], **change)
    with pytest.raises(ChunkingError) as caught:
        strategy.validate(doc, chunks)
    assert caught.value.code == CHUNKING_FAILED and problem in caught.value.message


def test_a_colon_fence_with_code_in_it_is_one_chunk():
    """VitePress' `::: details` (MyST's `:::{dropdown}`, Docusaurus' `:::tip`) holding a code
    block: the code block was a chunk of its own and the closing `:::` began the next chunk with
    the text after it, the opener left at the end of the chunk before."""
    details = (
        "::: details What gets uploaded\n"
        "The CLI hashes every file under `dist/` and uploads the changed ones.\n\n"
        "```js\nexport default { outDir: 'dist' }\n```\n"
        ":::"
    )
    doc = structural(f"## Publish\n\nRun `acme deploy`.\n\n{details}\n\nSee also the FAQ.\n")
    assert [(c.start_line, c.end_line) for c in doc.chunks] == [(1, 13)]


def test_a_piece_of_an_indented_container_starts_with_its_first_line():
    opener = '!!! warning "Stop the workers first"'
    paragraphs = [" ".join(f"w{i}x{j}" for j in range(60)) + "." for i in range(6)]
    long_line = " ".join(f"w{i}" for i in range(300))
    body = "\n\n".join(f"    {line}" for line in [*paragraphs, long_line])
    text = f"## Database\n\n{opener}\n\n{body}\n"
    options = {"target": 60, "soft_max": 80, "hard_max": 100, "overlap_percent": 15}
    document = check_invariants(text, "structural", **options)
    check_container_pieces(document, opener)
    pieces = [c for c in document.chunks if c.start_line > 3]  # after the container's first line
    assert len(pieces) > 2
    # each piece starts with it, then its first source line as indented (a line cut in pieces too)
    assert all(c.text.split("\n")[0] == opener for c in pieces)
    assert all(re.match(r"    \S", c.text.split("\n")[1]) for c in pieces)
    assert sum(c.start_line == c.end_line == 17 for c in pieces) > 1  # the long line's pieces


@pytest.mark.parametrize("thead", [True, False])
def test_an_html_table_is_cut_between_rows_and_each_piece_repeats_its_header(thead):
    """An HTML table over the hard maximum was cut between lines: a piece ended between a
    row's cells, the next started with rows and no header, and the table was left open. Its
    pieces hold whole rows, each starts with the table's head (as a markdown table's repeat its
    header rows) and ends with the tags closing it."""
    table = html_table(60, thead)
    document = check_invariants(f"## Signals\n\n{table[0]}\n\nDone.\n", "structural")
    assert len(document.chunks) > 4 and document.chunks[-1].text == "Done."
    check_html_table_pieces(document, table)


def test_a_piece_of_a_colon_fence_ends_with_its_closing_lines():
    """A piece cut inside a colon fence (a `:::{tab-item}` in a `::::{tab-set}`) left it
    open: it ends with the closing lines of the fences around it, innermost first, as a cut
    code fence is closed, so it reads as the container it is cut from."""
    paragraphs = [" ".join(f"w{i}x{j}" for j in range(60)) + "." for i in range(6)]
    openers = ["::::{tab-set}", ":::{tab-item} pip"]
    text = "\n".join(["## Install", "", *openers, "\n\n".join(paragraphs), ":::", "::::", ""])
    options = {"target": 60, "soft_max": 80, "hard_max": 100, "overlap_percent": 15}
    document = check_invariants(text, "structural", **options)
    assert len(document.chunks) > 4
    check_container_pieces(document, openers[0])
    assert all(c.text.endswith("\n:::\n::::") for c in document.chunks)
    assert all(c.text.split("\n")[:2] == openers for c in document.chunks[1:])


def test_no_overlap_is_taken_from_an_html_table():
    """The overlap repeated an HTML table's last "sentences" (seed 002 section 6) atop the
    prose after it: that chunk began inside a row (`</tr>\\n  <tr>\\n    <td>`), with no header.
    A table's cells are no sentences to repeat: the chunk starts with its own text."""
    table = html_table(6, False)[0]
    intro = " ".join(
        f"Signal number {i} is sent when the event number {i} happens." for i in range(6)
    )
    after = " ".join(f"The rarer signal {i} is listed in the manual page." for i in range(6))
    document = check_invariants(f"## Signals\n\n{intro}\n\n{table}\n\n{after}\n", "structural")
    first, second = document.chunks
    assert first.text.endswith(table) and second.text == after


def test_an_html_tables_header_is_kept_with_its_first_row_where_the_limit_holds_them():
    """A table's header is kept with its first row (no piece ends with a header and no row). The
    room kept in each piece to repeat the header above a later row is the first piece's own: it
    holds the header itself. Until chunking.REVISION 45 a header and first row over the budget
    left for the rows were cut between them, and the header was a piece of its own (74 tokens of
    an 80-token soft maximum: a piece of 30, then the row)."""
    table = html_table(2, False)
    options = {"target": 60, "soft_max": 80, "hard_max": 100, "overlap_percent": 15}
    document = check_invariants(f"## Signals\n\n{table[0]}\n", "structural", **options)
    check_html_table_pieces(document, table)
    assert [c.start_line for c in document.chunks] == [1, 12]  # the header and a row, a row
    assert all(c.token_count <= 80 for c in document.chunks)


_TERMY = [
    '<div class="termy">',
    "",
    "```console",
    "$ pip install fastapi",
    "---> 100%",
    "```",
    "",
    "</div>",
]


@pytest.mark.parametrize(
    "before, after",
    [
        (["## Install", "", "Install it:", ""], ["", "## Run", "", "Run it."]),  # FastAPI's pages
        (["## Install", ""], ["", *_TERMY, "", "Then run it."]),  # two in a row, no text between
        (["<details>", "<summary>The code</summary>", ""], ["", "</details>", "", "After."]),
    ],
)
def test_html_tags_wrapping_a_code_block_go_with_it(before, after):
    """FastAPI wraps its console examples in `<div class="termy">` … `</div>`: seed 002's rule
    that code stands alone made chunks of those tags alone (182 of FastAPI's chunks until
    chunking.REVISION 46: `</div>` 143, `<div class="termy">` 26, `</details>` 13), and left
    the tags unbalanced in the chunks around them. An HTML block of opening tags alone right
    before a fenced code block, and one of closing tags alone right after it, go with it; a
    line with text (`<summary>`) or a self-closing tag (an image) is no wrapper."""
    text = "\n".join(["# Guide", "", *before, *_TERMY, *after, ""])
    document = check_invariants(text, "structural")
    tags = re.compile(r"\s*</?[A-Za-z][^>]*>\s*")
    for chunk in document.chunks:
        own = [line for line in chunk.text.split("\n") if line.strip() and line[0] != "#"]
        assert not all(tags.fullmatch(line) for line in own), chunk.text
    code = [c.text for c in document.chunks if "```console" in c.text]
    firsts = [next(line for line in t.split("\n") if line.strip() and line[0] != "#") for t in code]
    assert code and set(firsts) == {'<div class="termy">'}, code
    assert all(t.count("<div") == t.count("</div>") for t in code), code
    assert any("<summary>" in c.text for c in document.chunks) == ("<details>" in before)


def test_no_piece_of_an_html_block_is_its_closing_tags_alone():
    """A notebook's DataFrame (a `<table>` in a `<div>`, as nbconvert writes it) over the hard
    maximum was cut between rows, and `structural`'s last piece was `</div>` alone: a chunk of
    no content. That piece starts at the last row instead, when both pieces fit."""
    head = ["<div>", "<style scoped>", "    .dataframe tbody tr th {vertical-align: top;}"]
    head += ["</style>", '<table border="1" class="dataframe">', "  <thead>"]
    head += ['    <tr style="text-align: right;">', "      <th></th>", "      <th>a</th>"]
    head += ["    </tr>", "  </thead>", "  <tbody>"]
    rows = [f"    <tr>\n      <th>{i}</th>\n      <td>{i * 3}</td>\n    </tr>" for i in range(60)]
    html = "\n".join([*head, *rows, "  </tbody>", "</table>", "</div>"])
    document = check_invariants(f"## Output\n\n{html}\n", "structural")
    closing = re.compile(r"\s*(?:</[A-Za-z]\w*>\s*)*")
    assert len(document.chunks) > 3
    assert not [c.text for c in document.chunks if closing.fullmatch(c.text)]
    last_row = "    <td>177</td>\n    </tr>\n  </tbody>\n</table>\n</div>"
    assert document.chunks[-1].text.endswith(last_row)
