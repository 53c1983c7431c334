"""How many requests the job's batched reads send to an object store (a moto S3 server whose
requests are counted): one GET per object, found or not, and no HEAD or LIST beside it."""

from __future__ import annotations

import socket
import threading
from collections import Counter
from collections.abc import Iterator

import pytest

from embedding.cache import CacheKey, EmbeddingCache
from jobs.storage import Storage

KEYS = {"key": "testing", "secret": "testing"}


class _Counting:
    """WSGI middleware counting requests by kind (a GET that lists a bucket counts as LIST)."""

    def __init__(self, app):
        self.app = app
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        kind = environ["REQUEST_METHOD"]
        if kind == "GET" and "list-type" in environ.get("QUERY_STRING", ""):
            kind = "LIST"
        with self.lock:
            self.counts[kind] += 1
        return self.app(environ, start_response)

    def take(self) -> dict[str, int]:
        with self.lock:
            counts = dict(self.counts)
            self.counts.clear()
        return counts


@pytest.fixture(scope="module")
def counted() -> Iterator[tuple[dict, _Counting]]:
    """A moto server of this module's own, its storage options and its request counter."""
    import s3fs
    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    counter = _Counting(server._server.app)
    server._server.app = counter
    options = {**KEYS, "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"}}
    s3fs.S3FileSystem(skip_instance_cache=True, **options).mkdir("counted")
    try:
        yield options, counter
    finally:
        server.stop()


def test_storage_read_many_sends_one_get_per_object(counted):
    options, counter = counted
    store = Storage("s3://counted/in", options=options)
    store.write_many({f"t/{i}.md": f"page {i}".encode() for i in range(5)})
    counter.take()
    found = store.read_many([f"t/{i}.md" for i in range(5)] + ["t/missing.md"])
    assert [found[f"t/{i}.md"] for i in range(5)] == [f"page {i}".encode() for i in range(5)]
    assert isinstance(found["t/missing.md"], FileNotFoundError)
    assert counter.take() == {"GET": 6}


def test_cache_lookups_send_one_get_per_object(counted):
    import numpy as np

    from embedding.cache import CacheEntry

    options, counter = counted
    cache = EmbeddingCache("s3://counted/cache", storage_options=options)
    stored = CacheKey("semantic-x", "model-y", "a" * 64)
    cache.put(CacheEntry(stored, ("b" * 64, "c" * 64), np.ones((2, 4), dtype=np.float32)))
    counter.take()
    missing = CacheKey("semantic-x", "model-y", "d" * 64)
    hit, miss = cache.get_many([stored, missing], dim=4)
    assert hit is not None and hit.vectors.shape == (2, 4) and miss is None
    # two metadata.json files, then the stored entry's two vectors
    assert counter.take() == {"GET": 4}
