"""The `hierarchical` strategy (seed 004): content types, atomic units, character-sized overlap,
hierarchy paths, enhanced content and symmetric cross-references."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from chunking import CHUNKING_FAILED, ChunkingError, chunk_source, list_strategies, strategy_key
from chunking.blocks import parse, unclosed_fences
from chunking.hierarchical import BAND
from chunking.normalize import normalize
from chunking.strategy import get_strategy
from tests.chunking_support import (
    check_container_pieces,
    check_html_table_pieces,
    check_invariants,
    html_table,
)

FIXTURES = Path(__file__).parent / "fixtures" / "markdown"


def hierarchical(text: str, **options):
    return chunk_source(text, strategy="hierarchical", **options)


@pytest.fixture(scope="module")
def types_doc():
    return hierarchical((FIXTURES / "hierarchical_types.md").read_bytes())


def by_path(doc, path: str):
    return next(c for c in doc.chunks if c.extras["formatted_path"] == path)


def test_each_content_type_is_classified(types_doc):
    assert [(c.extras["formatted_path"], c.content_type) for c in types_doc.chunks] == [
        ("Pydantic", "introduction"),
        ("Pydantic > Installation", "code_example"),
        ("Pydantic > Options", "table_based"),
        ("Pydantic > See also", "link_list"),
        ("Pydantic > Concepts", "descriptive_text"),
        ("Pydantic > Concepts > Fields", "descriptive_text"),
        ("Pydantic > Concepts > Validators", "descriptive_text"),
        ("Pydantic > Mixed", "default"),
        # "## Examples" has no content of its own, so it has no chunk (seed 004 skips it).
        ("Pydantic > Examples > Fields", "descriptive_text"),
    ]


def test_title_and_first_section_rules_for_introduction():
    assert hierarchical("Some words before any heading.\n").chunks[0].content_type == "introduction"
    later = hierarchical("# A\n\nintro text\n\n## Overview\n\nMore text here.\n\n## B\n\nText.\n")
    assert [c.content_type for c in later.chunks] == [
        "introduction",
        "introduction",
        "descriptive_text",
    ]


def test_an_admonition_is_prose_and_a_content_tab_of_code_is_code():
    """A section of MkDocs admonitions was code_example (kept whole, no overlap): its body read
    as indented code. An admonition's lines weigh as their kind: text as prose, fences as code."""
    tip = "!!! tip\n\n    Keep each project in its own virtual environment, always.\n"
    tab = '=== "pip"\n\n    ```sh\n    pip install mkdocs-material\n    ```\n'
    doc = hierarchical(f"# A\n\nIntro.\n\n## Tip\n\n{tip}\n## Install\n\n{tab}")
    assert [c.content_type for c in doc.chunks] == [
        "introduction",
        "descriptive_text",
        "code_example",
    ]


def test_a_list_without_links_is_descriptive_and_mostly_links_is_a_link_list():
    plain = hierarchical("# A\n\nIntro.\n\n## Steps\n\n- first step\n- second step\n- third\n")
    assert plain.chunks[1].content_type == "descriptive_text"
    links = hierarchical("# A\n\nIntro.\n\n## Refs\n\n- [a](a.md)\n- [b](b.md)\n- plain\n")
    assert links.chunks[1].content_type == "link_list"


def test_hierarchy_path_levels_and_enhanced_content(types_doc):
    chunk = by_path(types_doc, "Pydantic > Concepts > Fields")
    assert chunk.headings_path == ("Pydantic", "Concepts", "Fields")
    assert chunk.header_path == "# Pydantic > ## Concepts > ### Fields"
    assert chunk.title == "Fields"
    assert chunk.extras["hierarchy_levels"] == [1, 2, 3]
    assert chunk.extras["header_level"] == 3
    assert chunk.text == "### Fields\n\nFields carry types and defaults."
    assert chunk.extras["enhanced_content"] == (
        "Context: Pydantic > Concepts > Fields\n\n### Fields\n\nFields carry types and defaults."
    )


