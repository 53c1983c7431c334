"""A build in GitHub Actions: its failed sources and broken links as annotations on the pull
request's diff (workflow commands after the summary) and a markdown step summary
(`jobs.annotations`; a docs team's CI printed them on summary lines of the raw log alone)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from chunking import CHUNKING_TIMEOUT, ChunkingError, chunk_source
from indexing.hal import not_an_index
from indexing.keywords import no_keywords
from indexing.questions import no_questions
from jobs.annotations import (
    checkout_prefix,
    dry_run_commands,
    failed_build,
    github_actions,
    problems,
    step_summary,
    workflow_commands,
)
from jobs.cli import main as mdindex
from jobs.reindex import main
from jobs.report_html import failure_line
from jobs.stages.topic import index_left
from tests.jobs_support import unstamped

CONFIG = str(Path(__file__).resolve().parents[1] / "configs" / "local.yaml")
FRONT = "YAML front matter at line 2: expected the node content, but found '<stream end>'"
NO_PAGE = "names a page the corpus does not have (checks.broken_links: fail)"


def report(*failures: dict, links: list[dict] = (), count: int | None = None, check="fail"):
    """A finished run's report of `failures` and broken `links` (`count` of them in all)."""
    counts = dict.fromkeys(("seen", "changed", "failed"), 2)
    return {
        "status": "sources_failed" if failures or check == "fail" else "ok",
        "exit_code": 3 if failures or check == "fail" else 0,
        "input": "/repo/docs",
        "sources": counts,
        "topics": {"seen": 1},
        "failures": list(failures),
        "broken_links": {
            "count": len(links) if count is None else count,
            "first": list(links),
            "check": check,
        },
    }


def failure(path: str, code: str = "INVALID_FRONT_MATTER", message: str = FRONT) -> dict:
    return {"path": path, "code": code, "message": message}


def link(source: str, href: str = "./instal.md", line: int | None = 5) -> dict:
    return {"source": source, "href": href, "line": line}


def test_each_failure_and_broken_link_is_an_error_on_its_file_and_line_in_the_checkout():
    """`file=` is the path from the checkout (`docs/` the input's, `--input docs`); `line=` the
    link's, or the one a failure's message names (front matter, undecodable bytes); none where
    it is unknown. A broken link under `note` is a warning."""
    run = report(
        failure("guides/c.md"),
        failure("guides/d.md", "CHUNKING_FAILED", "invalid UTF-8 at byte offset 8 (line 3): x"),
        failure("guides/e.md", "SYMLINK_SKIPPED", "links outside the input"),
        links=[link("guides/a.md"), link("guides/b.md", "../gone/", None)],
    )
    assert workflow_commands(run, "docs/") == [
        f"::error file=docs/guides/c.md,line=2,title=INVALID_FRONT_MATTER::{FRONT}",
        "::error file=docs/guides/d.md,line=3,title=CHUNKING_FAILED::invalid UTF-8 at byte "
        "offset 8 (line 3): x",
        "::error file=docs/guides/e.md,title=SYMLINK_SKIPPED::links outside the input",
        f"::error file=docs/guides/a.md,line=5,title=Broken link::./instal.md {NO_PAGE}",
        f"::error file=docs/guides/b.md,title=Broken link::../gone/ {NO_PAGE}",
    ]
    noted = report(links=[link("a.md")], check="note")
    assert workflow_commands(noted, "") == [
        "::warning file=a.md,line=5,title=Broken link::./instal.md names a page the corpus does "
        "not have (a note: checks.broken_links: fail fails the run on it)"
    ]
    assert workflow_commands(report(check="note"), "") == []


def test_a_failures_line_is_its_records_and_a_message_names_one_for_a_chunkers_code_alone():
    """report.json's `line` (since 2026-11-30) is the failure's line, null none; an older
    report's failure has the one its message names, a chunker's code's alone: another's message
    names a file whose name says `at line 3`, which is no line of it (it was annotated so)."""
    named = "cannot read /repo/docs/notes at line 3.md: [Errno 13] Permission denied"
    run = report(
        failure("a.md", "CHUNKING_FAILED", "the code fence opened at line 8 has a marker")
        | {"line": 9},
        failure("b.md") | {"line": None},
        failure("notes at line 3.md", "READ_FAILED", named),
        failure("d.md", "CHUNKING_FAILED", "binary content: NUL byte at byte offset 7 (line 4)"),
    )
    assert [(p.path, p.line, p.place) for p in problems(run)] == [
        ("a.md", 9, "a.md:9"),
        ("b.md", None, "b.md"),
        ("notes at line 3.md", None, "notes at line 3.md"),
        ("d.md", 4, "d.md:4"),
    ]
    assert workflow_commands(run, "")[2] == (
        "::error file=notes at line 3.md,title=READ_FAILED::cannot read /repo/docs/notes at line "
        "3.md: [Errno 13] Permission denied"
    )


