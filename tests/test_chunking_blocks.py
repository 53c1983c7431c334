"""The block parse: markdown-it tokens and line maps, fences, setext headings, parser dispatch."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from chunking import chunk_document
from chunking.blocks import (
    FENCE_BODY,
    FENCE_MARK,
    INDENTED_CODE,
    TABLE,
    TEXT,
    Heading,
    block_parser,
    fence_reopener,
    heading_title,
    indented_containers,
    parse,
    text_line_kinds,
    unclosed_fences,
)
from chunking.normalize import normalize
from tests.chunking_support import markdown_documents

FIXTURES = Path(__file__).parent / "fixtures" / "markdown"


def headings(text: str) -> list[tuple[int, str, int]]:
    doc = parse(normalize(text))
    return [(b.heading.level, b.heading.text, b.start_line) for b in doc.blocks if b.heading]


def test_headings_never_come_from_fences_quotes_or_html():
    found = headings((FIXTURES / "tricky_fences.md").read_text())
    assert found == [(1, "Fences", 1), (2, "Real Heading", 26)]
    found = headings((FIXTURES / "guide.md").read_text())
    assert [text for _, text, _ in found] == [
        "Installation Guide",
        "Requirements",
        "Optional tools",
        "Install",
        "Setext Heading",
        "Configure",
    ]


def test_setext_heading_spans_its_two_lines():
    doc = parse(normalize("Intro\n\nTitle\n=====\n\nSub\n---\ntext\n"))
    heads = [b for b in doc.blocks if b.kind == "heading"]
    assert [(b.heading.level, b.heading.text, b.start_line, b.end_line) for b in heads] == [
        (1, "Title", 3, 4),
        (2, "Sub", 6, 7),
    ]


def test_multi_line_setext_heading_is_one_line_of_text():
    doc = parse(normalize("first line\n  second line\n---\nbody\n"))
    [heading] = [b.heading for b in doc.blocks if b.heading]
    assert (heading.level, heading.text, heading.markdown) == (
        2,
        "first line second line",
        "## first line second line",
    )


def test_multi_line_setext_parent_keeps_line_kinds_aligned():
    # Found by hypothesis: a two-line setext heading prepended as a parent split into two lines.
    text = "# A\n\n" + "word " * 30 + "\nthe\nthe the\n-\n" + "more words here " * 10
    for chunk in chunk_document(
        text.replace("\n", "\r\n"), max_tokens=60, min_tokens=20, min_tokens_deeper=40
    ):
        assert all("\n" not in part for part in chunk.headings_path)


def test_block_lines_are_original_file_lines_after_front_matter():
    doc = parse(normalize("---\na: 1\n---\n# H\n\npara\n"))
    assert [(b.kind, b.start_line, b.end_line) for b in doc.blocks] == [
        ("heading", 4, 4),
        ("paragraph", 6, 6),
    ]


def test_line_kinds_mark_code_and_tables():
    text = "# H\n\n```py\ncode\n```\n\n    indented\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\ntext\n"
    kinds = parse(normalize(text)).line_kinds
    assert list(kinds) == [
        TEXT, TEXT, FENCE_MARK, FENCE_BODY, FENCE_MARK, TEXT, INDENTED_CODE, TEXT,
        TABLE, TABLE, TABLE, TEXT, TEXT,
    ]  # fmt: skip


def test_fences_record_info_marker_and_closure():
    doc = parse(normalize((FIXTURES / "tricky_fences.md").read_text()))
    fences = [(f.markup, f.info, f.closed) for f in doc.fences]
    assert fences == [
        ("```", "yaml", True),
        ("~~~", "", True),
        ("````", "markdown", True),
        ("```", "", True),
        ("```", "unclosed", False),
    ]


def test_unclosed_fences_only_counts_fences_open_at_the_end():
    assert unclosed_fences("```\ncode\n```\n") == []
    assert unclosed_fences("text\n~~~~\ncode\n") == [2]
    # A fence that its list item ends is closed by the container, as CommonMark says.
    assert unclosed_fences("- ```\n  code\n\ntext\n") == []


def test_a_fence_is_reopened_without_an_info_string_that_holds_a_pipe():
    doc = parse(normalize("# T\n\n``` sh | grep\n| a | b |\n|---|---|\n```\n\n- ```py\n  x\n"))
    piped, listed = doc.fences
    assert (fence_reopener(doc, piped), fence_reopener(doc, listed)) == ("```", "  ```py")
    # With the info string kept, a delimiter row after the reopened line makes it a table.
    assert unclosed_fences("``` sh | grep\n|---|---|\n```") == [3]
    assert unclosed_fences(fence_reopener(doc, piped) + "\n|---|---|\n```") == []


@pytest.mark.timeout(30)
def test_deep_nesting_and_many_headings_parse():
    nested = "".join(f"{'  ' * depth}- level {depth}\n" for depth in range(500))
    doc = parse(normalize(nested))
    assert doc.blocks[0].kind == "bullet_list"
    assert doc.blocks[-1].end_line == 500
    quotes = parse(normalize(">" * 500 + " deep\n"))
    assert quotes.blocks[0].kind == "blockquote"
    many = parse(normalize("".join(f"## Heading {i}\n" for i in range(10_000))))
    assert len(many.blocks) == 10_000


def _tokens(md, text: str) -> list[tuple]:
    tokens = []
    md.block.parse(text, md, {}, tokens)
    return [(t.type, t.map, t.level, t.content, t.info, t.markup) for t in tokens]


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.md")))
def test_first_char_dispatch_gives_markdown_its_tokens_on_fixtures(name):
    text = (FIXTURES / name).read_text(encoding="utf-8")
    assert _tokens(block_parser(True), text) == _tokens(block_parser(False), text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(markdown_documents())
def test_first_char_dispatch_gives_markdown_its_tokens(text):
    assert _tokens(block_parser(True), text) == _tokens(block_parser(False), text)


@pytest.mark.parametrize("strategy", ["semantic", "headers", "structural", "hierarchical"])
def test_titles_and_paths_drop_a_trailing_attribute_list(strategy):
    text = "# First Steps { #first-steps }\n\nIntro.\n\n## Use {braces} here { .note }\n\nBody.\n"
    options = {"keep_short_tail": True} if strategy == "semantic" else {}
    chunks = chunk_document(text, strategy=strategy, **options)
    assert chunks[0].title == "First Steps"
    assert chunks[0].text.startswith("# First Steps { #first-steps }")  # the source, as written
    paths = {c.headings_path for c in chunks} | {(c.header_path,) for c in chunks}
    assert not any("{ #" in part or "{ ." in part for path in paths for part in path)


def test_heading_title_only_drops_attribute_lists():
    assert heading_title("Sub { #sub .cls data-x=1 }") == "Sub"
    assert heading_title("Use {braces} here { .note }") == "Use {braces} here"
    assert heading_title("Use {braces} here") == "Use {braces} here"
    assert heading_title("Set {x}") == "Set {x}"


def test_heading_title_drops_trailing_badges():
    """VitePress' `<Badge type="tip" text="v2.0" />` after a heading's text was in every chunk's
    title and path (`mdindex query` listed `Getting Started <Badge type="tip" text="v2.0" />`)."""
    assert heading_title('Getting Started <Badge type="tip" text="v2.0" />') == "Getting Started"
    assert heading_title("load() <Badge text=beta/> <Badge text=new /> { #load }") == "load()"
    assert (
        heading_title("Daten-<dfn title=x>Konversion</dfn>")
        == "Daten-<dfn title=x>Konversion</dfn>"
    )
    assert heading_title("<Logo />") == "<Logo />"  # nothing else: kept
    assert heading_title("a <br/> b") == "a <br/> b"


def test_heading_title_drops_readme_badges_and_leading_anchors():
    """GitHub READMEs put CI and registry badges after the project's name, and empty anchors
    before an API heading: rustfmt's README was titled `rustfmt [![linux](https://github.com/…`
    (all four badges' URLs, in every chunk's title and path and its topic's title), libnpmorg's
    `<a name="set"></a> `> org.set(…)``."""
    readme = (
        "# rustfmt [![linux](https://ci.example/linux.svg)](https://ci.example/linux) "
        "[![crates.io](https://img.shields.io/crates/v/rustfmt.svg)](https://crates.io/rustfmt)"
        "\n\nA tool for formatting Rust code.\n\n"
        '## <a name="set"></a> `org.set(org, user)` ![beta][beta-badge]\n\nSets a role.\n\n'
        "[beta-badge]: https://img.shields.io/badge/beta-yes.svg\n"
    )
    for strategy in ("semantic", "structural", "hierarchical", "headers"):
        chunks = chunk_document(readme, strategy=strategy)
        assert {c.title for c in chunks} <= {"rustfmt", "`org.set(org, user)`"}, strategy
        paths = {c.header_path for c in chunks}
        assert paths <= {"# rustfmt", "# rustfmt > ## `org.set(org, user)`"}, strategy
    assert heading_title("QRCode [![Build Status][travis-img]][travis-url]") == "QRCode"
    assert heading_title("Tool ![npm](https://npm.example/v.svg) { #tool }") == "Tool"
    assert heading_title("a ![x](y.png) b") == "a ![x](y.png) b"  # not trailing: kept
    assert heading_title("![logo](logo.png)") == "![logo](logo.png)"  # nothing else: kept
    assert heading_title('<a id="intro">1.</a> Introduction') == '<a id="intro">1.</a> Introduction'
    assert heading_title('<a name="x"></a>') == '<a name="x"></a>'


@pytest.mark.parametrize(
    ("text", "implied"),
    [
        ("---\ntitle: Installing the CLI\n---\nRun it.\n\n## Options\n", "Installing the CLI"),
        ('+++\ntitle = " Installing the CLI "\n+++\nRun it.\n', "Installing the CLI"),
        ("---\ntitle: |\n  Installing\n\n  the CLI\n---\nRun it.\n", "Installing the CLI"),
        ("---\ntitle: Page\n---\n```\n# in a fence\n```\n> # in a quote\n", "Page"),
        ("---\ntitle: Page\n---\n# Own H1\n", None),
        ("---\ntitle: Page\n---\nOwn H1\n===\n", None),
        ("---\ntitle: Page\n---\n#\n", None),  # an H1 without text is still the page's H1
        ("---\ntitle: 5\n---\nRun it.\n", "5"),  # the text written (ignored until REVISION 38)
        ("---\ntitle: [a, b]\n---\nRun it.\n", None),
        ("---\ntitle: '  '\n---\nRun it.\n", None),
        ("---\nname: Page\n---\nRun it.\n", None),
        ("Run it.\n", None),
    ],
)
def test_a_front_matter_title_is_an_implied_h1_where_the_body_has_none(text, implied):
    """Docs sites render a page's front-matter title as its H1 when the page has none: the title
    (one line) is the parse's implied heading, unless the body has a top-level H1 (ATX or setext;
    one in a fence or a quote is none) or the title is no text, or blank."""
    doc = parse(normalize(text))
    assert doc.implied == (() if implied is None else (Heading(1, implied),))


def test_mkdocs_admonitions_and_content_tabs_are_containers_not_indented_code():
    """Python-Markdown's `!!! tip`, `??? note` and pymdownx's `=== "pip"` hold markdown indented
    4 columns (MkDocs, MkDocs Material); CommonMark reads a paragraph, then indented code: the
    body's prose was INDENTED_CODE, the fence in a tab no fence, and a link in a body no link."""
    text = (
        '!!! tip "Use a virtual environment"\n'
        "\n"
        "    Create one first; see [venv](venv.md).\n"
        "\n"
        '=== "pip"\n'
        "\n"
        "    ```sh\n"
        "    pip install x\n"
        "    ```\n"
        "\n"
        "???+ note\n"
        "    Open by default.\n"
        "\n"
        "        indented code in it\n"
        "\n"
        "After.\n"
    )
    doc = parse(normalize(text))
    assert [(b.kind, b.start_line, b.end_line) for b in doc.blocks] == [
        ("admonition", 1, 3),
        ("admonition", 5, 9),
        ("admonition", 11, 14),
        ("paragraph", 16, 16),
    ]
    assert doc.line_kinds[2] == doc.line_kinds[11] == TEXT
    assert doc.line_kinds[6:9] == bytes([FENCE_MARK, FENCE_BODY, FENCE_MARK])
    assert doc.line_kinds[13] == INDENTED_CODE  # code inside the admonition: 8 columns
    assert [(fence.start_line, fence.info) for fence in doc.fences] == [(7, "sh")]
    assert [(link.line, link.url) for link in doc.links] == [(3, "venv.md")]
    nested = parse(normalize("- item\n\n    !!! note\n\n        in the item\n"))
    assert nested.line_kinds[4] == TEXT  # in a list item: 4 columns past the item's content


