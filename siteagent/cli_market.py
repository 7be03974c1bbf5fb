"""`siteagent slots` and `siteagent quote`: what the site sells, and at what price.

Both read the cluster of the state directory (the replay backend by default, the same
simulated cluster `siteagent serve` runs), predict its schedule, and print a table or one JSON
object. `quote` records every alternative it prints as an offer, so that
`siteagent reservations accept OFFER_ID` can take it up before it expires.
"""

from __future__ import annotations

import argparse
import uuid
from decimal import Decimal
from typing import Any, Dict, List

from siteagent import console
from siteagent.cli_reservations import (
    _decimal,
    _duration,
    _epoch,
    _local,
    add_lifecycle_options,
    add_state_dir,
    open_backend,
    open_site,
)
from siteagent.model import Offer, Request
from siteagent.pricing import (
    ExternalityFee,
    FlatPrice,
    LoadBasedPrice,
    NoFee,
    Price,
    Pricing,
    choose,
)
from siteagent.scheduling import Policy, plan
from siteagent.slots import advertise

#: How long a quoted offer can be accepted, by default.
OFFER_VALID_S = 300


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    slots = commands.add_parser(
        "slots",
        help="list the advertised slots: free holes of the predicted conservative schedule",
        description=(
            "Predict the cluster's schedule with conservative backfilling and list its free "
            "holes as slots <start, cores, duration, unit price, fee, divisible, extensible> "
            "(Singh, thesis ch. 3). No two slots describe the same capacity; holes that end "
            "where a planned job starts are indivisible; holes open to the horizon are "
            "divisible and extensible."
        ),
    )
    add_state_dir(slots)
    slots.add_argument("--min-cores", type=int, default=1, help="only slots this wide")
    slots.add_argument("--min-duration", type=_duration, default=1, help="only slots this long")
    slots.add_argument("--price", type=_decimal, default=Decimal(1), help="c per core-hour (1)")
    slots.add_argument("--json", action="store_true", help="print one JSON object")
    slots.set_defaults(command=_slots)

    quote = commands.add_parser(
        "quote",
        help="priced alternatives for a reservation, and the one a trade-off picks",
        description=(
            "Price a reservation of CORES for DURATION at every instant the predicted "
            "availability changes, from the earliest start on (Singh, thesis ch. 5): unit "
            "price by the pricing policy, fee = delay caused to queued jobs. The list always "
            "holds the earliest admissible start and a start with no fee. --alpha picks one: "
            "0 = earliest, 1 = cheapest. Each alternative is recorded as an offer."
        ),
    )
    add_state_dir(quote)
    add_lifecycle_options(quote)
    quote.add_argument("--cores", type=int, required=True)
    quote.add_argument("--duration", type=_duration, required=True, help="seconds, or 90m, 2h")
    quote.add_argument("--earliest", help="earliest start: +DURATION, epoch or ISO (default now)")
    quote.add_argument("--deadline", help="latest end: +DURATION, epoch or ISO")
    quote.add_argument("--alpha", type=float, default=0.5, help="fee/start trade-off (0.5)")
    quote.add_argument("--max-price", type=_decimal, help="refuse above this per core-hour")
    quote.add_argument("--limit", type=int, default=100, help="at most this many (100)")
    quote.add_argument(
        "--policy",
        choices=[Policy.CONSERVATIVE.value, Policy.EASY.value],
        default=Policy.CONSERVATIVE.value,
        help="scheduling policy the fees are computed under (conservative)",
    )
    quote.add_argument("--price", type=_decimal, default=Decimal(1), help="flat c (1)")
    quote.add_argument(
        "--load",
        nargs=3,
        metavar=("START", "MIN", "ROUNDS"),
        help="load-based unit price instead of flat: start and minimum price, expected rounds",
    )
    quote.add_argument("--no-fee", action="store_true", help="no externality fee")
    quote.add_argument("--valid", type=_duration, default=OFFER_VALID_S, help="offer lifetime")
    quote.add_argument("--json", action="store_true", help="print one JSON object")
    quote.set_defaults(command=_quote)


