"""`python -m jobs.reindex`: the build job as `ray job submit` runs it (`mdindex build` arguments).

Exit codes: 0 everything succeeded; 1 the job itself failed; 2 bad usage or config;
3 some sources failed (everything else was written); 75 another build is running on the output;
130/143 stopped by SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse

from jobs.build_cli import add_arguments, run_build
from jobs.signals import run_program


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
    run_program(main)
