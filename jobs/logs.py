"""Clean logs: a healthy build prints our own lines only (the plan, progress, the summary).

What Ray prints on a healthy run that we cannot avoid is filtered here, and only here:
- `RayDeprecationWarning`s for `ray_remote_args` and `ray_remote_args_fn` in `map_batches`: Ray 2.60
  has no named parameter for task retries, actor restarts and actor task retries, and a
  `ray_remote_args_fn` is what keeps chunk tasks from being fused into the embedding actors
  (`jobs.resources`). Both go away with Ray 2.64, which pyproject.toml keeps out.
- the core worker's error-level line "has constructor arguments in the object store and
  max_restarts > 0": Ray Data itself puts every actor pool's map function in the object store and
  passes the reference to the actors, whatever our constructor arguments; the line goes only
  with `max_restarts=0`, and the embedding actors are meant to restart. It is written by Ray's C++
  core straight to file descriptor 2, so the filter sits on that descriptor.
- Ray Data's warning that the store stage received fewer batches than its bound on tasks at once
  (`jobs.resources.store_stage_args`: one per CPU): a bound above the work is harmless, and the
  number of embedded blocks is not known before the run.
- Ray Data's warning that the embedding pool's fixed number of actors is above the batches it
  received ("The minimum number of concurrent actors for 'MapBatches(EmbedActor)' is set to 2,
  but the operator only received 1 input(s)"): `resources.embed.actors` set on a small corpus or
  edit; the extra actors idle, and the pool's size is logged as "embedding pool: ...".
- Ray Data's console lines below WARNING, and its "Progress bars disabled" warning (we disable the
  bars ourselves outside a terminal, and log our own progress line instead).
- Ray Data's two ERROR lines when a task of the pipeline raises ("An exception was raised from a
  task of operator … To ignore this exception and continue, set DataContext.max_errored_blocks";
  "Exception occurred in user code, with the abbreviated stack trace below …"): the build names
  the error itself, in one line for a known failure (`failure_policy: abort`'s failed source) and
  with its traceback otherwise, and the advice to set a Ray Data setting misled (it is no setting
  of ours, and would drop sources unsaid).
Ray Data still writes everything to `ray-data.log` in the Ray session's log folder. Its console
lines and its warnings are filtered while its pipeline runs (`quiet_ray_data`, on the Ray path
alone: a run without Ray imports no Ray, about 0.3 s of a small build's start for Ray Data and
0.4-0.55 s for Ray); the rest for the whole build (`clean_logs`).

One line of Ray's is told in our words instead: a raylet's error that a folder it spills objects to
is over 95% full, which it repeats every 10 s for as long as the build runs (and, under `ray job
submit`, for every node): the build logs one warning for each such folder
(`SPILL_FOLDER_FULL`). A healthy build on a nearly full disk (a shared CI machine) printed Ray's
line every 10 s, unstamped, and a person read the repeats as the build's failure.

Outside a terminal (a log file, `ray job submit`'s job log) the prefix Ray gives a worker's
forwarded lines ("(_reduce_topic pid=…)") comes without colour codes, unless `RAY_COLOR_PREFIX`
is set: escape codes made a log read days later hard to read and to grep. The setting stays for
the rest of the process: a local Ray's shutdown at the program's end, after the build, prints
lines of its own ("(pid=gcs_server) … Failed to kill actor" after `failure_policy: abort`), which
came in colour once the build had put it back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from jobs.progress import interactive

log = logging.getLogger("mdindex.build")

DEPRECATED_REMOTE_ARGS = r"`ray_remote_args(_fn)?` is deprecated"
HARMLESS_STDERR = (re.compile(rb"core_worker\.cc.*constructor arguments in the object store"),)
_PIECE = re.compile(rb"[^\r\n]*(?:\r\n?|\n)")  # a line, or a bar's refresh
PROGRESS_BARS_DISABLED = "Progress bars disabled"
STORE_BOUND_ABOVE_INPUTS = (
    r"The maximum number of concurrent tasks for 'MapBatches\(store_entries\)"
)

EMBED_ACTORS_ABOVE_INPUTS = (
    r"The minimum number of concurrent actors for 'MapBatches\(EmbedActor\)'"
)
# How Ray Data's console announces a task's exception (the build reports the error itself)
TASK_FAILED = ("An exception was raised from a task of operator", "Exception occurred in user code")
# How it announces an error of its own ("please open an issue"), then its stack
RAY_ERROR = ("Exception occurred in Ray Data or Ray Core internal code", "Full stack trace")


@dataclass(frozen=True)
class Retold:
    """Lines of another program's matching `pattern`, told once in our words: `words` of the first
    match for each distinct first group (a folder), and the rest dropped."""

    pattern: re.Pattern[bytes]
    words: Callable[[re.Match[bytes]], str]


def _spill_folder_full(match: re.Match[bytes]) -> str:
    folder, percent, free, capacity = (part.decode(errors="replace") for part in match.groups())
    return (
        f"Ray's folder {folder} is over {percent}% full ({free} GB free of {capacity} GB): Ray "
        "cannot spill objects to it, so a build whose data outgrows Ray's object store fails; "
        "free some space, or set TMPDIR (or RAY_TMPDIR, which Ray reads first) to a folder "
        "with room"
    )


SPILL_FOLDER_FULL = Retold(
    re.compile(
        rb"file_system_monitor\.cc:\d+: (\S+) is over ([\d.]+)% full, "
        rb"available space: ([\d.]+) GB; capacity: ([\d.]+) GB"
    ),
    _spill_folder_full,
)


class RayDataConsoleFilter(logging.Filter):
    """Lets through Ray Data's console records of WARNING and above, except the notice that the
    progress bars are off, its announcements of a task's exception (`TASK_FAILED`), and those of
    a task or actor that Ray's memory monitor killed as an error of Ray's own (`RAY_ERROR`, 100
    lines: the build names the kill in one line, `jobs.build_cli.memory_killed`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        from ray.exceptions import OutOfMemoryError

        message = record.getMessage()
        if record.levelno < logging.WARNING or message.startswith(
            (PROGRESS_BARS_DISABLED, *TASK_FAILED)
        ):
            return False
        # logged as Ray Data handles the error: it is the one being handled in this thread
        return not (
            message.startswith(RAY_ERROR) and isinstance(sys.exc_info()[1], OutOfMemoryError)
        )


@contextlib.contextmanager
def clean_logs() -> Iterator[None]:
    """While a build runs in this process: the filters above but Ray Data's own
    (`quiet_ray_data`), undone on exit (outside a terminal, RAY_COLOR_PREFIX=0 stays: module
    docstring)."""
    if not interactive():  # read by the driver as it prints each line
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    with StderrFilter(HARMLESS_STDERR, (SPILL_FOLDER_FULL,)):
        yield


@contextlib.contextmanager
def quiet_ray_data() -> Iterator[None]:
    """While Ray Data runs a build's pipeline: `RayDataConsoleFilter` on its console handlers,
    and its warnings filtered (module docstring), taken off on exit. Here, on the Ray path
    alone, after Ray's import: `import ray` puts a filter of its own for its deprecation
    warnings before any set earlier."""
    from ray.util.annotations import RayDeprecationWarning

    consoles = _ray_data_consoles()
    console_filter = RayDataConsoleFilter()
    for handler in consoles:
        handler.addFilter(console_filter)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", message=DEPRECATED_REMOTE_ARGS, category=RayDeprecationWarning
            )
            for bound in (STORE_BOUND_ABOVE_INPUTS, EMBED_ACTORS_ABOVE_INPUTS):
                warnings.filterwarnings("ignore", message=bound, category=UserWarning)
            yield
    finally:
        for handler in consoles:
            handler.removeFilter(console_filter)


