"""build_topic: seed 000 index.json fields, baselines, keywords, prompts, titles, topic-spec."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import replace
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from indexing_support import make_document, ranked_vectors, source, topic_input

from chunking import chunk_source
from indexing import (
    IndexSettings,
    Keyword,
    SourceInput,
    build_topic,
    directory_index,
    group_sources,
    index_tree,
    nearest_keywords_path,
    parse_keywords,
    parse_questions,
    set_child_topics,
    simhash64,
)
from indexing.build import DEFAULT_TECHNICAL_TITLES, is_technical_title
from indexing.hal import corpus_links, directory_title
from indexing.keywords import (
    _ASCII_FOLD,
    _WORD,
    keyword_matcher,
    keyword_pattern,
    keywords_in,
    no_keywords,
)
from indexing.paths import chunk_file, is_chunk_file
from indexing.questions import no_questions

SCHEMA = json.loads((Path(__file__).parent / "schemas" / "index.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
TOPIC = "libraries/stj"
SOURCE = f"{TOPIC}/golden-reference.md"


def sections(count: int, second: str = "Quick Reference") -> list[tuple[str, str]]:
    names = ["Overview", second] + [f"Part {i}" for i in range(2, count)]
    return [(name, f"Text of {name.lower()}.") for name in names]


def index_of(output, topic=TOPIC) -> dict:
    doc = json.loads(output.files[f"{topic}/index.json" if topic else "index.json"])
    VALIDATOR.validate(doc)
    return doc


def test_seed_example_validates_against_the_schema():
    # The index.json example of seed 000, verbatim apart from the elided items.
    example = {
        "id": "libraries/system-text-json-source-generation",
        "title": "System.Text.Json Source Generation",
        "_links": {
            "self": {"href": "/libraries/system-text-json-source-generation/index.json"},
            "parent": {"href": "/libraries/index.json"},
        },
        "_embedded": {
            "topics": [],
            "chunks": {
                "golden-reference": {
                    "source": "golden-reference.md",
                    "count": 12,
                    "baseline_conceptual": 0,
                    "baseline_technical": 1,
                    "stripe_order": [1, 5, 9, 2, 6, 10, 3, 7, 11, 4, 8, 12],
                    "stripe_order_technical": [2, 7, 11, 3, 8, 12, 4, 9, 5, 10, 6],
                    "items": [
                        {
                            "index": 0,
                            "href": "_chunks/golden-reference-0.md",
                            "title": "Overview",
                            "is_code": False,
                            "similarity_conceptual": 1.0,
                            "similarity_technical": 0.75,
                            "prompt_hashes": [18446744073709551615, 12345678901234567890],
                            "keywords": [{"name": "source generation", "score": 7}],
                        },
                        {
                            "index": 1,
                            "href": "_chunks/golden-reference-1.md",
                            "title": "Quick Reference",
                            "is_code": True,
                            "similarity_conceptual": 0.82,
                            "similarity_technical": 1.0,
                            "keywords": [{"name": "naming policies", "score": 4}],
                        },
                    ],
                }
            },
        },
    }
    VALIDATOR.validate(example)
    del example["_embedded"]["chunks"]["golden-reference"]["stripe_order_technical"]
    with pytest.raises(jsonschema.ValidationError):
        VALIDATOR.validate(example)


def test_dual_baseline_entry_matches_seed_layout():
    scores = [1.0, 0.82] + [0.9 - i / 100 for i in range(2, 13)]
    vectors = ranked_vectors(scores)
    vectors[:, 2] = np.arange(13) / 13  # give the technical baseline its own direction
    out = build_topic(
        topic_input(TOPIC, [source(SOURCE, sections(13), vectors, is_code={1})]), IndexSettings()
    )
    doc = index_of(out)
    assert list(doc) == ["id", "title", "_links", "_embedded"]
    assert doc["_links"] == {
        "self": {"href": "/libraries/stj/index.json"},
        "parent": {"href": "/libraries/index.json"},
    }
    entry = doc["_embedded"]["chunks"]["golden-reference"]
    assert list(entry) == [
        "source", "count", "baseline_conceptual", "baseline_technical",
        "stripe_order", "stripe_order_technical", "items",
    ]  # fmt: skip
    assert entry["source"] == "golden-reference.md" and entry["count"] == 13
    assert entry["baseline_conceptual"] == 0 and entry["baseline_technical"] == 1
    assert sorted(entry["stripe_order"]) == list(range(1, 13))
    assert sorted(entry["stripe_order_technical"]) == list(range(2, 13))
    item0, item1 = entry["items"][:2]
    assert list(item0) == [
        "index", "href", "title", "is_code", "similarity_conceptual", "similarity_technical",
        "keywords",
    ]  # fmt: skip
    # Named by the first 16 hex digits of the SHA-256 of the file's text, then numbered.
    digest = hashlib.sha256(b"## Overview\n\nText of overview.").hexdigest()[:16]
    assert item0["href"] == f"_chunks/golden-reference-{digest}-0.md"
    assert item0["title"] == "Overview"
    assert item0["similarity_conceptual"] == 1.0 and item1["similarity_technical"] == 1.0
    assert item1["is_code"] is True and item0["is_code"] is False
    # The published similarities reproduce the published orders.
    conceptual = [i["similarity_conceptual"] for i in entry["items"]]
    ranked = sorted(range(1, 13), key=lambda i: (-conceptual[i], i))
    assert entry["stripe_order"] == [ranked[p] for s in range(4) for p in range(s, 12, 4)]
    technical = [i["similarity_technical"] for i in entry["items"]]
    ranked_t = sorted(range(2, 13), key=lambda i: (-technical[i], i))
    assert entry["stripe_order_technical"] == [
        ranked_t[p] for s in range(4) for p in range(s, 11, 4)
    ]
    # Chunk files hold the chunk text.
    assert (
        out.files[f"{TOPIC}/{item1['href']}"] == b"## Quick Reference\n\nText of quick reference."
    )


@pytest.mark.parametrize("second", ["Installation", "Quick start", "Reference links"])
def test_single_baseline_omits_technical_fields(second):
    vectors = ranked_vectors([1.0] + [0.9 - i / 100 for i in range(1, 9)])
    out = build_topic(
        topic_input(TOPIC, [source(SOURCE, sections(9, second), vectors)]), IndexSettings()
    )
    entry = index_of(out)["_embedded"]["chunks"]["golden-reference"]
    assert list(entry) == ["source", "count", "baseline_conceptual", "stripe_order", "items"]
    assert all("similarity_technical" not in item for item in entry["items"])
    assert entry["stripe_order"] == [1, 4, 7, 2, 5, 8, 3, 6]  # 9 chunks: factor 3


def test_a_previous_index_that_is_no_index_of_the_topic_is_named():
    # It was a bare JSONDecodeError, a KeyError '_embedded' or a TypeError from the inside.
    vectors = ranked_vectors([1.0, 0.9])
    sources = [source(SOURCE, sections(2, "Installation"), vectors)]
    good = build_topic(topic_input(TOPIC, sources), IndexSettings()).files[f"{TOPIC}/index.json"]
    assert build_topic(topic_input(TOPIC, sources, previous=good), IndexSettings())
    for previous, problem in [
        (b"{not json", "not JSON"),
        (b'{"title": "x"}', r"not an mdindex index \(no _embedded object\)"),
        (b"[1]", "not an mdindex index"),
        (good.replace(f'"id": "{TOPIC}"'.encode(), b'"id": "other"'), "the index of 'other'"),
    ]:
        with pytest.raises(ValueError, match=f"topic '{TOPIC}': its previous_index is {problem}"):
            build_topic(topic_input(TOPIC, sources, previous=previous), IndexSettings())


@pytest.mark.parametrize(
    "second",
    ["API Reference", "quick reference card", "Cheat sheet", "Quick-Reference", "API: reference"],
)
def test_technical_titles_match_case_insensitively(second):
    vectors = ranked_vectors([1.0, 0.5, 0.4])
    out = build_topic(
        topic_input(TOPIC, [source(SOURCE, sections(3, second), vectors)]), IndexSettings()
    )
    assert index_of(out)["_embedded"]["chunks"]["golden-reference"]["baseline_technical"] == 1


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("Quick Refresh of Concepts", False),  # "quick ref" is a phrase of whole words
        ("Quick-Reference", True),
        ("The API-reference, in short", True),
        ("Cheat sheets", False),
        ("cheat_sheet", True),
        ("Cheat Sheet!", True),
        ("Rapid API references", False),
    ],
)
def test_technical_titles_match_whole_words_ignoring_case_and_punctuation(title, expected):
    assert is_technical_title(title, DEFAULT_TECHNICAL_TITLES) is expected


def test_technical_title_list_is_configurable():
    vectors = ranked_vectors([1.0, 0.5, 0.4])
    settings = IndexSettings(technical_titles=("Syntax",))
    out = build_topic(
        topic_input(TOPIC, [source(SOURCE, sections(3, "Syntax at a glance"), vectors)]), settings
    )
    assert "baseline_technical" in index_of(out)["_embedded"]["chunks"]["golden-reference"]
    out = build_topic(topic_input(TOPIC, [source(SOURCE, sections(3), vectors)]), settings)
    assert "baseline_technical" not in index_of(out)["_embedded"]["chunks"]["golden-reference"]


def test_keywords_from_table_and_list_are_matched_on_word_boundaries():
    words = parse_keywords(
        "# Keywords\n\n| Keyword | Score |\n|---|---:|\n"
        "| source generation | 7 |\n| `JSON` | 2.5 |\n\n"
        "Other terms:\n\n- compile-time: 9\n- C#: 3\n- not a keyword line\n- API: 1\n"
    )
    assert words == [
        Keyword("source generation", 7), Keyword("JSON", 2.5), Keyword("compile-time", 9),
        Keyword("C#", 3), Keyword("API", 1),
    ]  # fmt: skip
    body = [
        ("Overview", "Source\ngeneration happens at compile-time for json."),
        ("Details", "JSONPath and APIs and C#9 are not keywords; C# is."),
    ]
    out = build_topic(
        topic_input(TOPIC, [source(SOURCE, body, ranked_vectors([1.0, 0.3]))], keywords=words),
        IndexSettings(),
    )
    items = index_of(out)["_embedded"]["chunks"]["golden-reference"]["items"]
    assert items[0]["keywords"] == [
        {"name": "source generation", "score": 7},
        {"name": "JSON", "score": 2.5},
        {"name": "compile-time", "score": 9},
    ]
    assert items[1]["keywords"] == [{"name": "C#", "score": 3}]


def test_keyword_table_with_bad_score_is_a_clear_error():
    """The row is named with its line in the file (a writer's editor goes to a line; a report's
    `line` and a CI annotation's `line=` are read from it, since 2026-11-30), before the
    keyword's own text; a table further down, in a list, is counted from the file's top."""
    with pytest.raises(ValueError, match=r"row 2 \(line 4\): score 'high' of 'b' is not a number"):
        parse_keywords("| keyword | score |\n|---|---|\n| a | 1 |\n| b | high |\n")
    later = "# Words\n\n- x: 1\n\n- list:\n\n  | term | score |\n  |---|---|\n  | at line 1 | y |\n"
    with pytest.raises(
        ValueError, match=r"^keywords table row 1 \(line 9\): score 'y' of 'at line"
    ):
        parse_keywords(later)
    with pytest.raises(ValueError, match=r"^keywords table at line 3 with columns Keyword \| W"):
        parse_keywords("# Words\n\n| Keyword | Weight |\n|---|---|\n| a | 5 |\n")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("keyword | score\nretry | 5\n", 1),  # no delimiter row
        ("# Words\n\n| Keyword | Score |\n| retry | 5 |\n", 3),
        ("| keyword | score |\n|---|\n| retry | 5 |\n", 1),  # a delimiter cell short
        ("- words:\n\n  | term | authority |\n  | a | 1 |\n", 3),
    ],
)
def test_a_keywords_table_markdown_reads_as_no_table_is_a_clear_error(text, line):
    """A keywords table's header without its delimiter row (or with one of too few cells) is a
    paragraph to markdown: the file gave no keyword and no error, every chunk went without its
    keywords, unsaid. Its line is named, as a table's is."""
    with pytest.raises(
        ValueError, match=rf"^keywords table at line {line} with columns .*: no table"
    ):
        parse_keywords(text)
    assert parse_keywords("Pipes | in prose\nand keyword: score\n\n- a: 1\n") == [
        Keyword(name="a", score=1)
    ]


def test_a_keyword_table_naming_one_column_of_the_two_is_a_clear_error():
    """`| Keyword | Weight |` (or `| Word | Score |`) gave no keyword and no error: every chunk
    went without its keywords, unsaid. A table naming neither column is prose, as before."""
    with pytest.raises(ValueError, match=r"columns Keyword \| Weight: no score column"):
        parse_keywords("| Keyword | Weight |\n|---|---|\n| source generation | 5 |\n")
    with pytest.raises(ValueError, match=r"columns Word \| Score: no keyword column"):
        parse_keywords("| Word | Score |\n|---|---|\n| a | 1 |\n")
    prose = "| Option | Meaning |\n|---|---|\n| a | b |\n\n- a: 1\n"
    assert parse_keywords(prose) == [Keyword(name="a", score=1)]


@pytest.mark.parametrize(
    "score", ["99999999999999999999", "18446744073709551616", "-9223372036854775809", "1e400",
              "-1e999", "9" * 5000],
)  # fmt: skip
def test_keyword_scores_json_cannot_hold_are_a_clear_error(score):
    """An integer outside 64 bits crashed the topic's build (orjson: "Integer exceeds 64-bit
    range"), an overflowing float became `"score": null` in index.json and `inf` in topic-spec.md:
    now the table's ValueError, which a build reports as KEYWORDS_FAILED."""
    table = f"| keyword | score |\n|---|---|\n| a | 1 |\n| b | {score} |\n"
    with pytest.raises(ValueError, match=r"row 2 \(line 4\): score '.*' of 'b' is not a number"):
        parse_keywords(table)
    assert parse_keywords(f"- a: 1\n- b: {score}\n") == [Keyword("a", 1)]  # prose, as before


def test_keyword_scores_at_the_64_bit_limits_are_written():
    words = parse_keywords(
        "| keyword | score |\n|---|---|\n| low | -9223372036854775808 |\n"
        "| high | 18446744073709551615 |\n| tiny | 1e-300 |\n| padded | " + "0" * 5000 + "7 |\n"
    )
    body = [("Overview", "low and high and tiny, padded.")]
    out = build_topic(
        topic_input(TOPIC, [source(SOURCE, body, ranked_vectors([1.0]))], keywords=words),
        IndexSettings(),
    )
    item = index_of(out)["_embedded"]["chunks"]["golden-reference"]["items"][0]
    assert item["keywords"] == [
        {"name": "low", "score": -(2**63)}, {"name": "high", "score": 2**64 - 1},
        {"name": "tiny", "score": 1e-300}, {"name": "padded", "score": 7},
    ]  # fmt: skip


def test_questions_are_parsed_from_headings_and_q_lines():
    text = (
        "# FAQ about things?\n\n## How do I start?\n\nStart here.\n\n## Notes\n\n"
        "Q: What is a stripe?\nA: An order.\n\n**Q:** Why SimHash?\n\n- Q: Listed question?\n\n"
        "```\nQ: not in code\n```\n\n## How do I start?\n"
    )
    assert parse_questions(text) == [
        "FAQ about things?", "How do I start?", "What is a stripe?", "Why SimHash?",
        "Listed question?",
    ]  # fmt: skip


def test_a_q_line_wrapped_onto_the_next_lines_is_one_question():
    """ "Q: How do I configure\nthe thing?\nA: …" gave "How do I configure": a question wrapped in
    the source lost its end, and its SimHash was that of another question."""
    text = (
        "Q: How do I configure\nthe thing?\nA: With a file.\n\n"
        "**Q:** What does\nthis flag\ndo?\n**A:** Nothing.\n\n"
        "Q: Unmarked\nanswer text\nQ: Next one?\n"
    )
    assert parse_questions(text) == [
        "How do I configure the thing?", "What does this flag do?",
        "Unmarked", "Next one?",  # no line ending in "?" before the next marker: its first
    ]  # fmt: skip


def test_a_q_marker_may_be_emphasised_as_writers_do():
    """ "**Q**:", "*Q:*", "__Q:__", a bold line "**Q: Why?**" (wrapped too) and a heading's "**Q**:"
    mark questions as "Q:" and "**Q:**" do: a qa-pairs.md written in any of them had no question,
    and no word said so. An answer marked so ends a wrapped question as "A:" does."""
    text = (
        "**Q**: How do I set the delay?\n**A**: In the options.\n\n*Q:* Where are chunks?\n\n"
        "__Q:__ Can I skip drafts?\n\n**Q: Is it bold?**\n\n**Q: Does it wrap\nover lines?**\n"
        "**A:** Yes.\n\n*Q*: Unended\n_A_: answer?\n\n## **Q**: In a heading?\n\n"
        "**Q:** Why is **this** so?\n"
    )
    assert parse_questions(text) == [
        "How do I set the delay?", "Where are chunks?", "Can I skip drafts?", "Is it bold?",
        "Does it wrap over lines?", "Unended", "In a heading?", "Why is **this** so?",
    ]  # fmt: skip


def test_a_q_heading_is_its_question_without_the_marker():
    """A heading "## Q: How…?" is the question "How…?", as a "Q:" line is: it was kept with its
    marker, whose words moved its SimHash 3 to 8 bits from the question a reader asks (past k=6
    for "Why does trimming warn?"), and a marked heading without "?" was no question."""
    text = "## Q: Why does trimming warn?\n\nA: Reflection.\n\n### **Q:** How do I start\n"
    assert parse_questions(text) == ["Why does trimming warn?", "How do I start"]
    assert simhash64(parse_questions(text)[0]) == simhash64("Why does trimming warn?")


def test_a_question_heading_may_end_in_emphasis_code_or_an_attribute_list():
    """A heading whose visible text ends in "?" is a question whatever inline markdown closes it
    (`**Why?**`, `` `x?` ``) or attribute list follows (`{ #why }`): each was no question, so its
    answer's chunk got no prompt hash and `--question` never found it by SimHash."""
    text = (
        "## **Why is it slow?**\n\n## What is `x?`\n\n## How do I start? { #start }\n\n## Notes\n"
    )
    assert parse_questions(text) == ["**Why is it slow?**", "What is `x?`", "How do I start?"]


def test_prompt_hashes_threshold_and_top_k():
    vectors = np.eye(4)
    questions = [
        "What is the overview?",
        "How does part two work?",
        "Part two again?",
        "Unrelated?",
    ]
    qv = np.array([[1.0, 0, 0, 0], [0, 0, 1.0, 0], [0, 0, 0.8, 0.6], [0, 0.5, 0, 0.5]])
    body = [(f"S{i}", f"text {i}") for i in range(4)]
    inp = topic_input(
        TOPIC, [source(SOURCE, body, vectors)], questions=questions, question_vectors=qv
    )
    items = index_of(build_topic(inp, IndexSettings(prompt_threshold=0.75)))["_embedded"]["chunks"][
        "golden-reference"
    ]["items"]
    assert items[0]["prompt_hashes"] == [simhash64(questions[0])]
    # "Unrelated?" passes the threshold nowhere: it attaches to its best chunk only (0.7071 for
    # chunks 1 and 3, the tie going to the earlier chunk).
    assert items[1]["prompt_hashes"] == [simhash64(questions[3])]
    assert items[2]["prompt_hashes"] == sorted({simhash64(questions[1]), simhash64(questions[2])})
    assert "prompt_hashes" not in items[3]  # no question: omitted, not empty
    top1 = build_topic(inp, IndexSettings(prompt_threshold=0.75, prompt_top_k=1))
    items = json.loads(top1.files[f"{TOPIC}/index.json"])["_embedded"]["chunks"][
        "golden-reference"
    ]["items"]
    # top_k keeps the best of the threshold matches; "Part two again?" stays on its best chunk.
    assert items[2]["prompt_hashes"] == sorted({simhash64(questions[1]), simhash64(questions[2])})
    assert top1.prompt_entries == sorted(
        [
            (simhash64(questions[0]), TOPIC, "golden-reference", 0),
            (simhash64(questions[3]), TOPIC, "golden-reference", 1),
            (simhash64(questions[1]), TOPIC, "golden-reference", 2),
            (simhash64(questions[2]), TOPIC, "golden-reference", 2),
        ]
    )


def test_every_question_attaches_to_its_best_chunk_of_the_topic():
    questions = ["Far from everything?", "Close to the overview?"]
    qv = np.array([[0.0, 0.3, 0.2, 0.9], [1.0, 0.0, 0.0, 0.0]])
    first = source(SOURCE, [("A", "a"), ("B", "b")], np.array([[1.0, 0, 0, 0], [0, 1.0, 0, 0]]))
    second = source(
        f"{TOPIC}/other.md", [("C", "c"), ("D", "d")], np.array([[0, 0, 1.0, 0], [0, 1.0, 0, 1.0]])
    )
    inp = topic_input(TOPIC, [first, second], questions=questions, question_vectors=qv)
    out = build_topic(inp, IndexSettings(prompt_threshold=0.99))
    chunks = index_of(out)["_embedded"]["chunks"]
    # The far question's best chunk is other.md's chunk 1 (cosine 0.83, under the threshold).
    assert chunks["other"]["items"][1]["prompt_hashes"] == [simhash64(questions[0])]
    assert chunks["golden-reference"]["items"][0]["prompt_hashes"] == [simhash64(questions[1])]
    assert {h for h, *_ in out.prompt_entries} == {simhash64(q) for q in questions}


def test_title_from_front_matter_then_h1_then_directory():
    body = [("Overview", "intro")]
    vec = ranked_vectors([1.0])
    with_fm = SourceInput(
        SOURCE, make_document(SOURCE, body, front_matter={"title": "STJ Guide"}), vec
    )
    assert build_topic(topic_input(TOPIC, [with_fm]), IndexSettings()).title == "STJ Guide"
    doc = make_document(SOURCE, body)
    chunk = doc.chunks[0]
    h1_doc = type(doc)(
        **{
            **doc.__dict__,
            "chunks": (type(chunk)(**{**chunk.__dict__, "text": "# Real Title\n\nintro"}),),
        }
    )
    assert (
        build_topic(topic_input(TOPIC, [SourceInput(SOURCE, h1_doc, vec)]), IndexSettings()).title
        == "Real Title"
    )
    plain = build_topic(topic_input(TOPIC, [source(SOURCE, body, vec)]), IndexSettings())
    assert plain.title == "stj" and index_of(plain)["title"] == "stj"


def with_h1(path: str, h1: str, front_matter=None) -> SourceInput:
    """A one-chunk source whose chunk starts with the H1 `h1`."""
    doc = make_document(path, [("Overview", "intro")], front_matter=front_matter)
    chunk = doc.chunks[0]
    chunk = type(chunk)(**{**chunk.__dict__, "text": f"# {h1}\n\nintro"})
    return SourceInput(
        path, type(doc)(**{**doc.__dict__, "chunks": (chunk,)}), ranked_vectors([1.0])
    )


def test_title_comes_from_golden_reference_before_sources_that_sort_first():
    converters = with_h1(f"{TOPIC}/converters.md", "Converters")
    golden = with_h1(SOURCE, "System.Text.Json Source Generation")
    assert build_topic(topic_input(TOPIC, [converters, golden]), IndexSettings()).title == (
        "System.Text.Json Source Generation"
    )
    # Front matter still comes first, and a topic without golden-reference.md takes its first
    # source's title.
    titled = with_h1(SOURCE, "Heading", front_matter={"title": "From Front Matter"})
    assert build_topic(topic_input(TOPIC, [converters, titled]), IndexSettings()).title == (
        "From Front Matter"
    )
    other = with_h1(f"{TOPIC}/zebra.md", "Zebra")
    assert build_topic(topic_input(TOPIC, [other, converters]), IndexSettings()).title == (
        "Converters"
    )
    # A golden reference without an H1 leaves the title to the first source.
    plain = source(SOURCE, [("Overview", "intro")], ranked_vectors([1.0]))
    assert build_topic(topic_input(TOPIC, [converters, plain]), IndexSettings()).title == (
        "Converters"
    )


def test_a_landing_page_names_the_topic_where_there_is_no_golden_reference():
    """A docs site's folder page (index.md, Hugo's _index.md, README.md) names its topic: the
    first source by name did (FastAPI's `tutorial` topic was titled by background-tasks.md),
    and README.md sorted before index.md. A golden reference still comes first."""
    background = with_h1(f"{TOPIC}/background-tasks.md", "Background Tasks")
    readme = with_h1(f"{TOPIC}/README.md", "Read Me")
    index = with_h1(f"{TOPIC}/index.md", "Tutorial - User Guide")
    hugo = with_h1(f"{TOPIC}/_index.md", "Section")

    def title(*sources):
        return build_topic(topic_input(TOPIC, list(sources)), IndexSettings()).title

    assert title(readme, background, index) == "Tutorial - User Guide"
    assert title(hugo, readme, background) == "Section"
    assert title(readme, background) == "Read Me"
    assert title(background, index, with_h1(SOURCE, "Golden")) == "Golden"


def test_a_docusaurus_index_mdx_names_its_topic():
    """Docusaurus' folder page is as often `index.mdx`: the first source by name (`a.mdx`) titled
    the topic."""
    first = with_h1(f"{TOPIC}/a.mdx", "A Page")
    landing = with_h1(f"{TOPIC}/index.mdx", "Guides")
    assert build_topic(topic_input(TOPIC, [first, landing]), IndexSettings()).title == "Guides"


def test_a_source_without_chunks_does_not_take_the_first_sources_turn_at_the_title():
    """The title falls to the first source with chunks: an empty file or a left-out draft first
    in source order gave the topic its folder's name though a later page had an H1. A landing
    page that is empty or a draft names nothing; one of front matter alone (Hugo's `_index.md`)
    still names its section."""

    def page(name: str, text: bytes) -> SourceInput:
        document = chunk_source(text, strategy="semantic", tokenizer="heuristic")
        return SourceInput(f"{TOPIC}/{name}", document, np.zeros((0, 3)))

    def title(*sources):
        return build_topic(topic_input(TOPIC, list(sources)), IndexSettings()).title

    draft = b"---\ntitle: Launch plan\ndraft: true\n---\n# Plan\n\nHow it launches.\n"
    later = with_h1(f"{TOPIC}/later.md", "Later")
    assert title(page("a-empty.md", b""), page("b-draft.md", draft), later) == "Later"
    assert title(page("index.md", draft), page("a.md", b"\n"), later) == "Later"
    section = page("_index.md", b"---\ntitle: Section\n---\n")
    assert title(section, later) == "Section" and not section.document.chunks


def test_the_topic_title_is_the_first_h1_though_no_chunk_text_holds_it():
    """`hierarchical` (and `headers` past 500 lines) leave the empty section of "# Title" then
    "## Part" out of every chunk's text, keeping the H1 in the header paths only: the topic took
    a later H1 ("Appendix") for its title, or the directory name when there was none."""
    text = "# Real Title\n\n## Part\n\nText.\n\n## More\n\nMore.\n\n{} Appendix\n\nEnd.\n"
    for later in ("#", "##"):
        doc = chunk_source(text.format(later).encode(), strategy="hierarchical")
        assert all("# Real Title" not in chunk.text for chunk in doc.chunks)
        vectors = ranked_vectors([1.0] + [0.5] * (len(doc.chunks) - 1))
        inp = topic_input(TOPIC, [SourceInput(SOURCE, doc, vectors)])
        assert build_topic(inp, IndexSettings()).title == "Real Title"


def test_the_topic_title_is_no_heading_inside_a_list_or_quote():
    """`- # x` and `> # x` belong to their container, as chunking reads them: the topic took
    such a heading for the document's first H1."""
    for container in ("- ", "> "):
        text = f"{container}# Contained\n\nIntro text.\n\n# Real Title\n\nBody text.\n"
        doc = chunk_source(text.encode(), strategy="semantic", tokenizer="heuristic")
        vectors = ranked_vectors([1.0] + [0.5] * (len(doc.chunks) - 1))
        inp = topic_input(TOPIC, [SourceInput(SOURCE, doc, vectors)])
        assert build_topic(inp, IndexSettings()).title == "Real Title"


def test_failed_source_keeps_its_previous_entry_and_files():
    good = source(SOURCE, sections(3), ranked_vectors([1.0, 0.5, 0.2]))
    other = f"{TOPIC}/extra.md"
    first = build_topic(
        topic_input(TOPIC, [good, source(other, sections(2, "B"), ranked_vectors([1.0, 0.1]))]),
        IndexSettings(),
    )
    failed = SourceInput(other, None, None, error=("CHUNKING_FAILED", "invalid UTF-8 at byte 12"))
    second = build_topic(
        topic_input(TOPIC, [good, failed], previous=first.files[f"{TOPIC}/index.json"]),
        IndexSettings(),
    )
    before, after = index_of(first), index_of(second)
    assert after["_embedded"]["chunks"]["extra"] == before["_embedded"]["chunks"]["extra"]
    kept = [f"{TOPIC}/{item['href']}" for item in before["_embedded"]["chunks"]["extra"]["items"]]
    assert second.retained == tuple(sorted(kept)) and len(kept) == 2
    assert not set(kept) & set(second.files)
    rows = {r["source"]: r for r in second.document_rows.to_pylist()}
    assert rows[other]["status"] == "failed" and rows[other]["error_code"] == "CHUNKING_FAILED"
    assert rows[other]["error"] == "invalid UTF-8 at byte 12" and rows[SOURCE]["status"] == "ok"
    # Without a previous index the failed source simply has no entry.
    third = build_topic(topic_input(TOPIC, [good, failed]), IndexSettings())
    assert list(index_of(third)["_embedded"]["chunks"]) == ["golden-reference"]
    # A failed source keeps the entry of its own file name only: extra.md gone, a failing
    # extra.mdx does not inherit its entry (nor its chunk files) through the stem they share.
    renamed = SourceInput(f"{TOPIC}/extra.mdx", None, None, error=("CHUNKING_FAILED", "bad"))
    fourth = build_topic(
        topic_input(TOPIC, [good, renamed], previous=first.files[f"{TOPIC}/index.json"]),
        IndexSettings(),
    )
    assert list(index_of(fourth)["_embedded"]["chunks"]) == ["golden-reference"]
    assert fourth.retained == ()
    # Failed sources may share a stem (the job fails every source of a shared stem): the one
    # whose file made the previous entry keeps it.
    fifth = build_topic(
        topic_input(TOPIC, [good, failed, renamed], previous=first.files[f"{TOPIC}/index.json"]),
        IndexSettings(),
    )
    assert index_of(fifth)["_embedded"]["chunks"] == index_of(second)["_embedded"]["chunks"]
    assert fifth.retained == second.retained


def test_a_failed_sources_documents_row_names_the_builds_tenant():
    """A source that failed with no previous row gets a bare documents row: it names the build's
    tenant as the chunked sources' rows do (it had a null `tenant_id`, so a tenant's documents
    left out its failures)."""
    good = source(SOURCE, sections(2), ranked_vectors([1.0, 0.5]))
    failed = SourceInput(f"{TOPIC}/extra.md", None, None, error=("CHUNKING_FAILED", "bad"))
    output = build_topic(topic_input(TOPIC, [good, failed]), IndexSettings())
    rows = {r["source"]: r["tenant_id"] for r in output.document_rows.to_pylist()}
    assert rows == {SOURCE: "default", f"{TOPIC}/extra.md": "default"}
    acme = build_topic(replace(topic_input(TOPIC, [failed]), tenant_id="acme"), IndexSettings())
    assert acme.document_rows.column("tenant_id").to_pylist() == ["acme"]


def test_a_topic_whose_sources_all_fail_keeps_its_title_only_beside_a_kept_entry():
    """The previous title stays while a failed source keeps the entry it came with; once no entry
    is kept (the titled source deleted, the one left never built) the topic has the directory's
    title, as a fresh build gives it."""
    titled = source(
        SOURCE, sections(2), ranked_vectors([1.0, 0.5]), front_matter={"title": "Guide"}
    )
    previous = build_topic(topic_input(TOPIC, [titled]), IndexSettings()).files[
        f"{TOPIC}/index.json"
    ]
    turned_bad = SourceInput(SOURCE, None, None, error=("CHUNKING_FAILED", "invalid UTF-8"))
    kept = build_topic(topic_input(TOPIC, [turned_bad], previous=previous), IndexSettings())
    assert kept.title == "Guide" and kept.retained
    new = SourceInput(f"{TOPIC}/new.md", None, None, error=("CHUNKING_FAILED", "invalid UTF-8"))
    alone = build_topic(topic_input(TOPIC, [new], previous=previous), IndexSettings())
    fresh = build_topic(topic_input(TOPIC, [new]), IndexSettings())
    assert alone.title == fresh.title == directory_title(TOPIC) and not alone.retained
    assert alone.files == fresh.files


def test_inconsistent_input_is_a_clear_error():
    with pytest.raises(ValueError, match="expected one vector per chunk"):
        build_topic(
            topic_input(TOPIC, [source(SOURCE, sections(3), np.ones((2, 3)))]), IndexSettings()
        )
    twins = [
        source(SOURCE, sections(1), np.ones((1, 3))),
        source(f"{TOPIC}/golden-reference.markdown", sections(1), np.ones((1, 3))),
    ]
    with pytest.raises(ValueError, match=r"share the stem\(s\) \['golden-reference'\]"):
        build_topic(topic_input(TOPIC, twins), IndexSettings())
    failed_twin = SourceInput(twins[1].path, None, None, error=("READ_FAILED", "gone"))
    with pytest.raises(ValueError, match="share the stem"):
        build_topic(topic_input(TOPIC, [twins[0], failed_twin]), IndexSettings())
    with pytest.raises(ValueError, match="2 questions but 1 question vectors"):
        build_topic(
            topic_input(TOPIC, [], questions=["a?", "b?"], question_vectors=np.ones((1, 3))),
            IndexSettings(),
        )
    with pytest.raises(ValueError, match="prompt_threshold"):
        IndexSettings(prompt_threshold=1.5)


@pytest.mark.parametrize("where", ["a person's code block", "a chunk title"])
def test_a_marker_quoted_in_topic_spec_never_makes_it_grow(where):
    """The end marker quoted in a person's code block (before the section), or in a chunk title
    (inside a table row), was taken for the section's end: each rebuild added a section, or kept
    the old table's tail as the person's text."""
    end = "<!-- mdindex:end -->"
    hand = f"# Notes\n\n```\n{end}\n```\n" if where == "a person's code block" else "# Notes\n"
    titles = [("Overview", "Text."), (f"Markers {end} here", "More text.")]
    inp = topic_input(TOPIC, [source(SOURCE, titles, ranked_vectors([1.0, 0.5]))], spec=hand)
    spec = hand
    for _ in range(3):
        spec = (
            build_topic(topic_input(TOPIC, inp.sources, spec=spec), IndexSettings())
            .files[f"{TOPIC}/topic-spec.md"]
            .decode()
        )
    once = build_topic(topic_input(TOPIC, inp.sources, spec=hand), IndexSettings()).files
    assert spec == once[f"{TOPIC}/topic-spec.md"].decode()
    assert spec.count("## Chunks of") == 1 and spec.startswith(hand)


@pytest.mark.parametrize(
    "fence",
    [
        "````md\nA fence of three:\n```\n{markers}\n````\n",  # a shorter fence line closes none
        "```text\n```python\n{markers}\n```\n",  # a fence line with an info string neither
        "    {markers}\n",  # indented code
    ],
)
def test_markers_quoted_in_any_code_block_are_the_persons_text(fence):
    """Both markers quoted in a person's code block are text like any other: the section goes
    after it. In a "````" block holding a "```" line, or a "```" block holding "```python", they
    were taken for the section's, and the person's lines between them replaced by it (and in
    indented code too)."""
    begin = "<!-- mdindex:begin (generated; edits inside these markers are replaced) -->"
    end = "<!-- mdindex:end -->"
    hand = "# Notes\n\n" + fence.format(markers=f"{begin}\nquoted by hand\n{end}") + "\nMore.\n"
    inp = topic_input(TOPIC, [source(SOURCE, sections(2), ranked_vectors([1.0, 0.5]))], spec=hand)
    spec = hand
    for _ in range(2):
        built = build_topic(topic_input(TOPIC, inp.sources, spec=spec), IndexSettings())
        spec = built.files[f"{TOPIC}/topic-spec.md"].decode()
    assert spec.startswith(hand) and spec.count("## Chunks of") == 1


def test_a_fence_left_open_in_topic_spec_never_makes_it_grow():
    """A person's topic-spec.md that leaves a fence open: the appended section was inside it
    (code), never found again, and each rebuild appended one more. The section now comes after a
    line closing that fence, and a rebuild replaces it."""
    hand = "# Notes\n\n````md\nleft open\n"
    inp = topic_input(TOPIC, [source(SOURCE, sections(2), ranked_vectors([1.0, 0.5]))], spec=hand)
    specs = [hand]
    for _ in range(3):
        built = build_topic(topic_input(TOPIC, inp.sources, spec=specs[-1]), IndexSettings())
        specs.append(built.files[f"{TOPIC}/topic-spec.md"].decode())
    assert specs[1] == specs[2] == specs[3] and specs[1].count("## Chunks of") == 1
    assert specs[1].startswith(hand + "````\n\n<!-- mdindex:begin")


def test_keywords_are_one_per_name_as_their_patterns_match():
    """`foo bar` and `foo  bar` match the same text, and both were kept (a chunk listed the keyword
    twice); `Straße` and `STRASSE` were taken for one (casefold) though neither pattern matches
    the other's spelling (`re.IGNORECASE` folds no ß), so `STRASSE` in a text matched nothing."""
    table = "| keyword | score |\n|---|---|\n| foo bar | 1 |\n| foo  bar | 2 |\n| Straße | 3 |\n"
    keywords = parse_keywords(table + "| STRASSE | 4 |\n")
    assert [(k.name, k.score) for k in keywords] == [("foo bar", 1), ("Straße", 3), ("STRASSE", 4)]
    found = keywords_in("foo  bar and STRASSE", keyword_matcher(keywords))
    assert [k.name for k in found] == ["foo bar", "STRASSE"]


def test_a_keyword_is_found_across_emphasis_and_code_markers():
    """`**source** generation` did not hold the keyword `source generation`: its words matched
    only with whitespace between them."""
    matcher = keyword_matcher([Keyword("source generation", 5), Keyword("json", 1)])
    for text in ("**source** generation", "source `generation`", "~~source~~ *generation*"):
        assert keywords_in(f"Use {text} here.", matcher) == [Keyword("source generation", 5)]
    assert keywords_in("sourcegeneration, source_generation", matcher) == []


def test_ascii_fold_is_what_re_matches():
    """What `keywords_in`'s word index rests on, over every code point: an ASCII character of a
    case-insensitive pattern matches exactly the characters that `_ASCII_FOLD` takes to its fold
    (the ASCII letter pair and İ ı K ſ; other ASCII only itself), all word characters as it is
    or none; and no whitespace character (`\\s`) is a word character."""
    every = "".join(map(chr, range(0x110000)))
    for c in map(chr, range(128)):
        matched = re.findall(re.escape(c), every, re.IGNORECASE)
        folded = c.translate(_ASCII_FOLD)
        assert {m for m in matched if m.translate(_ASCII_FOLD) == folded} == set(matched), c
        assert {chr(k) for k, v in _ASCII_FOLD.items() if v == folded} <= set(matched) | {c}, c
        assert {bool(_WORD.match(m)) for m in matched} == {bool(_WORD.match(c))}, c
    assert not any(_WORD.match(space) for space in re.findall(r"\s", every))


_TRICKY = "kKsSiIa \t.#-*`_\u212a\u017f\u0130\u0131\u0345\u03b9\u03c3\u03c2\u00df\u0301\u00e9"


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.text(_TRICKY, min_size=1, max_size=5), min_size=1, max_size=8),
    st.text(_TRICKY, max_size=30),
)
@example(
    ["istanbul", "ok", "SS", "a.k", "Σα", "ια"],
    "\u0130stanbul \u212aO \u017fs A.\u212a \u03c3\u03b1 \u0345\u03b1",
)
@example(["kiss", "iss", "é"], "k\u0131\u017fS \u0130SS e\u0301 \u00e9s")
def test_keywords_in_finds_what_each_pattern_finds(names, text):
    """Its word index skips only patterns that cannot match: the same keywords as searching every
    pattern, with case-insensitive characters beyond ASCII (İ ı K ſ, ͅ and ι, σ and ς)."""
    matcher = keyword_matcher([Keyword(name, i) for i, name in enumerate(names)])
    expected = [Keyword(n, i) for i, n in enumerate(names) if keyword_pattern(n).search(text)]
    assert keywords_in(text, matcher) == expected


