"""The private Ray instance a local build starts (`jobs.pipeline.start_ray`), in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Two one-CPU tasks hold both CPUs, so a no-CPU task gets a worker process of its own (Ray has no
# idle one left). Once that task is done, its process is one idle worker more than there are
# CPUs: Ray's default kills it after a second, and the next no-CPU task pays a new process.
KEPT_WORKER = """
import json, os, sys, time
import ray
from jobs.config import load_config
from jobs.pipeline import start_ray

config = load_config(sys.argv[1], overrides={"input": "."}, settings=["resources.num_cpus=2"])
start_ray(config)

@ray.remote(num_cpus=1)
def hold(seconds):
    time.sleep(seconds)

@ray.remote(num_cpus=0)
def pid():
    return os.getpid()

busy = [hold.remote(15) for _ in range(2)]
first = ray.get(pid.remote())
time.sleep(3)  # three times Ray's default
second = ray.get(pid.remote())
print(json.dumps({"first": first, "second": second}))
ray.shutdown()
"""


def test_the_local_instance_keeps_an_idle_worker_process_for_the_next_task():
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update({"RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(REPO)})
    done = subprocess.run(
        [sys.executable, "-c", KEPT_WORKER, str(REPO / "configs" / "local.yaml")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    pids = json.loads(done.stdout.strip().splitlines()[-1])
    assert pids["second"] == pids["first"]