@pytest.mark.parametrize(
    ("text", "kinds"),
    [
        ("Text\n!!! note\n    more\n", ["paragraph"]),  # no blank line: the paragraph goes on
        ("    !!! note\n\n    body\n", ["code_block"]),  # itself indented 4: code
        ("!!! note\n\nNot indented.\n", ["admonition", "paragraph"]),  # an empty admonition
        ("=== not a tab\n", ["paragraph"]),  # a tab's label is quoted
        ("!!!\n\n    code\n", ["paragraph", "code_block"]),  # no type
        ("Title\n===\n\n    code\n", ["heading", "code_block"]),  # a setext underline
        ("- item\n\n    !!! note\n\n        in the item\n", ["bullet_list"]),
    ],
)
def test_only_an_admonitions_first_line_opens_one(text, kinds):
    assert [b.kind for b in parse(normalize(text)).blocks] == kinds


def test_myst_directives_of_markdown_are_text_and_code_directives_stay_code():
    """MyST (Jupyter Book, Sphinx) writes directives as fences with a braced info string. A
    `{note}` holds markdown: its lines were FENCE_BODY (every chunk of a note `is_code`, its link
    no link). It stays a fence (splitters reopen it), its lines of the kinds of its content; a
    `{code-block}` is code, and so is a fence inside a `{tab-item}`."""
    text = (
        "```{note}\n"  # 1
        "Needs Python 3.10; see [install](install.md).\n"
        "```\n"
        "\n"
        "```{code-block} python\n"  # 5
        ":caption: hello.py\n"
        "print(1)\n"
        "```\n"
        "\n"
        "`````{tab-set}\n"  # 10
        "````{tab-item} pip\n"
        "```sh\n"
        "pip install x\n"
        "```\n"
        "````\n"  # 15
        "`````\n"
    )
    doc = parse(normalize(text))
    assert [(b.kind, b.start_line, b.end_line) for b in doc.blocks] == [
        ("admonition", 1, 3),
        ("fence", 5, 8),
        ("admonition", 10, 16),
    ]
    assert doc.line_kinds[0:3] == bytes([TEXT] * 3)
    assert doc.line_kinds[4:8] == bytes([FENCE_MARK, FENCE_BODY, FENCE_BODY, FENCE_MARK])
    assert doc.line_kinds[9:16] == bytes(
        [TEXT, TEXT, FENCE_MARK, FENCE_BODY, FENCE_MARK] + [TEXT] * 2
    )
    assert [(fence.start_line, fence.info) for fence in doc.fences] == [
        (1, "{note}"),
        (5, "{code-block} python"),
        (10, "{tab-set}"),
    ]
    assert [(link.line, link.url) for link in doc.links] == [(2, "install.md")]
    assert text_line_kinds(text) == doc.line_kinds + bytes([TEXT])  # a chunk's own lines agree


