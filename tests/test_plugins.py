"""Third-party chunking strategies and embedding backends: a class of another package, named by
an entry point (groups `mdindex.strategies`, `mdindex.embedders`) or by its dotted path, resolved
the same way in the driver and in a build's Ray workers; its `name` and declared `version` are in
its cache keys and the build's settings key.

The packages are `tests/fixtures/plugins/mdx_paragraphs` and `mdx_hashing`, with a dist-info
beside them (as pip would install them), put on `sys.path` rather than installed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from jobs_support import ON_RAY

from chunking import chunk_document, chunk_source, strategy_key
from chunking.strategy import Strategy, register, strategy_class
from embedding import DocRequest, EmbeddingCache, embed_with_cache, load_embedder, model_keys
from embedding.encoder import model_encoder
from embedding.models import ModelNotFound, check_model, model_digest
from jobs.config import ConfigError, config_from_dict
from jobs.reindex import main

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "tests" / "fixtures" / "plugins"
# The fixture packages as dotted paths from the repository's root: a build's Ray workers have the
# driver's working folder (the root, where the suite runs) on their import path.
DOTTED = "tests.fixtures.plugins.mdx_paragraphs:Paragraphs"
DOTTED_BACKEND = "tests.fixtures.plugins.mdx_hashing:HashingEmbedder"
DOCUMENT = "# Title\n\nFirst paragraph,\nits second line.\n\n## Part\n\nSecond one.\n\n- a list\n"


@pytest.fixture
def installed(monkeypatch) -> None:
    """The fixture package and its dist-info on the import path, as an installed package is."""
    monkeypatch.syspath_prepend(str(PLUGIN))


def test_an_installed_strategy_is_named_by_its_entry_point(installed):
    chunks = chunk_document(DOCUMENT, strategy="paragraphs", document_id="a.md")
    assert [(c.text, c.headings_path, c.start_line) for c in chunks] == [
        ("First paragraph,\nits second line.", ("Title",), 3),
        ("Second one.", ("Title", "Part"), 8),
        ("- a list", ("Title", "Part"), 10),
    ]
    document = chunk_source(DOCUMENT, strategy="paragraphs", min_chars=12)
    assert (document.strategy, document.strategy_key) == ("paragraphs", "paragraphs-v1-12")
    config = config_from_dict({"input": str(PLUGIN), "chunking": {"strategy": "paragraphs"}})
    assert config.chunking.key == "paragraphs-v1-1"
    # known names, in the config's error, are the built-in ones and the installed ones
    with pytest.raises(ConfigError, match=r"^chunking\.strategy: .*'nope' \(known: .*paragraphs"):
        config_from_dict({"input": str(PLUGIN), "chunking": {"strategy": "nope"}})
    with pytest.raises(ConfigError, match=r"^chunking\.options\.max_tokens: unknown option"):
        chunking = {"strategy": "paragraphs", "options": {"max_tokens": 3}}
        config_from_dict({"input": str(PLUGIN), "chunking": chunking})


def test_a_dotted_path_names_a_strategy_class_and_its_version_is_in_the_cache_key(installed):
    from jobs.discovery import settings_key

    first, second = "mdx_paragraphs:Paragraphs", "mdx_paragraphs:ParagraphsV2"
    assert strategy_class(first).name == strategy_class(second).name == "paragraphs"
    assert (strategy_key(first), strategy_key(second)) == ("paragraphs-v1-1", "paragraphs-v2-1")
    assert chunk_document(DOCUMENT, strategy=second) == chunk_document(DOCUMENT, strategy=first)
    # a new version of the strategy is new settings: the next build re-chunks every source
    configs = [
        config_from_dict({"input": str(PLUGIN), "chunking": {"strategy": name}})
        for name in (first, second)
    ]
    assert settings_key(configs[0], "w") != settings_key(configs[1], "w")
    with pytest.raises(ConfigError, match=r"^chunking\.strategy: .*No module named 'nope'"):
        config_from_dict({"input": str(PLUGIN), "chunking": {"strategy": "nope.x:Y"}})


class Unversioned(Strategy):
    name = "unversioned"


class Builtin(Strategy):
    name = "semantic"
    version = "1"


class Slashed(Strategy):
    name = "a/b"
    version = "1"


class BadVersion(Strategy):
    name = "bad_version"
    version = "1/2"


class NotAStrategy:
    name = "plain"
    version = "1"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("test_plugins:Unversioned", "its version '' must be set"),
        ("test_plugins:BadVersion", "its version '1/2' must be set"),
        ("test_plugins:Builtin", "its name 'semantic' must be .* no built-in"),
        ("test_plugins:Slashed", "its name 'a/b' must be"),
        ("test_plugins:NotAStrategy", "is no subclass of"),
        ("test_plugins:Missing", "cannot import it .*AttributeError"),
        (
            "misnamed",
            r"'misnamed' \(entry point mdx_paragraphs:Paragraphs\): its name 'paragraphs' is",
        ),
    ],
)
def test_a_third_party_strategy_needs_a_name_of_its_own_and_a_version(installed, name, message):
    """Its name and version head its cache key, a folder's name: no built-in strategy's name (its
    chunks would share that strategy's entries), nothing a path cannot hold, and a version, so
    that chunks of an older version are not taken for its own."""
    with pytest.raises(ValueError, match=message):
        strategy_class(name)


def test_register_refuses_a_third_party_strategy():
    """Registered on import, it would be known in the driver alone, never in a build's workers."""
    with pytest.raises(ValueError, match="no built-in strategy; name a third-party one by"):
        register(Unversioned)
    with pytest.raises(ValueError, match="unknown chunking strategy 'unversioned'"):
        strategy_class("unversioned")


def test_an_installed_embedding_backend_is_named_in_place_of_a_model(installed, tmp_path):
    """What a build asks of a model, for a backend: it passes the driver's checks, its version is
    the settings key's model digest, the chunk tasks tokenize nothing for it (no encoder), its
    keys are known once it is made (no `model_keys`), and its vectors are cached under its key."""
    check_model("hashing")
    assert model_digest("hashing") == "hashing-v1"
    assert model_encoder("hashing", 256) is None and model_keys("hashing", device="cpu") is None
    embedder = load_embedder("hashing", device="cpu", dtype="fp32", num_threads=1)
    assert (embedder.key, embedder.dim) == ("hashing-v1-64-256", 64)
    cache = EmbeddingCache(str(tmp_path / "cache"))
    request = DocRequest("paragraphs-v1-1", "0" * 64, ("first text", "second text"))
    [cold] = embed_with_cache(embedder, cache, [request])
    [warm] = embed_with_cache(load_embedder("hashing"), cache, [request])
    assert (cold.embedded, warm.cache_hit) == (2, True)
    assert np.array_equal(warm.vectors, embedder.embed(["first text", "second text"]))


class MiniLM:
    name = "minilm"
    version = "1"


class NoKeyVersion:
    name = "nokey"
    version = "1"
    key = query_key = encoder_digest = "nokey-64"
    dim = 64

    def __init__(self, **options):
        pass


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("test_plugins:Unversioned", "embedding backend 'test_plugins:Unversioned': its version"),
        ("test_plugins:MiniLM", "its name 'minilm' must be"),
        ("nope.x:Y", "embedding backend 'nope.x:Y': cannot import it"),
    ],
)
def test_a_backend_that_cannot_head_a_cache_key_is_refused_before_any_work(model, message):
    """Refused by the driver's model check (exit 2 before Ray starts)."""
    with pytest.raises(ModelNotFound, match=message):
        check_model(model)