def test_chunk_file_names_with_a_newline_are_chunk_files():
    """`.` matched no newline: a source named `new\nline.md` (which hostile inputs index) had
    chunk files no clean-up recognised, so each version's stayed for good."""
    assert is_chunk_file(f"{TOPIC}/_chunks/new\nline-965054649125bde0-0.md")
    assert not is_chunk_file(f"{TOPIC}/_chunks/x-0123456789abcdef-1.md\n")
    assert not is_chunk_file(f"{TOPIC}/x-0123456789abcdef-1.md")


def test_topic_spec_section_is_replaced_and_hand_text_kept():
    inp = topic_input(TOPIC, [source(SOURCE, sections(3), ranked_vectors([1.0, 0.5, 0.2]))])
    generated = build_topic(inp, IndexSettings()).files[f"{TOPIC}/topic-spec.md"].decode()
    assert generated.startswith("<!-- mdindex:begin") and generated.endswith(
        "<!-- mdindex:end -->\n"
    )
    assert "| 1 | Quick Reference | no | 0.5 | 1.0 |  | 0 |" in generated
    hand = "# My notes\n\nWritten by a person.\n"
    first = build_topic(topic_input(TOPIC, inp.sources, spec=hand), IndexSettings()).files[
        f"{TOPIC}/topic-spec.md"
    ]
    text = first.decode()
    assert text.startswith(hand) and text.endswith(generated)
    edited = (
        text.replace("Written by a person.", "Written by a person, edited.") + "\nTrailing note.\n"
    )
    again = (
        build_topic(
            topic_input(TOPIC, inp.sources, spec=edited.replace("Quick Reference |", "stale |")),
            IndexSettings(),
        )
        .files[f"{TOPIC}/topic-spec.md"]
        .decode()
    )
    assert again == edited


