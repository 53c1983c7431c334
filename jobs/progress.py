"""Progress output: Ray Data's progress bars in a terminal, periodic log lines elsewhere
(under `ray job submit` bars would spam the job log)."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable

log = logging.getLogger("mdindex.build")


def interactive() -> bool:
    """True in a terminal outside a Ray job: progress bars are worth drawing."""
    return "RAY_JOB_ID" not in os.environ and sys.stderr.isatty()


def configure_progress() -> None:
    """Turn Ray Data's progress bars on or off for this driver."""
    from ray.data import DataContext

    DataContext.get_current().enable_progress_bars = interactive()


class Heartbeat:
    """A daemon thread that logs `status()` every `interval` seconds until stopped."""

    def __init__(self, status: Callable[[], str], interval: float = 30.0):
        self._status = status
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mdindex-heartbeat", daemon=True)
        self._started = time.monotonic()

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            log.info("running for %.0f s: %s", time.monotonic() - self._started, self._status())
