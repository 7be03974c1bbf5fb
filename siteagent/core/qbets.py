"""Upper bounds on quantiles of the queue wait, with a stated confidence (QBETS).

A buyer who wants a job running by a given time without a reservation (Singh's thesis, ch. 6:
the *virtual* advance reservation) needs more than a mean wait: it needs a wait that jobs like
its own exceed only with a known probability, and a statement of how sure that is. QBETS
(Brevik, Nurmi and Wolski, *Predicting bounds on queuing delay for batch-scheduled parallel
machines*, PPoPP 2006; the prediction service the thesis' VAR experiments called) gives it
without assuming any distribution of the waits:

If waits are independent draws, the number of the n observed waits that fall below the true
q-quantile is Binomial(n, q). So the k-th smallest observed wait lies at or above the
q-quantile with probability ``P(Binomial(n, q) <= k - 1)``, and the smallest k for which that
reaches the confidence C makes the k-th smallest wait an upper bound on the q-quantile at
confidence C. When even the largest wait is not enough (``1 - q^n < C``: fewer than 59 waits
for the 0.95-quantile at 95%), there is no bound, and none is published.

QBETS keeps only the history since the last change point of the queue, because waits follow
the load; the agent keeps the most recent ``window`` waits of each bin instead, a simpler
stand-in for the same concern.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

#: The quantiles each bin publishes bounds for: the median to the 95th percentile.
DEFAULT_QUANTILES: Tuple[float, ...] = (0.5, 0.75, 0.9, 0.95)
#: How sure each bound is: QBETS' customary 95%.
DEFAULT_CONFIDENCE = 0.95
#: The most recent waits of a bin the bounds are taken over.
DEFAULT_WINDOW = 500


@dataclass(frozen=True)
class BoundSettings:
    """Which quantiles are bounded, how confidently, over how many recent waits per bin."""

    quantiles: Tuple[float, ...] = DEFAULT_QUANTILES
    confidence: float = DEFAULT_CONFIDENCE
    window: int = DEFAULT_WINDOW

    def __post_init__(self) -> None:
        for q in (*self.quantiles, self.confidence):
            if not 0.0 < q < 1.0:
                raise ValueError(f"quantiles and the confidence must be in (0, 1), got {q}")
        if self.window < 1:
            raise ValueError(f"the window must hold at least one wait, got {self.window}")


@dataclass(frozen=True)
class WaitBound:
    """With ``confidence``, at least a ``quantile`` of such jobs wait at most ``upper_s``
    seconds; ``upper_s`` is None when the bin holds too few waits to say so."""

    quantile: float
    confidence: float
    upper_s: Optional[int]


@functools.lru_cache(maxsize=4096)
def order_statistic(n: int, quantile: float, confidence: float) -> Optional[int]:
    """The smallest k (1-based) whose k-th smallest of ``n`` waits bounds the ``quantile``
    from above with ``confidence``: ``P(Binomial(n, quantile) <= k - 1) >= confidence``.
    None if no k up to ``n`` does."""
    if n < 1:
        return None
    log_q, log_rest = math.log(quantile), math.log1p(-quantile)
    log_n = math.lgamma(n + 1)
    cumulative = 0.0
    for k in range(1, n + 1):
        j = k - 1  # waits below the quantile
        log_pmf = log_n - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * log_q
        cumulative += math.exp(log_pmf + (n - j) * log_rest)
        if cumulative >= confidence:
            return k
    return None


def upper_bound(waits: Sequence[int], quantile: float, confidence: float) -> Optional[int]:
    """An upper bound on the ``quantile`` of the waits' distribution, at ``confidence``,
    from the observed ``waits`` (any order); None if they are too few."""
    k = order_statistic(len(waits), quantile, confidence)
    return None if k is None else sorted(waits)[k - 1]


def wait_bounds(recent: Sequence[int], settings: BoundSettings) -> Tuple[WaitBound, ...]:
    """The bounds of one bin from its waits, oldest first (only the last ``window`` count)."""
    window = list(recent[-settings.window :])
    return tuple(
        WaitBound(q, settings.confidence, upper_bound(window, q, settings.confidence))
        for q in settings.quantiles
    )
