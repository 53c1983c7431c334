"""Clean logs: what jobs/logs.py filters. A healthy build's whole stderr is checked in
test_jobs_submit (a local build beside a running head), which starts its own Ray as this did."""

from __future__ import annotations

import io
import logging
import os
import sys
import time

from jobs.logs import (
    HARMLESS_STDERR,
    PROGRESS_BARS_DISABLED,
    SPILL_FOLDER_FULL,
    RayDataConsoleFilter,
    StderrFilter,
    clean_logs,
    quiet_ray_data,
)

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


def _spill_folder_line(folder: bytes, second: int) -> bytes:
    """A raylet's line as a build's stderr had it on a CI machine whose disk was 96% full."""
    return (
        b"(raylet) [2026-12-01 00:32:%02d,230 E 2760 2775] (raylet) file_system_monitor.cc:116: "
        % second
        + folder
        + b" is over 95% full, available space: 9.86274 GB; capacity: 251.972 GB. Object "
        b"creation will fail if spilling is required.\n"
    )


def test_a_nearly_full_spill_folder_is_told_once_per_folder_in_our_words(capfd, caplog):
    """The raylet repeats its line every 10 s for as long as the build runs (and under `ray job
    submit`, for each node's folder): a healthy build's stderr held Ray's unstamped errors."""
    first, second = b"/tmp/rayjob_x/ray/session_1", b"/mnt/ray/session_2"
    with caplog.at_level(logging.WARNING, logger="mdindex.build"):
        with StderrFilter(HARMLESS_STDERR, (SPILL_FOLDER_FULL,)):
            os.write(2, b"before\n" + _spill_folder_line(first, 0))
            os.write(2, _spill_folder_line(first, 10) + _spill_folder_line(second, 12))
            os.write(2, _spill_folder_line(first, 20) + b"after\n")
        deadline = time.monotonic() + 5  # told from a thread of its own
        while len(caplog.records) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert capfd.readouterr().err == "before\nafter\n"
    assert sorted(record.getMessage() for record in caplog.records) == [
        f"Ray's folder {folder.decode()} is over 95% full (9.86274 GB free of 251.972 GB): Ray "
        "cannot spill objects to it, so a build whose data outgrows Ray's object store fails; "
        "free some space, or set TMPDIR (or RAY_TMPDIR, which Ray reads first) to a folder "
        "with room"
        for folder in sorted((first, second))
    ]
    assert {record.levelname for record in caplog.records} == {"WARNING"}


def _quieted(handler: logging.Handler) -> bool:
    return any(isinstance(f, RayDataConsoleFilter) for f in handler.filters)


def test_quiet_ray_data_quiets_ray_datas_own_console_only():
    """Ray Data's console handler drops its INFO lines as it runs a build's pipeline (and the
    notice that the progress bars are off, and its announcements of a task's exception) and
    passes its warnings; a handler someone else attached to the same logger (pytest's log
    capture) still sees everything."""
    import ray.data  # noqa: F401 - configures the "ray.data" logger

    logger = logging.getLogger("ray.data")
    mine = logging.StreamHandler(io.StringIO())
    logger.addHandler(mine)

    def passed(handler: logging.Handler, level: int, message: str) -> bool:
        return bool(handler.filter(logger.makeRecord("ray.data", level, "x", 1, message, (), None)))

    try:
        with quiet_ray_data():
            quieted = [h for h in logger.handlers if _quieted(h)]
            logger.info("Starting execution of Dataset x")
            for handler in quieted:
                assert not passed(handler, logging.INFO, "Starting execution of Dataset x")
                assert passed(handler, logging.WARNING, "A task failed")
                assert not passed(handler, logging.WARNING, f"{PROGRESS_BARS_DISABLED} by config")
                # a task's exception: the build names it (`failure_policy: abort` printed Ray's
                # advice to set DataContext.max_errored_blocks above its own one line)
                for announced in (
                    'An exception was raised from a task of operator "MapBatches(x)". Dataset '
                    "execution will now abort. To ignore this exception and continue, set "
                    "DataContext.max_errored_blocks.",
                    "Exception occurred in user code, with the abbreviated stack trace below.",
                ):
                    assert not passed(handler, logging.ERROR, announced)
                assert passed(handler, logging.ERROR, "Operator x failed")
        assert quieted and mine not in quieted
        assert not any(_quieted(h) for h in quieted)  # undone after the build
        assert "Starting execution of Dataset x" in mine.stream.getvalue()
    finally:
        logger.removeHandler(mine)


def test_ray_datas_warnings_of_stage_bounds_and_remote_args_are_dropped_as_its_pipeline_runs():
    """`--set resources.embed.actors=2` (README's example) on a corpus of one batch printed Ray
    Data's UserWarning "The minimum number of concurrent actors for 'MapBatches(EmbedActor)' is
    set to 2, but the operator only received 1 input(s)" with its `warnings.warn(` line; other
    UserWarnings pass. Its deprecation of `ray_remote_args` goes too, though `import ray` (done
    here) puts its own filter for it first: set before, in a run that imported Ray later, the
    filter was passed over (`test_jobs_submit` saw the lines)."""
    import warnings

    from ray.util.annotations import RayDeprecationWarning

    embed = (
        "The minimum number of concurrent actors for 'MapBatches(EmbedActor)' is set to 2, but "
        "the operator only received 1 input(s)."
    )
    store = "The maximum number of concurrent tasks for 'MapBatches(store_entries)' is set to 2"
    deprecated = "`ray_remote_args` is deprecated and will be removed in Ray 2.64."
    with warnings.catch_warnings(record=True) as shown:
        with quiet_ray_data():
            for message in (embed, store, "another warning"):
                warnings.warn(message, UserWarning, stacklevel=1)
            warnings.warn(deprecated, RayDeprecationWarning, stacklevel=1)
    assert [str(w.message) for w in shown] == ["another warning"]


