"""SIGTERM in the driver: an exit with the signal's number, whoever installed a handler before."""

from __future__ import annotations

import signal
import sys
import threading


def exit_on_sigterm() -> None:
    """Make SIGTERM exit with its number (`SystemExit(15)`, which `mdindex build` reports), as
    the handler `ray.init` sets does.

    Called before Ray starts, so a build stopped while it lists its input is reported like one
    stopped later, and again once `ray.init` has returned: Ray's core worker installs a C++ handler
    for SIGTERM that prints "*** SIGTERM received" and, in about 1 run of 10, aborted the driver
    (SIGABRT, no report); this puts Python's own handler back in its place. Python takes handlers
    in its main thread only (elsewhere this does nothing)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))
