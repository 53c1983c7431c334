"""The errors whose message says all an operator needs (what failed, where, and what to do).

A build or a dry run that fails with one logs a single line and prints its message: the
traceback, 40 lines of our own and Ray's frames, adds nothing to it. Every other error keeps its
traceback, which an unexpected failure needs.
"""

from __future__ import annotations


class KnownFailure(Exception):
    """An error made by us with a complete message: logged without its traceback."""
