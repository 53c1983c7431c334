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
def embedder(model: str = "minilm", *, dtype: str, **options) -> Embedder:
    """The embedder for (model, dtype, options) on CPU, loaded at most once per test session.

    `dtype` is required: every test states the precision it is about."""
    return load_embedder(model, device="cpu", dtype=dtype, **options)


def sha(text: str) -> str:
    """sha256 hex of a source text (what jobs passes as source_hash)."""
    return hashlib.sha256(text.encode()).hexdigest()