@pytest.mark.parametrize(
    "opener",
    [":::{tip}", "::: details Click to see the upload", ":::note", "::::{admonition} Title"],
)
def test_colon_fences_are_containers_up_to_their_closing_line(opener):
    """MyST's `:::{tip}`, VitePress' `::: details`, Docusaurus' `:::note`: the opening line, the
    body's blocks and the closing `:::` were blocks of their own, so `structural` began a chunk
    with a bare `:::` after a code block. A line of colons inside fenced code closes nothing."""
    closer = opener[: len(opener) - len(opener.lstrip(":"))]
    text = f"{opener}\nSome text.\n\n```md\n:::\n```\n{closer}\n\nAfter.\n"
    doc = parse(normalize(text))
    assert [(b.kind, b.start_line, b.end_line) for b in doc.blocks] == [
        ("admonition", 1, 7),
        ("paragraph", 9, 9),
    ]
    assert doc.line_kinds[3:6] == bytes([FENCE_MARK, FENCE_BODY, FENCE_MARK])


@pytest.mark.parametrize(
    ("text", "kinds"),
    [
        # mkdocstrings' autodoc lines: no closing line, no container
        ("::: fastapi.FastAPI\n    options:\n\n::: fastapi.APIRouter\n", ["paragraph"] * 2),
        (":::{tip}\nNo closing line.\n", ["paragraph"]),
        ("::::{note}\nShort closer.\n:::\n", ["paragraph"]),  # fewer colons close nothing
        ("Text\n:::{note}\nIn.\n:::\n", ["paragraph", "admonition"]),  # as a fence, interrupts
        ("    :::{note}\n    In.\n    :::\n", ["code_block"]),
    ],
)
def test_only_a_closed_colon_fence_is_a_container(text, kinds):
    assert [b.kind for b in parse(normalize(text)).blocks] == kinds


