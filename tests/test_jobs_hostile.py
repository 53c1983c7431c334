"""Hostile inputs in one real build (issue 12): the cases beside two normal files, in place, with
a cache whose folder is a link leading out of it. Each source ends in a clear per-source code or
in chunks, the rest is written, and a re-run converges byte for byte. One build (and its re-run)
for all of them, so the module is marked slow (CI runs it). The cases whose cost is their size
(20 MB line, 50 MB document, 20,000 headings, 5,000 columns, 10,000 questions) are bounded in
tests/test_chunking_hostile.py instead, where no embedding of thousands of chunks is needed."""

from __future__ import annotations

import io
import json
from pathlib import Path
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest
from jobs_support import ON_RAY, outputs

from chunking import strategy_key
from jobs.config import load_config
from jobs.reindex import main
from jobs.report import summary
from jobs.report_html import render_html

pytestmark = pytest.mark.usefixtures("ray_session")

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "local.yaml")
NORMAL = (
    "# {0}\n\nThe {0} page explains how the client retries a request after a timeout, and how "
    "the delay between attempts doubles up to a limit.\n\n## Settings\n\nSet the retry count "
    "and the base delay in the client options.\n"
)
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00"
BOMB = "\n".join(
    ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 10)]
)
BEGIN, END = "<!-- mdindex:begin -->", "<!-- mdindex:end -->"

# path -> bytes; "hostile/" holds one topic of every hostile source beside two normal files.
HOSTILE: dict[str, bytes] = {
    "invalid-utf8.md": b"# T\n\ncaf\xe9\n",
    "utf16.md": NORMAL.format("Wide").encode("utf-16"),
    "utf8-bom.md": b"\xef\xbb\xbf" + NORMAL.format("Bom").encode(),
    "nul.md": b"# T\n\x00\x01\x02",
    "image.md": PNG,
    "empty.md": b"",
    "blank.md": b"  \n\t\n\r\n",
    "unclosed-fence.md": b"# Code\n\n```python\n" + b"x = compute(1)\n" * 2_000,
    "list-fence.md": b"".join(b"  " * i + b"- item\n" for i in range(500))
    + b"  " * 500
    + b"```\ncode\n",
    "quotes.md": b">" * 100_000 + b" deep\n\nAfter the quotes.\n",
    "backticks.md": b"`" * 1_000_000 + b"\n",
    "bad-yaml.md": b"---\ntitle: [unclosed\n---\n# T\n",
    "alias-bomb.md": f"---\n{BOMB}\n---\n# T\n\nBody.\n".encode(),
    "python-object.md": b"---\nx: !!python/object/apply:os.system ['true']\n---\n# T\n",
    # YAML's escape of a lone surrogate: chunked, then unwritable (exit 1 for the build, each run)
    "surrogate-yaml.md": b'---\ntitle: "bad \\ud800 here"\n---\n# T\n\nBody.\n',
    "crlf.md": NORMAL.format("Crlf").replace("\n", "\r\n").encode(),
    "cr.md": NORMAL.format("Cr").replace("\n", "\r").encode(),
}
FAILS = {  # hostile source -> (code, words of its message)
    "invalid-utf8.md": ("CHUNKING_FAILED", "invalid UTF-8 at byte offset 8"),
    "utf16.md": ("CHUNKING_FAILED", "looks like UTF-16"),
    "nul.md": ("CHUNKING_FAILED", "NUL byte at byte offset 4"),
    "image.md": ("CHUNKING_FAILED", "invalid UTF-8 at byte offset 0"),
    "backticks.md": ("CHUNKING_FAILED", "code fence opened at line 1"),
    "bad-yaml.md": ("INVALID_FRONT_MATTER", "YAML front matter"),
    "alias-bomb.md": ("FRONT_MATTER_TOO_LARGE", "aliases included"),
    "python-object.md": ("INVALID_FRONT_MATTER", "python/object"),
    "surrogate-yaml.md": ("INVALID_FRONT_MATTER", "is a lone surrogate, no character"),
}
# The last is 240 bytes of UTF-8: a chunk file named `{stem}-{digest}-{i}.md` from it was 262
# (ENAMETOOLONG failed the whole build, exit 1); its stem is cut in the chunk files' names.
ODD_NAMES = ["a b", "指南", "c#", "what?", "50%", "new\nline", "长" * 80]
# A topic of 304 bytes: its table shards' names ("~s" for each "/") are cut and end in a digest.
DEEP = "/".join(["目录" * 10] * 5)
LATIN1_NAME = "odd/caf\udce9.md"  # b"caf\xe9.md": a Latin-1 file name, listed with a surrogate
LATIN1_SPEC = "# Notes\n\nRésumé des règles.\n".encode("latin-1")
# A generated topic-spec.md a person added notes to in an editor that saves a UTF-8 BOM: its
# first-line begin marker went unseen, a second section was appended and the first never updated.
BOM_SPEC = f"\ufeff{BEGIN}\nold\n{END}\n\nMy notes.\n".encode()
OWN_INDEX = b'{"pages": ["normal-a", "normal-b"]}\n'  # a person's own index.json, in place
# What macOS leaves beside a page it copies to a volume without extended attributes: an
# AppleDouble file (magic 0x00051607, version 2, Finder data), which is no source.
APPLE_DOUBLE = b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        \x00\x02" + b"\x00" * 64
ROOT_KEYWORDS = "retry | 5\ncafé | 3\n".encode("latin-1")


