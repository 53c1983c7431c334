"""The `mdindex report OUT` sub-command: the last run's summary from `{OUT}/_reindex/report.json`
(a local path or any fsspec URI, e.g. s3://), and where its report.html is: next to report.json
for a local output, or written to a local file (`--html`) for a remote one. `--open` opens the
page in the default browser; `--runs` prints the output's run history instead (`jobs.runs`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import webbrowser
from pathlib import Path
from typing import TYPE_CHECKING, Any

from indexing.cli import json_object

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from jobs.storage import Storage

DEFAULT_HTML = "mdindex-report.html"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `report` sub-command to the `mdindex` parser."""
    parser = subparsers.add_parser(
        "report",
        help="print the last build's summary and show its report.html",
        description="Print the summary of the last build of OUT (local or s3://) from its "
        "_reindex/report.json. A remote output's report.html is written to a local file.",
    )
    parser.add_argument("output", metavar="OUT", help="the build's output root (path or URI)")
    parser.add_argument("--open", action="store_true", help="open report.html in a browser")
    parser.add_argument(
        "--html",
        default=None,
        help="local file to write the page to (default: a local output's own report.html, "
        f"./{DEFAULT_HTML} for a remote output's)",
    )
    parser.add_argument(
        "--runs",
        action="store_true",
        help="print the output's run history (_reindex/runs.jsonl, the last 100 runs) newest "
        "first instead of the last run's summary",
    )
    parser.add_argument(
        "--storage-options", type=json_object, default=None, help="fsspec options as a JSON object"
    )
    parser.add_argument(
        "--annotate",
        action="store_true",
        help="in a GitHub Actions job, also print the run's failed sources and broken links as "
        "annotations and append its step summary, as its build does there (for a build that ran "
        "elsewhere: on a cluster, in a container)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit with the last run's exit code (0 ok, 3 sources failed or links broken under "
        "checks.broken_links: fail, 1 failed, 129/130/143 "
        "stopped by a signal; 75 unfinished: still running, or killed where it could not report; "
        "2 refused as bad usage once it held the lock (sources.max_deleted_fraction, an emptied "
        "input, a stage no node can hold), or no report, or a damaged one)",
    )
    parser.set_defaults(run=run_report)


class DamagedReport(ValueError):
    """A report.json that is not a run report: not JSON, not UTF-8, not an object, or with fields
    of the wrong shape."""


def run_report(args: argparse.Namespace) -> int:
    """Print the summary and the page's path (0); say in one line that there is no report or that
    it is damaged (2), or why the output could not be read, the page written or the summary
    printed (1)."""
    from botocore.exceptions import BotoCoreError  # an S3 endpoint that cannot be reached

    from indexing.client import UnsuitedOptions, unusable_root
    from indexing.terminal import names_no_place, write_out
    from jobs.lock import missing_bucket
    from jobs.manifest import REPORT_PATH
    from jobs.report import error_text
    from jobs.runs import RUNS_PATH, DamagedHistory
    from jobs.storage import Storage

    if problem := unusable_root(args.output, args.storage_options or {}):  # exit 1 once read
        print(f"mdindex report: {problem}", file=sys.stderr)
        return 2
    output = Storage(args.output, args.storage_options or {})
    if args.runs and (args.open or args.html or args.check or args.annotate):
        print("mdindex report: --runs prints the run history alone, without --open, --html, "
              "--check or --annotate", file=sys.stderr)  # fmt: skip
        return 2
    try:
        if args.runs:
            return print_runs(output)
        data = read_report(output)
        if data is None:  # in a bucket that does not exist, as the build names it
            missing = f"output {output.uri()}: no such bucket" if missing_bucket(output) else ""
            print(f"mdindex report: {missing or f'no {output.uri(REPORT_PATH)}'}", file=sys.stderr)
            return 2
        report = parse_report(data)
        text, page = show(output, report, args.html)
        notes = annotations(report) if args.annotate else ""
    except DamagedReport as exc:
        print(f"mdindex report: {output.uri(REPORT_PATH)} is damaged: {exc}", file=sys.stderr)
        return 2
    except DamagedHistory as exc:
        print(f"mdindex report: {output.uri(RUNS_PATH)} is damaged: {exc}", file=sys.stderr)
        return 2
    except UnsuitedOptions as exc:  # bad usage, as options that are no JSON object are
        print(f"mdindex report: {exc}", file=sys.stderr)
        return 2
    except (OSError, BotoCoreError) as exc:
        where = f"{args.output}: " if names_no_place(exc) else ""
        print(f"mdindex report: {where}{error_text(exc)}", file=sys.stderr)
        return 1
    # A reader that stopped (`| head -1`) must not turn --check's code into 0: the print meets
    # the closed pipe at once where output is unbuffered (PYTHONUNBUFFERED=1, as under many
    # schedulers), and run_program gives 0 for a BrokenPipeError raised in the command.
    with contextlib.suppress(BrokenPipeError):
        if not write_out(f"{text}\nreport: {page.resolve()}\n{notes}", "mdindex report"):
            return 1  # standard output on a full disk
    if args.open and not webbrowser.open(page.resolve().as_uri()):
        # no browser here (a server, an SSH session): it returned False, and --open said nothing
        print("mdindex report: no browser found to open the page: open it from the path above",
              file=sys.stderr)  # fmt: skip
    return outcome_code(report) if args.check else 0


