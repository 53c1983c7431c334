"""Load a model once and turn texts into L2-normalised float32 vectors on CPU or GPU."""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from embedding.attention_mask import model_mask, probe_batch, takes_broadcast_mask
from embedding.batching import (
    MicroBatch,
    bucket_lengths,
    fills_micro_batches,
    plan_batches,
    rows_per_batch,
)
from embedding.cuda_graphs import graphed
from embedding.encoder import (
    Encoded,
    encode,
    encoder_digest,
    positive_int,
    window_encoder,
    window_length,
)
from embedding.models import (
    ModelFiles,
    SentenceTransformersSettings,
    directory_folder,
    fingerprint,
    no_progress_bars,
    read_sentence_transformers,
    resolve_model,
)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
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
# Micro-batch shapes `Embedder.warm_up` prepares: bucket lengths up to 1,024 tokens (all 32 of a
# 512-token window); a longer window's longer buckets are captured when a call first meets them.
WARM_UP_SHAPES = 64


@dataclass(frozen=True, eq=False)
class Embedded:
    """Vectors (n, dim) float32 in input order, which inputs were cut to the model window, the
    token slots computed (`padded_tokens`) for the `tokens` the inputs really have, and the wall
    time the model was held for them (`model_seconds`: the forward passes, their padded inputs
    and the copy of the vectors back to the host; on an accelerator, the time it was driven)."""

    vectors: np.ndarray
    truncated: int
    truncated_rows: tuple[int, ...] = ()
    tokens: int = 0
    padded_tokens: int = 0
    model_seconds: float = 0.0


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