def test_a_front_matter_title_heads_paths_and_enhanced_content_of_a_page_without_h1():
    """A page titled only in its front matter (Docusaurus' rendered H1): seed 004's paths,
    levels and enhanced_content start with the title; chunk text, content types and cross
    references are those of the untitled page (the title is a heading of the paths, not a
    section: the sections under it have no parent section, as before)."""
    body = "Intro.\n\n## Setup\n\nSet it up.\n\n## Usage\n\nUse it.\n"
    titled = hierarchical("---\ntitle: Installing the CLI\n---\n" + body).chunks
    untitled = hierarchical("---\nlabel: Installing the CLI\n---\n" + body).chunks
    assert [c.extras["formatted_path"] for c in titled] == [
        "Installing the CLI",
        "Installing the CLI > Setup",
        "Installing the CLI > Usage",
    ]
    assert [c.extras["hierarchy_levels"] for c in titled] == [[1], [1, 2], [1, 2]]
    assert titled[1].extras["enhanced_content"] == (
        "Context: Installing the CLI > Setup\n\n## Setup\n\nSet it up."
    )
    for field in ("text", "content_type", "start_line", "end_line"):
        assert [getattr(c, field) for c in titled] == [getattr(c, field) for c in untitled]
    assert [c.extras["related_chunks"] for c in titled] == [
        c.extras["related_chunks"] for c in untitled
    ]


def test_cross_references_follow_seed_004_and_are_symmetric(types_doc):
    chunks = types_doc.chunks
    related = {c.ordinal: set(c.extras["related_chunks"]) for c in chunks}
    for ordinal, others in related.items():
        assert ordinal not in others
        assert all(ordinal in related[other] for other in others)
    fields = by_path(types_doc, "Pydantic > Concepts > Fields").ordinal
    other_fields = by_path(types_doc, "Pydantic > Examples > Fields").ordinal
    concepts = by_path(types_doc, "Pydantic > Concepts").ordinal
    validators = by_path(types_doc, "Pydantic > Concepts > Validators").ordinal
    assert related[fields] == {other_fields, concepts, validators}  # title, parent, sibling
    assert related[other_fields] == {fields}  # its parent "Examples" has no chunk
    chunk = chunks[fields]
    assert chunk.extras["related_sections"] == [
        chunks[i].extras["formatted_path"] for i in chunk.extras["related_chunks"]
    ]


def test_descriptive_text_is_cut_between_paragraphs_with_a_character_overlap():
    paragraphs = [
        " ".join(f"Paragraph {p} sentence {s} explains one idea." for s in range(7))
        for p in range(12)
    ]
    doc = hierarchical("# Guide\n\n## Concepts\n\n" + "\n\n".join(paragraphs) + "\n")
    chunks = [c for c in doc.chunks if c.extras["formatted_path"] == "Guide > Concepts"]
    assert len(chunks) > 3
    assert all(c.content_type == "descriptive_text" for c in chunks)
    for before, after in zip(chunks, chunks[1:], strict=False):
        overlap = after.text.split("\n\n")[0]
        assert 0 < len(overlap) <= 200  # the unit is characters: whole sentences here
        assert before.text.endswith(overlap)
        assert overlap.startswith("Paragraph ") and overlap.endswith("idea.")
        assert after.text[len(overlap) :].strip().startswith("Paragraph ")
        # max_chunk_size includes the overlap (issue 10 B8: they used to reach 1,035).
        assert len(after.text) <= 1000 and len(before.text) <= 1000
        # A continuation has no heading line, so enhanced content adds it after the context.
        assert after.extras["enhanced_content"] == (
            "Context: Guide > Concepts\n\n## Concepts\n\n" + after.text
        )
    assert [p for p in paragraphs if not any(p in c.text for c in chunks)] == []


def test_overlap_falls_back_to_whole_words_without_a_sentence_end():
    paragraphs = [" ".join(f"p{p}w{w}" for w in range(60)) for p in range(8)]
    doc = hierarchical("## Words\n\n" + "\n\n".join(paragraphs) + "\n")
    assert len(doc.chunks) > 1
    for before, after in zip(doc.chunks, doc.chunks[1:], strict=False):
        overlap = after.text.split("\n\n")[0]
        assert 0 < len(overlap) <= 200 and before.text.endswith(" " + overlap)
        assert len(after.text) <= 1000


def test_overlap_is_never_taken_from_code():
    prose = " ".join(f"Word{i} filler text for size." for i in range(40))
    code = "```python\n" + "\n".join(f"x_{i} = {i}" for i in range(30)) + "\n```"
    doc = hierarchical(f"## Mixed\n\n{prose}\n\n{code}\n\n{prose}\n\n{code}\n\n{prose}\n")
    assert doc.chunks[0].content_type == "descriptive_text" and len(doc.chunks) > 2
    for chunk in doc.chunks:
        assert not unclosed_fences(chunk.text)
        assert not chunk.text.startswith("x_")


