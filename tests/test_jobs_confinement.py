"""Confinement (issue 12, items 3 and 4): a build never writes or deletes outside its output root
through a symbolic link, and never publishes what a symbolic link in the input points to unless
`sources.follow_symlinks` says so. Real builds on real files, small, so they run in this process
without Ray (`jobs.in_process`) and write through the same storage layer as Ray's workers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from jobs_support import cache_copy

from jobs.reindex import main

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "local.yaml")
SECRET = "TOP-SECRET-4b1d"
SPEC_SECRET = "SPEC-SECRET-93ce"
TEXT = (
    "# {title}\n\n"
    "The {title} guide explains how requests are retried after a timeout and how the backoff "
    "grows between attempts.\n\n"
    "## Settings\n\n"
    "Set the retry count and the base delay in the client options; both apply to every call.\n"
)


def build(*args: str) -> int:
    """`python -m jobs.reindex` in-process with the shipped local config."""
    return main(["--config", CONFIG, *args])


def corpus(root: Path) -> Path:
    """A one-topic corpus `t/` with two small sources."""
    for name in ("alpha", "beta"):
        path = root / "t" / f"{name}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(TEXT.format(title=name.title()))
    return root


@pytest.fixture(scope="module")
def vectors_of_all(tmp_path_factory) -> Path:
    """The cache of one build of every source these tests index (alpha, beta and gamma), built
    once for the module."""
    base = tmp_path_factory.mktemp("vectors")
    docs = corpus(base / "docs")
    (docs / "t" / "gamma.md").write_text(TEXT.format(title="Gamma"))
    assert build("--input", str(docs), "--output", str(base / "out")) == 0
    return base / "out" / ".embedding-cache"


@pytest.fixture
def vectors(vectors_of_all, tmp_path) -> list[str]:
    """`--cache` of the test's own copy of `vectors_of_all`: what these tests look at is what a
    build reads and writes through links, not its vectors, and their builds load no model."""
    return cache_copy(vectors_of_all, tmp_path)


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `folder` with its bytes and modification time."""
    return {
        p.relative_to(folder).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def files_containing(folder: Path, needle: str) -> list[str]:
    """Files under `folder` (links not followed) whose bytes contain `needle`."""
    return [
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and not p.is_symlink() and needle.encode() in p.read_bytes()
    ]


def report_of(output: Path) -> dict:
    return json.loads((output / "_reindex" / "report.json").read_text())


def test_in_place_build_never_writes_or_deletes_through_symlinked_output_folders(
    tmp_path, capsys, vectors
):
    docs = corpus(tmp_path / "docs")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious-1.md").write_text("precious\n")
    (outside / "alpha-0.md").write_text("not a chunk of ours\n")
    before = snapshot(outside)
    # `_reindex/` alone: its build lock is the first file the build opens, so it stops there.
    (docs / "_reindex").symlink_to(outside, target_is_directory=True)
    assert build("--input", str(docs)) == 1  # the job refuses, naming the path
    assert f"refusing to lock {docs / '_reindex' / 'build.lock'}" in capsys.readouterr().err
    assert snapshot(outside) == before
    (docs / "_reindex").unlink()

    for link in ("t/_chunks", "_index"):
        (docs / link).symlink_to(outside, target_is_directory=True)
    assert build("--input", str(docs), *vectors) == 1
    assert snapshot(outside) == before
    err = capsys.readouterr().err
    assert "outside the root" in err and str(docs / "t" / "_chunks") in err
    assert all((docs / link).is_symlink() for link in ("t/_chunks", "_index"))


def test_symlinked_inputs_are_skipped_and_reported(tmp_path, vectors):
    docs = corpus(tmp_path / "docs")
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "passwd").write_text(f"root:x:0:0:{SECRET}\n")
    (secrets / "spec.md").write_text(f"# Spec\n\n{SPEC_SECRET}\n")
    (docs / "t" / "x.md").symlink_to(secrets / "passwd")
    (docs / "t" / "topic-spec.md").symlink_to(secrets / "spec.md")
    (docs / "t" / "qa-pairs.md").symlink_to(secrets / "passwd")
    (docs / "loop.md").symlink_to(docs / "loop.md")  # a link to itself
    (docs / "t" / "again").symlink_to(docs, target_is_directory=True)  # a folder loop
    output = tmp_path / "out"

    assert build("--input", str(docs), "--output", str(output), *vectors) == 3
    report = report_of(output)
    assert report["counters"]["embed"]["models_loaded"] == 0
    skipped = {f["path"]: f for f in report["failures"]}
    assert sorted(skipped) == ["loop.md", "t/again", "t/qa-pairs.md", "t/topic-spec.md", "t/x.md"]
    assert {f["code"] for f in skipped.values()} == {"SYMLINK_SKIPPED"}
    assert "symbolic link" in skipped["t/x.md"]["message"]
    assert report["sources"]["seen"] == 2 and report["sources"]["failed"] == 0
    index = json.loads((output / "t" / "index.json").read_text())
    assert sorted(index["_embedded"]["chunks"]) == ["alpha", "beta"]
    assert files_containing(output, SECRET) == files_containing(output, SPEC_SECRET) == []
    assert "SPEC-SECRET" not in (output / "t" / "topic-spec.md").read_text()