def _ray_data_consoles() -> list[logging.Handler]:
    """The console handlers Ray Data's logging config gives its logger: Ray's own stream
    handlers, not its log file, nor handlers others attach (pytest's log capture)."""
    import ray.data  # noqa: F401 - configures the "ray.data" logger

    return [
        h
        for h in logging.getLogger("ray.data").handlers
        if isinstance(h, logging.StreamHandler)
        and not isinstance(h, logging.FileHandler)
        and type(h).__module__.startswith("ray.")
    ]


def _written(out: BinaryIO, text: bytes) -> bool:
    """Write `text` to `out`; False when it cannot take it (its reader stopped, a full disk)."""
    try:
        out.write(text)
    except OSError:
        return False
    return True


def pieces(pipe: BinaryIO) -> Iterator[bytes]:
    """The bytes read from `pipe` as they come, in pieces that each end at a newline or a carriage
    return (a progress bar's refresh: "\\rprogress 60%"), then what is left at its end. By lines
    alone, a bar's refreshes reached the terminal only with the next newline."""
    pending = bytearray()  # what came after the last end, however long (linear, not quadratic)
    while chunk := pipe.read1(65536):
        pending += chunk
        if ends := max(chunk.rfind(b"\n"), chunk.rfind(b"\r")) + 1:
            done = len(pending) - len(chunk) + ends
            yield from (bytes(piece.group()) for piece in _PIECE.finditer(pending, 0, done))
            del pending[:done]
    if pending:
        yield bytes(pending)