@pytest.mark.parametrize(
    ("text", "blocks", "kinds"),
    [
        # a `///` line in a code fence closes nothing; a whole `/// tip` ... `///` in one is code
        (
            "/// note | Title\nSome text.\n\n```md\n/// tip\nx\n///\n```\n///\n\nAfter.\n",
            [("admonition", 1, 9), ("paragraph", 11, 11)],
            [TEXT, TEXT, TEXT, FENCE_MARK, FENCE_BODY, FENCE_BODY, FENCE_BODY, FENCE_MARK, TEXT],
        ),
        # nested: `////` closes only on `////`, the `/// note` in it on `///`
        (
            "//// tab | Python 3.10+\n\n/// note\n\n    code\n\n///\n\n////\n",
            [("admonition", 1, 9)],
            [TEXT] * 4 + [INDENTED_CODE] + [TEXT] * 4,
        ),
        # the options (YAML, indented 4 columns right after the first line) are no code
        (
            "/// admonition | Title\n    type: warning\n\nBody.\n///\n",
            [("admonition", 1, 5)],
            [TEXT] * 5,
        ),
    ],
    ids=["code-fence-inside", "nested", "options"],
)
def test_slash_fences_are_containers_up_to_a_closing_line_of_as_many_slashes(text, blocks, kinds):
    """pymdownx.blocks' fences (FastAPI's `/// tip | Title`, `//// tab | Python 3.10+`): the
    first line, the body's blocks and the closing `///` were paragraphs and blocks of their own,
    so a chunk could open a fence it did not close, or be a bare `///` (1,634 and 85 of FastAPI's
    29,632 `structural` chunks)."""
    doc = parse(normalize(text))
    assert [(b.kind, b.start_line, b.end_line) for b in doc.blocks] == blocks
    assert list(doc.line_kinds[: len(kinds)]) == kinds


