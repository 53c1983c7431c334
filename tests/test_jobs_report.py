"""The run report: report.html beside report.json from the same data, `mdindex report` on local and
S3 outputs, and the page as headless Chromium renders it (marked `browser`)."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import traceback
import xml.etree.ElementTree as ET
from datetime import datetime
from html import escape
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from environment_support import mdindex_onto_full_disk, needs_full_disk

import jobs.report
from embedding.keys import resolve_dtype
from jobs.build_cli import Interrupted
from jobs.cli import main as mdindex
from jobs.config import load_config
from jobs.lock import utc
from jobs.pipeline import run_job
from jobs.reindex import main
from jobs.report import chunk_notes, error_text, run_facts, summary, write_failed_report
from jobs.report_html import SETTINGS_CHANGED, next_step, render_html, token_bins
from jobs.runs import NEVER_ENDED
from jobs.storage import Storage
from tests.embedding_support import embedder
from tests.jobs_support import ON_RAY, gone_endpoint, s3_options, unstamped

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "fixtures" / "corpus"
CONFIG = str(ROOT / "configs" / "local.yaml")
BROKEN = "libraries/json-source-generation/broken-encoding.md"
SECTIONS = (
    "Run and settings",
    "Sources",
    "Stages",
    "Chunks",
    "Embedding cache",
    "Failures (1)",
    "Slowest sources (6)",
)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def built(tmp_path_factory, ray_session) -> Path:
    """The fixture corpus built on Ray: the report of a run with every stage's timings."""
    output = tmp_path_factory.mktemp("report") / "out"
    args = ["--config", CONFIG, "--input", str(CORPUS), "--output", str(output), *ON_RAY]
    assert main(args) == 3
    return output


def report_and_page(output: Path) -> tuple[dict, str]:
    folder = output / "_reindex"
    return json.loads((folder / "report.json").read_text()), (folder / "report.html").read_text()


