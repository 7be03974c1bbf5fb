"""Statistics over seeds: the mean with a Student-t interval, BCa bootstrap intervals for
medians and ratios, and paired differences for comparisons.

Every function returns an ``Estimate`` that keeps its samples, so the report holds each
per-seed value beside the summary. Bootstrap resampling is seeded (``seed``), so a report is
the same on every run. See docs/reproductions.md ("Statistics").
"""

from __future__ import annotations

import inspect
import math
import statistics
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, Sequence, Tuple, Union

import numpy as np
from scipy import stats as scipy_stats

CONFIDENCE = 0.95
RESAMPLES = 10_000

Statistic = Union[str, Callable[..., Any]]


@dataclass(frozen=True)
class Estimate:
    """A value with its confidence interval [low, high] from ``n`` samples.

    ``method``: "t" (Student t over the samples' mean), "bca" or "percentile" (bootstrap),
    "exact" (all samples equal, or one deterministic run: no interval to speak of).
    """

    value: float
    low: float
    high: float
    n: int
    method: str
    samples: Tuple[float, ...] = ()

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high

    def excludes_zero(self, direction: str) -> bool:
        """Whether the interval lies wholly above 0 ("increase") or below it ("decrease")."""
        if direction == "increase":
            return self.low > 0
        if direction == "decrease":
            return self.high < 0
        raise ValueError(f"direction must be 'increase' or 'decrease', got {direction!r}")

    def text(self, digits: int = 3) -> str:
        """ "12.3 [10.1, 14.5], n = 10" with ``digits`` significant digits."""
        if self.method == "exact":
            return f"{_fmt(self.value, digits)}, n = {self.n}"
        return (
            f"{_fmt(self.value, digits)} [{_fmt(self.low, digits)}, {_fmt(self.high, digits)}]"
            f", n = {self.n}"
        )

    def to_dict(self) -> Dict[str, Any]:
        return {
            "value": self.value,
            "low": self.low,
            "high": self.high,
            "n": self.n,
            "method": self.method,
            "samples": list(self.samples),
        }


def _fmt(x: float, digits: int) -> str:
    if math.isnan(x) or math.isinf(x):
        return str(x)
    if x == 0:
        return "0"
    if abs(x) >= 10 ** (digits - 1):
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def exact(value: float, n: int = 1) -> Estimate:
    """A figure with no sampling spread (a deterministic run, a count, an invariant)."""
    return Estimate(float(value), float(value), float(value), n, "exact", (float(value),) * n)


def mean_ci(samples: Sequence[float], confidence: float = CONFIDENCE) -> Estimate:
    """The mean over seeds with its Student-t interval (nan bounds for a single sample)."""
    values = _floats(samples)
    n = len(values)
    mean = statistics.fmean(values)
    if n == 1:
        return Estimate(mean, math.nan, math.nan, 1, "t", values)
    if min(values) == max(values):
        return Estimate(mean, mean, mean, n, "exact", values)
    half = float(scipy_stats.t.ppf((1 + confidence) / 2, n - 1)) * statistics.stdev(values)
    half /= math.sqrt(n)
    return Estimate(mean, mean - half, mean + half, n, "t", values)


def paired_change(
    before: Sequence[float], after: Sequence[float], confidence: float = CONFIDENCE
) -> Estimate:
    """Mean of the per-seed differences after − before, with its t interval: a comparison of
    two arms that saw the same seeds (``before[i]`` and ``after[i]`` share seed i)."""
    a, b = _floats(before), _floats(after)
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: {len(a)} and {len(b)}")
    return mean_ci([y - x for x, y in zip(a, b)], confidence)


def bootstrap_ci(
    samples: Sequence[float],
    statistic: Statistic = "median",
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Estimate:
    """``statistic`` ("median", "mean", or a function of a 1-D array) with a BCa bootstrap
    interval; the percentile interval when BCa is undefined (tiny or tied samples)."""
    values = _floats(samples)
    function = _statistic(statistic)
    value = float(function(np.asarray(values)))
    if len(values) == 1 or min(values) == max(values):
        return Estimate(value, value, value, len(values), "exact", values)
    low, high, method = _bootstrap((np.asarray(values),), function, confidence, resamples, seed)
    return Estimate(value, low, high, len(values), method, values)


def ratio_ci(
    numerators: Sequence[float],
    denominators: Sequence[float],
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Estimate:
    """mean(numerators) / mean(denominators) with a paired BCa bootstrap interval (pairs are
    resampled together); the samples kept are the per-pair ratios."""
    a, b = _floats(numerators), _floats(denominators)
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: {len(a)} and {len(b)}")

    def ratio(x: Any, y: Any, axis: int = -1) -> Any:
        return np.mean(x, axis=axis) / np.mean(y, axis=axis)

    value = float(ratio(np.asarray(a), np.asarray(b)))
    per_pair = tuple(x / y if y else math.nan for x, y in zip(a, b))
    if len(a) == 1 or len(set(per_pair)) == 1:
        return Estimate(value, value, value, len(a), "exact", per_pair)
    data = (np.asarray(a), np.asarray(b))
    low, high, method = _bootstrap(data, ratio, confidence, resamples, seed, paired=True)
    return Estimate(value, low, high, len(a), method, per_pair)


def _floats(samples: Sequence[float]) -> Tuple[float, ...]:
    values = tuple(float(x) for x in samples)
    if not values:
        raise ValueError("no samples")
    if any(math.isnan(x) for x in values):
        raise ValueError(f"a sample is nan: {values}")
    return values


def _statistic(statistic: Statistic) -> Callable[..., Any]:
    if statistic == "median":
        return np.median
    if statistic == "mean":
        return np.mean
    if callable(statistic):
        return statistic
    raise ValueError(f"statistic must be 'median', 'mean' or a function, got {statistic!r}")


#: scipy 1.15 renamed bootstrap's random_state to rng
_RNG_ARGUMENT = (
    "rng" if "rng" in inspect.signature(scipy_stats.bootstrap).parameters else ("random_state")
)


def _bootstrap(
    data: Tuple[Any, ...],
    function: Callable[..., Any],
    confidence: float,
    resamples: int,
    seed: int,
    paired: bool = False,
) -> Tuple[float, float, str]:
    """(low, high, method) of a BCa interval, or of a percentile one where BCa gives nan."""
    vectorized = function in (np.median, np.mean) or paired
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # BCa warns (and gives nan) on degenerate data
            result = scipy_stats.bootstrap(
                data,
                function,
                n_resamples=resamples,
                confidence_level=confidence,
                method=method,
                paired=paired,
                vectorized=vectorized,
                **{_RNG_ARGUMENT: np.random.default_rng(seed)},
            )
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
        if not (math.isnan(low) or math.isnan(high)):
            return low, high, method.lower()
    return math.nan, math.nan, "percentile"
