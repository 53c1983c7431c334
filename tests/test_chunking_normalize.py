"""Decoding, line endings and YAML or TOML front matter (seed 002 section 2)."""

from __future__ import annotations

import hashlib
import time

import pytest

from chunking import (
    CHUNKING_FAILED,
    FRONT_MATTER_TOO_LARGE,
    INVALID_FRONT_MATTER,
    ChunkingError,
    chunk_source,
)
from chunking.normalize import normalize


def test_invalid_utf8_names_the_byte_offset_and_its_line():
    """A writer's editor goes to a line: the offset alone was all the message said."""
    data = "# Title\n\ncafé ".encode() + b"\xff\xfe rest"
    with pytest.raises(ChunkingError) as caught:
        normalize(data)
    assert caught.value.code == CHUNKING_FAILED
    offset = len("# Title\n\ncafé ".encode())
    assert f"byte offset {offset} (line 3):" in caught.value.message


def test_nul_byte_is_binary_content():
    with pytest.raises(ChunkingError) as caught:
        normalize(b"# Title\n\x00\x01\x02")
    assert caught.value.code == CHUNKING_FAILED
    assert caught.value.message.endswith("byte offset 8 (line 2)")


def test_bom_dropped_and_line_endings_normalised():
    doc = normalize(b"\xef\xbb\xbf# T\r\nline two\rline three\n\nlast")
    assert doc.lines == ("# T", "line two", "line three", "", "last")
    assert doc.body == "# T\nline two\nline three\n\nlast\n"


def test_source_version_id_is_sha256_of_raw_bytes():
    data = b"\xef\xbb\xbf# T\r\n"
    assert normalize(data).source_version_id == hashlib.sha256(data).hexdigest()
    text = "# T\n"
    assert normalize(text).source_version_id == hashlib.sha256(text.encode()).hexdigest()


def test_front_matter_parsed_excluded_and_line_numbers_kept():
    data = "---\ntitle: Guide\ndate: 2024-05-01\ntags: [a, b]\n---\n# Heading\n\nBody text.\n"
    document = chunk_source(data)
    assert document.front_matter == {"title": "Guide", "date": "2024-05-01", "tags": ["a", "b"]}
    (chunk,) = document.chunks
    assert "title: Guide" not in chunk.text
    assert chunk.text.startswith("# Heading")
    assert (chunk.start_line, chunk.end_line) == (6, 8)


def test_front_matter_with_crlf_and_dots_terminator():
    document = chunk_source(b"---\r\nauthor: me\r\n...\r\nText line.\r\n")
    assert document.front_matter == {"author": "me"}
    assert document.chunks[0].start_line == 4


def test_empty_front_matter_is_empty_mapping():
    assert chunk_source("---\n---\nText.\n").front_matter == {}


@pytest.mark.parametrize(
    "yaml_text",
    ["title: [unclosed", "key: value\n  bad: indent"],
)
def test_invalid_front_matter_is_an_error_for_the_document(yaml_text):
    with pytest.raises(ChunkingError) as caught:
        chunk_source(f"---\n{yaml_text}\n---\n# T\n")
    assert caught.value.code == INVALID_FRONT_MATTER


@pytest.mark.parametrize("text", ["- a\n- b", "just a string", "3"])
def test_a_block_of_text_a_list_or_a_number_between_rules_is_markdown(text):
    """A page opening with a thematic break and holding another `---` later (a slide deck, a
    setext heading's underline) failed INVALID_FRONT_MATTER ("must be a mapping") on every run:
    YAML that reads as no mapping is no front matter, and the lines are the page's."""
    document = chunk_source(f"---\n{text}\n---\n# T\n\nBody.\n", strategy="headers")
    assert document.front_matter == {}
    assert document.chunks[0].start_line == 1
    assert document.chunks[0].text.startswith(f"---\n{text}\n")


