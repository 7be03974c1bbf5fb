"""Quoting: a request for quotes answered with priced offers, or refused with the reason.

The one implementation of the use case, called by ``POST /v1/quotes``, ``siteagent quote`` and
the metrics' reference quotes:

1. :func:`requested`: the RFQL request in the site's capacity unit (cores, or whole nodes on a
   partition that allocates them), its present fields checked against what the site
   advertises (a field the site cannot promise refuses the quote, naming the field), and its
   earliest start no sooner than a minute from now (the buyer's time to accept);
2. :func:`priced`: the priced alternatives at every change of availability (the pricing's
   query form, Singh ch. 5), or the refusal;
3. :func:`offered`: one offer per alternative, valid for a few minutes or until its window
   starts; the caller stores them before it answers (a buyer may accept at once);
4. :func:`answered`: the answer, with the alternative the buyer's trade-off α picks.

:func:`quote` runs the four steps in order. The API runs the same steps itself because it
decides *where* step 2 runs (on its event loop, or its pricing thread for quotes that re-plan
the queue) and stores offers by group commit; nothing else differs.
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from siteagent.config.schema import SiteConfig
from siteagent.core.defaults import DEFAULT_OFFER_VALID_S
from siteagent.core.errors import InvalidRequest
from siteagent.core.values import CapacityUnit, ClusterSnapshot, Offer, Request
from siteagent.market.view import MarketView
from siteagent.pricing import LoadBasedPrice, Price, Pricing, Refused, choose
from siteagent.pricing.bids import Hold, around_holds
from siteagent.pricing.load import LoadOffer
from siteagent.protocol.models import QuoteRequest, offer_json

#: How far ahead of the quote the earliest offered window starts (seconds). The past cannot be
#: reserved, so an offer stops being acceptable when its window starts; a window starting at
#: the quote's own instant would be refused to any buyer a second slower than the agent. A
#: minute is time enough for a program (or a multi-round auction) to accept.
ACCEPT_LEAD_S = 60


@dataclass(frozen=True)
class Refusal:
    """The site's "Refuse" (the marketplace paper's protocol): no offer, a stable ``code``
    (``unsatisfiable``, ``no_offer``, ``price_above_maximum``), the reason, and the request
    field that could not be satisfied, if one is to blame."""

    code: str
    reason: str
    field: Optional[str] = None


@dataclass(frozen=True)
class Quote:
    """A site's answer to a request for quotes: the offers (earliest first) and the index of
    the one the buyer's trade-off picks, or the refusal."""

    now: int
    snapshot_time: int
    unit: CapacityUnit
    offers: Tuple[Offer, ...] = ()
    chosen: Optional[int] = None
    refusal: Optional[Refusal] = None

    def to_json(self) -> Dict[str, Any]:
        """The answer as the API sends it (``QuoteAnswer`` in the OpenAPI)."""
        if self.refusal is not None:
            refusal = dataclasses.asdict(self.refusal)
            return {"status": "refused", "now": self.now, "refusal": refusal, "offers": []}
        return {
            "status": "offered",
            "now": self.now,
            "snapshot_time": self.snapshot_time,
            "unit": self.unit.value,
            "offers": [offer_json(offer) for offer in self.offers],
            "chosen": self.chosen,
        }


#: Stores the offers of a quote before it is answered (None: they are not offers to accept,
#: as the metrics' reference quotes are not).
Record = Callable[[Sequence[Offer]], None]


def around_bids(view: MarketView, holds: Sequence[Tuple[int, int, int]]) -> MarketView:
    """``view`` as a quote sees it: without the capacity open English-auction bids hold
    (``holds``: their start, end and size), which an accept would refuse."""
    if not holds:
        return view
    context = around_holds(view.context, [Hold(*held) for held in holds])
    return dataclasses.replace(view, context=context)


