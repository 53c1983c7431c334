"""Signals at a run's edges (`jobs.signals`): one that comes while the run's end is written waits
for it, and the run exits with its own code, one line in its history; one whose handler's exit
Python ignored (raised in a hook, as in `ray.init`'s fork hooks) still stops the build. No Ray: an
empty corpus builds without it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from environment_support import own_ray_environment, paused_program

from jobs.runs import RUNS_PATH, parse_runs
from jobs.signals import Stopped, callers_handler, exit_on_sigterm, stops_not_lost

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "local.yaml")

# `mdindex build ...` whose driver sends itself SIGTERM once its run's report is in place, just
# before the build is told so (`reported`, which makes a signal exit at once with the run's code).
SIGNAL_WHEN_REPORTED = """
import os, signal, sys
import jobs.build_cli as cli
from jobs.cli import run

told = cli.exit_at_once_on_sigterm

def reported(code):
    cli.exit_at_once_on_sigterm = told
    os.kill(os.getpid(), signal.SIGTERM)
    told(code)

cli.exit_at_once_on_sigterm = reported
sys.argv = ["mdindex", *sys.argv[1:]]
run()
"""


@pytest.mark.parametrize("when", ["reported", "writing"])
def test_a_sigterm_at_the_runs_end_leaves_its_report_and_one_line(tmp_path, when):
    """A SIGTERM once the run's report was in place, before the build was told so (`reported`),
    stopped a run that had finished: its failed report was a second line in the history ("ok 0",
    then "failed 143"), and report.json and the exit code said 143. One that came while the
    end's report was written (runs.jsonl written, report.json not: `writing`) left one line, but
    "failed 143" for a run that had finished. Now the signal waits for the report and the
    lock's release, and the run exits with its own code (found by use, helper 100)."""
    docs, output = tmp_path / "docs", tmp_path / "out"
    docs.mkdir()
    build = ["build", "--config", CONFIG, "--input", str(docs), "--output", str(output)]
    if when == "reported":
        done = subprocess.run(
            [sys.executable, "-c", SIGNAL_WHEN_REPORTED, *build],
            cwd=ROOT, env=own_ray_environment(), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        code, rest = done.returncode, done.stderr
    else:  # paused before the end's report.json takes its name (the first is the unfinished one)
        driver = paused_program(output, "pause", 2, [sys.executable, "-m", "jobs.cli", *build])
        driver.send_signal(signal.SIGTERM)
        Path(f"{output}.go").touch()
        code, rest = driver.wait(timeout=60), driver.stderr.read()
    assert code == 0, rest[-3000:]
    report = json.loads((output / "_reindex" / "report.json").read_text())
    assert (report["status"], report["exit_code"]) == ("ok", 0)
    runs = parse_runs((output / RUNS_PATH).read_bytes())
    assert [(run["status"], run["exit_code"]) for run in runs] == [("ok", 0)]
    assert (output / "_reindex" / "build.lock").read_bytes() == b""  # released, then the exit


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_sigterm_whose_exit_python_ignored_still_stops_the_build():
    """`ray.init` puts its own SIGTERM handler (`sys.exit(15)`) in place and starts Ray's
    processes: a SIGTERM taken while Python ran its fork hooks raised there, where Python ignores
    what is raised ("Exception ignored in: <function _releaseLock>"), and the build went on to
    report "ok", exit 0 (found by use: 1 SIGTERM in about 10 sent during Ray's start). Around
    `ray.init` the signal stops the build at the block's end. Here the hook is a `__del__`."""

    class Hook:
        def __del__(self) -> None:
            signal.raise_signal(signal.SIGTERM)  # its handler's `Stopped` is ignored in here

    went_on = False
    with callers_handler():
        exit_on_sigterm()
        with pytest.raises(Stopped) as stopped:
            with stops_not_lost():
                Hook()
                went_on = True
    assert went_on and stopped.value.code == signal.SIGTERM


# `mdindex ARGS` whose interpreter's teardown crashes (SIGSEGV in an atexit hook), as that of a
# build cut short now and then did: Ray's shutdown at exit, with Ray Data's executor, the
# embedding pool and torch's and tokenizers' threads still alive.
CRASHING_TEARDOWN = """
import atexit, os, signal, sys
# Python's own handler, as a terminal's Ctrl-C finds it (a parent may pass on SIGINT ignored)
signal.signal(signal.SIGINT, signal.default_int_handler)
from jobs.cli import run
atexit.register(os.kill, os.getpid(), signal.SIGSEGV)
sys.argv = ["mdindex", *sys.argv[1:]]
run()
"""


def test_a_build_stopped_by_ctrl_c_exits_130_whatever_the_teardown_does(tmp_path):
    """A build of 200 pages stopped by Ctrl-C, its report "failed" with 130 and its lock
    released, now and then ended with SIGSEGV (-11; 1 in 13) or a silent exit 1 (3 in 42), found
    by use (helpers 102, 104): the interpreter's teardown of a build cut short, where Python
    touched Ray's core worker after its shutdown. A program stopped by a signal now ends at once
    after its report, its lines flushed, as a SIGTERM after the report does. Here the build is
    stopped while it writes its `unfinished` report (no Ray), and the teardown always crashes."""
    docs, output = tmp_path / "docs", tmp_path / "out"
    docs.mkdir()
    build = ["build", "--config", CONFIG, "--input", str(docs), "--output", str(output)]
    driver = paused_program(output, "pause", 1, [sys.executable, "-c", CRASHING_TEARDOWN, *build])
    driver.send_signal(signal.SIGINT)
    code, rest = driver.wait(timeout=60), driver.stderr.read()
    assert code == 130, rest[-3000:]
    assert rest.endswith("mdindex build: stopped by SIGINT; a re-run converges\n")
    report = json.loads((output / "_reindex" / "report.json").read_text())
    assert (report["status"], report["exit_code"]) == ("failed", 130)
    assert (output / "_reindex" / "build.lock").read_bytes() == b""  # released, then the exit


# A program that prints its summary (no newline: nothing flushed it yet) and ends with `code`;
# its teardown prints "teardown".
PROGRAM_ENDING = """
import atexit, sys
from jobs.signals import run_program
atexit.register(print, "teardown")

def main():
    print("summary", end="")
    return int(sys.argv[1])

run_program(main)
"""


@pytest.mark.parametrize(
    ("code", "out"), [(143, "summary"), (129, "summary"), (3, "summaryteardown\n")]
)
def test_only_a_program_stopped_by_a_signal_ends_without_the_teardown(code, out):
    """A stopped program's lines are flushed before it ends at once; one that finished (here 3)
    ends as Python ends a program, its atexit hooks run (Ray's shutdown of a local instance)."""
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM_ENDING, str(code)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout, done.stderr) == (code, out, "")