def test_unclosed_front_matter_is_ordinary_markdown():
    document = chunk_source("---\ntitle: x\n\nno closing line here\n")
    assert document.front_matter == {}
    assert "title: x" in document.chunks[0].text


def test_hugo_toml_front_matter_is_parsed_as_yaml_front_matter_is():
    """A Hugo page's `+++` TOML front matter was chunk text (chunk 0 began `+++\ntitle = ...`)
    and gave neither front matter nor promotion_level."""
    data = (
        '+++\r\ntitle = "Guide"\r\ndate = 2024-05-01T10:00:00Z\r\nday = 2024-05-01\r\n'
        'promotion_level = "team"\r\n[params]\r\nscore = nan\r\n+++\r\n# Heading\r\n\r\nBody.\r\n'
    )
    document = chunk_source(data)
    assert document.front_matter == {
        "title": "Guide",
        "date": "2024-05-01 10:00:00+00:00",  # as YAML's datetimes
        "day": "2024-05-01",
        "promotion_level": "team",
        "params": {"score": "nan"},
    }
    assert document.promotion_level == "team"
    (chunk,) = document.chunks
    assert chunk.text.startswith("# Heading")
    assert (chunk.start_line, chunk.end_line) == (9, 11)


@pytest.mark.parametrize(
    ("toml_text", "says"),
    [
        ('title = "x"\nbad = [1,,]', "TOML front matter at line 3, column 10: Invalid value"),
        ('title = "x"\nbad =', "TOML front matter at its end, line 3: Invalid value"),
        ("title: yaml here", "TOML front matter at line 2, column 6: Expected '='"),
    ],
)
def test_invalid_toml_front_matter_names_its_line_in_the_file(toml_text, says):
    with pytest.raises(ChunkingError) as caught:
        chunk_source(f"+++\n{toml_text}\n+++\n# T\n")
    assert caught.value.code == INVALID_FRONT_MATTER
    assert caught.value.message.startswith(says)


@pytest.mark.parametrize(
    ("toml_text", "says"),
    [
        ('x = "' + "y" * 70_000 + '"', "TOML front matter of 70006 characters (limit 65536)"),
        ("x = " + "[" * 20_000 + "]" * 20_000, "TOML front matter nested deeper than 32 levels"),
        ("x = " + "[" * 33 + "]" * 33, "TOML front matter nested deeper than 32 levels"),
    ],
    ids=["oversized", "deep-recursion", "deep"],
)
def test_toml_front_matter_is_bounded_as_yaml_front_matter_is(toml_text, says):
    with pytest.raises(ChunkingError) as caught:
        chunk_source(f"+++\n{toml_text}\n+++\nBody.\n")
    assert (caught.value.code, caught.value.message) == (FRONT_MATTER_TOO_LARGE, says)


def test_plus_lines_without_a_closing_one_are_ordinary_markdown():
    document = chunk_source("+++\ntitle = 1\n\nno closing line here\n")
    assert document.front_matter == {}
    assert document.chunks[0].text.startswith("+++\ntitle = 1\n")


def _alias_bomb(levels: int, pairs: bool = False) -> str:
    """Billion-laughs front matter: each level holds nine aliases of the one before (~400 bytes
    at nine levels; about 387 million strings once expanded); `pairs`: as YAML's `!!pairs`, each
    level a list of (key, value) tuples."""
    tag, key = ("!!pairs ", "k: ") if pairs else ("", "")
    lines = [f"l0: &l0 {tag}[" + ",".join([f'{key}"lol"'] * 9) + "]"]
    for level in range(1, levels + 1):
        lines.append(f"l{level}: &l{level} {tag}[" + ",".join([f"{key}*l{level - 1}"] * 9) + "]")
    return "---\n" + "\n".join(lines) + "\n---\n# T\n\nBody.\n"


