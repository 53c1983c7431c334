"""One build per output (`jobs.lock`): the lock itself, on real files and on a moto S3 server;
what a refused build does is in `test_jobs_pipeline` (local) and here (S3)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import socket
import subprocess
import threading
import time
from datetime import UTC, datetime

import pytest
from jobs_support import STAMP, gone_endpoint, s3_options, unstamped

from jobs import lock
from jobs.cli import main as mdindex
from jobs.config import load_config
from jobs.lock import LOCK_PATH, LockLost, OutputBusy, output_lock
from jobs.reindex import main
from jobs.report import write_unfinished_report
from jobs.runs import NEVER_ENDED
from jobs.storage import Storage


def test_a_local_lock_is_exclusive_and_ends_with_its_holder(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with output_lock(Storage(str(out))):
        with pytest.raises(OutputBusy, match=f"another build is running on the output {out}"):
            with output_lock(Storage(str(out))):
                pass
    with output_lock(Storage(str(out))):  # released: taken again
        pass
    assert list(out.iterdir()) == []  # the folder it made for its file is gone, not the output


def test_a_local_lock_removes_the_folders_it_made_when_nothing_else_was_written(tmp_path):
    with output_lock(Storage(str(tmp_path / "new" / "out"))):
        assert (tmp_path / "new" / "out" / LOCK_PATH).is_file()
    assert list(tmp_path.iterdir()) == []
    with output_lock(Storage(str(tmp_path / "out"))):
        (tmp_path / "out" / "_reindex" / "report.json").write_text("{}")
    assert sorted(p.name for p in (tmp_path / "out" / "_reindex").iterdir()) == [
        "build.lock",
        "report.json",
    ]


def test_a_local_lock_names_its_holder_while_it_holds_it_and_no_one_after(tmp_path):
    """The lock file holds its build's host, pid and start (a refused build names them, and
    `jobs.landmarks` tells this build's file from another's), and is emptied at the end."""
    (tmp_path / "out" / "_reindex").mkdir(parents=True)
    (tmp_path / "out" / "_reindex" / "report.json").write_text("{}")
    path = tmp_path / "out" / LOCK_PATH
    with output_lock(Storage(str(tmp_path / "out"))):
        record = json.loads(path.read_bytes())
        assert (record["pid"], record["host"]) == (os.getpid(), socket.gethostname())
        assert abs(record["started"] - time.time()) < 60 and "expires" not in record
        since = datetime.fromtimestamp(record["started"], UTC).isoformat(timespec="seconds")
        holder = f"the build of pid {os.getpid()} on {socket.gethostname()}, since {since}"
        with pytest.raises(OutputBusy, match=re.escape(f"({holder}, holds {path})")):
            with output_lock(Storage(str(tmp_path / "out"))):
                pass
        assert json.loads(path.read_bytes()) == record  # the refused build left it as it was
    assert path.read_bytes() == b""


@pytest.mark.parametrize("place", ["link to a file", "dangling link", "fifo"])
def test_a_local_lock_file_that_is_a_link_or_no_plain_file_is_refused(tmp_path, place):
    """The lock file was opened following a symbolic link at its own name (only its folder was
    checked): the link's target, anywhere on the machine, was emptied and given the holder's
    record, or made where a dangling link pointed. A link, or a FIFO there (which failed with
    EINVAL), is refused now, naming the file, and what a link points to is left as it was."""
    (tmp_path / "out" / "_reindex").mkdir(parents=True)
    lock_file = tmp_path / "out" / LOCK_PATH
    target = tmp_path / "elsewhere.txt"
    if place == "link to a file":
        target.write_text("a person's file\n")
        lock_file.symlink_to(target)
    elif place == "dangling link":
        lock_file.symlink_to(target)
    else:
        os.mkfifo(lock_file)
    with pytest.raises(PermissionError, match=f"refusing to lock {lock_file}"):
        with output_lock(Storage(str(tmp_path / "out"))):
            pass
    if place == "link to a file":
        assert target.read_text() == "a person's file\n"
    else:
        assert not target.exists()


def test_a_lock_taken_on_the_file_its_last_holder_removed_is_refused(tmp_path, monkeypatch):
    """A build that made the lock's folders removes the lock file as it ends. A second build that
    had opened that file and locked it just after held a lock on a file no one else could see: a
    third took the new file at the path, and two builds ran at once."""
    out = Storage(str(tmp_path / "new" / "out"))
    first_done = threading.Event()
    real_flock = lock.fcntl.flock
    holding = output_lock(out)
    holding.__enter__()  # the first build holds the lock, having made the folders

    def flock_after_the_first_ends(descriptor, operation):
        if not first_done.is_set():
            holding.__exit__(None, None, None)  # it ends: the lock file is unlinked, then freed
            first_done.set()
        return real_flock(descriptor, operation)

    monkeypatch.setattr(lock.fcntl, "flock", flock_after_the_first_ends)
    with pytest.raises(OutputBusy, match="was ending, and removed it"):
        with output_lock(out):
            pass
    with output_lock(out):  # the next try finds the path free
        assert (tmp_path / "new" / "out" / LOCK_PATH).is_file()


def test_a_local_lock_held_by_a_process_that_names_no_one_is_another_builds(tmp_path):
    """A lock file held with an empty body (a build of an older version, or one between its lock
    and its record) is refused as "another build", not as a record that cannot be read."""
    path = tmp_path / "out" / LOCK_PATH
    path.parent.mkdir(parents=True)
    with open(path, "wb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(OutputBusy, match=re.escape(f"(another build, holds {path})")):
            with output_lock(Storage(str(tmp_path / "out"))):
                pass
    assert path.read_bytes() == b""


@pytest.fixture
def s3_output(s3_server, request) -> Storage:
    """An output in a bucket of the test's own (each parameter's too)."""
    bucket = s3_server.make_bucket(own_bucket("lock", request))
    return Storage(f"{bucket}/out", s3_server.storage_options)


def own_bucket(prefix: str, request) -> str:
    """A bucket name for the test `request` runs, from a hash of its node id: moto keeps buckets
    in the process, past the server that made them, so no two tests may share a name."""
    return f"{prefix}-{hashlib.sha1(request.node.nodeid.encode()).hexdigest()}"


def test_an_s3_lock_is_exclusive_names_its_holder_and_is_deleted_at_the_end(s3_output):
    fs = s3_output.filesystem()
    path = s3_output.full_path(LOCK_PATH)
    with output_lock(s3_output):
        record = json.loads(fs.cat_file(path))
        assert record["expires"] == pytest.approx(time.time() + lock.LEASE_S, abs=30)
        with pytest.raises(OutputBusy) as refused:
            with output_lock(s3_output):
                pass
        message = str(refused.value)
        assert f"another build is running on the output {s3_output.uri()}" in message
        assert f"the build of pid {record['pid']} on {record['host']}, since " in message
        until = datetime.fromtimestamp(record["expires"], UTC).isoformat(timespec="seconds")
        assert f"holds {s3_output.uri(LOCK_PATH)} until {until} unless it renews it" in message
    assert not fs.exists(path)
    with output_lock(s3_output):  # released: taken again
        assert fs.exists(path)


def test_the_probe_for_conditional_writes_leaves_nothing_behind(s3_output):
    """moto keeps `If-None-Match: *`: the lock is taken, and the probe's object is gone."""
    fs = s3_output.filesystem()
    with output_lock(s3_output):
        fs.invalidate_cache()
        assert fs.find(s3_output.full_path("")) == [s3_output.full_path(LOCK_PATH)]
    fs.invalidate_cache()
    assert fs.find(s3_output.full_path("")) == []


