"""Chunk texts to L2-normalised float32 vectors, behind a content-hash cache (no Ray here).

from embedding import load_embedder, EmbeddingCache, DocRequest, embed_with_cache
embedder = load_embedder("minilm")                 # or a hub id, a directory, s3://.../
vectors = embedder.embed(["some chunk text"])      # (1, 384) float32
cache = EmbeddingCache("s3://bucket/out/.embedding-cache")
[result] = embed_with_cache(embedder, cache, [DocRequest("semantic-250-750", sha, texts)])

Names are imported on first use, so `embedding.files` or `embedding.cache` alone (as a chunking
worker needs them) never pays for importing torch.
"""

from importlib import import_module

_HOMES = {
    "CacheEntry": "embedding.cache",
    "CacheKey": "embedding.cache",
    "EmbeddingCache": "embedding.cache",
    "text_hashes": "embedding.cache",
    "DocRequest": "embedding.documents",
    "DocVectors": "embedding.documents",
    "Documents": "embedding.documents",
    "DocumentsVectors": "embedding.documents",
    "Embeddings": "embedding.documents",
    "Uncached": "embedding.documents",
    "chunk_offsets": "embedding.documents",
    "embed_documents": "embedding.documents",
    "embed_uncached": "embedding.documents",
    "embed_with_cache": "embedding.documents",
    "Embedded": "embedding.embedder",
    "Embedder": "embedding.embedder",
    "ModelKeys": "embedding.keys",
    "load_embedder": "embedding.embedder",
    "model_keys": "embedding.keys",
    "LazyEmbedder": "embedding.lazy",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    """Import a public name from its module the first time it is asked for."""
    if name not in _HOMES:
        raise AttributeError(f"module 'embedding' has no attribute {name!r}")
    return getattr(import_module(_HOMES[name]), name)
