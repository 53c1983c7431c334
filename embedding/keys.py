"""What decides a model's vectors besides its weights, and its cache keys: resolved from the
options and the model's files without loading torch (imported only to ask about a device other
than "cpu", or whether a CPU runs bf16 natively where the system does not list its CPU flags), so
an embedding actor whose chunks are all cached never loads it (`model_keys`)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from embedding.encoder import positive_int, window_length
from embedding.models import (
    ModelFiles,
    SentenceTransformersSettings,
    backend_class,
    directory_folder,
    fingerprint,
    read_sentence_transformers,
    resolve_model,
)

DTYPE_NAMES = ("fp32", "bf16", "fp16")
POOLINGS = ("mean", "cls")
# Padded tokens per micro-batch. Every micro-batch is filled to its full row count (a fixed shape),
# so a call pays up to a whole micro-batch per length bucket (not fp32 on a CPU with MKL's strict
# mode: `fills_micro_batches`). CPUs: 2048 (2-core Xeon with AMX,
# MiniLM, 600 FastAPI chunks in one call: bf16 5.63 s, 5.24 at 4096, 10.9 at 16384, 6.46 at 1024;
# fp32 12.4 s, 13.8 at 4096; one short text alone 68 ms in bf16, 123 at 4096, 517 at 16384). GPUs:
# run eagerly, a small model's micro-batch is too little work for the time the host takes to launch
# it. Measured on an H100 (fp16, 6,000 FastAPI chunks in one call, eager): a BERT-large-sized
# model peaked at 8192 (2,516 chunks/s; 1,923 at 4096, 2,256 at 32768), MiniLM at 32768 (23,746
# chunks/s; 9,842 at 8192, 22,121 at 65536). From CUDA graphs, MiniLM did as well at 8192 as at
# 32768 (H200: 28,454 and 27,566), with less filler.
DEFAULT_TOKEN_BUDGET = {"cpu": 2048, "cuda": 8192, "mps": 16384}
# Padded tokens per micro-batch of query vectors (questions: `query=True`), on every device. A
# filled micro-batch at the passage budget made one question cost 2,048 tokens of arithmetic on a
# CPU (MiniLM, 2-core Xeon: 68 ms in bf16, 134 in fp32; a model 15 times MiniLM's size pays 15
# times that); 256 holds up to 16 short questions.
QUERY_TOKEN_BUDGET = 256
SMALL_MODEL_PARAMETERS = 50_000_000  # MiniLM-L6: 22.7M; BERT-base: 110M
SMALL_MODEL_CUDA_BUDGET = 32768


@dataclass(frozen=True)
class EmbedderSettings:
    """Everything besides the weights that decides the vectors (all of it is in the model key)."""

    pooling: str
    normalize: bool
    max_length: int
    dtype: str
    query_prefix: str
    token_budget: int
    cuda_graphs: bool  # the forward passes replay from CUDA graphs (`embedding.cuda_graphs`)


@dataclass(frozen=True)
class ResolvedOptions:
    """What `load_embedder` and `model_keys` decide from the options and the model's files, before
    transformers loads: the device, the files, sentence-transformers' settings, the dtype."""

    model: str
    options: dict[str, Any]
    device: str  # "cpu", "cuda", "cuda:N" or "mps"
    files: ModelFiles
    st: SentenceTransformersSettings
    dtype: str
    trust: bool
    graphs: bool

    def settings(
        self, model_max_length: int | None, positions: int | None, parameters: int
    ) -> EmbedderSettings:
        """The embedder's settings, given the tokenizer's model_max_length, the model's positions
        and its parameter count (the CUDA budget's default depends on it)."""
        opt = self.options
        if "pooling" not in opt and self.st.pooling_problem:
            raise ValueError(self.st.pooling_problem)
        return EmbedderSettings(
            pooling=_choice("pooling", opt.get("pooling", self.st.pooling or "mean"), POOLINGS),
            normalize=bool(opt.get("normalize", True)),
            max_length=window_length(
                opt.get("max_length"), self.st.max_length, model_max_length, positions
            ),
            dtype=self.dtype,
            query_prefix=opt.get("query_prefix", self.st.query_prefix or ""),
            token_budget=positive_int(
                "token_budget",
                opt["token_budget"]
                if "token_budget" in opt
                else default_token_budget(device_type(self.device), parameters, self.graphs),
            ),
            cuda_graphs=self.graphs,
        )


