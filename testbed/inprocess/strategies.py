"""Use this when a property test needs hypothesis strategies for slots or pricing.

Hypothesis strategies shared by the slot and pricing tests."""

from __future__ import annotations

from hypothesis import strategies as st

from siteagent.core.values import BatchReservation, ClusterSnapshot, Job


@st.composite
def snapshots(draw: st.DrawFn) -> ClusterSnapshot:
    """A small cluster at t = 1000 with running jobs, queued jobs and reservations."""
    now = 1000
    capacity = draw(st.integers(1, 12))
    running, used = [], 0
    for k in range(draw(st.integers(0, 4))):
        size = draw(st.integers(1, capacity))
        if used + size > capacity:
            break
        used += size
        started = now - draw(st.integers(0, 500))
        limit = now - started + draw(st.integers(1, 5000))
        running.append(Job(f"r{k}", size, started, limit, start=started))
    pending = tuple(
        Job(f"p{k}", draw(st.integers(1, capacity)), now, draw(st.integers(1, 5000)))
        for k in range(draw(st.integers(0, 8)))
    )
    reservations = []
    if used < capacity and draw(st.booleans()):
        start = now + draw(st.integers(0, 5000))
        end = start + draw(st.integers(1, 5000))
        reservations.append(BatchReservation("res", start, end, capacity - used))
    return ClusterSnapshot(
        now=now,
        capacity=capacity,
        running=tuple(running),
        pending=pending,
        reservations=tuple(reservations),
    )
