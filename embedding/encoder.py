"""A model's Rust tokenizer cut to the model window, without torch or transformers.

The embedder tokenizes with it (`embedding.embedder`), and so can a CPU worker ahead of the model:
a build's chunk tasks encode each chunk's embedding text (`encode`) with the encoder the driver
built from the model's own files (`model_encoder`), and an embedding actor takes those ids only
when its own encoder serialises to the same JSON (`encoder_digest`); otherwise it tokenizes the
texts itself. Equal JSON means the same vocabulary, normalizer, special tokens and window, so the
ids, and therefore the vectors, are the same either way.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import tokenizers

from embedding.models import model_folder, read_sentence_transformers

UNBOUNDED = 1_000_000  # transformers' "no limit" model_max_length is far above any real window
PARALLELISM = "TOKENIZERS_PARALLELISM"  # read by tokenizers on every batch call


@dataclass(frozen=True, eq=False)
class Encoded:
    """The token ids of texts cut to a model window, in text order, and whether each was cut."""

    ids: tuple[Sequence[int], ...]
    cut: tuple[bool, ...]

    def __post_init__(self):
        if len(self.ids) != len(self.cut):
            raise ValueError(f"Encoded: {len(self.ids)} id rows but {len(self.cut)} cut flags")

    def __len__(self) -> int:
        return len(self.ids)


def window_encoder(
    tokenizer: tokenizers.Tokenizer, max_length: int, side: str = "right"
) -> tokenizers.Tokenizer:
    """A private copy of a model's Rust tokenizer that cuts every text to `max_length` tokens
    (special tokens included) on the model's truncation `side` and pads nothing: the ids that
    transformers' own call gives with `truncation=True, max_length=...`, without the Python
    layers it runs on every call (a fifth to two fifths of the time, measured on tldr-en)."""
    encoder = tokenizers.Tokenizer.from_str(tokenizer.to_str())
    encoder.enable_truncation(max_length, direction=side)
    encoder.no_padding()
    return encoder


def encoder_digest(encoder: tokenizers.Tokenizer) -> str:
    """sha256 (hex) of the encoder's JSON: vocabulary, rules, special tokens and window."""
    return hashlib.sha256(encoder.to_str().encode("utf-8")).hexdigest()


def encode(
    encoder: tokenizers.Tokenizer, texts: Sequence[str], *, parallel: bool = True
) -> Encoded:
    """The ids of every text in one batched call, and which texts the window cut.

    `parallel=False` keeps the call on this thread: tokenizers otherwise starts a thread per
    core, too many for a worker that a scheduler gave one CPU. Offsets are not computed
    (`encode_batch_fast`: a fifth less CPU time than `encode_batch`, the same ids).
    TypeError for a single string (`text_list`)."""
    texts = text_list(texts)
    with contextlib.nullcontext() if parallel else _one_thread():
        encodings = encoder.encode_batch_fast(texts) if texts else []
    return Encoded(
        tuple(encoding.ids for encoding in encodings),
        tuple(bool(encoding.overflowing) for encoding in encodings),
    )


def text_list(texts: Sequence[str]) -> list[str]:
    """`texts` as a list; TypeError naming the argument for a single string, whose characters
    were each taken for a text of their own."""
    if isinstance(texts, str):
        shown = texts if len(texts) <= 40 else f"{texts[:40]}…"
        raise TypeError(f"texts must be a sequence of strings, got the string {shown!r}")
    return list(texts)


@dataclass(frozen=True)
class Window:
    """How an encoder frames the ids of one text: the special tokens it puts before and after
    them, and its window, which keeps the first tokens that fit ("right" truncation) or the last
    ("left")."""

    prefix: tuple[int, ...]
    suffix: tuple[int, ...]
    max_length: int
    side: str

    def frame(self, rows: Sequence[Sequence[int]]) -> Encoded:
        """What `encode` gives for the texts whose ids (without special tokens) are `rows`."""
        room = self.max_length - len(self.prefix) - len(self.suffix)
        prefix, suffix = list(self.prefix), list(self.suffix)
        if self.side == "right":
            ids = tuple(prefix + list(row[:room]) + suffix for row in rows)
        else:
            ids = tuple(prefix + list(row[max(0, len(row) - room) :]) + suffix for row in rows)
        return Encoded(ids, tuple(len(row) > room for row in rows))