def test_the_overlap_takes_the_sentences_after_a_code_block_near_the_end():
    # A short code block within the last 200 characters before a cut: the overlap began at the
    # earliest sentence there, which holds the code, and so there was none, though the
    # sentences after the code would do.
    blocks = [
        f"```py\nprint({i})  # code line that is long enough\n```"
        if i % 3 == 0
        else f"Prose sentence number {i} is here and talks. Another one follows it here."
        for i in range(40)
    ]
    doc = hierarchical("# D\n\n## S\n\n" + "\n\n".join(blocks) + "\n")
    first, second = doc.chunks[0], doc.chunks[1]
    assert first.content_type == second.content_type == "descriptive_text"
    assert first.text.endswith(
        "Prose sentence number 10 is here and talks. Another one follows it here."
    )
    assert second.text.startswith("Another one follows it here.\n\nProse sentence number 11 ")
    assert second.start_line == first.end_line and len(second.text) <= 1000


def test_atomic_code_stays_whole_up_to_the_hard_maximum_then_reopens_its_fence():
    code = [f"result_{i} = transform(data, step={i})" for i in range(70)]
    whole = hierarchical("# A\n\ntext\n\n## Example\n\n```python\n" + "\n".join(code) + "\n```\n")
    example = [c for c in whole.chunks if c.title == "Example"]
    assert 1000 < len(example[0].text) <= 4000 and len(example) == 1
    assert example[0].content_type == "code_example"

    huge = [f"result_{i} = transform(data, step={i})" for i in range(400)]
    doc = hierarchical("## Example\n\n```python\n" + "\n".join(huge) + "\n```\n")
    assert len(doc.chunks) > 3
    body = []
    for chunk in doc.chunks:
        assert len(chunk.text) <= 4000 and not unclosed_fences(chunk.text)
        lines = chunk.text.removeprefix("## Example\n\n").split("\n")
        assert lines[0] == "```python" and lines[-1] == "```"
        body += lines[1:-1]
    assert body == huge


@pytest.mark.parametrize(
    ("rows", "sentences", "kind"), [(120, 0, "table_based"), (30, 120, "descriptive_text")]
)
def test_a_table_cut_at_the_top_of_its_section_starts_with_the_section_heading(
    rows, sentences, kind
):
    table = "\n".join(f"| row {i} some cell text here | value {i} text |" for i in range(rows))
    prose = "".join(f"\n\nSentence {i} of the prose after it." for i in range(sentences))
    doc = hierarchical(f"# Doc\n\nIntro.\n\n## Big table\n\n| a | b |\n|---|---|\n{table}{prose}\n")
    first, second = doc.chunks[1:3]
    assert first.content_type == kind
    assert first.text.startswith("## Big table\n\n| a | b |\n|---|---|\n| row 0 ")
    assert first.start_line == 5 and len(first.text) <= 4000
    assert first.extras["enhanced_content"] == "Context: Doc > Big table\n\n" + first.text
    assert second.text.startswith("| a | b |\n|---|---|\n| row ")
    assert sum(c.text.count("## Big table") for c in doc.chunks) == 1


@pytest.mark.parametrize(
    ("heading", "block"),
    [
        ("## Steps", "- " + " ".join(f"step{i}" for i in range(200)) + "\n- second item"),
        ("## Quoted", "> " + " ".join(f"word{i}." for i in range(200))),
        ("## What is it?", " ".join(f"word{i}" for i in range(200))),
        ("## Near", "- " + " ".join(f"s{i:03d}" for i in range(159)) + "\n\n" + "More. " * 60),
    ],
)
def test_a_section_heading_stays_with_the_first_piece_of_a_long_first_line(heading, block):
    # The first line (or sentence) does not fit beside the heading: it is cut with the heading
    # in its first piece, not left as a chunk holding only the heading then repeated as overlap.
    doc = hierarchical(f"# Doc\n\nIntro.\n\n{heading}\n\n{block}\n")
    chunks = doc.chunks[1:]
    assert len(chunks) > 1 and all(len(c.text) <= 1000 for c in chunks)
    assert chunks[0].text.startswith(heading + "\n\n" + block[:8])
    assert chunks[0].start_line == 5
    assert sum(c.text.count(heading) for c in chunks) == 1