@pytest.fixture
def behind(s3_behind, request) -> tuple[Storage, object]:
    """An output on a moto S3 server of its own behind a WSGI layer, and that layer. Its bucket
    is the test's own: moto keeps buckets in the process, past the server that made them."""
    server, layer = s3_behind
    bucket = server.make_bucket(own_bucket("behind", request))
    return Storage(f"{bucket}/out", server.storage_options), layer


@pytest.mark.parametrize("s3_behind", ["ignores conditional writes"], indirect=True)
def test_a_store_that_ignores_conditional_writes_gives_no_lock_and_says_so(behind, caplog):
    """Two builds would both take the lock there: each goes on unlocked, warned, and leaves
    nothing behind."""
    unconditional_output = behind[0]
    fs = unconditional_output.filesystem()
    with caplog.at_level(logging.WARNING, logger="mdindex.build"):
        with output_lock(unconditional_output) as check:
            with output_lock(unconditional_output):
                check()
    assert caplog.text.count("the store ignores conditional writes (If-None-Match)") == 2
    assert f"no build lock on {unconditional_output.uri()}" in caplog.text
    fs.invalidate_cache()
    assert fs.find(unconditional_output.full_path("")) == []


@pytest.mark.parametrize("s3_behind", ["ignores If-Match"], indirect=True)
def test_a_store_that_ignores_if_match_gives_the_lock_and_says_what_it_cannot_tell(behind, caplog):
    """Its creation still keeps `If-None-Match`, so a second build is refused; each build warns
    that renewals and takeovers cannot tell whose the lock is, and nothing is left behind."""
    output = behind[0]
    fs = output.filesystem()
    with caplog.at_level(logging.WARNING, logger="mdindex.build"):
        with output_lock(output) as check:
            with pytest.raises(OutputBusy, match=f"holds {output.uri(LOCK_PATH)}"):
                with output_lock(output):
                    pass
            check()
    warning = f"{output.uri()} ignores If-Match: the build lock is taken, but its renewals"
    assert caplog.text.count(warning) == 2
    fs.invalidate_cache()
    assert fs.find(output.full_path("")) == []


