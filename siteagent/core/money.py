"""Money: what a reservation costs, and what cancelling one keeps.

Amounts are Decimal, never float, in the site's virtual currency, and kept to the cent. The two
formulas of Singh's slot model live here once, so that an offer, a priced window, a slot and a
cancelled deal cannot disagree on them:

- the cost of ``n`` units for ``d`` seconds at unit price ``c`` per core-hour plus a fixed fee
  ``f`` is ``n·d·c + f`` (thesis ch. 3, Table 1);
- cancelling a confirmed reservation keeps ``p·f``, its penalty factor times its fee (thesis
  ch. 5): the fee paid the queued jobs for the delay, and part of that harm is not undone.
"""

from __future__ import annotations

from decimal import Decimal

#: Amounts are kept to the cent.
CENT = Decimal("0.01")

#: Seconds in the hour that prices are quoted per.
HOUR = Decimal(3600)


def core_hours(size: int, duration_s: int) -> Decimal:
    """``size`` units for ``duration_s`` seconds, in unit-hours (exact)."""
    return Decimal(size) * Decimal(duration_s) / HOUR


def cost(size: int, duration_s: int, unit_price: Decimal, fee: Decimal) -> Decimal:
    """``n·d·c + f`` to the cent: ``size`` units for ``duration_s`` s at ``unit_price`` per
    core-hour, plus the fixed ``fee``."""
    return (core_hours(size, duration_s) * unit_price + fee).quantize(CENT)


def cancellation_penalty(penalty_factor: Decimal, fee: Decimal) -> Decimal:
    """``p·f`` to the cent: what cancelling a confirmed reservation with ``fee`` keeps."""
    return (penalty_factor * fee).quantize(CENT)
