"""The nodes Slurm's backfill scheduler has promised to pending jobs, over time.

Slurm's backfill pass (sched/backfill, ``node_space``) keeps, from the start of the current
``bf_resolution`` step to the end of its ``bf_window``, a list of time records, each with the
set of nodes not yet promised to a pending job. A job planned to start later takes its nodes
*whole* from its start to its end, both cut down to the resolution, whatever share of them it
uses: running jobs are counted core by core (by the select plugin), planned ones node by node.
This module is that list, with node sets as bit masks, kept as Slurm keeps it (which records
are split and which merged decides where the backfill looks next, so it matters).
"""

from __future__ import annotations

from typing import List, Tuple


class BlockMap:
    """Records [begin, end) with the mask of nodes still free in each, covering
    [origin, horizon) without gaps."""

    __slots__ = ("begins", "ends", "free")

    def __init__(self, origin: int, horizon: int, nodes: int) -> None:
        self.begins: List[int] = [origin]
        self.ends: List[int] = [max(horizon, origin)]
        self.free: List[int] = [nodes]

    @property
    def horizon(self) -> int:
        return self.ends[-1]

    def window(self, avail: int, start: int, end: int, past_end: bool = False) -> Tuple[int, int]:
        """The nodes of ``avail`` free in every record overlapping [start, end] (Slurm counts
        a record that begins at ``end`` too), and where to try again if that is not enough:
        the end of the first record, from the one holding ``start`` on, after which a node
        of ``avail`` comes free that the records so far kept (0: none). With ``past_end``
        (Slurm 24.11 on), when none did by ``end``, the end of the record after the first one
        beginning past ``end``, unless that is the last record."""
        wanted = avail
        later = 0
        count = len(self.begins)
        for index in range(self._first_after(start), count):
            if (
                later == 0
                and index + 1 < count
                and wanted & self.free[index + 1] & ~(avail & self.free[index])
            ):
                later = self.ends[index]
            if self.begins[index] > end:
                if past_end and later == 0 and index + 2 < count:
                    later = self.ends[index + 1]
                break
            avail &= self.free[index]
        return avail, later

    def free_over(self, avail: int, start: int, end: int) -> int:
        """The nodes of ``avail`` free in every record overlapping [start, end)."""
        for index in range(self._first_after(start), len(self.begins)):
            if self.begins[index] >= end:
                break
            avail &= self.free[index]
        return avail

    def overlaps(self, nodes: int, start: int, end: int) -> bool:
        """Whether a record overlapping [start, end) has promised one of ``nodes``."""
        for index in range(self._first_after(start), len(self.begins)):
            if self.begins[index] >= end:
                break
            if nodes & ~self.free[index]:
                return True
        return False

    def promise(self, nodes: int, start: int, end: int) -> None:
        """Promise ``nodes`` over [start, end) as Slurm's ``_add_reservation`` does: split the
        records at both ends, take the nodes, then merge at most one pair of equal neighbours
        between the record before the start and the record after the end."""
        start = max(start, self.begins[0])
        if end <= start:
            return
        index, before = self._split_start(start)
        if index < 0:
            return
        after = -1
        while index + 1 < len(self.begins):
            index += 1
            if end < self.ends[index]:
                self._insert(index + 1, end, self.ends[index], self.free[index])
                self.ends[index] = end
            self.free[index] &= ~nodes
            if end == self.ends[index]:
                if index + 1 < len(self.begins):
                    after = index + 1
                break
        self._merge_one(before, after)

    def give_back(self, nodes: int, start: int, end: int) -> None:
        """Free ``nodes`` again over the records inside [start, end) (a plan withdrawn)."""
        for index in range(self._first_after(start), len(self.begins)):
            if self.begins[index] >= end:
                break
            self.free[index] |= nodes

    def _first_after(self, t: int) -> int:
        """Index of the first record ending after t."""
        low, high = 0, len(self.ends)
        while low < high:
            middle = (low + high) // 2
            if self.ends[middle] <= t:
                low = middle + 1
            else:
                high = middle
        return low

    def _split_start(self, start: int) -> Tuple[int, int]:
        """Make ``start`` a record boundary: the index of the record ending there (-1 if
        ``start`` is past the horizon), and of the record before it."""
        before = 0
        for index in range(len(self.begins)):
            if self.ends[index] > start:
                self._insert(index + 1, start, self.ends[index], self.free[index])
                self.ends[index] = start
                return index, before
            if self.ends[index] == start:
                return index, before
            before = index
        return -1, before

    def _insert(self, index: int, begin: int, end: int, free: int) -> None:
        self.begins.insert(index, begin)
        self.ends.insert(index, end)
        self.free.insert(index, free)

    def _merge_one(self, first: int, stop: int) -> None:
        index = first
        while index != stop and index + 1 < len(self.begins):
            if self.free[index] != self.free[index + 1]:
                index += 1
                continue
            self.ends[index] = self.ends[index + 1]
            del self.begins[index + 1], self.ends[index + 1], self.free[index + 1]
            return
