"""``siteagent-client quote``: one request for quotes to every site at once, one table of
their offers, best first, and a row for each site that refused (with its reason), failed or
timed out.

Exits 0 when there are offers, 3 (refused) when the sites that answered all refused, 75
(unavailable) when no site answered; a site that fails never fails the command by itself.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict
from typing import Any, Dict

from siteagent.cli import console, options
from siteagent.cli.buyer import common
from siteagent.cli.console import EXIT_REFUSED, EXIT_UNAVAILABLE
from siteagent.cli.exits import BadInput
from siteagent.cli.options import duration, local_time, price, quote_request
from siteagent.client.quotes import Quotes, ask_for_quotes
from siteagent.protocol.models import QuoteRequest

#: The command line's name of each field of the request for quotes.
OPTION_OF = {
    "walltime": "--walltime",
    "cores": "--cores",
    "nodes": "--nodes",
    "cores_per_node": "--cores-per-node",
    "deadline": "--deadline",
    "earliest_start": "--earliest",
    "max_price": "--max-price",
    "alpha": "--alpha",
    "architecture": "--architecture",
    "os": "--os",
    "cpu_speed_mhz": "--cpu-speed",
    "memory_per_core_mb": "--memory-per-core",
    "disk_gb": "--disk",
    "limit": "--limit",
}


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    quote = commands.add_parser(
        "quote",
        help="ask every site for offers at once and rank them",
        description=(
            "Send one request for quotes (the marketplace paper's RFQL: size, walltime and "
            "any of the optional fields below; absent fields mean don't care) to every site "
            "of the sites file at once, and show their offers in one table, best first by "
            "alpha x price + (1 - alpha) x end (both normalised over the offers): 1 ranks the "
            "cheapest first, 0 the earliest to finish. Sites that refuse say why; sites that "
            "fail or time out are shown as such. Exits 0 with offers, 3 when every site that "
            "answered refused, 75 when none answered."
        ),
    )
    add_request_options(quote)
    common.add_sites_options(quote)
    quote.set_defaults(command=_quote)


def add_request_options(parser: argparse.ArgumentParser, ranking: bool = True) -> None:
    """The request's options: size and time, price, the machine's RFQL attributes; with
    ``ranking`` the quote's own --deadline, --alpha and --limit too (the auction checks its
    deadline itself and ranks its own way)."""
    size = parser.add_argument_group("size and time")
    size.add_argument("--cores", type=int, metavar="N", help="total cores")
    size.add_argument(
        "--nodes", type=int, metavar="N", help="whole nodes (with or instead of --cores)"
    )
    size.add_argument("--cores-per-node", type=int, metavar="N")
    size.add_argument(
        "--walltime",
        type=duration,
        required=True,
        metavar="D",
        help="how long: seconds, or 90m, 2h, 1d",
    )
    if ranking:
        size.add_argument(
            "--deadline", metavar="T", help="latest end: +DURATION, epoch or ISO time"
        )
    size.add_argument(
        "--earliest", metavar="T", help="earliest start: +DURATION, epoch or ISO time"
    )
    terms = parser.add_argument_group("price and ranking")
    terms.add_argument("--max-price", type=price, metavar="P", help="most per core-hour")
    if ranking:
        terms.add_argument(
            "--alpha", type=float, default=0.5, metavar="A", help="0 earliest ... 1 cheapest (0.5)"
        )
    terms.add_argument("--limit", type=int, metavar="N", help="at most N offers per site (20)")
    machine = parser.add_argument_group("machine (RFQL attributes a site must advertise)")
    machine.add_argument("--architecture")
    machine.add_argument("--os")
    machine.add_argument("--cpu-speed", type=int, metavar="MHZ")
    machine.add_argument("--memory-per-core", type=int, metavar="MB")
    machine.add_argument("--disk", type=int, metavar="GB")


def _quote(args: argparse.Namespace) -> int:
    request = request_for_quotes(args, int(time.time()))
    registry = common.registry(args)
    with common.connected(registry.select(args.site)) as connections:
        for connection in connections:
            connection.signing_key()  # a missing or unsafe key is the buyer's to fix: say so now
        with common.progress("asking", len(connections), args.json) as answered:
            quotes = ask_for_quotes(connections, request, answered)
    if args.json:
        console.print_json(_json(quotes))
    else:
        _print(quotes)
    if quotes.ranked:
        return 0
    return EXIT_REFUSED if quotes.any_answered else EXIT_UNAVAILABLE


def request_for_quotes(args: argparse.Namespace, now: int, ranking: bool = True) -> QuoteRequest:
    """The command line's request (the options :func:`add_request_options` added, with the
    same ``ranking``)."""
    if args.cores is None and args.nodes is None:
        raise BadInput("give the size: --cores N, or --nodes N (with --cores-per-node N)")
    fields: Dict[str, Any] = {
        "walltime": args.walltime,
        "cores": args.cores,
        "nodes": args.nodes,
        "cores_per_node": args.cores_per_node,
        "deadline": options.when(args.deadline, now) if ranking and args.deadline else None,
        "earliest_start": options.when(args.earliest, now) if args.earliest else None,
        "max_price": args.max_price,
        "alpha": args.alpha if ranking else None,
        "architecture": args.architecture,
        "os": args.os,
        "cpu_speed_mhz": args.cpu_speed,
        "memory_per_core_mb": args.memory_per_core,
        "disk_gb": args.disk,
        "limit": args.limit,
    }
    return quote_request(fields, OPTION_OF)


def _json(quotes: Quotes) -> Dict[str, Any]:
    return {
        "request": quotes.request.model_dump(mode="json", exclude_unset=True),
        "offers": [
            {"rank": rank, "site": ranked.site, **ranked.offer.model_dump()}
            for rank, ranked in enumerate(quotes.ranked, start=1)
        ],
        "sites": [asdict(answer) for answer in quotes.answers()],
    }


def _print(quotes: Quotes) -> None:
    answers = quotes.answers()
    offering = sum(1 for answer in answers if answer.status == "offered")
    if not quotes.ranked:
        console.stdout.print(f"No offers from the {len(answers)} sites asked.")
    else:
        _print_offers(quotes, offering, len(answers))
    console.print_table(
        [
            {**asdict(answer), "latency_s": common.latency_ms(answer.latency_s)}
            for answer in answers
        ],
        ["site", "status", "offers", "reason", "latency_s"],
        title="Sites",
        headers={"latency_s": "latency"},
    )


def _print_offers(quotes: Quotes, offering: int, asked: int) -> None:
    console.print_table(
        [
            {
                "#": rank,
                "site": ranked.site,
                "offer": ranked.offer.offer_id,
                "start": local_time(ranked.offer.start),
                "end": local_time(ranked.offer.end),
                "cores": ranked.offer.cores,
                "price": ranked.offer.unit_price,
                "fee": ranked.offer.fee,
                "total": ranked.offer.total,
                "expires": local_time(ranked.offer.expires),
            }
            for rank, ranked in enumerate(quotes.ranked, start=1)
        ],
        ["#", "site", "offer", "start", "end", "cores", "price", "fee", "total", "expires"],
        title=f"{len(quotes.ranked)} offers from {offering} of {asked} sites, best first "
        f"(alpha {quotes.request.alpha:g}: 1 cheapest, 0 earliest; price per core-hour)",
    )
