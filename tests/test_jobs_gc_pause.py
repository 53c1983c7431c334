"""`jobs.gc_pause`: Python's collector off inside the block, back as it was once the last open
block of the process ends."""

import gc
import threading
import weakref

import pytest

from jobs.gc_pause import gc_paused


def test_the_collector_is_off_inside_and_back_after_even_on_an_error():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():  # nested: the outer block keeps it off
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(KeyError), gc_paused():
        raise KeyError("x")
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_no_collection_runs_while_paused_and_its_cycles_are_freed_after():
    class Node:
        pass

    refs = []
    with gc_paused():
        for _ in range(1000):
            a, b = Node(), Node()
            a.other, b.other = b, a
            refs.append(weakref.ref(a))
        del a, b
        churn = [[i] for i in range(100_000)]  # would trigger many collections
        del churn
        assert all(ref() is not None for ref in refs)
    gc.collect()
    assert all(ref() is None for ref in refs)


def test_two_threads_overlapping_keep_it_off_until_the_last_one_leaves():
    """An embedding actor runs two calls at once: the first to finish must not turn the
    collector back on under the other."""
    entered, first_left, seen = threading.Event(), threading.Event(), []

    def second():
        with gc_paused():
            entered.set()
            first_left.wait(timeout=10)
            seen.append(gc.isenabled())

    other = threading.Thread(target=second)
    with gc_paused():
        other.start()
        entered.wait(timeout=10)
    seen.append(gc.isenabled())
    first_left.set()
    other.join(timeout=10)
    assert seen == [False, False]
    assert gc.isenabled()