@pytest.mark.parametrize("s3_behind", ["refuses If-None-Match", "refuses If-Match"], indirect=True)
def test_a_store_that_refuses_a_conditional_write_fails_the_build_at_its_lock(behind):
    """No lock could be taken there, or (`If-Match`) every renewal would fail and the build would
    lose its lock four minutes in: it fails before it takes it, naming the store and the header,
    and leaves nothing behind."""
    output, layer = behind
    header = {"HTTP_IF_NONE_MATCH": "If-None-Match", "HTTP_IF_MATCH": "If-Match"}[layer.header]
    fs = output.filesystem()
    needs = f"^the store of {output.uri()} refused a conditional write \\({header}\\), which the"
    with pytest.raises(OSError, match=needs) as refused:
        with output_lock(output):
            pass
    assert not isinstance(refused.value, OutputBusy)
    fs.invalidate_cache()
    assert fs.find(output.full_path("")) == []


DENIED = ["refuses the credentials", "denies writes", "denies deletes"]
REPORT_FILES = ("report.html", "report.json", "runs.jsonl")  # a failed run's, in sorted order


@pytest.mark.parametrize("s3_behind", DENIED, indirect=True)
def test_an_output_the_credentials_may_not_write_is_named_so_at_the_lock(behind):
    """A 403 at the lock's first write (wrong keys, or keys that may only read there) was named
    "the store of … refused a conditional write (If-None-Match), which the build lock needs": a
    scheduled build's log sent its reader after the store's conditional writes. Keys that may
    write there but not delete passed: each build left its lock (the next exited 75 for 5
    minutes) and its probe, and no replaced file could go. Each names the output, the store's
    code and what to check, and takes no lock."""
    output, layer = behind
    needs = f"^the output {output.uri()} cannot be written \\({layer.code}: denied\\): "
    needs += "check the credentials and their permission to write and delete under it$"
    with pytest.raises(PermissionError, match=needs):
        with output_lock(output):
            pass
    layer.methods = ()  # the store answers again
    assert not output.filesystem().exists(output.full_path(LOCK_PATH))


@pytest.mark.parametrize("s3_behind", ["refuses If-Match"], indirect=True)
def test_a_build_on_a_store_that_refuses_if_match_exits_1_with_a_report_that_says_why(
    behind, s3_behind, tmp_path, capsys, caplog
):
    """The whole build: exit 1 at its lock, before any of the index's writes; the output holds
    only the failed run's report (and its line in the run history), naming the store and the
    header. Its log says so in one line:
    the traceback it logged before added nothing to the message."""
    output = behind[0]
    docs = tmp_path / "docs"
    (docs / "t").mkdir(parents=True)
    (docs / "t" / "a.md").write_text("# a\n\nHow a renews a lock.\n")
    command = ["--config", "configs/local.yaml", "--input", str(docs)]
    command += ["--output", output.uri(), "--cache", str(tmp_path / "cache")]
    command += ["--set", f"storage_options={s3_options(s3_behind[0].endpoint_url)}"]
    assert main(command) == 1
    needs = "refused a conditional write (If-Match), which the build lock needs"
    assert needs in capsys.readouterr().err
    failed = [r for r in caplog.records if r.getMessage() == "the job failed"]
    assert len(failed) == 1 and failed[0].exc_info is None
    fs = output.filesystem()
    reports = [output.full_path(f"_reindex/{name}") for name in REPORT_FILES]
    assert sorted(fs.find(output.full_path(""))) == reports
    report = json.loads(fs.cat_file(reports[1]))
    assert report["status"] == "failed" and needs in report["error"]


@pytest.mark.parametrize("s3_behind", ["loses answers"], indirect=True)
def test_conditional_lock_writes_whose_answers_are_lost_on_the_way_are_still_this_builds(
    behind, caplog
):
    """Each conditional write lands, its answer is lost and the client tries again: the retry
    fails its condition against the first try's write. The probe, the lock's creation, a
    renewal and a takeover all know their own record: the lock stays this build's, and nothing
    is left behind."""
    output, layer = behind
    fs = output.filesystem()
    path = output.full_path(LOCK_PATH)
    layer.lose = [r"build\.lock\.probe-", r"build\.lock$"]
    with caplog.at_level(logging.WARNING, logger="mdindex.build"):
        with output_lock(output) as check:
            assert layer.lose == []  # both answers were lost
            check()
            assert json.loads(fs.cat_file(path))["pid"] == os.getpid()
            fs.invalidate_cache()
            assert fs.find(output.full_path("")) == [path]  # the probe's object is gone
    assert not fs.exists(path)  # still ours at the end: deleted
    lease = lock.Lease(output, time.time())
    layer.lose = [r"build\.lock$"]
    assert lease.renew_once()
    assert layer.lose == [] and lease.lost is None
    assert lease.etag == fs.info(path, refresh=True)["ETag"]
    killed = {"host": "elsewhere", "pid": 1, "started": 0, "expires": time.time() - 1}
    fs.pipe_file(path, json.dumps(killed).encode())
    layer.lose = [r"build\.lock$"]
    taken = lock.Lease(output, time.time())  # the takeover's answer lost
    assert layer.lose == []
    assert taken.etag == fs.info(path, refresh=True)["ETag"]
    taken.release()
    assert not fs.exists(path)
    assert "is no longer ours" not in caplog.text