_OPTIONS = frozenset(
    {
        "dtype",
        "pooling",
        "normalize",
        "max_length",
        "query_prefix",
        "trust_remote_code",
        "revision",
        "num_threads",
        "token_budget",
        "cuda_graphs",
        "storage_options",
        "local_dir",
    }
)


def resolve_options(
    model: str | os.PathLike, device: str, options: dict[str, Any]
) -> ResolvedOptions:
    """Check the options, resolve the device, the model's files and the dtype (torch's threads
    are `load_embedder`'s to set). A model folder may be given as a path object."""
    model = os.fspath(model) if isinstance(model, os.PathLike) else model
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise ValueError(f"load_embedder: unknown option(s) {unknown}; expected {sorted(_OPTIONS)}")
    opt = {key: value for key, value in options.items() if value is not None}
    _check_flags(opt)
    resolved_device = resolve_device(device)
    files = resolve_model(
        model,
        revision=opt.get("revision"),
        storage_options=opt.get("storage_options"),
        local_dir=opt.get("local_dir"),
    )
    return ResolvedOptions(
        model=model,
        options=opt,
        device=resolved_device,
        files=files,
        st=read_sentence_transformers(directory_folder(files.directory)),
        dtype=resolve_dtype(opt.get("dtype", "auto"), device_type(resolved_device)),
        trust=bool(opt.get("trust_remote_code", False)),
        graphs=device_type(resolved_device) == "cuda" and bool(opt.get("cuda_graphs", True)),
    )


@dataclass(frozen=True)
class ModelKeys:
    """A model's cache keys and vector width, known from its files before it loads."""

    key: str
    query_key: str
    dim: int


def model_keys(
    model: str | os.PathLike = "minilm", device: str = "auto", **options: Any
) -> ModelKeys | None:
    """The keys and width `load_embedder(model, device, **options)` would give, read from the
    model's files without loading transformers or the weights: on a CPU only (on CUDA the key
    says whether the forward passes replay from CUDA graphs, which only the loaded model tells),
    and only for a `config.json` that names `hidden_size` and `max_position_embeddings` (others
    name them otherwise, which transformers maps). None where they cannot be known, and for a
    backend (`embedding.models.backend_class`), whose keys are known once it is made."""
    if backend_class(os.fspath(model)) is not None:
        return None
    resolved = resolve_options(model, device, options)
    if device_type(resolved.device) != "cpu":
        return None
    folder = directory_folder(resolved.files.directory)
    config = folder.json("config.json") or {}
    if not {"hidden_size", "max_position_embeddings"} <= set(config):
        return None
    settings = resolved.settings(
        (folder.json("tokenizer_config.json") or {}).get("model_max_length"),
        config["max_position_embeddings"],
        parameters=0,  # a CPU budget's default does not depend on it
    )
    key = model_key(resolved.files.label, fingerprint(resolved.files), settings, "cpu")
    return ModelKeys(key, query_model_key(key, settings.query_prefix), int(config["hidden_size"]))


def model_key(label: str, digest: str, settings: EmbedderSettings, device: str = "cpu") -> str:
    """Filesystem-safe cache key: model label and content hash, pooling, norm, window, dtype;
    on an accelerator (`device` "cuda", "mps") also the device, the token budget and, when the
    forward passes replay from CUDA graphs, "-graphs"; on a CPU the device and the budget only
    when the budget is not the CPU default.

    Every micro-batch is filled to the budget's row count and kernels are chosen by shape, so
    vectors of another device or budget may differ in their last bits and must not be shared; nor
    those of graphs, which always pass the attention a mask (an eager batch without padding gets
    none, and another kernel). A CPU key at the default budget is the key CPU caches had before
    CPUs filled their micro-batches: on the CPUs that made them (AMD EPYC, AVX2 or AVX-512 BF16) a
    row's bits depended on neither the row count nor the budget. The query prefix is left out:
    cached vectors are always passages (query=False)."""
    norm = "norm" if settings.normalize else "raw"
    key = f"{label}-{digest[:12]}-{settings.pooling}-{norm}-{settings.max_length}-{settings.dtype}"
    if device == "cpu" and settings.token_budget == DEFAULT_TOKEN_BUDGET["cpu"]:
        return key
    return f"{key}-{device}-b{settings.token_budget}" + ("-graphs" if settings.cuda_graphs else "")


def query_model_key(key: str, query_prefix: str) -> str:
    """Cache key of query vectors: the model key plus a digest of the query prefix and their
    micro-batches' budget (`QUERY_TOKEN_BUDGET`)."""
    digest = hashlib.sha256(query_prefix.encode("utf-8")).hexdigest()
    return f"{key}-q{digest[:8]}-b{QUERY_TOKEN_BUDGET}"


