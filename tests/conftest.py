"""Shared fixtures: a real moto S3 server on 127.0.0.1, offline model loading, GPU skipping."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from urllib.parse import parse_qs

import pytest
from hypothesis import settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Each Ray the suite starts (the session's, and the builds' in child processes, which inherit it)
# has a log monitor that lists its session's log files again every 0.1 s while it holds fewer than
# this many; then every 0.5 s. A session Ray of the suite ends with ~300 worker log files: with
# 600, an idle one's log monitor took 2.5 CPU-s in 30 s, 1.2 at 0 (2026-12-01, the 2-core EPYC).
os.environ.setdefault("RAY_LOG_MONITOR_MANY_FILES_THRESHOLD", "0")
# A suite run in GitHub Actions builds as elsewhere: no workflow commands after a build's summary
# (tests read its last lines), nothing appended to the job's step summary (`jobs.annotations`)
for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY"):
    os.environ.pop(name, None)

# On CI, hypothesis replays the same examples every run (a red CI then means the change, not a
# new random draw); locally it keeps exploring new examples.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

FIXTURES = Path(__file__).parent / "fixtures"


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


# pytest-xdist workers for `-n auto` (pyproject.toml's addopts) at most: each holds a Ray instance
# and a moto server of its own, and the build tests are CPU-bound.
MAX_WORKERS = 4


def pytest_xdist_auto_num_workers(config) -> int:
    """One pytest-xdist worker per CPU this process may use, up to `MAX_WORKERS`."""
    if hasattr(os, "sched_getaffinity"):  # Linux: the CPUs this process may run on
        usable = len(os.sched_getaffinity(0))
    else:
        usable = os.cpu_count() or 1
    return max(1, min(usable, MAX_WORKERS))


# The longest test modules, longest first (seconds of test time on the 2-core VMs, 2026-12-02),
# which the workers take before the others (`--dist loadfile` with `--no-loadscope-reorder` hands
# files out in the order collected). In file-name order, and in xdist's own (the files with the
# most tests first), `test_jobs_submit` (about 200 s) came among the last, and one worker ran it
# alone while the other had finished.
LONGEST_FIRST = (
    "test_jobs_submit.py",
    "test_jobs_faults.py",
    "test_jobs_pipeline.py",
    "test_jobs_in_process.py",
    "test_jobs_atomic.py",
    "test_jobs_report.py",
    "test_embedding_model.py",
    "test_chunking_hostile.py",
    "test_jobs_local_ray.py",
)


def pytest_collection_modifyitems(config, items):
    """The longest modules first (`LONGEST_FIRST`; each module's tests in their order), and the
    tests marked `gpu` skipped on machines without CUDA."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest as found
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class S3Server:
    """A running moto S3 server and the fsspec options that reach it."""

    endpoint_url: str

    @property
    def storage_options(self) -> dict:
        return {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": "us-east-1"},
        }

    def filesystem(self):
        """A fresh s3fs filesystem (instance cache bypassed) talking to this server."""
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options)

    def make_bucket(self, name: str) -> str:
        """Create a bucket and return its `s3://` URI.

        No region is named: us-east-1 takes no location constraint, and moto rejects one.
        """
        import boto3

        boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        ).create_bucket(Bucket=name)
        return f"s3://{name}"


def _moto_server():
    """A started moto server on a free port of 127.0.0.1, and its endpoint."""
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server, f"http://127.0.0.1:{port}"


class _DropsHeaders:
    """A WSGI layer that drops the request `headers` (WSGI names) before moto's S3 app sees them,
    as some S3-compatible stores ignore conditional writes."""

    def __init__(self, app, headers: tuple[str, ...]):
        self.app, self.headers = app, headers

    def __call__(self, environ, start_response):
        for header in self.headers:
            environ.pop(header, None)
        return self.app(environ, start_response)


class _RefusesHeader:
    """A WSGI layer that answers 501 to a request with the `header` (its WSGI name), as a store
    without that conditional write may."""

    def __init__(self, app, header: str):
        self.app, self.header = app, header

    def __call__(self, environ, start_response):
        if self.header not in environ:
            return self.app(environ, start_response)
        start_response("501 Not Implemented", [("Content-Type", "application/xml")])
        return [b"<Error><Code>NotImplemented</Code><Message>refused</Message></Error>"]


class LosesAnswers:
    """A WSGI layer that answers 500 in place of moto's answer to a PUT that succeeded, once for
    each pattern in `lose` that the PUT's path matches (`re.search`): a write that landed, its
    answer lost on the way back, after which the client tries the request again."""

    def __init__(self, app):
        self.app = app
        self.lose: list[str] = []

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        hit = [p for p in self.lose if environ["REQUEST_METHOD"] == "PUT" and re.search(p, path)]
        if not hit:
            return self.app(environ, start_response)
        answer = []
        body = b"".join(self.app(environ, lambda status, *rest: answer.append((status, *rest))))
        status, headers = answer[0][:2]
        if not status.startswith("2"):  # the write did not land: its answer goes through
            start_response(status, headers)
            return [body]
        self.lose.remove(hit[0])
        start_response("500 Internal Server Error", [("Content-Type", "application/xml")])
        return [b"<Error><Code>InternalError</Code><Message>lost</Message></Error>"]


