"""Availability profile: free capacity as a step function of time.

Every scheduling decision in the project is a question to this structure: where is the
earliest window of ``size`` units for ``duration`` seconds; take it; give it back. The
simulator asks it hundreds of thousands of times per trace, the agent on every quote, and the
externality fee once per queued job for every priced alternative.

Representation: the sorted breakpoints, cut into chunks of consecutive segments (the leaf level
of a B-tree, as in sortedcontainers' SortedList). A chunk keeps its breakpoint times, the free
capacity of its first segment (its *base*), the change of free capacity at each later
breakpoint, and the least and greatest free value in it relative to its base. Taking or giving
back a window is then two changes in at most two chunks and a new base for every chunk in
between. Questions skip whole chunks: one whose greatest value is below ``size`` holds no start,
one whose least value is at least ``size`` breaks no window. On a busy plan, where a job's
window spans hundreds of breakpoints, checking or taking it costs a few chunks instead of every
segment. (Storing changes rather than values matters under mypyc: a value rewritten in a list
is a new int object, a change is written twice per window.)

A chunk's least and greatest values are recomputed only when a question wants to skip it and an
update changed it since: the simulator's small profiles, asked mostly about their first
segments, never pay for them; the fee re-plans, which skip all the time, get them exact.

Breakpoints whose two sides have the same free capacity are removed, so the profile never holds
two equal neighbouring segments. The last segment extends to infinity. Free capacity may go
negative where the caller overcommits (a snapshot in which running jobs exceed usable
capacity); such segments never fit.
"""

from __future__ import annotations

from typing import Iterator, List, Optional, Tuple

#: Segments per chunk after a split (a chunk splits in two when it exceeds twice this). Larger
#: chunks make the bounds dearer to recompute, smaller ones make skipping coarser; 32 is
#: fastest for the fee re-plans of a 10,000-job queue (bench/results/slots.md).
CHUNK = 32

#: A position in the profile: (chunk, index in it, free capacity of that segment). Searches
#: that find nothing answer NOWHERE rather than None: mypyc passes a plain tuple of ints
#: unboxed, an Optional one as a new object on every call.
Position = Tuple[int, int, int]
NOWHERE: Position = (-1, 0, 0)

#: An instant later than any the profile describes ("never"), as a plain int for mypyc.
NEVER = 1 << 62


