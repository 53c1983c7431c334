"""A small run without Ray (`resources.in_process_sources`, `jobs.in_process`): real MiniLM,
real files; builds without Ray in child processes without Ray and in this one, which holds the
session's local Ray of one node, compared byte for byte with the same builds on that Ray, or with
the same runs on Ray in `test_jobs_faults`: a signal, a source past its time budget,
`failure_policy: abort`."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from environment_support import own_ray_environment
from jobs_support import ON_RAY, outputs, signalled_at

from jobs.cgroups import usable_cpus
from jobs.reindex import main

REPO = Path(__file__).resolve().parents[1]
CONFIG = str(REPO / "configs" / "local.yaml")
COUNTS = ("sources", "topics", "chunks")  # the report's counts, alike both ways

pytestmark = pytest.mark.usefixtures("ray_session")  # the builds on Ray


def write_corpus(docs: Path) -> None:
    """Two topics of two pages each, and a questions file."""
    for topic in ("alpha", "beta"):
        for name in ("one", "two"):
            page = docs / topic / f"{name}.md"
            page.parent.mkdir(parents=True, exist_ok=True)
            words = " ".join(f"{topic} {name} step {i} retries the request." for i in range(30))
            page.write_text(f"# {topic} {name}\n\n{words}\n\n## More\n\n{words}\n")
    (docs / "alpha" / "qa-pairs.md").write_text("## How does alpha retry?\n\nIt waits.\n")


def without_ray(
    docs: Path, output: Path, cache: Path, *settings: str
) -> subprocess.CompletedProcess:
    """`python -m jobs.reindex` in a child process without Ray, with `--set` of each of
    `settings` (`configs/local.yaml` runs one of the small corpora here without Ray)."""
    command = [sys.executable, "-m", "jobs.reindex", "--config", CONFIG, "--input", str(docs)]
    command += ["--output", str(output), "--cache", str(cache)]
    for setting in settings:
        command += ["--set", setting]
    return subprocess.run(
        command, cwd=REPO, env=own_ray_environment(), capture_output=True, text=True, timeout=300
    )


def report_of(output: Path) -> dict:
    """The run report an output holds."""
    return json.loads((output / "_reindex" / "report.json").read_text())


def entries(cache: Path) -> dict[str, bytes]:
    """The cache's entries (not its record of the outputs that use it, named by their paths)."""
    return {
        p.relative_to(cache).as_posix(): p.read_bytes()
        for p in sorted(cache.rglob("*"))
        if p.is_file() and not p.relative_to(cache).as_posix().startswith("_outputs/")
    }


def copy(folder: Path, to: Path) -> Path:
    """A copy of `folder` at `to`."""
    shutil.copytree(folder, to)
    return to