@pytest.mark.parametrize(
    ("front_matter", "says"),
    [
        (_alias_bomb(9), "expands (aliases included)"),
        # a tuple's size was its text's: str() expanded the bomb (MemoryError, or gigabytes)
        (_alias_bomb(9, pairs=True), "expands (aliases included)"),
        ("---\nx: &a [*a]\n---\nBody.\n", "nested deeper than 32 levels"),
        ("---\nx: " + "[" * 20_000 + "]" * 20_000 + "\n---\nBody.\n", "nested deeper"),
        ("---\nx: " + "y" * 70_000 + "\n---\nBody.\n", "of 70003 characters (limit 65536)"),
    ],
    ids=["alias-bomb", "pairs-alias-bomb", "recursive-alias", "deep-flow", "oversized"],
)
def test_front_matter_is_bounded_in_size_expansion_and_depth(front_matter, says):
    started = time.perf_counter()
    with pytest.raises(ChunkingError) as caught:
        chunk_source(front_matter)
    assert caught.value.code == FRONT_MATTER_TOO_LARGE
    assert says in caught.value.message
    assert time.perf_counter() - started < 10  # the bomb is never expanded


def test_front_matter_with_a_few_aliases_is_expanded():
    document = chunk_source("---\nbase: &b {a: 1}\nx: *b\ny: [*b, *b]\n---\nBody.\n")
    assert document.front_matter == {"base": {"a": 1}, "x": {"a": 1}, "y": [{"a": 1}, {"a": 1}]}


def test_a_lone_surrogate_in_front_matter_is_refused_and_escapes_of_characters_are_kept():
    """YAML's "\\ud800" escape makes a lone surrogate: the document was chunked, then could not be
    written (UTF-8 refuses it), which failed the build's chunk task and the whole build."""
    with pytest.raises(ChunkingError) as caught:
        chunk_source('---\ntitle: "bad \\ud800 here"\n---\nBody.\n')
    assert caught.value.code == INVALID_FRONT_MATTER
    assert caught.value.message == r"YAML front matter: '\ud800' is a lone surrogate, no character"
    kept = chunk_source('---\ntitle: "caf\\u00e9 \\U0001F600"\n---\nBody.\n')
    assert kept.front_matter == {"title": "café \U0001f600"}


def test_front_matter_dates_as_keys_and_nan_or_infinity_are_made_json_text():
    """A date as a key (`2024-01-01: released`) failed the document (json.dumps takes no date
    key); `.nan` and `.inf` stayed floats, written as `NaN` and `Infinity`, which are no JSON."""
    document = chunk_source("---\n2024-01-01: released\nscore: .nan\nmax: [-.inf]\n---\nBody.\n")
    assert document.front_matter == {"2024-01-01": "released", "score": "nan", "max": ["-inf"]}


def test_yaml_pairs_sets_and_binary_are_made_deterministic_json():
    """What PyYAML alone builds of YAML's tags: `!!omap`/`!!pairs` tuples were not made ready
    (a `.nan` in one written `NaN`, no JSON, in the tables and promotion_level), a `!!set` was
    Python's text in an order that changed from run to run (the hash seed), and `!!binary`
    Python's `b'...'`. Now: lists of pairs, ready; the mapping of null values that js-yaml or
    Go's YAML read, sorted; the base64 text as written."""
    document = chunk_source(
        "---\npromotion_level: !!pairs [a: .nan, b: 2024-05-01]\n"
        "tags: !!set {gamma, alpha, beta}\nlogo: !!binary aGVsbG8=\n---\n# T\n\nBody.\n"
    )
    assert document.front_matter == {
        "promotion_level": [["a", "nan"], ["b", "2024-05-01"]],
        "tags": {"alpha": None, "beta": None, "gamma": None},
        "logo": "aGVsbG8=",
    }
    assert list(document.front_matter["tags"]) == ["alpha", "beta", "gamma"]
    assert document.promotion_level == '[["a", "nan"], ["b", "2024-05-01"]]'