def test_an_expired_s3_lock_is_taken_over_once(s3_output, caplog):
    """A killed build's lock object stays until its expiry; then one build takes it over."""
    fs = s3_output.filesystem()
    path = s3_output.full_path(LOCK_PATH)
    killed = {"host": "elsewhere", "pid": 1, "started": time.time() - 900}
    fs.pipe_file(path, json.dumps({**killed, "expires": time.time() + 60}).encode())
    with pytest.raises(OutputBusy, match="the build of pid 1 on elsewhere"):
        with output_lock(s3_output):
            pass
    fs.pipe_file(path, json.dumps({**killed, "expires": time.time() - 1}).encode())
    with caplog.at_level(logging.WARNING, logger="mdindex.build"):
        with output_lock(s3_output):
            assert json.loads(fs.cat_file(path))["host"] != "elsewhere"
            with pytest.raises(OutputBusy):  # the new holder is live
                with output_lock(s3_output):
                    pass
    assert "taking over the build lock" in caplog.text and "it expired" in caplog.text
    assert not fs.exists(path)


def test_an_s3_lock_of_a_killed_build_of_this_machine_says_it_no_longer_runs(s3_output):
    """Found by use: a re-run after a `kill -9` of a scheduled build exited 75 with "another
    build is running on the output …; try again when it has finished", which nothing would. A
    lock naming a process of this machine that no longer runs says so, and when to build again;
    it is still not taken before its expiry (the host name may be another machine's as well)."""
    fs = s3_output.filesystem()
    path = s3_output.full_path(LOCK_PATH)
    child = subprocess.Popen(["true"])
    child.wait()  # its pid now names no process
    expires = time.time() + 120
    killed = {"host": socket.gethostname(), "pid": child.pid, "started": 1.8e9, "expires": expires}
    fs.pipe_file(path, json.dumps(killed).encode())
    with pytest.raises(OutputBusy) as refused:
        with output_lock(s3_output):
            pass
    until = lock.utc(expires)
    assert str(refused.value) == (
        f"the output {s3_output.uri()} is locked by a build that no longer runs (the build of "
        f"pid {child.pid} on {killed['host']}, since 2027-01-15T08:00:00+00:00, holds "
        f"{s3_output.uri(LOCK_PATH)} until {until}, but no process {child.pid} runs on this "
        f"machine ({killed['host']}): that build was stopped where it could not release it "
        f"(kill -9, out of memory); build again after {until}, when it expires)"
    )
    assert json.loads(fs.cat_file(path)) == killed


@pytest.mark.parametrize("started", ["yesterday", None, 1e300])
def test_a_live_s3_lock_whose_start_is_not_a_time_still_refuses_with_its_holder(s3_output, started):
    """Another tool's (or a damaged) record with a live expiry: refused as busy (exit 75), its
    holder named, not a TypeError from formatting its start."""
    fs = s3_output.filesystem()
    record = {"host": "elsewhere", "pid": 7, "started": started, "expires": time.time() + 60}
    fs.pipe_file(s3_output.full_path(LOCK_PATH), json.dumps(record).encode())
    with pytest.raises(OutputBusy, match="the build of pid 7 on elsewhere, since an unknown time"):
        with output_lock(s3_output):
            pass


@pytest.mark.parametrize("body", [b"[]", b'{"expires": "soon"}', b"not json"])
def test_a_damaged_s3_lock_record_is_taken_over_like_an_expired_one(s3_output, body):
    fs = s3_output.filesystem()
    path = s3_output.full_path(LOCK_PATH)
    fs.pipe_file(path, body)
    with output_lock(s3_output):
        assert json.loads(fs.cat_file(path))["pid"] == os.getpid()
    assert not fs.exists(path)


