"""What a site sells from one snapshot: the plan, the pricing's view of it, the advertised slots.

Made once per poll by the agent and shared by everything that reads it (the API's slots and
quotes, the metrics, the command line), so that a burst of requests never multiplies the
planning work and every face prices against the same picture.

Slots are the holes of the **conservative** plan whatever policy predicts the starts (Singh,
thesis ch. 3): only under conservative backfilling does every queued job hold a reservation,
so only there is a hole capacity that a reservation can take without delaying anyone. A site
planning with EASY still advertises the conservative plan's holes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from siteagent.core.engines import Policy
from siteagent.core.prediction import Plan, plan, reservable_units
from siteagent.core.slots import advertise
from siteagent.core.values import ClusterSnapshot, Slot
from siteagent.pricing import Context, Pricing


@dataclass(frozen=True)
class MarketView:
    """One snapshot as the market sees it. ``plan`` is the prediction under the planner's
    policy; ``context`` is the pricing's view (its plan, under the pricing's policy, and the
    capacity that running work and reservations leave); ``slots`` the priced holes of the
    conservative plan; ``pricing`` the pricing they were made with (a reloaded configuration
    applies from the next view on)."""

    snapshot: ClusterSnapshot
    plan: Plan
    context: Context
    slots: Tuple[Slot, ...]
    pricing: Pricing

    @property
    def now(self) -> int:
        return self.snapshot.now


def market_view(snapshot: ClusterSnapshot, predicted: Plan, pricing: Pricing) -> MarketView:
    """The view of ``snapshot`` whose predicted schedule is ``predicted``; plans are reused
    where policies agree, so a conservative site plans once."""
    context = pricing.context(snapshot, predicted)
    conservative = next(
        (p for p in (predicted, context.plan) if p.policy is Policy.CONSERVATIVE),
        None,
    )
    if conservative is None:
        conservative = plan(snapshot, Policy.CONSERVATIVE)
    advertised = advertise(conservative, reservable=reservable_units(snapshot))
    slots = pricing.price_slots(context, advertised)
    return MarketView(snapshot, predicted, context, tuple(slots), pricing)
