"""Settling the heap: what is alive is frozen out of later collections, and a full
collection, when due, first frees the cyclic garbage that was frozen meanwhile."""

from __future__ import annotations

import gc
import weakref

from siteagent.agent.gc_freeze import Heap


class Node:
    """An object that can take part in a reference cycle."""

    me: object = None


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_settle_freezes_the_living_and_collects_frozen_garbage_when_due() -> None:
    clock = Clock()
    heap = Heap(full_collection_s=300, clock=clock)
    garbage = Node()
    garbage.me = garbage
    collected = weakref.ref(garbage)
    living = Node()
    living.me = living
    del garbage
    try:
        assert heap.settle()  # the first settle collects
        assert collected() is None and gc.get_freeze_count() > 0
        assert not any(obj is living for obj in gc.get_objects(2))  # frozen: not walked

        later = weakref.ref(living)
        del living  # garbage now, but frozen: ordinary collections do not see it
        gc.collect()
        clock.now = 299.0
        assert not heap.settle() and later() is not None  # no full collection due yet
        clock.now = 300.0
        assert heap.settle() and later() is None  # the full collection frees it
    finally:
        gc.unfreeze()


def test_acyclic_objects_are_freed_though_frozen() -> None:
    heap = Heap(clock=Clock())
    try:
        heap.settle()
        state = Node()
        gone = weakref.ref(state)
        heap.settle()
        assert not any(obj is state for obj in gc.get_objects(2))
        del state  # replaced by the next cycle's: reference counting frees it at once
        assert gone() is None
    finally:
        gc.unfreeze()