def test_byte_determinism_whatever_the_input_order():
    a = source(SOURCE, sections(10), ranked_vectors([1.0] + [0.5 + i / 50 for i in range(1, 10)]))
    b = source(
        f"{TOPIC}/api.md", sections(4, "Ü API Reference"), ranked_vectors([1.0, 0.3, 0.2, 0.9])
    )
    words = [Keyword("text", 1), Keyword("part", 2)]
    one = build_topic(
        topic_input(TOPIC, [a, b], keywords=words, children=["libraries/stj/x"]), IndexSettings()
    )
    two = build_topic(
        topic_input(TOPIC, [b, a], keywords=words, children=["libraries/stj/x"]), IndexSettings()
    )
    assert one.files == two.files
    assert one.chunk_rows.equals(two.chunk_rows) and one.document_rows.equals(two.document_rows)
    index = one.files[f"{TOPIC}/index.json"]
    assert index.endswith(b"}\n") and "Ü API Reference".encode() in index  # UTF-8, not \\u escapes
    assert list(json.loads(index)["_embedded"]["chunks"]) == ["api", "golden-reference"]


def test_globs_given_as_one_string_are_refused():
    """`group_sources(paths, globs="*.md")` took each character for a pattern: "*" made every
    file a source (a .txt, a .png)."""
    from indexing.sources import is_source

    with pytest.raises(TypeError, match="got the string '\\*.md'"):
        group_sources(["a/x.txt", "a/y.md", "b/z.png"], globs="*.md")
    with pytest.raises(TypeError, match="collection of file-name patterns"):
        is_source("a/x.txt", "*.md")
    assert group_sources(["a/x.txt", "a/y.md", "b/z.png"], globs=["*.md"]) == {"a": ["a/y.md"]}


