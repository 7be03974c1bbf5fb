"""`siteagent slots` and `siteagent quote`: what the site sells, and at what price.

Both open the site of ``--config`` and ``--state-dir`` (the replay backend by default, the
same simulated cluster `siteagent serve` runs), predict its schedule, and print a table or one
JSON object; the pricing is the configuration's unless options override it for one run.
`quote` records every alternative it prints as an offer, so that
`siteagent reservations accept OFFER_ID` can take it up before it expires.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
from typing import TYPE_CHECKING, Any, Dict, List

from siteagent.cli import console, options
from siteagent.cli.console import EXIT_REFUSED
from siteagent.cli.exits import BadInput
from siteagent.cli.options import duration, local_time, price
from siteagent.core.defaults import DEFAULT_OFFER_VALID_S
from siteagent.core.engines import Policy
from siteagent.core.prediction import plan
from siteagent.market.site import open_backend, open_site, pricing_of
from siteagent.market.view import market_view
from siteagent.pricing import FlatPrice, LoadBasedPrice, NoFee, Pricing
from siteagent.pricing.base import FeePolicy, UnitPricePolicy

if TYPE_CHECKING:
    from siteagent.market.quoting import Quote
    from siteagent.protocol.models import QuoteRequest

# The quoting use case and the protocol's models are imported by the commands that use them:
# they bring pydantic, about 10 MB of memory and a tenth of a second that every other command
# of `siteagent` (simulate above all) would pay at start for nothing.


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
    options.add_site_options(slots)
    slots.add_argument("--min-cores", type=int, default=1, help="only slots this wide")
    slots.add_argument("--min-duration", type=duration, default=1, help="only slots this long")
    slots.add_argument(
        "--price", type=price, help="c per core-hour (default: pricing.flat.price, 1)"
    )
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
    options.add_site_options(quote)
    options.add_lifecycle_options(quote)
    quote.add_argument("--cores", type=int, required=True)
    quote.add_argument("--duration", type=duration, required=True, help="seconds, or 90m, 2h")
    quote.add_argument(
        "--earliest",
        help="earliest start: +DURATION, epoch or ISO (default and soonest: a minute from now, "
        "the time to accept an offer)",
    )
    quote.add_argument("--deadline", help="latest end: +DURATION, epoch or ISO")
    quote.add_argument("--alpha", type=float, default=0.5, help="fee/start trade-off (0.5)")
    quote.add_argument("--max-price", type=price, help="refuse above this per core-hour")
    quote.add_argument("--limit", type=int, default=100, help="at most this many (100)")
    quote.add_argument(
        "--policy",
        choices=[Policy.CONSERVATIVE.value, Policy.EASY.value],
        help="scheduling policy the fees are computed under "
        "(default: pricing.externality.policy, conservative)",
    )
    quote.add_argument("--price", type=price, help="flat unit price per core-hour instead")
    quote.add_argument(
        "--load",
        nargs=3,
        metavar=("START", "MIN", "ROUNDS"),
        help="load-based unit price instead of flat: start and minimum price, expected rounds",
    )
    quote.add_argument("--no-fee", action="store_true", help="no externality fee")
    quote.add_argument(
        "--valid", type=duration, default=DEFAULT_OFFER_VALID_S, help="offer lifetime (s)"
    )
    quote.add_argument(
        "--client",
        default=getpass.getuser(),
        help="who the offers are for: only this client may accept them "
        "(`reservations accept --client`; default: your user name, %(default)s)",
    )
    quote.add_argument("--json", action="store_true", help="print one JSON object")
    quote.set_defaults(command=_quote)


def _slots(args: argparse.Namespace) -> int:
    if args.min_cores < 1 or args.min_duration < 1:
        raise BadInput("--min-cores and --min-duration must be at least 1")
    loaded = options.load_config(args)
    backend = open_backend(loaded)
    try:
        snapshot = backend.snapshot()
    finally:
        backend.close()
    pricing = pricing_of(loaded.pricing)
    if args.price is not None:
        pricing = dataclasses.replace(pricing, unit=FlatPrice(args.price))
    view = market_view(snapshot, plan(snapshot, loaded.planner.policy), pricing)
    from siteagent.protocol.models import slot_json

    rows: List[Dict[str, Any]] = [
        slot_json(slot)
        for slot in view.slots
        if slot.cores >= args.min_cores and slot.duration >= args.min_duration
    ]
    if args.json:
        console.print_json({"now": snapshot.now, "unit": snapshot.unit.value, "slots": rows})
        return 0
    console.print_table(
        [
            {**row, "start": local_time(row["start"]), "duration": _hours(row["duration"])}
            for row in rows
        ],
        ["start", "duration", "cores", "unit_price", "fee", "divisible", "extensible"],
        title=f"{len(rows)} advertised slots on {snapshot.backend} ({snapshot.capacity} cores)",
    )
    return 0


def _quote(args: argparse.Namespace) -> int:
    from siteagent.market.quoting import around_bids, quote

    _check_quote(args)
    loaded = options.load_config(args)
    site = open_site(loaded)
    try:
        now = int(site.manager.clock())
        rfq = _request_for_quotes(args, now)
        snapshot = site.backend.snapshot()
        predicted = plan(snapshot, loaded.planner.policy)
        view = market_view(snapshot, predicted, _pricing(args, site.pricing))
        view = around_bids(view, site.store.open_holds())  # what open bids hold is not sold
        record = site.manager.record_offers
        answer = quote(rfq, view, loaded.site, now, record, args.client, args.valid)
    finally:
        site.close()
    if args.json:
        shown = answer.to_json()
        console.print_json({**shown, "alternatives": shown["offers"]})
    if answer.refusal is not None:
        if not args.json:
            console.error(f"refused ({answer.refusal.code}): {answer.refusal.reason}")
        return EXIT_REFUSED
    if not args.json:
        _print_offers(answer, args)
    return 0


def _request_for_quotes(args: argparse.Namespace, now: int) -> QuoteRequest:
    """The command line's request, checked by the same model as the API's requests."""
    fields: Dict[str, Any] = {
        "cores": args.cores,
        "walltime": args.duration,
        "earliest_start": options.when(args.earliest, now) if args.earliest else None,
        "deadline": options.when(args.deadline, now) if args.deadline else None,
        "max_price": args.max_price,
        "alpha": args.alpha,
        "limit": args.limit,
    }
    return options.quote_request(fields, OPTION_OF)


#: The command line's name of each field of the request for quotes.
OPTION_OF = {
    "cores": "--cores",
    "walltime": "--duration",
    "earliest_start": "--earliest",
    "deadline": "--deadline",
    "max_price": "--max-price",
    "alpha": "--alpha",
    "limit": "--limit",
}


def _print_offers(answer: Quote, args: argparse.Namespace) -> None:
    from siteagent.protocol.models import offer_json

    rows = [offer_json(offer) for offer in answer.offers]
    marked = [{**row, "": "<- chosen" if i == answer.chosen else ""} for i, row in enumerate(rows)]
    console.print_table(
        [
            {**row, "start": local_time(row["start"]), "end": local_time(row["end"])}
            for row in marked
        ],
        ["offer_id", "start", "end", "cores", "unit_price", "fee", "total", ""],
        title=f"{len(rows)} alternatives (alpha {args.alpha}); offers valid {args.valid} s",
    )


def _check_quote(args: argparse.Namespace) -> None:
    """Refuse a request that cannot make sense before opening the site."""
    for option, value in (("--cores", args.cores), ("--duration", args.duration)):
        if value < 1:
            raise BadInput(f"{option} must be at least 1, got {value}")
    if args.limit < 1:
        raise BadInput(f"--limit must be at least 1, got {args.limit}")
    if not 0.0 <= args.alpha <= 1.0:
        raise BadInput(f"--alpha must be between 0 and 1, got {args.alpha}")


def _pricing(args: argparse.Namespace, configured: Pricing) -> Pricing:
    """The site's configured pricing with this run's --policy, --price, --load, --no-fee."""
    unit: UnitPricePolicy = configured.unit
    if args.load:
        unit = _load_price(args.load)
    elif args.price is not None:
        unit = FlatPrice(args.price)
    fee: FeePolicy = NoFee() if args.no_fee else configured.fee
    policy = configured.policy if args.policy is None else Policy(args.policy)
    return dataclasses.replace(configured, unit=unit, fee=fee, policy=policy)


def _load_price(values: List[str]) -> LoadBasedPrice:
    """``--load START MIN ROUNDS`` as a load-based unit price."""
    start, minimum, rounds = values
    try:
        return LoadBasedPrice(price(start), price(minimum), int(rounds))
    except (argparse.ArgumentTypeError, ValueError) as exc:
        raise BadInput(
            f"--load expects START MIN ROUNDS (prices per core-hour, MIN <= START, whole "
            f"ROUNDS >= 1), got {' '.join(values)}: {exc}"
        ) from None


def _hours(seconds: int) -> str:
    return f"{seconds / 3600:.2f} h"
