"""A build's failures and broken links as GitHub Actions shows them: an annotation on the pull
request's diff for each (`::error file=docs/a.md,line=3,title=Broken link::…`, workflow commands
printed after the summary) and a short markdown summary appended to `$GITHUB_STEP_SUMMARY`.

Only where `GITHUB_ACTIONS=true` (the runner sets it): the same build elsewhere prints its summary
alone. `file=` is the path from the repository checkout (`$GITHUB_WORKSPACE`, else the working
directory) to the source: the input folder's path from there, then the source's path in the input
(`--input docs`: `docs/guides/a.md`). An input outside the checkout, or not on the local disk (an
`s3://` or `https://` corpus), gives annotations without `file=`, their message naming the
source's path in the input and its line. GitHub shows the first 10 errors and 10 warnings of a
step: the first 10 of each are annotated, and one notice says how many more were not.

Every text is written as the summary writes it (`indexing.terminal.printable`: a name's newline
is `\\n`, so it cannot start a workflow command of its own), then escaped as GitHub reads it:
`%` as `%25` everywhere, and `:` and `,` as `%3A` and `%2C` in a property.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from indexing.terminal import counted, printable
from jobs.report_html import (
    FAIL_ON_BROKEN,
    empty_file_warnings,
    failing_links,
    failure_line,
    place,
)

log = logging.getLogger("mdindex.build")
SHOWN = 10  # annotations of one level GitHub shows a step (errors and warnings apart)
LISTED = 20  # rows of the step summary
_MARKDOWN = re.compile(r"([!-/:-@\[-`{-~])")  # ASCII punctuation: CommonMark escapes each
# A warning of `indexing.no_questions` or `no_keywords`: the file's path, then what was not found
_EMPTY_FILE = re.compile(
    r"(?P<path>.+): (?P<message>no (?P<what>question|keyword) found: .*)", re.DOTALL
)


@dataclass(frozen=True)
class Problem:
    """A failed source or a broken link: its level (`error`, or `warning` for a broken link
    that does not fail the run), path in the input, line (None: unknown), title and message."""

    level: str
    path: str
    line: int | None
    title: str
    message: str

    @property
    def place(self) -> str:
        """`guides/a.md:3`, the path alone where the line is unknown (`report_html.place`)."""
        return place(self.path, self.line)


def in_actions(environ: Mapping[str, str]) -> bool:
    """Whether the build runs in a GitHub Actions job (the runner sets `GITHUB_ACTIONS=true`)."""
    return environ.get("GITHUB_ACTIONS") == "true"


def checkout_prefix(source: str, workspace: str) -> str | None:
    """The path from the checkout `workspace` to the input folder `source` (a report's `input`),
    ending in `/` (`docs/`; `""` for the checkout itself); None for an input outside the checkout
    or not a local path (`s3://b/docs`), whose paths no file of the repository has."""
    if not os.path.isabs(source):
        return None
    relative = os.path.relpath(os.path.realpath(source), os.path.realpath(workspace))
    if relative == ".." or relative.startswith("../"):
        return None
    return "" if relative == "." else f"{relative}/"


def problems(report: dict[str, Any]) -> list[Problem]:
    """The report's failures (in its order: by path), its qa-pairs.md and keywords files that
    yield nothing (`report_html.empty_file_warnings`), then the broken links it names (by path,
    then place): errors, but those files and broken links that do not fail the run
    (`checks.broken_links: note`) warnings."""
    found = [
        Problem("error", f["path"], failure_line(f), f["code"], f["message"])
        for f in report.get("failures", [])
    ]
    for warning in empty_file_warnings(report):
        if named := _EMPTY_FILE.fullmatch(warning):
            title = f"No {named['what']}"
            found.append(Problem("warning", named["path"], None, title, named["message"]))
    fails = failing_links(report)
    because = f"({FAIL_ON_BROKEN})" if fails else f"(a note: {FAIL_ON_BROKEN} fails the run on it)"
    for link in (report.get("broken_links") or {}).get("first", []):
        message = f"{link['href']} names a page the corpus does not have {because}"
        level = "error" if fails else "warning"
        found.append(Problem(level, link["source"], link.get("line"), "Broken link", message))
    return found


def left_out(report: dict[str, Any]) -> int:
    """How many failures and broken links the report counts past those `problems` gives (a report
    names its first 20 broken links)."""
    broken = report.get("broken_links") or {}
    return broken.get("count", 0) - len(broken.get("first", []))


def workflow_commands(report: dict[str, Any], prefix: str | None) -> list[str]:
    """A workflow command for each of the first SHOWN problems of each level, `file=` the
    source's path after `prefix` (`checkout_prefix`; None: no `file=`, the message names the
    place), and a notice of how many more there are. A report without counts (a run that failed
    as a whole, exit 1, or did not finish): one error naming its outcome and what went wrong."""
    if "sources" not in report:
        return [_failed(f"mdindex build: {_outcome(report)}: {report.get('error', 'no counts')}")]
    where = "the build's summary names them, _reindex/report.json every failure"
    return _commands(problems(report), left_out(report), prefix, where)


def dry_run_commands(
    failures: list[dict[str, str]],
    warnings: list[str],
    broken_links: dict[str, Any],
    source: str,
    environ: Mapping[str, str] = os.environ,
) -> str:
    """In a GitHub Actions job (`in_actions`), the workflow commands of a checked dry run
    (`mdindex build --dry-run --check`, `jobs.dry_run`): its `failures` (path, code, message),
    `warnings` (`indexing.no_questions`, `no_keywords`) and `broken_links`
    (`BrokenLinks.to_dict`) of the input `source` (its URI), annotated as the build's report of
    them would be (`workflow_commands`), one a line; "" elsewhere. Until 2026-11-30 it printed
    none: a pull request's check named no line of the diff."""
    if not in_actions(environ):
        return ""
    found = {
        "failures": failures,
        "broken_links": broken_links,
        "counters": {"index": {"warnings": warnings}},
    }
    prefix = checkout_prefix(source, environ.get("GITHUB_WORKSPACE") or os.getcwd())
    where = "the dry run's output names them"
    lines = _commands(problems(found), left_out(found), prefix, where)
    return "".join(f"{line}\n" for line in lines)