@pytest.mark.parametrize(
    ("text", "kinds"),
    [
        # an opener without a closing line of as many slashes is no container
        ("//// note\nNever closed.\n\n/// tip\nIn.\n///\n", ["paragraph", "admonition"]),
        ("/// note\nShort.\n////\n\n/// tip\nIn.\n///\n", ["admonition"]),  # 4 close no 3
        ("Text\n/// note\nIn.\n///\n", ["paragraph", "admonition"]),  # interrupts a paragraph
        ("    /// note\n    In.\n    ///\n\n/// tip\nIn.\n///\n", ["code_block", "admonition"]),
        ("/// note | A | B\nIn.\n///\n\n/// not a name\nIn.\n///\n", ["admonition", "paragraph"]),
    ],
    ids=["unclosed", "exact-count", "interrupts", "indented-code", "opener-form"],
)
def test_only_a_slash_fence_closed_by_as_many_slashes_is_a_container(text, kinds):
    assert [b.kind for b in parse(normalize(text)).blocks] == kinds


@pytest.mark.parametrize(
    ("text", "containers"),
    [
        # FastAPI's deployment/docker.md: a note in a numbered item, 4 columns in
        (
            "1. Install.\n\n    /// note\n\n    In.\n\n    ///\n\n2. Copy.\n",
            [(3, 7, "    /// note")],
        ),
        # on the item's first line: repeated without the list marker, as a reopened fence
        ("- /// tip | Title\n  In.\n  ///\n- After.\n", [(1, 3, "  /// tip | Title")]),
        ("10. :::{note}\n    In.\n    :::\n", [(1, 3, "    :::{note}")]),
        ("* Item\n\n    !!! note\n        In.\n", [(3, 4, "    !!! note")]),
        ("> /// note\n> In.\n> ///\n", [(1, 3, "> /// note")]),
        # in a list in a container: both, outermost first
        (
            "//// tab | A\n\n- Item\n\n    /// note\n    In.\n    ///\n\n////\n",
            [(1, 9, "//// tab | A"), (5, 7, "    /// note")],
        ),
        ("1. Item\n\n    /// note\n    Never closed.\n", []),
    ],
    ids=["numbered", "bullet-first-line", "colon", "admonition", "quote", "in-a-tab", "unclosed"],
)
def test_containers_in_list_items_and_block_quotes_are_containers(text, containers):
    """A `/// note` (or `:::tip`, `!!! note`) inside a list item or block quote is a container
    as a top-level one is (its first line, as a chunk cut inside its body repeats it, and its
    last line): until chunking.REVISION 43 only top-level ones and those nested right in them
    were, so a list cut inside its body gave chunks that opened a `///` they did not close (6
    of FastAPI's, all in deployment/docker.md)."""
    doc = parse(normalize(text))
    assert [c for b in doc.blocks for c in indented_containers(doc, b)] == containers