def test_a_small_run_without_ray_writes_the_bytes_a_run_on_ray_writes(tmp_path, caplog):
    """A cold build on Ray, then the same build without Ray from its vectors (every chunk cached:
    no model loads) in this process, which holds a local Ray of one node (the session's: a small
    run gains nothing from it), then an edit of one page built both ways from copies of the cold
    output and cache (the page's new chunks embedded in a child process without Ray, and in an
    actor): every output file, the manifest, the cache's entries and the report's counts alike."""
    docs = tmp_path / "docs"
    write_corpus(docs)
    cold, cache = tmp_path / "cold", tmp_path / "cache"
    first_build = ["--config", CONFIG, "--input", str(docs), "--output", str(cold)]
    assert main([*first_build, "--cache", str(cache), *ON_RAY]) == 0

    alone = ["--config", CONFIG, "--input", str(docs), "--output", str(tmp_path / "alone")]
    alone += ["--cache", str(copy(cache, tmp_path / "alone-cache"))]
    with caplog.at_level(logging.INFO, logger="mdindex.build"):
        assert main([*alone, "--set", "resources.in_process_sources=5"]) == 0
    assert "no Ray: 5 files to read, at most resources.in_process_sources (5)" in caplog.text
    assert outputs(tmp_path / "alone") == outputs(cold)
    report = report_of(tmp_path / "alone")
    assert "ray_start" not in report["timings"]["wall_seconds"]
    first = report_of(cold)
    assert (report["sources"], report["topics"]) == (first["sources"], first["topics"])
    assert report["chunks"]["cache_hits"] == first["chunks"]["embedded"] > 0  # from its cache
    assert report["counters"]["embed"]["models_loaded"] == 0

    page = docs / "beta" / "two.md"
    page.write_text(page.read_text().replace("## More", "## More, edited\n\nA new sentence."))
    on_ray, ray_cache = copy(cold, tmp_path / "on-ray"), copy(cache, tmp_path / "ray-cache")
    args = ["--config", CONFIG, "--input", str(docs), "--output", str(on_ray)]
    assert main([*args, "--cache", str(ray_cache), *ON_RAY]) == 0
    edited, edited_cache = copy(cold, tmp_path / "edited"), copy(cache, tmp_path / "edited-cache")
    # its embedder on one torch thread (`resources.embed.threads`), the actor on every CPU's:
    # the same bits (MKL's reproducible mode)
    one_thread = ["resources.in_process_sources=1", "resources.embed.threads=1"]
    alone = without_ray(docs, edited, edited_cache, *one_thread)
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert "no Ray: 1 file to read" in alone.stderr
    assert outputs(edited) == outputs(on_ray)
    manifest = Path("_reindex") / "manifest.json"
    assert (edited / manifest).read_bytes() == (on_ray / manifest).read_bytes()
    assert entries(edited_cache) == entries(ray_cache)
    report, ray_report = report_of(edited), report_of(on_ray)
    assert {k: report[k] for k in COUNTS} == {k: ray_report[k] for k in COUNTS}
    assert report["chunks"]["embedded"] > 0 and report["counters"]["embed"]["models_loaded"] == 1
    # the driver embeds in MKL's reproducible mode, as an actor (`EmbedSettings.env`): unfilled
    # micro-batches, the same padding (filled ones pad each call's rows to its budget)
    embedded, ray_embedded = report["counters"]["embed"], ray_report["counters"]["embed"]
    assert embedded["padded_tokens"] == ray_embedded["padded_tokens"] < embedded["tokens"] * 2
    pool, ray_pool = report["timings"]["embed_pool"], ray_report["timings"]["embed_pool"]
    assert (pool["in_driver"], ray_pool["in_driver"]) == (True, False)
    assert pool["label"] == "the driver's process × 1 torch thread, on CPU"
    assert ray_pool["threads"] == ray_report["timings"]["cpus"]  # one actor, every CPU
    assert report["sources"]["carried"] == ray_report["sources"]["carried"] == 1

    # A topic whose previous tables cannot be read (its index.json gone, nothing changed): its
    # unchanged sources are read again in a second pass, as on Ray, and the topic comes back
    # whole, from the cache.
    before = outputs(edited)
    (edited / "_index" / "chunks" / "alpha.parquet").write_bytes(b"not parquet")
    (edited / "alpha" / "index.json").unlink()
    alone = without_ray(docs, edited, edited_cache, "resources.in_process_sources=0")
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert "1 topic could not carry 2 unchanged sources; reading them" in alone.stderr
    assert outputs(edited) == before
    report = report_of(edited)
    assert (report["sources"]["chunked"], report["chunks"]["embedded"]) == (2, 0)


