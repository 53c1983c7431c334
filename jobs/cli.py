"""The `mdindex` command line: one sub-command per library, each registered by its own module."""

from __future__ import annotations

import argparse

from jobs.signals import run_program


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every sub-command registered."""
    from chunking import cli as chunking_cli
    from indexing import cli as indexing_cli
    from jobs import build_cli, cache_cli, report_cli

    parser = argparse.ArgumentParser(
        prog="mdindex", description="Build and query a static retrieval index of markdown docs."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (chunking_cli, build_cli, report_cli, cache_cli, indexing_cli):
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the `mdindex` command line `argv` (default: the process's); returns its exit code."""
    args = build_parser().parse_args(argv)
    return int(args.run(args) or 0)


def run() -> None:
    """Entry point of the `mdindex` console script: `main`, then the process's exit with its code
    (`jobs.signals.run_program`: a reader that stops early ends the output quietly)."""
    run_program(main)


if __name__ == "__main__":
    run()