PATH_PART = st.sampled_from(["a", "_a", ".a", "a_b", "a.b", "", ".", "_"])
FILE_NAME = st.sampled_from(
    ["a.md", "..md", ".a.md", "_a.md", "A.MD", "b.markdown", "c.mdx", "x.txt", "a.md\n", "[x].md"]
    + ["qa-pairs.md", "topic-spec.md", "index.json", "._a.md", "a.md.bak"]
)
GLOB = st.sampled_from(["*.md", "*.MD", "*.markdown", "*", "a.md", "[!a]*.md", "?.md", "*.m?x"])


@settings(max_examples=300, deadline=None)
@given(st.lists(PATH_PART, max_size=3), FILE_NAME, st.lists(GLOB, max_size=3))
def test_a_file_is_a_source_as_each_glob_matches_its_name_alone(folders, name, globs):
    """`is_source` matches a file name against all the globs at once (one expression: a third of
    the time a call took, asked up to four times for each listed file): a source exactly where
    `fnmatch.fnmatchcase` matches one glob alone, no glob none, and never a topic file, an
    index.json, an AppleDouble file or a file below a folder named "_…" or ".…"."""
    import fnmatch

    from indexing.sources import is_source

    path = "/".join([*folders, name])
    hidden = any(folder.startswith(("_", ".")) for folder in folders)
    reserved = name in ("qa-pairs.md", "topic-spec.md", "index.json") or name.startswith("._")
    expected = not hidden and not reserved and any(fnmatch.fnmatchcase(name, g) for g in globs)
    assert is_source(path, globs) is expected
    assert is_source(path, tuple(globs)) is expected


