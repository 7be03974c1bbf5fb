"""The availability profile against a brute-force model: one free value per second.

A window of duration 0 is taken as needing ``size`` free at its start instant (what the
engines rely on for "fits now"): the model checks [s, s + max(duration, 1)).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Dict, List, Optional, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from siteagent.core.profile import CHUNK, Profile, _after, _at_or_after

LIMIT = 400  # the model's horizon: far past every breakpoint and window the tests make


class Model:
    """Free capacity per second over [origin, LIMIT)."""

    def __init__(self, capacity: int, origin: int) -> None:
        self.origin = origin
        self.free: Dict[int, int] = {t: capacity for t in range(origin, LIMIT)}

    def add(self, start: int, end: int, delta: int) -> None:
        for t in range(max(start, self.origin), end):
            self.free[t] += delta

    def advance(self, now: int) -> None:
        if now > self.origin:
            for t in range(self.origin, now):
                del self.free[t]
            self.origin = now

    def window_ok(self, size: int, start: int, duration: int) -> bool:
        return all(self.free[t] >= size for t in range(start, start + max(duration, 1)))

    def earliest_fit(
        self, size: int, duration: int, after: int, before: Optional[int]
    ) -> Optional[int]:
        for s in range(max(after, self.origin), LIMIT - 100):
            if before is not None and s >= before:
                return None
            if self.window_ok(size, s, duration):
                return s
        return None

    def min_free(self, start: int, end: int) -> int:
        if end <= start:
            return self.free[start]
        return min(self.free[t] for t in range(start, end))

    def run_start(self, size: int, before: int, after: int) -> Optional[int]:
        if before <= after or self.free[before - 1] < size:
            return None
        r = before - 1
        while r - 1 >= after and self.free[r - 1] >= size:
            r -= 1
        return r


def check_shape(profile: Profile, model: Model) -> None:
    """segments() describe exactly the model, start at the origin, and never repeat a value."""
    segments = list(profile.segments())
    assert segments[0][0] == model.origin == profile.origin
    assert len(segments) == len(profile)
    for (start, end, free), following in zip(segments, [*segments[1:], None]):
        if following is None:
            assert end is None
            end = LIMIT
        else:
            assert end == following[0] > start
            assert following[2] != free, "two equal neighbouring segments"
        for t in range(start, min(end, LIMIT)):
            assert model.free[t] == free, (t, segments)


# Updates use plain times (relative to the current origin). Queries name their instants by
# breakpoints of the current profile plus a small offset, so that windows start, and end,
# exactly on, just before and just after the places where free capacity changes; and their
# sizes relative to the free capacity there (just enough, one too many).
OFFSETS = st.sampled_from([0, 0, 0, -1, 1, -2, 2])
POINT = st.tuples(st.integers(0, 50), OFFSETS)  # (breakpoint index, offset)
SPAN = st.tuples(st.integers(0, 3), OFFSETS)  # (breakpoints further on, offset)
SIZE = st.tuples(st.sampled_from(["plain", "start", "end"]), st.integers(-1, 10))

UPDATES = st.one_of(
    st.tuples(st.just("reserve"), st.integers(-5, 60), st.integers(0, 30), st.integers(1, 4)),
    st.tuples(st.just("release"), st.integers(-5, 60), st.integers(0, 30), st.integers(1, 4)),
    st.tuples(st.just("advance"), st.integers(0, 6)),
)
QUERIES = st.one_of(
    st.tuples(st.just("fit"), SIZE, POINT, SPAN, st.booleans(), SPAN),
    st.tuples(st.just("fits"), SIZE, POINT, SPAN),
    st.tuples(st.just("free_at"), POINT),
    st.tuples(st.just("min_free"), POINT, SPAN),
    st.tuples(st.just("run_start"), SIZE, POINT, SPAN),
)


def _instant(profile: Profile, point: Tuple[int, int], span: Tuple[int, int] = (0, 0)) -> int:
    """A breakpoint of the profile (or 5 s past the last), ``span[0]`` breakpoints further on,
    plus the offsets; never before the origin."""
    points = [start for start, _, _ in profile.segments()]
    points.append(points[-1] + 5)
    index = min(point[0] % len(points) + span[0], len(points) - 1)
    return max(points[index] + point[1] + span[1], profile.origin)


def _size(model: Model, size: Tuple[str, int], start: int, end: int) -> int:
    """A plain size, or the free capacity at the window's start or end plus a little."""
    kind, amount = size
    if kind == "plain":
        return max(amount, 0)
    return max(model.free[start if kind == "start" else max(end, start)] + min(amount, 1), 0)


