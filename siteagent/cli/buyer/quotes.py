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

from siteagent.cli import console
from siteagent.cli.buyer import common
from siteagent.cli.console import EXIT_REFUSED, EXIT_UNAVAILABLE
from siteagent.cli.options import local_time
from siteagent.client.quotes import Quotes, ask_for_quotes


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
    common.add_request_options(quote)
    common.add_sites_options(quote)
    quote.set_defaults(command=_quote)


def _quote(args: argparse.Namespace) -> int:
    request = common.request_for_quotes(args, int(time.time()))
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
