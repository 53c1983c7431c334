"""Shared helpers for the embedding tests: each embedder configuration loads once per session."""

from __future__ import annotations

import hashlib
from functools import cache

from embedding import Embedder, load_embedder

PARAPHRASES = [
    ("A man is playing a guitar.", "Someone is strumming a guitar."),
    ("How do I install the package with pip?", "What is the pip command to install this library?"),
    ("The server returned a 404 error.", "The page could not be found on the server."),
]
UNRELATED = [
    ("A man is playing a guitar.", "Interest rates rose by half a percent."),
    ("How do I install the package with pip?", "The cat slept on the warm windowsill."),
    ("The server returned a 404 error.", "Fresh basil makes the sauce taste better."),
]


@cache
def embedder(model: str = "minilm", **options) -> Embedder:
    """The embedder for (model, options) on CPU, loaded at most once per test session."""
    return load_embedder(model, device="cpu", **options)


def make_bucket(s3_server, name: str) -> str:
    """Create a bucket on the moto server and return its s3:// URI.

    No region in the client: s3fs would send LocationConstraint us-east-1, which moto rejects."""
    import s3fs

    options = {
        **s3_server.storage_options,
        "client_kwargs": {"endpoint_url": s3_server.endpoint_url},
    }
    s3fs.S3FileSystem(skip_instance_cache=True, **options).mkdir(name)
    return f"s3://{name}"


def sha(text: str) -> str:
    """sha256 hex of a source text (what jobs passes as source_hash)."""
    return hashlib.sha256(text.encode()).hexdigest()
