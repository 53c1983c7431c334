"""The `mdindex build` sub-command: its arguments and how a parsed command line runs (also what
`python -m jobs.reindex` runs).

Exit codes: 0 everything succeeded; 1 the job itself failed; 2 bad usage or config (an input
that does not exist, or lists no sources while the output holds some, or would delete more of
them than `sources.max_deleted_fraction`: these two are the run's failed report);
3 some sources failed (everything else was written), or, under `checks.broken_links: fail`,
links name pages the corpus does not have; 75 another build is running on the output
(nothing done: try again later), or took over this build's S3 lock (it stopped before its next
write); 129, 130 and 143 stopped by SIGHUP (the terminal gone; not under nohup), SIGINT
(Ctrl-C) or SIGTERM (a scheduler's), 128 plus the signal's number as a shell gives it.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

from indexing.cli import json_object
from jobs.config import ConfigError, JobConfig, check_store_options, load_config
from jobs.known import KnownFailure
from jobs.signals import (
    build_ends_program_at_once,
    callers_handler,
    exit_at_once_on_sigterm,
    exit_on_sigterm,
    interrupted,
    stopping_signal,
)

EXIT_OK = 0
EXIT_JOB_FAILED = 1
EXIT_USAGE = 2
EXIT_SOURCES_FAILED = 3
EXIT_BUSY = 75  # sysexits' EX_TEMPFAIL: a scheduler may try again later

log = logging.getLogger("mdindex.build")
BOTO_LOGGERS = ("botocore", "aiobotocore")  # their INFO lines stay out of a build's log


class Interrupted(Exception):
    """A build stopped by a signal before it finished (what its failed report names)."""


class NodeWithoutCredentials(KnownFailure):
    """A Ray task found no S3 credentials: the nodes have none of their own (what the failed
    report names, and where)."""


class ActorStartFailed(KnownFailure):
    """One of the build's actors raised in its start (`__init__`) on a node: its error, and
    where (what the failed report names)."""


class MemoryKilled(KnownFailure):
    """Ray's memory monitor killed a task or actor of the build, and its tries again
    (`resources.retries`) ran out: what it killed, on which node, at what memory, and what to set
    (what the failed report names, in one line)."""


# How Ray's memory monitor words a kill, in the error of the task or actor it killed.
MEMORY_KILL = "killed due to the node running low on memory"
# The build's own tasks and actors, by the name Ray gives them (`task name=` in a memory kill).
RAY_TASK_NAMES = {
    "EmbedActor": "an embedding actor",
    "read_and_chunk": "a chunk task",
    "store_entries": "a store task",
    "_reduce_topic": "a topic's reduce",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The build arguments: a config file, URI overrides and dotted `--set` overrides."""
    parser.add_argument(
        "--config",
        required=True,
        action="append",  # kept whole: a second one is refused (`one_config`), not a silent last
        help="YAML config file (path or fsspec URI), or a shipped config's name: local (a laptop: "
        "MiniLM on the CPU) or cluster-gpu",
    )
    parser.add_argument("--input", help="corpus root URI (overrides `input`)")
    parser.add_argument("--output", help="output root URI (overrides `output`; default: in place)")
    parser.add_argument("--cache", help="embedding cache URI (default: {output}/.embedding-cache)")
    parser.add_argument(
        "--storage-options",
        type=json_object,
        metavar="JSON",
        help="fsspec options of the input, output and cache, as query, report and cache prune "
        "take them (overrides `storage_options`), e.g. "
        """'{"client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}}'""",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print what would be read, chunked, carried and deleted, which topics rebuilt, and "
        "a rough cost (bytes to read, chunks to embed); start nothing, write nothing; exit 0, or "
        "as the build would for what it finds before any work (2 usage, 75 locked, 1 unreadable)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="with --dry-run: also read and chunk (embed nothing) the sources of the topics it "
        "would rebuild, as the build would: name those that fail and the links to pages the "
        "corpus would not have, count the chunks to embed, and exit 3 where the build would",
    )
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config value by dotted key, e.g. --set resources.embed.batch_size=64",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `build` sub-command to the `mdindex` parser."""
    parser = subparsers.add_parser(
        "build",
        help="build or refresh the index of a markdown corpus (Ray Data job)",
        description="Build or refresh the index of a markdown corpus. Exit codes: 0 success, "
        "1 the job failed, 2 bad usage or config, 3 some sources failed (all else written) or "
        "links broken under checks.broken_links: fail, "
        "75 another build is running on the output (or took over its S3 lock), 129/130/143 stopped "
        "by SIGHUP/SIGINT/SIGTERM.",
    )
    add_arguments(parser)
    parser.set_defaults(run=run_build)


