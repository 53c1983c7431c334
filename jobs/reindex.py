"""`python -m jobs.reindex`: the build job as `ray job submit` runs it (`mdindex build` arguments).

Exit codes: those of `mdindex build` (`jobs.build_cli`'s docstring).
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