def test_a_backend_whose_keys_do_not_carry_its_version_is_refused_as_it_loads():
    with pytest.raises(ValueError, match="its key 'nokey-64' must start with 'nokey-v1'"):
        load_embedder("test_plugins:NoKeyVersion")


@pytest.mark.usefixtures("ray_session")
def test_a_build_chunks_and_embeds_with_third_party_classes_in_its_ray_workers(
    tmp_path, monkeypatch
):
    """The Ray workers and actors resolve the dotted paths themselves (nothing registered in the
    driver reaches them); the tables name the strategy's key, version included, and hold the
    backend's vectors."""
    monkeypatch.syspath_prepend(str(ROOT))  # the driver's import path as the workers'
    corpus = tmp_path / "in" / "guides"
    corpus.mkdir(parents=True)
    (corpus / "a.md").write_text(DOCUMENT)
    output = tmp_path / "out"
    code = main(["--config", str(ROOT / "configs" / "local.yaml"),
                 "--input", str(corpus.parent), "--output", str(output),
                 "--set", f"chunking.strategy={DOTTED}",
                 "--set", "chunking.options={}",
                 "--set", f"embedding.model={DOTTED_BACKEND}", *ON_RAY])  # fmt: skip
    assert code == 0
    rows = pq.read_table(output / "_index" / "chunks" / "guides.parquet").to_pylist()
    assert [(row["text"], row["strategy"]) for row in rows] == [
        ("First paragraph,\nits second line.", "paragraphs-v1-1"),
        ("Second one.", "paragraphs-v1-1"),
        ("- a list", "paragraphs-v1-1"),
    ]
    expected = load_embedder(DOTTED_BACKEND).embed([row["text"] for row in rows])
    assert np.array_equal(np.array([row["embedding"] for row in rows], np.float32), expected)
    report = json.loads((output / "_reindex" / "report.json").read_text())
    assert (report["strategy"], report["counters"]["embed"]["model_keys"]) == (
        DOTTED,
        ["hashing-v1-64-256"],
    )
