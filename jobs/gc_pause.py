"""Python's cycle collector, paused while a worker builds many objects.

A chunk task, a topic's reduce or an embedding actor's call builds tens of thousands of objects
(chunks, rows, links, cache keys) that live until it returns, and makes few reference cycles; an
embedding actor's load builds some 400,000 (torch, transformers, the model) that live as long as
it does. Python's collector runs whenever 700 more objects were allocated than freed, and from
time to time traverses every object the process holds: the work's own, again and again as they
grow, and Ray's, pyarrow's and ours. Measured on the 2-core AVX2 VM (cold builds, stand-in model
unless said): collections took 1.6 s of the chunk tasks' 35 s on tldr-en, 1.6 s of an embedding
actor's 8-9 s load (MiniLM), and 2.7 s of its time on all of tldr (0.8 s with what it loaded
frozen, 0.0003 s paused); the reduces spent 14-20% fewer worker-seconds paused. Cycles the work
does make are collected once it is back on (none after tldr-en's embedding calls, 360 objects
after reducing its `common/` topic)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# The collector is one per process; an embedding actor runs two calls at once in two threads.
_lock = threading.Lock()
_paused = {"holders": 0, "was_enabled": True}


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's automatic garbage collection off inside the block, and back as it was once the
    last block still open in this process (in any thread, nested or not) ends."""
    with _lock:
        if _paused["holders"] == 0:
            _paused["was_enabled"] = gc.isenabled()
            gc.disable()
        _paused["holders"] += 1
    try:
        yield
    finally:
        with _lock:
            _paused["holders"] -= 1
            if _paused["holders"] == 0 and _paused["was_enabled"]:
                gc.enable()