class RefusesListings:
    """A WSGI layer that answers 403 AccessDenied to a listing of any prefix in `refused` (as an
    IAM policy that limits `s3:prefix` does), and lets every other request through."""

    def __init__(self, app):
        self.app = app
        self.refused: list[str] = []

    def __call__(self, environ, start_response):
        prefix = parse_qs(environ.get("QUERY_STRING", "")).get("prefix", [None])[0]
        if environ["REQUEST_METHOD"] != "GET" or prefix not in self.refused:
            return self.app(environ, start_response)
        start_response("403 Forbidden", [("Content-Type", "application/xml")])
        return [b"<Error><Code>AccessDenied</Code><Message>denied</Message></Error>"]


class _Denies:
    """A WSGI layer that answers 403 with the error `code` to each request on an object (its
    bucket is made) whose method is in `methods`, as a store does to credentials it refuses, or
    to a write under a prefix that they may only read."""

    def __init__(self, app, code: str, methods: tuple[str, ...]):
        self.app, self.code, self.methods = app, code, methods

    def __call__(self, environ, start_response):
        on_object = "/" in environ.get("PATH_INFO", "").strip("/")
        if not on_object or environ["REQUEST_METHOD"] not in self.methods:
            return self.app(environ, start_response)
        start_response("403 Forbidden", [("Content-Type", "application/xml")])
        if environ["REQUEST_METHOD"] == "HEAD":  # no body, as S3 answers one
            return [b""]
        return [f"<Error><Code>{self.code}</Code><Message>denied</Message></Error>".encode()]


class _DeniesBucketProbes:
    """A WSGI layer that answers 403 to a HEAD of a bucket and to a request for its location, as a
    store does to credentials for one prefix of it (an IAM policy that grants `s3:ListBucket` only
    under that prefix, and no `s3:GetBucketLocation`), and lets every other request through."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        on_bucket = "/" not in environ.get("PATH_INFO", "").strip("/")
        method, query = environ["REQUEST_METHOD"], environ.get("QUERY_STRING", "")
        if not on_bucket or not (method == "HEAD" or "location" in parse_qs(query, True)):
            return self.app(environ, start_response)
        start_response("403 Forbidden", [("Content-Type", "application/xml")])
        return [b""]


# The WSGI layers an `s3_behind` server may stand behind, by name.
S3_LAYERS = {
    "ignores conditional writes": partial(
        _DropsHeaders, headers=("HTTP_IF_NONE_MATCH", "HTTP_IF_MATCH")
    ),
    "ignores If-Match": partial(_DropsHeaders, headers=("HTTP_IF_MATCH",)),
    "refuses If-None-Match": partial(_RefusesHeader, header="HTTP_IF_NONE_MATCH"),
    "refuses If-Match": partial(_RefusesHeader, header="HTTP_IF_MATCH"),
    "loses answers": LosesAnswers,
    "refuses listings": RefusesListings,
    "refuses the credentials": partial(
        _Denies, code="InvalidAccessKeyId", methods=("GET", "HEAD", "PUT", "POST", "DELETE")
    ),
    "denies writes": partial(_Denies, code="AccessDenied", methods=("PUT", "POST", "DELETE")),
    "denies deletes": partial(_Denies, code="AccessDenied", methods=("DELETE",)),
    "denies bucket probes": _DeniesBucketProbes,
}


@pytest.fixture
def s3_behind(request) -> Iterator[tuple[S3Server, object]]:
    """A moto S3 server of its own behind the WSGI layer that `request.param` names in
    `S3_LAYERS` (parametrize it indirectly), and that layer."""
    from moto.moto_server.werkzeug_app import create_backend_app

    server, endpoint = _moto_server()
    server._server.app = S3_LAYERS[request.param](create_backend_app("s3"))  # looked up per request
    try:
        yield S3Server(endpoint_url=endpoint), server._server.app
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A moto S3 server on 127.0.0.1 for the whole session, with AWS env pointing at it."""
    server, endpoint = _moto_server()
    saved = {
        k: os.environ.get(k)
        for k in (
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_DEFAULT_REGION",
            "AWS_ENDPOINT_URL",
        )
    }
    os.environ.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=endpoint,
    )
    try:
        yield S3Server(endpoint_url=endpoint)
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """One local Ray instance (2 CPUs) shared by the build tests of the whole session (of each
    pytest-xdist worker), shut down at its end; an already running one is reused and left
    running. Modules that build request it so that Ray starts once, not once per module."""
    import ray

    from jobs.local_ray import IDLE_WORKER_KEEP_MS

    started = not ray.is_initialized()
    if started:
        # one declared GPU: Ray schedules a GPU pool's actors on it (they run on the CPU here);
        # idle workers kept as a build's own local instance keeps them: killed a second after
        # each build's bursts of store tasks and reduces, they were started again for the next
        # build, each paying its imports (about 5 CPU-seconds a build)
        ray.init(
            num_cpus=2,
            num_gpus=1,
            include_dashboard=False,
            _system_config={"idle_worker_killing_time_threshold_ms": IDLE_WORKER_KEEP_MS},
        )
    yield
    if started:
        ray.shutdown()
