"""Load a model once and turn texts into L2-normalised float32 vectors on CPU or GPU."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError

from embedding.attention_mask import model_mask, probe_batch, takes_broadcast_mask
from embedding.batching import (
    MicroBatch,
    bucket_lengths,
    fills_micro_batches,
    mkl_strict,
    plan_batches,
    rows_per_batch,
)
from embedding.cuda_graphs import graphed
from embedding.encoder import (
    Encoded,
    encode,
    encoder_digest,
    positive_int,
    text_list,
    window_encoder,
)
from embedding.keys import (
    DTYPE_NAMES,
    QUERY_TOKEN_BUDGET,
    EmbedderSettings,
    model_key,
    query_model_key,
    resolve_options,
)
from embedding.models import EmbeddingBackend, fingerprint, load_backend, no_progress_bars

DTYPES = dict(zip(DTYPE_NAMES, (torch.float32, torch.bfloat16, torch.float16), strict=True))
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
        specials = self._encoder.encode("").ids  # what the tokenizer adds to every text
        if len(specials) >= settings.max_length:  # every text cut to them: one vector for all
            raise ValueError(
                f"model {name!r}: max_length {settings.max_length} leaves no room for a text's "
                f"tokens beside the {len(specials)} special tokens the tokenizer adds"
            )
        # A filler row: the tokens of an empty text (at least one, so no row is wholly masked).
        self._filler = specials or [self._pad_id]
        self._fills = fills_micro_batches(device.type, settings.dtype, mkl_strict())
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
        if self._graphs is None and device.type != "cpu":
            # graphs asked for and not kept: this run is eager, its key that of `cuda_graphs:
            # false`, so it computes as such a run does (transformers' own mask)
            self._broadcast_mask = False
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
        prefix), as `embed_encoded` takes them; TypeError for a single string."""
        texts = text_list(texts)
        if query and self.settings.query_prefix:
            texts = [self.settings.query_prefix + text for text in texts]
        with self._tokenizer_lock:
            return encode(self._encoder, texts)

    def embed_encoded(
        self,
        encoded: Encoded,
        *,
        query: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> Embedded:
        """The vectors of texts this embedder's `encode` tokenized, or an encoder with the same
        `encoder_digest` (a build's chunk tasks); `query=True` for texts encoded as queries;
        `progress` is called with the rows of each micro-batch once it is launched.

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
                if progress is not None:
                    progress(len(batch.rows))
            # One copy to the host after the last micro-batch: on an accelerator the only wait for
            # the device in this loop (a per-batch copy of row indices to the device waited for
            # each batch to finish before the next one's inputs were even built).
            stacked = torch.cat(parts).cpu().numpy()
            held = time.perf_counter() - started
        result = np.empty_like(stacked)
        result[np.asarray(order)] = stacked
        _check_finite(result, f"model {self.name!r} ({self.settings.dtype} on {self.device})")
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


def load_embedder(
    model: str | os.PathLike = "minilm", device: str = "auto", **options: Any
) -> Embedder | EmbeddingBackend:
    """Load a model by name or folder (see `embedding.models`) onto a device ("auto": CUDA when
    present); a third-party backend's name (`embedding.models.EmbeddingBackend`) gives its
    embedder, made with the device and these options.

    Options (None means the model's own default): dtype ("auto"|"fp32"|"bf16"|"fp16"),
    pooling ("mean"|"cls"), normalize (bool, default True), max_length, query_prefix,
    trust_remote_code (default False), revision, num_threads (torch CPU threads),
    token_budget (padded tokens per micro-batch), cuda_graphs (on CUDA, replay the forward passes
    from CUDA graphs where the model allows: default True), storage_options and local_dir (fsspec
    models).
    """
    if (backend := load_backend(os.fspath(model), device, options)) is not None:
        return backend
    resolved = resolve_options(model, device, options)
    model = resolved.model
    _set_threads(resolved.options.get("num_threads"))
    files, trust, torch_device = resolved.files, resolved.trust, torch.device(resolved.device)

    from transformers import AutoModel, AutoTokenizer

    with _loading(model, "tokenizer", files.directory):
        tokenizer = AutoTokenizer.from_pretrained(
            files.directory, trust_remote_code=trust, use_fast=True
        )
    if not tokenizer.is_fast:
        raise ValueError(f"model {model!r}: a fast (Rust) tokenizer is required")
    _check_vocabulary(tokenizer, model, files.directory)
    tokenizer.padding_side = "right"
    with no_progress_bars(), _loading(model, "weights", files.directory):
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


@contextlib.contextmanager
def _loading(model: str, what: str, directory) -> Iterator[None]:
    """A model's files that transformers cannot load are a ValueError naming the model and its
    folder: a truncated model.safetensors was "SafetensorError: Error while deserializing header:
    invalid header length", a config.json of another size a RuntimeError, neither naming either."""
    try:
        yield
    except (OSError, ValueError, RuntimeError, SafetensorError) as error:
        raise ValueError(
            f"model {model!r}: cannot load its {what} from {directory}: "
            f"{type(error).__name__}: {error}"
        ) from error


def _check_vocabulary(tokenizer, model: str, directory) -> None:
    """ValueError when the tokenizer knows no token but its special ones: transformers makes
    such a tokenizer for a folder without tokenizer.json or vocabulary file (vocab.txt, ...),
    and it turned every word into [UNK], so that every text got the same vector."""
    if set(tokenizer.get_vocab()) <= set(tokenizer.all_special_tokens):
        raise ValueError(
            f"model {model!r}: its tokenizer has no vocabulary beyond its special tokens: no "
            f"tokenizer.json or vocabulary file (vocab.txt, vocab.json, ...) in {directory}?"
        )


def _check_finite(vectors: np.ndarray, model: str) -> None:
    """ValueError when a vector holds NaN or inf (fp16's range overflowed in the model, say): such
    a vector made null similarities in index.json and misordered its source's stripes, and the
    cache would have kept it for every later build."""
    bad = ~np.isfinite(vectors).all(axis=1)
    if bad.any():
        raise ValueError(
            f"{model} gave a vector with NaN or inf for {int(bad.sum())} of {len(vectors)} texts "
            f"(the first: item {int(np.argmax(bad))}); a dtype whose range the model's activations "
            "overflow? fp32 and bf16 hold them"
        )


def _set_threads(num_threads: int | None) -> None:
    """Ray starts workers with OMP_NUM_THREADS=1: give torch the CPUs this worker was given."""
    if num_threads is None:
        return
    torch.set_num_threads(positive_int("num_threads", num_threads))


def _checked_texts(texts: Sequence[str]) -> list[str]:
    """`texts` as a list of valid Unicode strings; TypeError or ValueError naming the item."""
    texts = text_list(texts)
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"embed: item {index} is {type(text).__name__}, expected str")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:  # a lone surrogate (undecodable bytes in argv)
            raise ValueError(
                f"embed: item {index} is not valid Unicode: {error.reason} at character "
                f"{error.start} ({text[error.start]!r})"
            ) from None
    return texts