def test_an_s3_lock_is_renewed_while_its_build_runs_and_only_while_it_is_ours(
    s3_output, monkeypatch, caplog
):
    monkeypatch.setattr(lock, "RENEW_S", 0.2)
    fs = s3_output.filesystem()
    path = s3_output.full_path(LOCK_PATH)
    with caplog.at_level(logging.ERROR, logger="mdindex.build"):
        with output_lock(s3_output) as check:
            first = json.loads(fs.cat_file(path))["expires"]
            # Polled, not slept for: a loaded machine can delay the renewer past a fixed sleep.
            wait_until(lambda: json.loads(fs.cat_file(path))["expires"] > first)  # renewed
            check()  # still ours
            fs.pipe_file(path, b'{"host": "other", "pid": 2, "started": 0, "expires": 0}')
            wait_until(lambda: is_lost(check))  # the renewer noticed the takeover, and stopped
            assert json.loads(fs.cat_file(path))["host"] == "other"  # not renewed over
            with pytest.raises(LockLost, match="another build has taken it over"):
                check()
        assert fs.cat_file(path).startswith(b'{"host": "other"')  # not ours: not deleted
    assert "is no longer ours" in caplog.text
    assert not [t for t in threading.enumerate() if t.name == "mdindex-lock"]


def wait_until(condition, timeout: float = 20.0) -> None:
    """Wait for `condition()` to hold, failing the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"still not so after {timeout} s"
        time.sleep(0.05)


def is_lost(check) -> bool:
    """Whether a lock's `check` says it is lost."""
    try:
        check()
    except LockLost:
        return True
    return False


def test_an_s3_lock_whose_release_cannot_reach_the_endpoint_is_a_warning(s3_output, caplog):
    """botocore's EndpointConnectionError is no OSError: a finished build whose release could not
    reach the store failed with exit 1 and overwrote its report. The lock expires by itself."""
    lease = lock.Lease(s3_output, time.time())
    reachable, lease.fs = lease.fs, unreachable_s3()
    with caplog.at_level(logging.WARNING, logger="mdindex.build"):
        lease.release()
    assert "could not release the build lock" in caplog.text and "expires by itself" in caplog.text
    assert json.loads(reachable.cat_file(lease.path))["pid"] == os.getpid()  # left to expire


def test_an_s3_lock_renewal_that_landed_unanswered_is_still_this_builds(s3_output):
    """A renewal can land while its answer and every retry's are lost (the client gives up with
    a timeout, not a failed condition): the lease kept the ETag before it, so the next renewal's
    condition failed against this build's own record, which read as another build's. The build
    stopped with 75, its lock left on the store until it expired."""
    fs = s3_output.filesystem()
    lease = lock.Lease(s3_output, time.time())
    landed = lock.holder_record(lease.started, time.time() + lock.LEASE_S)
    fs.pipe_file(lease.path, landed)  # this build's renewal, whose answer never came back

    assert lease.renew_once() and lease.lost is None
    lease.check()
    assert lease.etag == fs.info(lease.path, refresh=True)["ETag"]
    lease.release()
    assert not fs.exists(lease.path)


def test_an_s3_lock_whose_renewals_fail_on_the_way_is_renewed_later_or_lost_before_it_expires(
    s3_output, monkeypatch, caplog
):
    """An endpoint that cannot be reached is no takeover: the renewer tries again, and the build
    holds the lock until it could expire before the next renewal (then its check stops it)."""
    # Held for LEASE_S - RENEW_S after its last renewal: 7.5 s, enough for the check below to
    # come after a failed renewal (retried by s3fs: 0.3 to 0.9 s under load) and the S3 calls
    # around it on a loaded machine; 2.5 s was not.
    monkeypatch.setattr(lock, "RENEW_S", 0.5)
    monkeypatch.setattr(lock, "LEASE_S", 8.0)
    fs = s3_output.filesystem()
    path = s3_output.full_path(LOCK_PATH)
    lease = lock.Lease(s3_output, time.time())
    reachable, lease.fs = lease.fs, unreachable_s3()
    with caplog.at_level(logging.WARNING, logger="mdindex.build"):
        assert lease.renew_once()  # failed on the way: tried again next time
    assert "could not renew the build lock" in caplog.text
    assert "EndpointConnectionError" in caplog.text
    lease.check()  # taken just now: held
    lease.fs = reachable  # back: renewed
    before = time.time()
    assert lease.renew_once()
    assert before + 8.0 <= json.loads(fs.cat_file(path))["expires"] <= time.time() + 8.0
    lease.fs = unreachable_s3()
    wait_until(lambda: time.time() > lease.renewed + 7.5)  # past LEASE_S - RENEW_S since then
    assert lease.renew_once()
    with pytest.raises(LockLost, match="it could not be renewed since "):
        lease.check()
    lease.fs = reachable
    lease.release()  # still ours: deleted
    assert not fs.exists(path)


