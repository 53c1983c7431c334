"""The private Ray instance a local build starts (`jobs.local_ray.start_ray`), in a new process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Two one-CPU tasks hold both CPUs, so a no-CPU task gets a worker process of its own (Ray has no
# idle one left). Once that task is done, its process is one idle worker more than there are
# CPUs: Ray's default kills it after a second, and the next no-CPU task pays a new process.
KEPT_WORKER = """
import json, os, sys, time
import ray
from jobs.config import load_config
from jobs.local_ray import start_ray

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
time.sleep(2)  # twice Ray's default
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


@pytest.mark.parametrize(
    ("config", "settings", "asks"),
    [
        # The GPU config on a machine whose Ray instance has no GPU (none is made visible to it),
        # with a model this machine has (its own, not in the hub cache here, is refused first).
        (
            "cluster-gpu.yaml",
            ["embedding.model=minilm"],
            "an embedding actor (resources.embed) asks for 2 CPUs and 0.5 GPU",
        ),
        (
            "local.yaml",
            ["resources.num_cpus=1", "resources.index.num_cpus=2"],
            "a topic's reduce (resources.index) asks for 2 CPUs and no GPU",
        ),
    ],
)
def test_a_stage_the_local_instance_cannot_hold_fails_the_build_at_once(
    tmp_path, config, settings, asks
):
    """Ray Data would wait for ever for a node that a private local instance never gets: the build
    exits 2 (a config error for this machine) before it starts a stage, naming what is missing."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update({"RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""})
    output = tmp_path / "out"
    command = [sys.executable, "-m", "jobs.reindex", "--config", str(REPO / "configs" / config)]
    command += ["--input", str(REPO / "examples" / "corpus"), "--output", str(output)]
    command += ["--cache", str(tmp_path / "cache")]
    for setting in settings:
        command += ["--set", setting]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    assert asks in done.stderr and "a local instance never grows" in done.stderr, done.stderr
    assert ("embedding.device: cpu" in done.stderr) == (config == "cluster-gpu.yaml")
    assert not output.exists()


JOIN = """
import logging, sys
from jobs.config import load_config
from jobs.local_ray import start_ray

logging.basicConfig(level=logging.INFO)
start_ray(load_config(sys.argv[1], overrides={"input": "."}, settings=sys.argv[2:]))
"""


def test_a_stage_no_node_of_a_joined_cluster_can_hold_is_a_warning(ray_session):
    """A cluster may grow (its autoscaler adds nodes): the build waits for one, and says so."""
    import ray

    # this process's RAY_AUTH_MODE: the child must authenticate as the session's Ray expects
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    env["PYTHONPATH"] = str(REPO)
    config = str(REPO / "configs" / "local.yaml")
    done = subprocess.run(
        [sys.executable, "-c", JOIN, config, "resources.index.num_cpus=512"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    warning = (
        "a topic's reduce (resources.index) asks for 512 CPUs and no GPU, and no node of the "
        "cluster has that: the build waits until the autoscaler adds one"
    )
    assert warning in done.stderr, done.stderr[-3000:]