def test_front_matter_is_read_as_yaml_1_2_as_hugo_and_js_yaml_read_it():
    """PyYAML reads YAML 1.1: `10:30` was the integer 630, `NO` and `on` booleans (Norway's
    country False), `0755` octal 493, `1_000` 1000. YAML 1.2's core schema (Hugo, Docusaurus'
    js-yaml) reads them as written; only a top-level draft mark still reads YAML 1.1's `on`/`no`
    (a page marked so stays out of the index; a nested one is text)."""
    document = normalize(
        "---\ntime: 10:30\nversion: 1:2\ncountry: NO\nenabled: on\nanswer: y\nmode: 0755\n"
        "modes: [0o755, 0x1F, +12]\ncount: 1_000\nbig: 1e3\nlimit: -.Inf\nok: True\nnone: ~\n"
        "date: 2024-05-01\ndraft: on\npublished: no\nparams: {draft: yes}\n---\nBody.\n"
    )
    assert document.front_matter == {
        "time": "10:30",
        "version": "1:2",
        "country": "NO",
        "enabled": "on",
        "answer": "y",
        "mode": 755,
        "modes": [493, 31, 12],
        "count": "1_000",
        "big": 1000.0,
        "limit": "-inf",
        "ok": True,
        "none": None,
        "date": "2024-05-01",
        "draft": True,
        "published": False,
        "params": {"draft": "yes"},
    }


@pytest.mark.parametrize(
    ("title", "text"), [("1984", "1984"), ("3.10", "3.10"), ("true", "true"), ("'1984'", "1984")]
)
def test_a_title_written_as_a_number_is_the_text_written(title, text):
    """`title: 1984` was the integer 1984, and a title that is no string is none: the page had
    no implied H1 and named no topic. A YAML title is the text written (`3.10`, not 3.1)."""
    document = chunk_source(f"---\ntitle: {title}\n---\nA novel.\n", document_id="d.md")
    assert document.front_matter == {"title": text}
    assert document.chunks[0].title == text


@pytest.mark.parametrize(
    ("title", "text"), [("1984", "1984"), ("3.5", "3.5"), ("true", "true"), ('"1984"', "1984")]
)
def test_a_toml_title_written_as_a_number_is_its_text(title, text):
    """`title = 1984` in Hugo's TOML front matter was the integer 1984, so the page had no title
    while the same YAML title was "1984": it is the text, as Hugo reads it."""
    document = chunk_source(f"+++\ntitle = {title}\n+++\nA novel.\n", document_id="d.md")
    assert document.front_matter == {"title": text}
    assert document.chunks[0].title == text


@pytest.mark.parametrize(
    ("yaml_text", "says"),
    [
        ("title: A\nid: 1\ntitle: B", "at line 4: key 'title' written twice (first at line 2)"),
        ("x:\n  - {a: 1, 'a': 2}", "at line 3: key 'a' written twice (first at line 3)"),
        ("x: !!int ten", "at line 2: 'ten' is no int"),
        ("x: !!bool maybe", "at line 2: 'maybe' is no bool"),
    ],
)
def test_a_repeated_key_or_a_tag_its_text_fails_is_invalid_front_matter(yaml_text, says):
    """A key written twice kept its last value, silently (YAML, js-yaml and Go's yaml refuse it);
    `!!int ten` failed with Python's ValueError, CHUNKER_ERROR. A `<<` merge is no repeat."""
    with pytest.raises(ChunkingError) as caught:
        normalize(f"---\n{yaml_text}\n---\nBody.\n")
    assert caught.value.code == INVALID_FRONT_MATTER
    assert caught.value.message == f"YAML front matter {says}"
    merged = normalize("---\nbase: &b {k: 1, j: 2}\nx: {<<: *b, k: 3}\n---\nBody.\n")
    assert merged.front_matter["x"] == {"k": 3, "j": 2}


