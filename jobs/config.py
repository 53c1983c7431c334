"""The job's configuration: typed frozen dataclasses loaded from YAML, checked before any work.

Every section is a dataclass; `load_config` walks the YAML mapping against the dataclass fields,
so an unknown key or a wrong type fails with a message naming its dotted path (e.g.
`embedding.batch_sizee: unknown key; expected one of ...`). Range and choice rules live in each
field's metadata (`_min`, `_choices`), next to the field they constrain.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import posixpath
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec
import yaml

from chunking.yaml_keys import UniqueKeyLoader
from embedding.files import (
    LOCAL_PROTOCOLS,
    UnknownProtocol,
    archive_problem,
    is_within,
    known_protocol,
    protocol_of,
    s3_client_refused,
    strip_protocol,
)
from embedding.keys import DTYPE_NAMES, POOLINGS
from embedding.models import MINILM
from indexing.build import DEFAULT_SIMHASH_K, DEFAULT_TECHNICAL_TITLES
from indexing.sources import DEFAULT_GLOBS
from jobs.plan import keep_directory

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("auto", *DTYPE_NAMES)
FAILURE_POLICIES = ("continue", "abort")
BROKEN_LINK_CHECKS = ("note", "fail")
DEFAULT_CACHE = ".embedding-cache"  # an output's own cache folder, where `cache` is not set
# The smallest share of a resource Ray takes (ray_constants.MIN_RESOURCE_GRANULARITY): Ray refuses
# a GPU share below it, which failed after Ray had started.
RAY_SMALLEST_SHARE = 0.0001
MAX_LOCAL_CPUS = 1_000_000
# Where Ray unpacks the working directory of a job (`ray job submit --working-dir`), and later
# deletes it: a build's relative paths resolve in there.
RAY_JOB_COPY = f"{os.sep}runtime_resources{os.sep}working_dir_files{os.sep}"


# Keys earlier versions accepted, with what replaced them (named in the unknown-key error).
RETIRED_KEYS = {
    "resources.chunk.batch_size": "replaced by resources.chunk.batch_mb: batches go by size",
    "resources.embed.mix_documents": (
        "removed: chunks of many documents always share fixed-shape micro-batches"
    ),
}


class ConfigError(ValueError):
    """A configuration that cannot run; the message names the offending key by its dotted path."""


def _min(value: float, default: Any = dataclasses.MISSING) -> Any:
    return field(default=default, metadata={"min": value})


def _choices(options: tuple[str, ...], default: str) -> Any:
    return field(default=default, metadata={"choices": options})


@dataclass(frozen=True)
class SourcesConfig:
    """Which files of the input are sources (matched on the file name), whether symbolic links
    in a local input are followed (off: skipped and reported as SYMLINK_SKIPPED), whether an
    input that lists none may empty an output that holds some (off: the build is refused), and
    the largest share of the output's sources one build may delete (None: any; over it, the
    build is refused: a partly synced input looks like that). `exclude`: paths left out of the
    listing, a pattern matching a file's path or one of its folders (`jobs.plan.excluded`).
    `include_drafts`: whether drafts (front matter `draft: true` or `published: false`) are
    indexed (off: each gives no chunks, counted in the report's `chunks.skipped_drafts`)."""

    globs: tuple[str, ...] = DEFAULT_GLOBS
    exclude: tuple[str, ...] = ()
    follow_symlinks: bool = False
    include_drafts: bool = False
    allow_empty: bool = False
    max_deleted_fraction: float | None = field(default=None, metadata={"min": 0.0, "max": 1.0})


@dataclass(frozen=True)
class ChunkingConfig:
    """The chunking strategy and its options, passed to `chunking.chunk_source`, and each
    source's time budget (past it the source fails with CHUNKING_TIMEOUT; None: no budget)."""

    strategy: str = "semantic"
    options: dict[str, Any] = field(default_factory=dict)
    # At most a day: a budget past what the interval timer takes (about 9.2e9 s) failed every
    # source; null is no budget.
    timeout_seconds: float | None = field(default=120.0, metadata={"min": 0.001, "max": 86400.0})

    @property
    def key(self) -> str:
        """The strategy key (`chunking.strategy_key`), which names the cache's chunk entries."""
        from chunking import strategy_key

        return strategy_key(self.strategy, **self.options)


@dataclass(frozen=True)
class EmbeddingConfig:
    """The model and its options for `embedding.load_embedder` (None: the model's default)."""

    model: str = "minilm"
    device: str = "auto"  # auto | cpu | cuda | mps (cuda:N is refused: an actor sees cuda:0)
    dtype: str = _choices(DTYPES, "auto")
    pooling: str | None = field(default=None, metadata={"choices": POOLINGS})
    normalize: bool = True
    max_length: int | None = _min(1, None)
    query_prefix: str | None = None
    trust_remote_code: bool = False
    revision: str | None = None
    # tokens per micro-batch: a micro-batch of a billion held its filler rows in memory at once
    token_budget: int | None = field(default=None, metadata={"min": 1, "max": 2**20})
    cuda_graphs: bool = True  # on CUDA: replay the forward passes from CUDA graphs, where they work
    local_dir: str | None = None


@dataclass(frozen=True)
class TaskResources:
    """The read-and-chunk stage run as Ray tasks: CPUs per task, how many at once, batch size."""

    num_cpus: float = _min(0.01, 1.0)
    concurrency: int | None = _min(1, None)  # None: as many as the cluster's CPUs allow
    # Megabytes of sources per task (packed from the listing's sizes); None: the corpus split in
    # about 4 batches per CPU, between 0.25 and 16 MB.
    batch_mb: float | None = _min(0.001, None)


@dataclass(frozen=True)
class EmbedResources:
    """The embedding actor pool: pool size, resources per actor, documents per batch.

    `actors` and `num_cpus` left null on a CPU-only build size the pool to the machine (see
    `jobs.resources.embed_pool`); GPU configs set them."""

    actors: int | None = _min(1, None)
    max_actors: int | None = _min(1, None)  # autoscale from `actors` up to this; None: fixed pool
    num_cpus: float | None = _min(0.01, None)  # also the torch thread count (rounded, at least 1)
    # torch threads per actor (and of the embedder of a run without Ray), whatever `num_cpus`
    # reserves; None: `num_cpus` rounded, or the self-sized pool's share of the CPUs. For a model
    # too small for a second thread to pay: the benchmark's stand-in ran 1.8x the CPU time on two
    # for a tenth less wall (the README's configuration table)
    threads: int | None = field(default=None, metadata={"min": 1, "max": 1024})
    # At most one: an actor embeds on one device (two GPUs each: one idle, or a share no GPU holds)
    num_gpus: float = field(default=0.0, metadata={"min": 0, "max": 1.0})
    # documents per batch; None: one chunk task's output on CPUs, ~2 MB of sources on GPUs
    batch_size: int | None = _min(1, None)


@dataclass(frozen=True)
class IndexResources:
    """The per-topic reduce (build and write one topic's index) run as Ray tasks."""

    num_cpus: float = _min(0.01, 1.0)


@dataclass(frozen=True)
class ResourcesConfig:
    """Resources per stage, declared as data; `jobs.resources` maps them onto Ray arguments."""

    # CPUs of a Ray instance started locally; None: all cores. At most a million: Ray passes the
    # count to its raylet as the workers to prestart, and from 2**31 (1e12 too) the raylet did not
    # start; a Ray instance's start took 26 s at 1e8 against 9 s at 1e6.
    num_cpus: int | None = field(default=None, metadata={"min": 1, "max": MAX_LOCAL_CPUS})
    # Tries again of a task whose worker process died, and restarts of an embedding actor whose
    # process died (its batches then run again); a crash loop ends with exit 1, not a hang. At most
    # 1,000: Ray's limit is 2**31 - 1, past which the first task failed after Ray had started.
    retries: int = field(default=3, metadata={"min": 0, "max": 1000})
    # How long a build on a cluster joined through RAY_ADDRESS waits while no live node can hold
    # one of its stages (for the autoscaler to add one) before it fails, exit 1; None: for ever,
    # 0: at the first look. Cloud GPU nodes take 5-15 minutes to come up: 30 minutes is a slow
    # start and a second try (a failed launch, a zone out of stock) before a scheduled run stops.
    node_wait_seconds: float | None = field(default=1800.0, metadata={"min": 0, "max": 86400.0})
    # A run on no cluster (it would start a local Ray instance of its own, or the process holds
    # one of a single node), on the CPU, that reads at most this many sources (and questions
    # files) runs its stages in the driver's process, without Ray (`jobs.in_process`): Ray's
    # start and processes cost a 2-CPU machine ~10 s and ~20 CPU-seconds, more than a re-run of
    # a few pages. 200 files are 0.2 (tldr) to 3 (FastAPI's docs) CPU-seconds of chunking, and
    # the model runs on every CPU's torch thread here as there. None: every run starts Ray.
    in_process_sources: int | None = field(default=200, metadata={"min": 0, "max": 1_000_000})
    chunk: TaskResources = field(default_factory=TaskResources)
    embed: EmbedResources = field(default_factory=EmbedResources)
    index: IndexResources = field(default_factory=IndexResources)


@dataclass(frozen=True)
class PromptsConfig:
    """Query expansion (seed 000 section 6): question-to-chunk similarity cut-off and cap."""

    threshold: float = field(default=0.7, metadata={"min": -1.0, "max": 1.0})
    top_k: int | None = _min(1, None)


@dataclass(frozen=True)
class IndexConfig:
    """Index rules: the chunk-1 title phrases that make it the technical baseline (seed 000 §7),
    matched as whole words, ignoring case and punctuation; the Hamming distance k of the corpus
    SimHash tables (a question's lookup finds stored prompts within k bits)."""

    technical_titles: tuple[str, ...] = DEFAULT_TECHNICAL_TITLES
    simhash_k: int = field(default=DEFAULT_SIMHASH_K, metadata={"min": 0, "max": 63})


@dataclass(frozen=True)
class S3Config:
    """Timeouts and attempts of every S3 request (botocore's; s3fs adds its own retries of a
    timed-out request), so that a stalled endpoint fails the build, naming its URL, instead of
    holding it silently. Keys of `storage_options.config_kwargs` take precedence."""

    connect_timeout: float = _min(0.1, 5.0)
    read_timeout: float = _min(0.1, 20.0)
    max_attempts: int = _min(1, 2)

    def with_timeouts(self, options: dict[str, Any]) -> dict[str, Any]:
        """`options` (s3fs storage options) with these settings in botocore's config_kwargs."""
        settings = {
            "connect_timeout": self.connect_timeout,
            "read_timeout": self.read_timeout,
            "retries": {"max_attempts": self.max_attempts, "mode": "standard"},
        }
        return {**options, "config_kwargs": {**settings, **options.get("config_kwargs", {})}}


@dataclass(frozen=True)
class ChecksConfig:
    """What the corpus's problems that fail no source do to a run: `broken_links`, its links to
    pages the corpus does not have (`jobs.broken_links`): `note` names them in the summary and
    the report, the run `ok`; `fail` makes it `sources_failed`, exit 3 (a docs check in CI)."""

    broken_links: str = _choices(BROKEN_LINK_CHECKS, "note")


@dataclass(frozen=True)
class JobConfig:
    """A whole job: `output` defaults to `input`, `cache` to `{output}/.embedding-cache`."""

    input: str | None = None
    output: str | None = None
    cache: str | None = None
    storage_options: dict[str, Any] = field(default_factory=dict)
    tenant: str = "default"
    sources: SourcesConfig = field(default_factory=SourcesConfig)
    chunking: ChunkingConfig = field(default_factory=ChunkingConfig)
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    prompts: PromptsConfig = field(default_factory=PromptsConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    s3: S3Config = field(default_factory=S3Config)
    checks: ChecksConfig = field(default_factory=ChecksConfig)
    failure_policy: str = _choices(FAILURE_POLICIES, "continue")

    def s3_note(self) -> str | None:
        """A log line saying how S3 requests are bounded (None when no URI is on S3)."""
        if not any(protocol_of(uri or "") == "s3" for uri in (self.input, self.output, self.cache)):
            return None
        kwargs = self.storage_options.get("config_kwargs", {})
        endpoint = self.storage_options.get("client_kwargs", {}).get(
            "endpoint_url"
        ) or os.environ.get("AWS_ENDPOINT_URL", "AWS's default")
        attempts = kwargs.get("retries", {}).get("max_attempts")
        from s3fs import S3FileSystem  # only where a URI is on S3

        return (
            f"S3 endpoint {endpoint}: connect timeout {kwargs.get('connect_timeout')} s, read "
            f"timeout {kwargs.get('read_timeout')} s, {attempts} attempts per request, and s3fs "
            f"tries a timed-out request {S3FileSystem.retries} times"
        )


def load_config(
    path: str | None = None,
    *,
    overrides: dict[str, Any] | None = None,
    settings: list[str] | tuple[str, ...] = (),
) -> JobConfig:
    """Read a YAML config (fsspec URI or path), apply `--set key=value` and URI overrides, validate.

    Raises ConfigError, naming the key, for anything that would not run.
    """
    if path is not None and not path.strip():
        raise ConfigError("--config: an empty path (an unset variable?); name a YAML file")
    raw = _read_yaml(config_file(path)) if path is not None else {}
    for item in settings:
        _apply_setting(raw, item)
    typed = {key.strip(): text for key, _, text in (item.partition("=") for item in settings)}
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        option = "--" + key.replace("_", "-")
        if key in typed and raw[key] != value:  # which one was meant?
            raise ConfigError(
                f"{option} {value!r} and --set {key}={typed[key]} disagree; give one of them"
            )
        if inside := sorted(setting for setting in typed if setting.startswith(f"{key}.")):
            raise ConfigError(  # the option's whole mapping would drop the setting, unsaid
                f"{option} and --set {inside[0]}={typed[inside[0]]}: give one of them"
            )
        raw[key] = value
    return config_from_dict(raw)


def config_from_dict(raw: dict[str, Any]) -> JobConfig:
    """Validate an already-parsed mapping (as `load_config` does for a file)."""
    return _resolve(_build(JobConfig, raw, ""))


def check_store_options(config: JobConfig) -> None:
    """ConfigError where the S3 client cannot be made with `storage_options` and the environment
    (`embedding.files.s3_client_refused`): it was exit 1 with a traceback, once the build had
    started. The build's requests reuse the client, as fsspec caches the instance."""
    uris = (config.input, config.output, config.cache, config.embedding.model)
    roots = [uri for uri in uris if uri and protocol_of(uri) == "s3"]
    if roots and (refused := s3_client_refused(roots[0], config.storage_options)):
        raise ConfigError(
            f"storage_options: the S3 client of {roots[0]} cannot be made with them: {refused}"
        )


# The configs this package ships (`configs/` of a checkout, `jobs/configs` linking to it), by name:
# `--config local` from an installed wheel too, which has no checkout's configs/ folder.
SHIPPED_CONFIGS = Path(__file__).with_name("configs")


def shipped_configs() -> list[str]:
    """The names `--config` takes for the configs this package ships: ["cluster-gpu", "local"]."""
    return sorted(path.stem for path in SHIPPED_CONFIGS.glob("*.yaml"))


def config_file(path: str) -> str:
    """The file `--config` names: a path or fsspec URI as given, or a shipped config's name
    (`local`: `shipped_configs`) where no file of that name is here."""
    if "/" in path or Path(path).exists() or path not in shipped_configs():
        return path
    return str(SHIPPED_CONFIGS / f"{path}.yaml")


def _read_yaml(path: str) -> dict[str, Any]:
    _protocol(path, "--config")
    try:
        with fsspec.open(path, "rt", encoding="utf-8") as handle:
            data = yaml.load(handle, Loader=UniqueKeyLoader)
    except FileNotFoundError as exc:
        names = ", ".join(shipped_configs())
        raise ConfigError(f"{path}: config file not found (or a shipped config: {names})") from exc
    except (yaml.YAMLError, RecursionError) as exc:
        raise ConfigError(f"{path}: not valid YAML: {_yaml_problem(exc)}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 (byte {exc.start}); save it as UTF-8") from exc
    except OSError as exc:  # a directory, no permission
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror or exc}") from exc
    except Exception as exc:  # fsspec's backends raise their own: botocore's NoCredentialsError
        problem = f"{type(exc).__name__}: {exc}"
        raise ConfigError(f"{path}: cannot read the config file: {problem}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the config must be a mapping, got {type(data).__name__}")
    return data


def _yaml_problem(exc: yaml.YAMLError | RecursionError) -> str:
    """PyYAML's error on one line: what went wrong where (its message takes three or four)."""
    if isinstance(exc, RecursionError):  # PyYAML's parser recurses: [[[… 500 deep
        return "nested too deep"
    what = "; ".join(filter(None, [getattr(exc, "context", None), getattr(exc, "problem", None)]))
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"{what or ' '.join(str(exc).split())}{where}"


def _apply_setting(raw: dict[str, Any], item: str) -> None:
    """Apply one `dotted.key=value` override; the value is parsed as a YAML scalar or flow value."""
    key, sep, text = item.partition("=")
    parts = [part.strip() for part in key.split(".")]
    if not sep or not all(parts):  # `=cpu`, or `.embedding.device=cpu`: ": unknown key"
        raise ConfigError(f"--set {item!r}: expected key=value, e.g. embedding.device=cpu")
    if not text.strip():  # `--set output=$OUT`, OUT unset: null was an in-place build
        raise ConfigError(f"--set {key}: no value (an unset variable?); write {key}=null for null")
    try:
        value = yaml.load(text, Loader=UniqueKeyLoader)
    except yaml.constructor.ConstructorError as exc:  # a key twice, a tag of no type
        raise ConfigError(f"--set {key}: value {text!r}: {_yaml_problem(exc)}") from exc
    except (yaml.YAMLError, RecursionError) as exc:
        raise ConfigError(
            f"--set {key}: value {text!r} is not valid YAML: {_yaml_problem(exc)}; quote it for "
            f"text: --set '{key}=\"{text}\"'"
        ) from exc
    node = raw
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:  # absent, or a section whose keys are all commented out
            child = {}
        if not isinstance(child, dict):
            where = ".".join(parts[: depth + 1])
            raise ConfigError(f"--set {key}: {where} is not a section")
        # a copy: a YAML alias (`index: *chunk`) shares the mapping, which the setting changed too
        node[part] = dict(child)
        node = node[part]
    node[parts[-1]] = value


def _build(cls: type, raw: Any, path: str) -> Any:
    """Instantiate dataclass `cls` from mapping `raw`, checking keys, types and ranges."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path or '<root>'}: expected a mapping, got {_kind(raw)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    for key in raw:
        if key not in fields:
            where = f"{path}.{key}" if path else str(key)
            hint = f" ({RETIRED_KEYS[where]})" if where in RETIRED_KEYS else ""
            if isinstance(key, str) and "." in key:  # resources.embed.actors read as a valid key
                *heads, last = key.split(".")
                nested = "".join(f"{head}: {{" for head in heads) + f"{last}: …" + "}" * len(heads)
                hint = f" (one key with dots; YAML nests it: {nested})"
            raise ConfigError(f"{where}: unknown key{hint}; expected one of: {', '.join(fields)}")
    values = {}
    for name, value in raw.items():
        where = f"{path}.{name}" if path else name
        values[name] = _check(hints[name], value, where, fields[name].metadata)
    return cls(**values)


def _check(hint: Any, value: Any, where: str, meta: Any) -> Any:
    """Check `value` against type `hint` and the field's range/choice metadata; return it typed."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            if type(None) in args:
                return None
            raise ConfigError(f"{where}: must not be null")
        hint = next(a for a in args if a is not type(None))
        return _check(hint, value, where, meta)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, where)
    if origin is dict and value is None:  # a mapping whose keys are all commented out, as a section
        return {}
    if value is None:
        raise ConfigError(f"{where}: must not be null")
    if origin is tuple:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(v, str) for v in items) or not items:
            raise ConfigError(f"{where}: expected a non-empty list of strings, got {value!r}")
        return tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {_kind(value)}")
        return dict(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if hint in (int, float):
        ok = isinstance(value, int) if hint is int else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok:
            raise ConfigError(
                f"{where}: expected {'an integer' if hint is int else 'a number'}, got {value!r}"
                + _exponent_note(value, hint)
            )
        try:
            typed = hint(value)
        except OverflowError:  # an integer too large for a float
            typed = math.inf
        if not math.isfinite(typed):  # NaN passes every comparison; inf fails later, in Ray
            raise ConfigError(f"{where}: must be a finite number, got {value!r}")
        if "min" in meta and typed < meta["min"]:
            raise ConfigError(f"{where}: must be >= {meta['min']}, got {value!r}")
        if "max" in meta and typed > meta["max"]:
            raise ConfigError(f"{where}: must be <= {meta['max']}, got {value!r}")
        return typed
    if hint is str:
        if not isinstance(value, str):  # tenant: no (Norway) reads as false, a revision as a number
            scalar = not isinstance(value, (list, dict))
            read = f" (YAML read it as {type(value).__name__}: quote it)" if scalar else ""
            raise ConfigError(f"{where}: expected a string, got {value!r}{read}")
        if "choices" in meta and value not in meta["choices"]:
            raise ConfigError(f"{where}: {value!r} is not one of: {', '.join(meta['choices'])}")
        return value
    raise TypeError(f"{where}: unsupported config type {hint!r}")  # a bug in this module


def _exponent_note(value: Any, hint: type) -> str:
    """What to write for a number such as 1e3, which PyYAML (YAML 1.1) reads as text."""
    pattern = r"([-+]?[0-9]+)(\.[0-9]*)?[eE]([-+]?)([0-9]+)"
    if not (isinstance(value, str) and (number := re.fullmatch(pattern, value))):
        return ""
    whole, fraction, sign, exponent = number.groups()
    written = f"{whole}{fraction or '.0'}e{sign or '+'}{exponent}"
    if hint is int:
        if not float(value).is_integer():
            return ""
        written = str(int(float(value)))
    return f" (text to YAML, which reads {written} as a number)"


def _kind(value: Any) -> str:
    return "null" if value is None else f"{type(value).__name__} {value!r}"


def _resolve(config: JobConfig) -> JobConfig:
    """Fill the derived defaults, make local paths absolute, and check cross-field rules."""
    if config.input is None:
        raise ConfigError("input: required (set it in the config or pass --input)")
    for key in ("input", "output", "cache"):
        if getattr(config, key) is not None and not getattr(config, key).strip():
            raise ConfigError(
                f"{key}: an empty string (an unset variable?); leave it out or null for its "
                "default" + ("" if key != "input" else ", or name the corpus")
            )
    source = _absolute(config.input, "input")
    if config.output is None and RAY_JOB_COPY in source:
        raise ConfigError(
            f"output: not set, so the build would write into its input {source}, which lies in "
            "Ray's copy of the job's working directory, which Ray deletes: give an absolute "
            "output or an s3:// URI"
        )
    if config.output is None and protocol_of(source) in ("http", "https"):
        raise ConfigError(
            f"output: not set, so the build would write into its input {source}, which is "
            "read-only (http(s)://): it read and embedded it all, then failed, exit 1; give an "
            "output (a local path or s3://)"
        )
    output = _absolute(config.output, "output") if config.output is not None else source
    output = _check_nesting(source, output)
    cache = _absolute(config.cache, "cache") if config.cache is not None else _default_cache(output)
    embedding = dataclasses.replace(
        config.embedding,
        model=_model(config.embedding.model),
        local_dir=_local_dir(config.embedding.local_dir),
    )
    device = config.embedding.device
    if device not in DEVICES and not re.fullmatch(r"cuda:[0-9]+", device):
        raise ConfigError(f"embedding.device: {device!r} is not one of: {', '.join(DEVICES)}")
    embed = config.resources.embed
    if device.startswith("cuda:"):  # first: with num_gpus 0, "needs num_gpus", then this
        raise ConfigError(
            f"embedding.device: {device} picks no GPU in a Ray actor: each sees the GPU of its "
            "share as cuda:0 (CUDA_VISIBLE_DEVICES); use cuda"
        )
    if device == "cuda" and not embed.num_gpus:
        raise ConfigError(
            f"embedding.device: {device} needs resources.embed.num_gpus > 0 (a GPU share per "
            "embedding actor, which Ray places and counts); with 0 the pool is sized to the CPUs, "
            "and each of its actors would load the model on the GPU"
        )
    _check_gpu_used(device, embed.num_gpus)
    if 0 < embed.num_gpus < RAY_SMALLEST_SHARE:
        raise ConfigError(
            f"resources.embed.num_gpus: {embed.num_gpus:g} is below Ray's smallest share "
            f"({RAY_SMALLEST_SHARE}); give 0 (no GPU) or at least {RAY_SMALLEST_SHARE}"
        )
    if embed.max_actors is not None and embed.max_actors < (embed.actors or 1):
        raise ConfigError(
            f"resources.embed.max_actors: must be >= resources.embed.actors "
            f"({embed.actors or 1}), got {embed.max_actors}"
        )
    _check_chunking(config.chunking)
    _check_globs(config.sources.globs)
    _check_exclude(config.sources.exclude)
    _check_tenant(config.tenant)
    options = _client_options(config.storage_options)
    if any(protocol_of(uri) == "s3" for uri in (source, output, cache)):
        options = config.s3.with_timeouts(options)
    return dataclasses.replace(
        config,
        input=source,
        output=output,
        cache=cache,
        storage_options=options,
        embedding=embedding,
    )


# A shell variable left in a value (`${OUT}`, `$TENANT`): YAML expands none.
_VARIABLE = re.compile(r"\$\{?\w+\}?")


def _check_tenant(tenant: str) -> None:
    """ConfigError for a tenant that is empty or names a variable (`tenant: ${TENANT}`, which
    YAML leaves as it is): every chunk id and record of the index would carry it."""
    if not tenant.strip():
        raise ConfigError("tenant: an empty string (an unset variable?); leave it out: 'default'")
    if variable := _VARIABLE.search(tenant):
        raise ConfigError(
            f"tenant: {tenant}: the config expands no variables ({variable[0]}); give the "
            f'tenant, or --set tenant="{variable[0]}" for the shell to expand'
        )


def _model(model: str) -> str:
    """`embedding.model` with a local folder made absolute (`~` expanded), as `input` is: it is
    written to `_index/model.json`, which `query --question` loads from any folder, and a relative
    one loaded only in the build's. An empty name is refused: it read the current folder."""
    if not model.strip():
        raise ConfigError(
            "embedding.model: an empty string (an unset variable?); leave it out for minilm, or "
            "name a model"
        )
    if protocol_of(model) == "s3":
        _check_bucket(model, "embedding.model")
    if model == MINILM or "://" in model:
        return model
    try:
        path = Path(model).expanduser()
    except RuntimeError:  # ~name of no user: `embedding.models` says the model cannot load
        return model
    return str(path.resolve()) if path.is_dir() else model


def _local_dir(local_dir: str | None) -> str | None:
    """`embedding.local_dir` made absolute, `~` expanded, as `input` is: each embedding actor
    copies a remote model there, and `~/models` was a folder named `~` in the actor's folder."""
    if local_dir is None:
        return None
    if not local_dir.strip():  # read as no folder: the default, unsaid
        raise ConfigError(
            "embedding.local_dir: an empty string (an unset variable?); leave it out or null for "
            "its default ($MDINDEX_MODEL_DIR, else ~/.cache/mdindex/models)"
        )
    try:
        return str(Path(local_dir).expanduser().resolve())
    except RuntimeError as exc:  # ~name of no user
        raise ConfigError(f"embedding.local_dir: {local_dir}: no such user's home folder") from exc


def _check_gpu_used(device: str, num_gpus: float) -> None:
    """Refuse a GPU share per embedding actor that embeds on the CPU (the share held, unused)."""
    if device == "cpu" and num_gpus:
        raise ConfigError(
            f"embedding.device: cpu with resources.embed.num_gpus {num_gpus:g} holds a GPU share "
            "per embedding actor that it never uses; set resources.embed.num_gpus: 0, or "
            "embedding.device: cuda"
        )


def _check_globs(globs: tuple[str, ...]) -> None:
    """Refuse a pattern no file name can match: an empty one, or one holding a `/` (globs match
    a file's name, never its folders), which listed no source and built an empty index, exit 0."""
    for pattern in globs:
        if not pattern:
            raise ConfigError("sources.globs: an empty pattern matches no file name")
        if "/" in pattern:
            raise ConfigError(
                f"sources.globs: {pattern!r} holds a '/', and no file name does: a glob matches "
                "the name of a file in any folder of the input, never its folders; write "
                f"{pattern.rsplit('/', 1)[-1] or '*.md'!r}"
            )


def _check_exclude(patterns: tuple[str, ...]) -> None:
    """Refuse an exclude pattern that can match no listed path: an empty one, one starting with
    `/` (paths are relative to the input) or holding a `..` folder (none leads out of it)."""
    for pattern in patterns:
        if not pattern.strip():
            raise ConfigError("sources.exclude: an empty pattern matches no path")
        if pattern.startswith("/") or ".." in pattern.split("/"):
            raise ConfigError(
                f"sources.exclude: {pattern!r}: patterns match paths relative to the input, "
                f"with no leading '/' or '..' (e.g. 'node_modules', 'drafts/*.md')"
            )


def _client_options(options: dict[str, Any]) -> dict[str, Any]:
    """`storage_options` with its botocore sections checked to be mappings (a null one, as a
    section whose keys are all commented out reads, is left out)."""
    sections = ("config_kwargs", "client_kwargs")
    for key in sections:
        value = options.get(key)
        if value is not None and not isinstance(value, dict):
            raise ConfigError(f"storage_options.{key}: expected a mapping, got {_kind(value)}")
    return {k: v for k, v in options.items() if not (k in sections and v is None)}


def _protocol(uri: str, key: str) -> str:
    """`uri`'s fsspec protocol, where fsspec knows it (`known_protocol`)."""
    try:
        return known_protocol(uri)
    except UnknownProtocol as exc:
        raise ConfigError(f"{key}: {exc}") from exc


def _absolute(uri: str, key: str) -> str:
    """Local paths become absolute (Ray workers may run elsewhere). Refused: memory://; http(s)://
    (read-only) for an output or cache; a URI with an empty path or no bucket (`file://$DOCS`, the
    working directory, or `s3:///docs`, the bucket `docs`, with DOCS or a bucket unset); a local
    path holding a `$VARIABLE`, which YAML leaves as it is; a local output or cache that is a
    file, or a relative one where the build runs in Ray's copy of a job's working directory (`ray
    job submit --working-dir`): it went there, exit 0, and was lost when Ray deleted it; an
    archive or a chain of filesystems (`zip://docs::file:///r.zip`: exit 1, "Is a directory",
    naming the working directory). `s3a://` (Hadoop's name) is `s3://`: the same place, as an
    in-place build and the S3 checks compare them."""
    if problem := archive_problem(uri):
        raise ConfigError(f"{key}: {problem}")
    protocol = _protocol(uri, key)
    if protocol == "s3a":
        uri, protocol = f"s3://{uri.split('://', 1)[1]}", "s3"
    if protocol == "memory":
        raise ConfigError(
            f"{key}: memory:// lives in one process and Ray workers cannot see it; "
            f"use a local path, file:// or s3://"
        )
    if key != "input" and protocol in ("http", "https"):
        raise ConfigError(f"{key}: {uri}: http(s):// is read-only; use a local path or s3://")
    local, rest = protocol in LOCAL_PROTOCOLS, strip_protocol(uri)
    if not rest.strip() or (not local and rest.startswith("/")):  # file://$DOCS: the cwd
        missing = "an empty path" if local else "no bucket or host"
        raise ConfigError(f"{key}: {uri}: {missing} (an unset variable?)")
    web = protocol in ("http", "https")
    # a local folder or an S3 prefix named `${OUT}` otherwise (an S3 bucket: exit 1, a traceback)
    if not web and (variable := _VARIABLE.search(uri)):
        raise ConfigError(
            f"{key}: {uri}: the config expands no variables ({variable[0]}); give the path, or "
            f'--{key} "{variable[0]}" for the shell to expand'
        )
    if protocol == "s3":
        _check_bucket(uri, key)
    if not local and not web:
        _check_key(uri, key)
    if not local:  # s3://b/docs/ is s3://b/docs, as an in-place build compares them (not a URL)
        return uri if web else uri.rstrip("/")
    try:
        path = Path(rest).expanduser()
    except RuntimeError as exc:  # ~name of no user
        raise ConfigError(f"{key}: {uri}: no such user's home folder") from exc
    absolute = str(path.resolve())
    if key != "input" and path.exists() and not path.is_dir():
        raise ConfigError(f"{key}: {absolute} is a file; name a folder")
    if key != "input" and not path.is_absolute() and RAY_JOB_COPY in absolute:
        raise ConfigError(
            f"{key}: {uri} is a relative path, and this build runs in Ray's copy of the job's "
            f"working directory ({os.getcwd()}), which Ray deletes: give an absolute path or an "
            "s3:// URI"
        )
    return absolute


def _check_bucket(uri: str, key: str) -> None:
    """Refuse an S3 URI whose bucket botocore refuses to name (`s3://my bucket/docs`): exit 1
    with its ParamValidationError's traceback at the first request otherwise. Access point ARNs
    are left to botocore."""
    from botocore.handlers import VALID_BUCKET

    bucket = strip_protocol(uri).split("/", 1)[0]
    if not bucket.startswith("arn:") and not VALID_BUCKET.search(bucket):
        raise ConfigError(
            f"{key}: {uri}: {bucket!r} is no S3 bucket name (letters, digits, '.', '-' and '_')"
        )


def _check_key(uri: str, key: str) -> None:
    """Refuse an object store URI with a folder `.`, `..` or empty (`s3://b/docs/../out`,
    `s3://b/${P}/docs` with P unset): keys take them literally, so `docs/../out` lay inside the
    input `docs`, whose walk went below `..` and read the output back as sources."""
    folders = strip_protocol(uri).rstrip("/").split("/")[1:]
    if odd := [name for name in folders if name in ("", ".", "..")]:
        where = "an empty folder name (//: an unset variable?)" if "" in odd else f"{odd[0]!r}"
        raise ConfigError(
            f"{key}: {uri}: {where} in an object store's key is taken as it is, not as a path's; "
            "give the prefix meant"
        )


def _check_nesting(source: str, output: str) -> str:
    """The output, refused inside the input or holding it (both resolved; an output in a folder
    the listing skips, `_site` or `.out`, is kept apart): the output's files of one topic land in
    another's folder of the input, so its `topic-spec.md` was overwritten (and a deleted topic's
    deleted whole). A local output that is the input's folder under another name (a bind mount;
    `Docs` for `docs` on a case-insensitive filesystem, macOS's and Windows's) is the input: an
    in-place build (it was a separate output written into its own input, and one inside the input
    under another name passed)."""
    if source == output or protocol_of(source) != protocol_of(output):
        return output
    inner, outer = strip_protocol(output), strip_protocol(source)
    local = protocol_of(source) in LOCAL_PROTOCOLS
    if is_within(inner, outer):
        below = posixpath.relpath(inner, outer)
    elif local and (below := _below_same_folder(inner, outer)) is not None:
        if not below:
            return source
        inner = f"{outer}/{below}"
    else:
        below = None
    if below is not None:
        if not all(map(keep_directory, below.split("/"))):
            return output  # under a folder the listing skips (`docs/_site`): no topic lands there
        named = f" (it is {inner})" if inner != strip_protocol(output) else ""
        where = f"{output} lies inside the input {source}{named}"
    elif is_within(outer, inner) or (local and _below_same_folder(outer, inner) is not None):
        where = f"{output} holds the input {source}"
    else:
        return output
    raise ConfigError(
        f"output: {where}: its topics' files would land in the input's folders (a topic-spec.md "
        "overwritten); give an output outside the input, or leave it out to build in place"
    )


def _below_same_folder(path: str, folder: str) -> str | None:
    """Where the absolute local `path` lies below `folder` ("" where it is `folder`) when one of
    the folders on its way (itself included) is `folder` under another name, as their device
    and inode tell (`os.path.samestat`); None when none is, or `folder` does not exist."""
    try:
        wanted = os.stat(folder)
    except OSError:
        return None
    above, below = path, []
    while True:
        with contextlib.suppress(OSError):  # not there (yet): the output's own folder, say
            if os.path.samestat(os.stat(above), wanted):
                return "/".join(reversed(below))
        parent = os.path.dirname(above)
        if parent == above:
            return None
        below.append(os.path.basename(above))
        above = parent


def _default_cache(output: str) -> str:
    """`{output}/.embedding-cache`, refused when it is a local symbolic link leading out of the
    output root (an in-place corpus must not send the cache's writes elsewhere)."""
    cache = posixpath.join(output.rstrip("/"), DEFAULT_CACHE)
    if protocol_of(cache) in LOCAL_PROTOCOLS:
        real, root = os.path.realpath(cache), os.path.realpath(output)
        if not is_within(real, root):
            raise ConfigError(
                f"cache: the default {cache} resolves to {real}, outside the output root {root} "
                f"(a symbolic link); remove the link or set `cache`"
            )
    return cache


def _config_options(strategy: str) -> set[str]:
    """The options of `strategy` a config may set (those the build sets per source left out);
    ValueError for a strategy of no such name."""
    from chunking.strategy import PER_SOURCE_OPTIONS, strategy_class

    return set(strategy_class(strategy)().options) - PER_SOURCE_OPTIONS


def _other_strategies(option: str) -> str:
    """A hint where `option` belongs to other strategies (a strategy changed by `--set`, the
    config's options left for the one before); "" otherwise."""
    from chunking.strategy import strategy_names

    owners = [name for name in strategy_names() if option in _config_options(name)]
    if not owners:
        return ""
    return (
        f" ({option} is an option of {', '.join(owners)}: chunking.options hold the options of "
        "chunking.strategy alone; with another strategy set them too, e.g. --set "
        "'chunking.options={}' for its defaults)"
    )


def _check_chunking(chunking: ChunkingConfig) -> None:
    """The strategy and its options, an error named by its dotted key (`chunking.options.x`)."""
    from chunking import strategy_key
    from chunking.strategy import PER_SOURCE_OPTIONS

    try:
        known = _config_options(chunking.strategy)
    except ValueError as exc:
        raise ConfigError(f"chunking.strategy: {exc}") from exc
    for key in chunking.options:
        if key in PER_SOURCE_OPTIONS:
            raise ConfigError(
                f"chunking.options.{key}: the build sets it for each source; it is no config option"
            )
        if key not in known:
            raise ConfigError(
                f"chunking.options.{key}: unknown option of strategy {chunking.strategy}; "
                f"expected one of: {', '.join(sorted(known))}{_other_strategies(key)}"
            )
    try:
        strategy_key(chunking.strategy, **chunking.options)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"chunking.options: {exc}") from exc