def corpus(docs: Path) -> None:
    files: dict[str, bytes] = {f"hostile/{name}": data for name, data in HOSTILE.items()}
    topics = ("hostile", "odd", "kw-table", "kw-binary", "spec-two", "spec-none", "spec-l1", "bom")
    for topic in (*topics, "own", "linked"):
        for name in ("normal-a", "normal-b"):
            files[f"{topic}/{name}.md"] = NORMAL.format(f"{topic} {name}").encode()
    files.update({f"odd/{name}.md": NORMAL.format(name).encode() for name in ODD_NAMES})
    files[f"{DEEP}/page.md"] = NORMAL.format("deep").encode()
    files[LATIN1_NAME] = NORMAL.format("café").encode()
    for name in ("intro.md", "intro.mdx", "other.md"):  # the globs take both intro files
        files[f"stems/{name}"] = NORMAL.format(name).encode()
    questions = "".join(f"Q: How do I set option {i}?\n\n" for i in range(200))
    files["hostile/qa-pairs.md"] = questions.encode()
    files["hostile/._normal-a.md"] = APPLE_DOUBLE
    files["kw-table/_keywords/words.md"] = b"| keyword | score |\n|---|---|\n| retry | high |\n"
    files["kw-binary/_keywords/words.md"] = PNG
    # A BOM (as Windows editors save) before a keywords table and a first-line question: the
    # table was ignored, unreported, and the question lost (sources had theirs dropped).
    files["bom/_keywords/words.md"] = (
        "\ufeff| keyword | score |\n|---|---|\n| retry | 5 |\n".encode()
    )
    files["bom/qa-pairs.md"] = "\ufeff# How is the retry delay set?\n\nIn the options.\n".encode()
    files["bom/topic-spec.md"] = BOM_SPEC
    # A topic's own files as Windows tools save them: PowerShell's `>` (UTF-16 with a BOM), a NUL
    # byte (a Latin-1 file read as UTF-16 and back): they said "invalid UTF-8 at byte offset 0",
    # and one with a NUL byte was read as text, not as a source with one is.
    files["spec-l1/qa-pairs.md"] = "# FAQ\n\n## How is the delay set?\n".encode("utf-16")
    files["spec-l1/_keywords/words.md"] = b"| keyword | score |\n|---|---|\n| r\x00etry | 5 |\n"
    files["_keywords/words.md"] = ROOT_KEYWORDS  # every topic without its own reads it
    files["spec-two/topic-spec.md"] = (
        f"# Two\n\n{BEGIN}\nmine\n{BEGIN}\nold\n{END}\nafter\n".encode()
    )
    files["spec-none/topic-spec.md"] = b"# Written by a person\n\nKeep this.\n"
    # A qa-pairs.md and a keywords file a writer wrote otherwise: no question, no keyword (a
    # warning each since 2026-11-30; they were silent)
    files["spec-none/qa-pairs.md"] = b"Question: How is the delay set?\n\n1. What is a retry?\n"
    files["spec-none/_keywords/words.md"] = b"# Words\n\nretry, delay and backoff.\n"
    files["spec-l1/topic-spec.md"] = LATIN1_SPEC
    files["own/index.json"] = OWN_INDEX
    files["plain/inner/normal-a.md"] = NORMAL.format("inner").encode()
    files["plain/index.json"] = OWN_INDEX  # in a folder that is no topic: its directory index
    for hidden in ("..x", "_x", ".x"):
        files[f"{hidden}/a.md"] = NORMAL.format(hidden).encode()
    for path, data in files.items():
        (docs / path).parent.mkdir(parents=True, exist_ok=True)
        (docs / path).write_bytes(data)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(docs, outside, first report, outputs after the first run, second run's exit code)."""
    root = tmp_path_factory.mktemp("hostile")
    docs, outside = root / "docs", root / "outside"
    outside.mkdir()
    corpus(docs)
    options = load_config(CONFIG, overrides={"input": str(docs)}).chunking.options
    (root / "theirs.json").write_bytes(OWN_INDEX)
    (docs / "linked" / "index.json").symlink_to(root / "theirs.json")  # never followed
    (docs / ".embedding-cache").mkdir()
    (docs / ".embedding-cache" / strategy_key("semantic", **options)).symlink_to(outside)
    args = ["--config", CONFIG, "--input", str(docs), "--set", 'sources.globs=["*.md", "*.mdx"]']
    args += ["--set", "resources.embed.actors=1"]  # one model load (the pool is not the subject)
    # the first run on Ray (the hostile rows in Ray's blocks, tasks and actor), the re-run
    # without it, as a small re-run of this process (a local Ray of one node) goes
    assert main([*args, *ON_RAY]) == 3
    report = json.loads((docs / "_reindex" / "report.json").read_text())
    first = outputs(docs)
    return docs, outside, report, first, main(args)


def test_each_hostile_source_ends_in_its_code(built):
    docs, _, report, _, _ = built
    failures = {f["path"]: (f["code"], f["message"]) for f in report["failures"]}
    for name, (code, words) in FAILS.items():
        assert failures[f"hostile/{name}"][0] == code, name
        assert words in failures[f"hostile/{name}"][1], (name, failures[f"hostile/{name}"])
    assert failures["kw-table/_keywords/words.md"][0] == "KEYWORDS_FAILED"
    assert failures["kw-binary/_keywords/words.md"][0] == "KEYWORDS_FAILED"
    assert failures["spec-l1/topic-spec.md"][0] == "TOPIC_SPEC_FAILED"
    assert failures["spec-l1/qa-pairs.md"] == (
        "QUESTIONS_FAILED",
        "looks like UTF-16 (byte order mark FF FE); save it as UTF-8",
    )
    assert failures["spec-l1/_keywords/words.md"] == (
        "KEYWORDS_FAILED",
        "binary content: NUL byte at byte offset 33 (line 3)",
    )
    # The root's keywords file fails in each of the five topics that read it: reported once.
    assert failures["_keywords/words.md"][0] == "KEYWORDS_FAILED"
    # A file name that is not UTF-8 is left out of the corpus, named with its byte escaped (it
    # failed the whole build with a UnicodeEncodeError, exit 1).
    assert failures["odd/caf\\xe9.md"] == (
        "INVALID_FILE_NAME",
        "the path is not UTF-8 (byte 0xE9 at offset 7), so no index can name it: rename the "
        "file or its folder",
    )
    # A person's own index.json in a topic folder is left as it is, and the topic not indexed (it
    # failed the whole build with a KeyError, exit 1).
    assert failures["own/index.json"] == (
        "INDEX_JSON_FAILED",
        "not an mdindex index (no _embedded object): left untouched, so the topic's 2 sources "
        "are not indexed; move the file away, or build into another --output",
    )
    assert failures["plain/index.json"] == (
        "INDEX_JSON_FAILED",
        "not an mdindex index (no _embedded object): left untouched, so the folder has no "
        "directory index; move the file away, or build into another --output",
    )
    assert failures["linked/index.json"][1].startswith("a symbolic link (not followed): left")
    # Two sources of a topic with one stem, which names a source's entry and chunk files, fail
    # alone (the whole build failed with a ValueError, exit 1).
    assert failures["stems/intro.md"] == (
        "STEM_CONFLICT",
        "intro.md shares its stem 'intro' with intro.mdx in this topic; a stem names one source's "
        "index.json entry and chunk files, so none of them is indexed: rename all but one",
    )
    assert failures["stems/intro.mdx"][0] == "STEM_CONFLICT"
    stems = json.loads((docs / "stems" / "index.json").read_text())["_embedded"]["chunks"]
    assert list(stems) == ["other"]
    assert report["sources"]["failed"] == len(FAILS) + 6
    assert len(report["failures"]) == len(FAILS) + 12, report["failures"]


def test_the_other_sources_are_chunked_and_written(built):
    docs, _, report, _, _ = built
    index = json.loads((docs / "hostile" / "index.json").read_text())["_embedded"]["chunks"]
    chunked = {"normal-a", "normal-b", "utf8-bom", "unclosed-fence", "list-fence", "quotes",
               "crlf", "cr"}  # fmt: skip
    assert chunked <= set(index)
    for stem in chunked:
        for item in index[stem]["items"]:
            assert (docs / "hostile" / item["href"]).is_file()
    assert not {"empty", "blank"} & set(index) or all(
        index[s]["count"] == 0 for s in ("empty", "blank") if s in index
    )
    assert index["crlf"]["count"] == index["cr"]["count"] == index["normal-a"]["count"]
    # macOS's AppleDouble file beside normal-a.md is no source: not read, not failed (it was
    # CHUNKING_FAILED, invalid UTF-8, on every run)
    assert "._normal-a" not in index
    assert "hostile/._normal-a.md" not in {f["path"] for f in report["failures"]}
    assert report["counters"]["embed"]["questions"] == 201  # 200 of hostile/, bom/'s one
    bom = json.loads((docs / "bom" / "index.json").read_text())["_embedded"]["chunks"]
    items = [item for entry in bom.values() for item in entry["items"]]
    assert any(item.get("prompt_hashes") for item in items)
    assert any(keyword["name"] == "retry" for item in items for keyword in item["keywords"])
    for topic in ("kw-table", "kw-binary", "spec-two", "spec-none", "spec-l1"):
        assert (docs / topic / "index.json").is_file()


def test_odd_file_names_get_hrefs_that_name_their_files(built):
    docs, _, _, _, _ = built
    index = json.loads((docs / "odd" / "index.json").read_text())["_embedded"]["chunks"]
    for name in ODD_NAMES:
        href = index[name]["items"][0]["href"]
        assert "%" in href and (docs / "odd" / unquote(href)).is_file()
        assert len(unquote(href).split("/")[-1].encode()) <= 255
    deep = json.loads((docs / DEEP / "index.json").read_text())["_embedded"]["chunks"]
    assert (docs / DEEP / unquote(deep["page"]["items"][0]["href"])).is_file()
    [shard] = [p.name for p in (docs / "_index" / "chunks").iterdir() if p.name.startswith("目录")]
    assert len(shard.encode()) <= 255 and "~h" in shard


def test_hidden_and_generated_folder_names_are_never_topics(built):
    docs, _, _, _, _ = built
    for hidden in ("..x", "_x", ".x"):
        assert sorted(p.name for p in (docs / hidden).iterdir()) == ["a.md"]
    topics = json.loads((docs / "index.json").read_text())["_embedded"]["topics"]
    assert not {t["id"] for t in topics} & {"..x", "_x", ".x"}


def test_a_persons_topic_specs_are_kept(built):
    docs, _, _, _, _ = built
    assert (docs / "spec-l1" / "topic-spec.md").read_bytes() == LATIN1_SPEC
    none = (docs / "spec-none" / "topic-spec.md").read_text()
    assert none.startswith("# Written by a person\n\nKeep this.\n") and "mdindex:begin" in none
    two = (docs / "spec-two" / "topic-spec.md").read_text()
    assert two.startswith(f"# Two\n\n{BEGIN}\nmine\n") and two.endswith("after\n")
    assert "\nold\n" not in two
    bom = (docs / "bom" / "topic-spec.md").read_text()  # as a source, its BOM dropped
    assert bom.startswith(BEGIN.removesuffix(" -->")) and bom.endswith(f"{END}\n\nMy notes.\n")
    assert bom.count(END) == 1 and "\nold\n" not in bom


def test_a_cache_link_out_of_the_cache_is_a_warning_and_writes_nothing_there(built):
    _, outside, report, _, _ = built
    store = report["counters"]["store"]
    assert store["failures"] > 0
    assert "outside the cache root" in store["warnings"][0]
    assert list(outside.iterdir()) == []


def test_topic_files_that_yield_nothing_are_warnings_of_the_report_and_summary(built):
    """A qa-pairs.md of `Question:` lines and a numbered list, and a keywords file of prose,
    read without failure, are a warning each in report.json (`counters.index.warnings`) and
    the summary, naming the file and what its reader looks for; no failure (the run's outcome
    stands). Until 2026-11-30 the topic was indexed without questions or keywords, unsaid."""
    _, _, report, _, _ = built
    warnings = sorted(report["counters"]["index"]["warnings"])
    assert [warning.split(": ", 1)[0] for warning in warnings] == [
        "spec-none/_keywords/words.md",
        "spec-none/qa-pairs.md",
    ]
    assert "no keyword found" in warnings[0] and "| keyword | score |" in warnings[0]
    assert "no question found" in warnings[1] and "'Q:'" in warnings[1]
    assert not {f["path"] for f in report["failures"]} & {"spec-none/qa-pairs.md"}
    lines = summary(report).splitlines()
    assert [line for line in lines if line.startswith("  WARNING spec-none/")] == [
        f"  WARNING {warning}" for warning in report["counters"]["index"]["warnings"]
    ]
    assert 'warn">nothing read</span> spec-none/qa-pairs.md: no question' in render_html(report)


def test_a_rerun_converges_byte_for_byte(built):
    docs, _, report, first, second_code = built
    assert second_code == 3
    # The hostile sources and keywords files failed for their bytes: the re-run reports them again
    # without reading them and keeps their topics. Only the topic whose topic-spec.md is left
    # untouched (TOPIC_SPEC_FAILED: the output's own file, which the plan does not compare) and
    # the two whose index.json is a person's or a link (INDEX_JSON_FAILED, left as they are) are
    # rebuilt. The one whose sources share a stem is kept: the listing decides that, unchanged.
    second = json.loads((docs / "_reindex" / "report.json").read_text())
    assert second["failures"] == report["failures"]
    assert second["sources"]["failed_unchanged"] == len(FAILS)
    assert second["topics"]["rebuilt"] == 3
    assert (docs / "own" / "index.json").read_bytes() == OWN_INDEX
    assert (docs / "plain" / "index.json").read_bytes() == OWN_INDEX
    assert (docs / "linked" / "index.json").is_symlink()
    assert not (docs / "own" / "_chunks").exists()
    again = outputs(docs)
    assert sorted(again) == sorted(first)
    changed = [path for path in first if again[path] != first[path]]
    rows = {
        path: [
            (a, b)
            for a, b in zip(
                pq.read_table(io.BytesIO(first[path])).to_pylist(),
                pq.read_table(io.BytesIO(again[path])).to_pylist(),
                strict=True,
            )
            if a != b
        ]
        for path in changed
        if path.endswith(".parquet")
    }
    assert changed == [], rows


def test_sources_sharing_a_stem_are_never_read_and_their_topic_is_kept(tmp_path, capsys):
    """The listing decides a shared stem: its sources fail without being read, chunked or
    embedded, the one indexed before keeps its entry, and an unchanged re-run keeps the topic (it
    read, chunked and embedded both files and rebuilt the topic on every run)."""
    docs, output = tmp_path / "docs", tmp_path / "out"
    (docs / "stems").mkdir(parents=True)
    for name in ("intro.md", "other.md"):
        (docs / "stems" / name).write_text(NORMAL.format(name))
    args = ["--config", CONFIG, "--input", str(docs), "--output", str(output)]
    args += ["--set", 'sources.globs=["*.md", "*.mdx"]', "--set", "resources.embed.actors=1"]
    assert main(args) == 0
    first = outputs(output)
    manifest = json.loads((output / "_reindex" / "manifest.json").read_text())["sources"]
    first_sha256 = manifest["stems/intro.md"]["sha256"]

    def run(code: int) -> dict:
        assert main(args) == code
        return json.loads((output / "_reindex" / "report.json").read_text())

    (docs / "stems" / "intro.mdx").write_text(NORMAL.format("intro.mdx"))
    report = run(3)
    assert [(f["path"], f["code"]) for f in report["failures"]] == [
        ("stems/intro.md", "STEM_CONFLICT"),
        ("stems/intro.mdx", "STEM_CONFLICT"),
    ]
    assert report["sources"]["failed"] == 2 and report["sources"]["changed"] == 0
    assert report["bytes_read"] == 0 and report["counters"]["chunk"]["sources"] == 0
    index = json.loads((output / "stems" / "index.json").read_text())["_embedded"]["chunks"]
    before = json.loads(first["stems/index.json"])["_embedded"]["chunks"]
    assert index["intro"] == before["intro"]  # kept, as a failed source's entry is
    manifest = json.loads((output / "_reindex" / "manifest.json").read_text())["sources"]
    assert manifest["stems/intro.md"]["sha256"] == first_sha256  # the bytes last indexed
    assert manifest["stems/intro.mdx"]["sha256"] is None and manifest["stems/intro.md"]["failed"]

    again = run(3)
    assert again["failures"] == report["failures"] and again["topics"]["kept"] == 1
    assert "ray_start" not in again["timings"]["wall_seconds"]
    assert main([*args, "--dry-run"]) == 0
    assert "sources sharing a stem, not read: 2" in capsys.readouterr().out.splitlines()
    (docs / "stems" / "intro.mdx").write_text("# Edited\n\nNot indexed either way.\n")
    assert run(3)["topics"]["kept"] == 1

    (docs / "stems" / "intro.mdx").unlink()
    report = run(0)
    assert report["sources"]["changed"] == 1 and report["failures"] == []
    assert outputs(output) == first