def one_config(paths: list[str]) -> str:
    """The one `--config` given; ConfigError for more (argparse kept the last, unsaid)."""
    if len(paths) > 1:
        raise ConfigError(
            f"--config: given {len(paths)} times ({', '.join(paths)}); a build reads one file: "
            "give one, with --set for the values to change"
        )
    return paths[0]


def log_formatter() -> logging.Formatter:
    """How the build's log lines are stamped: in UTC to the millisecond as ISO 8601
    (`2026-11-30T22:40:01.123Z INFO …`), as its report's times are: a scheduled run's log read
    days later, or beside a cluster's logs, named local time with no zone."""
    formatter = logging.Formatter(
        "%(asctime)s.%(msecs)03dZ %(levelname)s %(message)s", "%Y-%m-%dT%H:%M:%S"
    )
    formatter.converter = time.gmtime
    return formatter


def log_handler() -> logging.Handler:
    """The build's log lines on stderr, each stamped (`log_formatter`)."""
    handler = logging.StreamHandler()
    handler.setFormatter(log_formatter())
    return handler


def stamped(message: str) -> str:
    """`message` as an ERROR line of the build's log, stamped with the time now."""
    record = logging.makeLogRecord({"msg": message, "levelno": logging.ERROR, "levelname": "ERROR"})
    return log_formatter().format(record)


