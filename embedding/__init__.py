"""Chunk texts to L2-normalised float32 vectors, behind a content-hash cache (no Ray here).

from embedding import load_embedder, EmbeddingCache, DocRequest, embed_with_cache
embedder = load_embedder("minilm")                 # or a hub id, a directory, s3://.../
vectors = embedder.embed(["some chunk text"])      # (1, 384) float32
cache = EmbeddingCache("s3://bucket/out/.embedding-cache")
[result] = embed_with_cache(embedder, cache, [DocRequest("semantic-250-750", sha, texts)])
"""

from embedding.cache import CacheEntry, CacheKey, EmbeddingCache, text_hashes
from embedding.documents import DocRequest, DocVectors, embed_with_cache
from embedding.embedder import Embedded, Embedder, load_embedder

__all__ = [
    "CacheEntry",
    "CacheKey",
    "DocRequest",
    "DocVectors",
    "Embedded",
    "Embedder",
    "EmbeddingCache",
    "embed_with_cache",
    "load_embedder",
    "text_hashes",
]
