"""A topic's switch is atomic for a reader (issue 12 item 7), and a read-only or full output fails
the build cleanly: a crash at the switch, a full disk after the chunk files, a read-only output,
and on S3 a refused PUT of index.json each exit 1 with the error and leave the previous output as
it was (its index.json giving exactly the texts it gave), and a re-run converges to the bytes of a
clean build, with no orphan chunk file and no temporary file left. A crash as the build removes a
topic leaves no index.json naming a chunk file already deleted.

Real builds. The local faults run `python -m jobs.reindex` in a child with its own Ray instance
and `tests/faults/` on its PYTHONPATH: its `sitecustomize` puts the fault into the driver and every
Ray worker (tests run as root, whom no permission stops). The S3 fault is the session's moto
server refusing the PUT."""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote

import fsspec
import pytest
from environment_support import fault_environment
from jobs_support import ON_RAY, cache_copy, s3_options, stored

from jobs.reindex import main

pytestmark = pytest.mark.usefixtures("ray_session")

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "local.yaml")
SENTENCE = "The {0} page of {1} says how a request is retried after a timeout, and for how long. "
LOCAL = fsspec.filesystem("file")


def build(*args: str) -> int:
    return main(["--config", CONFIG, *args])


def write_corpus(docs: Path, version: str) -> None:
    """Two topics of two sources. Across versions one section of each `a.md` changes: a rebuild
    writes one new chunk file beside unchanged ones and carries `b.md`."""
    for topic in ("t0", "t1"):
        sections = [f"## Part {i}\n\n" + SENTENCE.format(i, topic) * 12 for i in range(3)]
        sections[1] += f"This is {version}.\n"
        (docs / topic).mkdir(parents=True, exist_ok=True)
        (docs / topic / "a.md").write_text(f"# A {topic}\n\n" + "\n\n".join(sections))
        (docs / topic / "b.md").write_text(f"# B {topic}\n\n" + SENTENCE.format("b", topic))


@pytest.fixture(scope="module")
def versions(tmp_path_factory) -> tuple[Path, Path, Path]:
    """The corpus in version 1 and 2 (the copy keeps the unchanged files' mtimes, so they stay
    unchanged to a build), and a clean build of version 2."""
    base = tmp_path_factory.mktemp("versions")
    v1, v2 = base / "v1", base / "v2"
    write_corpus(v1, "v1")
    shutil.copytree(v1, v2)
    write_corpus(v2, "v2")  # rewrites every file: put the unchanged ones back
    for topic in ("t0", "t1"):
        shutil.copy2(v1 / topic / "b.md", v2 / topic / "b.md")
    assert build("--input", str(v2), "--output", str(base / "clean")) == 0
    return v1, v2, base / "clean"


def promises(files: dict[str, bytes]) -> dict[str, bytes]:
    """What the index.json files among `files` give a reader: each chunk file they name and its
    bytes (KeyError for one that is missing)."""
    found = {}
    for path in [p for p in files if posixpath.basename(p) == "index.json"]:
        folder = posixpath.dirname(path)
        for entry in json.loads(files[path])["_embedded"].get("chunks", {}).values():
            for item in entry["items"]:
                chunk = posixpath.join(folder, unquote(item["href"]))
                found[chunk] = files[chunk]
    return found


TOPIC_RELS = ("self", "parent")  # not the root's links to the corpus files (`corpus_links`)


def dangling_links(files: dict[str, bytes]) -> set[str]:
    """The topic links of the index.json files among `files` (their own, their parent's, their
    child topics') that name no index.json there."""
    hrefs = set()
    for path in [p for p in files if posixpath.basename(p) == "index.json"]:
        document = json.loads(files[path])
        hrefs |= {link["href"] for rel, link in document["_links"].items() if rel in TOPIC_RELS}
        hrefs |= {t["_links"]["self"]["href"] for t in document["_embedded"].get("topics", [])}
    return {href for href in hrefs if unquote(href).lstrip("/") not in files}


def orphans(files: dict[str, bytes]) -> set[str]:
    """The chunk files no index.json names."""
    named = promises(files)
    return {p for p in files if posixpath.basename(posixpath.dirname(p)) == "_chunks"} - set(named)


def temporaries(files: dict[str, bytes]) -> list[str]:
    return [p for p in files if posixpath.basename(p).startswith(".tmp-")]


def with_clean_vectors(clean: Path, fs: fsspec.AbstractFileSystem, output: str) -> None:
    """Put the clean version 2 build's cache entries into the cache of the output at `output`:
    a build of version 2 there then loads no model, whose start is most of a small build's time,
    and what these tests look at is the writes. (The read-only test keeps a cache without them:
    its build's cache writes are among the writes it refuses.)"""
    fs.put(f"{clean}/.embedding-cache/", f"{output}/.embedding-cache/", recursive=True)


