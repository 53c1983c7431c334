"""SIGTERM in the driver: an exit with the signal's number, whoever installed a handler before;
once the build is reported, an exit at once with its exit code. A build run in-process leaves its
caller's handler as it found it; in the program (`program_start`), the build's last handler stays
until the program's end (`exit_with`).

SIGHUP (the terminal of an interactive run gone: an SSH session dropped) is taken as SIGTERM is,
exit 129 and a report that says so (it killed the build, whose report then said "unfinished", and
`report --check` 75, "still running", until the next run), except where it is ignored (`nohup`):
there it stays ignored.

SIGINT (Ctrl-C) stops a build as a `KeyboardInterrupt` (exit 130, a report that says so); once
the build is reported it too ends the process at once with the build's code, as SIGTERM does.
A program stopped by a signal (129, 130, 143), and one in which a build ran, ends without the
interpreter's teardown (`exit_with`)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import NoReturn

from indexing.terminal import escape_what_stdout_cannot_encode

# The signals that stop a build with a report of it (SIGTERM first: the one Ray also handles).
STOPPING = (signal.SIGTERM, signal.SIGHUP)
# The signals that end a reported build at once with its code: those and Ctrl-C's.
REPORTED = (*STOPPING, signal.SIGINT)
# The exit codes of a program stopped by one of them, as a shell gives them (129, 130, 143).
STOPPED_CODES = frozenset(128 + signum for signum in REPORTED)


class Stopped(SystemExit):
    """A stopping signal in the driver: exits with its number (`code`), as `sys.exit(signum)`."""


# The stopping signals whose handler (`_raise_stopped`) raised in this build, in turn (a build's
# `callers_handler` starts it empty).
_STOPPED_BY: list[int] = []


def stopping() -> bool:
    """Whether a stopping signal has stopped the build this process runs (its handler raised):
    it is on its way out, waiting for its running reduces, and nothing else may cut that short
    (`jobs.local_ray.NodeWatch`)."""
    return bool(_STOPPED_BY)


def stopping_signal(exc: SystemExit) -> int | None:
    """The signal a `SystemExit` stands for: `Stopped`'s, or SIGTERM for `ray.init`'s handler's
    `sys.exit(15)`; or the last stopping signal's where Ray gave its `Stopped` as `SystemExit(1)`:
    raised while the driver waited in `ray.wait` or `ray.get` (for the last topics' reduces),
    it lost its class and code there, and the build exited 1 without a word, its report left
    "unfinished". Only a signal of this build counts (`callers_handler`): one that stopped an
    earlier build in the process, or a `NodeWatch` that stopped it, made a later build's own
    exit 1 read as that signal (143). None for any other exit."""
    if isinstance(exc, Stopped) or exc.code == signal.SIGTERM:
        return exc.code
    if exc.code == 1 and _STOPPED_BY:
        return _STOPPED_BY[-1]
    return None


def exit_on_sigterm() -> None:
    """Make SIGTERM exit with its number (`SystemExit(15)`, which `mdindex build` reports), as
    the handler `ray.init` sets does.

    Called before Ray starts, so a build stopped while it lists its input is reported like one
    stopped later, and again once `ray.init` has returned: Ray's core worker installs a C++ handler
    for SIGTERM that prints "*** SIGTERM received" and, in about 1 run of 10, aborted the driver
    (SIGABRT, no report); this puts Python's own handler back in its place. Python takes handlers
    in its main thread only (elsewhere this does nothing)."""
    _install(_raise_stopped)


def exit_at_once_on_sigterm(code: int) -> None:
    """Once a build's outcome is reported (`code`, its exit code): make SIGTERM end the process
    at once with that code.

    What remains is Ray's shutdown at the interpreter's exit, an atexit hook that waits 0.5 s and
    then stops the local instance. There, `exit_on_sigterm`'s `SystemExit` printed an "Exception
    ignored in atexit callback" traceback, and now and then the core worker's teardown aborted
    the driver (SIGABRT): a finished build then exited 1 or -6. The Ray processes this skips end
    with the driver, as after a `kill -9`. Set in the build until it returns (`callers_handler`
    puts the caller's back), then by the program's end (`exit_with`). SIGINT too (`REPORTED`):
    a second Ctrl-C there printed "Exception ignored in atexit callback … KeyboardInterrupt" and
    the driver aborted (-6) after a build that had reported 130 or 0."""
    _install(lambda signum, frame: _exit_now(code), REPORTED)


def program_start() -> None:
    """At the start of a program that may build (`jobs.cli.run`, `python -m jobs.reindex`):
    SIGTERM ends it at once with 143, as a shell reports a process it stopped, until a build
    takes SIGTERM over. The build's last handler then stays to the program's end: `callers_handler`
    does not put this one back. (It used to put back the default action, which left a moment
    between the build's return and `exit_with` where a SIGTERM killed a finished build's program
    without its exit code.) Standard streams closed at the start are opened on os.devnull
    (`open_closed_streams`); standard output escapes what its encoding cannot hold
    (`indexing.terminal.escape_what_stdout_cannot_encode`). SIGINT raises `KeyboardInterrupt`
    as Python's own handler does, through the program's `_interrupt_program`, which
    `callers_handler` does not put back either."""
    open_closed_streams()
    escape_what_stdout_cannot_encode()
    _install(_stop_program)
    _install(_interrupt_program, (signal.SIGINT,))


def open_closed_streams() -> None:
    """Open os.devnull on each standard stream closed at the program's start (`>&-`, `2>&-` in a
    cron line), and give Python a stream for each it left None. With standard error closed a
    build failed at its first look at it (`sys.stderr` None: exit 1, a failed report), and with
    standard output closed the program's last flush failed (exit 1 after a build that reported
    3); and a file opened later would take a closed descriptor's number, for what writes to that
    stream (Ray's processes inherit it) to write into."""
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        try:
            os.fstat(fd)
        except OSError:  # closed: the next file opened would take its number
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "r" if fd == 0 else "w"))