def default_token_budget(device: str, parameters: int, graphs: bool) -> int:
    """Padded tokens per micro-batch when the options do not say: the device's
    `DEFAULT_TOKEN_BUDGET`, except on CUDA without CUDA graphs (`graphs` False) for a model under
    `SMALL_MODEL_PARAMETERS`, whose micro-batches are made 4x larger (`SMALL_MODEL_CUDA_BUDGET`) to
    give each launch more work."""
    if device == "cuda" and not graphs and parameters < SMALL_MODEL_PARAMETERS:
        return SMALL_MODEL_CUDA_BUDGET
    return DEFAULT_TOKEN_BUDGET[device]


def resolve_device(device: str) -> str:
    """ "auto" -> "cuda" when CUDA is present, else "cpu"; an explicit device must be usable here.
    Torch is imported only to ask about an accelerator: "cpu" needs none."""
    if device == "cpu":
        return device
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"device {device!r} is not a torch device") from error
    if resolved.type == "cuda":
        _check_cuda(device, resolved.index)
    if resolved.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r}: MPS is not available on this machine")
    if resolved.type not in DEFAULT_TOKEN_BUDGET:
        raise ValueError(f"device {device!r}: expected auto, cpu, cuda, cuda:N or mps")
    return str(resolved)


def _check_cuda(device: str, index: int | None) -> None:
    """Refuse a CUDA device this process cannot use, saying why: a torch built without CUDA (the
    CPU wheel on a GPU node), no GPU visible (the driver, `CUDA_VISIBLE_DEVICES`), or an index
    past the GPUs visible. It said "CUDA is not available on this machine" for all three."""
    import torch

    if not torch.cuda.is_available():
        if torch.version.cuda is None and torch.version.hip is None:
            why = f"this torch ({torch.__version__}) is built without CUDA; install a CUDA build"
        else:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            why = (
                f"torch {torch.__version__} sees no GPU here (CUDA_VISIBLE_DEVICES={visible!r}); "
                "is the NVIDIA driver loaded (nvidia-smi)?"
            )
        raise ValueError(f"device {device!r}: CUDA is not available: {why}")
    count = torch.cuda.device_count()
    if index is not None and index >= count:
        raise ValueError(f"device {device!r}: {count} GPU(s) visible here, numbered from 0")


def device_type(device: str) -> str:
    """The kind of a resolved device: "cuda:1" -> "cuda"."""
    return device.partition(":")[0]


NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_tile"})  # Linux's names (`cpu_flags`)


def resolve_dtype(dtype: str, device: str, native_bf16: Callable[[], bool] | None = None) -> str:
    """ "auto" -> fp16 on CUDA and MPS (`device`: a device's kind); on CPUs bf16 with native bf16
    support, else fp32.

    Without AVX-512 BF16 or AMX, CPU bf16 autocast is several times slower than fp32.
    `native_bf16` is the CPU capability check (default `cpu_has_native_bf16`)."""
    if dtype != "auto":
        return _choice("dtype", dtype, DTYPE_NAMES)
    if device in ("cuda", "mps"):
        return "fp16"
    return "bf16" if (native_bf16 or cpu_has_native_bf16)() else "fp32"


def cpu_has_native_bf16() -> bool:
    """Whether this CPU runs bf16 matrix multiplies natively (AVX-512 BF16 or AMX): as the
    kernel's CPU flags say where Linux lists them, without importing torch (1 s of an embedding
    actor's start with `dtype: auto`), else as torch's own report says (`torch_has_native_bf16`,
    which agrees with those flags)."""
    flags = cpu_flags()
    if flags is None:
        return torch_has_native_bf16()
    return bool(flags & NATIVE_BF16_FLAGS)


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str] | None:
    """The CPU flags Linux lists in /proc/cpuinfo (empty where it names none, as on ARM), or None
    where that file cannot be read (macOS, Windows)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        return None
    return set()


def torch_has_native_bf16() -> bool:
    """`cpu_has_native_bf16` as torch's own CPU capability report says (it imports torch)."""
    import torch

    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def _check_flags(options: dict[str, Any]) -> None:
    """ValueError for a flag option that is not a bool: they were read by truthiness, so
    `normalize="no"` normalised and `trust_remote_code="false"` ran the model's own code."""
    for name in ("normalize", "trust_remote_code", "cuda_graphs"):
        if name in options and not isinstance(options[name], bool):
            raise ValueError(f"{name} must be True or False, got {options[name]!r}")


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
    return value