def test_technical_titles_and_keyword_paths_given_as_one_string_are_refused():
    """`IndexSettings(technical_titles="cheat sheet")` took each letter for a phrase, so a title
    with a one-letter word ("Part A") was a technical baseline; `nearest_keywords_path(topic,
    "_keywords/words.md")` found no keywords, unsaid."""
    with pytest.raises(TypeError, match="technical_titles must be a collection of phrases"):
        IndexSettings(technical_titles="cheat sheet")
    with pytest.raises(TypeError, match="keyword_paths must be a collection of paths"):
        nearest_keywords_path("t", "_keywords/words.md")
    assert nearest_keywords_path("t", ["_keywords/words.md"]) == "_keywords/words.md"
    settings = IndexSettings(technical_titles=("cheat sheet",))
    assert not is_technical_title("Part A", settings.technical_titles)


def test_group_sources_and_keyword_lookup_and_tree():
    paths = [
        "libraries/stj/golden-reference.md", "libraries/stj/qa-pairs.md",
        "libraries/stj/topic-spec.md",
        "libraries/stj/_chunks/golden-reference-0.md", "libraries/stj/_keywords/words.md",
        "libraries/.drafts/x.md", "libraries/stj/notes.txt", "README.md", "a/b/c/deep.md",
        "libraries/stj/api.md",
    ]  # fmt: skip
    assert group_sources(paths) == {
        "": ["README.md"],
        "a/b/c": ["a/b/c/deep.md"],
        "libraries/stj": ["libraries/stj/api.md", "libraries/stj/golden-reference.md"],
    }
    assert group_sources(paths, globs=("golden-reference.md",)) == {
        "libraries/stj": ["libraries/stj/golden-reference.md"]
    }
    # A file name may start with ".": tldr-pages documents the `.` command in `..md`. A macOS
    # AppleDouble file beside a page (`._ls.md`, binary) is no source.
    assert group_sources(["common/..md", "common/ls.md", "common/._ls.md", "._README.md"]) == {
        "common": ["common/..md", "common/ls.md"]
    }
    # The build's own files are never sources, whatever the globs: in place, `["*"]` read every
    # index.json back as a page, and the output grew on every run.
    generated = ["t/index.json", "index.json", "t/topic-spec.md", "t/qa-pairs.md", "t/notes.json"]
    assert group_sources(generated, globs=("*",)) == {"t": ["t/notes.json"]}
    keyword_files = ["_keywords/words.md", "libraries/_keywords/words.md"]
    assert nearest_keywords_path("libraries/stj", keyword_files) == "libraries/_keywords/words.md"
    assert nearest_keywords_path("a/b/c", keyword_files) == "_keywords/words.md"
    assert nearest_keywords_path("a", []) is None
    assert index_tree(["libraries/stj", "a/b/c"]) == {
        "": ["a", "libraries"], "a": ["a/b"], "a/b": ["a/b/c"], "a/b/c": [],
        "libraries": ["libraries/stj"],
        "libraries/stj": [],
    }  # fmt: skip