def quote(
    rfq: QuoteRequest,
    view: MarketView,
    site: SiteConfig,
    now: int,
    record: Optional[Record],
    client: str = "",
    valid_s: int = DEFAULT_OFFER_VALID_S,
) -> Quote:
    """The whole use case on ``view``, synchronously: check, price, offer (to ``client``),
    store, answer."""
    request = requested(rfq, view.snapshot, site, now)
    if isinstance(request, Refusal):
        return refused(view, now, request)
    prices = priced(view.pricing, view, request, rfq.limit)
    if isinstance(prices, Refusal):
        return refused(view, now, prices)
    offers = offered(prices, request, now, valid_s, site.name, client)
    if record is not None:
        record(offers)
    return answered(view, now, offers, prices, rfq.alpha)


def requested(
    rfq: QuoteRequest, snapshot: ClusterSnapshot, site: SiteConfig, now: int
) -> Union[Request, Refusal]:
    """The RFQL request in the site's capacity unit, starting no sooner than ``now`` plus the
    buyer's time to accept; or the refusal of the first field the site cannot satisfy.
    Raises InvalidRequest for a request that says neither cores nor nodes, or both
    inconsistently."""
    size_unknown = rfq.cores_per_node is None and cores_per_node(site, snapshot) is None
    if rfq.nodes is not None and size_unknown:  # a node's size is unknown here
        return Refusal(
            "unsatisfiable",
            f"{rfq.nodes} nodes asked without cores_per_node, and this site does not "
            "advertise its cores per node: give cores (or cores_per_node)",
            "cores_per_node",
        )
    request = _in_site_units(rfq, snapshot, site)
    problem = _unsatisfied(rfq, request, snapshot, site)
    if problem is not None:
        return Refusal("unsatisfiable", problem[1], problem[0])
    # the plan may be a poll old: nothing may start before the present (and the buyer's time
    # to accept)
    return dataclasses.replace(request, earliest=earliest_start(request.earliest, now))


def priced(
    pricing: Pricing, view: MarketView, request: Request, limit: int
) -> Union[List[Price], Refusal]:
    """The priced alternatives of ``request`` on ``view`` (with ``pricing``: the view's own, or
    a wrapper of it that decides where fees run), or the refusal."""
    try:
        return pricing.alternatives(view.context, request, limit)
    except Refused as exc:
        return Refusal(_refusal_code(pricing, view, request, limit), exc.reason)


def offered(
    prices: Sequence[Price], request: Request, now: int, valid_s: int, site: str, client: str
) -> List[Offer]:
    """One offer per priced window to ``client``, each with a fresh random id; acceptable (by
    that client only) for ``valid_s`` seconds from ``now``, or until its window starts if that
    is sooner."""
    return [
        Offer(
            id=uuid.uuid4().hex[:16],
            request=request,
            start=price.window.start,
            duration=price.window.duration,
            size=price.window.size,
            unit_price=price.unit_price,
            fee=price.fee,
            expires=min(now + valid_s, price.window.start),
            site=site,
            client=client,
        )
        for price in prices
    ]


def answered(
    view: MarketView, now: int, offers: Sequence[Offer], prices: Sequence[Price], alpha: float
) -> Quote:
    """The answer: the offers, and the one the trade-off ``alpha`` picks (0 earliest, 1
    cheapest)."""
    snapshot = view.snapshot
    return Quote(now, snapshot.now, snapshot.unit, tuple(offers), choose(prices, alpha))


def load_offer(view: MarketView, request: Request, prices: Sequence[Price]) -> Optional[LoadOffer]:
    """How the cheapest of ``prices`` (the earliest of equal ones) was priced, when the site
    prices by load: the decrement and offer an auction round got from it (docs/design.md
    §4.4); None for other pricing, or no price."""
    unit = view.pricing.unit
    if not isinstance(unit, LoadBasedPrice) or not prices:
        return None
    cheapest = min(prices, key=lambda price: (price.unit_price, price.window.start))
    return unit.explain(view.context, cheapest.window, request)


def refused(view: MarketView, now: int, refusal: Refusal) -> Quote:
    return Quote(now, view.snapshot.now, view.snapshot.unit, refusal=refusal)


def earliest_start(asked: Optional[int], now: int) -> int:
    """The earliest start a quote offers: the buyer's, but not before now + ACCEPT_LEAD_S."""
    return max(asked or now, now + ACCEPT_LEAD_S)