class Profile:
    """Free capacity over [origin, infinity) as chunks of breakpoints and changes."""

    __slots__ = (
        "_bases",
        "_chunk",
        "_count",
        "_deltas",
        "_exact",
        "_firsts",
        "_highs",
        "_lows",
        "_times",
        "capacity",
    )

    def __init__(self, capacity: int, origin: int, chunk: int = CHUNK) -> None:
        self.capacity = capacity
        self._chunk = max(chunk, 1)
        self._count = 1
        self._firsts: List[int] = [origin]  # the first breakpoint of each chunk
        self._times: List[List[int]] = [[origin]]
        self._deltas: List[List[int]] = [[0]]  # change at each breakpoint; 0 at the first
        self._bases: List[int] = [capacity]  # free capacity of each chunk's first segment
        self._lows: List[int] = [0]  # least free value in the chunk, minus its base
        self._highs: List[int] = [0]  # greatest free value in the chunk, minus its base
        self._exact: List[bool] = [True]  # whether lows and highs are up to date

    @property
    def origin(self) -> int:
        """The earliest instant the profile describes; nothing before it can be asked."""
        return self._firsts[0]

    def copy(self) -> Profile:
        clone = Profile(self.capacity, self._firsts[0], self._chunk)
        clone._count = self._count
        clone._firsts = self._firsts[:]
        clone._times = [times[:] for times in self._times]
        clone._deltas = [deltas[:] for deltas in self._deltas]
        clone._bases = self._bases[:]
        clone._lows = self._lows[:]
        clone._highs = self._highs[:]
        clone._exact = self._exact[:]
        return clone

    def __len__(self) -> int:
        return self._count

    # -- questions -------------------------------------------------------------------------

    def segments(self, since: Optional[int] = None) -> Iterator[Tuple[int, Optional[int], int]]:
        """(start, end, free) for each segment, end None for the last (unbounded) one; with
        ``since``, from the segment holding that instant on (a quote's window, not the plan)."""
        begin, first, free = (0, 0, self._bases[0]) if since is None else self._locate(since)
        chunks = len(self._firsts)
        for c in range(begin, chunks):
            times, deltas = self._times[c], self._deltas[c]
            if first == 0:
                free = self._bases[c]
            last = len(times) - 1
            for k in range(first, last):
                yield times[k], times[k + 1], free
                free += deltas[k + 1]
            following = self._firsts[c + 1] if c + 1 < chunks else None
            yield times[last], following, free
            first = 0

    def free_at(self, t: int) -> int:
        """Free capacity at instant t (t >= origin)."""
        return self._locate(t)[2]

    def min_free(self, start: int, end: int) -> int:
        """Least free capacity over [start, end); the capacity at ``start`` if it is empty."""
        c, k, free = self._locate(start)
        least = free
        chunks = len(self._firsts)
        k += 1
        while c < chunks:
            times, deltas = self._times[c], self._deltas[c]
            if k == 0:
                if times[0] >= end:
                    break
                free = self._bases[c]
                if self._least(c) >= least:
                    c += 1
                    continue
                least = min(least, free)
                k = 1
            n = len(times)
            while k < n and times[k] < end:
                free += deltas[k]
                if free < least:
                    least = free
                k += 1
            if k < n:
                break
            c, k = c + 1, 0
        return least

    def earliest_fit(
        self, size: int, duration: int, after: int, before: Optional[int] = None
    ) -> Optional[int]:
        """Earliest s >= after with at least ``size`` free over [s, s + duration).

        With ``before``, only starts strictly earlier than it count (the conservative
        scheduler asks "is there anything earlier than my reservation?"). None when nothing
        fits, which without ``before`` means ``size`` exceeds what the profile ever frees.
        """
        if after < self._firsts[0]:
            after = self._firsts[0]
        at = self._locate(after)
        start = after
        while True:
            if at[2] < size:
                at = self._room(at, size)
                if at[0] < 0:
                    return None
                start = self._times[at[0]][at[1]]
            if before is not None and start >= before:
                return None
            at = self._shortfall(at, size, start + duration)
            if at[0] < 0:
                return start

    def fits(self, size: int, start: int, duration: int) -> bool:
        """Whether ``size`` units are free over [start, start + duration)."""
        at = self._locate(start)
        return at[2] >= size and self._shortfall(at, size, start + duration)[0] < 0

    def room_until(self, size: int, start: int) -> int:
        """The first instant t >= ``start`` with less than ``size`` free (``start`` itself if
        it has too little), or :data:`NEVER`. Where ``size`` is free at ``start``,
        ``fits(size, start, d)`` holds exactly for ``d <= room_until(size, start) - start``:
        one scan answers every duration at once."""
        at = self._locate(start)
        if at[2] < size:
            return start
        short = self._shortfall(at, size, NEVER)
        if short[0] < 0:
            return NEVER
        return self._times[short[0]][short[1]]

    def run_start(self, size: int, before: int, after: int) -> Optional[int]:
        """Earliest r >= after with at least ``size`` free all over [r, before); None if none.

        A task reserved at ``before`` can always slide back into such a run: the part of its
        window past ``before`` is its own.
        """
        if before <= after:
            return None
        c, k, free = self._locate(before - 1)
        if free < size:
            return None
        while self._times[c][k] > after:
            if k > 0:
                free -= self._deltas[c][k]
                if free < size:
                    break
                k -= 1
            elif c == 0:
                break
            elif self._least(c - 1) >= size:
                c -= 1
                free = self._bases[c]
            else:
                c -= 1
                k = len(self._times[c]) - 1
                free = self._value(c, k)
                if free < size:
                    c, k = c + 1, 0
                    break
        return max(self._times[c][k], after)

    # -- updates ---------------------------------------------------------------------------

    def reserve(self, start: int, end: int, size: int) -> None:
        """Take ``size`` units over [start, end) (clipped to the origin)."""
        self._add(start, end, -size)

    def release(self, start: int, end: int, size: int) -> None:
        """Give back ``size`` units over [start, end) (clipped to the origin)."""
        self._add(start, end, size)

    def advance(self, now: int) -> None:
        """Forget everything before ``now``: the past cannot be scheduled and only slows scans."""
        if now <= self._firsts[0]:
            return
        c, k, free = self._locate(now)
        if c > 0:
            self._count -= sum(len(times) for times in self._times[:c])
            del self._firsts[:c], self._times[:c], self._deltas[:c]
            del self._bases[:c], self._lows[:c], self._highs[:c], self._exact[:c]
        times, deltas = self._times[0], self._deltas[0]
        if k > 0:
            del times[:k], deltas[:k]
            deltas[0] = 0
            self._bases[0] = free
            self._count -= k
            self._exact[0] = False
        times[0] = now
        self._firsts[0] = now

    # -- the chunks ------------------------------------------------------------------------

    def _value(self, c: int, k: int) -> int:
        """Free capacity of segment k of chunk c."""
        free = self._bases[c]
        deltas = self._deltas[c]
        for i in range(1, k + 1):
            free += deltas[i]
        return free

    def _locate(self, t: int) -> Position:
        """The segment holding instant t; the first one if t is earlier."""
        c = _after(self._firsts, t) - 1
        if c < 0:
            return 0, 0, self._bases[0]
        k = _after(self._times[c], t) - 1
        return c, k, self._value(c, k)

    def _room(self, at: Position, size: int) -> Position:
        """The first segment after ``at`` with at least ``size`` free, or NOWHERE."""
        c, k, free = at
        chunks = len(self._firsts)
        deltas = self._deltas[c]
        k += 1
        while True:
            n = len(deltas)
            while k < n:
                free += deltas[k]
                if free >= size:
                    return c, k, free
                k += 1
            c += 1
            while c < chunks and self._greatest(c) < size:
                c += 1
            if c == chunks:
                return NOWHERE
            free = self._bases[c]
            if free >= size:
                return c, 0, free
            deltas = self._deltas[c]
            k = 1

    def _shortfall(self, at: Position, size: int, end: int) -> Position:
        """The first segment after ``at``, starting before ``end``, with less than ``size``
        free; NOWHERE if there is none (the window from ``at`` up to ``end`` fits)."""
        c, k, free = at
        chunks = len(self._firsts)
        times, deltas = self._times[c], self._deltas[c]
        k += 1
        while True:
            n = len(times)
            while k < n:
                if times[k] >= end:
                    return NOWHERE
                free += deltas[k]
                if free < size:
                    return c, k, free
                k += 1
            c += 1
            while c < chunks and self._firsts[c] < end and self._least(c) >= size:
                c += 1
            if c == chunks or self._firsts[c] >= end:
                return NOWHERE
            free = self._bases[c]
            if free < size:
                return c, 0, free
            times, deltas = self._times[c], self._deltas[c]
            k = 1

    def _add(self, start: int, end: int, delta: int) -> None:
        """Change the free capacity over [start, end) by ``delta``."""
        if start < self._firsts[0]:
            start = self._firsts[0]
        if end <= start:
            return
        d, j = self._split(end)
        chunks, count = len(self._firsts), self._count
        c, i = self._split(start)
        if len(self._firsts) != chunks:  # start's chunk split in two: end may have moved
            d, j = self._split(end)
        elif c == d and self._count != count:  # start was inserted before end in its chunk
            j += 1
        if i == 0:
            self._bases[c] += delta
        else:
            self._deltas[c][i] += delta
            self._exact[c] = False
        bases = self._bases
        for m in range(c + 1, d):
            bases[m] += delta
        if j > 0:
            if d > c:
                bases[d] += delta
            self._deltas[d][j] -= delta
            self._exact[d] = False
        self._merge(d, j)
        self._merge(c, i)

    def _split(self, t: int) -> Tuple[int, int]:
        """Make t a breakpoint (t >= origin), splitting a chunk that grew too long; where it is."""
        c = _after(self._firsts, t) - 1
        times = self._times[c]
        k = _at_or_after(times, t)
        if k < len(times) and times[k] == t:
            return c, k
        times.insert(k, t)
        self._deltas[c].insert(k, 0)
        self._count += 1
        if len(times) <= 2 * self._chunk:
            return c, k
        half = len(times) // 2
        deltas = self._deltas[c]
        base = self._value(c, half)
        self._times.insert(c + 1, times[half:])
        self._deltas.insert(c + 1, deltas[half:])
        del times[half:], deltas[half:]
        self._deltas[c + 1][0] = 0
        self._firsts.insert(c + 1, self._times[c + 1][0])
        self._bases.insert(c + 1, base)
        self._lows.insert(c + 1, 0)
        self._highs.insert(c + 1, 0)
        self._exact.insert(c + 1, False)
        self._exact[c] = False
        return (c + 1, k - half) if k >= half else (c, k)

    def _merge(self, c: int, k: int) -> None:
        """Remove breakpoint (c, k) if the segment before it has the same free capacity."""
        deltas = self._deltas[c]
        if k > 0:
            if deltas[k] != 0:
                return
        elif c == 0 or self._bases[c] != self._value(c - 1, len(self._deltas[c - 1]) - 1):
            return
        times = self._times[c]
        del times[k], deltas[k]
        self._count -= 1
        if not times:
            del self._firsts[c], self._times[c], self._deltas[c]
            del self._bases[c], self._lows[c], self._highs[c], self._exact[c]
        elif k == 0:
            self._firsts[c] = times[0]
            self._bases[c] += deltas[0]
            deltas[0] = 0
            self._exact[c] = False

    def _least(self, c: int) -> int:
        """Least free value in chunk c."""
        if not self._exact[c]:
            self._bound(c)
        return self._bases[c] + self._lows[c]

    def _greatest(self, c: int) -> int:
        """Greatest free value in chunk c."""
        if not self._exact[c]:
            self._bound(c)
        return self._bases[c] + self._highs[c]

    def _bound(self, c: int) -> None:
        """Recompute chunk c's least and greatest free value (relative to its base)."""
        deltas = self._deltas[c]
        free = low = high = 0
        for k in range(1, len(deltas)):
            free += deltas[k]
            if free < low:
                low = free
            elif free > high:
                high = free
        self._lows[c] = low
        self._highs[c] = high
        self._exact[c] = True


# The bisect module compares list items as generic objects; compiled by mypyc, these loops
# compare machine integers, which makes every lookup of an instant about twice as fast.


def _after(times: List[int], t: int) -> int:
    """Index of the first item greater than t (bisect_right)."""
    low, high = 0, len(times)
    while low < high:
        middle = (low + high) // 2
        if t < times[middle]:
            high = middle
        else:
            low = middle + 1
    return low


def _at_or_after(times: List[int], t: int) -> int:
    """Index of the first item not less than t (bisect_left)."""
    low, high = 0, len(times)
    while low < high:
        middle = (low + high) // 2
        if times[middle] < t:
            low = middle + 1
        else:
            high = middle
    return low
