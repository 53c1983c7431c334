"""index.json bytes: `dump_json` (orjson) writes exactly what the standard library's indenting
encoder writes, for every value an index holds (floats are cosines rounded to 4 decimals)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from indexing.hal import directory_index, dump_json, moved_index, not_an_index, set_child_topics


def stdlib(doc) -> bytes:
    return (json.dumps(doc, ensure_ascii=False, indent=2, separators=(",", ": ")) + "\n").encode()


COSINES = st.integers(-10_000, 10_000).map(lambda n: round(n / 10_000, 4) + 0.0)
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)  # no lone surrogates
# 64-bit: SimHash values are unsigned 64-bit integers
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), COSINES, TEXT)
DOCS = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(DOCS)
def test_dump_json_writes_the_standard_librarys_bytes(doc):
    assert dump_json(doc) == stdlib(doc)


def test_the_edges_of_the_cosine_range_and_odd_text():
    doc = {
        "cosines": [0.0001, -0.0001, 0.0, -0.0 + 0.0, 1.0, -1.0, 0.5, 0.1234],
        "text": 'é \u2028 \x00 \x1f " \\ / 日本',
        "empty": [[], {}],
        "ints": [0, -1, 2**53 + 1],
        1: "an int key becomes a string",
    }
    assert dump_json(doc) == stdlib(doc)


def test_an_index_json_this_library_did_not_write_is_told_apart():
    """A person's own index.json (in an in-place build) is not taken for a previous index."""
    assert not_an_index(directory_index("guides", ["guides/a"]), "guides") is None
    assert not_an_index(b'{"pages": []}', "guides") == "not an mdindex index (no _embedded object)"
    assert not_an_index(b"[1, 2]", "guides") == "not an mdindex index (no _embedded object)"
    assert not_an_index(b"garbage{", "guides").startswith("not JSON (")
    assert not_an_index(directory_index("other", []), "guides") == (
        "the index of 'other', not of 'guides'"
    )


def test_an_index_json_that_is_no_json_names_its_line_as_the_sources_failures_do():
    """A person's index.json with an editor's mistake names the line it is on, "at line L" (it
    gave orjson's "line 3 column 9 (char 20)", which no report read as a line), and one that is
    no UTF-8 text says what a source would (orjson said "line 1 column 1" of each)."""
    trailing = b'{\n  "id": "guides",\n  "title": "Guides",\n}\n'
    assert not_an_index(trailing, "guides") == (
        "not JSON (trailing comma is not allowed at line 3, column 20)"
    )
    powershell = '{"id": "guides"}'.encode("utf-16")  # `ConvertTo-Json > index.json`
    assert not_an_index(powershell, "guides") == (
        "not JSON (looks like UTF-16 (byte order mark FF FE); save it as UTF-8)"
    )
    latin1 = '{\n  "title": "Caf\u00e9"\n}\n'.encode("latin-1")
    assert not_an_index(latin1, "guides") == (
        "not JSON (invalid UTF-8 at byte offset 17 (line 2): invalid continuation byte)"
    )
    assert not_an_index(b'{"id": 1,\n\x00}', "guides") == (
        "not JSON (binary content: NUL byte at byte offset 10 (line 2))"
    )


def test_an_index_json_written_for_another_folder_is_told_from_a_persons_own():
    """An index.json this library wrote for another folder (the folder renamed or copied in an
    in-place output) is a moved index; a person's HAL document with `_embedded` is not, nor is
    the folder's own index."""
    assert moved_index(directory_index("manuals/api", []), "guides/api")
    assert moved_index(directory_index("", ["a"]), "v1")  # a built root copied into a folder
    assert not moved_index(directory_index("guides", []), "guides")
    assert not moved_index(b'{"id": "x", "_embedded": {}}', "guides")  # no `_links` of ours
    assert not moved_index(b'{"_embedded": {}, "_links": {"self": {"href": "/index.json"}}}', "g")
    assert not moved_index(b"garbage{", "guides")
    assert not moved_index(b'{"pages": []}', "guides")


def test_the_root_alone_links_the_corpus_files_by_curies():
    """A HAL client that starts from the root index.json finds the files of the whole output by
    its links, root-absolute as `self` (it knew their paths from the README alone): the
    embedding settings, the SimHash tables' manifest, and a topic's chunk and documents tables
    as URI templates of its slug; CURIEs name the relations. No other index.json has them."""
    assert json.loads(directory_index("", ["guides"]))["_links"] == {
        "self": {"href": "/index.json"},
        "curies": [
            {"name": "mdindex", "href": "https://mdindex.invalid/rels/{rel}", "templated": True}
        ],
        "mdindex:model": {"href": "/_index/model.json"},
        "mdindex:simhash": {"href": "/_index/simhash/manifest.json"},
        "mdindex:chunk-table": {"href": "/_index/chunks/{topic_slug}.parquet", "templated": True},
        "mdindex:document-table": {
            "href": "/_index/documents/{topic_slug}.parquet",
            "templated": True,
        },
    }
    assert json.loads(directory_index("guides", []))["_links"] == {
        "self": {"href": "/guides/index.json"},
        "parent": {"href": "/index.json"},
    }


def test_a_root_built_before_the_corpus_links_gains_them_and_is_still_told_moved():
    """A root topic's index.json of a build before 2026-12-01, relinked, gains the corpus links;
    copied into a folder, it is still one this library wrote for another folder."""
    doc = json.loads(directory_index("", ["a"]))
    doc["_links"] = {"self": {"href": "/index.json"}}
    doc["_embedded"]["chunks"] = {}
    old = dump_json(doc)
    relinked = json.loads(set_child_topics(old, ["a", "b"]))["_links"]
    assert relinked == json.loads(directory_index("", []))["_links"] and "mdindex:model" in relinked
    assert moved_index(old, "v1")
