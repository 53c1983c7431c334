"""`python -m jobs.job_exit --address URL SUBMISSION_ID`: wait for a build submitted with
`ray job submit --submission-id SUBMISSION_ID` and exit with the build's own exit code.

`ray job submit` exits 1 for any failed job (a build's 3, some sources failed, and its 75, another
build holds the output, alike) and 0 for a job that `ray job stop` stopped; a scheduler that needs
the build's code asks here. Exit codes: the build's own (0, 1, 2, 3, 75, 130, 143); 143 for a
job that `ray job stop` stopped (Ray records no code for it; the build's report says what it
wrote); 1 for a job that failed before its entrypoint ran (its runtime environment, say);
2 for bad usage, an unknown submission id or an address no Ray job server answers at.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

EXIT_USAGE = 2
EXIT_STOPPED = 128 + signal.SIGTERM  # `ray job stop` sends SIGTERM (RAY_JOB_STOP_SIGNAL)
POLL_S = 1.0


def build_exit_code(status: str, driver_exit_code: int | None) -> int:
    """The exit code a finished job's status and driver exit code stand for (a code a shell gives
    a process a signal ended: 128 + the signal's number)."""
    if status == "STOPPED":
        return EXIT_STOPPED
    if driver_exit_code is None:
        return 0 if status == "SUCCEEDED" else 1
    return 128 - driver_exit_code if driver_exit_code < 0 else driver_exit_code


def wait_for_exit_code(address: str, submission_id: str, poll_s: float = POLL_S) -> int:
    """Poll the job until it ends, then its build's exit code (`build_exit_code`)."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(address)
    while True:
        info = client.get_job_info(submission_id)
        if info.status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            return build_exit_code(str(info.status.value), info.driver_exit_code)
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and wait; a job server that cannot answer (at the start or while
    we wait), or refuses us, is exit 2, one line."""
    parser = argparse.ArgumentParser(
        prog="python -m jobs.job_exit",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--address", required=True, help="the Ray job server, e.g. http://127.0.0.1:8265"
    )
    parser.add_argument("submission_id", help="the id given to `ray job submit --submission-id`")
    args = parser.parse_args(argv)
    from ray.exceptions import RayError

    try:
        return wait_for_exit_code(args.address, args.submission_id)
    # OSError: the job server gone while we wait (requests' errors are OSErrors); RayError: an
    # address without http:// read as a GCS address that does not answer (RpcError, after
    # Ray's own 30 s wait), or a server that wants a token this client lacks (AuthenticationError).
    # Exit 1 would read as the build's own failure.
    except (OSError, RuntimeError, ValueError, RayError) as exc:
        message = " ".join(str(exc).split())  # one line (an AuthenticationError has several)
        print(f"job_exit: {args.submission_id} at {args.address}: {message}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
