"""The `mdindex report OUT` sub-command: the last run's summary from `{OUT}/_reindex/report.json`
(a local path or any fsspec URI, e.g. s3://), and where its report.html is: next to report.json
for a local output, or written to a local file (`--html`) for a remote one. `--open` opens the
page in the default browser."""

from __future__ import annotations

import argparse
import json
import sys
import webbrowser
from pathlib import Path

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
        default=DEFAULT_HTML,
        help=f"local file for a remote output's report.html (default: ./{DEFAULT_HTML})",
    )
    parser.add_argument(
        "--storage-options", type=json.loads, default=None, help="fsspec options as a JSON object"
    )
    parser.set_defaults(run=run_report)


def run_report(args: argparse.Namespace) -> int:
    """Print the summary and the page's path (0), or say that there is no report (2)."""
    from jobs.manifest import REPORT_HTML_PATH, REPORT_PATH
    from jobs.report import summary
    from jobs.report_html import render_html
    from jobs.storage import Storage

    output = Storage(args.output, args.storage_options or {})
    data = output.read_optional(REPORT_PATH)
    if data is None:
        print(f"mdindex report: no {output.uri(REPORT_PATH)}", file=sys.stderr)
        return 2
    report = json.loads(data)
    status = f"{report.get('status')} (exit code {report.get('exit_code')})"
    print(f"last run: {status}, finished {report.get('finished_at', 'at an unknown time')}")
    # a failed run's report may hold no counts, only what went wrong
    print(summary(report) if "sources" in report else f"  {report.get('error', 'no counts')}")
    if output.is_local:
        page = Path(output.uri(REPORT_HTML_PATH))
        if not page.is_file():  # a report from before report.html existed
            output.write_bytes(REPORT_HTML_PATH, render_html(report).encode())
    else:
        page = Path(args.html)
        page.write_text(render_html(report), encoding="utf-8")
    print(f"report: {page.resolve()}")
    if args.open:
        webbrowser.open(page.resolve().as_uri())
    return 0
