"""`mdindex chunk` run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from environment_support import mdindex_onto_full_disk, needs_full_disk, without_aws_credentials

FIXTURES = Path(__file__).parent / "fixtures" / "markdown"
FIELDS = {
    "ordinal", "text", "title", "headings_path", "header_path", "start_line", "end_line",
    "token_count", "is_code", "content_type", "links", "chunk_id", "extras", "chunk_path",
    "context", "document_id", "tenant_id", "source_version_id", "promotion_level",
}  # fmt: skip


def mdindex(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", "chunk", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
    )


def test_chunk_prints_one_json_object_per_chunk():
    result = mdindex(
        str(FIXTURES / "guide.md"), "--set", "max_tokens=120", "--set", "min_tokens=40"
    )
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) > 1
    assert [row["ordinal"] for row in rows] == list(range(len(rows)))
    assert all(set(row) == FIELDS for row in rows)
    assert all(row["token_count"] <= 120 for row in rows)
    # the file as given (was "": two files' chunks shared their ids' document part)
    assert {(row["document_id"], row["tenant_id"]) for row in rows} == {
        (str(FIXTURES / "guide.md"), "default")
    }
    links = [link for row in rows for link in row["links"]]
    assert {"url": "../overview.md", "text": "the overview", "link_type": "internal",
            "target_document": None} in links  # fmt: skip


def test_chunk_prints_the_document_fields_and_promotion_level(tmp_path):
    doc = tmp_path / "promoted.md"
    doc.write_text("---\npromotion_level: promoted\n---\n# Title\n\nSome text.\n")
    result = mdindex(str(doc), "--document-id", "docs/promoted.md", "--tenant-id", "acme")
    assert result.returncode == 0, result.stderr
    (row,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert row["document_id"] == "docs/promoted.md" and row["tenant_id"] == "acme"
    assert row["promotion_level"] == "promoted" and len(row["source_version_id"]) == 64
    assert row["chunk_path"] == "# Title" and row["context"] == ""


def test_a_file_without_chunks_gets_a_note(tmp_path):
    """An empty page printed nothing and exited 0, as a command that did nothing would."""
    page = tmp_path / "empty.md"
    page.write_text("\n \n")
    result = mdindex(str(page), "--strategy", "headers")
    assert (result.returncode, result.stdout) == (0, "")
    needs = f"note: {page}: no chunks: the headers strategy found no text to chunk\n"
    assert result.stderr == needs


def test_a_draft_gets_a_note_and_its_chunks_with_include_drafts(tmp_path):
    """A draft gives no chunks, as in a build: the note says why and how to chunk it."""
    page = tmp_path / "launch.md"
    page.write_text("+++\ntitle = 'Launch'\ndraft = true\n+++\n# Launch\n\nComing soon.\n")
    result = mdindex(str(page))
    assert (result.returncode, result.stdout) == (0, "")
    assert result.stderr == (
        f"note: {page}: no chunks: a draft (draft: true), left out as a build leaves it unless "
        "sources.include_drafts is true; --include-drafts chunks it\n"
    )
    result = mdindex(str(page), "--include-drafts")
    assert (result.returncode, result.stderr) == (0, "")
    assert json.loads(result.stdout)["text"] == "# Launch\n\nComing soon."


def test_strategy_and_typed_options():
    result = mdindex(
        str(FIXTURES / "guide.md"),
        "--strategy", "headers",
        "--set", "max_document_lines=10",
        "--set", "document_path=docs/guide.md",
        "--set", "corpus_paths=[overview.md, docs/reference/api.md]",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert rows[0]["header_path"] == "# Installation Guide"
    targets = {link["url"]: link["target_document"] for row in rows for link in row["links"]}
    assert targets["../overview.md"] == "overview.md"
    assert targets["./reference/api.md#install"] == "docs/reference/api.md"


def test_failed_document_prints_code_and_exits_3(tmp_path):
    bad = tmp_path / "bad.md"
    bad.write_bytes(b"# ok\n\xff\xfe")
    result = mdindex(str(bad))
    assert result.returncode == 3
    assert result.stdout == ""
    assert result.stderr.startswith("CHUNKING_FAILED: ")
    assert "byte offset 5" in result.stderr


def test_bad_usage_exits_2(tmp_path):
    """Each in one line that names the command, as the other commands' do ("error: …" before)."""
    option = mdindex(str(FIXTURES / "guide.md"), "--set", "no_such_option=1")
    assert option.returncode == 2 and option.stderr.startswith("mdindex chunk: ")
    assert "no_such_option" in option.stderr
    assert mdindex(str(FIXTURES / "guide.md"), "--strategy", "nope").returncode == 2
    assert mdindex(str(FIXTURES / "guide.md"), "--set", "novalue").returncode == 2
    missing = mdindex(str(tmp_path / "missing.md"))
    assert missing.returncode == 2 and missing.stderr.startswith("mdindex chunk: ")
    assert "missing.md" in missing.stderr
    # a folder was "IsADirectoryError: [Errno 21] Is a directory: '…'"
    folder = mdindex(str(tmp_path))
    assert (folder.returncode, folder.stdout) == (2, "")
    assert folder.stderr == (
        f"mdindex chunk: {tmp_path} is a folder: give one markdown file "
        "(mdindex build indexes a folder)\n"
    )


