"""benchmarks/actor.py cuts a corpus into embedding calls with the job's own helpers: it must keep
up with their signatures (a CPU and a GPU config; no GPU needed to size a pool)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.actor import chunked_calls
from benchmarks.pipeline import JOB_CONFIG, model_settings
from jobs.config import load_config


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_chunked_calls_cut_a_corpus_as_a_build_does(tmp_path: Path, device: str):
    for topic in ("a", "b"):
        (tmp_path / "input" / topic).mkdir(parents=True)
        for page in range(3):
            text = f"# Page {page}\n\nSome words.\n\n## More\n\nMore words.\n"
            (tmp_path / "input" / topic / f"p{page}.md").write_text(text)
    settings = [f"{k}={tmp_path / k}" for k in ("input", "output", "cache")]
    settings += model_settings(tmp_path / "models", "minilm", device)
    calls, pool, encoder = chunked_calls(load_config(str(JOB_CONFIG), settings=settings), 2)
    assert sum(call.num_rows for call in calls) > 0
    assert pool.actors >= 1 and encoder is not None
