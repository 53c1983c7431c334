"""The `mdindex build` sub-command (and the arguments `python -m jobs.reindex` shares)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The build arguments: a config file, URI overrides and dotted `--set` overrides."""
    parser.add_argument("--config", required=True, help="YAML config file (path or fsspec URI)")
    parser.add_argument("--input", help="corpus root URI (overrides `input`)")
    parser.add_argument("--output", help="output root URI (overrides `output`; default: in place)")
    parser.add_argument("--cache", help="embedding cache URI (default: {output}/.embedding-cache)")
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config value by dotted key, e.g. --set resources.embed.batch_size=64",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `build` sub-command to the `mdindex` parser."""
    parser = subparsers.add_parser(
        "build",
        help="build or refresh the index of a markdown corpus (Ray Data job)",
        description="Build or refresh the index of a markdown corpus. Exit codes: 0 success, "
        "1 the job failed, 2 bad usage or config, 3 some sources failed (all else written).",
    )
    add_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run a build from parsed arguments; returns the exit code."""
    from jobs.reindex import run_build

    return run_build(args)