def test_in_place_symlinked_topic_spec_is_neither_read_nor_replaced(tmp_path, vectors):
    docs = corpus(tmp_path / "docs")
    spec = tmp_path / "spec.md"
    spec.write_text(f"# Spec\n\n{SPEC_SECRET}\n")
    (docs / "t" / "topic-spec.md").symlink_to(spec)

    assert build("--input", str(docs), *vectors) == 3
    assert [(f["path"], f["code"]) for f in report_of(docs)["failures"]] == [
        ("t/topic-spec.md", "SYMLINK_SKIPPED")
    ]
    assert (docs / "t" / "topic-spec.md").is_symlink()
    assert spec.read_text() == f"# Spec\n\n{SPEC_SECRET}\n"
    assert files_containing(docs, SPEC_SECRET) == []
    assert (docs / "t" / "index.json").is_file()


@pytest.mark.timeout(300)
def test_follow_symlinks_indexes_a_linked_source_and_survives_a_loop(tmp_path, vectors):
    docs = corpus(tmp_path / "docs")
    shared = docs / "_shared"  # not listed by itself ("_" folders are not sources)
    shared.mkdir()
    (shared / "gamma.md").write_text(TEXT.format(title="Gamma"))
    (docs / "t" / "gamma.md").symlink_to(Path("..") / "_shared" / "gamma.md")
    (docs / "t" / "again").symlink_to(Path(".."), target_is_directory=True)  # a folder loop
    output = tmp_path / "out"

    code = build(
        "--input", str(docs), "--output", str(output), "--set", "sources.follow_symlinks=true",
        *vectors,
    )  # fmt: skip
    assert code == 3  # the loop is reported, everything else is indexed
    [failure] = report_of(output)["failures"]
    assert failure["path"] == "t/again" and failure["code"] == "SYMLINK_SKIPPED"
    assert "loop" in failure["message"]
    index = json.loads((output / "t" / "index.json").read_text())
    gamma = index["_embedded"]["chunks"]["gamma"]
    assert (output / "t" / gamma["items"][0]["href"]).read_text().startswith("# Gamma")
    assert not (output / "t" / "again").exists()
    assert os.path.islink(docs / "t" / "gamma.md")


def test_in_place_two_topics_that_are_one_folder_on_disk_are_refused(tmp_path, capsys):
    """In place, with links followed, a link to a topic's folder inside the input (`u -> t`)
    made a second topic whose index.json, `_chunks/` and topic-spec.md were the first one's
    files: `t/index.json` said `"id": "u"`, exit 0. The build is refused before it writes the
    index (exit 2, naming both), as is its dry run; into a separate output each has its folder."""
    docs = corpus(tmp_path / "docs")
    (docs / "u").symlink_to("t", target_is_directory=True)
    follow = ["--input", str(docs), "--set", "sources.follow_symlinks=true"]

    assert build(*follow) == 2
    assert "'t' and 'u' are one folder" in capsys.readouterr().err
    assert not (docs / "t" / "index.json").exists() and not (docs / "t" / "_chunks").exists()
    assert build(*follow, "--dry-run") == 2
    assert build(*follow, "--dry-run", "--output", str(tmp_path / "out")) == 0
