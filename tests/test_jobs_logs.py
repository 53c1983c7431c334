"""Clean logs: a healthy build prints our own lines only (jobs/logs.py says what is filtered)."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

from jobs.logs import HARMLESS_STDERR, RayDataConsoleFilter, StderrFilter, clean_logs

ROOT = Path(__file__).resolve().parents[1]
OUR_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (INFO|WARNING) ")
CORE_WORKER_LINE = (
    b"[2026-01-01 00:00:00,000 E 1 1] core_worker.cc:2465: Actor with class name: 'MapWorker' "
    b"and ID: 'ab' has constructor arguments in the object store and max_restarts > 0.\n"
)


def test_stderr_filter_drops_only_the_known_ray_line(capfd):
    with StderrFilter(HARMLESS_STDERR):
        os.write(2, b"first line\n" + CORE_WORKER_LINE + b"second ")
        os.write(2, b"line\n[... E ...] core_worker.cc:100: a real error\n")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == (
        "first line\nsecond line\n[... E ...] core_worker.cc:100: a real error\nafter\n"
    )


def _quieted(handler: logging.Handler) -> bool:
    return any(isinstance(f, RayDataConsoleFilter) for f in handler.filters)


def test_clean_logs_quiets_ray_datas_own_console_only():
    """Ray Data's console handler drops its INFO lines during a build; a handler someone else
    attached to the same logger (pytest's log capture) still sees everything."""
    import ray.data  # noqa: F401 - configures the "ray.data" logger

    logger = logging.getLogger("ray.data")
    mine = logging.StreamHandler(io.StringIO())
    logger.addHandler(mine)
    try:
        with clean_logs():
            quieted = [h for h in logger.handlers if _quieted(h)]
            logger.info("Starting execution of Dataset x")
        assert quieted and mine not in quieted
        assert not any(_quieted(h) for h in quieted)  # undone after the build
        assert "Starting execution of Dataset x" in mine.stream.getvalue()
    finally:
        logger.removeHandler(mine)


def test_a_healthy_build_prints_only_our_own_lines(tmp_path):
    """A local build of the example corpus (Ray started by the job, real MiniLM actors): stderr
    holds our log lines only, no warnings, error-level lines or progress bars from Ray or
    transformers; stdout holds the summary."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", RAY_AUTH_MODE="disabled")
    env.pop("RAY_ADDRESS", None)
    command = [sys.executable, "-m", "jobs.reindex", "--config", "configs/local.yaml"]
    command += ["--input", "examples/corpus", "--output", str(tmp_path / "out")]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert [line for line in lines if not OUR_LINE.match(line)] == []
    assert [line for line in lines if " WARNING " in line] == []
    messages = [line.split(" ", 3)[3] for line in lines]
    assert messages[0].startswith("6 sources in 4 topics")
    assert messages[1].startswith("started a local Ray instance (logs in ")
    assert sum(m.startswith("topic ") for m in messages) == 4
    assert done.stdout.startswith("mdindex build: 6 sources in 4 topics")
