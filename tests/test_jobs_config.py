"""Config loading and validation: shipped configs load; bad ones fail early with exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mounts_support import can_mount_privately, private_mounts

from indexing import IndexSettings
from jobs.config import ConfigError, JobConfig, config_from_dict, load_config
from jobs.reindex import main
from jobs.storage import Storage
from tests.jobs_support import unstamped

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["local.yaml", "cluster-gpu.yaml"])
def test_shipped_configs_load_and_validate(name):
    config = load_config(str(ROOT / "configs" / name), overrides={"input": "s3://bucket/docs"})
    assert isinstance(config, JobConfig)
    assert config.input == "s3://bucket/docs"
    assert config.output and config.cache


def test_cluster_gpu_config_is_the_gpu_setup():
    config = load_config(str(ROOT / "configs" / "cluster-gpu.yaml"))
    assert config.embedding.model == "mixedbread-ai/mxbai-embed-large-v1"
    assert config.embedding.dtype == "fp16"
    embed = config.resources.embed
    assert embed.actors * embed.num_gpus == 1  # two actors share the first GPU node's GPU
    workers = yaml.safe_load((ROOT / "cluster.yaml").read_text())["available_node_types"]
    assert embed.max_actors * embed.num_gpus == workers["gpu_worker"]["max_workers"]
    assert embed.num_cpus * embed.actors == 4  # half a g5.2xlarge's CPUs: the rest chunk
    assert all(uri.startswith("s3://") for uri in (config.input, config.output, config.cache))


def test_cluster_yaml_validates_against_the_ray_launcher_schema():
    from ray.autoscaler._private.util import prepare_config, validate_config

    cluster = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    validate_config(prepare_config(cluster))
    workers = cluster["available_node_types"]["gpu_worker"]
    assert workers["max_workers"] > workers["min_workers"] == 0  # autoscaling GPU group
    assert any("pip install" in cmd and "-e" in cmd for cmd in cluster["setup_commands"])


def test_defaults_output_in_place_and_cache_under_output(tmp_path):
    config = config_from_dict({"input": str(tmp_path)})
    assert config.output == str(tmp_path)
    assert config.cache == f"{tmp_path}/.embedding-cache"
    s3 = config_from_dict({"input": "s3://b/docs", "output": "s3://b/out"})
    assert s3.cache == "s3://b/out/.embedding-cache"
    # in place whatever the trailing slashes: a build took s3://b/docs/ for a separate output of
    # s3://b/docs, and deleted a deleted topic's topic-spec.md whole, the person's part too
    same = config_from_dict({"input": "s3://b/docs/", "output": "s3://b/docs"})
    assert same.input == same.output == "s3://b/docs"
    # Hadoop's s3a:// is the same place: it was a separate output of s3://b/docs (in place), and
    # skipped the S3 checks (the bucket's name, the client's timeouts and options)
    same = config_from_dict({"input": "s3a://b/docs", "output": "s3://b/docs/"})
    assert same.input == same.output == "s3://b/docs"
    assert same.storage_options["config_kwargs"]["read_timeout"]
    with pytest.raises(ConfigError, match="output: s3://b holds the input s3://b/docs"):
        config_from_dict({"input": "s3://b/docs", "output": "s3a://b"})
    # a folder named with `::` is a folder, not a chain of filesystems
    assert config_from_dict({"input": f"{tmp_path}/docs::v2"}).input == f"{tmp_path}/docs::v2"


def test_symbolic_links_are_not_followed_unless_the_config_says_so(tmp_path):
    assert config_from_dict({"input": str(tmp_path)}).sources.follow_symlinks is False
    config = load_config(
        None, overrides={"input": str(tmp_path)}, settings=["sources.follow_symlinks=true"]
    )
    assert config.sources.follow_symlinks is True
    with pytest.raises(ConfigError, match="sources.follow_symlink: unknown key"):
        config_from_dict({"input": str(tmp_path), "sources": {"follow_symlink": True}})


def test_a_default_cache_linked_out_of_the_output_is_refused(tmp_path, capsys):
    docs, elsewhere = tmp_path / "docs", tmp_path / "elsewhere"
    docs.mkdir()
    elsewhere.mkdir()
    (docs / ".embedding-cache").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(ConfigError, match="cache: the default .* resolves to .*elsewhere"):
        config_from_dict({"input": str(docs)})
    explicit = config_from_dict({"input": str(docs), "cache": str(docs / ".embedding-cache")})
    assert explicit.cache == str(elsewhere)  # a cache named explicitly is the user's choice
    path = tmp_path / "c.yaml"
    path.write_text("embedding:\n  device: cpu\n")
    assert main(["--config", str(path), "--input", str(docs)]) == 2
    assert "remove the link or set `cache`" in capsys.readouterr().err
    assert os.listdir(elsewhere) == []


def test_relative_local_paths_become_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = config_from_dict({"input": "docs", "output": "file://out"})
    assert config.input == str(tmp_path / "docs")
    assert config.output == str(tmp_path / "out")
    # RFC 8089's `file://localhost/p` is `/p`: it was the folder `localhost/p` under this one.
    config = config_from_dict({"input": "docs", "output": f"file://localhost{tmp_path}/o"})
    assert config.output == str(tmp_path / "o")
    # A model folder too: `_index/model.json` named `models/mini`, which `query --question` run
    # in another folder could not load (exit 1), and `~/models/mini` was no model at all.
    (tmp_path / "models" / "mini").mkdir(parents=True)
    (tmp_path / "minilm").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path))
    for model in ("models/mini", "~/models/mini", "models/../models/mini/"):
        config = config_from_dict({"input": "docs", "embedding": {"model": model}})
        assert config.embedding.model == str(tmp_path / "models" / "mini")
    for model in ("minilm", "org/model-on-the-hub", "s3://b/models/mini"):
        config = config_from_dict({"input": "docs", "embedding": {"model": model}})
        assert config.embedding.model == model
    # where an actor copies a remote model: `~/copies` was a folder `~` in the actor's folder
    for local_dir, absolute in (("~/copies", tmp_path / "copies"), ("c", tmp_path / "c")):
        config = config_from_dict({"input": "docs", "embedding": {"local_dir": local_dir}})
        assert config.embedding.local_dir == str(absolute)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"embedding": {"batch_sizee": 3}}, "embedding.batch_sizee: unknown key; expected one of"),
        ({"resources": {"embed": {"actors": 0}}}, "resources.embed.actors: must be >= 1"),
        ({"resources": {"retries": -1}}, "resources.retries: must be >= 0"),
        # Ray's task and actor options are C ints: exit 1 with an OverflowError after Ray started.
        ({"resources": {"retries": 2**31}}, "resources.retries: must be <= 1000"),
        ({"resources": {"embed": {"num_gpus": "1"}}}, "resources.embed.num_gpus: expected a"),
        ({"resources": {"chunk": {"batch_mb": "big"}}}, "resources.chunk.batch_mb: expected a num"),
        # PyYAML reads 1e3 as text (YAML 1.1 floats need a dot and a signed exponent)
        (
            {"resources": {"chunk": {"batch_mb": "5e-1"}}},
            "expected a number, got '5e-1' (text to YAML, which reads 5.0e-1 as a number)",
        ),
        ({"resources": {"embed": {"batch_size": "1e3"}}}, "'1e3' (text to YAML, which reads 1000 "),
        (
            {"resources": {"embed": {"mix_documents": True}}},
            "resources.embed.mix_documents: unknown key (removed: chunks of many documents",
        ),
        (
            {"resources": {"chunk": {"batch_size": 8}}},
            "resources.chunk.batch_size: unknown key (replaced by resources.chunk.batch_mb",
        ),
        ({"embedding": {"dtype": "int8"}}, "embedding.dtype: 'int8' is not one of"),
        ({"embedding": {"device": "tpu"}}, "embedding.device: 'tpu' is not one of"),
        ({"embedding": {"normalize": "yes"}}, "embedding.normalize: expected true or false"),
        ({"failure_policy": "ignore"}, "failure_policy: 'ignore' is not one of: continue, abort"),
        # YAML 1.1 reads `tenant: no` as false and a digits-only revision as a number
        ({"tenant": False}, "tenant: expected a string, got False (YAML read it as bool: quote"),
        ({"embedding": {"revision": 1234567}}, "got 1234567 (YAML read it as int: quote it)"),
        ({"tenant": ["a"]}, "tenant: expected a string, got ['a']"),
        ({"prompts": {"threshold": 1.5}}, "prompts.threshold: must be <= 1.0"),
        (
            {"sources": {"max_deleted_fraction": 2}},
            "sources.max_deleted_fraction: must be <= 1.0",
        ),
        ({"sources": {"globs": []}}, "sources.globs: expected a non-empty list of strings"),
        # globs match file names: `**/*.md` and `""` matched none, an empty index built, exit 0
        (
            {"sources": {"globs": ["*.md", "**/*.md"]}},
            "sources.globs: '**/*.md' holds a '/', and no file name does: a glob matches the name",
        ),
        ({"sources": {"globs": ["docs/*.txt"]}}, "never its folders; write '*.txt'"),
        ({"sources": {"globs": ""}}, "sources.globs: an empty pattern matches no file name"),
        ({"chunking": {"strategy": "nope"}}, "chunking.strategy: unknown chunking strategy"),
        # named "chunking: unknown option 'min_tokenz'", no dotted key, and the options listed as
        # known the build sets per source (document_path), which the config refuses
        (
            {"chunking": {"options": {"min_tokenz": 1}}},
            "chunking.options.min_tokenz: unknown option of strategy semantic; expected one of: "
            "embed_context, keep_short_tail, max_tokens, min_tokens, min_tokens_deeper, tokenizer",
        ),
        ({"chunking": {"options": {"max_tokens": "x"}}}, "chunking.options: option 'max_tokens'"),
        # the strategy changed (`--set chunking.strategy=structural` on configs/local.yaml), its
        # options left for semantic: said as an unknown option alone
        (
            {"chunking": {"strategy": "structural", "options": {"min_tokens": 150}}},
            "unknown option of strategy structural; expected one of: embed_context, hard_max, "
            "overlap_percent, soft_max, target, tokenizer (min_tokens is an option of semantic: "
            "chunking.options hold the options of chunking.strategy alone",
        ),
        ({"embedding": []}, "embedding: expected a mapping"),
        # YAML's dotted key was "resources.embed.actors: unknown key", the key the README lists
        (
            {"resources": {"embed.actors": 2}},
            "resources.embed.actors: unknown key (one key with dots; YAML nests it: "
            "embed: {actors: …}); expected one of: num_cpus,",
        ),
        ({"output": "memory://x"}, "output: memory:// lives in one process"),
        ({"resources": {"embed": {"actors": 3, "max_actors": 2}}}, "resources.embed.max_actors"),
        ({"embedding": {"token_budget": 10**9}}, "embedding.token_budget: must be <= 1048576"),
        ({"sources": {"exclude": [""]}}, "sources.exclude: an empty pattern matches no path"),
        ({"sources": {"exclude": ["/node_modules"]}}, "sources.exclude: '/node_modules': patterns"),
        ({"sources": {"exclude": ["../x"]}}, "sources.exclude: '../x': patterns match paths"),
        # an unset variable: every chunk id and record of the index carried "" or "${TENANT}"
        ({"tenant": " "}, "tenant: an empty string (an unset variable?)"),
        ({"tenant": "${TENANT}"}, "tenant: ${TENANT}: the config expands no variables"),
        # Non-finite numbers passed (NaN fails no comparison) and failed later: a budget of .inf
        # failed every source (OverflowError in the interval timer), embed num_cpus .inf exit 1
        # after Ray started, a threshold of .nan too, max_deleted_fraction .nan let a build
        # delete any share, and report.json held NaN (not JSON).
        ({"chunking": {"timeout_seconds": float("inf")}}, "chunking.timeout_seconds: must be a fi"),
        ({"chunking": {"timeout_seconds": 10**400}}, "chunking.timeout_seconds: must be a finite"),
        ({"chunking": {"timeout_seconds": 1e10}}, "chunking.timeout_seconds: must be <= 86400"),
        ({"resources": {"embed": {"num_cpus": float("inf")}}}, "resources.embed.num_cpus: must"),
        ({"prompts": {"threshold": float("nan")}}, "prompts.threshold: must be a finite number"),
        ({"sources": {"max_deleted_fraction": float("nan")}}, "max_deleted_fraction: must be a"),
        # An empty path (an unset shell variable) was no path: an in-place build into the corpus.
        ({"output": ""}, "output: an empty string (an unset variable?)"),
        ({"cache": " "}, "cache: an empty string"),
        ({"input": ""}, "input: an empty string"),
        # an empty model name read the current folder as the model ("no config.json in /cwd")
        ({"embedding": {"model": " "}}, "embedding.model: an empty string (an unset variable?)"),
        ({"embedding": {"local_dir": ""}}, "embedding.local_dir: an empty string (an unset"),
        ({"embedding": {"device": "cuda:\u00b2"}}, "embedding.device: 'cuda:\u00b2' is not one of"),
        ({"storage_options": {"config_kwargs": [1]}}, "storage_options.config_kwargs: expected a"),
        ({"storage_options": {"client_kwargs": 5}}, "storage_options.client_kwargs: expected a m"),
        # A CPU pool's actors each loaded the model on the GPU, unaccounted for by Ray; cuda:1 in
        # a Ray GPU actor (which sees its GPU as cuda:0) failed at the actor's start, after Ray
        # and the chunking had started; two GPUs an actor idled one.
        ({"embedding": {"device": "cuda"}}, "embedding.device: cuda needs resources.embed.num_gp"),
        (
            {"embedding": {"device": "cuda:1"}, "resources": {"embed": {"num_gpus": 1}}},
            "embedding.device: cuda:1 picks no GPU in a Ray actor",
        ),
        # refused first: "needs resources.embed.num_gpus > 0", then, with it set, this
        ({"embedding": {"device": "cuda:0"}}, "embedding.device: cuda:0 picks no GPU in a Ray"),
        ({"resources": {"embed": {"num_gpus": 2}}}, "resources.embed.num_gpus: must be <= 1.0"),
        # a GPU share per actor held and never used
        (
            {"embedding": {"device": "cpu"}, "resources": {"embed": {"num_gpus": 0.5}}},
            "embedding.device: cpu with resources.embed.num_gpus 0.5 holds a GPU share per emb",
        ),
        # Ray refused both after it had started (a share finer than 0.0001; a raylet given 1e12
        # CPUs, or 2**31, never started)
        (
            {"resources": {"embed": {"num_gpus": 0.00005}}},
            "resources.embed.num_gpus: 5e-05 is below Ray's smallest share (0.0001); give 0",
        ),
        ({"resources": {"num_cpus": 10**12}}, "resources.num_cpus: must be <= 1000000, got 1"),
        ({"resources": {"embed": {"threads": 0}}}, "resources.embed.threads: must be >= 1, got 0"),
        ({"resources": {"embed": {"threads": 1.5}}}, "resources.embed.threads: expected an inte"),
        # the wait for a node that can hold a stage: seconds, or null for no bound
        ({"resources": {"node_wait_seconds": -1}}, "resources.node_wait_seconds: must be >= 0"),
        ({"resources": {"in_process_sources": -1}}, "resources.in_process_sources: must be >= 0"),
        ({"resources": {"in_process_sources": 1.5}}, "resources.in_process_sources: expected an"),
        ({"resources": {"node_wait_seconds": "15m"}}, "resources.node_wait_seconds: expected a n"),
        ({"resources": {"node_wait_seconds": True}}, "resources.node_wait_seconds: expected a n"),
        ({"resources": {"node_wait_seconds": float("inf")}}, "resources.node_wait_seconds: must b"),
        ({"resources": {"node_wait_seconds": 10**6}}, "resources.node_wait_seconds: must be <= 8"),
        ({"resources": {"node_wait": 60}}, "resources.node_wait: unknown key"),
    ],
)
def test_bad_values_are_rejected_with_their_dotted_key(raw, message):
    with pytest.raises(ConfigError) as caught:
        config_from_dict({"input": "/tmp/docs", **raw})
    assert message in str(caught.value)


def test_uris_that_name_no_filesystem_or_no_folder_are_refused(tmp_path):
    """These were exit 1 with a traceback (s4://, S3://, ~nobody, a file as the output or cache,
    an http output), or, for s3:/bucket (a slash missing), a build into a local folder `s3:`."""
    notes = tmp_path / "notes.md"
    notes.write_text("# a file\n")
    for raw, message in [
        ({"input": "s4://bucket/docs"}, "input: s4://bucket/docs: Protocol not known: s4"),
        ({"output": "S3://b/out"}, "output: S3://b/out: Protocol not known: S3; did you mean s3"),
        ({"output": "s3:/b/out"}, "output: s3:/b/out reads as a local folder s3:; did you mean s3"),
        ({"cache": "file:/tmp/c"}, "cache: file:/tmp/c reads as a local folder file:; did you me"),
        ({"input": "~no-such-user/docs"}, "input: ~no-such-user/docs: no such user's home folder"),
        ({"output": str(notes)}, f"output: {notes} is a file; name a folder"),
        ({"cache": str(notes)}, f"cache: {notes} is a file; name a folder"),
        ({"output": "https://example.com/out"}, "output: https://example.com/out: http(s):// is"),
        # a build into a local folder named `${OUT}` (YAML expands no variables), exit 0
        ({"output": "${OUT}/docs"}, "output: ${OUT}/docs: the config expands no variables (${O"),
        ({"cache": "/srv/$USER/cache"}, 'no variables ($USER); give the path, or --cache "$USER"'),
        # on S3 too: a build into the prefix `${OUT}` (exit 0), the bucket `${B}` (exit 1)
        ({"output": "s3://b/${OUT}"}, "output: s3://b/${OUT}: the config expands no variables"),
        ({"input": "s3://$B/docs"}, "input: s3://$B/docs: the config expands no variables ($B)"),
        # a bucket botocore refuses to name: exit 1, a 60-line traceback
        ({"output": "s3://my bucket/o"}, "output: s3://my bucket/o: 'my bucket' is no S3 bucket"),
        ({"embedding": {"model": "s3://b%/m"}}, "embedding.model: s3://b%/m: 'b%' is no S3 bucket"),
        # file://$DOCS, DOCS unset: the working directory as the corpus, exit 0; s3://$BUCKET/out:
        # the bucket `out`
        ({"input": "file://"}, "input: file://: an empty path (an unset variable?)"),
        ({"output": "s3:///out"}, "output: s3:///out: no bucket or host (an unset variable?)"),
        ({"cache": "s3://"}, "cache: s3://: no bucket or host"),
        # a release archive: exit 1 after the model loaded ("Is a directory", naming the working
        # directory); an archive output or cache the same
        (
            {"input": f"zip://docs::file://{tmp_path}/docs.zip"},
            f"input: zip://docs::file://{tmp_path}/docs.zip: an archive or a chain of filesystems",
        ),
        ({"output": "tar:///r.tar"}, "output: tar:///r.tar: an archive or a chain of filesystems"),
        ({"cache": "simplecache::s3://b/c"}, "cache: simplecache::s3://b/c: an archive or a chain"),
        # keys take `..` as it is: the output `docs/../out` lay inside the input `docs`, whose
        # walk read it back; `//`, an unset variable's, was a prefix with an empty folder
        ({"output": "s3://b/docs/../out"}, "output: s3://b/docs/../out: '..' in an object store"),
        ({"cache": "s3://b/./c"}, "cache: s3://b/./c: '.' in an object store's key is taken as"),
        ({"input": "s3://b//docs/"}, "input: s3://b//docs/: an empty folder name (//: an unset"),
        # an http(s) input built in place: read and embedded whole, then exit 1 (PUT refused)
        (
            {"input": "https://example.com/docs", "output": None},
            "output: not set, so the build would write into its input https://example.com/docs, "
            "which is read-only",
        ),
    ]:
        with pytest.raises(ConfigError) as caught:
            config_from_dict({"input": str(tmp_path), **raw})
        assert message in str(caught.value)
    with pytest.raises(ConfigError, match="--config: s4://b/c.yaml: Protocol not known: s4"):
        load_config("s4://b/c.yaml")


def test_an_output_inside_the_input_or_holding_it_is_refused(tmp_path, capsys):
    """Output `docs/guides` of input `docs` wrote its root topic's topic-spec.md over the input's
    `guides/topic-spec.md` (a person's notes lost); an input inside the output is the same. An
    output under a folder the listing skips (`_site`) holds no topic's folder: it is kept."""
    docs, real = tmp_path / "docs", tmp_path / "real"
    docs.mkdir()
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    inside, holds = "lies inside the input", "holds the input"
    for source, output, message in [
        (f"{docs}/", f"{docs}/guides/", f"output: {docs}/guides {inside} {docs}: its topics' f"),
        (str(docs), f"{tmp_path}/x/../docs/out", f"output: {docs}/out {inside} {docs}:"),
        (f"{tmp_path}/link", f"{real}/out", f"output: {real}/out {inside} {real}:"),
        (str(docs), str(tmp_path), f"output: {tmp_path} {holds} {docs}:"),
        ("s3://b/docs/", "s3://b/docs/out", "output: s3://b/docs/out lies inside the input s3:"),
        ("s3://b/docs", "s3://b", "output: s3://b holds the input s3://b/docs:"),
    ]:
        with pytest.raises(ConfigError) as caught:
            config_from_dict({"input": source, "output": output})
        assert message in str(caught.value)
    for source, output in [
        (docs, f"{docs}/"),  # in place
        (docs, f"{docs}2"),  # a sibling
        ("s3://b/docs", "s3://b/docs2"),
        (docs, f"{docs}/_site/html"),  # a folder the listing skips
        ("s3://b/docs", "s3://b/docs/.out"),
    ]:
        config_from_dict({"input": str(source), "output": output})
    config = str(ROOT / "configs" / "local.yaml")
    argv = ["--config", config, "--input", str(docs), "--output", f"{docs}/out", "--dry-run"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "out lies inside the input" in err and err.count("\n") == 1, err


# Run in a mount namespace of its own, where `alias` is `docs` bind-mounted: one folder, two
# names that no symbolic link joins (as `Docs` and `docs` on a case-insensitive filesystem).
_BIND_MOUNTED = """
import sys
from jobs.config import ConfigError, config_from_dict
docs, alias = sys.argv[1:]
print("same", config_from_dict({"input": docs, "output": alias}).output)
print("skipped", config_from_dict({"input": docs, "output": f"{alias}/_site"}).output)
for source, output in [(docs, f"{alias}/out"), (f"{alias}/guides", docs)]:
    try:
        config_from_dict({"input": source, "output": output})
    except ConfigError as exc:
        print(exc)
"""


def test_an_output_that_is_the_input_under_another_name_is_in_place_or_refused(tmp_path):
    """An output that is the input's folder under another name (a bind mount; `Docs` for `docs`
    on macOS's case-insensitive disk) was a separate output written into its own input, and an
    output inside it under that name passed the nesting check: both are told by device and
    inode now, an in-place build and a refusal."""
    if not can_mount_privately():
        pytest.skip("needs a mount namespace of its own (unshare --mount)")
    docs, alias = tmp_path / "docs", tmp_path / "alias"
    (docs / "guides").mkdir(parents=True)
    alias.mkdir()
    python = [sys.executable, "-c", _BIND_MOUNTED, str(docs), str(alias)]
    done = subprocess.run(
        [*private_mounts(), "sh", "-c", 'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh",
         str(docs), str(alias), *python],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"same {docs}",  # in place
        f"skipped {alias}/_site",  # a folder the listing skips
        f"output: {alias}/out lies inside the input {docs} (it is {docs}/out): its topics' files "
        "would land in the input's folders (a topic-spec.md overwritten); give an output outside "
        "the input, or leave it out to build in place",
        f"output: {docs} holds the input {alias}/guides: its topics' files would land in the "
        "input's folders (a topic-spec.md overwritten); give an output outside the input, or "
        "leave it out to build in place",
    ]


def test_a_file_uri_is_percent_decoded_and_a_plain_path_is_not(tmp_path):
    """RFC 8089: `file:///tmp/my%20docs` (a file manager's, a browser's, `Path.as_uri`'s) is the
    folder `my docs`; fsspec took it for a folder `my%20docs` (the input: no such directory; the
    output: a second folder). A plain path is a name as it is."""
    docs, latin = tmp_path / "my docs", tmp_path / os.fsdecode(b"caf\xe9")
    docs.mkdir()
    latin.mkdir()
    (docs / "a.md").write_text("# A\n")
    config = config_from_dict({"input": docs.as_uri(), "output": f"{docs.as_uri()}/_out%20put"})
    assert (config.input, config.output) == (str(docs), f"{docs}/_out put")
    assert config_from_dict({"input": f"file://localhost{tmp_path}/caf%E9"}).input == str(latin)
    assert config_from_dict({"input": f"{tmp_path}/my%20docs"}).input == f"{tmp_path}/my%20docs"
    assert [file.path for file in Storage(docs.as_uri()).walk()] == ["a.md"]


def test_a_bad_device_is_told_the_devices_that_run():
    """It ended "…, mps, cuda:N", which is refused whatever resources.embed.num_gpus says."""
    with pytest.raises(ConfigError) as caught:
        config_from_dict({"input": "/tmp/docs", "embedding": {"device": "gpu"}})
    assert str(caught.value) == "embedding.device: 'gpu' is not one of: auto, cpu, cuda, mps"


def test_input_is_required():
    with pytest.raises(ConfigError, match="input: required"):
        config_from_dict({})


def test_a_builds_wait_for_a_node_is_bounded_unless_the_config_says_null(tmp_path):
    """A stage no live node of a joined cluster can hold waits 30 minutes by default (a cloud
    GPU node's 5-15 minute start, twice), the configs' value; null waits for ever, 0 not at all."""
    for name in ("local.yaml", "cluster-gpu.yaml"):
        config = load_config(str(ROOT / "configs" / name), overrides={"input": "/tmp/docs"})
        assert config.resources.node_wait_seconds == 1800.0
    assert config_from_dict({"input": "/tmp/docs"}).resources.node_wait_seconds == 1800.0
    path = tmp_path / "c.yaml"
    path.write_text("input: /tmp/docs\n")
    for value, bound in (("null", None), ("0", 0.0), ("90.5", 90.5)):
        config = load_config(str(path), settings=[f"resources.node_wait_seconds={value}"])
        assert config.resources.node_wait_seconds == bound


def test_set_overrides_parse_yaml_scalars(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("input: /tmp/docs\nresources:\n  embed:\n    actors: 1\n")
    config = load_config(
        str(path),
        settings=[
            "resources.embed.actors=3",
            "embedding.device=cpu",
            "sources.globs=[a.md, b.md]",
            "prompts.top_k=null",
        ],
    )
    assert config.resources.embed.actors == 3
    assert config.embedding.device == "cpu"
    assert config.sources.globs == ("a.md", "b.md")
    assert config.prompts.top_k is None
    # a YAML alias shares one mapping between two keys: the setting changed both
    path.write_text("input: /tmp/docs\nresources:\n  chunk: &cpus {num_cpus: 1}\n  index: *cpus\n")
    config = load_config(str(path), settings=["resources.chunk.num_cpus=2"])
    assert (config.resources.chunk.num_cpus, config.resources.index.num_cpus) == (2, 1)
    for item in ("resources.embed.actors", ".embedding.device=cpu", "embedding..device=cpu"):
        with pytest.raises(ConfigError, match="expected key=value"):  # was ": unknown key"
            load_config(str(path), settings=[item])
    # an unset shell variable: `--set output=` read as null was an in-place build into the corpus
    with pytest.raises(ConfigError, match=r"--set output: no value \(an unset variable\?\); write"):
        load_config(str(path), settings=["output= "])
    with pytest.raises(ConfigError, match="resources.embed.actorz: unknown key"):
        load_config(str(path), settings=["resources.embed.actorz=2"])


def test_a_uri_option_and_a_set_of_the_same_key_that_disagree_are_refused(tmp_path):
    """`--output B` silently won over `--set output=A`: the build wrote where one of the two
    spellings did not say. Agreeing, they are one setting; the config file's value is what both
    override."""
    path = tmp_path / "c.yaml"
    (tmp_path / "docs").mkdir()
    path.write_text(f"input: {tmp_path / 'docs'}\noutput: {tmp_path / 'file'}\n")
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    with pytest.raises(ConfigError, match=rf"--output '{b}' and --set output={a} disagree"):
        load_config(str(path), overrides={"output": b}, settings=[f"output={a}"])
    with pytest.raises(ConfigError, match=r"--output .* and --set output=null disagree"):
        load_config(str(path), overrides={"output": b}, settings=["output=null"])
    agreed = load_config(str(path), overrides={"output": a}, settings=[f"output={a}"])
    assert agreed.output == a
    assert load_config(str(path), overrides={"output": b}).output == b


def test_cli_exits_2_before_any_work_on_a_bad_config(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("embedding:\n  batch_sizee: 64\n")
    assert main(["--config", str(path), "--input", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "embedding.batch_sizee: unknown key; expected one of" in err
    assert not (tmp_path / "_reindex").exists()


def test_storage_options_the_s3_client_does_not_take_are_exit_2_before_any_request(
    tmp_path, capsys, monkeypatch
):
    """They were exit 1, "the job failed", a traceback and a failed report not written."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):  # no search for credentials
        monkeypatch.setenv(name, "testing")
    path = tmp_path / "c.yaml"
    path.write_text("input: s3://no-bucket/docs\noutput: s3://no-bucket/out\n")
    for options, problem in (
        ("{bogus: 1}", "TypeError: AioSession.__init__() got an unexpected keyword argument"),
        ("{client_kwargs: {endpoint_url: x}}", "ValueError: Invalid endpoint: x"),
    ):
        settings = ["--set", f"storage_options={options}"]
        assert main(["--config", str(path), "--dry-run", *settings]) == 2
        assert main(["--config", str(path), *settings]) == 2
        err = unstamped(capsys.readouterr().err).splitlines()
        message = "mdindex build: config error: storage_options: the S3 client of s3://no-bucket/"
        assert len(err) == 2 and all(line.startswith(f"{message}docs cannot be") for line in err)
        assert all(f"cannot be made with them: {problem}" in line for line in err)
    # the environment's settings named: "storage_options" alone sent one looking in the config
    from s3fs import S3FileSystem

    S3FileSystem.clear_instance_cache()  # a client made before, in this process, is reused
    monkeypatch.setenv("AWS_ENDPOINT_URL", "localhost:9000")
    assert main(["--config", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "Invalid endpoint: localhost:9000 (the environment sets " in err
    assert "AWS_ENDPOINT_URL=localhost:9000" in err


def test_build_takes_storage_options_as_query_and_report_do(tmp_path, capsys, monkeypatch):
    """`mdindex build --storage-options JSON`, as `query`, `report` and `cache prune` take it:
    the build had none (`--set storage_options={...}` alone, YAML in a flag). It is the config's
    whole `storage_options`, so a `--set storage_options.KEY` beside it is refused, not dropped."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):  # no search for credentials
        monkeypatch.setenv(name, "testing")
    path = tmp_path / "c.yaml"
    path.write_text("input: s3://no-bucket/docs\noutput: s3://no-bucket/out\n")
    flag = ["--storage-options", '{"client_kwargs": {"endpoint_url": "y"}}']
    assert main(["--config", str(path), "--dry-run", *flag]) == 2
    assert "cannot be made with them: ValueError: Invalid endpoint: y" in capsys.readouterr().err
    both = [*flag, "--set", "storage_options.anon=true"]
    assert main(["--config", str(path), "--dry-run", *both]) == 2
    err = capsys.readouterr().err
    assert "--storage-options and --set storage_options.anon=true: give one of them" in err
    with pytest.raises(SystemExit) as stop:  # argparse's usage error
        main(["--config", str(path), "--storage-options", "{'anon': true}"])
    assert stop.value.code == 2
    assert "Expecting property name enclosed in double quotes" in capsys.readouterr().err


def test_cli_exits_2_on_missing_config_file_and_bad_yaml(tmp_path, capsys):
    assert main(["--config", str(tmp_path / "absent.yaml"), "--input", str(tmp_path)]) == 2
    assert "config file not found" in capsys.readouterr().err
    path = tmp_path / "broken.yaml"
    path.write_text("input: [unclosed\n")
    assert main(["--config", str(path)]) == 2
    assert "not valid YAML" in capsys.readouterr().err


def test_yaml_errors_are_one_line_naming_where(tmp_path, capsys):
    """PyYAML's own message took four lines; `*.md` unquoted (a YAML alias) is the common one."""
    bad, empty = tmp_path / "bad.yaml", tmp_path / "empty.yaml"
    bad.write_text("sources:\n  globs: [*.md]\n")
    empty.write_text("")
    for argv, message in [
        (["--config", str(bad)], "bad.yaml: not valid YAML: while scanning an alias; expected"),
        (
            ["--config", str(empty), "--set", "sources.globs=*.md"],
            "at line 1, column 2; quote it for text: --set 'sources.globs=\"*.md\"'",
        ),
    ]:
        assert main([*argv, "--input", str(tmp_path), "--dry-run"]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


def test_a_key_given_twice_in_a_config_file_is_refused(tmp_path):
    """PyYAML kept the last: a second `resources:` section dropped the first's retries unsaid."""
    path = tmp_path / "c.yaml"
    path.write_text("resources:\n  retries: 1\ntenant: t\nresources:\n  num_cpus: 2\n")
    twice = r"key 'resources' written twice \(first at line 1\) at line 4, column 1"
    with pytest.raises(ConfigError, match=twice):
        load_config(str(path), overrides={"input": str(tmp_path)})
    twice = r"key 'retries' written twice \(first at line 1\) at line 1, column 14$"
    with pytest.raises(ConfigError, match=twice):
        load_config(None, settings=["resources={retries: 1, retries: 2}"])
    path.write_text("base: &b {a: 1}\nx:\n  <<: *b\n  a: 2\n")  # a merge key's override is no twin
    with pytest.raises(ConfigError, match="base: unknown key"):
        load_config(str(path), overrides={"input": str(tmp_path)})
    # two merge keys: the second's keys replaced the first's (1 CPU for the chunk tasks here)
    path.write_text("resources:\n  chunk:\n    <<: {num_cpus: 2}\n    <<: {num_cpus: 1}\n")
    with pytest.raises(ConfigError, match=r"key '<<' written twice \(first at line 3\) at line 4"):
        load_config(str(path), overrides={"input": str(tmp_path)})
    # a merged mapping an alias uses again holds no key twice ("found 'k' a second time" before)
    path.write_text(
        "x: &x {num_cpus: 1}\nresources: {chunk: &c {<<: *x, num_cpus: 2}}\nindex: {<<: *c}\n"
    )
    with pytest.raises(ConfigError, match="x: unknown key"):
        load_config(str(path), overrides={"input": str(tmp_path)})


def test_cli_exits_2_on_a_config_path_that_is_empty_a_folder_or_not_utf8(
    tmp_path, capsys, monkeypatch
):
    """These were a traceback and exit 1, or (an empty path) no config at all; so were a config on
    S3 without credentials and lists nested 500 deep (PyYAML's parser recurses)."""
    latin1, deep = tmp_path / "latin1.yaml", tmp_path / "deep.yaml"
    latin1.write_bytes("tenant: caf\xe9\n".encode("latin-1"))
    deep.write_text("tenant: " + "[" * 500 + "]" * 500 + "\n")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for path, message in [
        ("", "--config: an empty path"),
        (str(tmp_path), "cannot read the config file: Is a directory"),
        (str(latin1), "latin1.yaml: not UTF-8 (byte 11); save it as UTF-8"),
        (str(deep), "deep.yaml: not valid YAML: nested too deep"),
        ("s3://bucket/c.yaml", "c.yaml: cannot read the config file: NoCredentialsError: Unable"),
    ]:
        assert main(["--config", path, "--input", str(tmp_path), "--dry-run"]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "_reindex").exists()


def test_set_fills_a_section_whose_keys_are_all_commented_out(tmp_path):
    """Such a section reads as null: `--set resources.num_cpus=2` was "resources is not a
    section", a null `storage_options` "must not be null", and a null `config_kwargs` in it a
    TypeError traceback on S3."""
    path = tmp_path / "c.yaml"
    path.write_text("input: /tmp/docs\nresources:\n  # num_cpus: 4\nstorage_options:\n")
    config = load_config(
        str(path), settings=["resources.num_cpus=2", "storage_options.config_kwargs=null"]
    )
    assert config.resources.num_cpus == 2 and config.resources.embed.actors is None
    on_s3 = load_config(str(path), overrides={"output": "s3://bucket/out"})
    assert on_s3.storage_options["config_kwargs"]["read_timeout"] == 20.0


def test_cli_exits_2_on_bad_usage(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["--no-such-flag"])
    assert caught.value.code == 2


def test_a_second_config_on_the_command_line_is_refused(tmp_path, capsys):
    """argparse kept the last `--config`: the first file's settings were dropped unsaid."""
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("embedding:\n  device: cpu\n")
    second.write_text("tenant: t\n")
    argv = ["--config", str(first), "--config", str(second), "--input", str(tmp_path), "--dry-run"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"--config: given 2 times ({first}, {second}); a build reads one file" in err
    assert err.count("\n") == 1, err


def test_cli_exits_2_when_the_input_does_not_exist(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("embedding:\n  device: cpu\n")
    assert main(["--config", str(path), "--input", str(tmp_path / "nowhere")]) == 2
    assert "no such directory" in capsys.readouterr().err


def test_an_input_that_is_a_file_is_named_so(tmp_path, capsys):
    """`--input docs/guide.md` said "no such directory" of a path that exists: exit 2 in one
    line that says it is a file, build and dry run."""
    page = tmp_path / "guide.md"
    page.write_text("# Guide\n")
    for extra in ([], ["--dry-run"]):
        config = str(ROOT / "configs" / "local.yaml")
        assert main(["--config", config, "--input", str(page), *extra]) == 2
        assert unstamped(capsys.readouterr().err) == (
            f"mdindex build: input {page}: a file, not a folder: give the folder that holds the "
            "corpus\n"
        )


def test_an_s3_input_that_is_an_object_is_named_so(s3_server, capsys):
    """`--input s3://b/docs/guide.md` said "no such directory" of an object that is there, where
    the same local path says it is a file."""
    bucket = s3_server.make_bucket("input-object")
    s3_server.filesystem().pipe(f"{bucket}/docs/guide.md", b"# Guide\n")
    config = str(ROOT / "configs" / "local.yaml")
    assert main(["--config", config, "--input", f"{bucket}/docs/guide.md", "--dry-run"]) == 2
    assert capsys.readouterr().err == (
        f"mdindex build: input {bucket}/docs/guide.md: a file, not a folder: give the folder "
        "that holds the corpus\n"
    )


def test_cuda_graphs_is_an_embedding_option_that_rebuilds_nothing(tmp_path):
    """Like `token_budget` and `device`: the model key tells graphed vectors apart, so the settings
    digest (a change rebuilds every topic) leaves the option out."""
    from jobs.discovery import settings_key
    from jobs.resources import EmbedPool
    from jobs.stage_args import embedder_options

    default = config_from_dict({"input": str(tmp_path)})
    eager = config_from_dict({"input": str(tmp_path), "embedding": {"cuda_graphs": False}})
    pool = EmbedPool(actors=1, max_actors=None, num_cpus=1, num_gpus=1, threads=1)
    assert embedder_options(default, pool)["cuda_graphs"] is True
    assert embedder_options(eager, pool)["cuda_graphs"] is False  # reaches `load_embedder`
    # "auto" is the GPU's in a GPU pool, the CPU's in a CPU pool (Ray hides no GPU from an actor
    # that asked for none: each actor of a CPU pool put its model on the GPU)
    assert embedder_options(default, pool)["device"] == "auto"
    cpu_pool = EmbedPool(actors=8, max_actors=None, num_cpus=0, num_gpus=0, threads=2)
    assert embedder_options(default, cpu_pool)["device"] == "cpu"
    assert settings_key(eager, "w") == settings_key(default, "w")
    with pytest.raises(ConfigError, match=r"embedding\.cuda_graphs"):
        config_from_dict({"input": str(tmp_path), "embedding": {"cuda_graphs": "yes"}})


def test_a_new_chunking_revision_changes_the_settings_key(tmp_path, monkeypatch):
    """A chunking fix bumps `chunking.REVISION`: the next build then re-chunks every source, as a
    fresh build would, instead of keeping the chunks the older code made."""
    import chunking
    from jobs.discovery import settings_key

    config = config_from_dict({"input": str(tmp_path)})
    before = settings_key(config, "w")
    monkeypatch.setattr("jobs.discovery.REVISION", chunking.REVISION + 1)
    assert settings_key(config, "w") != before
    assert settings_key(config, "other weights") != settings_key(config, "w")


def test_a_new_indexing_revision_changes_the_settings_key(tmp_path, monkeypatch):
    """An indexing fix (a topic's title, a question heading, a table row) left every unchanged
    topic as the older code wrote it, so an upgraded incremental build differed from a fresh
    one: `indexing.REVISION` is in the settings key, and bumping it rebuilds every topic."""
    import indexing
    from jobs.discovery import settings_key

    config = config_from_dict({"input": str(tmp_path)})
    before = settings_key(config, "w")
    monkeypatch.setattr("jobs.discovery.INDEXING_REVISION", indexing.REVISION + 1)
    assert settings_key(config, "w") != before


def test_include_drafts_is_a_boolean_of_the_settings_key(tmp_path):
    """Whether drafts are indexed changes the chunks of unchanged sources: a change rebuilds."""
    from jobs.discovery import settings_key

    default = config_from_dict({"input": str(tmp_path)})
    drafts = config_from_dict({"input": str(tmp_path), "sources": {"include_drafts": True}})
    assert (default.sources.include_drafts, drafts.sources.include_drafts) == (False, True)
    assert settings_key(drafts, "w") != settings_key(default, "w")
    with pytest.raises(ConfigError, match=r"^sources\.include_drafts: expected true or false"):
        config_from_dict({"input": str(tmp_path), "sources": {"include_drafts": "index"}})


def test_technical_titles_are_configurable_and_reach_the_index_settings(tmp_path):
    from jobs.discovery import settings_key
    from jobs.finish import index_settings

    default = config_from_dict({"input": str(tmp_path)})
    assert index_settings(default).technical_titles == IndexSettings().technical_titles
    custom = config_from_dict(
        {"input": str(tmp_path), "index": {"technical_titles": ["Syntax", "API at a glance"]}}
    )
    assert index_settings(custom).technical_titles == ("Syntax", "API at a glance")
    assert index_settings(default).simhash_k == 6
    tighter = config_from_dict({"input": str(tmp_path), "index": {"simhash_k": 3}})
    assert index_settings(tighter).simhash_k == 3
    assert settings_key(custom, "w") != settings_key(default, "w")  # a change rebuilds every topic
    with pytest.raises(ConfigError, match=r"index\.technical_titles"):
        config_from_dict({"input": str(tmp_path), "index": {"technical_titles": [3]}})


def test_options_the_build_sets_per_source_are_no_chunking_options(tmp_path):
    """`chunking.options.document_path` passed every check, then failed every source with
    CHUNKER_ERROR ("got multiple values for keyword argument"): a config error now, exit 2."""
    for name, value in (("document_path", "x.md"), ("corpus_paths", ["a.md"])):
        with pytest.raises(ConfigError, match=rf"chunking\.options\.{name}: the build sets it"):
            config_from_dict({"input": str(tmp_path), "chunking": {"options": {name: value}}})


def test_a_relative_output_in_rays_copy_of_a_jobs_working_directory_is_refused(
    tmp_path, monkeypatch
):
    """Under `ray job submit --working-dir .` the build runs in Ray's unpacked copy of that
    folder: `--output out/x` was written in there, exit 0 with no warning, and lost when Ray
    deleted the copy. A relative input (uploaded with the code) is fine there, and anywhere
    else a relative output is."""
    copy = tmp_path / "session" / "runtime_resources" / "working_dir_files" / "_ray_pkg_1f2e"
    (copy / "docs").mkdir(parents=True)
    monkeypatch.chdir(copy)
    config = str(ROOT / "configs" / "local.yaml")
    for key in ("output", "cache"):
        paths = {"input": "docs", "output": str(tmp_path / "out"), key: "out/x"}
        with pytest.raises(ConfigError, match=f"^{key}: out/x is a relative path, and this build"):
            load_config(config, overrides=paths)
    with pytest.raises(ConfigError, match="^output: not set, so the build would write into"):
        load_config(config, overrides={"input": "docs"})  # in place, in the copy
    absolute = load_config(config, overrides={"input": "docs", "output": str(tmp_path / "out")})
    assert absolute.input == str(copy / "docs") and absolute.output == str(tmp_path / "out")
    monkeypatch.chdir(tmp_path)
    elsewhere = load_config(config, overrides={"input": "x", "output": "y"})
    assert elsewhere.output == str(tmp_path / "y")


def test_an_installed_wheel_ships_the_configs_and_config_names_them(tmp_path):
    """`--config configs/local.yaml` needed a checkout: a wheel installed with pip had no configs,
    and the README's commands failed "config file not found". The wheel ships them (`jobs/configs`
    links to `configs/`), and `--config local` reads the shipped file, installed or not."""
    import shutil
    import subprocess
    import sys
    import zipfile

    project = tmp_path / "project"
    skip = shutil.ignore_patterns(".*", "build", "*.egg-info", "__pycache__", "tests", "out")
    shutil.copytree(ROOT, project, symlinks=True, ignore=skip)
    wheels = tmp_path / "wheels"
    command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*command, str(project), "-w", str(wheels)], check=True, timeout=300)
    (wheel,) = wheels.glob("mdindex-*.whl")
    installed = tmp_path / "installed"
    zipfile.ZipFile(wheel).extractall(installed)
    names = sorted(p.name for p in (installed / "jobs" / "configs").iterdir())
    assert names == ["cluster-gpu.yaml", "local.yaml"]
    read = (
        "import jobs.config as c; print(c.__file__); "
        "print(c.load_config('local', overrides={'input': 'docs'}).chunking.options)"
    )
    env = {**os.environ, "PYTHONPATH": str(installed)}
    done = subprocess.run(
        [sys.executable, "-c", read], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    module, options = done.stdout.splitlines()
    assert module == str(installed / "jobs" / "config.py")
    local = load_config(str(ROOT / "configs" / "local.yaml"), overrides={"input": "docs"})
    assert options == str(local.chunking.options)
    assert load_config("local", overrides={"input": "docs"}) == local
    with pytest.raises(ConfigError, match=r"local\.yml: config file not found \(or a shipped "):
        load_config("local.yml")