def print_runs(output: Storage) -> int:
    """Print the output's run history as a table, newest first (0); say in one line that it has
    none (2: an output built before 2026-11-30, or none); DamagedHistory where it is damaged."""
    from indexing.terminal import printable, write_out
    from jobs.runs import KEPT, RUNS_PATH, parse_runs, runs_table

    try:
        data = output.read_optional(RUNS_PATH)
    except NotADirectoryError:  # OUT a file
        data = None
    runs = parse_runs(data)
    if not runs:
        print(f"mdindex report: no run history in {output.uri(RUNS_PATH)}", file=sys.stderr)
        return 2
    # the times are UTC, as the reports write them: the table said so nowhere
    head = (
        f"runs of {output.uri()}: {len(runs)}, newest first, started in UTC "
        f"(the last {KEPT} are kept)"
    )
    text = "\n".join(printable(line) for line in [head, *runs_table(runs).splitlines()])
    with contextlib.suppress(BrokenPipeError):
        if not write_out(f"{text}\n", "mdindex report"):
            return 1
    return 0


def outcome_code(report: dict[str, Any]) -> int:
    """The exit code `--check` gives for a report: its run's own, else its status's (reports
    before `exit_code`): 0 ok, 3 sources failed, 75 unfinished (EX_TEMPFAIL, as a build that
    finds the output busy), 1 otherwise."""
    from jobs.build_cli import EXIT_BUSY, EXIT_JOB_FAILED, EXIT_OK, EXIT_SOURCES_FAILED

    code = report.get("exit_code")
    if isinstance(code, int) and not isinstance(code, bool) and 0 <= code <= 255:
        return code
    by_status = {"ok": EXIT_OK, "sources_failed": EXIT_SOURCES_FAILED, "unfinished": EXIT_BUSY}
    return by_status.get(report["status"], EXIT_JOB_FAILED)


def read_report(output: Storage) -> bytes | None:
    """The bytes of the output's report.json; None where it has none (OUT a file included);
    UnsuitedOptions where the store's client refuses a storage option (its TypeError)."""
    from indexing.client import UnsuitedOptions
    from jobs.manifest import REPORT_PATH

    try:
        return output.read_optional(REPORT_PATH)
    except NotADirectoryError:
        return None
    except TypeError as exc:  # aiobotocore's "unexpected keyword argument", at the first call
        raise UnsuitedOptions.at(output.uri(), exc) from exc


