"""QBETS' binomial bounds on quantiles of the queue wait, checked on cases worked by hand.

The k-th smallest of n waits bounds the q-quantile from above with confidence
P(Binomial(n, q) <= k - 1); the bound is the smallest k reaching the confidence.
"""

from __future__ import annotations

from typing import List

import pytest

from siteagent.core.qbets import BoundSettings, order_statistic, upper_bound, wait_bounds
from siteagent.core.waits import QueueWait, wait_table


def test_the_median_of_ten_waits_at_95_percent_is_their_ninth() -> None:
    """Binomial(10, 1/2): P(<= 7) = 968/1024 = 0.945 falls short of 0.95, P(<= 8) =
    1013/1024 = 0.989 reaches it, so k - 1 = 8: the 9th smallest wait."""
    assert order_statistic(10, 0.5, 0.95) == 9
    waits = [70, 10, 100, 40, 20, 90, 30, 60, 50, 80]  # any order
    assert upper_bound(waits, 0.5, 0.95) == 90


def test_a_lower_confidence_takes_a_lower_order_statistic() -> None:
    """P(Binomial(10, 1/2) <= 5) = 638/1024 = 0.623 reaches 0.6, P(<= 4) = 386/1024 = 0.377
    does not: the 6th smallest."""
    assert order_statistic(10, 0.5, 0.6) == 6


def test_the_95th_percentile_at_95_percent_needs_59_waits() -> None:
    """Only the largest wait can bound it, with confidence 1 - 0.95^n: 0.9490 for n = 58,
    0.9515 for n = 59."""
    assert order_statistic(58, 0.95, 0.95) is None
    assert order_statistic(59, 0.95, 0.95) == 59
    assert upper_bound(list(range(58)), 0.95, 0.95) is None
    assert upper_bound(list(range(59)), 0.95, 0.95) == 58
    assert order_statistic(0, 0.5, 0.95) is None


def test_bounds_are_taken_over_the_most_recent_waits_only() -> None:
    """Ten long waits long ago, then ten short ones: a window of ten sees only the short."""
    oldest_first = [10_000] * 10 + [70, 10, 100, 40, 20, 90, 30, 60, 50, 80]
    bounds = wait_bounds(oldest_first, BoundSettings((0.5, 0.95), 0.95, window=10))
    assert [(b.quantile, b.confidence, b.upper_s) for b in bounds] == [
        (0.5, 0.95, 90),
        (0.95, 0.95, None),
    ]
    everything = wait_bounds(oldest_first, BoundSettings((0.5,), 0.95, window=20))
    assert everything[0].upper_s == 10_000  # 20 waits: P(Bin(20, .5) <= 13) = 0.942, <= 14: 0.979


def test_settings_refuse_what_is_not_a_probability() -> None:
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match=r"in \(0, 1\)"):
            BoundSettings((bad,))
        with pytest.raises(ValueError, match=r"in \(0, 1\)"):
            BoundSettings(confidence=bad)
    with pytest.raises(ValueError, match="at least one wait"):
        BoundSettings(window=0)


def test_the_wait_table_publishes_each_bins_bounds_from_its_latest_starts() -> None:
    """The table orders each bin's waits by start, whatever order they were recorded in, so
    that the window holds the jobs that started last."""
    t0 = 1_795_000_000
    early = [QueueWait(f"e{i}", 8, 7200, t0 - 50_000, t0 + i) for i in range(10)]
    late: List[QueueWait] = [
        QueueWait(f"l{i}", 8, 7200, t0 + 1000 + i - w, t0 + 1000 + i)
        for i, w in enumerate([70, 10, 100, 40, 20, 90, 30, 60, 50, 80])
    ]
    table = wait_table(late + early, bounds=BoundSettings((0.5, 0.75), 0.95, window=10)).to_json()
    assert table["bound_window_jobs"] == 10
    (filled,) = [b for b in table["bins"] if b["jobs"]]
    assert filled["jobs"] == 20
    assert filled["wait_bounds"] == [
        {"quantile": 0.5, "confidence": 0.95, "upper_bound_s": 90},
        # Binomial(10, 3/4): P(<= 9) = 1 - 0.75^10 = 0.944 < 0.95: no bound from ten waits
        {"quantile": 0.75, "confidence": 0.95, "upper_bound_s": None},
    ]
    empty = next(b for b in table["bins"] if not b["jobs"])
    assert [b["upper_bound_s"] for b in empty["wait_bounds"]] == [None, None]
