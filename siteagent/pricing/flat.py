"""Flat pricing: one price per core-hour, and no fee."""

from __future__ import annotations

from decimal import Decimal
from typing import Optional

from siteagent.core.values import Request
from siteagent.pricing.base import Context, FeePolicy, UnitPricePolicy, Window


class FlatPrice(UnitPricePolicy):
    """The same price per core-hour for every window (the thesis' default ``c = 1``)."""

    def __init__(self, price: Decimal = Decimal(1)) -> None:
        if price < 0:
            raise ValueError(f"a flat price must be >= 0, got {price}")
        self.price = price

    def unit_price(self, context: Context, window: Window, request: Optional[Request]) -> Decimal:
        return self.price

    def describe(self) -> dict:  # type: ignore[type-arg]
        return {"policy": "flat", "price_per_core_hour": str(self.price)}


class NoFee(FeePolicy):
    """``f = 0``: reservations pay only for what they use."""

    def fee(self, context: Context, window: Window) -> Decimal:
        return Decimal(0)

    def describe(self) -> dict:  # type: ignore[type-arg]
        return {"policy": "none"}