def test_every_chunker_failure_that_knows_its_line_gives_it():
    """The chunker's own failures, as a build records them: each names the line of the source
    it is on, which the report's `line` and the annotation's `line=` then are (a change of their
    words that lost it fails here, not silently on a pull request); a budget's names none."""
    fence = "`" * 400
    sources = {
        "---\ntitle: x\nbad: [\n---\n# A\n": 3,  # YAML front matter
        '+++\ntitle = "x"\nbad = \n+++\n# A\n': 3,  # TOML, at its end
        '+++\ntitle = "x\nz\n+++\n# A\n': 2,  # TOML, its line and column
        f"---\ntitle: x\n---\n# A\n\ntext\n\n{fence}\ncode\n{fence}\n": 8,  # a fence's marker
        "# A\n\nx\n\udcff\n": 4,  # invalid UTF-8
        "# A\n\nx\n\x00\n": 4,  # binary
    }
    lines = {}
    for text, line in sources.items():
        with pytest.raises(ChunkingError) as raised:
            chunk_source(
                text.encode("utf-8", "surrogateescape"),
                strategy="structural",
                document_id="a.md",
                hard_max=200,
                soft_max=150,
                target=100,
            )
        error = raised.value
        lines[error.message] = (failure_line(failure("a.md", error.code, error.message)), line)
    assert all(found == line for found, line in lines.values()), lines
    budget = failure("a.md", CHUNKING_TIMEOUT, "chunking ran past its time budget of 5 s")
    assert failure_line(budget) is None


def test_a_persons_index_json_that_is_no_json_gives_its_line():
    """INDEX_JSON_FAILED of an index.json with a trailing comma, or not UTF-8, names its line as a
    topic's other files do, which the report's `line` and the annotation's `line=` then are (it
    had none); one that is JSON names none, even where the `id` it quotes reads "(line 7)"."""
    left = "the topic's 2 sources are not indexed"
    trailing = b'{\n  "id": "guides",\n  "title": "Guides",\n}\n'
    latin1 = '{\n  "id": "guides",\n  "title": "Caf\u00e9"\n}\n'.encode("latin-1")
    other = b'{"id": "notes (line 7)", "_embedded": {}}'
    found = [
        failure_line(index_left("guides/index.json", not_an_index(data, "guides"), left))
        for data in (trailing, latin1, other)
    ]
    assert found == [3, 3, None]


def test_an_input_outside_the_checkout_or_on_s3_names_the_place_in_the_message(tmp_path):
    """No file of the repository is there: no `file=`, the message names the path in the input
    and its line."""
    repo = tmp_path / "repo"
    (repo / "docs" / "guides").mkdir(parents=True)
    (tmp_path / "link").symlink_to(repo)
    assert checkout_prefix(str(repo / "docs" / "guides"), str(tmp_path / "link")) == "docs/guides/"
    assert checkout_prefix(str(repo), str(repo)) == ""
    assert checkout_prefix(str(tmp_path / "other"), str(repo)) is None
    assert checkout_prefix("s3://bucket/docs", str(repo)) is None
    assert workflow_commands(report(links=[link("guides/a.md")]), None) == [
        f"::error title=Broken link::guides/a.md:5: ./instal.md {NO_PAGE}"
    ]


def test_a_name_forges_no_command_and_properties_are_escaped():
    """A file name's newline is written `\\n` as the summary writes it (it started a command of
    its own); `%` is `%25`, and `:` and `,` in a property `%3A` and `%2C`, as GitHub reads them."""
    name = "a,b:c%\n::warning::forged.md"
    run = report(failure(name, message="at line 4\r\n::error::x 100%"), links=[link(name, "%\n")])
    assert workflow_commands(run, "d:1/") == [
        "::error file=d%3A1/a%2Cb%3Ac%25\\n%3A%3Awarning%3A%3Aforged.md,line=4,"
        "title=INVALID_FRONT_MATTER::at line 4\\r\\n::error::x 100%25",
        "::error file=d%3A1/a%2Cb%3Ac%25\\n%3A%3Awarning%3A%3Aforged.md,line=5,"
        f"title=Broken link::%25\\n {NO_PAGE}",
    ]