@pytest.mark.parametrize("intro", ["", "Intro.\n\n## Long\n\n"])
def test_a_line_longer_than_a_chunk_is_cut_between_words(intro):
    # Atomic (the introduction, no overlap: 4000) or descriptive (overlap: 800 then 1000); a
    # cut at an exact character count split words, and a word split in an atomic chunk was in
    # no chunk whole.
    words = [f"alpha{i}beta" for i in range(500)]
    doc = hierarchical(f"# Doc\n\n{intro}" + " ".join(words) + "\n")
    pieces = [c.text.split("\n\n")[-1].split() for c in doc.chunks if "alpha" in c.text]
    assert len(pieces) > 1
    assert all(set(piece) <= set(words) for piece in pieces)
    assert set().union(*pieces) == set(words)


@pytest.mark.parametrize("run", ["A" * 9000, "这是没有空格的中文" * 1000])
def test_a_word_longer_than_a_chunk_under_a_heading_keeps_the_heading_whole(run):
    """A run without spaces (a base64 data URI, CJK text) right under a heading was cut after
    the space of `# `: a chunk of `#` alone, the title moved to the next chunk's first line."""
    doc = hierarchical(f"# Title\n\n![img](data:image/png;base64,{run})\n")
    assert doc.chunks[0].text.startswith("# Title\n\n![img](data:image/png;base64,")
    assert [len(c.text) for c in doc.chunks][:2] == [4000, 4000]


def test_headings_without_a_title_are_left_out_of_paths_and_title_groups():
    doc = hierarchical("# A\n\n##\n\ntext\n\n# B\n\n##\n\nmore\n")
    for chunk, title in zip(doc.chunks, "AB", strict=True):
        assert chunk.extras["formatted_path"] == title  # seed 004: `if p.get("title")`
        assert chunk.extras["hierarchy_levels"] == [1]
        assert chunk.extras["enhanced_content"].startswith(f"Context: {title}\n\n##\n\n")
        assert chunk.extras["related_chunks"] == []  # an empty title groups nothing


def test_a_later_piece_gets_its_heading_by_level_and_title_in_its_context():
    # Seed 004 adds `"#" * header_level + " " + title` before a piece without its heading
    # line: the heading as written brought the mkdocs anchor into the embedded text
    # ('### Add types { #add-types }', 267 of FastAPI en's 2,232 chunks).
    body = "\n\n".join(f"Paragraph {i} explains one idea in a sentence or two." for i in range(40))
    doc = hierarchical(f"# Top {{ #top }}\n\nIntro.\n\n## Part {{ #part }}\n\n{body}\n")
    later = [c for c in doc.chunks if c.title == "Part"][1:]
    assert later
    for chunk in later:
        assert chunk.context == "Context: Top > Part\n\n## Part\n\n"
        assert chunk.extras["enhanced_content"] == chunk.context + chunk.text


def test_sibling_and_title_groups_are_banded_and_stay_symmetric():
    sections = "\n\n".join(f"## Part {i}\n\n### Notes\n\nText {i}." for i in range(60))
    doc = hierarchical("# Book\n\nIntro.\n\n" + sections + "\n")
    related = {c.ordinal: set(c.extras["related_chunks"]) for c in doc.chunks}
    assert all(o in related[r] for o, rs in related.items() for r in rs)
    notes = [c for c in doc.chunks if c.title == "Notes"]
    middle = notes[30]
    same_title = {o for o in related[middle.ordinal] if doc.chunks[o].title == "Notes"}
    assert len(same_title) == 2 * BAND
    assert max(len(rs) for o, rs in related.items() if o != 0) <= 2 * BAND + 2


def test_cache_key_and_options():
    assert strategy_key("hierarchical") == "hierarchical-1000-200-4000"
    assert list_strategies()["hierarchical"] == "hierarchical-1000-200-4000"
    assert strategy_key("hierarchical", overlap_size=100) == "hierarchical-1000-100-4000"
    with pytest.raises(ValueError, match="overlap_size < max_chunk_size <= hard_max_size"):
        get_strategy("hierarchical", max_chunk_size=4100)
    get_strategy("hierarchical", max_chunk_size=3900)  # the overlap is inside max_chunk_size