def test_a_set_value_that_is_not_yaml_is_bad_usage_in_one_line():
    """`--set max_tokens=[1` was a yaml.ParserError traceback and exit 1."""
    result = mdindex(str(FIXTURES / "guide.md"), "--set", "max_tokens=[1")
    assert result.returncode == 2
    assert result.stderr.startswith("mdindex chunk: --set max_tokens: '[1' is not valid YAML")
    assert len(result.stderr.splitlines()) == 1


def test_set_takes_strategy_options_only():
    """`--set document_id=x` (or `strategy`, `tenant_id`) was a TypeError traceback and exit 1:
    chunk_source got the argument twice."""
    for key in ("document_id", "strategy", "tenant_id"):
        result = mdindex(str(FIXTURES / "guide.md"), "--set", f"{key}=x")
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith(f"mdindex chunk: unknown option '{key}' ")


def test_a_file_its_store_cannot_read_is_named_in_one_line(monkeypatch, tmp_path):
    """An s3:// file without AWS credentials was a botocore NoCredentialsError traceback and
    exit 1 (fsspec's backends raise their own errors, no OSError)."""
    without_aws_credentials(monkeypatch, tmp_path)
    result = mdindex("s3://no-such-bucket/guide.md")
    assert result.returncode == 2
    assert result.stderr == (
        "mdindex chunk: s3://no-such-bucket/guide.md: NoCredentialsError: "
        "Unable to locate credentials\n"
    )


@needs_full_disk
def test_a_standard_output_on_a_full_disk_is_one_line_and_exit_1():
    """`mdindex chunk FILE > /dev/full` was an OSError (ENOSPC) traceback."""
    result = mdindex_onto_full_disk("chunk", str(FIXTURES / "guide.md"))
    assert result.returncode == 1
    assert result.stderr == "mdindex chunk: cannot write the chunks: No space left on device\n"


def test_an_output_encoding_without_the_texts_characters_escapes_them_as_json(tmp_path):
    """`PYTHONIOENCODING=ascii` (or a Latin-1 locale) and a page in Japanese, or a file name
    with an accent: a UnicodeEncodeError traceback, exit 1. Now each character the encoding
    cannot hold is JSON's escape: the same strings as a UTF-8 run's."""
    page = tmp_path / "gït ñame.md"
    page.write_text("# Überblick\n\nFastAPI は高速です 🚀 — déjà vu.\n", encoding="utf-8")
    utf8 = mdindex(str(page))
    assert utf8.returncode == 0, utf8.stderr
    result = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "chunk", str(page)],
        capture_output=True, timeout=120, cwd=Path(__file__).parent.parent,
        env={**os.environ, "PYTHONIOENCODING": "ascii"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.isascii()
    rows = [json.loads(line) for line in result.stdout.decode("ascii").splitlines()]
    assert rows == [json.loads(line) for line in utf8.stdout.splitlines()]
    assert "FastAPI は高速です 🚀 — déjà vu." in rows[0]["text"]