def _query(profile: Profile, model: Model, query: Tuple) -> None:  # type: ignore[type-arg]
    kind = query[0]
    if kind == "fit":
        _, size, at, until, bounded, limit = query
        after = _instant(profile, at)
        end = _instant(profile, (at[0], 0), until)
        duration = max(end - after, 0)
        size = _size(model, size, after, end)
        before = _instant(profile, (at[0], 0), limit) if bounded else None
        if at[1] == -2:
            after -= 3  # sometimes before the origin
        expected = model.earliest_fit(size, duration, after, before)
        assert profile.earliest_fit(size, duration, after, before) == expected, query
    elif kind == "fits":
        _, size, at, until = query
        start = _instant(profile, at)
        end = _instant(profile, (at[0], 0), until)
        duration = max(end - start, 0)
        size = _size(model, size, start, end)
        assert profile.fits(size, start, duration) == model.window_ok(size, start, duration)
    elif kind == "free_at":
        t = _instant(profile, query[1])
        assert profile.free_at(t) == model.free[t]
        every = list(profile.segments())
        since = [segment for segment in every if segment[1] is None or segment[1] > t]
        assert list(profile.segments(since=t)) == since
    elif kind == "min_free":
        start, end = _instant(profile, query[1]), _instant(profile, (query[1][0], 0), query[2])
        assert profile.min_free(start, end) == model.min_free(start, end), query
    else:
        _, size, at, until = query
        after, before = sorted((_instant(profile, at), _instant(profile, (at[0], 0), until)))
        size = _size(model, size, before - 1 if before > after else after, before)
        expected_run = model.run_start(size, before, after)
        assert profile.run_start(size, before, after) == expected_run, query


#: Chunks of one and two segments put every update and question across chunk boundaries
#: (splits, merges that empty a chunk, skips over whole chunks); CHUNK is what runs.
CHUNKS = [1, 2, CHUNK]


@pytest.mark.parametrize("chunk", CHUNKS)
@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    capacity=st.integers(0, 8),
    origin=st.integers(0, 20),
    steps=st.lists(st.tuples(UPDATES, st.lists(QUERIES, max_size=4)), min_size=1, max_size=25),
)
def test_profile_matches_brute_force(
    chunk: int,
    capacity: int,
    origin: int,
    steps: List[Tuple],  # type: ignore[type-arg]
) -> None:
    profile = Profile(capacity, origin, chunk)
    model = Model(capacity, origin)
    for update, queries in steps:
        kind = update[0]
        o = model.origin
        if kind == "advance":
            profile.advance(o + update[1])
            model.advance(o + update[1])
        else:
            _, start, length, size = update
            start += o
            getattr(profile, kind)(start, start + length, size)
            model.add(start, start + length, -size if kind == "reserve" else size)
        check_shape(profile, model)
        for query in queries:
            _query(profile, model, query)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_copy_is_independent(chunk: int) -> None:
    profile = Profile(4, 0, chunk)
    profile.reserve(0, 10, 3)
    clone = profile.copy()
    clone.reserve(5, 20, 1)
    profile.release(0, 10, 3)
    assert list(profile.segments()) == [(0, None, 4)]
    assert list(clone.segments()) == [(0, 5, 1), (5, 10, 0), (10, 20, 3), (20, None, 4)]


def test_reserve_and_release_give_back_the_same_shape() -> None:
    profile = Profile(8, 100)
    windows = [(100, 150, 2), (120, 130, 3), (130, 200, 1), (90, 110, 1), (150, 150, 5)]
    for window in windows:
        profile.reserve(*window)
    for window in reversed(windows):
        profile.release(*window)
    assert list(profile.segments()) == [(100, None, 8)]
    assert len(profile) == 1