def unreachable_s3():
    """An S3 filesystem whose endpoint refuses every connection, tried once a request."""
    import s3fs

    options = json.loads(s3_options(gone_endpoint()))
    retries = {"retries": {"max_attempts": 1}}
    return s3fs.S3FileSystem(**options, config_kwargs=retries, skip_instance_cache=True)


def test_a_build_on_an_s3_output_another_build_holds_exits_75_and_writes_nothing(
    s3_output, s3_server, tmp_path, capsys, monkeypatch
):
    docs = tmp_path / "docs"
    (docs / "t").mkdir(parents=True)
    (docs / "t" / "a.md").write_text("# a\n\nHow a retries a request.\n")
    fs = s3_output.filesystem()
    with output_lock(s3_output):
        before = sorted(fs.find(s3_output.full_path("")))
        command = ["--config", "configs/local.yaml", "--input", str(docs)]
        command += ["--output", s3_output.uri(), "--cache", str(tmp_path / "cache")]
        command += ["--set", f"storage_options={s3_options(s3_server.endpoint_url)}"]
        assert main(command) == 75
        assert (
            sorted(fs.find(s3_output.full_path(""))) == before == [s3_output.full_path(LOCK_PATH)]
        )
        # stamped as the build's log lines are: a cron log (`>> build.log 2>&1`) said not when
        [line] = capsys.readouterr().err.splitlines()
        assert STAMP.match(line) and " ERROR mdindex build: another build is running on" in line
        monkeypatch.setenv("GITHUB_ACTIONS", "true")  # its annotation is the message alone
        assert main(command) == 75
        said = capsys.readouterr()
        assert said.out == f"::error title=mdindex build::{unstamped(said.err)}"


def test_a_dry_run_under_a_killed_builds_lock_says_so_and_exits_75(
    s3_output, s3_server, tmp_path, capsys
):
    """After a `kill -9`'d build the dry run said 0 and planned the work, while the build exited
    75 for up to 5 minutes: it says who holds the lock and until when, exits 75 (its plan shown
    all the same) and leaves the lock as it was; once expired (the next build takes it over),
    0 without the line."""
    docs = tmp_path / "docs"
    (docs / "t").mkdir(parents=True)
    (docs / "t" / "a.md").write_text("# a\n\nHow a lock outlives its build.\n")
    fs = s3_output.filesystem()
    path = s3_output.full_path(LOCK_PATH)
    command = ["--config", "configs/local.yaml", "--input", str(docs), "--dry-run"]
    command += ["--output", s3_output.uri(), "--cache", str(tmp_path / "cache")]
    command += ["--set", f"storage_options={s3_options(s3_server.endpoint_url)}"]
    killed = {"host": "elsewhere", "pid": 4242, "started": 1.8e9, "expires": time.time() + 200}
    fs.pipe_file(path, json.dumps(killed).encode())
    assert main(command) == 75
    until = lock.utc(killed["expires"])
    needs = "output locked (a build now exits 75): the build of pid 4242 on elsewhere, since "
    needs += f"2027-01-15T08:00:00+00:00, holds {s3_output.uri(LOCK_PATH)} until {until} unless "
    assert f"\n{needs}it renews it\n" in capsys.readouterr().out
    assert json.loads(fs.cat_file(path)) == killed
    fs.pipe_file(path, json.dumps({**killed, "expires": time.time() - 1}).encode())
    assert main(command) == 0
    assert "output locked" not in capsys.readouterr().out


def test_a_dry_run_beside_a_running_local_build_says_so_and_exits_75(tmp_path, capsys):
    """The dry run said 0 beside a build holding a local output's lock (a build exits 75): it
    names the holder from the kernel's table of locks, taking none, and says 0 once it is gone."""
    docs = tmp_path / "docs"
    (docs / "t").mkdir(parents=True)
    (docs / "t" / "a.md").write_text("# a\n\nHow a lock is held.\n")
    output = Storage(str(tmp_path / "out"))
    command = ["--config", "configs/local.yaml", "--input", str(docs), "--dry-run"]
    command += ["--output", output.uri(), "--cache", str(tmp_path / "cache")]
    with output_lock(output):
        assert main(command) == 75
        record = json.loads((tmp_path / "out" / LOCK_PATH).read_bytes())
    needs = "output locked (a build now exits 75): "
    needs += f"{lock.describe_holder(record)}, holds {output.full_path(LOCK_PATH)}\n"
    assert needs in capsys.readouterr().out
    assert main(command) == 0
    assert "output locked" not in capsys.readouterr().out