@pytest.mark.parametrize(
    ("toml_text", "key"),
    [
        ("id = 99999999999999999999\n", "id = 99999999999999999999"),
        (
            "[[events]]\nids = [1, -9223372036854775809]\n",
            "events[0].ids[1] = -9223372036854775809",
        ),
    ],
)
def test_a_toml_integer_outside_64_bits_is_invalid_front_matter_naming_its_key(toml_text, key):
    """TOML allows no integer outside 64 bits (Hugo refuses the page); tomllib reads one, which
    went into the tables as a number few JSON readers hold. The edges are kept."""
    with pytest.raises(ChunkingError) as caught:
        chunk_source(f"+++\n{toml_text}+++\n# T\n\nBody.\n")
    assert caught.value.code == INVALID_FRONT_MATTER
    assert caught.value.message == f"TOML front matter: {key} is outside TOML's 64-bit integers"
    edges = chunk_source("+++\nmax = 9223372036854775807\nmin = -9223372036854775808\n+++\nx\n")
    assert edges.front_matter == {"max": 2**63 - 1, "min": -(2**63)}


def test_python_object_tags_are_refused():
    with pytest.raises(ChunkingError) as caught:
        chunk_source("---\nx: !!python/object/apply:os.system ['true']\n---\nBody.\n")
    assert caught.value.code == INVALID_FRONT_MATTER
    assert "python/object" in caught.value.message


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ("# Title\n\nsome text\n".encode("utf-16"), "looks like UTF-16 (byte order mark FF FE)"),
        ("# Title\n\nsome text\n".encode("utf-16-be"), "looks like UTF-16 (big-endian, no byte"),
        ("# Title\n\nsome text\n".encode("utf-16-le"), "looks like UTF-16 (little-endian, no"),
    ],
)
def test_utf16_input_is_named_as_utf16(data, says):
    with pytest.raises(ChunkingError) as caught:
        normalize(data)
    assert caught.value.code == CHUNKING_FAILED
    assert says in caught.value.message


MDX_PAGE = (
    "---\ntitle: Installation\n---\n\n"
    "import Tabs from '@theme/Tabs';\n"
    "import {useCurrentSidebarCategory} from '@docusaurus/theme-common';\n"
    "export const Highlight = ({children}) => (\n"
    '  <span className="hl">{children}</span>\n'
    ");\n\n"
    "export const minVersion = '18.0';\n\n"
    "Install it with npm; Node {minVersion} or newer.\n\n"
    "## Verify\n\nRun `npx skyhook --version`.\n\n"
    "export const later = 1;\n"
)


@pytest.mark.parametrize("strategy", ["semantic", "structural", "headers", "hierarchical"])
def test_an_mdx_module_preamble_is_no_text_of_the_page(strategy):
    """Docusaurus' `import Tabs from '@theme/Tabs';` and `export const` lines after the front
    matter render nothing (MDX compiles them to the page's JavaScript); they were the first
    chunk's first lines, embedded and shown as its text. The page's text starts after them, as
    after its front matter; line numbers stay the file's, and ESM further down is left as text."""
    source = normalize(MDX_PAGE)
    assert source.body_start == 11
    assert source.lines[source.body_start + 1].startswith("Install it")
    options = {"keep_short_tail": True} if strategy == "semantic" else {}
    chunks = chunk_source(MDX_PAGE, strategy=strategy, **options).chunks
    assert chunks[0].start_line == 13
    assert not any("@theme" in c.text or "minVersion = " in c.text for c in chunks)
    assert "export const later = 1;" in chunks[-1].text


@pytest.mark.parametrize(
    "text",
    [
        "import data from your old site first.\n\nThen run it.\n",  # prose: no module name
        "Text first.\n\nimport Tabs from '@theme/Tabs';\n",  # not before the page's text
        "    import Tabs from '@theme/Tabs';\n",  # indented: code
        "```js\nimport Tabs from '@theme/Tabs';\n```\n",
        "exporting things\n",
    ],
)
def test_only_esm_before_the_pages_text_is_a_module_preamble(text):
    assert normalize(text).body_start == 0
