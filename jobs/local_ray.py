"""The Ray a build runs on: this process's, the cluster `RAY_ADDRESS` names, or a private local
instance started for the build."""

from __future__ import annotations

import _thread
import contextlib
import fcntl
import logging
import os
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterator
from importlib import import_module

import ray
from ray._private import services
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from indexing.terminal import counted
from jobs.cgroups import memory_limit
from jobs.config import JobConfig, ResourcesConfig
from jobs.known import KnownFailure
from jobs.landmarks import (
    Landmark,
    NotTheDriversFolder,
    Plugin,
    PluginNotOnNode,
    check_landmarks,
)
from jobs.local_fit import check_local_fit, local_cpus
from jobs.resources import infeasible
from jobs.signals import exit_on_sigterm, stopping, stops_not_lost

log = logging.getLogger("mdindex.build")

# How long the local Ray instance keeps an idle worker process beyond one per CPU (Ray's default:
# 1 s). A build's store tasks (no CPU) and per-topic reduces come in bursts while chunk tasks hold
# the CPUs, so Ray starts extra worker processes for them; killed a second after each burst, they
# were started again for the next, each paying Python, Ray, pyarrow and our imports (about a
# CPU-second). On the FastAPI docs (2 CPUs, stand-in model) a cold build started 7-14 task worker
# processes and took 22.4-26.5 s; keeping them, 4-5 processes and 20.8-23.4 s.
IDLE_WORKER_KEEP_MS = 60_000
# How many worker processes of a new local instance get our modules imported before the build's
# first task (one per CPU up to this): enough for the first chunk tasks and a small edit's
# reduces; more would fill processes that a small build on a large machine never uses (about
# 110 MB each with those modules).
READY_WORKERS = 4
# How long a joined cluster's nodes have to check the driver's local folders before the build
# goes on without their answer (each chunk task and reduce checks them all the same).
LANDMARKS_TIMEOUT_S = 120.0
# The room a local instance's session folder needs: its logs and sockets took 0.4-3.1 MB for
# laptop builds (56 and 5,000 sources); Ray's start timed out with 24 KB free.
RAY_FOLDER_MIN_FREE = 16_000_000
# How many sessions of finished builds' local instances stay in Ray's folder (their logs), besides
# those of builds still running. Ray removes none: a build every hour left 24 folders a day, most
# 0.4-1 MB, some 15-42 MB (a build that waited long: its GCS and driver logs), until /tmp filled.
KEEP_SESSIONS = 10
# The file a build's local instance is marked by in its session folder, locked (`flock`) while the
# build's process lives: the kernel drops the lock however the process ends, `kill -9` included.
SESSION_MARK = "mdindex-build.lock"
_SESSION_LOCKS: list[int] = []  # the descriptors holding this process's marks: open until it ends


@ray.remote(num_cpus=1)
def _import_task_modules() -> None:
    """Import what the build's tasks run (chunking, storing, the reduce) in a task worker
    process: about 1.4 s of Ray Data, markdown-it, tokenizers, pyarrow and our libraries."""
    import jobs.reduce  # noqa: F401
    import jobs.stages.chunk  # noqa: F401
    import jobs.stages.store  # noqa: F401


@ray.remote(num_cpus=0)
def _check_node(marks: tuple[Landmark | Plugin, ...]) -> None:
    """`jobs.landmarks.check_landmarks` on the node the task is pinned to."""
    check_landmarks(marks)


class RayFolderUnusable(KnownFailure, OSError):
    """The folder a local Ray instance keeps its session in (`{TMPDIR}/ray`) cannot be made or
    written: the build stops before Ray starts, naming it and the variables that move it."""


# The share of the memory a local instance may use that Ray's object store gets (Ray's own default
# share of the memory it sees).
OBJECT_STORE_SHARE = 0.3
# The least object store Ray takes (its own lower bound: 75 MiB).
MIN_OBJECT_STORE = 78_643_200