class Embedder:
    """A loaded model: `embed` texts into float32 vectors, in input order.

    Threads may share one: tokenizing and the model each take one call at a time, so one thread
    tokenizes while another runs the model (a build's embedding actor runs two batches at once:
    one batch's cache lookups and tokens overlap the other's model call).

    `settings.cuda_graphs` asks for CUDA graphs; the embedder keeps them only for a model that
    takes the broadcast padding mask and whose graph gives the bits of an eager call, and its
    `settings` and `key` say which it runs."""

    def __init__(
        self,
        *,
        name: str,
        label: str,
        digest: str,
        model,
        tokenizer,
        settings: EmbedderSettings,
        device: torch.device,
    ):
        self.name = name
        self.model = model
        self.tokenizer = tokenizer
        self.device = str(device)
        self.dim = int(model.config.hidden_size)
        self._device = device
        self._pad_id = tokenizer.pad_token_id or 0
        self._encoder = window_encoder(
            tokenizer.backend_tokenizer, settings.max_length, tokenizer.truncation_side
        )
        # Ids from another encoder with this digest are this one's ids (`embed_encoded`).
        self.encoder_digest = encoder_digest(self._encoder)
        # A filler row: the tokens of an empty text (at least one, so no row is wholly masked).
        self._filler = self._encoder.encode("").ids or [self._pad_id]
        self._fills = fills_micro_batches(device.type, settings.dtype)
        self._tokenizer_lock = threading.Lock()  # one tokenizer call at a time
        self._model_lock = threading.Lock()  # one model call at a time: no oversubscription
        self.settings = settings  # as asked; `_vectors` and `_autocast` read it from here on
        # On GPUs the broadcast mask comes with CUDA graphs only: eager GPU runs compute as before.
        self._broadcast_mask = (device.type == "cpu" or settings.cuda_graphs) and (
            takes_broadcast_mask(model, device, self._autocast)
        )
        self._graphs = (
            graphed(self._vectors, device, probe_batch(model.config.vocab_size))
            if settings.cuda_graphs and self._broadcast_mask
            else None
        )
        self.settings = replace(settings, cuda_graphs=self._graphs is not None)
        self.key = model_key(label, digest, self.settings, device.type)

    @property
    def query_key(self) -> str:
        """Cache key of query vectors (`query_model_key`)."""
        return query_model_key(self.key, self.settings.query_prefix)

    def embed(self, texts: Sequence[str], *, query: bool = False) -> np.ndarray:
        """Vectors of shape (len(texts), dim), float32, L2-normalised unless normalize=False.

        `query=True` prepends the model's query prefix (for questions, never for chunks)."""
        return self.embed_with_stats(texts, query=query).vectors

    def embed_with_stats(self, texts: Sequence[str], *, query: bool = False) -> Embedded:
        """Like `embed`, and also count the texts longer than the model window (truncated)."""
        return self.embed_encoded(self.encode(_checked_texts(texts), query=query), query=query)

    def encode(self, texts: Sequence[str], *, query: bool = False) -> Encoded:
        """The token ids of `texts` cut to the model window (`query=True`: with the query
        prefix), as `embed_encoded` takes them."""
        if query and self.settings.query_prefix:
            texts = [self.settings.query_prefix + text for text in texts]
        with self._tokenizer_lock:
            return encode(self._encoder, texts)

    def embed_encoded(self, encoded: Encoded, *, query: bool = False) -> Embedded:
        """The vectors of texts this embedder's `encode` tokenized, or an encoder with the same
        `encoder_digest` (a build's chunk tasks); `query=True` for texts encoded as queries.

        Rows run in fixed-shape micro-batches (`embedding.batching`) of the token budget, or of
        `QUERY_TOKEN_BUDGET` for queries, so a text's vector is the same bits whatever else is
        embedded with it."""
        budget = QUERY_TOKEN_BUDGET if query else self.settings.token_budget
        ids = encoded.ids
        if not ids:
            return Embedded(np.zeros((0, self.dim), dtype=np.float32), 0)
        padded = 0
        order: list[int] = []
        parts: list[torch.Tensor] = []
        with self._model_lock:
            started = time.perf_counter()
            for batch in plan_batches([len(row) for row in ids], budget, self.settings.max_length):
                vectors = self._forward([ids[i] for i in batch.rows], batch, budget)
                parts.append(vectors[: len(batch.rows)])
                order.extend(batch.rows)
                padded += vectors.shape[0] * batch.length
            # One copy to the host after the last micro-batch: on an accelerator the only wait for
            # the device in this loop (a per-batch copy of row indices to the device waited for
            # each batch to finish before the next one's inputs were even built).
            stacked = torch.cat(parts).cpu().numpy()
            held = time.perf_counter() - started
        result = np.empty_like(stacked)
        result[np.asarray(order)] = stacked
        truncated_rows = tuple(i for i, cut in enumerate(encoded.cut) if cut)
        return Embedded(
            result,
            len(truncated_rows),
            truncated_rows,
            tokens=sum(len(row) for row in ids),
            padded_tokens=padded,
            model_seconds=held,
        )

    def warm_up(self) -> int:
        """On an accelerator, run one micro-batch of each shape a call can have, up to
        `WARM_UP_SHAPES` of them, shortest first (with CUDA graphs: capture each shape's graph), so
        that later calls pay no kernel's first load and no capture; returns the number of shapes
        (0 on CPUs, which load no kernels and capture no graphs).

        It has finished on the device when it returns."""
        if self._device.type == "cpu":
            return 0
        lengths = bucket_lengths(self.settings.max_length)[:WARM_UP_SHAPES]
        with self._model_lock:
            for length in lengths:
                vectors = self._forward(
                    [self._filler], MicroBatch(length, (0,)), self.settings.token_budget
                )
            vectors.cpu()  # waits for the device
        return len(lengths)

    def _forward(self, ids: list[Sequence[int]], batch: MicroBatch, budget: int) -> torch.Tensor:
        """Pooled (and normalised) float32 vectors of one micro-batch, on the model's device.

        Every row is padded to the batch's bucket length, and the batch is filled up to its full
        row count under `budget` with filler rows (their vectors are computed and dropped): GPUs,
        and CPUs such as an Intel Xeon with AMX (MKL's fp32 GEMM, oneDNN's bf16 one), pick their
        kernels' blocking and threading from the row count. Not in MKL's strict mode in fp32
        (`fills_micro_batches`), whose bits do not depend on it."""
        full = rows_per_batch(batch.length, budget) if self._fills else len(ids)
        rows = [*ids, *[self._filler] * (full - len(ids))]
        lengths = np.fromiter((len(row) for row in rows), dtype=np.int64, count=len(rows))
        mask = np.arange(batch.length) < lengths[:, None]
        input_ids = np.full(mask.shape, self._pad_id, dtype=np.int64)
        input_ids[mask] = np.concatenate(rows)  # row-major: each row's ids fill its real slots
        host = (torch.from_numpy(input_ids), torch.from_numpy(mask.astype(np.int64)))
        if self._graphs is not None:
            return self._graphs(*host)
        if self._device.type != "cuda":
            return self._vectors(*(t.to(self._device) for t in host))
        pinned = (t.pin_memory() for t in host)
        return self._vectors(*(t.to(self._device, non_blocking=True) for t in pinned))

    def _vectors(self, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The model's pooled (and normalised) float32 vectors of padded ids on its device."""
        with torch.inference_mode():
            with self._autocast():
                hidden = self.model(
                    input_ids=input_ids, attention_mask=model_mask(mask, self._broadcast_mask)
                ).last_hidden_state
            hidden = hidden.float()
            if self.settings.pooling == "cls":
                pooled = hidden[:, 0]
            else:
                weights = mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
            if self.settings.normalize:
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return pooled

    def _autocast(self):
        """bf16/fp16 on CPU run as autocast over fp32 weights; on GPUs the weights are cast."""
        if self._device.type == "cpu" and self.settings.dtype != "fp32":
            return torch.autocast("cpu", dtype=DTYPES[self.settings.dtype])
        return contextlib.nullcontext()


@dataclass(frozen=True)
class _Resolved:
    """What `load_embedder` decides from its options and the model's files, before transformers
    loads: the device, the files, sentence-transformers' settings, the dtype."""

    model: str
    options: dict[str, Any]
    device: torch.device
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
                else default_token_budget(self.device.type, parameters, self.graphs),
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


def _resolve(model: str, device: str, options: dict[str, Any]) -> _Resolved:
    """Check the options, set torch's threads, resolve the device, the model's files and the
    dtype."""
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise ValueError(f"load_embedder: unknown option(s) {unknown}; expected {sorted(_OPTIONS)}")
    opt = {key: value for key, value in options.items() if value is not None}
    _set_threads(opt.get("num_threads"))
    torch_device = resolve_device(device)
    files = resolve_model(
        model,
        revision=opt.get("revision"),
        storage_options=opt.get("storage_options"),
        local_dir=opt.get("local_dir"),
    )
    return _Resolved(
        model=model,
        options=opt,
        device=torch_device,
        files=files,
        st=read_sentence_transformers(directory_folder(files.directory)),
        dtype=resolve_dtype(opt.get("dtype", "auto"), torch_device),
        trust=bool(opt.get("trust_remote_code", False)),
        graphs=torch_device.type == "cuda" and bool(opt.get("cuda_graphs", True)),
    )


def load_embedder(model: str = "minilm", device: str = "auto", **options: Any) -> Embedder:
    """Load a model by name (see `embedding.models`) onto a device ("auto": CUDA when present).

    Options (None means the model's own default): dtype ("auto"|"fp32"|"bf16"|"fp16"),
    pooling ("mean"|"cls"), normalize (bool, default True), max_length, query_prefix,
    trust_remote_code (default False), revision, num_threads (torch CPU threads),
    token_budget (padded tokens per micro-batch), cuda_graphs (on CUDA, replay the forward passes
    from CUDA graphs where the model allows: default True), storage_options and local_dir (fsspec
    models).
    """
    resolved = _resolve(model, device, options)
    files, trust, torch_device = resolved.files, resolved.trust, resolved.device

    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        files.directory, trust_remote_code=trust, use_fast=True
    )
    if not tokenizer.is_fast:
        raise ValueError(f"model {model!r}: a fast (Rust) tokenizer is required")
    tokenizer.padding_side = "right"
    with no_progress_bars():
        loaded = AutoModel.from_pretrained(
            files.directory,
            trust_remote_code=trust,
            use_safetensors=(files.directory / "model.safetensors").is_file() or None,
            dtype=DTYPES[resolved.dtype] if torch_device.type != "cpu" else torch.float32,
        )
    loaded.eval().to(torch_device)
    return Embedder(
        name=model,
        label=files.label,
        digest=fingerprint(files),
        model=loaded,
        tokenizer=tokenizer,
        settings=resolved.settings(
            tokenizer.model_max_length,
            getattr(loaded.config, "max_position_embeddings", None),
            loaded.num_parameters(),
        ),
        device=torch_device,
    )


