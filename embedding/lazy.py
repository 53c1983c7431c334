"""An embedder whose model loads when a text first needs embedding: its cache keys and vector width
come from the model's files (`embedding.keys.model_keys`), so cache lookups that all hit never
load torch, transformers or the weights."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # only for annotations: this module works without importing torch
    from embedding.embedder import Embedded, Embedder
    from embedding.encoder import Encoded
    from embedding.keys import ModelKeys


class LazyEmbedder:
    """What `embedding.documents.embed_documents` asks of an embedder (`key`, `query_key`, `dim`,
    `encoder_digest`, `encode`, `embed_encoded`), with the model loaded by `load` when one of the
    last three is first asked for (a text is missing from the cache), once, whichever thread asks
    first."""

    def __init__(self, keys: ModelKeys, load: Callable[[], Embedder]):
        self.key, self.query_key, self.dim = keys.key, keys.query_key, keys.dim
        self._load = load
        self._embedder: Embedder | None = None
        self._lock = threading.Lock()

    def loaded(self) -> Embedder:
        """The embedder, loaded now if it was not; ValueError if its keys or width are not those
        its files gave (then vectors found under them may not be its vectors)."""
        with self._lock:
            if self._embedder is None:
                embedder = self._load()
                found = (embedder.key, embedder.query_key, embedder.dim)
                if found != (self.key, self.query_key, self.dim):
                    raise ValueError(
                        f"model {embedder.name!r}: loaded, it has the cache keys and width {found},"
                        f" not {(self.key, self.query_key, self.dim)} as its files said"
                    )
                self._embedder = embedder
            return self._embedder

    @property
    def is_loaded(self) -> bool:
        """Whether the model has loaded."""
        return self._embedder is not None

    @property
    def encoder_digest(self) -> str:
        """`Embedder.encoder_digest`, the model loaded first."""
        return self.loaded().encoder_digest

    def encode(self, texts: Sequence[str], *, query: bool = False) -> Encoded:
        """`Embedder.encode`, the model loaded first."""
        return self.loaded().encode(texts, query=query)

    def embed_encoded(self, encoded: Encoded, **options: Any) -> Embedded:
        """`Embedder.embed_encoded` (`query`, `progress`), the model loaded first."""
        return self.loaded().embed_encoded(encoded, **options)