def run_build(args: argparse.Namespace) -> int:
    """Load and validate the config, run the job, print the summary; returns the exit code. Once
    the run is reported, a SIGTERM exits at once with that code (`exit_at_once_on_sigterm`, then
    the program's `exit_with`, which then ends the program at once: `build_ends_program_at_once`);
    run in-process, the caller's handler is put back."""
    from embedding.models import ModelNotFound
    from indexing.terminal import write_out
    from jobs.annotations import github_actions
    from jobs.discovery import InputNotFound
    from jobs.dry_run import annotations, describe, dry_run
    from jobs.local_fit import InfeasibleResources
    from jobs.lock import OutputNotFound
    from jobs.report import summary

    logging.basicConfig(level=logging.INFO, handlers=[log_handler()])
    # Not the build's lines: an S3 build (and its dry run) printed botocore's "Found credentials
    # in environment variables." and "Found endpoint for s3 via: ..." two to four times each
    for name in BOTO_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        config = load_config(
            one_config(args.config),
            overrides={
                "input": args.input,
                "output": args.output,
                "cache": args.cache,
                "storage_options": args.storage_options,
            },
            settings=args.settings,
        )
        check_store_options(config)
    except ConfigError as exc:
        failed_as_a_whole(f"mdindex build: config error: {exc}")
        return EXIT_USAGE
    if args.check and not args.dry_run:  # a build checks its sources and links always
        failed_as_a_whole("mdindex build: --check: only with --dry-run (a build checks all)")
        return EXIT_USAGE
    if args.dry_run:  # writes nothing, not even a failed run's report
        try:
            planned = dry_run(config, check=args.check)
        except (InputNotFound, ModelNotFound, OutputNotFound, InfeasibleResources) as exc:
            print(f"mdindex build: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except Exception as exc:  # noqa: BLE001 - e.g. an unreadable output: exit code 1
            from jobs.report import error_text

            log_failure("the dry run", exc)
            # the traceback's last line, as the build's: "NoCredentialsError: Unable to locate
            # credentials" at the end of 60 lines of s3fs frames said no more
            print(f"mdindex build: the dry run failed: {error_text(exc)}", file=sys.stderr)
            return EXIT_JOB_FAILED
        # the plan is the dry run's answer: one it cannot write (a full disk) fails it; under
        # another build's lock, the build's own code (its plan shown all the same)
        if not write_out(f"{describe(planned)}\n{annotations(planned)}", "mdindex build"):
            return EXIT_JOB_FAILED
        if planned.locked:
            return EXIT_BUSY
        return EXIT_SOURCES_FAILED if planned.fails else EXIT_OK
    build_ends_program_at_once()
    with callers_handler():
        exit_on_sigterm()
        code, report = _build(config)
        exit_at_once_on_sigterm(code)  # reported (a failed run too): the summary is no part of it
        if report:  # a reader that stopped, or a full disk (said in one line): the code stands
            with contextlib.suppress(BrokenPipeError):
                write_out(f"{summary(report)}\n{github_actions(report)}", "mdindex build")
        return code


def _build(config: JobConfig) -> tuple[int, dict | None]:
    """Run the job and report it, or its failure (`report_failure`, before the build lock is
    released); returns the exit code and, for a run that finished, its report."""
    from jobs.logs import clean_logs
    from jobs.pipeline import run_job

    started = time.time()
    try:
        with clean_logs():
            report = run_job(
                config,
                began=started,
                failed=lambda error, locked: report_failure(config, error, started, locked),
                reported=lambda report: finished(config, report),
            )
    except BaseException as exc:
        end = ending(exc)
        if end is None:
            raise
        failed_as_a_whole(end.message, logged=end.code not in (EXIT_USAGE, EXIT_BUSY))
        return end.code, None
    return report["exit_code"], report


def finished(config: JobConfig, report: dict[str, Any]) -> None:
    """Once a build's report is in place: its output recorded in its cache (`mdindex cache
    prune` keeps its entries), then a SIGTERM exits at once with the run's exit code."""
    from jobs.cache_cli import record_output

    record_output(config, report)
    exit_at_once_on_sigterm(report["exit_code"])


def failed_as_a_whole(message: str, logged: bool = False) -> None:
    """Print the line of a build that ended without a summary (exit 1 or 2, 75, a signal's) to
    standard error and, in a GitHub Actions job, its `::error::` to standard output
    (`jobs.annotations.failed_build`: the pull request's check said "exit code 1" alone). The
    line is stamped as the build's log lines are (`stamped`), unless a stamped line of the log
    has just said that the build failed or was stopped (`logged`: exit 1, a signal's): a
    refused or locked-out scheduled run (exit 2, 75) printed it alone, and its cron log
    (`>> build.log 2>&1`) said not when. The annotation is the message alone. A reader that
    stopped, or a full disk (`>> build.log 2>&1`, where a refused build exited 1 for its 2
    until 2026-12-01): the exit code all the same."""
    from jobs.annotations import failed_build

    with contextlib.suppress(OSError):
        print(message if logged else stamped(message), file=sys.stderr)
    with contextlib.suppress(OSError):
        sys.stdout.write(failed_build(message))


@dataclass(frozen=True)
class Ending:
    """How a build that an error ended says so: its exit code, the line it prints, and the
    error its failed report names (None: it writes none, and the output's report stands)."""

    code: int
    message: str
    error: BaseException | None = None


def ending(error: BaseException) -> Ending | None:
    """How the build that `error` ended says so; None for an exit that is not the build's (a
    `SystemExit` of another code), which goes on up. A usage error found before the run's
    `unfinished` report or another build's lock (`OutputBusy`, `LockLost`) writes no report; the
    deletion guards' refusals (`EmptyInput`, `TooManyDeleted`, under the lock), one found as
    Ray starts (after that report: `jobs.pipeline`), a signal's (the output stays valid:
    each topic is switched atomically, and a re-run converges) and any other failure of the job
    do. A node's check that stops the build in its first task (a node that joined late, or a
    cluster a program joined itself: `root_cause`) is the usage error it is at the start."""
    from embedding.models import ModelNotFound
    from jobs.discovery import EmptyInput, InputNotFound, TooManyDeleted
    from jobs.landmarks import NotTheDriversFolder, PluginNotOnNode
    from jobs.local_fit import InfeasibleResources
    from jobs.lock import OutputBusy, OutputNotFound
    from jobs.report import error_text

    # Found under the lock, so reported: the deletion guards' refusals (a scheduled run meets
    # them, a partly synced input, which `report --check` said was ok) and those as Ray starts.
    # (EmptyInput and TooManyDeleted are InputNotFound's, which is found before the lock.)
    reported = (EmptyInput, TooManyDeleted, InfeasibleResources, PluginNotOnNode)
    # Ray's start raises those of `jobs.local_ray`: a run without Ray never imported it (nor
    # Ray, 0.5 s of its Ctrl-C or failure)
    if local_ray := sys.modules.get("jobs.local_ray"):
        reported += (local_ray.FoldersNotShared, local_ray.ClusterUnreachable)
    if isinstance(error, reported):
        return Ending(EXIT_USAGE, f"mdindex build: {error}", error)
    if isinstance(error, (InputNotFound, ModelNotFound, OutputNotFound)):
        return Ending(EXIT_USAGE, f"mdindex build: {error}")
    if isinstance(error, OutputBusy):
        return Ending(EXIT_BUSY, f"mdindex build: {error}")
    if interrupted(error):  # Ctrl-C, also as a class was made (a module's import)
        signum = signal.SIGINT
    elif isinstance(error, SystemExit):  # SIGTERM's handler (ours, then ray.init's), SIGHUP's
        signum = stopping_signal(error)
    elif isinstance(error, Exception):  # any failure of the job itself maps to exit code 1
        cause = root_cause(error)
        if isinstance(cause, (NotTheDriversFolder, PluginNotOnNode)):
            return Ending(EXIT_USAGE, f"mdindex build: {cause}", cause)
        return Ending(EXIT_JOB_FAILED, f"mdindex build: the job failed: {error_text(cause)}", cause)
    else:
        signum = None
    if signum is None:
        return None
    name = signal.Signals(signum).name
    message = f"mdindex build: stopped by {name}; a re-run converges"
    return Ending(128 + signum, message, Interrupted(f"stopped by {name}"))


def report_failure(
    config: JobConfig, error: BaseException, started: float, locked: bool = True
) -> None:
    """Log the error that ended a build begun at `started` (epoch seconds) and write its failed
    report, where it has one (`ending`); from then on a signal ends the process at once with
    its code. `run_job` calls it before it releases the build lock, or, for a failure before
    the build held it (`locked` False: listing the input, a signal then), takes the lock for
    the write: where another build holds it, that build's `unfinished` report stands (a
    scheduled build's failure to list its input replaced the report of the build running on the
    output, and `mdindex report --check` said 1 for it), and the log says why none is written."""
    from jobs.discovery import output_storage
    from jobs.lock import unless_busy
    from jobs.report import write_failed_report

    end = ending(error)
    if end is None or end.error is None:
        return
    if isinstance(end.error, Interrupted):
        log.error("%s before the build finished", end.error)
    elif end.code != EXIT_USAGE:  # a usage error's one line follows (`_build`)
        log_failure("the job", end.error)
    with contextlib.ExitStack() as stack:
        busy = None if locked else stack.enter_context(unless_busy(output_storage(config)))
        if busy is None:
            write_failed_report(config, end.error, exit_code=end.code, started=started)
        else:
            log.warning(
                "this run's failed report is not written (that of the build holding the "
                "output's lock stands): %s",
                busy,
            )
    exit_at_once_on_sigterm(end.code)


def log_failure(what: str, error: BaseException) -> None:
    """Log that `what` failed, in the handler of the exception that failed it: one line for a
    `KnownFailure` (`error`, or what it stands for), missing S3 credentials or an S3 endpoint
    that cannot be reached, whose message follows alone, the traceback otherwise."""
    from botocore.exceptions import ConnectionError, HTTPClientError, NoCredentialsError

    # no credentials is the machine's setting, not our error: its 25 lines of s3fs and
    # aiobotocore frames said no more than "NoCredentialsError: Unable to locate credentials";
    # nor is an endpoint that is down, stalls or drops the connection: its 80 lines of aiohttp
    # frames said no more than "Could not connect to the endpoint URL: …", which names it
    if isinstance(error, KnownFailure | NoCredentialsError | ConnectionError | HTTPClientError):
        log.error("%s failed", what)
    else:
        log.exception("%s failed", what)


def on_a_node(task: BaseException, cause: BaseException) -> BaseException:
    """`cause`, the error a Ray task raised; botocore's NoCredentialsError as where it was raised
    and what the nodes lack: it said "Unable to locate credentials" alone to a driver that had
    them, its build on a cluster whose nodes have none of their own."""
    from botocore.exceptions import NoCredentialsError

    if not isinstance(cause, NoCredentialsError):
        return cause
    # as Ray names the task's worker, "ray::_reduce_topic() (pid=8933, ip=10.0.0.5)": the
    # error's class made for the cause (`as_instanceof_cause`) holds no `pid` or `ip`
    worker = re.search(r"\(pid=\d+, ip=[^)]*\)", str(task))
    where = f" {worker[0]}" if worker else ""
    return NodeWithoutCredentials(
        f"{cause} in a Ray task{where}: each node needs S3 credentials of its own (its AWS "
        "environment or instance profile, the job's --runtime-env-json env_vars), or give them "
        "in the config's storage_options"
    )


def start_failure(error: BaseException) -> ActorStartFailed | None:
    """The error an actor raised in its `__init__`, from the message of the `ActorDiedError` that
    Ray raises in its stead (which keeps no cause): "the embedding actor failed to start on node
    10.0.0.5 (pid 8933): ValueError: device 'cuda': ...". None for any other error. Ray's message
    was the actor's whole traceback, 30 lines in the report's error and the build's last line."""
    from ray.exceptions import RayActorError

    if not isinstance(error, RayActorError) or not error.actor_init_failed:
        return None
    lines = str(error).splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    if not frames:
        return None
    raised = lines[frames[-1] + 1 :]
    while raised and raised[0][:1].isspace():  # the frame's code and its carets
        del raised[0]
    # "ray::MapWorker(MapBatches(EmbedActor)).__init__() (pid=8933, ip=10.0.0.5, ...": the task's
    # name in a terminal colour (its codes, `\S*`, before the space)
    task = re.search(r"ray::(\S+?)\.__init__\(\)\S* \(pid=(\d+), ip=([^,)]+)", str(error))
    if not raised or not task:
        return None
    actor, pid, ip = task.groups()
    who = "the embedding actor" if "EmbedActor" in actor else f"actor {actor}"
    what = "\n".join(raised)
    return ActorStartFailed(f"{who} failed to start on node {ip} (pid {pid}): {what}")


def memory_killed(error: BaseException) -> MemoryKilled | None:
    """The `MemoryKilled` that Ray's `OutOfMemoryError` (or an actor's death) stands for, where its
    memory monitor killed the worker; None for any other error. Ray's message was 45 lines (the
    node's memory, its object store's counts, its ten largest processes, its advice), in the
    report's error and the build's last line, under two tracebacks of it: 230 lines in all."""
    from ray.exceptions import OutOfMemoryError, RayActorError

    text = str(error)
    if not isinstance(error, OutOfMemoryError | RayActorError) or MEMORY_KILL not in text:
        return None
    node = re.search(r"\(IP: ([^,)]+)[^)]*\) was ([\d.]+) ?GB used / ([\d.]+) ?GB limit", text)
    share = re.search(r"exceeded threshold of \d+B \(([\d.]+)% of", text)
    # one "Selected to kill: (Task: …)" line per worker it killed (Ray 2.56 kills several at once)
    kills = re.findall(
        r"task name=(.+?), required resources=.*?pid=(\d+), actual memory used=([\d.]+) ?GB", text
    )
    named = []
    for task, pid, used in kills:
        known = next((words for key, words in RAY_TASK_NAMES.items() if key in task), None)
        words = f"{known} ({task}, pid {pid}, using {used} GB)" if known else f"Ray's {task}"
        named.append((known is None, words))  # the build's own first
    who = " and ".join(words for _, words in sorted(named)) or "a worker"
    where = f" on node {node[1]}, its memory {node[2]} GB used of {node[3]} GB" if node else ""
    bound = share[1].rstrip("0").rstrip(".") if share else "95"
    return MemoryKilled(
        f"out of memory: Ray's memory monitor killed {who}{where} (it kills above {bound}%, "
        "RAY_memory_usage_threshold) and the tries again ran out (resources.retries): run fewer "
        "at once (resources.num_cpus, resources.embed.actors) or smaller batches "
        "(resources.chunk.batch_mb, resources.embed.batch_size), or on a machine with more memory"
    )


def root_cause(error: BaseException) -> BaseException:
    """The error one of our Ray tasks raised rather than Ray's wrapper of it (whose message holds
    the task's whole traceback): "OSError: [Errno 28] No space left on device: '...'". A wrapper of
    Ray's own (Ray Data's UserCodeException) is kept: only its wrapper's message names the error.
    (Ray Data's `raise_original_map_exception` would give a map task's own error, but then Ray Data
    logs it as a failure of its own internal code, "please open an issue", with its stack.) But a
    source that stopped a chunk task under `failure_policy: abort` is its `SourceFailed`, from the
    line of that message which names it: the report's error and the last line were 20 lines of
    Ray's traceback, where a failure known from the previous run gives the one line; so is a
    node's check in its first task (`jobs.landmarks`: a node that joined late has another folder,
    or lacks a third-party class), whose one line was inside Ray Data's. An actor that
    failed in its start is its `start_failure`, and one that Ray's memory monitor killed its
    `memory_killed`."""
    from ray.exceptions import RayError

    from jobs.landmarks import NotTheDriversFolder, PluginNotOnNode
    from jobs.stages.chunk import SourceFailed

    killed = memory_killed(error)
    if killed:
        return killed
    started = start_failure(error)
    if started:
        return started
    cause = getattr(error, "cause", None)  # ray.exceptions.RayTaskError
    wrapped = isinstance(cause, BaseException) and not isinstance(cause, RayError)
    if wrapped:
        return on_a_node(error, cause)
    for known in (SourceFailed, NotTheDriversFolder, PluginNotOnNode):
        name = re.escape(f"{known.__module__}.{known.__qualname__}")
        if stopped := re.search(rf"^{name}: (.+)$", str(error), re.MULTILINE):
            return known(stopped.group(1))
    return error