def test_ten_of_each_level_are_annotated_and_a_notice_counts_the_rest():
    """GitHub shows 10 errors a step: the first 10, then a notice of how many more, those past
    the report's first 20 broken links counted."""
    run = report(
        *(failure(f"f{i:02d}.md") for i in range(8)),
        links=[link(f"l{i:02d}.md") for i in range(20)],
        count=25,
    )
    lines = workflow_commands(run, "")
    assert [line.split(",")[0] for line in lines[:10]] == [
        *(f"::error file=f{i:02d}.md" for i in range(8)),
        "::error file=l00.md",
        "::error file=l01.md",
    ]
    assert lines[10:] == [
        "::notice title=mdindex build::23 more failed sources or broken links are not annotated "
        "(GitHub shows 10 errors and 10 warnings a step): the build's summary names them, "
        "_reindex/report.json every failure"
    ]
    assert len(problems(run)) == 28


def test_a_checked_dry_runs_problems_are_annotated_as_the_builds():
    """`mdindex build --dry-run --check` in GitHub Actions: its failures and broken links are
    the build's workflow commands, the notice naming where the rest are; elsewhere none."""
    run = report(
        *(failure(f"f{i:02d}.md") for i in range(8)),
        links=[link(f"l{i:02d}.md") for i in range(20)],
        count=25,
    )
    args = (run["failures"], [], run["broken_links"], "/repo/docs")
    assert dry_run_commands(*args, environ={}) == ""
    lines = dry_run_commands(*args, environ={"GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": "/repo"})
    built = workflow_commands(run, "docs/")
    assert lines.splitlines()[:10] == built[:10]
    assert lines.splitlines()[10:] == [
        "::notice title=mdindex build::23 more failed sources or broken links are not annotated "
        "(GitHub shows 10 errors and 10 warnings a step): the dry run's output names them"
    ]


def test_a_questions_or_keywords_file_that_yields_nothing_is_a_warning_on_the_file():
    """A report's warnings of a qa-pairs.md without a question and a keywords file without a
    keyword (`counters.index.warnings`) are warnings on those files, after the failures (they
    were said nowhere until 2026-11-30); a warning of another kind is none."""
    run = report(failure("a.md"), check="note")
    run["counters"] = {
        "index": {
            "warnings": [
                *no_questions("t/qa-pairs.md", []),
                *no_keywords("t, u/_keywords/words.md", []),
                "something else: no question found",
            ]
        }
    }
    lines = workflow_commands(run, "docs/")
    assert [line.split("::")[1] for line in lines] == [
        "error file=docs/a.md,line=2,title=INVALID_FRONT_MATTER",
        "warning file=docs/t/qa-pairs.md,title=No question",
        "warning file=docs/t%2C u/_keywords/words.md,title=No keyword",
    ]
    assert lines[1].split("::")[2].startswith("no question found: a qa-pairs.md question is")


def test_the_step_summary_is_markdown_that_shows_each_name_as_it_is():
    """The outcome, the counts and a row for each of the first 20 problems; a name's markdown
    (a link, an image, a table cell's `|`, HTML) is escaped."""
    run = report(
        failure("guides/c.md"),
        links=[link("x|[y](z)<img>.md"), *(link(f"l{i:02d}.md") for i in range(19))],
        count=21,
    )
    text = step_summary(run, "docs/").splitlines()
    assert text[:7] == [
        "### mdindex build: sources_failed (exit code 3)",
        "",
        "2 sources in 1 topic\\: 2 changed\\, 2 failed\\; 1 failure\\, 21 broken links",
        "",
        "| Where | Problem |",
        "| --- | --- |",
        "| docs\\/guides\\/c\\.md\\:2 | INVALID\\_FRONT\\_MATTER\\: YAML front matter at line 2\\: "
        "expected the node content\\, but found \\'\\<stream end\\>\\' |",
    ]
    assert text[7].startswith("| docs\\/x\\|\\[y\\]\\(z\\)\\<img\\>\\.md\\:5 | Broken link\\: ")
    assert text[8:] == [
        "| docs\\/l00\\.md\\:5 | Broken link\\: \\.\\/instal\\.md names a page the corpus does not "
        "have \\(checks\\.broken\\_links\\: fail\\) |",
        *text[9:26],
        "",
        "2 more: see the build's log and _reindex/report.json.",
    ]
    assert len(text) == 28


