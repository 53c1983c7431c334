"""The output's run history (`jobs.runs`, `_reindex/runs.jsonl`): a run's line from its report,
the update rule (its unfinished line replaced, a killed run named before it kept, the last KEPT),
a damaged or foreign file replaced with one warning, and the table `mdindex report --runs` prints
and report.html shows. No Ray: the builds that write it are in test_jobs_report.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from jobs.build_cli import Interrupted
from jobs.cli import main as mdindex
from jobs.config import load_config
from jobs.report import unfinished_run, write_failed_report, write_report, write_unfinished_report
from jobs.report_html import render_html
from jobs.runs import (
    KEPT,
    NEVER_ENDED,
    RUNS_PATH,
    SHOWN,
    DamagedHistory,
    parse_runs,
    run_entry,
    runs_bytes,
    runs_table,
    updated_runs,
)
from jobs.storage import Storage
from tests.test_object_store_requests import counted  # noqa: F401 - its counting S3 server

CONFIG = str(Path(__file__).resolve().parents[1] / "configs" / "local.yaml")
WHERE = {"host": "night", "pid": 41}
MONDAY = {
    "status": "sources_failed",
    "exit_code": 3,
    "started_at": "2026-11-30T02:00:00+00:00",
    "finished_at": "2026-11-30T02:07:05+00:00",
    **WHERE,
    "sources": {"seen": 9, "changed": 3, "deleted": 1, "failed": 2},
    "changes": {"added": {"count": 1}, "changed": {"count": 2}, "deleted": {"count": 1}},
    "topics": {"rebuilt": 2, "deleted": 0},
    "chunks": {"embedded": 30, "cache_hits": 4},
    "broken_links": {"count": 1, "first": []},
    "failures": [
        {"path": "a.md", "code": "CHUNKING_FAILED", "message": "m"},
        {"path": "b.md", "code": "CHUNKING_FAILED", "message": "m"},
        {"path": "c", "code": "SYMLINK_SKIPPED", "message": "m"},
    ],
}
MONDAY_LINE = {
    "started_at": "2026-11-30T02:00:00+00:00",
    "finished_at": "2026-11-30T02:07:05+00:00",
    "status": "sources_failed",
    "exit_code": 3,
    **WHERE,
    "sources": {"seen": 9, "added": 1, "changed": 2, "deleted": 1, "failed": 2},
    "chunks": {"embedded": 30, "cache_hits": 4},
    "topics": {"rebuilt": 2, "deleted": 0},
    "broken_links": 1,
    "failures": {"CHUNKING_FAILED": 2, "SYMLINK_SKIPPED": 1},
}


def unfinished(started: str, **where) -> dict:
    return {"status": "unfinished", "exit_code": None, "started_at": started, **WHERE, **where,
            "error": "pid 41 on night, has not reported its end"}  # fmt: skip


def failed(started: str, code: int = 1, error: str = "RuntimeError: worker died") -> dict:
    return {"status": "failed", "exit_code": code, "started_at": started,
            "finished_at": started.replace(":00+", ":42+"), **WHERE, "error": error}  # fmt: skip


def test_a_runs_line_names_its_outcome_host_counts_and_failure_codes():
    assert run_entry(MONDAY) == MONDAY_LINE
    assert len(runs_bytes([MONDAY_LINE])) < 400 and runs_bytes([MONDAY_LINE]).count(b"\n") == 1
    line = run_entry(failed("2026-12-01T02:00:00+00:00"))  # a failed run's: no counts, its error
    assert line["error"] == "RuntimeError: worker died" and "sources" not in line
    assert "error" not in run_entry(unfinished("2026-12-01T02:00:00+00:00"))  # "still running"


def test_a_run_replaces_its_own_unfinished_line_and_keeps_the_last_ones():
    start = "2026-12-01T02:00:00+00:00"
    runs = updated_runs([MONDAY_LINE], unfinished(start))
    assert [run["status"] for run in runs] == ["sources_failed", "unfinished"]
    ended = updated_runs(runs, failed(start, 143, "Interrupted: stopped by SIGTERM"))
    assert ended == [MONDAY_LINE, run_entry(failed(start, 143, "Interrupted: stopped by SIGTERM"))]
    # another run on the same host with another pid, or another start, is another run; and so
    # is one of the same process begun in the same second as a run that ended (`run_job` twice)
    assert len(updated_runs(runs, {**unfinished(start), "pid": 42})) == 3
    assert len(updated_runs(ended, failed(start))) == 3
    many = [run_entry(failed(f"2026-{m:02d}-{d:02d}T02:00:00+00:00")) for m in (1, 2, 3, 4)
            for d in range(1, 29)]  # fmt: skip
    bounded = updated_runs(many, MONDAY)
    assert len(bounded) == KEPT and bounded[-1] == MONDAY_LINE and bounded[0] == many[-KEPT + 1]


def test_a_run_killed_before_the_history_is_added_from_the_report_it_left():
    """A killed run whose line is not in the history (one begun after it, or lost): the next run's
    report names it (`last_run_unfinished`), and its line goes in before that run's, once. Its
    line, there or added, then says that it stopped without a word, as that run found: read days
    later, it said "still running, or killed" (until 2026-12-01)."""
    killed = {"started_at": "2026-11-29T02:00:00+00:00", **WHERE}
    report = {**MONDAY, "last_run_unfinished": killed}
    runs = updated_runs([], report)
    assert runs == [
        {**killed, "status": "unfinished", "exit_code": None, "finished_at": None,
         "error": NEVER_ENDED},
        MONDAY_LINE,
    ]  # fmt: skip
    assert updated_runs(runs[:1], report) == runs  # already there: not twice
    its_own = run_entry(unfinished(killed["started_at"]))  # the line it wrote as it began
    assert updated_runs([its_own], report) == [{**its_own, "error": NEVER_ENDED}, MONDAY_LINE]
    assert runs_table(runs).splitlines()[2].endswith(f"  {NEVER_ENDED}")
    assert updated_runs([its_own], MONDAY)[0] == its_own  # no run named it: still running, maybe


def test_a_run_stopped_between_its_history_and_its_report_is_one_line(tmp_path):
    """A SIGTERM while a run wrote its end's report, after runs.jsonl and before report.json
    (found by use: the driver signalled at that write): its failed report added a second line,
    the run both "ok 0" and "failed 143". Its failed line replaces its ok one."""
    output = Storage(str(tmp_path))
    start = MONDAY["started_at"]
    write_report(output, unfinished(start))
    at_start = (tmp_path / "_reindex/report.json").read_bytes()
    ended = {**failed(start, 0, ""), "status": "ok"}  # its end, without counts
    write_report(output, ended)
    (tmp_path / "_reindex/report.json").write_bytes(at_start)  # its write stopped before this
    stopped = failed(start, 143, "Interrupted: stopped by SIGTERM")
    write_report(output, stopped)
    assert parse_runs((tmp_path / RUNS_PATH).read_bytes()) == [run_entry(stopped)]
    write_report(output, ended)  # a later run of the same start, pid and host: its own line
    assert len(parse_runs((tmp_path / RUNS_PATH).read_bytes())) == 2


def test_a_runs_start_reads_the_report_it_replaces_once(counted):  # noqa: F811
    """A run's start read the output's report.json twice (on S3, two GETs): for the unfinished
    run it names (`unfinished_run`: a killed run's, for the log and the report), then again to
    write its own `unfinished` report. Under the build lock nothing writes it in between: that
    write takes what was read (since 2026-11-30), and the killed run's line stays."""
    bucket, options, counter = counted
    config = load_config(
        CONFIG,
        overrides={"input": "/docs", "output": f"s3://{bucket}/start"},
        settings=[f"storage_options={json.dumps(options)}"],
    )
    output = Storage(config.output, config.storage_options)
    write_report(output, unfinished(MONDAY["started_at"]))  # what a killed run left
    counter.take()
    standing = unfinished_run(output)
    write_unfinished_report(config, 1_800_000_000.0, standing)
    assert counter.take().get("GET") == 2  # report.json, runs.jsonl: each once
    runs = parse_runs(output.read_optional(RUNS_PATH))
    assert [(run["started_at"], run["status"]) for run in runs] == [
        (MONDAY["started_at"], "unfinished"),
        ("2027-01-15T08:00:00+00:00", "unfinished"),
    ]


def test_a_run_notes_a_killed_runs_line_as_it_starts_and_names_it_if_it_fails_first(tmp_path):
    """A run that finds a killed run's `unfinished` report under the lock notes that run's line
    as found stopped at its start, however it ends (a failure or a signal after its start named
    it nowhere: its line said "still running, or killed" for good); a run that fails before its
    own start's report (refused under the lock) names it in its failed report."""
    config = load_config(CONFIG, overrides={"input": "/docs", "output": str(tmp_path)})
    output = Storage(str(tmp_path))
    write_unfinished_report(config, 1_800_000_000.0, None)  # a killed run's
    write_unfinished_report(config, 1_800_000_100.0, unfinished_run(output))
    runs = parse_runs((tmp_path / RUNS_PATH).read_bytes())
    assert [(run["status"], run.get("error")) for run in runs] == [
        ("unfinished", NEVER_ENDED),
        ("unfinished", None),
    ]
    write_failed_report(config, Interrupted("stopped by SIGTERM"), 143, 1_800_000_100.0)
    report = json.loads((tmp_path / "_reindex/report.json").read_bytes())
    assert "last_run_unfinished" not in report  # its own unfinished report it replaced
    assert parse_runs((tmp_path / RUNS_PATH).read_bytes())[0] == runs[0]
    write_unfinished_report(config, 1_800_000_200.0, None)  # killed too
    write_failed_report(config, ValueError("refused"), 2, 1_800_000_300.0)
    report = json.loads((tmp_path / "_reindex/report.json").read_bytes())
    assert report["last_run_unfinished"]["started_at"] == "2027-01-15T08:03:20+00:00"
    runs = parse_runs((tmp_path / RUNS_PATH).read_bytes())
    assert [(run["status"], run.get("error")) for run in runs[2:]] == [
        ("unfinished", NEVER_ENDED),
        ("failed", "ValueError: refused"),
    ]


FOREIGN = {
    "not-json": b'{"status": "ok"}\nnot json\n',
    "a-list": b"[1, 2]\n",
    "no-status": b'{"started_at": "2026-11-30T02:00:00+00:00"}\n',
    "not-utf8": b'{"status": "\xff"}\n',
    "csv": b"date,status\n2026-11-30,ok\n",
    "deep": b"[" * 100_000 + b"]" * 100_000,
}


@pytest.mark.parametrize("case", FOREIGN)
def test_a_damaged_or_foreign_history_is_replaced_with_one_warning(case, tmp_path, caplog):
    output = Storage(str(tmp_path))
    (tmp_path / "_reindex").mkdir()
    (tmp_path / RUNS_PATH).write_bytes(FOREIGN[case])
    with pytest.raises(DamagedHistory):
        parse_runs(FOREIGN[case])
    tuesday = failed("2026-12-01T02:00:00+00:00")
    with caplog.at_level(logging.WARNING, logger="mdindex.build"):
        write_report(output, tuesday)
    said = [r.getMessage() for r in caplog.records if r.name == "mdindex.build"]
    assert len(said) == 1 and said[0].startswith(f"the run history {tmp_path / RUNS_PATH} is")
    assert parse_runs((tmp_path / RUNS_PATH).read_bytes()) == [run_entry(tuesday)]
    assert mdindex(["report", str(tmp_path), "--runs"]) == 0


def test_a_line_of_another_shape_is_kept_and_stops_no_build(tmp_path, capsys):
    """A run's line whose sections have another shape (another version of mdindex wrote it, or a
    hand edited it): every build that rendered the history failed, exit 1, its report not
    written, and `report --runs` printed a traceback. It is kept, its figures "-"."""
    odd = [
        {"status": "ok", "sources": [1, 2]},
        {"status": "ok", "failures": ["CHUNKING_FAILED"], "chunks": 5},
        {"status": "ok", "sources": {"added": None, "deleted": 2}},
    ]
    (tmp_path / "_reindex").mkdir()
    (tmp_path / RUNS_PATH).write_bytes(runs_bytes(odd))
    tuesday = failed("2026-12-01T02:00:00+00:00")
    write_report(Storage(str(tmp_path)), tuesday)
    assert parse_runs((tmp_path / RUNS_PATH).read_bytes()) == [*odd, run_entry(tuesday)]
    capsys.readouterr()
    assert mdindex(["report", str(tmp_path), "--runs"]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]  # newest first, after the head and columns
    assert rows[0].split()[2] == "failed"
    shown = [["-", "ok", "-", "-", "-", "2", "-", "-"], *[["-", "ok", *"-" * 6]] * 2]
    assert [row.split() for row in rows[1:]] == shown  # its deletions shown where they are a figure


def test_the_history_table_is_newest_first_with_each_runs_note(tmp_path, capsys):
    runs = [
        MONDAY_LINE,
        run_entry(unfinished("2026-12-01T02:00:00+00:00")),
        run_entry(failed("2026-12-02T02:00:00+00:00", 143, "Interrupted: stopped by SIGTERM")),
    ]
    assert runs_table(runs).splitlines() == [
        "started           status          exit        time  changed  deleted  failed  embedded",
        "2026-12-02 02:00  failed           143        42 s        -        -       -         -"
        "  Interrupted: stopped by SIGTERM",
        "2026-12-01 02:00  unfinished         -           -        -        -       -         -"
        "  no end reported: still running, or killed (kill -9, out of memory)",
        "2026-11-30 02:00  sources_failed     3  7 min 05 s        3        1       2        30"
        "  2 CHUNKING_FAILED, 1 SYMLINK_SKIPPED, 1 broken link",
    ]
    (tmp_path / "_reindex").mkdir()
    assert mdindex(["report", str(tmp_path), "--runs"]) == 2  # no history
    assert capsys.readouterr().err == f"mdindex report: no run history in {tmp_path / RUNS_PATH}\n"
    (tmp_path / RUNS_PATH).write_bytes(runs_bytes(runs))
    assert mdindex(["report", str(tmp_path), "--runs"]) == 0
    out = capsys.readouterr().out.splitlines()
    # its times are UTC, which neither the table nor the page said
    assert (
        out[0] == f"runs of {tmp_path}: 3, newest first, started in UTC (the last {KEPT} are kept)"
    )
    assert out[1:] == runs_table(runs).splitlines()
    assert mdindex(["report", str(tmp_path), "--runs", "--check"]) == 2  # one or the other
    assert "--runs prints the run history alone" in capsys.readouterr().err
    (tmp_path / RUNS_PATH).write_bytes(FOREIGN["csv"])
    assert mdindex(["report", str(tmp_path), "--runs"]) == 2
    assert capsys.readouterr().err.startswith(f"mdindex report: {tmp_path / RUNS_PATH} is damaged")


def test_the_page_shows_the_last_runs_newest_first():
    runs = [run_entry(failed(f"2026-12-{d:02d}T02:00:00+00:00")) for d in range(1, 13)]
    report = failed("2026-12-13T02:00:00+00:00")  # a page that renders without counts
    page = render_html(report, [*runs, MONDAY_LINE])
    assert f"the last {SHOWN} of 13 in _reindex/runs.jsonl, newest first, started in UTC" in page
    shown = page.split("Last runs</h2>")[1].split("</table>")[0]
    assert shown.count("<tr>") == SHOWN + 1  # and the head
    assert shown.index("2026-11-30 02:00") < shown.index("2026-12-12 02:00")
    assert "2026-12-03 02:00" not in shown and "2 CHUNKING_FAILED, 1 SYMLINK_SKIPPED" in shown
    assert "Last runs" not in render_html(report)  # a page from a report alone
    assert json.loads(runs_bytes([MONDAY_LINE])) == MONDAY_LINE