class ClusterUnreachable(ValueError):
    """RAY_ADDRESS names a GCS address (`host:port`) that takes no connection: `ray.init` would
    try it for about 14 minutes, the output locked all along (a usage error: exit code 2)."""


# How long the GCS address in RAY_ADDRESS has to take a TCP connection.
REACHABLE_TIMEOUT_S = 10.0


def check_reachable(address: str) -> None:
    """`ClusterUnreachable` when RAY_ADDRESS is a `host:port` that takes no TCP connection within
    `REACHABLE_TIMEOUT_S` ("auto", `ray://` and `http(s)://` addresses are Ray's to check: the
    last fails at once)."""
    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), REACHABLE_TIMEOUT_S).close()
    except OSError as exc:
        raise ClusterUnreachable(
            f"RAY_ADDRESS={address}: no Ray cluster answers there ({exc.strerror or exc}); "
            "start it (`ray start --head`), fix the address, or unset RAY_ADDRESS for a local "
            "instance"
        ) from None


class FoldersNotShared(ValueError):
    """A node of the joined cluster has another folder, or none, at the path of a local input or
    output, found before any work (a config error for this cluster: exit code 2)."""


class _OwnGroupPopen(services.ConsolePopen):
    """Ray's `ConsolePopen` for a process that leads a process group of its own."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, process_group=0, **kwargs)


@contextlib.contextmanager
def process_groups_of_their_own() -> Iterator[None]:
    """While a private local Ray instance starts: each process `ray.init` starts (the GCS, the
    raylet, whose worker processes join its group, the log monitor, ...) leads a process group
    of its own, outside the driver's.

    A signal sent to the driver's process group then reaches the driver alone: coreutils'
    `timeout` (`timeout 4h mdindex build ...` in a crontab) sends its SIGTERM to its whole group,
    as does `kill -- -PGID`. It used to stop Ray's processes at the same moment as the driver, which
    then, before it could report the run, was ended by Ray's core worker with exit 1 (its object
    store's connection lost), aborted in `ray.init` (134), or hung 60 s for its GCS and exited
    1, its report unwritten; or it reported, 7-27 s later. Ray's processes still end with the
    driver: the kernel's fate sharing (`PR_SET_PDEATHSIG`) kills them when it dies, and Ray's
    shutdown stops them by pid. On Windows Ray gives them groups of their own itself. (SIGINT
    from a terminal's Ctrl-C never reached them: Ray blocks it in its processes.)"""
    popen = services.ConsolePopen
    services.ConsolePopen = _OwnGroupPopen
    try:
        yield
    finally:
        services.ConsolePopen = popen


# The variable by which Ray's core worker, as it starts in `ray.init`, reads how often a task that
# Ray's memory monitor killed is tried again (its `task_oom_retries`: Ray's default -1, for ever,
# whatever the task's `max_retries`, which bounds the other deaths of its worker).
OOM_RETRIES_VARIABLE = "RAY_task_oom_retries"


@contextlib.contextmanager
def memory_kill_retries(retries: int) -> Iterator[None]:
    """While `ray.init` starts this process's core worker (and a local instance's processes, which
    inherit the environment): a task that Ray's memory monitor killed is tried again at most
    `retries` times (`resources.retries`), as one whose worker died otherwise is.

    Ray counts memory kills apart and tries such a task again for ever by default: a build whose
    chunk tasks were killed again and again never ended (found by use with
    RAY_memory_usage_threshold=0.01: "There are infinite oom retries remaining"). The driver owns
    the build's tasks, so its core worker's setting is the one that holds, also on a cluster
    joined through RAY_ADDRESS or `ray job submit`, where `_system_config` cannot be passed; a
    cluster whose own system config sets `task_oom_retries`, or a RAY_task_oom_retries in the
    build's environment, wins. Restored once Ray has read it."""
    if OOM_RETRIES_VARIABLE in os.environ:
        yield
        return
    os.environ[OOM_RETRIES_VARIABLE] = str(retries)
    try:
        yield
    finally:
        os.environ.pop(OOM_RETRIES_VARIABLE, None)


def start_ray(config: JobConfig, landmarks: tuple[Landmark | Plugin, ...] = ()) -> bool:
    """Join this process's Ray (a test's) or the cluster RAY_ADDRESS names (`ray job submit` sets
    it), whose live nodes must see the driver's local folders and import its third-party classes
    (`landmarks`; else `FoldersNotShared`, `PluginNotOnNode`); otherwise start a private local
    instance of the CPUs this process may use (`local_cpus`), never one that `ray start` left
    running here, which keeps idle worker processes `IDLE_WORKER_KEEP_MS` and has up to
    `READY_WORKERS` of them ready, our modules imported, before the build's first task.

    True when it joined the cluster RAY_ADDRESS names, whose autoscaler may add nodes during the
    build (`jobs.resources.embed_pool`); a local instance never grows, and this process's own Ray
    is taken as it is."""
    if ray.is_initialized():
        return False
    # Ray's own INFO lines stay out of the log (ours say what happened; jobs.logs).
    if address := os.environ.get("RAY_ADDRESS"):
        check_reachable(address)
        # the job's runtime_env already reaches every worker
        with memory_kill_retries(config.resources.retries), stops_not_lost():
            context = ray.init(address="auto", logging_level=logging.WARNING)
        exit_on_sigterm()
        log.info("joined the Ray cluster at %s", context.address_info["gcs_address"])
        if missing := waiting_for(config.resources):
            bound = config.resources.node_wait_seconds
            log.warning(
                "%s, and no node of the cluster has that: the build waits until the autoscaler "
                "adds one (its node types must offer it), %s (resources.node_wait_seconds)",
                "; ".join(missing),
                "for ever" if bound is None else f"at most {bound:g} s",
            )
        nodes = [node["NodeID"] for node in _live_nodes()]
        check_nodes(landmarks, nodes)
        return True
    if folder := ray_folder():
        check_ray_folder(folder)
    limit = memory_limit()
    num_cpus = local_cpus(config, limit)
    # Workers of a local instance inherit this process's environment (AWS_*, HF_*, ...); a
    # runtime_env to forward it would cost every new worker process about a second.
    with (
        memory_kill_retries(config.resources.retries),
        process_groups_of_their_own(),
        stops_not_lost(),
    ):
        context = ray.init(
            address="local",
            num_cpus=num_cpus,
            object_store_memory=limit and max(MIN_OBJECT_STORE, int(limit * OBJECT_STORE_SHARE)),
            include_dashboard=False,
            logging_level=logging.WARNING,
            _system_config={"idle_worker_killing_time_threshold_ms": IDLE_WORKER_KEEP_MS},
        )
    exit_on_sigterm()
    session = context.address_info["session_dir"]
    try:
        mark_session(session)
    except OSError as error:  # a folder without locks (some network mounts): it stays, unmarked
        log.warning("Ray's session %s stays after the build: %s", session, error)
    removed = prune_sessions(os.path.dirname(session))
    log.info(
        "started a local Ray instance (logs in %s; Ray's folder keeps the sessions of the last %d "
        "finished builds: %s removed)",
        session,
        KEEP_SESSIONS,
        counted(removed, "older one"),
    )
    totals = live_resources()
    check_local_fit(config, totals[0] if totals else {})  # a local instance is one node
    # One-CPU tasks, not awaited: each imports our modules in one of the worker processes Ray
    # starts with the instance, while the driver sets up the pipeline, and the build's first
    # tasks find those processes ready. Without them a 1% tldr-en edit's reduces waited for a new
    # worker process (2 CPUs, stand-in model, tmpfs, three alternated pairs: run_job 7.6-8.5 s
    # with them, 7.9-8.7 s without; cold 12.3-12.9 s and 12.2-13.2 s).
    for _ in range(min(int(ray.cluster_resources().get("CPU", 0)), READY_WORKERS)):
        _import_task_modules.remote()
    return False


def ray_folder() -> str | None:
    """The folder a local Ray instance keeps its sessions in (`{RAY_TMPDIR or TMPDIR}/ray`), as
    this Ray says: a private function, in `ray._common.utils` in recent versions and in
    `ray._private.utils` before; None where neither has it (the check is then left to Ray)."""
    for module in ("ray._common.utils", "ray._private.utils"):
        with contextlib.suppress(ImportError, AttributeError):
            return import_module(module).get_default_ray_temp_dir()
    return None


def mark_session(session: str) -> None:
    """Mark the session folder of the local instance this build started as this build's, its mark
    locked until the process ends (`SESSION_MARK`). The mark is locked before it takes its name,
    so another build's `prune_sessions` never finds it unlocked while this one runs."""
    staged = os.path.join(session, f".{SESSION_MARK}.{os.getpid()}")
    descriptor = os.open(staged, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644)
    fcntl.flock(descriptor, fcntl.LOCK_EX)
    os.rename(staged, os.path.join(session, SESSION_MARK))
    _SESSION_LOCKS.append(descriptor)


def prune_sessions(folder: str, keep: int = KEEP_SESSIONS) -> int:
    """Remove from Ray's `folder` the session folders of finished builds' local instances but the
    newest `keep` (their names start with the time they started); returns how many it removed.

    A build's session is one its `mark_session` marked, the mark owned by this user; a finished
    build's is one whose mark no process holds locked. Sessions of other Ray users (`ray start`,
    a test, another user's builds) and of a cluster joined through RAY_ADDRESS have no such mark
    and are left alone, as are those of builds still running. A folder that cannot be removed
    whole (a file in use) is left to the next build, unsaid: it never fails the build."""
    try:
        names = sorted(os.listdir(folder), reverse=True)
    except OSError:
        return 0
    finished = 0
    removed = 0
    for name in names:
        session = os.path.join(folder, name)
        if not name.startswith("session_") or os.path.islink(session):  # session_latest: a link
            continue
        with _unlocked_mark(os.path.join(session, SESSION_MARK)) as unlocked:
            if not unlocked:
                continue
            finished += 1
            if finished > keep:
                shutil.rmtree(session, ignore_errors=True)
                removed += not os.path.exists(session)
    return removed


@contextlib.contextmanager
def _unlocked_mark(path: str) -> Iterator[bool]:
    """Whether `path` is a session's mark owned by this user that no process holds, held locked
    by this one meanwhile (another build's prune then passes it by)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # no mark: not a build's session
        yield False
        return
    try:
        ours = os.fstat(descriptor).st_uid == os.getuid()
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: a build still running
            ours = False
        yield ours
    finally:
        os.close(descriptor)


def check_ray_folder(folder: str, min_free: int = RAY_FOLDER_MIN_FREE) -> None:
    """Make `folder`, where a local Ray instance keeps its sessions, or raise `RayFolderUnusable`
    naming it: a TMPDIR that is missing and cannot be made, a file, or a /tmp/ray another user
    made was Ray's NotADirectoryError or PermissionError traceback from inside `ray.init`, and
    one with less than `min_free` bytes free a 30 s wait for "The current node timed out during
    startup ... the GCS has become overloaded"."""
    try:
        os.makedirs(folder, exist_ok=True)
        free = shutil.disk_usage(folder).free
    except OSError as exc:
        reason = exc.strerror or str(exc)
    else:
        if not os.access(folder, os.W_OK | os.X_OK):
            reason = "Permission denied"
        elif free < min_free:
            reason = f"{free / 1e6:.1f} MB free, under the {min_free / 1e6:.0f} MB a session needs"
        else:
            return
    raise RayFolderUnusable(
        f"Ray's folder {folder} cannot be used ({reason}): set TMPDIR (or RAY_TMPDIR, which Ray "
        "reads first) to a folder this user can write, with room"
    )


def live_resources() -> list[dict[str, float]]:
    """The total resources of each live node of the Ray instance this process is connected to."""
    return [node["Resources"] for node in _live_nodes()]


def waiting_for(resources: ResourcesConfig, embeds: bool = True) -> list[str]:
    """What one task or actor of each stage that no live node can hold asks for, in words
    (`jobs.resources.infeasible`; `embeds` False: a pass that starts no embedding actor): an
    embedding actor's GPU on a cluster whose GPU nodes have not joined, or are gone. Empty when
    every stage fits."""
    return infeasible(resources, live_resources(), embeds)


class NodeWaitTooLong(KnownFailure):
    """No live node of the joined cluster could hold a stage of the build for
    `resources.node_wait_seconds`: its autoscaler added none (no node type offers it, or none
    could be had). The build fails as any failed build does (exit 1, its report written)."""


# How often a build on a cluster that may grow asks what its live nodes cannot hold (`NodeWatch`;
# one call to the cluster's control store, which lists its nodes).
NODE_CHECK_SECONDS = 5.0
_SETTLING: list[bool] = []  # one entry while a build that failed waits for its reduces


@contextlib.contextmanager
def settling() -> Iterator[None]:
    """While a build that failed (or was stopped) waits for its running reduces
    (`jobs.reduce.settle`): a `NodeWatch` stops it no more. Its bound reached there interrupted
    that wait: the run's report said `NodeWaitTooLong`, not the error that failed it, and its
    reduces still wrote once the lock was released."""
    _SETTLING.append(True)
    try:
        yield
    finally:
        _SETTLING.pop()


class NodeWatch:
    """What no live node of the cluster can hold, looked at every `NODE_CHECK_SECONDS` by a daemon
    thread while the pipeline runs (`watching_nodes`), for the progress lines (`note`). Once some
    stage has waited `resources.node_wait_seconds` (Ray Data and `ray.wait` would wait for ever),
    it stops the build: it interrupts the main thread as a SIGTERM would
    (`_thread.interrupt_main`, which sends no signal: the handler `start_ray` put there raises,
    out of Ray's waits too), and `watching_nodes` raises its `failure` in that exit's stead. A
    build run outside the main thread, which no signal handler of its own stops either, is not
    bounded."""

    def __init__(self, resources: ResourcesConfig, embeds: bool = True) -> None:
        self._resources = resources
        self._embeds = embeds  # whether the pass it watches starts an embedding pool
        self._bound = resources.node_wait_seconds
        self._stops = threading.current_thread() is threading.main_thread()
        self._missing: list[str] = []
        self._since = 0.0  # when `_missing` was first found, by time.monotonic
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mdindex-nodes", daemon=True)
        self.failure: NodeWaitTooLong | None = None

    def look(self) -> None:
        """Ask the cluster once; stop the build if some stage has waited the bound."""
        missing = waiting_for(self._resources, self._embeds)
        now = time.monotonic()
        with self._lock:
            if self._closed.is_set():
                return
            if missing and not self._missing:
                self._since = now
            self._missing = missing
            waited = now - self._since
            if not missing or self._bound is None or waited < self._bound or not self._stops:
                return
            if stopping() or _SETTLING:  # on its way out: its wait for its reduces holds
                return
            self.failure = NodeWaitTooLong(
                f"{'; '.join(missing)}, and no live node of the Ray cluster has had that for "
                f"{waited:.0f} s (resources.node_wait_seconds: {self._bound:g}): give the cluster "
                "a node type that offers it, ask for less, or set resources.node_wait_seconds "
                "higher (null: wait for ever)"
            )
            self._closed.set()  # no more looks
            _thread.interrupt_main(signal.SIGTERM)

    def expect(self, embeds: bool) -> None:
        """Watch for what the next pass asks for: with an embedding pool, or without one (a
        pass with nothing to embed starts no actor: a GPU that no node has is then no wait)."""
        self._embeds = embeds

    def note(self) -> str:
        """For a progress line: "; waiting for a node (95 s, at most 1800 s): …" naming what no
        live node could hold at the last look, else "". The build waits for such a node: its
        progress said "0 chunks embedded" and no more, a warning at its start the only word of
        the wait."""
        with self._lock:
            missing, waited = self._missing, time.monotonic() - self._since
        if not missing:
            return ""
        bound = "" if self._bound is None else f", at most {self._bound:g} s"
        return f"; waiting for a node ({waited:.0f} s{bound}): {'; '.join(missing)}"

    def _run(self) -> None:
        while not self._closed.is_set():
            try:
                self.look()
            except Exception:  # noqa: BLE001 - a look that failed (the control store busy) stops no build
                log.debug("could not list the cluster's nodes", exc_info=True)
            self._closed.wait(NODE_CHECK_SECONDS)

    def start(self) -> None:
        """Look now, then every `NODE_CHECK_SECONDS` until `close`."""
        self._thread.start()

    def close(self) -> None:
        """Look no more (a stop already made is taken by the main thread by this one's end)."""
        with self._lock:
            self._closed.set()
        self._thread.join()


@contextlib.contextmanager
def watching_nodes(resources: ResourcesConfig, grows: bool, embeds: bool) -> Iterator[NodeWatch]:
    """A `NodeWatch` for the pipeline of a build on a cluster that may grow (`grows`; on another
    Ray it never looks, and its note is empty), its first pass embedding or not (`embeds`).
    Where it stopped the build, its `NodeWaitTooLong` comes out, not the exit its interruption
    raised."""
    watch = NodeWatch(resources, embeds)
    if not grows:
        yield watch
        return
    try:
        try:
            # started inside: its first look can stop the build at once (node_wait_seconds 0), and
            # an interruption taken before this try was the bare SIGTERM's exit, 143 (CI, loaded)
            watch.start()
            yield watch
        finally:
            watch.close()
    except BaseException:  # the interruption's exit (Ray gives it out of a wait as a SystemExit)
        if watch.failure is None:
            raise
        raise watch.failure from None


def on_the_drivers_node() -> dict[str, NodeAffinitySchedulingStrategy]:
    """Ray options that start an actor on the driver's node, never elsewhere: the build's
    bookkeeping actor (`jobs.on_ray.StatsCollector`), which every task reports to, lives as long
    as the driver. Placed by Ray (a `num_cpus: 0` actor goes anywhere), it started on another node
    of a joined cluster, and that node's loss failed the build whose tasks Ray had tried again
    ("ActorUnavailableError: The actor ... is unavailable", under the embedding actor's name)."""
    node = ray.get_runtime_context().get_node_id()
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)}


