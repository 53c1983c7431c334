"""benchmarks/pipeline.py's --json: its path is made and written before any build, so a path
that cannot be written fails at once, and a run that stops midway leaves valid JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.pipeline import GPU_QUERY, gpu_query, main, mean_utilisation


def test_json_is_written_before_the_first_build(tmp_path: Path):
    saved = tmp_path / "out" / "bench.json"  # its folder not there yet
    missing = tmp_path / "no-corpora"
    with pytest.raises(FileNotFoundError, match="no-corpora"):
        main(["--json", str(saved), "--corpora-dir", str(missing), "--cache-dir", str(tmp_path)])
    document = json.loads(saved.read_text())
    assert document["builds"] == [] and document["serial"] == [] and document["machine"]["cpu"]
    assert document["command"][:2] == ["--json", str(saved)]


def test_gpu_utilisation_is_the_mean_over_every_gpu_listed():
    assert mean_utilisation("100\n0\n50\n50\n") == 50.0
    assert mean_utilisation("37\n") == 37.0
    assert mean_utilisation("") is None


def test_gpu_utilisation_is_sampled_on_the_gpus_the_build_may_use():
    """The sampler asked for every GPU on the machine whatever CUDA_VISIBLE_DEVICES said."""
    assert gpu_query(None) == gpu_query("") == GPU_QUERY
    assert gpu_query("2") == [*GPU_QUERY, "--id=2"]
    assert gpu_query("0, 3") == [*GPU_QUERY, "--id=0,3"]
    assert gpu_query("GPU-8f2a,GPU-11b0") == [*GPU_QUERY, "--id=GPU-8f2a,GPU-11b0"]