def test_directory_indexes_link_children_and_root_has_no_parent():
    root = json.loads(directory_index("", ["libraries", "a"]))
    VALIDATOR.validate(root)
    assert root == {
        "id": "",
        "title": "Index",
        "_links": {"self": {"href": "/index.json"}, **corpus_links()},  # test_indexing_hal
        "_embedded": {
            "topics": [
                {"id": "a", "_links": {"self": {"href": "/a/index.json"}}},
                {"id": "libraries", "_links": {"self": {"href": "/libraries/index.json"}}},
            ]
        },
    }
    libraries = json.loads(directory_index("libraries", ["libraries/stj"]))
    VALIDATOR.validate(libraries)
    assert (
        libraries["_links"]["parent"] == {"href": "/index.json"}
        and libraries["title"] == "libraries"
    )
    topic = build_topic(
        topic_input(TOPIC, [source(SOURCE, sections(2), ranked_vectors([1.0, 0.2]))]),
        IndexSettings(),
    ).files[f"{TOPIC}/index.json"]
    updated = set_child_topics(topic, ["libraries/stj/more"])
    assert json.loads(updated)["_embedded"]["topics"] == [
        {"id": "libraries/stj/more", "_links": {"self": {"href": "/libraries/stj/more/index.json"}}}
    ]
    assert set_child_topics(updated, []) == topic