def _commands(found: list[Problem], left: int, prefix: str | None, where: str) -> list[str]:
    """The workflow commands of `found` (`workflow_commands`), and a notice of the rest and the
    `left` more that `found` leaves out, saying `where` they are named."""
    lines, shown = [], dict.fromkeys(("error", "warning"), 0)
    for problem in found:
        if shown[problem.level] == SHOWN:
            continue
        shown[problem.level] += 1
        if prefix is None:
            properties, message = {}, f"{problem.place}: {problem.message}"
        else:
            properties, message = {"file": prefix + problem.path}, problem.message
            if problem.line is not None:
                properties["line"] = str(problem.line)
        properties["title"] = problem.title
        named = ",".join(f"{key}={_property(value)}" for key, value in properties.items())
        lines.append(f"::{problem.level} {named}::{_data(message)}")
    if more := len(found) - sum(shown.values()) + left:
        lines.append(
            f"::notice title=mdindex build::{more} more failed sources or broken links are not "
            f"annotated (GitHub shows {SHOWN} errors and {SHOWN} warnings a step): {where}"
        )
    return lines


def step_summary(report: dict[str, Any], prefix: str | None) -> str:
    """The markdown the build appends to the job's summary page: its outcome and counts, and a
    table of the first LISTED failures and broken links, each where it is (its path from the
    checkout where `prefix` is known), and how many more; a report without counts, what went
    wrong."""
    heading = f"### mdindex build: {_outcome(report)}"
    if "sources" not in report:
        return f"{heading}\n\n{_markdown(report.get('error', 'no counts'))}\n"
    sources, topics = report["sources"], report["topics"]
    text = [
        heading,
        "",
        _markdown(
            f"{counted(sources['seen'], 'source')} in {counted(topics['seen'], 'topic')}: "
            f"{sources['changed']} changed, "
            f"{sources['failed']} failed; {counted(len(report.get('failures', [])), 'failure')}, "
            f"{counted((report.get('broken_links') or {}).get('count', 0), 'broken link')}"
        ),
    ]
    found = problems(report)
    if found:
        text += ["", "| Where | Problem |", "| --- | --- |"]
        text += [
            f"| {_markdown((prefix or '') + problem.place)} "
            f"| {_markdown(f'{problem.title}: {problem.message}')} |"
            for problem in found[:LISTED]
        ]
    if more := len(found[LISTED:]) + left_out(report):
        text += ["", f"{more} more: see the build's log and _reindex/report.json."]
    return "\n".join(text) + "\n"


def github_actions(report: dict[str, Any], environ: Mapping[str, str] = os.environ) -> str:
    """In a GitHub Actions job (`in_actions`): append `step_summary` to `$GITHUB_STEP_SUMMARY`
    where it is set (a file that cannot be written is logged; the build's outcome stands), and
    return the `workflow_commands` to print after the build's summary, one a line; "" elsewhere."""
    if not in_actions(environ):
        return ""
    workspace = environ.get("GITHUB_WORKSPACE") or os.getcwd()
    prefix = checkout_prefix(report.get("input") or "", workspace)
    if path := environ.get("GITHUB_STEP_SUMMARY"):
        try:
            with open(path, "a", encoding="utf-8") as summary:
                summary.write(step_summary(report, prefix))
        except OSError as exc:
            log.warning("the step summary %s could not be written: %s", printable(path), exc)
    return "".join(f"{line}\n" for line in workflow_commands(report, prefix))


def failed_build(message: str, environ: Mapping[str, str] = os.environ) -> str:
    """In a GitHub Actions job (`in_actions`), the workflow command of a build that ended without
    a summary (exit 1 or 2, a signal's): one error whose message is the line the build printed
    (`mdindex build: the job failed: …`), as a line; "" elsewhere."""
    return f"{_failed(message)}\n" if in_actions(environ) else ""


def _failed(message: str) -> str:
    """The error a run that failed as a whole is: no file, no line."""
    return f"::error title=mdindex build::{_data(message)}"


def _outcome(report: dict[str, Any]) -> str:
    """`sources_failed (exit code 3)`: a report's status and code (unknown in a report before
    `exit_code`, or an unfinished run's)."""
    code = report.get("exit_code")
    return f"{report['status']} (exit code {'unknown' if code is None else code})"


def _data(text: str) -> str:
    """`text` as a workflow command's message: printable, `%` escaped."""
    return printable(text).replace("%", "%25")


def _property(text: str) -> str:
    """`text` as a workflow command's property: `_data`, `:` and `,` escaped too."""
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def _markdown(text: str) -> str:
    """`text` printable, each ASCII punctuation mark backslash-escaped: markdown shows it as it
    is (a file name makes no link, image, table cell or HTML of the summary page)."""
    return _MARKDOWN.sub(r"\\\1", printable(text))