def test_an_output_in_a_bucket_that_does_not_exist_is_a_usage_error_named_so(
    s3_server, tmp_path, capsys
):
    """A bucket name mistyped (or not made yet) failed the build at its lock with exit 1, a
    traceback, "the job failed: FileNotFoundError: The specified bucket does not exist" naming
    no output, and a warning that its report could not be written: now exit 2 and one line
    naming the output, before any work; in a dry run too, which planned the build as a first one."""
    docs = tmp_path / "docs"
    (docs / "t").mkdir(parents=True)
    (docs / "t" / "a.md").write_text("# a\n\nA page for no bucket.\n")
    output = "s3://no-such-bucket-here/out"
    command = ["--config", "configs/local.yaml", "--input", str(docs), "--output", output]
    command += ["--set", f"storage_options={s3_options(s3_server.endpoint_url)}"]
    assert main(command) == 2
    err = capsys.readouterr().err
    assert f"mdindex build: output {output}: no such bucket (" in err
    assert "Traceback" not in err and "report could not be written" not in err
    assert not s3_server.filesystem().exists("no-such-bucket-here")
    # a dry run said the build would rebuild every topic
    assert main([*command, "--dry-run"]) == 2
    assert f"mdindex build: output {output}: no such bucket (" in capsys.readouterr().err


def test_a_cache_in_a_bucket_that_does_not_exist_is_a_usage_error_named_so(
    s3_server, tmp_path, capsys
):
    """A cache bucket mistyped was a warning per cache entry ("cache entry … not written: The
    specified bucket does not exist") and exit 0: every scheduled run embedded every chunk again.
    Now exit 2 and one line naming the cache, before anything is written; in a dry run too."""
    docs = tmp_path / "docs"
    (docs / "t").mkdir(parents=True)
    (docs / "t" / "a.md").write_text("# a\n\nA page for no cache bucket.\n")
    output = s3_server.make_bucket("cache-bucket-missing") + "/out"
    cache = "s3://no-such-cache-bucket/cache"
    command = ["--config", "configs/local.yaml", "--input", str(docs), "--output", output]
    command += ["--cache", cache, "--set", f"storage_options={s3_options(s3_server.endpoint_url)}"]
    assert main(command) == 2
    assert f"mdindex build: cache {cache}: no such bucket (" in capsys.readouterr().err
    assert s3_server.filesystem().find("cache-bucket-missing") == []
    assert main([*command, "--dry-run"]) == 2
    assert f"mdindex build: cache {cache}: no such bucket (" in capsys.readouterr().err


def test_an_output_or_cache_that_is_an_s3_object_is_a_usage_error(s3_server, tmp_path, capsys):
    """`--output s3://b/index/index.json` (an object there) built a whole index under that key,
    beside the object, exit 0: `index.json` both a file and a folder, which no copy onto a disk
    can hold. Now exit 2 in one line, nothing written; for a cache too, in a dry run too."""
    docs = tmp_path / "docs"
    (docs / "t").mkdir(parents=True)
    (docs / "t" / "a.md").write_text("# a\n\nA page for an output that is an object.\n")
    fs = s3_server.filesystem()
    taken = s3_server.make_bucket("output-is-an-object") + "/index/index.json"
    fs.pipe(taken, b"{}")
    options = ["--set", f"storage_options={s3_options(s3_server.endpoint_url)}"]
    for role, roots in (
        ("output", ["--output", taken]),
        ("cache", ["--output", str(tmp_path / "out"), "--cache", taken]),
    ):
        command = ["--config", "configs/local.yaml", "--input", str(docs), *roots, *options]
        for dry in ([], ["--dry-run"]):
            assert main([*command, *dry]) == 2
            err = capsys.readouterr().err
            assert bool(STAMP.match(err)) != bool(dry)  # a build's last line is stamped
            assert unstamped(err) == (
                f"mdindex build: {role} {taken}: an object, not a folder: name a folder\n"
            )
    fs.invalidate_cache()
    assert fs.find("output-is-an-object") == ["output-is-an-object/index/index.json"]
    assert not (tmp_path / "out").exists()


def test_an_input_in_a_bucket_that_does_not_exist_is_named_so(s3_server, tmp_path, capsys):
    """An input bucket mistyped said "no such directory", as an empty prefix does, while an
    output or cache bucket said "no such bucket": now the input's does too; exit 2 both."""
    output = tmp_path / "out"
    options = ["--set", f"storage_options={s3_options(s3_server.endpoint_url)}"]
    for source, missing in (
        ("s3://no-such-input-bucket/docs", "no such bucket"),
        (s3_server.make_bucket("input-bucket-here") + "/docs", "no such directory"),
    ):
        command = ["--config", "configs/local.yaml", "--input", source, "--output", str(output)]
        for dry in ([], ["--dry-run"]):
            assert main([*command, *options, *dry]) == 2
            assert f"mdindex build: input {source}: {missing}\n" in capsys.readouterr().err
    assert not output.exists()