def _slots(args: argparse.Namespace) -> int:
    backend = open_backend(args)
    try:
        snapshot = backend.snapshot()
    finally:
        backend.close()
    slots = [
        slot
        for slot in advertise(plan(snapshot, Policy.CONSERVATIVE), unit_price=args.price)
        if slot.cores >= args.min_cores and slot.duration >= args.min_duration
    ]
    rows: List[Dict[str, Any]] = [
        {
            "start": slot.start,
            "duration": slot.duration,
            "cores": slot.cores,
            "unit_price": str(slot.unit_price),
            "fee": str(slot.fee),
            "divisible": slot.divisible,
            "extensible": slot.extensible,
        }
        for slot in slots
    ]
    if args.json:
        console.print_json({"now": snapshot.now, "slots": rows})
        return 0
    console.print_table(
        [
            {**row, "start": _local(row["start"]), "duration": _hours(row["duration"])}
            for row in rows
        ],
        ["start", "duration", "cores", "unit_price", "fee", "divisible", "extensible"],
        title=f"{len(rows)} advertised slots on {snapshot.backend} ({snapshot.capacity} cores)",
    )
    return 0


def _quote(args: argparse.Namespace) -> int:
    if not 0.0 <= args.alpha <= 1.0:
        raise ValueError(f"--alpha must be between 0 and 1, got {args.alpha}")
    pricing = _pricing(args)
    site = open_site(args)
    try:
        snapshot = site.backend.snapshot()
        request = Request(
            cores=args.cores,
            duration=args.duration,
            earliest=_epoch(args.earliest, snapshot.now) if args.earliest else None,
            deadline=_epoch(args.deadline, snapshot.now) if args.deadline else None,
            max_price=args.max_price,
        )
        alternatives = pricing.alternatives(pricing.context(snapshot), request, args.limit)
        chosen = choose(alternatives, args.alpha)
        offers = [_offer(price, request, snapshot.now + args.valid) for price in alternatives]
        for offer in offers:
            site.manager.record_offer(offer)
    finally:
        site.close()
    rows = [_row(offer) for offer in offers]
    if args.json:
        console.print_json({"now": snapshot.now, "alternatives": rows, "chosen": chosen})
        return 0
    marked = [{**row, "": "<- chosen" if i == chosen else ""} for i, row in enumerate(rows)]
    console.print_table(
        [{**row, "start": _local(row["start"]), "end": _local(row["end"])} for row in marked],
        ["offer_id", "start", "end", "cores", "unit_price", "fee", "total", ""],
        title=f"{len(rows)} alternatives (alpha {args.alpha}); offers valid {args.valid} s",
    )
    return 0


def _pricing(args: argparse.Namespace) -> Pricing:
    policy = Policy(args.policy)
    if args.load:
        start, minimum, rounds = args.load
        unit: Any = LoadBasedPrice(_decimal(start), _decimal(minimum), int(rounds))
    else:
        unit = FlatPrice(args.price)
    fee: Any = NoFee() if args.no_fee else ExternalityFee()
    return Pricing(unit, fee, policy)


def _offer(price: Price, request: Request, expires: int) -> Offer:
    window = price.window
    return Offer(
        id=uuid.uuid4().hex[:16],
        request=request,
        start=window.start,
        duration=window.duration,
        size=window.size,
        unit_price=price.unit_price,
        fee=price.fee,
        expires=expires,
    )


def _row(offer: Offer) -> Dict[str, Any]:
    return {
        "offer_id": offer.id,
        "start": offer.start,
        "end": offer.end,
        "cores": offer.size,
        "unit_price": str(offer.unit_price),
        "fee": str(offer.fee),
        "total": str(offer.total),
    }


def _hours(seconds: int) -> str:
    return f"{seconds / 3600:.2f} h"