def test_only_in_github_actions_and_a_summary_that_cannot_be_written_is_logged(
    tmp_path, monkeypatch, caplog
):
    """Elsewhere nothing is printed or written; in Actions the step summary is appended to, the
    checkout the working directory where `GITHUB_WORKSPACE` is unset; a step summary that cannot
    be written is a warning, the annotations printed all the same."""
    run = report(links=[link("a.md")]) | {"input": str(tmp_path / "docs")}
    summary = tmp_path / "summary.md"
    summary.write_text("before\n")
    assert github_actions(run, {"GITHUB_STEP_SUMMARY": str(summary)}) == ""
    assert github_actions(run, {"GITHUB_ACTIONS": "false"}) == ""
    assert summary.read_text() == "before\n"
    monkeypatch.chdir(tmp_path)
    actions = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    line = f"::error file=docs/a.md,line=5,title=Broken link::./instal.md {NO_PAGE}\n"
    assert github_actions(run, actions) == line
    assert summary.read_text() == "before\n" + step_summary(run, "docs/")
    unwritable = {"GITHUB_STEP_SUMMARY": str(tmp_path), "GITHUB_WORKSPACE": run["input"]}
    with caplog.at_level(logging.WARNING, logger="mdindex.build"):
        assert github_actions(run, actions | unwritable) == line.replace("docs/", "")
    assert f"the step summary {tmp_path} could not be written" in caplog.text


def test_a_run_that_failed_as_a_whole_is_one_error_naming_what_went_wrong(tmp_path):
    """A build that ended without counts (exit 1, a signal's: a failed report, or none) printed
    no annotation: the pull request's check said only "exit code 1". Its error, no file."""
    failed = {"status": "failed", "exit_code": 1, "error": "OSError: disk full", "input": "/r/d"}
    said = "::error title=mdindex build::mdindex build: failed (exit code 1): OSError: disk full"
    assert workflow_commands(failed, "d/") == [said]
    assert step_summary(failed, "d/") == (
        "### mdindex build: failed (exit code 1)\n\nOSError\\: disk full\n"
    )
    unfinished = {"status": "unfinished", "exit_code": None, "error": "100% not done"}
    assert github_actions(unfinished, {"GITHUB_ACTIONS": "true"}) == (
        "::error title=mdindex build::mdindex build: unfinished (exit code unknown): 100%25 not "
        "done\n"
    )
    line = "mdindex build: the job failed: ValueError: bad\nline"
    assert failed_build(line, {}) == ""
    assert failed_build(line, {"GITHUB_ACTIONS": "true"}) == (
        "::error title=mdindex build::mdindex build: the job failed: ValueError: bad\\nline\n"
    )