def test_an_emptied_s3_prefix_is_an_empty_input_under_allow_empty(s3_server, tmp_path, capsys):
    """An object store has no folders: once its last source is deleted the input's prefix lists
    nothing, which was "no such directory" (exit 2) with `sources.allow_empty: true` too, so an
    S3 input could never empty its index, as an emptied local folder does. Without it, still
    refused."""
    source = s3_server.make_bucket("emptied-input") + "/docs"
    command = ["--config", "configs/local.yaml", "--input", source, "--dry-run"]
    command += ["--output", str(tmp_path / "out")]
    command += ["--set", f"storage_options={s3_options(s3_server.endpoint_url)}"]
    assert main(command) == 2
    assert f"mdindex build: input {source}: no such directory\n" in capsys.readouterr().err
    assert main([*command, "--set", "sources.allow_empty=true"]) == 0
    assert "sources: 0\n" in capsys.readouterr().out


@pytest.mark.parametrize("s3_behind", ["denies bucket probes"], indirect=True)
def test_a_dry_run_into_an_empty_bucket_it_may_not_probe_plans_a_first_build(
    behind, s3_behind, tmp_path, capsys
):
    """Credentials for one prefix (HeadBucket and GetBucketLocation answer 403) and an empty
    output: the bucket is there, and the dry run plans the build instead of calling it missing
    (it did: fsspec's `exists` takes any failure for "no bucket")."""
    docs = tmp_path / "docs"
    (docs / "t").mkdir(parents=True)
    (docs / "t" / "a.md").write_text("# a\n\nA page for an empty bucket.\n")
    command = ["--config", "configs/local.yaml", "--input", str(docs), "--dry-run"]
    command += ["--output", behind[0].uri()]
    command += ["--set", f"storage_options={s3_options(s3_behind[0].endpoint_url)}"]
    assert main(command) == 0
    assert "rebuild topic t" in capsys.readouterr().out


@pytest.mark.parametrize("s3_behind", ["refuses listings"], indirect=True)
def test_a_build_that_fails_before_the_lock_leaves_a_running_builds_report(
    s3_behind, tmp_path, capsys, caplog
):
    """A build whose input cannot be listed (an S3 prefix the store refuses, a local folder of
    another user's, a signal as it lists) fails before it takes the output's lock: it wrote its
    failed report all the same, over the `unfinished` one of the build running there, so
    `mdindex report --check` said 1 for that build, and a line into its history. Its report is
    written under the lock only: beside a running build its log says why there is none, and
    its line and exit code are as before; on a free output it is written. Its failure is one
    line, not a traceback."""
    server, layer = s3_behind
    bucket = server.make_bucket("unlisted-input")
    server.filesystem().pipe({f"{bucket[5:]}/docs/t/a.md": b"# a\n\ntext\n"})
    layer.refused = ["docs/"]
    output = tmp_path / "out"
    command = ["--config", "configs/local.yaml", "--input", f"{bucket}/docs"]
    command += [
        "--output",
        str(output),
        "--set",
        f"storage_options={s3_options(server.endpoint_url)}",
    ]
    config = load_config("configs/local.yaml", overrides={"input": "/docs", "output": str(output)})
    folder = output / "_reindex"
    with output_lock(Storage(str(output))):
        write_unfinished_report(config, 1_800_000_000.0, None)  # the running build's
        running = {path.name: path.read_bytes() for path in folder.iterdir()}
        with caplog.at_level(logging.WARNING, logger="mdindex.build"):
            assert main(command) == 1
        assert {path.name: path.read_bytes() for path in folder.iterdir()} == running
        assert mdindex(["report", "--check", str(output)]) == 75
    said = [r for r in caplog.records if r.name == "mdindex.build"]
    assert [(r.getMessage()[:30], r.exc_info) for r in said] == [
        ("the job failed", None),
        ("this run's failed report is no", None),
    ]
    assert "(that of the build holding the output's lock stands): another build is" in caplog.text
    last = capsys.readouterr().err.splitlines()[-1]
    needs = f"mdindex build: the job failed: InputUnlistable: the input {bucket}/docs cannot be "
    assert last.startswith(f"{needs}listed (AccessDenied: denied): check the credentials"), last
    assert main(command) == 1  # the output free: that build was killed, and this run says so
    report = json.loads((folder / "report.json").read_bytes())
    assert (report["status"], report["exit_code"]) == ("failed", 1)
    assert report["error"].startswith(needs.removeprefix("mdindex build: the job failed: "))
    assert report["last_run_unfinished"]["started_at"] == "2027-01-15T08:00:00+00:00"
    runs = [json.loads(line) for line in (folder / "runs.jsonl").read_text().splitlines()]
    assert [(run["status"], run.get("error")) for run in runs] == [
        ("unfinished", NEVER_ENDED),
        ("failed", report["error"]),
    ]