def test_earliest_fit_examples() -> None:
    """4 units; 3 taken over [0, 5), 2 over [8, 12)."""
    profile = Profile(4, 0)
    profile.reserve(0, 5, 3)
    profile.reserve(8, 12, 2)
    assert profile.earliest_fit(1, 100, 0) == 0
    assert profile.earliest_fit(2, 3, 0) == 5  # [5, 8) has 4 free
    assert profile.earliest_fit(3, 3, 0) == 5
    assert profile.earliest_fit(3, 4, 0) == 12  # [5, 9) would touch [8, 12)
    assert profile.earliest_fit(3, 4, 0, before=12) is None
    assert profile.earliest_fit(3, 3, 6) == 12
    assert profile.earliest_fit(5, 1, 0) is None  # more than the capacity
    assert profile.earliest_fit(2, 0, 0) == 5  # a zero-length window needs its instant
    assert profile.fits(3, 5, 3) and not profile.fits(3, 5, 4)
    assert profile.min_free(0, 20) == 1 and profile.min_free(5, 8) == 4
    assert profile.min_free(9, 9) == 2  # empty: the capacity at the start


def test_run_start_semantics() -> None:
    """run_start(size, before, after): earliest r >= after with size free all over [r, before)."""
    profile = Profile(4, 0)
    profile.reserve(0, 5, 3)  # 1 free until 5
    profile.reserve(8, 12, 2)  # 2 free over [8, 12)
    assert profile.run_start(2, 8, 0) == 5  # [5, 8) has 4
    assert profile.run_start(1, 8, 0) == 0  # at least 1 all along
    assert profile.run_start(2, 10, 0) == 5  # [5, 10): 4 then 2
    assert profile.run_start(3, 10, 0) is None  # [9, 10) has only 2
    assert profile.run_start(2, 5, 0) is None  # [4, 5) has only 1
    assert profile.run_start(2, 8, 6) == 6  # clipped at after
    assert profile.run_start(1, 3, 3) is None  # empty interval


def test_advance_forgets_the_past_and_keeps_the_future() -> None:
    profile = Profile(4, 0)
    profile.reserve(0, 10, 1)
    profile.reserve(5, 15, 2)
    profile.advance(7)
    assert profile.origin == 7
    assert list(profile.segments()) == [(7, 10, 1), (10, 15, 2), (15, None, 4)]
    profile.advance(3)  # going back is a no-op
    assert profile.origin == 7
    profile.reserve(0, 8, 1)  # clipped to the origin
    assert list(profile.segments()) == [(7, 8, 0), (8, 10, 1), (10, 15, 2), (15, None, 4)]
    profile.advance(100)
    assert list(profile.segments()) == [(100, None, 4)]


def test_overcommitted_segments_never_fit() -> None:
    profile = Profile(2, 0)
    profile.reserve(0, 10, 3)
    assert profile.free_at(0) == -1
    assert profile.earliest_fit(1, 1, 0) == 10
    assert not profile.fits(0, 5, 1)


@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("updates", [1, 50, 400])
def test_bursts_of_updates_across_many_chunks(updates: int, chunk: int) -> None:
    """Many updates between two queries (hundreds of breakpoints, so many chunks), then
    queries in every order."""
    profile = Profile(1000, 0, chunk)
    model = Model(1000, 0)
    for k in range(updates):
        start = (k * 37) % 250
        end = start + (k * 11) % 40
        profile.reserve(start, end, k % 7 + 1)
        model.add(start, end, -(k % 7 + 1))
    for t in (299, 0, 150, 17):
        assert profile.free_at(t) == model.free[t]
    check_shape(profile, model)
    for size in (1, 980, 995, 1000):
        for at in range(0, 290, 23):
            for duration in (0, 5, 40, 90):
                fit = model.earliest_fit(size, duration, at, None)
                assert profile.earliest_fit(size, duration, at) == fit, (size, at, duration)
                assert profile.fits(size, at, duration) == model.window_ok(size, at, duration)
                assert profile.min_free(at, at + duration) == model.min_free(at, at + duration)
                run = model.run_start(size, at + duration, at)
                assert profile.run_start(size, at + duration, at) == run, (size, at, duration)
    for k in sorted(range(updates), key=lambda k: (k * 7919) % updates):
        start = (k * 37) % 250
        profile.release(start, start + (k * 11) % 40, k % 7 + 1)
    assert list(profile.segments()) == [(0, None, 1000)]
    assert len(profile) == 1


@given(times=st.lists(st.integers(0, 40), max_size=30).map(sorted), t=st.integers(-3, 43))
def test_the_compiled_binary_searches_are_bisect(times: List[int], t: int) -> None:
    assert _after(times, t) == bisect_right(times, t)
    assert _at_or_after(times, t) == bisect_left(times, t)
