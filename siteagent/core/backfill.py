"""Queued tasks by size, in queue order: which is the first that could backfill now?

An EASY pass (:mod:`siteagent.core.engines`) starts, in queue order, every task that fits
now without delaying the protected head. On a pooled machine whether a task passes depends
only on its size and estimate, and for one size only through a bound on the estimate: it must
fit now (``estimate <= room_until(size, now) - now``) and, where it would overlap the head's
window, leave the head its units (another bound). So "the first task that passes" is, over
the sizes free now, the first task of that size whose estimate is within that size's bound.

This index answers that per size in O(log n): the tasks of each size in queue order, under a
segment tree of least estimates. Scanning the whole queue at every completion made an EASY
re-plan of a 10,000-job queue quadratic (seconds); the index makes it near-linear.
"""

from __future__ import annotations

from typing import Dict, List

from siteagent.core.machine import Task

#: An estimate no task has: the value of a slot that holds no task.
EMPTY = 1 << 62


class _Size:
    """The queued tasks of one size: their positions in the queue (increasing) and a segment
    tree over their estimates (a started task's leaf is EMPTY)."""

    __slots__ = ("capacity", "positions", "tree")

    def __init__(self) -> None:
        self.capacity = 1
        self.positions: List[int] = []
        self.tree: List[int] = [EMPTY, EMPTY]

    def append(self, position: int, estimate: int) -> None:
        index = len(self.positions)
        self.positions.append(position)
        if index >= self.capacity:
            self._grow()
        self._set(index, estimate)

    def remove(self, position: int) -> None:
        self._set(_at_or_after(self.positions, position), EMPTY)

    def first(self, position: int, limit: int) -> int:
        """The queue position of the first task at or after ``position`` whose estimate is at
        most ``limit``; -1 if there is none."""
        i = _at_or_after(self.positions, position)
        if i >= len(self.positions):
            return -1
        tree, capacity = self.tree, self.capacity
        node = i + capacity
        if tree[node] > limit:
            while True:
                while node & 1:  # a right child: nothing more to its right below its parent
                    node >>= 1
                    if node <= 1:
                        return -1
                node += 1
                if tree[node] <= limit:
                    break
            while node < capacity:
                node *= 2
                if tree[node] > limit:
                    node += 1
        return self.positions[node - capacity]

    def _set(self, index: int, estimate: int) -> None:
        tree = self.tree
        node = index + self.capacity
        tree[node] = estimate
        node >>= 1
        while node >= 1:
            left, right = tree[2 * node], tree[2 * node + 1]
            tree[node] = left if left < right else right
            node >>= 1

    def _grow(self) -> None:
        old, capacity = self.tree, self.capacity
        self.capacity = 2 * capacity
        tree = [EMPTY] * (2 * self.capacity)
        tree[self.capacity : self.capacity + capacity] = old[capacity : 2 * capacity]
        for node in range(self.capacity - 1, 0, -1):
            left, right = tree[2 * node], tree[2 * node + 1]
            tree[node] = left if left < right else right
        self.tree = tree


class BackfillIndex:
    """Queued tasks by size in queue order (positions increase as tasks are added)."""

    __slots__ = ("_by_size", "sizes")

    def __init__(self) -> None:
        self._by_size: Dict[int, _Size] = {}
        #: the sizes ever added, ascending
        self.sizes: List[int] = []

    def add(self, task: Task, position: int) -> None:
        size = task.size
        entry = self._by_size.get(size)
        if entry is None:
            entry = self._by_size[size] = _Size()
            self.sizes.insert(_at_or_after(self.sizes, size), size)
        entry.append(position, task.estimate)

    def remove(self, task: Task, position: int) -> None:
        """The task at ``position`` left the queue (it started)."""
        self._by_size[task.size].remove(position)

    def first(self, size: int, position: int, limit: int) -> int:
        """The queue position of the first task of ``size`` at or after ``position`` with an
        estimate of at most ``limit``; -1 if there is none."""
        return self._by_size[size].first(position, limit)


def _at_or_after(items: List[int], value: int) -> int:
    """Index of the first item not less than ``value`` (bisect_left, on machine ints)."""
    low, high = 0, len(items)
    while low < high:
        middle = (low + high) // 2
        if items[middle] < value:
            low = middle + 1
        else:
            high = middle
    return low
