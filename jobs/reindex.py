"""`python -m jobs.reindex`: the build job as `ray job submit` runs it (`mdindex build` arguments).

Exit codes: 0 everything succeeded; 1 the job itself failed; 2 bad usage or config;
3 some sources failed (everything else was written).
"""

from __future__ import annotations

import argparse
import logging
import sys

from jobs.build_cli import add_arguments
from jobs.config import ConfigError, load_config

EXIT_OK = 0
EXIT_JOB_FAILED = 1
EXIT_USAGE = 2
EXIT_SOURCES_FAILED = 3

log = logging.getLogger("mdindex.build")


def run_build(args: argparse.Namespace) -> int:
    """Load and validate the config, run the job, print the summary; returns the exit code."""
    from jobs.pipeline import InputNotFound, run_job
    from jobs.report import summary

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        config = load_config(
            args.config,
            overrides={"input": args.input, "output": args.output, "cache": args.cache},
            settings=args.settings,
        )
    except ConfigError as exc:
        print(f"mdindex build: config error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        report = run_job(config)
    except InputNotFound as exc:
        print(f"mdindex build: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception:  # noqa: BLE001 - any failure of the job itself maps to exit code 1
        log.exception("the job failed")
        return EXIT_JOB_FAILED
    print(summary(report))
    return EXIT_SOURCES_FAILED if report["failures"] else EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Parse the command line (argparse exits 2 on bad usage) and run the build."""
    parser = argparse.ArgumentParser(
        prog="python -m jobs.reindex",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return run_build(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