def faulty_build(docs: Path, output: Path, fault: str, match: str = "") -> tuple[int, str]:
    """A build in a child process with its own local Ray, every process of it under the write
    fault of `tests/faults/sitecustomize.py`; its exit code and stderr. A task whose worker dies
    is tried once more (a crash fault kills each try: 2 of them, not the default's 4)."""
    env = fault_environment(fault, str(output), match=match)
    command = [sys.executable, "-m", "jobs.reindex", "--config", CONFIG, *ON_RAY]
    child = subprocess.run(
        [*command, "--input", str(docs), "--output", str(output), "--set", "resources.retries=1"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return child.returncode, child.stderr


@pytest.fixture(scope="module")
def built_v1(versions, tmp_path_factory) -> Path:
    """Version 1 built once for the module's local tests (each updates its own copy)."""
    v1, _, _ = versions
    output = tmp_path_factory.mktemp("v1") / "out"
    assert build("--input", str(v1), "--output", str(output)) == 0
    return output


@pytest.fixture
def previous_output(built_v1, tmp_path) -> Path:
    """A copy of the version 1 output, to be updated to version 2. Nothing a build reads from its
    output names where that output lies (the run's report does; no build reads it), so a copy
    (bytes and modification times) is what a build there would have left."""
    output = tmp_path / "out"
    shutil.copytree(built_v1, output, symlinks=True)
    return output


@pytest.mark.parametrize(
    ("fault", "match", "error", "temporaries_left"),
    [
        # Every reduce is killed (SIGKILL) as it renames its new index.json into place: its
        # temporary file stays, one for each try of each of the two topics' reduces.
        ("crash", "/index.json", "WorkerCrashedError", 4),
        # ENOSPC for every temporary file in the topics' folders: the disk is full once the new
        # chunk files (written in place) are there, when index.json is to be replaced (the
        # interim manifest, written before, is not in a topic's folder).
        # (slow: the crash above takes the same path)
        pytest.param(
            "full",
            os.pathsep.join(["/t0/.tmp-", "/t1/.tmp-"]),
            "OSError: [Errno 28] No space left on device",
            0,
            marks=pytest.mark.slow,
        ),  # fmt: skip
    ],
)
def test_a_failure_before_the_switch_leaves_the_previous_output_whole_and_a_rerun_converges(
    versions, previous_output, fault, match, error, temporaries_left
):
    """After the new chunk files, before index.json: exit 1 naming the error; every file of the
    previous output as it was, so the old index.json still gives every text it gave (chunk files
    used to be rewritten in place before it); the only new files are chunk files no index.json
    names (and the crash's temporary file); a re-run removes them and gives a clean build."""
    _, v2, clean = versions
    output = previous_output
    with_clean_vectors(clean, LOCAL, str(output))
    before = stored(LOCAL, str(output))

    code, stderr = faulty_build(v2, output, fault, match)
    assert code == 1, stderr[-3000:]
    assert f"mdindex build: the job failed: {error}" in stderr
    after = stored(LOCAL, str(output))
    assert {path: after.get(path) for path in before} == before
    assert promises(after) == promises(before)
    assert orphans(after) and set(after) - set(before) == orphans(after) | set(temporaries(after))
    assert len(temporaries(after)) == temporaries_left  # resources.retries=1: two tries

    assert build("--input", str(v2), "--output", str(output)) == 0
    assert stored(LOCAL, str(output)) == stored(LOCAL, str(clean))


def test_a_read_only_output_fails_the_build_and_is_left_as_it_was(versions, previous_output):
    """EROFS on every write under the output (the cache's included: warnings): exit 1 naming
    the error, and not one byte of the output changed, its report and cache included."""
    _, v2, _ = versions
    output = previous_output
    everything = {path: LOCAL.cat_file(path) for path in LOCAL.find(str(output))}

    code, stderr = faulty_build(v2, output, "read-only")
    assert code == 1, stderr[-3000:]
    refused = f"mdindex build: the job failed: OutputUnwritable: the output {output} cannot be "
    assert refused in stderr
    assert "(Read-only file system: " in stderr
    assert {path: LOCAL.cat_file(path) for path in LOCAL.find(str(output))} == everything


def test_a_build_killed_as_it_removes_a_topic_leaves_no_index_naming_a_deleted_chunk(
    versions, previous_output, tmp_path
):
    """A topic whose sources are all gone loses its index.json before its chunk files (they were
    deleted in name order, `_chunks/` first), and only once the directory index above it no longer
    links it (the finish rewrote directory indexes after its removals): a build killed (SIGKILL)
    between two of the chunk files leaves every index.json naming files and topics that exist, and
    a re-run gives a clean build (whose cache holds t0's vectors: it loads no model)."""
    v1, _, _ = versions
    docs, clean = tmp_path / "docs", tmp_path / "clean"
    shutil.copytree(v1, docs)  # modification times kept: t0 is unchanged
    shutil.rmtree(docs / "t1")
    output = previous_output
    LOCAL.put(f"{output}/.embedding-cache/", f"{clean}/.embedding-cache/", recursive=True)

    code, stderr = faulty_build(docs, output, "crash-remove", "/t1/_chunks/b-")
    assert code == -9, stderr[-3000:]  # killed as it removed b.md's chunk, after a.md's
    after = stored(LOCAL, str(output))
    assert promises(after) == promises({p: after[p] for p in after if not p.startswith("t1/")})
    assert dangling_links(after) == set()  # the root's index.json no longer links t1
    assert orphans(after)  # b.md's chunk file

    assert build("--input", str(docs), "--output", str(output)) == 0
    assert build("--input", str(docs), "--output", str(clean)) == 0
    assert stored(LOCAL, str(output)) == stored(LOCAL, str(clean))


def test_a_topic_a_killed_run_was_removing_comes_back_whole_with_its_sources(
    versions, built_v1, previous_output, tmp_path
):
    """A run that only removes t1 (its folder gone; t0 kept) is killed between two of t1's chunk
    files; t1's folder is then put back as it was. The manifest said t1 was there, unchanged, so
    the next run kept it, without its index.json and chunk files. The killed run's interim
    manifest marked t1, so the next run rebuilds it: the bytes of a clean build."""
    v1, _, _ = versions
    docs = tmp_path / "docs"
    shutil.copytree(v1, docs)  # modification times kept: t0 is unchanged
    shutil.rmtree(docs / "t1")
    output = previous_output

    code, stderr = faulty_build(docs, output, "crash-remove", "/t1/_chunks/b-")
    assert code == -9, stderr[-3000:]
    assert not (output / "t1" / "index.json").exists()

    shutil.copytree(v1 / "t1", docs / "t1")
    assert build("--input", str(docs), "--output", str(output)) == 0
    assert stored(LOCAL, str(output)) == stored(LOCAL, str(built_v1))


def test_topics_a_failed_run_switched_are_rebuilt_even_for_an_input_put_back_as_it_was(
    versions, built_v1, previous_output
):
    """A run killed after t0's switch and t1's (t1's table shard killed both its tries) leaves
    them in version 2, and the manifest still says version 1. An input put back as it was, with
    its files' modification times (a restore, a sync that keeps them; on S3 the same bytes give
    the same ETags), used to look unchanged to the next run, which kept the failed run's text.
    Before it writes anything a run now stores a manifest naming what it rebuilds as not built,
    so the next run rebuilds it: the bytes of a clean build of version 1."""
    v1, v2, clean = versions
    output = previous_output
    with_clean_vectors(clean, LOCAL, str(output))

    code, stderr = faulty_build(v2, output, "crash", "/_index/chunks/t1")
    assert code == 1, stderr[-3000:]
    assert b"This is v2." in (output / "t1" / "topic-spec.md").read_bytes() or any(
        b"This is v2." in path.read_bytes() for path in (output / "t1" / "_chunks").iterdir()
    )

    assert build("--input", str(v1), "--output", str(output)) == 0
    assert stored(LOCAL, str(output)) == stored(LOCAL, str(built_v1))


def test_a_topic_a_killed_run_added_goes_once_its_folder_leaves_the_input(
    versions, built_v1, previous_output, tmp_path
):
    """A driver killed in its finish (as it writes the root's directory index) after a new topic
    t2 was written, before its manifest: t2 is in the output, and no manifest named it, so a next
    run whose input no longer has it used to leave its files there for good. The killed run's
    manifest named t2 before anything was written, so the next run removes it: the bytes of a
    clean build of the input."""
    v1, _, _ = versions
    docs = tmp_path / "docs"
    shutil.copytree(v1, docs)  # modification times kept: t0 and t1 are unchanged
    (docs / "t2").mkdir()
    shutil.copy(v1 / "t0" / "b.md", docs / "t2" / "b.md")  # its vector is cached: no model loads
    output = previous_output

    code, stderr = faulty_build(docs, output, "crash", f"{os.sep}out{os.sep}index.json")
    assert code == -9, stderr[-3000:]
    assert (output / "t2" / "index.json").is_file()

    shutil.rmtree(docs / "t2")
    assert build("--input", str(docs), "--output", str(output)) == 0
    assert stored(LOCAL, str(output)) == stored(LOCAL, str(built_v1))


@pytest.fixture(scope="module")
def built_v1_on_s3(versions, built_v1, s3_server, tmp_path_factory) -> str:
    """Version 1 built once on S3 for the module's S3 tests (each updates its own copy), its
    vectors read from a copy of the local build's cache (it loads no model): its bucket and
    prefix."""
    v1, _, _ = versions
    bucket = s3_server.make_bucket("atomic-v1").removeprefix("s3://")
    options = ["--set", f"storage_options={s3_options(s3_server.endpoint_url)}"]
    options += cache_copy(built_v1 / ".embedding-cache", tmp_path_factory.mktemp("v1-vectors"))
    assert build("--input", str(v1), "--output", f"s3://{bucket}/out", *options) == 0
    return f"{bucket}/out"


def copy_of(built: str, s3_server, name: str) -> str:
    """A new bucket holding a copy of the output at `built`, under `out/` (server-side copies):
    what a build there would have left, as `previous_output` is for local disk."""
    bucket = s3_server.make_bucket(name).removeprefix("s3://")
    fs = s3_server.filesystem()
    for path in fs.find(built):
        fs.copy(path, f"{bucket}/out/{path[len(built) + 1 :]}")
    return bucket


@pytest.mark.slow  # the crash above takes the same path on local disk
def test_on_s3_a_refused_index_put_leaves_the_previous_index_whole_and_a_rerun_converges(
    versions, built_v1_on_s3, s3_server, monkeypatch
):
    """Only single PUTs are atomic on S3: the moto server refuses (403) every PUT of an
    index.json in the update; the old index.json still gives every text it gave, and a re-run
    converges to the bytes of a clean build, orphan objects removed."""
    from moto.s3.exceptions import S3AccessDeniedError
    from moto.s3.models import S3Backend

    _, v2, clean = versions
    bucket = copy_of(built_v1_on_s3, s3_server, "atomic")
    fs = s3_server.filesystem()
    options = ["--set", f"storage_options={s3_options(s3_server.endpoint_url)}"]
    before = stored(fs, f"{bucket}/out")

    put_object = S3Backend.put_object

    def refusing(self, bucket_name, key_name, *args, **kwargs):
        if key_name.startswith("out/") and key_name.endswith("/index.json"):
            raise S3AccessDeniedError()
        return put_object(self, bucket_name, key_name, *args, **kwargs)

    monkeypatch.setattr(S3Backend, "put_object", refusing)
    assert build("--input", str(v2), "--output", f"s3://{bucket}/out", *options) == 1
    monkeypatch.undo()
    fs.invalidate_cache()
    after = stored(fs, f"{bucket}/out")
    assert {path: after.get(path) for path in before} == before
    assert promises(after) == promises(before) and orphans(after)

    assert build("--input", str(v2), "--output", f"s3://{bucket}/out", *options) == 0
    fs.invalidate_cache()
    # the clean build of version 2 on local disk: an output's bytes do not depend on its storage
    assert stored(fs, f"{bucket}/out") == stored(LOCAL, str(clean))


def test_a_failed_build_returns_only_after_its_other_topics_are_written(
    versions, built_v1_on_s3, s3_server, monkeypatch
):
    """t0's index.json PUT is refused while t1's is slow: the build exits 1 only once t1's reduce
    is done, so no reduce of a failed job writes after it returned (the tests share one Ray)."""
    from moto.s3.exceptions import S3AccessDeniedError
    from moto.s3.models import S3Backend

    _, v2, clean = versions
    bucket = copy_of(built_v1_on_s3, s3_server, "after-failure")
    with_clean_vectors(clean, s3_server.filesystem(), f"{bucket}/out")
    options = ["--set", f"storage_options={s3_options(s3_server.endpoint_url)}"]

    put_object = S3Backend.put_object
    written: dict[str, float] = {}

    def refusing_t0_slow_t1(self, bucket_name, key_name, *args, **kwargs):
        if key_name == "out/t0/index.json":
            raise S3AccessDeniedError()
        if key_name == "out/t1/index.json":
            time.sleep(3)
            written[key_name] = time.monotonic()
        return put_object(self, bucket_name, key_name, *args, **kwargs)

    monkeypatch.setattr(S3Backend, "put_object", refusing_t0_slow_t1)
    # on Ray: the reduces run at once in tasks (without Ray, one after the other)
    assert build("--input", str(v2), "--output", f"s3://{bucket}/out", *options, *ON_RAY) == 1
    returned = time.monotonic()
    deadline = returned + 10
    while "out/t1/index.json" not in written and time.monotonic() < deadline:
        time.sleep(0.1)
    assert written["out/t1/index.json"] < returned
