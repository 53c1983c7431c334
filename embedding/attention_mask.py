"""How the embedder hands a micro-batch's padding mask to the model.

Given a (rows, length) padding mask, transformers builds a (rows, 1, length, length) boolean mask on
every forward call before SDPA (`masking_utils.create_bidirectional_mask`); for a small model that
is a large share of the call (28% of the benchmark's 1-layer stand-in BERT at 64 rows × 256
tokens). The same function passes a 4D mask through unchanged, and SDPA broadcasts a
(rows, 1, 1, length) mask over the query positions: the same keys are masked and the vectors come
out the same bits, without the (rows, length, length) mask. On a GPU it also spares each forward
pass transformers' check for a batch without padding (`padding_mask.all()`: a wait for the device),
and the other attention kernel such a batch would get, so a row's bits never depend on whether its
neighbours are padded.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable

import torch

PROBE_ROWS, PROBE_LENGTH, PROBE_REAL = 2, 8, 3  # a probe batch: one full row, one padded after 3


def probe_batch(vocabulary: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Host token ids and padding mask of a small batch: one full row, one padded after 3."""
    ids = torch.arange(PROBE_ROWS * PROBE_LENGTH).reshape(PROBE_ROWS, PROBE_LENGTH) + 1
    ids %= vocabulary
    mask = torch.ones_like(ids)
    mask[1, PROBE_REAL:] = 0
    return ids, mask


def takes_broadcast_mask(
    model, device: torch.device, autocast: Callable[[], contextlib.AbstractContextManager]
) -> bool:
    """Whether `model` can take its padding mask as (rows, 1, 1, length) (`model_mask`).

    Only for a transformers encoder whose attention is SDPA and whose masks come from
    `masking_utils` (a decoder's causal mask would be lost), with a vocabulary to draw a probe
    batch from, and only if that batch gives the same bits both ways on `device` under
    `autocast`."""
    config = model.config
    module = sys.modules.get(type(model).__module__)
    vocabulary = getattr(config, "vocab_size", None)
    if not (
        getattr(config, "_attn_implementation", None) == "sdpa"
        and not getattr(config, "is_decoder", False)
        and hasattr(module, "create_bidirectional_mask")
        and vocabulary
    ):
        return False
    ids, mask = (t.to(device) for t in probe_batch(vocabulary))
    with torch.inference_mode(), autocast():
        plain = model(input_ids=ids, attention_mask=mask).last_hidden_state
        broadcast = model(input_ids=ids, attention_mask=model_mask(mask, True)).last_hidden_state
    real = mask.bool()
    return torch.equal(plain[real], broadcast[real])


def model_mask(mask: torch.Tensor, broadcast: bool) -> torch.Tensor:
    """The padding mask as the model takes it: (rows, 1, 1, length) booleans, or as it is."""
    return mask[:, None, None, :].bool() if broadcast else mask