def test_chunk_over_the_character_hard_maximum_fails_the_checklist():
    strategy = get_strategy("hierarchical")
    doc = parse(normalize("# T\n\nalpha\n"))
    chunks = list(strategy.chunk(doc).chunks)
    chunks[0] = dataclasses.replace(chunks[0], text="x" * 4001)
    with pytest.raises(ChunkingError) as caught:
        strategy.validate(doc, chunks)
    assert caught.value.code == CHUNKING_FAILED and "4001 characters" in caught.value.message


@pytest.mark.parametrize(
    ("text", "piece"),
    [
        # a sentence that, cut out of its line, opens a fence
        ("One. ~~~ two three four five six seven eight", "~~~ two three four five six seven\n~~~"),
        # two sentences that do: halved between them, not cut between words
        (
            "Zero one two three four five six seven. ~~~ a. Eight nine ten eleven twelve!!",
            "Eight nine ten eleven twelve!!",
        ),
        # a closing line with container markers, longer than the room kept for a marker
        ("a" * 31 + " 1) > - ~~~ word word word word", "1) > - ~~~ word word word\n   >   ~~~"),
        # an overlap that opens a fence in a quote
        ("x\n\n## B\n\nOne. > ~~~ two three. Four five six seven eight.", None),
        # an overlap whose room left out the spaces before its piece
        ("x\n\n## B\n\n" + "a" * 13 + ".   " + "b" * 19 + ".", None),
    ],
)
def test_a_chunk_stays_within_a_small_limit_with_the_line_that_closes_its_fence(text, piece):
    """A piece cut inside a line can open a fence, and gets a closing line (`spans.balanced`)
    that packing, cutting and the overlap did not count; the overlap's room also left out the
    spaces before its piece. With max_chunk_size = hard_max_size each failed the document with
    CHUNKING_FAILED (found by a random-markdown hunt)."""
    doc = hierarchical(text, max_chunk_size=40, overlap_size=20, hard_max_size=40)
    assert all(len(c.text) <= 40 and not unclosed_fences(c.text) for c in doc.chunks)
    assert piece is None or piece in [c.text for c in doc.chunks]


def test_lines_packed_again_inside_an_html_block_are_read_alone():
    """Lines of an HTML block read alone are markdown: "- a" then "    ~~~ b..." is a list item
    that opens a fence, though neither line alone opens one. Line cutting kept them apart (the
    closing line took them past the limit); block packing joined them again, as
    `spans.balanced` parsed again only a span cut inside a line (found by a random-markdown
    hunt, 10 documents)."""
    text = "<pre>\n" + "c" * 36 + "\n\n- a\n    ~~~ " + "b" * 25
    doc = hierarchical(text, max_chunk_size=40, overlap_size=20, hard_max_size=40)
    assert all(len(c.text) <= 40 and not unclosed_fences(c.text) for c in doc.chunks)
    assert [c.text for c in doc.chunks][-2:] == ["- a", "    ~~~ " + "b" * 25]


def test_the_overlap_never_comes_before_a_piece_with_a_closing_line():
    """A piece cut before a line's `~~~` opens a fence alone and gets a closing line; an
    overlap that brought back the line's start ("- one two") kept that closing line, which
    then closed nothing and opened a fence (found by a random-markdown hunt)."""
    doc = hierarchical(
        "## Title\n- one two ~~~ three four", max_chunk_size=30, overlap_size=10, hard_max_size=30
    )
    assert [c.text for c in doc.chunks] == ["## Title\n- one two", "~~~ three four\n~~~"]


def test_a_piece_of_an_indented_container_starts_with_its_first_line():
    opener = '=== "pip"'
    paragraphs = [" ".join(f"w{i}x{j}" for j in range(60)) + "." for i in range(6)]
    body = "\n\n".join(f"    {line}" for line in paragraphs)
    text = f"## Install\n\n{opener}\n\n{body}\n"
    options = {"max_chunk_size": 300, "overlap_size": 60, "hard_max_size": 600}
    document = check_invariants(text, "hierarchical", **options)
    check_container_pieces(document, opener)
    pieces = [c for c in document.chunks if c.start_line > 3]  # after the container's first line
    assert len(pieces) > 2
    assert all(c.text.split("\n")[:1] == [opener] for c in pieces)
    assert all(c.text.split("\n")[1].startswith("    w") for c in pieces)