def test_stderr_filter_ends_at_once_after_a_line_without_its_newline(capfd):
    """A progress bar's last refresh ends in "\\r", not "\\n": the end marker was written onto
    that line, never matched, leaked to stderr, and the exit waited its whole 5 s timeout."""
    started = time.monotonic()
    with StderrFilter(HARMLESS_STDERR):
        os.write(2, b"first line\nprogress 50%\r")
    took = time.monotonic() - started
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "first line\nprogress 50%\rafter\n"
    assert took < 2


def test_worker_lines_come_without_colour_codes_outside_a_terminal(monkeypatch, capsys):
    """A worker's line forwarded by Ray (printed by Ray's own `print_worker_logs`) had its
    "(pid=…)" prefix in colour escape codes in a log file; during a build outside a terminal it
    comes plain, and a person's own RAY_COLOR_PREFIX is left as it is. So do the lines of a local
    Ray's shutdown at the program's end, after the build ("(pid=gcs_server) … Failed to kill
    actor" after `failure_policy: abort` came in cyan)."""
    from ray._private.worker import print_worker_logs

    line = {"pid": 4242, "ip": "10.0.0.1", "localhost": "10.0.0.1", "lines": ["a worker line"]}
    monkeypatch.delenv("RAY_COLOR_PREFIX", raising=False)
    with clean_logs():  # pytest's stderr is no terminal
        print_worker_logs(line, sys.stderr)
    assert capsys.readouterr().err == "(pid=4242) a worker line\n"
    shutdown = {"pid": "gcs_server", "lines": ["Failed to kill actor 0a, status: RpcError"]}
    print_worker_logs(shutdown, sys.stderr)
    assert capsys.readouterr().err == "(pid=gcs_server) Failed to kill actor 0a, status: RpcError\n"
    monkeypatch.setenv("RAY_COLOR_PREFIX", "1")
    with clean_logs():
        print_worker_logs(line, sys.stderr)
    assert "\x1b[" in capsys.readouterr().err and os.environ["RAY_COLOR_PREFIX"] == "1"


TERMINAL_CHILD = """
import os, sys, time
from jobs.logs import clean_logs
from jobs.progress import interactive
print(interactive(), flush=True)
with clean_logs():
    print(interactive(), flush=True)  # what configure_progress asks during the build
    os.write(2, b"first line\\n\\rprogress 50%\\rprogress 60%")
    time.sleep(4)
"""


def test_a_build_in_a_terminal_shows_its_progress_bars_as_they_refresh():
    """In a terminal the build's progress bars were never drawn: the filter had put a pipe on
    descriptor 2, so `interactive()` asked during the build said no terminal; and a bar's "\\r"
    refreshes came out only at the next newline. Both now reach the terminal as they come."""
    import pty
    import select
    import subprocess

    master, slave = pty.openpty()
    child = subprocess.Popen(
        [sys.executable, "-c", TERMINAL_CHILD], stdout=subprocess.PIPE, stderr=slave, text=True
    )
    os.close(slave)
    try:
        assert [child.stdout.readline().strip() for _ in range(2)] == ["True", "True"]
        seen, deadline = b"", time.monotonic() + 3  # the child holds its bar for 4 s
        while b"progress 50%" not in seen and time.monotonic() < deadline:
            if select.select([master], [], [], 0.1)[0]:
                seen += os.read(master, 1024)
        assert b"first line" in seen and b"progress 50%" in seen
    finally:
        child.kill()
        child.wait()
        os.close(master)


def test_ray_datas_stack_of_a_memory_kill_is_left_to_the_builds_one_line():
    """A task or actor that Ray's memory monitor killed: Ray Data logged it as an error of its own
    ("please open an issue") with its stack, 100 lines above the build's one line naming the
    kill (`MemoryKilled`, found by use, helper 106). Any other error of Ray's keeps them."""
    from ray.exceptions import OutOfMemoryError

    console = RayDataConsoleFilter()

    def passed(message: str) -> bool:
        record = logging.getLogger("ray.data").makeRecord(
            "ray.data", logging.ERROR, "x", 1, message, (), None
        )
        return bool(console.filter(record))

    internal = "Exception occurred in Ray Data or Ray Core internal code. If you continue to see"
    for error, shown in ((OutOfMemoryError("1 worker(s) were killed"), False), (KeyError(), True)):
        try:
            raise error
        except (OutOfMemoryError, KeyError):  # as Ray Data logs them: in its handler
            assert (passed(internal), passed("Full stack trace:")) == (shown, shown)


def test_build_log_lines_are_stamped_in_utc_whatever_the_machines_zone(monkeypatch):
    """A build's log line says when in UTC, as ISO 8601 with its zone, as its report does: it was
    the machine's local time with no zone (`2026-11-30 17:40:01,123`), which a log read days later
    on another machine, or beside a cluster's, could not place."""
    from jobs.build_cli import log_handler

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        record = logging.LogRecord("mdindex.build", logging.INFO, __file__, 1, "built", None, None)
        record.created, record.msecs = 86_400.25, 250.0  # 1970-01-02 00:00:00.250 UTC
        line = log_handler().format(record)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert line == "1970-01-02T00:00:00.250Z INFO built"
