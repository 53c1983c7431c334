"""A time budget for one call: past it, the call stops with CHUNKING_TIMEOUT.

The budget is an interval timer (SIGALRM), so it stops pure-Python work wherever it is; it
applies in a process's main thread (where Ray runs a task) and is not set elsewhere.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from chunking.record import CHUNKING_TIMEOUT, ChunkingError

T = TypeVar("T")
_REPEAT = 0.05  # seconds between further signals once the budget is spent
MAX_BUDGET = 365 * 86_400  # seconds; the interval timer overflows past about 1e9


class _Expired(BaseException):
    """Raised by the timer; a BaseException, so no `except Exception` on the way catches it."""


def _dropping_expired(hook: Callable) -> Callable:
    """`sys.unraisablehook` for a budgeted call: an `_Expired` raised where Python drops it (in a
    `__del__` or a gc callback) is no error to report, since the repeating timer raises it again
    where it stops the call; anything else goes to `hook`."""

    def dropping(unraisable) -> None:
        if not isinstance(unraisable.exc_value, _Expired):
            hook(unraisable)

    return dropping


def within_budget(seconds: float | None, call: Callable[[], T]) -> T:
    """`call()`, stopped with ChunkingError(CHUNKING_TIMEOUT) after `seconds` (None or 0: no
    budget; outside a main thread neither). An interval timer set before the call (a caller's
    alarm, pytest-timeout's) is set again after it with the time it had left. ValueError for
    anything else than a number of seconds from 0 to `MAX_BUDGET`: a negative one was the
    timer's "[Errno 22] Invalid argument", NaN or one past it another error of the timer's, "5"
    a TypeError."""
    if seconds is not None and (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not 0 <= seconds <= MAX_BUDGET  # False for NaN
    ):
        raise ValueError(
            f"time_budget must be a number of seconds from 0 to {MAX_BUDGET} (None or 0: no "
            f"budget), got {seconds!r}"
        )
    if not seconds or threading.current_thread() is not threading.main_thread():
        return call()
    armed = [True]

    def expire(signum: int, frame: object) -> None:
        if armed[0]:
            raise _Expired

    outer, started = signal.getitimer(signal.ITIMER_REAL), time.monotonic()  # a caller's timer
    previous = signal.signal(signal.SIGALRM, expire)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _dropping_expired(previous_hook)
    try:
        # Repeating: an exception raised where Python drops it (a gc callback) is raised again.
        signal.setitimer(signal.ITIMER_REAL, seconds, _REPEAT)
        try:
            return call()
        finally:
            # First, and inline: Python runs a pending handler at a function's entry, so a call
            # before this store could still raise (it did, under load). From here on a signal,
            # however late, does nothing.
            armed[0] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Expired:
        raise ChunkingError(
            CHUNKING_TIMEOUT, f"chunking ran past its time budget of {seconds:g} s"
        ) from None
    finally:
        armed[0] = False  # also when the signal landed before the inner `try`
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        sys.unraisablehook = previous_hook
        if outer[0]:  # the caller's timer goes on (past its time during the call: at once)
            left = max(outer[0] - (time.monotonic() - started), 1e-6)
            signal.setitimer(signal.ITIMER_REAL, left, outer[1])