def test_a_run_with_more_files_to_read_than_the_bound_starts_ray(tmp_path):
    """Past `resources.in_process_sources` (4 sources and a questions file to read) the build
    starts Ray, as without the setting; so does one that would join a cluster (RAY_ADDRESS). The
    dry run says which (`without Ray: yes`)."""
    docs = tmp_path / "docs"
    write_corpus(docs)
    program = (
        "import sys\n"
        "from jobs.config import load_config\n"
        "from jobs.discovery import discover, list_input\n"
        "from jobs.dry_run import dry_run\n"
        "from jobs.in_process import in_process_rows\n"
        "for bound in sys.argv[3:]:\n"
        "    sets = [f'resources.in_process_sources={bound}']\n"
        "    config = load_config(sys.argv[1], overrides={'input': sys.argv[2]}, settings=sets)\n"
        "    found = discover(config, list_input(config))\n"
        "    rows = in_process_rows(config, found.plan, found.previous, found.sizes)\n"
        "    print(rows is not None, dry_run(config).without_ray)\n"
    )
    command = [sys.executable, "-c", program, CONFIG, str(docs), "4", "5"]
    env = own_ray_environment()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "False", "True", "True"], done.stderr[-3000:]
    env["RAY_ADDRESS"] = "127.0.0.1:1"  # never dialled: the choice is made first
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False"] * 4, done.stderr[-3000:]


# Builds without Ray one after another in a fresh process (a program's, a notebook's), each into
# an output and cache of its own, so each loads the model; then, once Python's collector has run,
# the process's resident MB after each, what it left frozen, and whether it imported Ray Data.
BUILDS_IN_ONE_PROCESS = """
import gc, json, os, sys
from jobs.reindex import main
docs, outputs = sys.argv[1], sys.argv[2:]
dry = ["--config", "configs/local.yaml", "--input", docs, "--output", outputs[0], "--dry-run"]
assert main(dry) == 0
missing = ["--config", "configs/local.yaml", "--input", docs + "/missing", "--output", outputs[0]]
assert main(missing) == 2  # a failed run's ending
resident, settings = [], []
NAMES = ("MKL_CBWR", "OMP_WAIT_POLICY")
for output in outputs:
    args = ["--config", "configs/local.yaml", "--input", docs, "--output", output]
    assert main(args) == 0
    gc.collect()
    with open("/proc/self/statm") as statm:  # size, resident, ... in pages
        resident.append(int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6)
    import torch  # the first build's (a notebook's work after it): its own count, then this one
    settings.append([torch.get_num_threads(), *map(os.environ.get, NAMES)])
    torch.set_num_threads(1)
print(json.dumps(settings))
print(resident, gc.get_freeze_count(), "ray" in sys.modules)
"""