# The signals that came while a run's end was written (`held`), in turn; None: none is held.
_HELD: list[int] | None = None


@contextlib.contextmanager
def held() -> Iterator[None]:
    """While a run's end is written and its lock released (`jobs.pipeline.run_job`): a stopping
    signal or Ctrl-C waits for the block's end, then is taken by the handler in place there (once
    the run is reported, an exit at once with its code: `exit_at_once_on_sigterm`). A SIGTERM
    between the report's write and its `reported` stopped a run that had reported "ok": its
    failed report was a second line in the history (`ok 0`, then `failed 143`), and report.json
    and the exit code said 143 of a run that had finished. Held once: a block within another is
    the outer one's. In the main thread only (elsewhere Python takes no handler)."""
    global _HELD
    if _HELD is not None or threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {signum: signal.getsignal(signum) for signum in REPORTED}
    _HELD = []
    _install(_hold, REPORTED)
    try:
        yield
    finally:
        came, _HELD = _HELD, None
        for signum, handler in before.items():
            if signal.getsignal(signum) is _hold:  # not replaced in the block (`reported`)
                signal.signal(signum, _stand_in(signum) if handler is None else handler)
        if came:
            signal.raise_signal(came[0])


@contextlib.contextmanager
def stops_not_lost() -> Iterator[None]:
    """Around `ray.init`: a stopping signal that came meanwhile and whose handler's exit was lost
    stops the build at the block's end (`Stopped`). `ray.init` puts its own SIGTERM handler in
    place (`sys.exit(15)`) and starts Ray's processes; a signal taken while Python ran its fork
    hooks there raised in one (logging's `_releaseLock`), where Python ignores what is raised
    ("Exception ignored in: <function _releaseLock> … SystemExit: 15"): the build went on and
    reported "ok", exit 0 (1 SIGTERM of about 10 sent during Ray's start). The signals that came
    are read from Python's wakeup descriptor (`signal.set_wakeup_fd`), which Python's C handler
    writes each signal's number to, whatever its Python handler then does; in the main thread
    only. Ctrl-C's too, as the `KeyboardInterrupt` it raises."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read, write = os.pipe()
    for end in (read, write):
        os.set_blocking(end, False)
    before = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    try:
        yield
    finally:
        signal.set_wakeup_fd(before)
        try:
            came = os.read(read, 4096)
        except BlockingIOError:  # none came
            came = b""
        os.close(read)
        os.close(write)
    for signum in came:
        if signum in STOPPING:
            _raise_stopped(signum, None)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt


def interrupted(error: BaseException) -> bool:
    """Whether `error` is Ctrl-C's `KeyboardInterrupt`, or Python 3.11's `RuntimeError` around
    one raised while a class was made ("Error calling __set_name__ on 'Field' instance …"): a
    Ctrl-C in a build's first seconds, as a module that defines a dataclass was imported, exited
    1 with a 40-line traceback (found by use, helper 104)."""
    if isinstance(error, RuntimeError):
        error = error.__cause__
    return isinstance(error, KeyboardInterrupt)


def _hold(signum: int, frame) -> None:
    if _HELD is not None:
        _HELD.append(signum)


def _stand_in(signum: int):
    """The handler put back for one installed outside Python (`signal.getsignal` gives None),
    which cannot be: a stopping signal's `_raise_stopped`, Python's own for SIGINT."""
    return _raise_stopped if signum in STOPPING else signal.default_int_handler


def _raise_stopped(signum: int, frame) -> None:
    _STOPPED_BY.append(signum)
    raise Stopped(signum)


def _stop_program(signum: int, frame) -> None:
    _exit_now(128 + signum)


def _interrupt_program(signum: int, frame) -> None:
    raise KeyboardInterrupt


def _install(handler, signals: tuple[int, ...] = STOPPING) -> None:
    """Make `handler` that of each of `signals` not ignored (SIGTERM even so), where Python takes
    handlers: in the main thread (elsewhere this does nothing)."""
    if threading.current_thread() is threading.main_thread():
        for signum in signals:
            if signum == signal.SIGTERM or signal.getsignal(signum) is not signal.SIG_IGN:
                signal.signal(signum, handler)


def _exit_now(code: int) -> NoReturn:
    """End the process with `code` now, its printed lines flushed first (no atexit hook runs)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@contextlib.contextmanager