class StderrFilter:
    """Drops the lines matching `patterns` from everything this process writes to file
    descriptor 2 (Python and C++ alike), tells those of `retold` once in our words (a warning of
    the build's log, written back through descriptor 2), and passes every other line through
    unchanged."""

    def __init__(self, patterns: tuple[re.Pattern[bytes], ...], retold: tuple[Retold, ...] = ()):
        self._patterns = patterns
        self._retold = retold
        self._told: set[tuple[int, bytes]] = set()
        self._saved: int | None = None
        self._drained = threading.Event()
        self._end = f"mdindex-stderr-end-{os.getpid()}-{id(self)}\n".encode()

    def __enter__(self) -> StderrFilter:
        sys.stderr.flush()
        self._saved = os.dup(2)
        read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        pump = threading.Thread(target=self._pump, args=(read, os.dup(self._saved)), daemon=True)
        pump.start()
        return self

    def _pump(self, read: int, target: int) -> None:
        """Pass the pipe's lines on to `target` until its reader stops (`2>&1 | head`), then
        drain them: the pump ended there, and the build's next write to descriptor 2 failed the
        build (BrokenPipeError)."""
        passing = True
        with open(read, "rb") as pipe, open(target, "wb", buffering=0) as out:
            for line in pieces(pipe):
                # the end marker follows a last line without its newline (a progress bar's "\r")
                ended = line.endswith(self._end)
                text = line[: -len(self._end)] if ended else line
                if passing and text and not self._dropped(text):
                    passing = _written(out, text)
                if ended:
                    self._drained.set()

    def _dropped(self, text: bytes) -> bool:
        """Whether `text` is a line not to pass on: one of `patterns`, or one `retold` (in our
        words the first time its subject is seen)."""
        if any(p.search(text) for p in self._patterns):
            return True
        for number, retold in enumerate(self._retold):
            if match := retold.pattern.search(text):
                if (number, match.group(1)) not in self._told:
                    self._told.add((number, match.group(1)))
                    # from another thread: the warning goes through descriptor 2, the pipe this
                    # thread empties, and a full pipe would wait on this thread for ever
                    words = retold.words(match)
                    threading.Thread(target=log.warning, args=(words,), daemon=True).start()
                return True
        return False

    def __exit__(self, *exc_info: object) -> None:
        # Everything written so far comes out before descriptor 2 is given back. Processes
        # started meanwhile (a local Ray's) keep the pipe open, so the pump lives on (a daemon
        # thread) to pass their lines through until they and this process end.
        sys.stderr.flush()
        os.write(2, self._end)
        self._drained.wait(timeout=5)
        os.dup2(self._saved, 2)
        os.close(self._saved)