def stored_runs(output: Path) -> list[dict]:
    """The output's run history, `_reindex/runs.jsonl`, oldest first."""
    lines = (output / "_reindex" / "runs.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def svgs(page: str) -> list[ET.Element]:
    """Every inline chart, parsed as XML (so each is well-formed)."""
    return [ET.fromstring(svg) for svg in re.findall(r"<svg .*?</svg>", page, re.S)]


def test_report_html_shows_every_section_from_the_report_data(built):
    report, page = report_and_page(built)
    assert page == render_html(report, stored_runs(built))  # the same data, nothing else
    assert "Last runs</h2><p>the last 1 of 1 in _reindex/runs.jsonl" in page
    for section in SECTIONS:
        assert f"{section}</h2>" in page, section
    assert not re.search(r"""(src|href)=|<script|<link|@import|url\(""", page)  # self-contained
    assert "sources_failed" in page and "exit code <b>3</b>" in page
    assert "chunking.strategy" in page and "embedding.model" in page
    # the pool that ran: this corpus is one chunk batch, so one actor, its threads on both CPUs
    pool = report["timings"]["embed_pool"]
    assert report["timings"]["cpus"] == 2 and (pool["actors"], pool["threads"]) == (1, 2)
    assert pool["label"] == "1 actor × 2 torch threads, on CPU" and pool["label"] in page
    # the key the actors' model had: the config's dtype as resolved on this machine, the digest
    dtype = load_config(CONFIG, overrides={"input": str(CORPUS)}).embedding.dtype  # local: fp32
    model = embedder(dtype=resolve_dtype(dtype, "cpu"))
    assert report["counters"]["embed"]["model_keys"] == [model.key] and model.key in page
    charts = svgs(page)
    titles = [chart.find("{http://www.w3.org/2000/svg}title").text for chart in charts]
    assert titles == [
        "sources of this run",
        "worker-seconds per stage",
        "wall seconds per phase",
        "token counts, semantic",
        "where each chunk's vector came from",
    ]
    tokens = report["chunks"]["tokens"]["semantic"]
    assert tokens["count"] == report["counters"]["chunk"]["chunks"] > 0
    assert f"min {tokens['min']}" in page and f"max {tokens['max']}" in page
    assert "<h3>CHUNKING_FAILED (1)</h3>" in page and f"<code>{BROKEN}:3</code>" in page
    # each failure names the line of its source it is on, for a reader of report.json
    [failure] = report["failures"]
    assert (failure["path"], failure["line"]) == (BROKEN, 3) and "(line 3)" in failure["message"]
    slowest = report["slowest_sources"]
    assert len(slowest) == 6 and BROKEN not in {s["path"] for s in slowest}  # chunked ones only
    assert [s["seconds"] for s in slowest] == sorted((s["seconds"] for s in slowest), reverse=True)


def test_chunked_counts_the_sources_chunked_and_failures_apart_everywhere(built, capsys):
    """`sources.chunked` counted the source that failed to chunk (7 of the corpus's 7, 1 of them
    failed), the stage's counter and the page's bar did not (6): every 'chunked' is now 6."""
    report, page = report_and_page(built)
    sources = report["sources"]
    assert (sources["seen"], sources["failed"], sources["carried"]) == (7, 1, 0)
    assert sources["chunked"] == report["counters"]["chunk"]["sources"] == 6
    assert report["counters"]["chunk"]["failed"] == 1
    found = re.findall(r'<div class="figure"><b>([^<]*)</b>([^<]*)</div>', page)
    figures = {label: value for value, label in found}
    assert (figures["chunked"], figures["failed"]) == ("6", "1")
    legend = re.findall(r">(chunked|carried|failed|untouched) (\d+)<", page)
    assert legend == [("chunked", "6"), ("carried", "0"), ("failed", "1"), ("untouched", "0")]
    assert mdindex(["report", str(built)]) == 0
    assert "1 failed; 6 chunked, 0 carried" in capsys.readouterr().out


def test_cache_entries_not_written_show_in_the_summary_and_the_page(built):
    """A run whose embedding cache cannot be written (a full disk) is 'ok', exit 0: its warnings
    were only in `counters.store`, which neither the summary nor the page showed."""
    report, page = report_and_page(built)
    assert "not written" not in summary(report) and "cache entries not written" not in page
    kept = ["cache entry c/<a>&b/metadata.json not written: No space left on device (c/<a>)"]
    report["counters"]["store"].update(failures=3, warnings=kept)
    text = summary(report).splitlines()
    after_time = text.index(next(line for line in text if line.startswith("  time:"))) + 1
    assert text[after_time : after_time + 2] == [
        "  cache:   3 entries could not be written (1 shown)",
        f"  WARNING {kept[0]}",
    ]
    page = render_html(report)
    assert '<span class="status warn">3 cache entries not written</span>' in page
    assert "<code>cache entry c/&lt;a&gt;&amp;b/metadata.json not written: No space" in page


def test_chunks_truncated_or_final_sections_skipped_get_a_note_in_the_summary(built):
    """A build with the job's default chunking (seed 003's 750 tokens) and MiniLM (a 256-token
    window) embedded most chunks' beginnings alone, and the summary said only 'N truncated';
    final sections `semantic` skipped were in the report alone."""
    report, _ = report_and_page(built)
    chunks = report["chunks"]
    assert chunks["truncated"] == 0 and chunks["skipped_tail"] == 4
    skipped = chunks["skipped_tokens"]
    tails = f"  note:    4 sources' short final sections were skipped ({skipped} tokens;"
    assert [line for line in summary(report).splitlines() if "note:" in line] == [
        f"{tails} seed 003's final-chunk rule: chunking.options.keep_short_tail: true keeps them)"
    ]
    chunks["truncated"] = 12
    text = summary(report).splitlines()
    assert text[3].endswith("12 truncated")
    assert text[4].startswith("  note:    12 chunks were longer than the model's window: ")
    assert text[5].startswith(tails)
    del chunks["skipped_tokens"]  # a report of an mdindex before 2026-11-22: it said '0 tokens'
    assert summary(report).splitlines()[5] == (
        "  note:    4 sources' short final sections were skipped (seed 003's final-chunk rule: "
        "chunking.options.keep_short_tail: true keeps them)"
    )


def test_one_of_a_kind_is_noted_in_the_singular():
    """A docs tree with one draft page said '1 drafts were left out' in the build's summary; one
    long chunk, '1 chunks were longer …', and one skipped tail '1 sources' short final sections
    were skipped (1 tokens; …'."""
    assert chunk_notes({"skipped_drafts": 1})[0].startswith("  note:    1 draft was left out (")
    assert chunk_notes({"skipped_drafts": 3})[0].startswith("  note:    3 drafts were left out (")
    [long, tail] = chunk_notes({"truncated": 1, "skipped_tail": 1, "skipped_tokens": 1})
    assert long.startswith("  note:    1 chunk was longer than the model's window: its end is ")
    assert long.endswith("keeps it whole)")
    one = "  note:    1 source's short final section was skipped (1 token; seed 003's"
    assert tail.startswith(one) and tail.endswith("keep_short_tail: true keeps it)")


def test_the_stages_figures_say_which_way_efficiency_goes_and_an_unknown_rate_is_na(built):
    """'efficiency 18.8' read as good; it is wall time over busy time, 1 the best. A run of no
    wall time has no overall rate (None): the page said '0 MB/s overall'."""
    report, page = report_and_page(built)
    label = "efficiency: wall time / (worker-seconds / CPUs); 1 = every CPU busy, more = idle CPUs"
    assert re.search(rf"<b>[0-9.,]+</b>{re.escape(label)}</div>", page)
    report["timings"]["throughput"] = {"bytes_per_second": None, "chunks_per_second": None}
    page = render_html(report)
    assert "<b>n/a</b>MB/s overall" in page and "<b>n/a</b>chunks/s overall" in page


def test_failures_of_files_that_are_no_source_are_counted_apart(built):
    """A skipped link (or a qa-pairs.md, keywords or topic file) fails the run, exit 3, but is no
    source: the summary said '0 failed' above its FAILED line, the page '0 failed' beside
    'Failures (1)'. They are counted apart; a run whose failures are all sources says nothing.
    They are symbolic links, said so ('links not followed' read as a page's links)."""
    report, page = report_and_page(built)
    assert "other:" not in summary(report) and "other files failed" not in page
    report["failures"].append(
        {"path": "t/link.md", "code": "SYMLINK_SKIPPED", "message": "symbolic link, not followed"}
    )
    assert (
        "  other:   1 failed or skipped, not sources (symbolic links not followed, names no index "
        "can hold, qa-pairs.md, keywords or topic files)"
    ) in summary(report).splitlines()
    page = render_html(report)
    other = (
        "other files failed or skipped (symbolic links not followed, names no index can hold, "
        "qa-pairs.md, keywords or topic files)"
    )
    assert f"<b>1</b>{other}</div>" in page


def test_a_storm_of_failures_is_counted_by_code_with_a_few_of_each_everywhere(
    tmp_path, capsys, caplog
):
    """2,000 failed sources of 4,000 printed 2,000 FAILED lines, logged a line each again on every
    later run (settled failures, skipped links) and put one table of 2,000 rows on the page above
    the slowest sources. Past 20: each code's count and a few of its paths (the log the first 20
    of each kind), and on the page each code's kinds of message counted, its paths folded; every
    one is still in report.json. 30 links alone: no source, so no Ray."""
    corpus, output = tmp_path / "docs", tmp_path / "out"
    (corpus / "t").mkdir(parents=True)
    for i in range(30):
        (corpus / "t" / f"link-{i:02d}.md").symlink_to("/etc/hostname")
    with caplog.at_level(logging.WARNING, logger="mdindex.build"):
        assert main(["--config", CONFIG, "--input", str(corpus), "--output", str(output)]) == 3
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == 21 and skipped[0].startswith("t/link-00.md skipped: symbolic link")
    assert skipped[-1].startswith("... and 10 more skipped (of 30: every one in _reindex/")
    report, page = report_and_page(output)
    assert len(report["failures"]) == 30  # all of them, for a program
    text = capsys.readouterr().out
    assert [line for line in text.splitlines() if "FAILED" in line or "..." in line] == [
        "  FAILED t/link-00.md: SYMLINK_SKIPPED: symbolic link, not followed "
        "(sources.follow_symlinks is false)",
        "  FAILED t/link-01.md: SYMLINK_SKIPPED: symbolic link, not followed "
        "(sources.follow_symlinks is false)",
        "  FAILED t/link-02.md: SYMLINK_SKIPPED: symbolic link, not followed "
        "(sources.follow_symlinks is false)",
        "  ...      27 more SYMLINK_SKIPPED",
    ]
    assert "<h3>SYMLINK_SKIPPED (30)</h3>" in page and "<summary>all 30 paths</summary>" in page
    # a storm of mixed kinds: one of each kind of message first, the biggest code first
    report["failures"] = [
        {"path": f"t/{kind}-{i:04d}.md", "code": "CHUNKING_FAILED", "message": message}
        for kind, message, count in (
            ("nul", "binary content: NUL byte at byte offset {}", 300),
            ("utf16", "looks like UTF-16 (byte order mark FF FE); save it as UTF-8", 200),
            ("utf8", "invalid UTF-8 at byte offset {}: invalid start byte", 1000),
        )
        for i in range(count)
        for message in [message.format(80 + i % 20)]
    ] + [{"path": "t/x.md", "code": "READ_FAILED", "message": "gone"}]
    lines = summary(report).splitlines()
    said = (
        "  failed:  1501 paths, 1500 CHUNKING_FAILED, 1 READ_FAILED: a few of each below, "
        "every one in _reindex/report.json ('failures') and report.html"
    )
    assert len(lines) < 20 and said in lines
    assert [line.split(": ", 2)[-1] for line in lines if "FAILED t/" in line] == [
        "invalid UTF-8 at byte offset 80: invalid start byte",
        "binary content: NUL byte at byte offset 80",
        "looks like UTF-16 (byte order mark FF FE); save it as UTF-8",
        "gone",
    ]
    page = render_html(report)
    kinds = re.findall(r'<tr><td class="n">([\d,]+)</td><td>([^<]*)</td>', page)
    assert kinds == [
        ("1,000", "invalid UTF-8 at byte offset 80: invalid start byte"),
        ("300", "binary content: NUL byte at byte offset 80"),
        ("200", "looks like UTF-16 (byte order mark FF FE); save it as UTF-8"),
    ]
    assert page.count("<details>") == 1 and page.count("<tr><td><code>t/") == 1501
    assert '<th class="n">paths</th>' in page and ".n { text-align: right" in page  # no wrap
    assert page.index("<h3>CHUNKING_FAILED (1500)</h3>") < page.index("<h3>READ_FAILED (1)</h3>")


def test_files_no_glob_matches_are_named_in_the_report(tmp_path, capsys):
    """Files named like markdown that no glob matches (`GUIDE.MD`, `x.markdown`) were named in a
    warning of the build's log alone: its report, summary and page, read days later, said
    nothing of them. Each says so now, as the log does. No source: no Ray."""
    corpus, output = tmp_path / "docs", tmp_path / "out"
    (corpus / "t").mkdir(parents=True)
    for i in range(25):
        (corpus / "t" / f"page-{i:02d}.markdown").write_text("# Page\n\nText.\n")
    assert main(["--config", CONFIG, "--input", str(corpus), "--output", str(output)]) == 0
    report, page = report_and_page(output)
    first = [f"t/page-{i:02d}.markdown" for i in range(20)]
    assert report["unmatched_markdown"] == {"count": 25, "first": first}
    note = (
        "25 files named like markdown are no source, as no glob of sources.globs ['*.md'] "
        "matches (t/page-00.markdown, t/page-01.markdown, t/page-02.markdown, …): add a glob to "
        "index them"
    )
    assert f"  note:    {note}" in capsys.readouterr().out.splitlines()
    assert f"not sources</span> {escape(note)}</p>" in page
    assert mdindex(["report", str(output)]) == 0 and note in capsys.readouterr().out
    del report["unmatched_markdown"]  # a report from before they were recorded
    assert "no glob" not in summary(report) and "no glob" not in render_html(report)


def test_token_bins_cover_min_to_max_and_keep_every_count():
    histogram = {"bucket": 10, "buckets": [[30, 2], [40, 1], [250, 5], [990, 1]], "min": 31,
                 "max": 997, "count": 9}  # fmt: skip
    bins = token_bins(histogram, target=24)
    assert bins[0].low <= 31 and bins[-1].high > 997
    assert sum(b.count for b in bins) == 9
    assert len({b.high - b.low for b in bins}) == 1 and 20 <= len(bins) <= 26


def test_a_failed_runs_report_renders_what_it_has(tmp_path, capsys):
    failed = {"status": "failed", "exit_code": 1, "output": str(tmp_path),
              "error": "RuntimeError: worker died"}  # fmt: skip
    page = render_html(failed)
    assert "exit code <b>1</b>" in page and "RuntimeError: worker died" in page
    assert "no timings in this report" in page and "<svg" not in page
    # it did not report its sources: its failures are not known, not "none" (as it said)
    assert '<h2>Failures</h2><p class="none">not known: the run did not finish' in page
    assert ">none<" not in page and "no source was chunked in this run" not in page
    assert '<h2>Slowest sources</h2><p class="none">no chunking times in this report' in page
    (tmp_path / "_reindex").mkdir()
    (tmp_path / "_reindex" / "report.json").write_text(json.dumps(failed))
    assert mdindex(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("last run: failed (exit code 1)") and "RuntimeError: worker died" in out
    assert (tmp_path / "_reindex" / "report.html").read_text() == page


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"),
    reason="needs root, and setpriv to take away its right to read any folder",
)
def test_an_input_folder_that_cannot_be_listed_fails_the_build_in_one_line(tmp_path):
    """An input folder the build's user may not read (another user's, mode 0700) failed the
    build (exit 1) with a 15-line traceback, and a last line of "[Errno 13] cannot list the
    input folder: ..." that named not the input. Now one line names both, and what to check.
    Root reads any folder: the build runs as root without that right (CAP_DAC_OVERRIDE)."""
    docs = tmp_path / "docs"
    for page in ("t/a.md", "locked/b.md"):
        (docs / page).parent.mkdir(parents=True, exist_ok=True)
        (docs / page).write_text("# A page\n\nSome text.\n")
    os.chown(docs / "locked", 65534, 65534)  # nobody's
    (docs / "locked").chmod(0o700)
    output = tmp_path / "out"
    command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable]
    command += ["-m", "jobs.cli", "build", "--config", CONFIG, "--input", str(docs)]
    done = subprocess.run(
        [*command, "--output", str(output)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1, done.stderr
    error = f"InputUnlistable: the input {docs} cannot be listed (Permission denied: "
    error += f"{docs / 'locked'}): give the user the build runs as permission to list and read it"
    lines = ["the job failed", f"mdindex build: the job failed: {error}"]
    assert unstamped(done.stderr).splitlines() == lines
    report = json.loads((output / "_reindex" / "report.json").read_text())
    assert (report["exit_code"], report["error"]) == (1, error)


def test_a_failed_runs_report_says_when_it_began(tmp_path, capsys):
    """A run that failed or was stopped said only when it ended (its unfinished report, which had
    `started_at`, replaced): its failed report says when it began."""
    config = load_config(CONFIG, overrides={"input": str(tmp_path), "output": str(tmp_path)})
    stop = Interrupted("stopped by SIGTERM")
    write_failed_report(config, stop, exit_code=143, started=1_790_000_000.0)
    report = json.loads((tmp_path / "_reindex" / "report.json").read_text())
    assert (report["status"], report["started_at"]) == ("failed", "2026-09-21T14:13:20+00:00")
    assert mdindex(["report", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith(
        f"last run: failed (exit code 143), started 2026-09-21T14:13:20+00:00, finished "
        f"{report['finished_at']}, pid {os.getpid()} on {socket.gethostname()}\n"
        "  Interrupted: stopped by SIGTERM\n"
    )
    assert mdindex(["report", "--check", str(tmp_path)]) == 143
    assert "<th>started</th><td><code>2026-09-21T14:13:20+00:00" in report_and_page(tmp_path)[1]
    # a failed run has its line in the output's run history, as every run does
    assert stored_runs(tmp_path) == [
        {
            **{key: report[key] for key in ("started_at", "finished_at", "status", "exit_code")},
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "error": "Interrupted: stopped by SIGTERM",
        }
    ]


def test_a_failed_runs_error_is_plain_text_when_an_actor_died_in_its_init(tmp_path):
    """Ray colours the task it names in an actor's creation error; the report keeps the words."""
    from ray.exceptions import ActorDiedError, RayTaskError

    try:
        raise ValueError("model '/nowhere' is not 'minilm', an existing directory")
    except ValueError as exc:
        died = ActorDiedError(RayTaskError("EmbedActor.__init__", traceback.format_exc(), exc))
    assert "\x1b[" in str(died)
    config = load_config(str(ROOT / "configs" / "local.yaml"), overrides={"input": str(tmp_path)})
    write_failed_report(config, died)
    error = json.loads((tmp_path / "_reindex" / "report.json").read_text())["error"]
    assert error == error_text(died) and "\x1b" not in error
    assert error.startswith("ActorDiedError: The actor died because of an error raised in its")
    assert error.endswith("ValueError: model '/nowhere' is not 'minilm', an existing directory")


def test_report_command_prints_the_last_runs_summary(built, capsys):
    (built / "_reindex" / "report.html").unlink()  # e.g. written by an older version
    assert mdindex(["report", str(built)]) == 0
    out = capsys.readouterr().out
    report = json.loads((built / "_reindex" / "report.json").read_text())
    # when it began, not only when it ended (the unfinished report's start was lost at the end)
    started, finished = (datetime.fromisoformat(report[k]) for k in ("started_at", "finished_at"))
    total = report["timings"]["wall_seconds"]["total"]
    assert abs((finished - started).total_seconds() - total) <= 1
    # and where: a scheduled run's report read days later names the machine to look at
    assert (report["host"], report["pid"]) == (socket.gethostname(), os.getpid())
    assert report["mdindex_version"] == version("mdindex")
    assert out.startswith(
        f"last run: sources_failed (exit code 3), started {report['started_at']}, "
        f"finished {report['finished_at']}, pid {os.getpid()} on {socket.gethostname()}\n"
    )
    assert "mdindex build: 7 sources in 4 topics" in out and f"FAILED {BROKEN}" in out
    # read days later: what ran, each phase's time (the summary gave the total alone), and what
    # to do about the failed file (it said what happened, never what to do)
    keys = ", ".join(report["counters"]["embed"]["model_keys"])
    wall = report["timings"]["wall_seconds"]
    assert (
        f"\n  ran:     mdindex {version('mdindex')}, model {report['model']} ({keys}); its "
        "settings in report.html\n"
        f"  phases:  discover {wall['discover']:.1f} s, ray_start {wall['ray_start']:.1f} s, "
        f"pipeline {wall['pipeline']:.1f} s, finish {wall['finish']:.1f} s\n"
        "  next:    fix 1 file whose content failed (CHUNKING_FAILED): unchanged, it fails every "
        "build (exit 3); all else is written\n"
        f"report: {built / '_reindex' / 'report.html'}\n"
    ) in out, out
    report, page = report_and_page(built)
    assert page == render_html(report, stored_runs(built))
    assert mdindex(["report", str(built / "nothing")]) == 2


def test_report_command_writes_the_page_where_html_says_for_a_local_output_too(
    built, tmp_path, capsys
):
    """`--html FILE` was ignored for a local output, unsaid: the page is written there."""
    page = tmp_path / "page.html"
    assert mdindex(["report", str(built), "--html", str(page)]) == 0
    assert capsys.readouterr().out.rstrip().endswith(f"report: {page}")
    report, built_page = report_and_page(built)
    assert page.read_text() == render_html(report, stored_runs(built)) == built_page


def test_report_command_on_a_report_without_an_exit_code_says_it_is_unknown(
    built, tmp_path, capsys
):
    """A report of a version that did not record the exit code: 'exit code None' it said. Nor a
    failure's line (before 2026-11-30): the one its message names."""
    report = json.loads((built / "_reindex" / "report.json").read_text())
    del report["exit_code"]
    del report["failures"][0]["line"]
    (tmp_path / "_reindex").mkdir()
    (tmp_path / "_reindex" / "report.json").write_text(json.dumps(report))
    assert mdindex(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("last run: sources_failed (exit code unknown), started ")
    assert "None" not in out and f"  FAILED {BROKEN}:3: CHUNKING_FAILED: " in out
    page = (tmp_path / "_reindex" / "report.html").read_text()
    assert "exit code <b>n/a</b>" in page and "None" not in page
    assert f"<code>{BROKEN}:3</code>" in page
    report["exit_code"] = None  # as damaged
    (tmp_path / "_reindex" / "report.json").write_text(json.dumps(report))
    assert mdindex(["report", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("last run: sources_failed (exit code unknown)")


def test_report_command_reads_an_s3_output_and_writes_the_page_locally(
    built, s3_server, tmp_path, capsys
):
    bucket = s3_server.make_bucket("reports")
    s3_server.filesystem().put(str(built / "_reindex" / "report.json"),
                               f"{bucket}/out/_reindex/report.json")  # fmt: skip
    page = tmp_path / "report.html"
    assert mdindex(["report", f"{bucket}/out", "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert "mdindex build: 7 sources in 4 topics" in out and f"report: {page}" in out
    report, _ = report_and_page(built)
    assert page.read_text() == render_html(report)
    # A bucket that does not exist is named so, as the build names it ("no …/report.json" said
    # nothing of the bucket), exit 2 as for no report.
    assert mdindex(["report", "s3://no-such-bucket/out"]) == 2
    needs = "mdindex report: output s3://no-such-bucket/out: no such bucket\n"
    assert capsys.readouterr().err == needs


def test_an_s3_outputs_run_history_is_kept_beside_its_report(s3_server, tmp_path, capsys):
    """The run history of an S3 output, written with its report (no build): a run's unfinished
    line replaced by its failed one, the next run's after it, shown by `mdindex report --runs`
    and on the page written locally."""
    bucket = s3_server.make_bucket("history")
    output = Storage(f"{bucket}/out", s3_server.storage_options)
    where = {"host": "night", "pid": 7, "output": f"{bucket}/out"}
    monday = {"started_at": "2026-11-30T02:00:00+00:00", **where}
    jobs.report.write_report(output, {**monday, "status": "unfinished", "exit_code": None})
    stopped = {**monday, "status": "failed", "exit_code": 143, "error": "Interrupted: stopped"}
    jobs.report.write_report(output, {**stopped, "finished_at": "2026-11-30T02:01:00+00:00"})
    tuesday = {"started_at": "2026-12-01T02:00:00+00:00", **where, "status": "failed"}
    jobs.report.write_report(output, {**tuesday, "exit_code": 1, "error": "OSError: full"})
    runs = [json.loads(line) for line in output.read_bytes("_reindex/runs.jsonl").splitlines()]
    assert [(run["started_at"], run["exit_code"]) for run in runs] == [
        ("2026-11-30T02:00:00+00:00", 143),
        ("2026-12-01T02:00:00+00:00", 1),
    ]
    assert mdindex(["report", f"{bucket}/out", "--runs"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("2026-12-01 02:00  failed") and out[2].endswith("  OSError: full")
    assert out[3].endswith("1 min 00 s        -        -       -         -  Interrupted: stopped")
    page = tmp_path / "report.html"
    assert mdindex(["report", f"{bucket}/out", "--html", str(page)]) == 0
    assert "the last 2 of 2 in _reindex/runs.jsonl" in page.read_text()


DAMAGED = {
    "truncated": (b'{"status": "ok", "exit_code": 0, "sour', "Unterminated string starting at"),
    "empty": (b"", "Expecting value: line 1 column 1 (char 0)"),
    "not-utf8": (b'{"status": "\xff"}', "'utf-8' codec can't decode byte 0xff"),
    "list": (b"[1, 2]", "a JSON list, not an object"),
    "no-status": (b"{}", "no 'status'"),  # was "last run: unknown (exit code unknown)", exit 0
    "status-null": (b'{"status": null, "error": null}', "'status' is no string"),
    "no-chunks": (json.dumps({"status": "ok", "sources": {"seen": 1}}).encode(), "no 'chunks'"),
    "failures-str": (
        json.dumps({"status": "failed", "failures": "boom"}).encode(),
        "TypeError: string indices must be integers",
    ),
    "slowest-null": (  # the summary has nothing to say; the page fails on it
        json.dumps({"status": "ok", "slowest_sources": [{"path": "a.md", "seconds": None}]}),
        "TypeError: ",
    ),
    "deep": (b"[" * 100_000 + b"]" * 100_000, "maximum recursion depth exceeded"),
    "lone-surrogate": (  # printed: a UnicodeEncodeError traceback, exit 1
        b'{"status": "failed", "error": "RuntimeError: \\ud800"}',
        "'\\ud800' is no character",
    ),
}


@pytest.mark.parametrize("case", DAMAGED)
def test_report_command_says_in_one_line_that_a_report_is_damaged(tmp_path, capsys, case):
    """A report.json that is no run report is exit 2 with one line naming it (it was a
    traceback and exit 1), and no report.html is made from it."""
    data, why = DAMAGED[case]
    report = tmp_path / "_reindex" / "report.json"
    report.parent.mkdir()
    report.write_bytes(data if isinstance(data, bytes) else data.encode())
    assert mdindex(["report", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"mdindex report: {report} is damaged: ")
    assert why in err and err.count("\n") == 1
    assert not (tmp_path / "_reindex" / "report.html").exists()


def test_report_command_on_a_file_or_an_unreachable_store_is_one_line(tmp_path, capsys):
    """A file given as OUT holds no report (2); a store that cannot be reached is an I/O error
    (1), the output and the endpoint named (as `mdindex query` names its root). Both were
    tracebacks and exit 1."""
    page = tmp_path / "a.md"
    page.write_text("# a\n")
    assert mdindex(["report", str(page)]) == 2
    assert capsys.readouterr() == (
        "",
        f"mdindex report: no {page}/_reindex/report.json\n",
    )
    gone = gone_endpoint()
    options = {**json.loads(s3_options(gone)), "config_kwargs": {"retries": {"max_attempts": 1}}}
    code = mdindex(["report", "s3://reports/out", "--storage-options", json.dumps(options),
                    "--html", str(tmp_path / "page.html")])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and err.count("\n") == 1
    assert err.startswith("mdindex report: s3://reports/out: EndpointConnectionError: ")
    assert gone in err
    assert not (tmp_path / "page.html").exists()


@pytest.mark.parametrize("s3_behind", ["refuses the credentials"], indirect=True)
def test_report_command_on_a_store_that_refuses_the_credentials_names_the_output(
    s3_behind, tmp_path, capsys
):
    """Credentials the store refuses gave "mdindex report: PermissionError: Forbidden", naming
    no output: which of a platform's buckets, or which endpoint, refused them was not said."""
    server, _ = s3_behind
    output = f"{server.make_bucket('refused-report')}/index"
    code = mdindex(["report", output, "--storage-options", json.dumps(server.storage_options),
                    "--html", str(tmp_path / "page.html")])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"mdindex report: {output}: PermissionError: "), err
    assert not (tmp_path / "page.html").exists()


def test_report_command_on_a_uri_of_no_known_protocol_is_bad_usage(capsys):
    """`s4://` and `S3://` were a ValueError traceback and exit 1."""
    for uri in ("s4://reports/out", "S3://reports/out", "s3:/reports/out"):
        assert mdindex(["report", uri]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and err.startswith(f"mdindex report: {uri}")
    assert "did you mean s3://reports/out?" in err


def test_report_storage_options_that_are_no_json_object_are_bad_usage(tmp_path, capsys):
    """`--storage-options '"x"'` was a TypeError traceback (exit 1) and `'[]'` was taken as no
    options; both are bad usage (exit 2), as for `query`."""
    for text in ('"x"', "[]", "{"):
        with pytest.raises(SystemExit) as stopped:
            mdindex(["report", str(tmp_path), "--storage-options", text])
        assert stopped.value.code == 2, text
        assert "--storage-options" in capsys.readouterr().err


def test_report_storage_options_the_store_does_not_take_are_bad_usage(
    tmp_path, capsys, monkeypatch
):
    """An option the store's client does not take (`endpoint` for s3fs's `endpoint_url`) was
    aiobotocore's TypeError traceback, exit 1; it is exit 2, one line naming it, as for `query`,
    and so is an AWS profile of the environment that does not exist (exit 1)."""
    from s3fs import S3FileSystem

    code = mdindex(["report", "s3://reports/out", "--storage-options", '{"endpoint": "x"}',
                    "--html", str(tmp_path / "page.html")])  # fmt: skip
    out, err = capsys.readouterr()
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert err.startswith("mdindex report: s3://reports/out: no S3 client with --storage-"), err
    assert "'endpoint'" in err and not (tmp_path / "page.html").exists()
    S3FileSystem.clear_instance_cache()  # a client made before, in this process, is reused
    monkeypatch.setenv("AWS_PROFILE", "mdindex-no-such-profile")
    assert mdindex(["report", "s3://reports/out"]) == 2
    err = capsys.readouterr().err
    assert "ProfileNotFound" in err and "(the environment sets " in err
    assert "AWS_PROFILE=mdindex-no-such-profile" in err


def test_report_open_without_a_browser_says_so(tmp_path, capsys, monkeypatch):
    """`mdindex report OUT --open` where no browser can be found (a server, an SSH session)
    printed the summary and exited 0 without a word that nothing opened."""
    import webbrowser

    (tmp_path / "_reindex").mkdir()
    failed = {"status": "failed", "exit_code": 1, "error": "RuntimeError: worker died"}
    (tmp_path / "_reindex" / "report.json").write_text(json.dumps(failed))
    opened = []
    monkeypatch.setattr(webbrowser, "open", lambda url: opened.append(url) or False)
    assert mdindex(["report", str(tmp_path), "--open"]) == 0
    assert opened == [(tmp_path / "_reindex" / "report.html").resolve().as_uri()]
    assert capsys.readouterr().err == (
        "mdindex report: no browser found to open the page: open it from the path above\n"
    )
    monkeypatch.setattr(webbrowser, "open", lambda url: True)
    assert mdindex(["report", str(tmp_path), "--open"]) == 0
    assert capsys.readouterr().err == ""


def test_report_command_into_a_closed_pipe_ends_quietly_with_its_code(tmp_path):
    """`mdindex report OUT | head -1` where head has gone: the summary met a closed pipe at the
    program's last flush ("Exception ignored ... BrokenPipeError", exit 120)."""
    (tmp_path / "_reindex").mkdir()
    failed = {"status": "failed", "exit_code": 1, "error": "RuntimeError: worker died"}
    (tmp_path / "_reindex" / "report.json").write_text(json.dumps(failed))
    read, write = os.pipe()
    os.close(read)  # the reader stopped before the first line
    try:
        done = subprocess.run(
            [sys.executable, "-m", "jobs.cli", "report", str(tmp_path)],
            cwd=ROOT, stdout=write, stderr=subprocess.PIPE, text=True, timeout=60,
        )  # fmt: skip
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (0, "")
    assert (tmp_path / "_reindex" / "report.html").is_file()


@needs_full_disk
def test_report_onto_a_full_disk_says_so_in_one_line_and_exits_1(tmp_path):
    """`mdindex report OUT > /dev/full` was an OSError (ENOSPC) traceback."""
    (tmp_path / "_reindex").mkdir()
    failed = {"status": "failed", "exit_code": 1, "error": "RuntimeError: worker died"}
    (tmp_path / "_reindex" / "report.json").write_text(json.dumps(failed))
    done = mdindex_onto_full_disk("report", str(tmp_path))
    assert (done.returncode, done.stderr) == (
        1,
        "mdindex report: cannot write to standard output: No space left on device\n",
    )


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_report_check_into_a_closed_pipe_keeps_the_last_runs_code(tmp_path, unbuffered):
    """`mdindex report --check OUT | head -1` where head has gone: with PYTHONUNBUFFERED=1 (this
    project's machines, many schedulers) the summary's print met the closed pipe in the command,
    and the program exited 0 for a run that failed: a health check that never fires."""
    (tmp_path / "_reindex").mkdir()
    failed = {"status": "failed", "exit_code": 1, "error": "RuntimeError: worker died"}
    (tmp_path / "_reindex" / "report.json").write_text(json.dumps(failed))
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "jobs.cli", "report", "--check", str(tmp_path)],
            cwd=ROOT, stdout=write, stderr=subprocess.PIPE, text=True, timeout=60,
            env={**os.environ, "PYTHONUNBUFFERED": unbuffered},
        )  # fmt: skip
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (1, "")


def test_a_builds_summary_into_a_closed_pipe_keeps_the_builds_exit_code(
    built, tmp_path, monkeypatch
):
    """`mdindex build ... | head -1` where head has gone: the BrokenPipeError of the summary's
    print ended `run_build`, and the build's exit code (3: a source failed) was lost."""
    output = tmp_path / "out"
    shutil.copytree(built, output)  # its cache too: nothing to embed
    read, write = os.pipe()
    os.close(read)
    with io.TextIOWrapper(io.FileIO(write, "w"), write_through=True) as closed:
        monkeypatch.setattr(sys, "stdout", closed)
        assert main(["--config", CONFIG, "--input", str(CORPUS), "--output", str(output)]) == 3
    assert json.loads((output / "_reindex" / "report.json").read_text())["exit_code"] == 3


@needs_full_disk
def test_a_builds_summary_onto_a_full_disk_keeps_the_builds_exit_code(tmp_path):
    """`mdindex build ... >> build.log` on a full disk: the build wrote its index and its report
    (exit code 3 there), then the summary's print raised ENOSPC, and the program ended in a
    traceback with exit 1, which the scheduler saw where `mdindex report --check` said 3. Now one
    line says so, and the build's code stands. A linked source alone: no Ray, exit 3."""
    corpus, output = tmp_path / "docs", tmp_path / "out"
    (corpus / "topic").mkdir(parents=True)
    (corpus / "topic" / "linked.md").symlink_to(CORPUS / "guides" / "installation.md")
    command = ["build", "--config", CONFIG, "--input", str(corpus), "--output", str(output)]
    done = mdindex_onto_full_disk(*command)
    assert done.returncode == 3, done.stderr
    assert done.stderr.endswith(
        "mdindex build: cannot write to standard output: No space left on device\n"
    ), done.stderr
    assert "Traceback" not in done.stderr
    assert json.loads((output / "_reindex" / "report.json").read_text())["exit_code"] == 3
    # Standard error on the same full disk (`>> build.log 2>&1`): the line could not be said
    # either, and a build that reported 3 exited 1, as one that ends without a summary (an input
    # that is no folder, exit 2) did (until 2026-12-01).
    assert mdindex_onto_full_disk(*command, stderr_too=True).returncode == 3
    command[command.index(str(corpus))] = str(corpus / "topic" / "linked.md")
    assert mdindex_onto_full_disk(*command, stderr_too=True).returncode == 2


@pytest.mark.parametrize("closed", ["1", "2"])
def test_a_build_with_a_standard_stream_closed_keeps_its_exit_code(tmp_path, closed):
    """`mdindex build ... >&-` or `2>&-` (a cron line closing a stream): Python leaves
    `sys.stdout` or `sys.stderr` None. With standard error closed the build failed at its first
    look at it ("AttributeError: 'NoneType' object has no attribute 'isatty'", exit 1 and a
    failed report); with standard output closed it wrote its report, then the program's last
    flush failed, exit 1. A linked source alone: no Ray, exit 3, and the report says so."""
    corpus, output = tmp_path / "docs", tmp_path / "out"
    (corpus / "topic").mkdir(parents=True)
    (corpus / "topic" / "linked.md").symlink_to(CORPUS / "guides" / "installation.md")
    command = ["build", "--config", CONFIG, "--input", str(corpus), "--output", str(output)]
    done = subprocess.run(
        ["sh", "-c", f'exec "$@" {closed}>&-', "sh", sys.executable, "-m", "jobs.cli", *command],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 3, (done.stdout, done.stderr)
    report = json.loads((output / "_reindex" / "report.json").read_text())
    assert (report["status"], report["exit_code"]) == ("sources_failed", 3)


def test_a_build_whose_log_reader_stopped_keeps_its_exit_code(tmp_path):
    """`mdindex build ... 2>&1 | head -1` where head has gone: the stderr filter's pump met the
    closed pipe and ended, the build's next write to descriptor 2 failed the build (a failed
    report, "BrokenPipeError: [Errno 32] Broken pipe"), and the failure's own line met the pipe
    too, so the program exited 0. Now the pump drains what it can no longer pass on, and the
    build's exit code stands. A linked source alone: no Ray, exit 3."""
    corpus, output = tmp_path / "docs", tmp_path / "out"
    (corpus / "topic").mkdir(parents=True)
    (corpus / "topic" / "linked.md").symlink_to(CORPUS / "guides" / "installation.md")
    command = ["build", "--config", CONFIG, "--input", str(corpus), "--output", str(output)]
    read, write = os.pipe()
    os.close(read)  # the reader stopped before the first line
    try:
        done = subprocess.run(
            [sys.executable, "-m", "jobs.cli", *command],
            cwd=ROOT, stdout=write, stderr=write, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write)
    assert done.returncode == 3
    report = json.loads((output / "_reindex" / "report.json").read_text())
    assert (report["status"], report["exit_code"]) == ("sources_failed", 3)


MEASURE = """<script>
window.addEventListener("load", () => {
  const charts = [...document.querySelectorAll("svg")].map((svg) => {
    const box = svg.getBoundingClientRect();
    const marks = [...svg.querySelectorAll("rect")].filter((r) => {
      const b = r.getBoundingClientRect(); return b.width > 0 && b.height > 0; }).length;
    return {width: box.width, height: box.height, marks: marks};
  });
  const pre = document.createElement("pre"); pre.id = "measured";
  pre.textContent = JSON.stringify({charts: charts, width: document.body.scrollWidth});
  document.body.appendChild(pre);
});
</script></body>"""


def measure(page: str, folder: Path, shot: Path | None = None) -> dict:
    """What Chromium lays out for `page` (`MEASURE`, added to a copy), taking a screenshot."""
    probe = folder / "probe.html"
    probe.write_text(page.replace("</body>", MEASURE))
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1100,2400"]
    shots = [f"--screenshot={shot}"] if shot else []
    dom = subprocess.run([*flags, "--dump-dom", *shots, probe.as_uri()],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    return json.loads(re.search(r'<pre id="measured">(.*?)</pre>', dom.stdout).group(1))


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (Debian package chromium)")
def test_report_html_renders_in_headless_chromium(built, tmp_path):
    """Chromium lays out every chart with marks of non-zero size, the page fits its width, and
    it takes a screenshot of it, in one start (a measuring script is added to a copy, not to the
    report)."""
    shot = tmp_path / "report.png"
    measured = measure((built / "_reindex" / "report.html").read_text(), tmp_path, shot)
    assert len(measured["charts"]) == 5
    for chart in measured["charts"]:
        assert chart["width"] > 300 and chart["height"] > 20 and chart["marks"] >= 1, chart
    assert measured["width"] <= 1100
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_control_characters_in_a_path_are_escaped_in_the_summary_the_page_and_the_log(
    built, tmp_path, capsys, caplog
):
    """A file name holding a terminal escape, a newline or a right-to-left override: the summary
    printed a FAILED line that cleared the terminal, split in two and reversed its end, and the
    next run's warning about the settled failure forged a log line of its own. (The page that
    chunks is one of the module build's: its vectors come from a copy of that cache.)"""
    corpus, output = tmp_path / "docs", tmp_path / "out"
    (corpus / "t").mkdir(parents=True)
    name = "\x1b[2J\u202eevil\nFAILED none.md"
    (corpus / "t" / name).write_bytes(b"# T\n\ncaf\xe9\n")  # CHUNKING_FAILED
    shutil.copy(CORPUS / "guides" / "installation.md", corpus / "t" / f"ok-{name}")
    shutil.copytree(built / ".embedding-cache", output / ".embedding-cache")
    assert main(["--config", CONFIG, "--input", str(corpus), "--output", str(output)]) == 3
    assert report_and_page(output)[0]["counters"]["embed"]["models_loaded"] == 0
    escaped = "\\x1b[2J\\u202eevil\\nFAILED none.md"
    for argv in ([], ["report", str(output)]):
        if argv:
            assert mdindex(argv) == 0
        text = capsys.readouterr().out
        assert not any(c in text for c in "\x1b\u202e") and "\nFAILED" not in text
        [failed] = [line for line in text.splitlines() if line.startswith("  FAILED")]
        assert failed.startswith(f"  FAILED t/{escaped}:3: CHUNKING_FAILED: ")
    _, page = report_and_page(output)
    assert not any(c in page for c in "\x1b\u202e")
    assert f"<code>t/{escaped}</code>" in page and f"<code>t/ok-{escaped}</code>" in page
    with caplog.at_level(logging.WARNING, logger="mdindex.build"):  # the failure, settled
        assert main(["--config", CONFIG, "--input", str(corpus), "--output", str(output)]) == 3
    [settled] = [r.getMessage() for r in caplog.records if "still fails" in r.getMessage()]
    assert settled.startswith(f"t/{escaped} still fails") and "\n" not in settled


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (Debian package chromium)")
def test_report_html_of_long_paths_fits_its_width_in_headless_chromium(built, tmp_path):
    """A 250-character file name (and an output path as long) made the page 1,968 px wide."""
    report, _ = report_and_page(built)
    long = "topic/" + "L" * 250 + ".md"
    report["output"] = "/" + "O" * 250
    report["failures"][0]["path"] = report["slowest_sources"][0]["path"] = long
    measured = measure(render_html(report), tmp_path)
    assert measured["width"] <= 1100


def test_a_runs_reports_name_the_start_its_caller_gives(built, tmp_path):
    """`run_job(began=)`: the CLI's clock, which its failed report names, is the one every report
    of the run names (the finished one derived its own from the run's total, the unfinished one
    another from the driver's counter). An unchanged run: no Ray."""
    output = tmp_path / "out"
    shutil.copytree(built, output)
    config = load_config(CONFIG, overrides={"input": str(CORPUS), "output": str(output)})
    report = run_job(config, began=1_800_000_000.0)
    assert report["topics"]["rebuilt"] == 0
    assert report["timings"]["efficiency"] is None  # no pipeline ran (it said 83 or so)
    assert report["started_at"] == utc(1_800_000_000) == "2027-01-15T08:00:00+00:00"


def test_a_run_under_changed_settings_says_so_in_its_report_summary_and_page(built, tmp_path):
    """A config change (here `prompts.threshold`) reads and rebuilds everything: the report said
    "42 changed, 0 unchanged" of an input nobody had touched, and nothing said why. The report,
    its summary and its page say the settings changed; a run under the same settings does not."""
    output = tmp_path / "out"
    shutil.copytree(built, output)
    overrides = {"input": str(CORPUS), "output": str(output)}
    changed = ["prompts.threshold=0.6"]
    report = run_job(load_config(CONFIG, overrides=overrides, settings=changed))
    assert report["settings_changed"] is True
    assert report["sources"]["unchanged"] == 0 and report["topics"]["kept"] == 0
    said = "settings: changed since the last run (a setting, the model's files, or this version's"
    assert said in summary(report)
    assert f"<th>settings</th><td><code>{escape(SETTINGS_CHANGED)}</code>" in render_html(report)
    again = run_job(load_config(CONFIG, overrides=overrides, settings=changed))
    assert again["settings_changed"] is False and "settings:" not in summary(again)
    assert not json.loads((built / "_reindex" / "report.json").read_text())["settings_changed"]


def test_a_rerun_names_the_sources_it_found_added_changed_and_deleted(built, tmp_path, capsys):
    """A re-run with an edit, a new page and a page gone said "1 changed, 1 deleted" (the new page
    counted as changed) and never which: a scheduled run read days later could not tell what it
    had dropped. The report, its summary, the page and `mdindex report` name them."""
    corpus, output = tmp_path / "docs", tmp_path / "out"
    shutil.copytree(CORPUS, corpus)
    shutil.copytree(built, output)
    (corpus / "guides" / "installation.md").write_text("# Install\n\nRun the installer.\n")
    (corpus / "guides" / "new <page>.md").write_text("# New\n\nA new page about clients.\n")
    (corpus / "reference" / "cli" / "commands.md").unlink()
    report = run_job(load_config(CONFIG, overrides={"input": str(corpus), "output": str(output)}))
    assert report["changes"] == {
        "added": {"count": 1, "first": ["guides/new <page>.md"]},
        "changed": {"count": 1, "first": ["guides/installation.md"]},
        "deleted": {"count": 1, "first": ["reference/cli/commands.md"]},
    }
    line = (
        "  changes: 1 added (guides/new <page>.md); 1 changed (guides/installation.md); "
        "1 deleted (reference/cli/commands.md)"
    )
    assert summary(report).splitlines()[2] == line
    assert mdindex(["report", str(output)]) == 0 and line in capsys.readouterr().out
    page = report_and_page(output)[1]
    assert '<th>deleted</th><td class="n">1</td><td><code>reference/cli/commands.md' in page
    assert "<code>guides/new &lt;page&gt;.md</code>" in page
    assert "th { white-space: nowrap;" in page  # a row's name beside 20 paths wrapped by letter
    # past 20 of a kind: its count, the first 20 and how many more
    report["changes"] = jobs.report.source_changes([f"p{i:02d}.md" for i in range(25)], [], {})
    assert report["changes"]["added"] == {"count": 25, "first": [f"p{i:02d}.md" for i in range(20)]}
    assert "  changes: 25 added (p00.md, p01.md, p02.md, …)" in summary(report)
    report["sources"]["seen"] = 25  # every source new: a first run's summary says nothing more
    assert "changes:" not in summary(report) and "<code>p19.md</code>" in render_html(report)
    assert "<code>p19.md</code>, and 5 more</td>" in render_html(report)
    del report["changes"]  # a report from before they were recorded
    assert "changes:" not in summary(report)
    assert "since the last run</h3>" not in render_html(report)


def test_a_run_names_the_links_of_the_index_to_pages_the_corpus_lacks(built, tmp_path, capsys):
    """A link to a page deleted, and a typo in a link, left the chunks' `target_document` empty
    and nothing said so: a nightly run's report, read days later, names them, and one to the
    deleted page in a final section `semantic` skips, of a page carried unchanged (a link to a
    listed file that is no source, qa-pairs.md, is not broken), the whole index's: a run that
    rebuilds no topic names them still (it named none), and one that puts the page back names
    the typo alone; one that deletes qa-pairs.md names the link to it too (its page's topic
    kept, the record it had was named until that topic's next rebuild). Each is named with its
    line, and
    `checks.broken_links: fail` makes them fail a run, exit 3, each on a `BROKEN path:line` line
    (a docs check in CI: they were a note, exit 0, and named no line)."""
    corpus, output = tmp_path / "docs", tmp_path / "out"
    shutil.copytree(CORPUS, corpus)
    shutil.copytree(built, output)
    (corpus / BROKEN).unlink()  # a run with no failed source: exit 0 unless its links fail it
    (corpus / "guides" / "installation.md").unlink()
    guide = corpus / "libraries" / "http-client" / "guide.md"
    guide.write_text(
        guide.read_text().replace(
            "under load.\n",
            "under load. See [install](../../guides/installation.md), [setup](../../guides/"
            "instal.md),\n[questions](../../guides/qa-pairs.md), [start](../../guides/"
            "getting-started).\n",
        )
    )
    config = load_config(CONFIG, overrides={"input": str(corpus), "output": str(output)})
    report = run_job(config)
    source = "libraries/http-client/guide.md"
    typo = {"source": source, "href": "../../guides/instal.md", "line": 7}
    # getting-started.md's "Next steps", which semantic skips, carried from the last run
    steps = {"source": "guides/getting-started.md", "href": "installation.md", "line": 14}
    assert (report["exit_code"], report["broken_links"]) == (
        0,
        {
            "count": 3,
            "first": [
                steps,
                {"source": source, "href": "../../guides/installation.md", "line": 7},
                typo,
            ],
            "check": "note",
        },
    )
    note = (
        "3 links name pages the corpus does not have: guides/getting-started.md:14 → "
        f"installation.md, {source}:7 → ../../guides/installation.md, {source}:7 → "
        "../../guides/instal.md (checks.broken_links: fail fails the run on them)"
    )
    assert f"  note:    {note}" in summary(report).splitlines()
    assert mdindex(["report", str(output)]) == 0 and note in capsys.readouterr().out
    assert f"broken links</span> {escape(note)}</p>" in report_and_page(output)[1]
    again = run_job(config)
    assert again["topics"]["rebuilt"] == 0 and again["broken_links"] == report["broken_links"]
    assert f"  note:    {note}" in summary(again).splitlines()
    shutil.copy(CORPUS / "guides" / "installation.md", corpus / "guides" / "installation.md")
    put_back = run_job(config)
    assert put_back["topics"]["rebuilt"] == 2  # guides, and http-client (`jobs.plan.links_moved`)
    assert put_back["broken_links"]["first"] == [typo]
    (corpus / "guides" / "qa-pairs.md").unlink()  # a listed file that no source is: judged again
    questions = {"source": source, "href": "../../guides/qa-pairs.md", "line": 8}
    gone = run_job(config)
    assert gone["topics"]["rebuilt"] == 1  # guides: http-client is kept, its record stale
    assert gone["broken_links"]["first"] == [typo, questions]
    capsys.readouterr()
    check = ["--set", "checks.broken_links=fail"]  # an unchanged run: no Ray
    assert main(["--config", CONFIG, "--input", str(corpus), "--output", str(output), *check]) == 3
    assert capsys.readouterr().out.splitlines()[-3:] == [
        "  links:   2 links name pages the corpus does not have (checks.broken_links: fail)",
        f"  BROKEN  {source}:7: ../../guides/instal.md",
        f"  BROKEN  {source}:8: ../../guides/qa-pairs.md",
    ]
    failed, page = report_and_page(output)
    assert (failed["status"], failed["broken_links"]["check"]) == ("sources_failed", "fail")
    assert '<span class="status bad">broken links</span> 2 links' in page
    assert mdindex(["report", str(output), "--check"]) == 3


def test_a_run_after_one_killed_before_its_report_names_it(built, tmp_path, caplog, capsys):
    """A run killed where it could not report (kill -9, out of memory) leaves its `unfinished`
    report; the next run replaced it and said nothing of it, so a scheduled pipeline's report
    read days later never showed a night whose build had died. The next run's log, report,
    summary and page name it; the run after that does not. Every run's line stays in the
    output's run history, the killed one's `unfinished`, and `mdindex report --runs` shows them
    newest first (each report replaced the night before's: a failed night left no trace). An
    unchanged run: no Ray."""
    output = tmp_path / "out"
    shutil.copytree(built, output)
    config = load_config(CONFIG, overrides={"input": str(CORPUS), "output": str(output)})
    jobs.report.write_unfinished_report(config, 1_800_000_000.0, None)  # a killed run's
    with caplog.at_level(logging.WARNING, logger="mdindex.build"):
        report = run_job(config)
    killed = {"started_at": "2027-01-15T08:00:00+00:00", "host": socket.gethostname()}
    assert report["last_run_unfinished"] == {**killed, "pid": os.getpid()}
    said = f"pid {os.getpid()} on {killed['host']}, started {killed['started_at']}, never reported"
    assert f"the last run, {said}" in caplog.text
    assert f"  before:  the run before this one, {said}" in summary(report)
    assert said in render_html(report)
    again = run_job(config)
    assert again["last_run_unfinished"] is None
    runs = stored_runs(output)
    assert [(run["status"], run["exit_code"]) for run in runs] == [
        ("sources_failed", 3),  # the built fixture's
        ("unfinished", None),  # the killed run's
        ("sources_failed", 3),
        ("sources_failed", 3),
    ]
    assert runs[1] == {**killed, "pid": os.getpid(), "finished_at": None,
                       "status": "unfinished", "exit_code": None,
                       "error": NEVER_ENDED}  # fmt: skip
    assert runs[3]["started_at"] == again["started_at"] and runs[3]["pid"] == os.getpid()
    assert runs[3]["failures"] == {"CHUNKING_FAILED": 1} and runs[3]["sources"]["failed"] == 1
    capsys.readouterr()
    assert mdindex(["report", str(output), "--runs"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0] == f"runs of {output}: 4, newest first, started in UTC (the last 100 are kept)"
    assert table[-2].startswith("2027-01-15 08:00  unfinished ")
    assert table[2].endswith("  1 CHUNKING_FAILED") and " sources_failed " in table[2]
    page = report_and_page(output)[1]
    assert (
        "Last runs</h2><p>the last 4 of 4 in _reindex/runs.jsonl, newest first, started in UTC"
        in page
    )


def test_a_run_refused_after_one_killed_keeps_the_killed_one_in_the_history(
    built, tmp_path, capsys
):
    """A run refused under the lock (an emptied input, `sources.max_deleted_fraction`: exit 2)
    replaced the `unfinished` report of a run killed before it (kill -9) with its own failed one
    and named it nowhere: the killed run's line stayed "still running, or killed" for good, and
    the next good run, which reads the refused run's report, no longer named it either. The
    refused run names it (its log, report and summary) and notes its line as found stopped;
    the next run keeps that line. An unchanged run: no Ray."""
    output = tmp_path / "out"
    shutil.copytree(built, output)
    config = load_config(CONFIG, overrides={"input": str(CORPUS), "output": str(output)})
    jobs.report.write_unfinished_report(config, 1_800_000_000.0, None)  # a killed run's
    # it names its cache, as a finished run's report does (`mdindex cache prune --output` asked
    # for --cache while a build ran, or after one failed, 2026-12-01)
    assert json.loads((output / "_reindex" / "report.json").read_text())["cache"] == config.cache
    (tmp_path / "emptied").mkdir()
    command = ["build", "--config", CONFIG, "--input", str(tmp_path / "emptied")]
    assert mdindex([*command, "--output", str(output)]) == 2
    report = json.loads((output / "_reindex" / "report.json").read_text())
    killed = {"started_at": "2027-01-15T08:00:00+00:00", "host": socket.gethostname()}
    assert report["error"].startswith("EmptyInput: input ")
    assert report["last_run_unfinished"] == {**killed, "pid": os.getpid()}
    assert report["cache"] == config.cache
    capsys.readouterr()
    assert mdindex(["report", str(output)]) == 0
    said = f"pid {os.getpid()} on {killed['host']}, started {killed['started_at']}, never reported"
    summary = capsys.readouterr().out
    assert f"\n  before:  the run before this one, {said}" in summary
    # it built nothing: the next build redoes what the killed one changed (it said
    # "this run redoes", 2026-12-01)
    assert f"{said} its end" in summary and "the next build redoes what it changed" in summary
    assert "this run redoes" not in summary
    run_job(config)  # the next good run
    runs = stored_runs(output)
    ends = [(run["status"], run["exit_code"], run.get("error", "")[:10]) for run in runs]
    found_stopped = ("unfinished", None, NEVER_ENDED[:10])  # the killed run's line
    assert ends == [("sources_failed", 3, ""), found_stopped, ("failed", 2, "EmptyInput"), ends[0]]
    assert mdindex(["report", str(output), "--runs"]) == 0
    assert capsys.readouterr().out.splitlines()[-2].endswith(f"  {NEVER_ENDED}")


def test_report_check_help_names_every_code_it_gives(capsys):
    """`mdindex report --help`, read to write a health check, left out 129 (SIGHUP) and 2 (no
    report, or a damaged one), which `--check` gives too."""
    with pytest.raises(SystemExit):
        mdindex(["report", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "129/130/143 stopped by a signal" in text and "no report, or a damaged one" in text
    assert "2 refused as bad usage once it held the lock (sources.max_deleted_fraction" in text


def test_report_check_exits_with_the_last_runs_code(built, tmp_path, capsys):
    """`mdindex report --check` for a scheduler's health check: the last run's exit code (it
    exited 0 for any report), its status's for reports before `exit_code`; 75 for a run that
    has not reported its end."""
    assert mdindex(["report", "--check", str(built)]) == 3
    assert mdindex(["report", str(built)]) == 0
    report = json.loads((built / "_reindex" / "report.json").read_text())
    (tmp_path / "_reindex").mkdir()
    for changes, code in (
        ({"status": "ok", "exit_code": 0}, 0),
        ({"status": "ok", "exit_code": None}, 0),
        ({"exit_code": None}, 3),
        ({"status": "unfinished", "exit_code": None}, 75),
        ({"status": "failed", "exit_code": True}, 1),
    ):
        (tmp_path / "_reindex" / "report.json").write_text(json.dumps({**report, **changes}))
        assert mdindex(["report", "--check", str(tmp_path)]) == code, changes
    assert mdindex(["report", "--check", str(tmp_path / "nothing")]) == 2
    capsys.readouterr()


def test_a_report_names_no_version_where_mdindex_is_not_installed(monkeypatch):
    """Run from a checkout on PYTHONPATH the package has no metadata: every report's facts (the
    unfinished report's first, before any other write) raised PackageNotFoundError, so every
    build failed, and its failed report too."""

    def not_installed(name):
        raise PackageNotFoundError(name)

    monkeypatch.setattr(jobs.report, "version", not_installed)
    facts = {"host": socket.gethostname(), "pid": os.getpid(), "mdindex_version": None}
    assert run_facts() == facts


def test_a_report_says_what_to_do_next_for_each_outcome(tmp_path, capsys):
    """A report read days later said what happened, never what to do about it: the summary, the
    page and `mdindex report` say it for each outcome but a good one."""
    failures = [
        {"path": "a.md", "code": "INVALID_FRONT_MATTER", "message": "YAML", "line": 2},
        {"path": "b.md", "code": "CHUNKING_FAILED", "message": "invalid UTF-8", "line": 6},
        {"path": "c.md", "code": "READ_FAILED", "message": "403", "line": None},
    ]
    links = {"count": 2, "first": [], "check": "fail"}
    cases = {
        "ok": None,
        "sources_failed": "fix 2 files whose content failed (CHUNKING_FAILED, "
        "INVALID_FRONT_MATTER): unchanged, they fail every build (exit 3); see to 1 other failure "
        "(READ_FAILED): every build tries it again; fix the 2 broken links or set "
        "checks.broken_links: note; all else is written",
        "failed": "its error says what went wrong: put that right and build again; the next "
        "build redoes what this one changed",
        "unfinished": "if pid 7 on vm no longer runs, build again: the next build redoes what this"
        " one changed (while it runs, another build of this output exits 75)",
    }
    for status, step in cases.items():
        report = {"status": status, "host": "vm", "pid": 7, "error": "RuntimeError: died"}
        report |= {"failures": failures, "broken_links": links} if step and "fix" in step else {}
        assert next_step(report) == step, status
        page = render_html(report)
        assert (f"<p><b>Next:</b> {escape(step)}</p>" in page) if step else "Next:" not in page
    # found by use: after a `kill -9` on S3, "build again" sent the operator to a build that
    # exited 75 until the killed build's lock expired
    on_s3 = {"status": "unfinished", "host": "vm", "pid": 7, "output": "s3://b/index"}
    assert next_step(on_s3) == (
        "if pid 7 on vm no longer runs, build again once its S3 lock has expired, 5 minutes after"
        " its last renewal at most (until then another build of this output exits 75, naming the"
        " time): the next build redoes what this one changed"
    )
    stopped = {"status": "failed", "exit_code": 143, "error": "Interrupted: stopped by SIGTERM"}
    assert next_step(stopped) == (
        "stopped by SIGTERM: build again; the next build redoes what this one changed"
    )
    (tmp_path / "_reindex").mkdir()
    (tmp_path / "_reindex" / "report.json").write_text(json.dumps(stopped))
    assert mdindex(["report", str(tmp_path)]) == 0
    assert f"\n  next:    {next_step(stopped)}\nreport: " in capsys.readouterr().out


def test_the_page_shows_every_fact_of_the_process_that_ran_the_build():
    """The page names its run facts (`report_html.RUN_FACTS`) apart from `run_facts`, which makes
    them: a fact added to one and not the other would be in report.json and not on the page."""
    facts = run_facts()
    page = render_html({"status": "failed", "error": "RuntimeError: stopped", **facts})
    for key in facts:
        assert f"<th>{key.replace('_', ' ')}</th>" in page, key


@pytest.mark.parametrize("case", ["shared stem", "invalid UTF-8"])
def test_a_path_that_stops_a_build_under_abort_is_escaped_in_its_error(
    tmp_path, capsys, ray_session, case
):
    """Under `failure_policy: abort` the failure that stops the build (a shared stem, before Ray;
    a source the chunk stage fails) named its path as it was: a newline in a file name forged a
    line of its own in the build's error line, the report's `error` and `mdindex report`'s
    summary, and a terminal escape was stripped to another name ('t/escred.md'). Escaped, as
    the FAILED lines of a build that goes on are."""
    corpus, output = tmp_path / "docs", tmp_path / "out"
    (corpus / "t").mkdir(parents=True)
    name = "\x1b[31mred\nFAILED none"
    if case == "shared stem":
        (corpus / "t" / f"{name}.md").write_text("# A\n\nText.\n")
        (corpus / "t" / f"{name}.mdx").write_text("# B\n\nOther text.\n")
    else:
        (corpus / "t" / f"{name}.md").write_bytes(b"# T\n\ncaf\xe9\n")
    argv = ["--config", CONFIG, "--input", str(corpus), "--output", str(output)]
    abort = [*argv, "--set", 'sources.globs=["*.md*"]', "--set", "failure_policy=abort"]
    assert main(abort) == 1
    error = json.loads((output / "_reindex" / "report.json").read_text())["error"]
    assert error.startswith("SourceFailed: t/\\x1b[31mred\\nFAILED none.md")
    assert mdindex(["report", str(output)]) == 0
    said = capsys.readouterr()
    assert "\nFAILED" not in said.out + said.err and "\x1b[31m" not in said.out + said.err
