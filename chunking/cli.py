"""`mdindex chunk FILE`: chunk one markdown file and print its chunks as JSON Lines.

Exit codes: 0 chunks printed; 1 they could not be written (standard output on a full disk:
ENOSPC, or failing); 2 bad usage (unknown strategy or option, unreadable file); 3 the document
failed (its error code and message go to stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

EXIT_OUTPUT_FAILED = 1
EXIT_USAGE = 2
EXIT_FAILED_DOCUMENT = 3


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `chunk` sub-command."""
    parser = subparsers.add_parser(
        "chunk",
        help="chunk one markdown file and print its chunks as JSON Lines",
        description="Chunk one markdown file; one JSON object per chunk on stdout.",
    )
    parser.add_argument("file", help="markdown file: a local path or an fsspec URI")
    parser.add_argument(
        "--strategy",
        default="semantic",
        help="a built-in strategy (semantic, the default, headers, structural, hierarchical), an "
        "installed one's name (entry point group mdindex.strategies) or package.module:Class",
    )
    parser.add_argument(
        "--set",
        dest="options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="strategy option, value read as YAML, e.g. max_tokens=500 (repeatable)",
    )
    parser.add_argument(
        "--document-id",
        help="document id used in chunk ids (default: FILE as given; a build uses the path "
        "relative to its input, so run from the input folder for the build's ids)",
    )
    parser.add_argument("--tenant-id", default="default", help="tenant id used in chunk ids")
    parser.add_argument(
        "--include-drafts",
        action="store_true",
        help="chunk a draft (front matter draft: true or published: false) as any page; by "
        "default it gives no chunks, as in a build (sources.include_drafts)",
    )
    parser.set_defaults(run=run)


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """`key=value` pairs as a dict, each value parsed as YAML (numbers and booleans typed); a
    value that is not YAML is a ValueError naming its key."""
    import yaml

    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects KEY=VALUE, got {pair!r}")
        try:
            options[key.strip()] = yaml.safe_load(value) if value else ""
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or type(exc).__name__
            raise ValueError(f"--set {key}: {value!r} is not valid YAML ({problem})") from None
    return options


def run(args: argparse.Namespace) -> int:
    """Chunk `args.file` and print JSON Lines; returns the exit code."""
    import fsspec

    from chunking import ChunkingError, chunk_source
    from chunking.strategy import get_strategy

    try:
        options = parse_options(args.options)
        # strategy options only: `--set document_id=x` is an unknown option, not a TypeError
        get_strategy(args.strategy, **options)
    except ValueError as exc:
        print(f"mdindex chunk: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with fsspec.open(args.file, "rb") as handle:
            data = handle.read()
    except IsADirectoryError:  # `mdindex chunk docs/`: a folder is the build's to index
        print(
            f"mdindex chunk: {args.file} is a folder: give one markdown file "
            "(mdindex build indexes a folder)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except Exception as exc:  # fsspec's backends raise their own: botocore's, aiohttp's
        print(f"mdindex chunk: {args.file}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        document = chunk_source(
            data,
            strategy=args.strategy,
            document_id=args.file if args.document_id is None else args.document_id,
            tenant_id=args.tenant_id,
            include_drafts=args.include_drafts,
            **options,
        )
    except ChunkingError as exc:
        print(f"{exc.code}: {args.file}: {exc.message}", file=sys.stderr)
        return EXIT_FAILED_DOCUMENT
    except ValueError as exc:
        print(f"mdindex chunk: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        for record in document.chunk_records():
            sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
        sys.stdout.flush()  # a full disk fails here, not in the interpreter's exit
    except BrokenPipeError:
        raise  # a reader that stopped early: jobs.signals.run_program ends the output quietly
    except OSError as exc:
        print(f"mdindex chunk: cannot write the chunks: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_OUTPUT_FAILED
    # nothing on stdout and exit 0 read as a command that did nothing
    if document.is_draft and not args.include_drafts:  # its front matter: the marks alone
        marks = ", ".join(f"{k}: {json.dumps(v)}" for k, v in document.front_matter.items())
        print(
            f"note: {args.file}: no chunks: a draft ({marks}), left out as a build leaves it "
            "unless sources.include_drafts is true; --include-drafts chunks it",
            file=sys.stderr,
        )
    elif not document.chunks and not document.skipped_tail_tokens:
        print(f"note: {args.file}: no chunks: the {args.strategy} strategy found no text to chunk",
              file=sys.stderr)  # fmt: skip
    if document.skipped_tail_tokens:
        print(
            f"note: {args.file}: a final chunk of {document.skipped_tail_tokens} tokens was "
            "skipped (seed 003's final-chunk rule: a short final section, or headings with no "
            "text under them; --set keep_short_tail=true keeps a short one)",
            file=sys.stderr,
        )
    return 0