def _live_nodes() -> list[dict]:
    """Each live node of the Ray instance this process is connected to, as `ray.nodes()` gives
    it (its "NodeID" and total "Resources" among the rest)."""
    return [node for node in ray.nodes() if node["Alive"]]


def check_nodes(landmarks: tuple[Landmark | Plugin, ...], node_ids: list[str]) -> None:
    """Check the driver's landmarks, its local folders and the config's third-party classes, on
    the given (live) nodes of the cluster at once, so that a cluster whose machines do not share
    the folders (`FoldersNotShared`) or lack a class (`PluginNotOnNode`) stops before any work.
    Nodes that join later are checked by their first chunk task or reduce; so are those whose
    check did not answer (within `LANDMARKS_TIMEOUT_S`, or a node gone meanwhile), with a
    warning."""
    if not landmarks:
        return
    checks = [
        _check_node.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
        ).remote(landmarks)
        for node_id in node_ids
    ]
    try:
        ray.get(checks, timeout=LANDMARKS_TIMEOUT_S)
    except NotTheDriversFolder as error:  # Ray's error of the task, made a subclass of the task's
        raise FoldersNotShared(str(error.cause)) from None
    except PluginNotOnNode as error:
        raise PluginNotOnNode(str(error.cause)) from None
    except RayError as error:  # not within the time, or a node gone meanwhile
        kinds = {isinstance(mark, Plugin) for mark in landmarks}
        checked = ["the local folders"] * (False in kinds) + ["the third-party classes"] * (
            True in kinds
        )
        log.warning(
            "not every node checked %s (%s); their first tasks will",
            " and ".join(checked),
            type(error).__name__,
        )