def encoder_window(config: dict[str, Any]) -> Window | None:
    """The `Window` of a window encoder, from its tokenizer.json (`config`); None unless it is
    one `Window` reproduces: truncation on, no padding, and a BERT or template post-processor
    whose single-text template is special tokens, the text, special tokens."""
    truncation, processor = config.get("truncation"), config.get("post_processor") or {}
    if (
        not truncation
        or config.get("padding")
        or truncation.get("strategy") not in ("LongestFirst", "OnlyFirst")
        or truncation.get("direction", "Right") not in ("Right", "Left")
    ):
        return None
    if processor.get("type") == "BertProcessing":
        prefix, suffix = (processor["cls"][1],), (processor["sep"][1],)
    elif processor.get("type") == "TemplateProcessing":
        pieces = [next(iter(piece.items())) for piece in processor["single"]]
        kinds = [kind for kind, _ in pieces]
        if kinds.count("Sequence") != 1:
            return None
        at = kinds.index("Sequence")
        specials = processor["special_tokens"]
        ids = [
            tuple(specials[piece["id"]]["ids"]) if kind == "SpecialToken" else ()
            for kind, piece in pieces
        ]
        prefix, suffix = sum(ids[:at], ()), sum(ids[at + 1 :], ())
    else:
        return None
    window = Window(
        prefix, suffix, truncation["max_length"], truncation.get("direction", "Right").lower()
    )
    return window if window.max_length > len(prefix) + len(suffix) else None


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """tokenizers' batch calls run on the calling thread alone meanwhile."""
    before = os.environ.get(PARALLELISM)
    os.environ[PARALLELISM] = "false"
    try:
        yield
    finally:
        if before is None:
            del os.environ[PARALLELISM]
        else:
            os.environ[PARALLELISM] = before


def window_length(
    override: int | None,
    st_length: int | None,
    model_max_length: int | None,
    positions: int | None,
) -> int:
    """The model window in tokens: the `max_length` option, else sentence-transformers'
    max_seq_length, else the tokenizer's model_max_length, else the model's positions (512
    when unknown); never more than the positions."""
    if override is not None:
        length, source = positive_int("max_length", override), "max_length"
    elif st_length:
        length, source = int(st_length), "sentence-transformers' max_seq_length"
    elif model_max_length and model_max_length < UNBOUNDED:
        length, source = int(model_max_length), "the tokenizer's model_max_length"
    else:
        length, source = positions or 512, ""
    if positions and length > positions:
        # a window the caller did not give is named with where it came from (a tokenizer of
        # another model beside the weights said "max_length 512", which nobody had set)
        fix = "" if override is not None else "; set max_length to at most the positions"
        raise ValueError(f"{source} {length} exceeds the model's {positions} positions{fix}")
    return length


def positive_int(name: str, value: int) -> int:
    """`value` when it is a positive integer (not a bool); else ValueError naming the option."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def model_encoder(
    model: str,
    max_length: int | None = None,
    *,
    revision: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> tokenizers.Tokenizer | None:
    """The window encoder of a model, read from its tokenizer.json and the window settings beside
    it (`embedding.models.model_folder`: on this machine, under an fsspec URI or on the hub; never
    its weights); None for a model without a tokenizer.json, or whose files cannot be named.

    A problem with the model's files raises ValueError here as it would when the model loads."""
    folder = model_folder(model, revision=revision, storage_options=storage_options)
    spec = folder.read("tokenizer.json") if folder else None
    if spec is None:
        return None
    tokenizer_config = folder.json("tokenizer_config.json") or {}
    length = window_length(
        max_length,
        read_sentence_transformers(folder).max_length,
        tokenizer_config.get("model_max_length"),
        (folder.json("config.json") or {}).get("max_position_embeddings"),
    )
    try:
        tokenizer = tokenizers.Tokenizer.from_str(spec.decode("utf-8"))
    except Exception as error:  # the Rust parser raises a bare Exception
        raise ValueError(f"model {model!r}: unreadable tokenizer.json ({error})") from error
    return window_encoder(tokenizer, length, tokenizer_config.get("truncation_side") or "right")