def parse_report(data: bytes) -> dict[str, Any]:
    """The run report in report.json's bytes; DamagedReport where they hold no JSON object, one
    holding a lone surrogate, or one without a `status` (every version's report has one: `{}` is
    no run's report)."""
    try:
        report = json.loads(data)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, nesting
        raise DamagedReport(str(exc) or type(exc).__name__) from exc
    if not isinstance(report, dict):
        raise DamagedReport(f"a JSON {type(report).__name__}, not an object")
    try:  # JSON's escape of a lone surrogate ("\\ud800") parses to a string no page can hold
        json.dumps(report, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DamagedReport(f"{ascii(exc.object[exc.start])} is no character") from exc
    if not isinstance(report.get("status"), str):  # every version's report has one
        raise DamagedReport("no 'status'" if "status" not in report else "'status' is no string")
    return report


def show(output: Storage, report: dict[str, Any], html: str | None) -> tuple[str, Path]:
    """The report's summary for a person, and its page: the local file `html` where given (for a
    remote output `DEFAULT_HTML` where not), else report.html next to a local output's
    report.json (written where missing: a report from before report.html existed).
    DamagedReport where a field has the wrong shape."""
    from jobs.manifest import REPORT_HTML_PATH

    text, rendered = render(report, page_runs(output))
    if html is not None or not output.is_local:  # `--html` for a local output was ignored
        page = Path(html or DEFAULT_HTML)
        page.write_text(rendered, encoding="utf-8")
        return text, page
    page = Path(output.uri(REPORT_HTML_PATH))
    if not page.is_file():
        output.write_bytes(REPORT_HTML_PATH, rendered.encode())
    return text, page


def page_runs(output: Storage) -> list[dict[str, Any]]:
    """The run history a page rendered here shows: none where the output has none or a damaged
    one (the report is what was asked for)."""
    from jobs.runs import RUNS_PATH, DamagedHistory, parse_runs

    try:
        return parse_runs(output.read_optional(RUNS_PATH))
    except (DamagedHistory, OSError):
        return []


def render(report: dict[str, Any], runs: Sequence[dict[str, Any]] = ()) -> tuple[str, str]:
    """The summary lines and the page of a report (with the output's last `runs`); DamagedReport
    where a field is missing or of the wrong type (a run's own report always renders: its fields
    are the build's)."""
    from indexing.terminal import printable
    from jobs.report import summary
    from jobs.report_html import next_step, render_html

    code = report.get("exit_code")  # not in the reports of versions before it
    code = "unknown" if code is None else code
    status = f"{report.get('status', 'unknown')} (exit code {code})"
    with well_formed():
        # a failed run's report may hold no counts, only what went wrong (and a killed run
        # before it, which it replaced: a run refused under the lock)
        counts = summary(report) if "sources" in report else uncounted(report)
        page = render_html(report, runs)
        step = next_step(report)
        after = [ran_with(report), phases(report), f"next:    {step}" if step else ""]
    started, finished = report.get("started_at"), report.get("finished_at")
    if started is not None and finished is not None:  # a finished run's (since 2026-11-29)
        when = f"started {started}, finished {finished}"
    elif started is not None:  # an unfinished run's
        when = f"started {started}"
    else:  # a failed run's, or one of a version before started_at
        when = f"finished {finished if finished is not None else 'at an unknown time'}"
    if "host" in report:  # since 2026-11-29
        pid = f", pid {report['pid']}" if report.get("pid") is not None else ","
        when += f"{pid} on {report['host']}"
    head = printable(f"last run: {status}, {when}")
    tail = "".join(f"\n  {printable(line)}" for line in after if line)
    return f"{head}\n{counts}{tail}", page


def uncounted(report: dict[str, Any]) -> str:
    """The summary of a report without counts (a failed or unfinished run's): its error and
    the killed run before it that it names, as a finished run's summary names it."""
    from jobs.report import before_lines

    return "\n".join([f"  {report.get('error', 'no counts')}", *before_lines(report)])


def ran_with(report: dict[str, Any]) -> str:
    """`ran:` the mdindex version and the model (with its keys: its weights' digest, dtype,
    device) a run used, for a report read days later (the page lists its settings); "" where the
    report names neither."""
    version = report.get("mdindex_version")
    model = report.get("model") or report.get("settings", {}).get("embedding", {}).get("model")
    keys = report.get("counters", {}).get("embed", {}).get("model_keys")
    if version is None and model is None:
        return ""
    parts = [f"mdindex {version or '(version unknown)'}"]
    if model is not None:
        parts.append(f"model {model}" + (f" ({', '.join(keys)})" if keys else ""))
    return f"ran:     {', '.join(parts)}; its settings in report.html"


def phases(report: dict[str, Any]) -> str:
    """`phases:` the driver's wall seconds per phase (report.json's `timings.wall_seconds`: the
    listing, Ray's start, the pipeline, the finish); "" for a report without them (a failed
    run's). The summary gave the total alone."""
    wall = report.get("timings", {}).get("wall_seconds", {})
    parts = [f"{key} {seconds:.1f} s" for key, seconds in wall.items() if key != "total"]
    return f"phases:  {', '.join(parts)}" if parts else ""


def annotations(report: dict[str, Any]) -> str:
    """In a GitHub Actions job, the report's workflow commands, its step summary appended
    (`jobs.annotations.github_actions`, as its build's); "" elsewhere. DamagedReport where a
    field has the wrong shape."""
    from jobs.annotations import github_actions

    with well_formed():
        return github_actions(report)


@contextlib.contextmanager
def well_formed() -> Iterator[None]:
    """Raise DamagedReport for the error a report's field missing or of the wrong type raises."""
    try:
        yield
    except KeyError as exc:
        raise DamagedReport(f"no {exc.args[0]!r}") from exc
    except (LookupError, TypeError, AttributeError, ValueError, ArithmeticError) as exc:
        raise DamagedReport(f"{type(exc).__name__}: {exc}") from exc