def test_a_myst_target_line_belongs_to_the_heading_it_labels():
    """`(install)=` above a heading is the label MyST's `{ref}` names it by; it renders nothing.
    It was a paragraph of its own: `structural` and `hierarchical` made it a chunk (2 to 8
    tokens, no title) before the page's first heading."""
    doc = parse(normalize("(config)=\n# Configuration\n\nText.\n\n(a)=\n\nNot a heading.\n"))
    assert [(b.kind, b.start_line, b.end_line) for b in doc.blocks] == [
        ("heading", 1, 2),
        ("paragraph", 4, 4),
        ("paragraph", 6, 6),
        ("paragraph", 8, 8),
    ]


def test_an_html_anchor_line_belongs_to_the_heading_it_labels():
    """Node.js' changelogs put `<a id="20.1.0"></a>` above each version's heading, Rust's
    releases.md `<a id="1.95-Cargo"></a>` above each setext heading: the anchor ended the chunk of
    the version before (structural, hierarchical, semantic), and the page's H1 with the first
    anchor was a chunk of no content (`# Node.js 20 ChangeLog` and `<a id="20.0.0"></a>`)."""
    text = (
        "# Node.js 20 ChangeLog\n\n"
        '<a id="20.1.0"></a>\n\n## 2023-05-03, Version 20.1.0\n\nFixes.\n\n'
        '<a name="cargo"></a>\nCargo\n-----\n\nBuilds.\n\n'
        '<a id="x">1.</a>\n\n## Kept\n\nText.\n'
    )
    doc = parse(normalize(text))
    assert [(b.kind, b.start_line, b.end_line) for b in doc.blocks] == [
        ("heading", 1, 1),
        ("heading", 3, 5),
        ("paragraph", 7, 7),
        ("heading", 9, 11),
        ("paragraph", 13, 13),
        ("paragraph", 15, 15),  # an anchor holding text is text
        ("heading", 17, 17),
        ("paragraph", 19, 19),
    ]
    small = {"semantic": {"max_tokens": 40, "min_tokens": 10}}
    for strategy in ("semantic", "structural", "hierarchical"):
        chunks = chunk_document(text, strategy=strategy, **small.get(strategy, {}))
        for chunk in chunks:
            lines = chunk.text.split("\n")
            assert "</a>" not in lines[-1] or "1.</a>" in lines[-1], (strategy, chunk.text)
            assert lines[-1].strip() != "# Node.js 20 ChangeLog", (strategy, chunk.text)
        assert "Cargo" in {c.title for c in chunks}, strategy