def callers_handler() -> Iterator[None]:
    """Put the caller's SIGTERM, SIGHUP and SIGINT handlers back on the way out, so that a build
    run in-process (a test, a program that builds twice) does not leave its own. A handler
    installed outside Python (`signal.getsignal` gives None) cannot be put back: `exit_on_sigterm`'s
    (SIGINT: Python's own) then stands. Nor are `program_start`'s: the program's end follows, and
    the build's handlers hold until then. A build's record of the signals that stopped it
    (`stopping_signal`) starts here, empty."""
    before = {signum: signal.getsignal(signum) for signum in REPORTED}
    _STOPPED_BY.clear()
    try:
        yield
    finally:
        if threading.current_thread() is threading.main_thread():
            for signum, handler in before.items():
                if handler is None:
                    signal.signal(signum, _stand_in(signum))
                elif handler not in (_stop_program, _interrupt_program):
                    signal.signal(signum, handler)


# Whether a build ran in this program (`build_ends_program_at_once`): `exit_with` ends it at once.
_BUILT = False


def build_ends_program_at_once() -> None:
    """A build runs in this program (`jobs.build_cli.run_build`): the program's end
    (`exit_with`) is at once, whatever the build's code."""
    global _BUILT
    _BUILT = True


def exit_with(code: int) -> NoReturn:
    """The program's end with `code`: a SIGTERM from here on (Ray's shutdown at exit) ends it at
    once with the same code (`exit_at_once_on_sigterm`).

    A program in which a build ran (its report written and its lock released by now: its code
    is the report's), or that a signal stopped (`STOPPED_CODES`), ends at once, its logs and
    printed lines flushed, without the interpreter's teardown: Ray's shutdown at exit and the
    finalization of the build's objects. There a build stopped by Ctrl-C, its report "failed"
    with 130, now and then ended with SIGSEGV (-11; 1 try in 13, helper 102) or exit 1 without a
    word (3 in 42, helper 104): the driver's Python touched Ray's core worker once its shutdown
    was done ("The core worker has already been shutdown … The process will exit" in the
    driver's log). In the teardown's last instant Python no longer runs signal handlers, and a
    SIGTERM or Ctrl-C there killed a build that had reported "ok" (-15, -2: helper 106). Ray's
    processes end with the driver (`PR_SET_PDEATHSIG`); a job of `ray job submit` ends with its
    driver's code. Another command's end is Python's own, its atexit hooks run."""
    exit_at_once_on_sigterm(code)
    if code in STOPPED_CODES or _BUILT:
        logging.shutdown()  # the log's handlers flushed (a file's too) and closed
        _exit_now(code)
    sys.exit(code)


def run_program(main: Callable[[], int]) -> NoReturn:
    """A program's whole run (`jobs.cli.run`, `python -m jobs.reindex`): `program_start`, `main`,
    its printed lines flushed, and `exit_with` its code.

    A reader that stops early (`| head`, `| grep -m1`) closes the pipe, and the next write raises
    `BrokenPipeError` (Python ignores SIGPIPE). That ends the output quietly, not the program's
    outcome: its exit code is the code `main` returned (the pipe closed at the last flush), or 0
    where it closed while `main` printed (each command prints once its work is done; a build keeps
    its code itself). Standard output then points at os.devnull, so that the flush at the
    interpreter's exit finds no closed pipe (the Python docs' "Note on SIGPIPE"). Ctrl-C that
    `main` leaves to Python (`mdindex query` waiting on a server or loading a model) exits 130
    quietly, as a build stopped by it does."""
    program_start()
    code = 0
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (KeyboardInterrupt, RuntimeError) as exc:  # Ctrl-C where nothing handles it (query)
        if not interrupted(exc):
            raise
        code = 128 + signal.SIGINT  # as a shell gives it, without a 40-line traceback
    except SystemExit as exc:  # a second SIGTERM while a stopped or failed build wrote its report
        signum = stopping_signal(exc)
        if signum is None:
            raise
        code = 128 + signum  # as a shell gives it (it exited 15)
    exit_with(code)