@dataclass(frozen=True)
class ModelKeys:
    """A model's cache keys and vector width, known from its files before it loads."""

    key: str
    query_key: str
    dim: int


def model_keys(model: str = "minilm", device: str = "auto", **options: Any) -> ModelKeys | None:
    """The keys and width `load_embedder(model, device, **options)` would give, read from the
    model's files without loading transformers or the weights: on a CPU only (on CUDA the key
    says whether the forward passes replay from CUDA graphs, which only the loaded model tells),
    and only for a `config.json` that names `hidden_size` and `max_position_embeddings` (others
    name them otherwise, which transformers maps). None where they cannot be known."""
    resolved = _resolve(model, device, options)
    if resolved.device.type != "cpu":
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


def resolve_device(device: str) -> torch.device:
    """ "auto" -> CUDA when present, else CPU; an explicit device must be usable here."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"device {device!r} is not a torch device") from error
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: CUDA is not available on this machine")
    if resolved.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r}: MPS is not available on this machine")
    if resolved.type not in DEFAULT_TOKEN_BUDGET:
        raise ValueError(f"device {device!r}: expected auto, cpu, cuda, cuda:N or mps")
    return resolved


def resolve_dtype(
    dtype: str, device: torch.device, native_bf16: Callable[[], bool] | None = None
) -> str:
    """ "auto" -> fp16 on CUDA and MPS; on CPUs bf16 with native bf16 support, else fp32.

    Without AVX-512 BF16 or AMX, CPU bf16 autocast is several times slower than fp32.
    `native_bf16` is the CPU capability check (default `cpu_has_native_bf16`)."""
    if dtype != "auto":
        return _choice("dtype", dtype, tuple(DTYPES))
    if device.type in ("cuda", "mps"):
        return "fp16"
    return "bf16" if (native_bf16 or cpu_has_native_bf16)() else "fp32"


def cpu_has_native_bf16() -> bool:
    """Whether this CPU runs bf16 matrix multiplies natively (AVX-512 BF16 or AMX), as torch's
    own CPU capability report says."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def _set_threads(num_threads: int | None) -> None:
    """Ray starts workers with OMP_NUM_THREADS=1: give torch the CPUs this worker was given."""
    if num_threads is None:
        return
    torch.set_num_threads(positive_int("num_threads", num_threads))


def _checked_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("embed expects a sequence of strings, got a single string")
    texts = list(texts)
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"embed: item {index} is {type(text).__name__}, expected str")
    return texts


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
    return value