def test_root_topic_paths():
    out = build_topic(
        topic_input("", [source("README.md", sections(2), ranked_vectors([1.0, 0.2]))]),
        IndexSettings(),
    )
    texts = [f"## {title}\n\n{body}" for title, body in sections(2)]
    assert sorted(out.files) == sorted(
        [chunk_file("README", i, text) for i, text in enumerate(texts)]
        + ["index.json", "topic-spec.md"]
    )
    doc = index_of(out, topic="")
    assert doc["id"] == "" and doc["_links"] == {"self": {"href": "/index.json"}, **corpus_links()}


def test_a_questions_or_keywords_file_that_yields_nothing_is_a_warning_of_what_is_read():
    """A qa-pairs.md of `Question:` lines or a numbered list has no question, a keywords file of
    prose no keyword: a warning each, naming the file and what its reader looks for (the topic
    was indexed without them, unsaid, until 2026-11-30); none for a file that yields one."""
    text = "Question: How is the delay set?\n\n1. What is a retry?\n"
    assert parse_questions(text) == []
    (warning,) = no_questions("t/qa-pairs.md", parse_questions(text))
    assert warning.startswith("t/qa-pairs.md: no question found: ")
    assert "heading ending in '?'" in warning and "'Q:'" in warning
    assert no_questions("t/qa-pairs.md", parse_questions("Q: How?\n")) == []
    assert parse_keywords("# Words\n\nretry, delay.\n") == []
    (warning,) = no_keywords("_keywords/words.md", [])
    assert warning.startswith("_keywords/words.md: no keyword found: ")
    assert "| keyword | score |" in warning and "- keyword: score" in warning
    assert no_keywords("_keywords/words.md", parse_keywords("- retry: 5\n")) == []
