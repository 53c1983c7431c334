"""Deterministic markdown chunking: one document in, chunk records out (no Ray, no network).

from chunking import chunk_document
chunks = chunk_document(open("guide.md", "rb").read(), strategy="semantic")
"""

from __future__ import annotations

from typing import Any

from chunking.record import (
    CHUNKING_FAILED,
    CHUNKING_TIMEOUT,
    DETERMINISTIC_FAILURES,
    FRONT_MATTER_TOO_LARGE,
    INVALID_FRONT_MATTER,
    Chunk,
    ChunkedDocument,
    ChunkingError,
    Link,
)
from chunking.tokens import TokenCounter

# Bump whenever the same input and options can chunk differently (a fix that changes chunk
# texts, lines, links or ids): builds include it in their settings key, so the next build
# re-chunks every source instead of carrying chunks made by the older code.
REVISION = 47

__all__ = [
    "CHUNKING_FAILED",
    "CHUNKING_TIMEOUT",
    "DETERMINISTIC_FAILURES",
    "FRONT_MATTER_TOO_LARGE",
    "INVALID_FRONT_MATTER",
    "REVISION",
    "Chunk",
    "ChunkedDocument",
    "ChunkingError",
    "Link",
    "TokenCounter",
    "chunk_document",
    "chunk_source",
    "list_strategies",
    "strategy_key",
    "token_counter",
]


def chunk_source(
    data: bytes | str,
    *,
    strategy: str = "semantic",
    document_id: str = "",
    tenant_id: str = "default",
    time_budget: float | None = None,
    include_drafts: bool = False,
    **options: Any,
) -> ChunkedDocument:
    """Chunk one markdown source (bytes or text) with the named strategy and its options;
    past `time_budget` seconds it fails with CHUNKING_TIMEOUT (see `chunking.budget`). A draft
    (front matter `draft: true` or `published: false`: `ChunkedDocument.is_draft`) gives no
    chunks, as an empty page holding only that front matter, unless `include_drafts`.
    TypeError for a source that is neither, or a `document_id` or `tenant_id` that is no str."""
    from chunking.blocks import parse
    from chunking.budget import within_budget
    from chunking.normalize import as_published, normalize
    from chunking.strategy import get_strategy

    for name, value in (("document_id", document_id), ("tenant_id", tenant_id)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be str, got {type(value).__name__}")
    if not isinstance(include_drafts, bool):
        raise TypeError(f"include_drafts must be bool, got {type(include_drafts).__name__}")
    chunker = get_strategy(strategy, **options)

    def chunked() -> ChunkedDocument:
        source = normalize(data)
        source = source if include_drafts else as_published(source)
        return chunker.chunk(parse(source), document_id=document_id, tenant_id=tenant_id)

    return within_budget(time_budget, chunked)


def chunk_document(
    data: bytes | str,
    *,
    strategy: str = "semantic",
    document_id: str = "",
    tenant_id: str = "default",
    **options: Any,
) -> list[Chunk]:
    """The chunks of one markdown source; see `chunk_source`."""
    document = chunk_source(
        data, strategy=strategy, document_id=document_id, tenant_id=tenant_id, **options
    )
    return list(document.chunks)


def strategy_key(name: str = "semantic", **options: Any) -> str:
    """Cache key of strategy `name` with `options`, e.g. "semantic-250-750"."""
    from chunking.strategy import get_strategy

    return get_strategy(name, **options).cache_key


def token_counter(name: str = "semantic", **options: Any) -> TokenCounter:
    """The token counter strategy `name` counts with under `options` (its `tokenizer` option)."""
    from chunking.strategy import get_strategy

    return get_strategy(name, **options).counter


def list_strategies() -> dict[str, str]:
    """Every built-in strategy name mapped to its cache key with default options."""
    from chunking.strategy import get_strategy, strategy_names

    return {name: get_strategy(name).cache_key for name in strategy_names()}
