"""Availability profile: free capacity as a step function of time.

Every scheduling decision in the project is a question to this structure: where is the
earliest window of ``size`` units for ``duration`` seconds; take it; give it back. The
simulator asks it hundreds of thousands of times per trace and the agent on every quote.

Representation: sorted breakpoints ``times`` with the *change* of free capacity at each
(``deltas``; the first is the free capacity at the origin). Taking or giving back a window is
then two point updates, however many breakpoints it spans. The free capacity of each segment
(``values``) is a cache of their running sum, valid up to its length: a narrow window updates
it in place, a wide one cuts it, and it is rebuilt with ``itertools.accumulate`` (one C-speed
pass) when next read. Breakpoints whose change drops to zero are removed, so the profile never
holds two equal neighbouring segments.

The last segment extends to infinity. Free capacity may go negative where the caller
overcommits (a snapshot in which running jobs exceed usable capacity); such segments never fit.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import accumulate
from typing import Iterator, List, Optional, Tuple


class Profile:
    """Free capacity over [origin, infinity) as breakpoints and changes at them."""

    __slots__ = ("_deltas", "_times", "_values", "capacity")

    def __init__(self, capacity: int, origin: int) -> None:
        self.capacity = capacity
        self._times: List[int] = [origin]
        self._deltas: List[int] = [capacity]
        self._values: List[int] = [capacity]

    @property
    def origin(self) -> int:
        """The earliest instant the profile describes; nothing before it can be asked."""
        return self._times[0]

    def copy(self) -> Profile:
        clone = Profile(self.capacity, self._times[0])
        clone._times = self._times[:]
        clone._deltas = self._deltas[:]
        clone._values = self._values[:]
        return clone

    def __len__(self) -> int:
        return len(self._times)

    def _free(self) -> List[int]:
        """Free capacity of every segment, rebuilt from the first stale one if needed."""
        values = self._values
        done = len(values)
        deltas = self._deltas
        if done < len(deltas):
            if done == 0:
                values.extend(accumulate(deltas))
            else:
                tail = accumulate(deltas[done:], initial=values[-1])
                next(tail)
                values.extend(tail)
        return values

    def segments(self) -> Iterator[Tuple[int, Optional[int], int]]:
        """(start, end, free) for each segment, end None for the last (unbounded) one."""
        times, free = self._times, self._free()
        last = len(times) - 1
        for i in range(last):
            yield times[i], times[i + 1], free[i]
        yield times[last], None, free[last]

    def free_at(self, t: int) -> int:
        """Free capacity at instant t (t >= origin)."""
        return self._free()[bisect_right(self._times, t) - 1]

    def min_free(self, start: int, end: int) -> int:
        """Least free capacity over [start, end); the capacity at ``start`` if it is empty."""
        times, free = self._times, self._free()
        i = max(bisect_right(times, start) - 1, 0)
        j = max(bisect_left(times, end), i + 1)
        return min(free[i:j])

    def earliest_fit(
        self, size: int, duration: int, after: int, before: Optional[int] = None
    ) -> Optional[int]:
        """Earliest s >= after with at least ``size`` free over [s, s + duration).

        With ``before``, only starts strictly earlier than it count (the conservative
        scheduler asks "is there anything earlier than my reservation?"). None when nothing
        fits, which without ``before`` means ``size`` exceeds what the profile ever frees.
        """
        times, free = self._times, self._free()
        n = len(times)
        k = bisect_right(times, after) - 1
        if k < 0:
            k = 0
            after = times[0]
        start = after
        while True:
            if free[k] < size:
                k += 1
                while k < n and free[k] < size:
                    k += 1
                if k == n:
                    return None
                start = times[k]
            if before is not None and start >= before:
                return None
            end = start + duration
            k += 1
            while k < n and times[k] < end:
                if free[k] < size:
                    break
                k += 1
            else:
                return start

    def run_start(self, size: int, before: int, after: int) -> Optional[int]:
        """Earliest r >= after with at least ``size`` free all over [r, before); None if none.

        A task reserved at ``before`` can always slide back into such a run: the part of its
        window past ``before`` is its own.
        """
        times, free = self._times, self._free()
        k = bisect_right(times, before - 1) - 1
        if before <= after or free[k] < size:
            return None
        while k > 0 and times[k] > after and free[k - 1] >= size:
            k -= 1
        return max(times[k], after)

    def fits(self, size: int, start: int, duration: int) -> bool:
        """Whether ``size`` units are free over [start, start + duration)."""
        times, free = self._times, self._free()
        k = bisect_right(times, start) - 1
        if free[k] < size:
            return False
        end = start + duration
        n = len(times)
        k += 1
        while k < n and times[k] < end:
            if free[k] < size:
                return False
            k += 1
        return True

    def reserve(self, start: int, end: int, size: int) -> None:
        """Take ``size`` units over [start, end) (clipped to the origin)."""
        self._add(start, end, -size)

    def release(self, start: int, end: int, size: int) -> None:
        """Give back ``size`` units over [start, end) (clipped to the origin)."""
        self._add(start, end, size)

    def _add(self, start: int, end: int, delta: int) -> None:
        """Change the free capacity over [start, end) by ``delta``.

        Two point changes, at ``start`` and ``end``; the cached free values change only
        inside the window. A narrow window has them updated in place; a wide one has them
        dropped from ``start`` on, to be rebuilt in one pass when next needed.
        """
        if start < self._times[0]:
            start = self._times[0]
        if end <= start:
            return
        times, deltas, values = self._times, self._deltas, self._values
        i = self._split(start)
        j = self._split(end)
        deltas[i] += delta
        deltas[j] -= delta
        known = len(values)
        top = min(j, known)
        if top > i and (top - i) * 3 < known - i:
            for k in range(i, top):
                values[k] += delta
        elif i < known:
            del values[i:]
        if deltas[j] == 0:
            del times[j], deltas[j], values[j : j + 1]
        if i > 0 and deltas[i] == 0:
            del times[i], deltas[i], values[i : i + 1]

    def _split(self, t: int) -> int:
        """Index of the breakpoint at t (t > origin or t == origin), inserted if missing."""
        times = self._times
        k = bisect_left(times, t)
        if k < len(times) and times[k] == t:
            return k
        times.insert(k, t)
        self._deltas.insert(k, 0)
        values = self._values
        if k < len(values):
            values.insert(k, values[k - 1])
        return k

    def advance(self, now: int) -> None:
        """Forget everything before ``now``: the past cannot be scheduled and only slows scans."""
        times = self._times
        if now <= times[0]:
            return
        k = bisect_right(times, now) - 1
        if k > 0:
            deltas = self._deltas
            deltas[k] = sum(deltas[: k + 1])
            del times[:k], deltas[:k], self._values[:k]
        times[0] = now