class CtrlCAsItIsSet:
    """A class attribute whose `__set_name__` takes Ctrl-C: a dataclass's field as a module of
    the build is imported."""

    def __set_name__(self, owner, name):
        signal.raise_signal(signal.SIGINT)


# A program whose command takes Ctrl-C as a class is made (a module imported in its first seconds).
CTRL_C_AS_A_CLASS_IS_MADE = """
import signal
from jobs.signals import run_program
from test_jobs_signals import CtrlCAsItIsSet

def main():
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal's Ctrl-C finds it

    class Draft:
        extras = CtrlCAsItIsSet()

    return 0

run_program(main)
"""


def test_ctrl_c_as_a_class_is_made_exits_130_quietly():
    """Python 3.11 gives an error raised in `__set_name__` as a `RuntimeError` ("Error calling
    __set_name__ on 'Field' instance 'extras' in 'Draft'"): a Ctrl-C 3 s into a build, as its
    config loaded `chunking.strategy`, exited 1 with a 40-line traceback (found by use, helper
    104). A build stopped that way after its `unfinished` report says SIGINT too (`ending`)."""
    from jobs.build_cli import ending

    program = [sys.executable, "-c", CTRL_C_AS_A_CLASS_IS_MADE]
    tests = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}  # this module, for its class
    done = subprocess.run(program, cwd=ROOT, env=tests, capture_output=True, timeout=60)
    assert (done.returncode, done.stderr) == (130, b"")
    with callers_handler():
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with pytest.raises((RuntimeError, KeyboardInterrupt)) as caught:  # 3.12 raises it as is

            class Draft:
                extras = CtrlCAsItIsSet()

    end = ending(caught.value)
    assert (end.code, end.message) == (130, "mdindex build: stopped by SIGINT; a re-run converges")


# `mdindex ARGS` whose interpreter takes the signal `argv[1]` in its teardown's last instant, as it
# clears this module (after its atexit hooks: Python runs no signal handler there any more).
SIGNAL_IN_THE_LAST_INSTANT = """
import functools, os, signal, sys
from jobs.cli import run

class LastInstant:
    def __init__(self, signum):  # the module's names are None by the time of `__del__`
        self.send = functools.partial(os.kill, os.getpid(), signum)

    def __del__(self):
        self.send()

last_instant = LastInstant(signal.Signals[sys.argv[1]])
sys.argv = ["mdindex", *sys.argv[2:]]
run()
"""


def test_a_finished_build_exits_with_its_reports_code_whatever_comes_in_the_teardown(tmp_path):
    """A SIGTERM in the last instant of a finished build's program, after its report and the
    lock's release, killed it (-15) while report.json said "ok", 0: there Python restores the
    default actions, and its handlers (`exit_at_once_on_sigterm`) no longer run. A crash there
    (Ray's core worker touched after its shutdown) was -11 or exit 1 (here SIGSEGV instead of
    SIGTERM: the same). A program in which a build ran now ends at once after its summary, its
    logs and lines flushed (found by use, helper 106)."""
    docs, output = tmp_path / "docs", tmp_path / "out"
    docs.mkdir()
    build = ["build", "--config", CONFIG, "--input", str(docs), "--output", str(output)]
    done = subprocess.run(
        [sys.executable, "-c", SIGNAL_IN_THE_LAST_INSTANT, "SIGTERM", *build],
        cwd=ROOT, env=own_ray_environment(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("mdindex build: 0 sources"), done.stdout  # flushed, not lost
    report = json.loads((output / "_reindex" / "report.json").read_text())
    assert (report["status"], report["exit_code"]) == ("ok", 0)