def test_a_build_in_github_actions_annotates_its_failures_and_broken_links(
    tmp_path, monkeypatch, capsys
):
    """A docs PR check (`--input docs` in the checkout, `checks.broken_links: fail`): after the
    summary, an error on the file and line of the bad front matter and of the broken link, and
    the step summary appended. A topic's own files name their line too (since 2026-11-30; their
    failures had none, in the summary, report.json or the annotation): a qa-pairs.md and a
    topic-spec.md not UTF-8, a keywords table's bad row (its keyword's text reads "at line 1")."""
    repo = tmp_path / "repo"
    (repo / "docs" / "guides").mkdir(parents=True)
    (repo / "docs" / "guides" / "a.md").write_text("# A\n\nText.\n\n[install](./instal.md)\n")
    (repo / "docs" / "guides" / "c.md").write_text("---\ntitle: [\n---\n# C\n\nText.\n")
    (repo / "docs" / "guides" / "qa-pairs.md").write_bytes(b"# FAQ\n\n## Why?\n\nAs \xff.\n")
    (repo / "docs" / "guides" / "topic-spec.md").write_bytes(b"# A\n\nNot\xe9s.\n")  # cp1252
    (repo / "docs" / "_keywords").mkdir()
    (repo / "docs" / "_keywords" / "words.md").write_text(
        "# Words\n\n| keyword | score |\n|---|---|\n| text | 2 |\n| at line 1 | high |\n"
    )
    summary = tmp_path / "summary.md"
    for name, value in (
        ("GITHUB_ACTIONS", "true"),
        ("GITHUB_WORKSPACE", str(repo)),
        ("GITHUB_STEP_SUMMARY", str(summary)),
    ):
        monkeypatch.setenv(name, value)
    check = ["--set", "checks.broken_links=fail"]
    argv = ["--config", CONFIG, "--input", str(repo / "docs"), "--output", str(tmp_path / "out")]
    assert main(argv + check) == 3
    out = capsys.readouterr().out.splitlines()
    assert f"  FAILED guides/c.md:2: INVALID_FRONT_MATTER: {FRONT}" in out  # as BROKEN's
    words = (
        "keywords table row 2 (line 6): score 'high' of 'at line 1' is not a number (a finite "
        "one; an integer within 64 bits)"
    )
    questions = "invalid UTF-8 at byte offset 19 (line 5): invalid start byte"
    spec = "invalid UTF-8 at byte offset 8 (line 3): invalid continuation byte; left untouched"
    spec += ", not updated"
    assert out[-11:-7] == [
        f"  FAILED _keywords/words.md:6: KEYWORDS_FAILED: {words}",
        f"  FAILED guides/c.md:2: INVALID_FRONT_MATTER: {FRONT}",
        f"  FAILED guides/qa-pairs.md:5: QUESTIONS_FAILED: {questions}",
        f"  FAILED guides/topic-spec.md:3: TOPIC_SPEC_FAILED: {spec}",
    ]
    assert out[-6:] == [
        "  BROKEN  guides/a.md:5: ./instal.md",
        f"::error file=docs/_keywords/words.md,line=6,title=KEYWORDS_FAILED::{words}",
        f"::error file=docs/guides/c.md,line=2,title=INVALID_FRONT_MATTER::{FRONT}",
        f"::error file=docs/guides/qa-pairs.md,line=5,title=QUESTIONS_FAILED::{questions}",
        f"::error file=docs/guides/topic-spec.md,line=3,title=TOPIC_SPEC_FAILED::{spec}",
        f"::error file=docs/guides/a.md,line=5,title=Broken link::./instal.md {NO_PAGE}",
    ]
    report = json.loads((tmp_path / "out" / "_reindex" / "report.json").read_text())
    assert report["failures"] == [
        {"path": "_keywords/words.md", "code": "KEYWORDS_FAILED", "message": words, "line": 6},
        {"path": "guides/c.md", "code": "INVALID_FRONT_MATTER", "message": FRONT, "line": 2},
        {"path": "guides/qa-pairs.md", "code": "QUESTIONS_FAILED", "message": questions, "line": 5},
        {"path": "guides/topic-spec.md", "code": "TOPIC_SPEC_FAILED", "message": spec, "line": 3},
    ]
    # a later step (the build ran on a cluster, in a container): `mdindex report --annotate`
    assert mdindex(["report", str(tmp_path / "out")]) == 0
    assert "::" not in capsys.readouterr().out and summary.read_text().count("###") == 1
    assert mdindex(["report", "--annotate", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.splitlines()[-5:] == out[-5:]
    assert summary.read_text().count("### mdindex build: sources_failed (exit code 3)\n") == 2
    assert summary.read_text().startswith("### mdindex build: sources_failed (exit code 3)\n")


def test_a_build_that_fails_as_a_whole_in_github_actions_is_one_error(
    tmp_path, monkeypatch, capsys
):
    """A build that ends without a summary (its input missing, a config error: exit 2; exit 1,
    a signal's) printed its line on standard error alone: the pull request's check said "exit
    code 2" and nothing on the diff or the run's page. In Actions, one `::error` naming it."""
    argv = ["--config", CONFIG, "--input", str(tmp_path / "gone"), "--output", str(tmp_path / "o")]
    assert main(argv) == 2
    assert capsys.readouterr().out == ""
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert main(argv) == 2
    said = capsys.readouterr()
    lines = unstamped(said.err).splitlines()
    [line] = [line for line in lines if line.startswith("mdindex build: ")]
    assert said.out == f"::error title=mdindex build::{line}\n" and "gone" in line
    assert main([*argv, "--set", "resources.retries=-1"]) == 2
    assert capsys.readouterr().out.startswith(
        "::error title=mdindex build::mdindex build: config error: "
    )