def cores_per_node(site: SiteConfig, snapshot: Optional[ClusterSnapshot]) -> Optional[int]:
    """Cores per node as the site advertises them: configured, else the widest node seen."""
    if site.cores_per_node is not None or snapshot is None:
        return site.cores_per_node
    if snapshot.nodes:
        return max(node.cores for node in snapshot.nodes)
    return snapshot.cores_per_node if snapshot.unit is CapacityUnit.NODE else None


def node_count(snapshot: ClusterSnapshot) -> Optional[int]:
    """Usable nodes, where the snapshot knows them."""
    if snapshot.nodes:
        return sum(1 for node in snapshot.nodes if node.usable)
    return snapshot.capacity if snapshot.unit is CapacityUnit.NODE else None


def _in_site_units(rfq: QuoteRequest, snapshot: ClusterSnapshot, site: SiteConfig) -> Request:
    """The RFQL request with its size in the site's capacity unit (cores, or whole nodes)."""
    per_node = rfq.cores_per_node or cores_per_node(site, snapshot) or 1
    if rfq.cores is None and rfq.nodes is None:
        raise InvalidRequest("give cores, or nodes (and cores_per_node)", field="cores")
    both = rfq.cores is not None and rfq.nodes is not None and rfq.cores_per_node
    if both and rfq.cores != (rfq.nodes or 0) * (rfq.cores_per_node or 0):
        raise InvalidRequest("cores must equal nodes x cores_per_node", field="cores")
    cores = rfq.cores if rfq.cores is not None else (rfq.nodes or 1) * per_node
    size = cores
    if snapshot.unit is CapacityUnit.NODE:
        size = rfq.nodes or math.ceil(cores / per_node)
    return Request(
        cores=size,
        duration=rfq.walltime,
        earliest=rfq.earliest_start,
        deadline=rfq.deadline,
        max_price=rfq.max_price,
        nodes=rfq.nodes,
        cores_per_node=rfq.cores_per_node,
        memory_per_core_mb=rfq.memory_per_core_mb,
        architecture=rfq.architecture,
        os=rfq.os,
        cpu_speed_mhz=rfq.cpu_speed_mhz,
        disk_gb=rfq.disk_gb,
        round=rfq.round,
        best_price=rfq.best_price,
    )


def _unsatisfied(
    rfq: QuoteRequest, request: Request, snapshot: ClusterSnapshot, site: SiteConfig
) -> Optional[Tuple[str, str]]:
    """The first present RFQL field this site cannot satisfy, and why; None if none."""
    if request.cores > snapshot.capacity:
        unit = snapshot.unit.value
        return "cores", f"{request.cores} {unit}s asked, the site has {snapshot.capacity}"
    named = (("architecture", rfq.architecture, site.architecture), ("os", rfq.os, site.os))
    for field, wanted, have in named:
        if wanted is not None and (have is None or wanted.lower() != have.lower()):
            what = f"is {have}" if have else f"does not advertise its {field}"
            return field, f"this site {what}, the request asks for {wanted}"
    minima = (
        ("cpu_speed_mhz", rfq.cpu_speed_mhz, site.cpu_speed_mhz),
        ("memory_per_core_mb", rfq.memory_per_core_mb, site.memory_per_core_mb),
        ("cores_per_node", rfq.cores_per_node, cores_per_node(site, snapshot)),
    )
    for field, needed, offered_value in minima:
        if needed is not None and (offered_value is None or offered_value < needed):
            shown = "is not advertised" if offered_value is None else f"is {offered_value}"
            return field, f"the site's {field} {shown}, the request needs {needed}"
    nodes = node_count(snapshot)
    if rfq.nodes is not None and nodes is not None and rfq.nodes > nodes:
        return "nodes", f"{rfq.nodes} nodes asked, the site has {nodes}"
    if rfq.disk_gb is not None:
        return "disk_gb", "this site does not advertise disk space, so it cannot promise it"
    return None


def _refusal_code(pricing: Pricing, view: MarketView, request: Request, limit: int) -> str:
    """``price_above_maximum`` when only the buyer's price stood in the way."""
    if request.max_price is None:
        return "no_offer"
    try:
        pricing.alternatives(view.context, dataclasses.replace(request, max_price=None), limit)
    except Refused:
        return "no_offer"
    return "price_above_maximum"