def test_a_piece_of_a_colon_fence_starts_with_its_first_line_and_no_indentation():
    """A piece cut inside a colon fence (`:::{note}`) started with its body: it begins with the
    fence's first line, then its text where a line is cut, not indented as an MkDocs
    container's body is (4 columns in: indented code in a colon fence)."""
    paragraphs = [" ".join(f"w{i}x{j}" for j in range(60)) + "." for i in range(6)]
    body = "\n\n".join(paragraphs)
    text = f"## Install\n\n:::{{note}}\n{body}\n:::\n"
    options = {"max_chunk_size": 300, "overlap_size": 60, "hard_max_size": 600}
    document = check_invariants(text, "hierarchical", **options)
    pieces = [c for c in document.chunks if c.start_line > 3]  # after the fence's first line
    assert len(pieces) > 2
    assert all(c.text.split("\n")[:1] == [":::{note}"] for c in pieces)
    assert all(c.text.split("\n")[1].startswith("w") for c in pieces)
    # and each ends with its closing line (until 2026-11-30 all but the last left it open)
    assert all(c.text.endswith("\n:::") for c in document.chunks)
    check_container_pieces(document, ":::{note}")


@pytest.mark.parametrize("thead", [True, False])
def test_an_html_table_is_cut_between_rows_and_each_piece_repeats_its_header(thead):
    """An HTML table over `hard_max_size` was cut between lines: a piece ended between a row's
    cells, the next started with rows and no header, and the table was left open. Its pieces
    hold whole rows, each starts with the table's head (as a markdown table's repeat its header
    rows) and ends with the tags closing it."""
    table = html_table(80, thead)
    document = check_invariants(f"## Signals\n\n{table[0]}\n", "hierarchical")
    assert len(document.chunks) > 2
    check_html_table_pieces(document, table)
    assert all(len(c.text) <= 4000 for c in document.chunks)


def test_no_overlap_is_taken_from_an_html_table():
    """The overlap repeated an HTML table's last "sentences" atop the piece after it: that
    piece began inside a row (`<td>…</td>\\n  </tr>\\n  <tr>`), with no header. As from a
    markdown table, no overlap comes from an HTML table's lines."""
    table = html_table(6, False)[0]
    intro = " ".join(f"Signal {i} is sent when the event number {i} happens." for i in range(12))
    after = " ".join(f"The rarer signal {i} is listed in the manual page." for i in range(12))
    document = check_invariants(f"## Signals\n\n{intro}\n\n{table}\n\n{after}\n", "hierarchical")
    assert len(document.chunks) == 3 and document.chunks[-1].text == after
    assert document.chunks[1].text == table


@pytest.mark.parametrize("pad", [40, 43, 55])  # no brace, one, four after the closing line
def test_a_code_blocks_last_piece_is_never_its_closing_brackets_alone(pad):
    """A code block cut between lines left its last piece as closing braces alone (`}` lines
    and the fence's closing line; FastAPI's advanced/additional-responses.md, a JSON schema) or
    an empty code block (its closing line alone): that piece starts at the last line before
    them that holds more, here `"id": 1`."""
    opened = "\n".join("  " * depth + f'"k{depth}": {{' for depth in range(1, 5))
    closed = ["  " * depth + "}" for depth in range(4, -1, -1)]
    text = (
        f'## Response\n\n```json\n{{\n{opened}\n        "name": "{"x" * pad}",\n'
        f'        "id": 1\n' + "\n".join(closed) + "\n```\n"
    )
    doc = check_invariants(
        text, "hierarchical", max_chunk_size=100, overlap_size=20, hard_max_size=120
    )
    assert all(len(c.text) <= 120 for c in doc.chunks)
    assert doc.chunks[-1].text == '```json\n        "id": 1\n' + "\n".join(closed) + "\n```"
    assert doc.chunks[-2].text.endswith(f'"name": "{"x" * pad}",\n```')


def test_a_sentence_opening_a_fence_in_a_section_near_the_hard_maximum_stays_within_it():
    """README's old known limitation at the default sizes: a piece of an atomic section packed
    to within 4 characters of 4,000 whose first sentence starts with `~~~` got its closing line
    past the hard maximum, and the document failed CHUNKING_FAILED (until d75b5f6)."""
    body = ("abcd " * 800)[:3992] + "."
    text = "# T\n\n" + "Alpha " * 330 + "end. ~~~ " + body + " Tail."
    doc = hierarchical(text)
    assert [c.content_type for c in doc.chunks] == ["introduction"] * len(doc.chunks)
    assert all(len(c.text) <= 4000 and not unclosed_fences(c.text) for c in doc.chunks)