def test_small_builds_one_after_another_keep_no_model_and_never_import_ray(tmp_path):
    """A program that runs small builds without Ray one after another keeps none of their models:
    the driver's embedder froze what was alive after its load (as an actor does for its life), and
    the program grew by the model with each build (MiniLM: 70-100 MB). Nor does it import Ray,
    which is the Ray path's alone (`jobs.on_ray`): Ray Data's import was 0.3 s of a small build's
    start on this VM (its console's filter was put on for every build, `jobs.logs.quiet_ray_data`
    now), and Ray's own 0.4-0.55 s more (the pipeline's module, the collector actor, the error
    classes of a local instance's start, the dry run's module and a warnings filter imported it);
    nor does a dry run before them (its local instance's expected node, `jobs.local_fit`), nor
    a run that fails (its ending named the errors of a local instance's start).
    Nor does a build change the program's torch thread count or environment (a notebook's later
    torch work ran on the build's count, and each process it started inherited the embedder's
    MKL_CBWR and OMP_WAIT_POLICY)."""
    docs = tmp_path / "docs"
    write_corpus(docs)
    outputs = [str(tmp_path / f"out{i}") for i in range(2)]
    command = [sys.executable, "-c", BUILDS_IN_ONE_PROCESS, str(docs), *outputs]
    done = subprocess.run(
        command, cwd=REPO, env=own_ray_environment(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count("no Ray: 5 files to read") == 2, done.stderr[-3000:]
    resident, frozen, ray = done.stdout.splitlines()[-1].rsplit(" ", 2)  # after summaries
    first, second = json.loads(resident)
    assert second - first < 40, resident  # a model kept: 77 MB more
    assert (frozen, ray) == ("0", "False")
    # the embedder's settings are the build's alone: the program's thread count and environment
    # after it (the build's count, MKL_CBWR and OMP_WAIT_POLICY stayed)
    threads = usable_cpus()  # the embedder's count, as in the build
    assert json.loads(done.stdout.splitlines()[-2]) == [[threads, None, None], [1, None, None]]


def test_a_run_without_ray_stopped_by_sigterm_reports_it_and_a_rerun_converges(tmp_path):
    """SIGTERM as a run's stages begin in the driver (the model about to load): exit 143 and a
    failed report saying what stopped it, as on Ray (`test_jobs_faults`); the next run finishes
    and writes what a fresh build writes."""
    docs, output, cache = tmp_path / "docs", tmp_path / "out", tmp_path / "cache"
    write_corpus(docs)
    command = [sys.executable, "-m", "jobs.reindex", "--config", CONFIG, "--input", str(docs)]
    command += ["--output", str(output), "--cache", str(cache)]
    code, rest = signalled_at(command, own_ray_environment(), "no Ray:")  # the stages begin
    assert code == 143, rest[-3000:]
    assert "mdindex build: stopped by SIGTERM" in rest
    report = report_of(output)
    assert (report["status"], report["exit_code"]) == ("failed", 143)
    assert report["error"] == "Interrupted: stopped by SIGTERM"
    assert not list(output.rglob("index.json"))

    again = without_ray(docs, output, cache)
    assert again.returncode == 0, again.stderr[-3000:]
    # every chunk cached by now; two actors asked for: one embedder, on every CPU, all the same
    fresh = without_ray(docs, tmp_path / "fresh", cache, "resources.embed.actors=2")
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert outputs(output) == outputs(tmp_path / "fresh") != {}
    pool = report_of(tmp_path / "fresh")["timings"]["embed_pool"]
    assert (pool["actors"], pool["threads"]) == (1, os.cpu_count())


def test_a_run_without_ray_fails_a_source_as_on_ray(tmp_path):
    """A source past the chunking time budget fails alone (CHUNKING_TIMEOUT, exit 3: the budget's
    timer runs in the driver's main thread here, in a Ray task's there), and under
    `failure_policy: abort` one that cannot be read as text stops the run with exit 1 and the
    error naming it; the previous output stays."""
    docs, output, cache = tmp_path / "docs", tmp_path / "out", tmp_path / "cache"
    write_corpus(docs)
    (docs / "beta" / "huge.md").write_bytes(b"word " * 4_000_000)  # 20 MB: tens of seconds
    timed = without_ray(docs, output, cache, "chunking.timeout_seconds=3")
    assert timed.returncode == 3, timed.stderr[-3000:]
    assert "no Ray: 6 files to read" in timed.stderr
    failures = [(f["path"], f["code"]) for f in report_of(output)["failures"]]
    assert failures == [("beta/huge.md", "CHUNKING_TIMEOUT")]
    chunks = json.loads((output / "beta" / "index.json").read_text())["_embedded"]["chunks"]
    assert sorted(chunks) == ["one", "two"]

    (docs / "beta" / "huge.md").unlink()
    assert without_ray(docs, output, cache).returncode == 0
    before = outputs(output)
    (docs / "beta" / "three.md").write_bytes(b"# Three\n\ncaf\xe9\n")
    stopped = without_ray(docs, output, cache, "failure_policy=abort")
    assert stopped.returncode == 1, stopped.stderr[-3000:]
    last = stopped.stderr.strip().splitlines()[-1]
    assert "SourceFailed" in last and "beta/three.md" in last and "CHUNKING_FAILED" in last
    report = report_of(output)
    assert (report["status"], report["exit_code"]) == ("failed", 1)
    assert "beta/three.md" in report["error"] and "CHUNKING_FAILED" in report["error"]
    assert outputs(output) == before
