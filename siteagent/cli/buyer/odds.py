"""``siteagent-client odds``: for one request, each site's cheapest reservation starting by a
time next to its virtual advance reservation (when to submit to its queue to be running by
then with a given probability), from ``POST /v1/quotes`` and ``GET /v1/history/waits``
(:mod:`siteagent.client.odds`).

Exits 0 when a site offers a reservation or bounds its queue for the request, 3 when the sites
that answered do neither, 75 when no site answered; a site that fails is a row of the table.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Dict, List, Optional, Tuple

from siteagent.cli import console, options
from siteagent.cli.buyer import common
from siteagent.cli.console import EXIT_REFUSED, EXIT_UNAVAILABLE
from siteagent.cli.exits import BadInput
from siteagent.cli.options import duration, local_time, quote_request
from siteagent.client.connection import SiteConnection, SiteQuote
from siteagent.client.fanout import SiteResult, any_answered, ask_all
from siteagent.client.odds import Ask, SiteOdds, site_odds
from siteagent.protocol.models import WaitHistory

#: The command line's name of each field of the request for quotes it sends.
OPTION_OF = {"cores": "--cores", "walltime": "--walltime", "deadline": "--start"}

COLUMNS = ["site", "start", "total", "submit_by", "queue_walltime", "note"]

Answers = Tuple[SiteQuote, WaitHistory]


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    odds = commands.add_parser(
        "odds",
        help="each site's reservation price next to the queue's odds of starting by a time",
        description=(
            "For N cores for a walltime from a start time T, show per site the cheapest "
            "reservation starting by T (a request for quotes ending by T + walltime) next to "
            "the virtual advance reservation: the latest time to submit an ordinary job so "
            "that it is running by T with probability at least Q, from the upper bounds the "
            "site publishes on its queue waits (they hold with the confidence it states); "
            "the job then asks the walltime plus that lead. 'no bound' when the job's bin "
            "holds too few waits. Exits 0 when a site offers either, 3 when none does, 75 "
            "when no site answered."
        ),
    )
    odds.add_argument("--cores", type=int, required=True, metavar="N", help="total cores")
    odds.add_argument(
        "--walltime", type=duration, required=True, metavar="D", help="how long: 90m, 2h, 1d"
    )
    odds.add_argument(
        "--start",
        required=True,
        metavar="T",
        help="running by then: +DURATION, epoch or ISO time",
    )
    odds.add_argument(
        "--probability",
        type=float,
        default=0.95,
        metavar="Q",
        help="of the queued job starting by T, in (0, 1) (0.95)",
    )
    common.add_sites_options(odds)
    odds.set_defaults(command=_odds)


def _odds(args: argparse.Namespace) -> int:
    now = int(time.time())
    start_by = options.when(args.start, now)
    try:
        ask = Ask(args.cores, args.walltime, start_by, args.probability)
    except ValueError as exc:  # a probability outside (0, 1)
        raise BadInput(str(exc)) from None
    request = quote_request(ask.quote_fields(), OPTION_OF)
    registry = common.registry(args)
    with common.connected(registry.select(args.site)) as connections:
        for connection in connections:
            connection.signing_key()  # quotes are signed: a missing or unsafe key, say so now

        def both(connection: SiteConnection) -> Answers:
            return connection.quote(request), connection.waits()

        with common.progress("asking", len(connections), args.json) as answered:
            results = ask_all(connections, both, answered)
    rows = [_row(result, ask, now) for result in results]
    if args.json:
        console.print_json({"request": _request_json(ask), "now": now, "sites": rows})
    else:
        _print(rows, ask)
    if any(row["total"] is not None or row["submit_by"] is not None for row in rows):
        return 0
    return EXIT_REFUSED if any_answered(results) else EXIT_UNAVAILABLE


def _row(result: SiteResult[Answers], ask: Ask, now: int) -> Dict[str, Any]:
    """One site's part: its offer and its virtual reservation, or why it has none."""
    if result.value is None:
        return _site_json(result.site, result.outcome.value, result.reason, None, now)
    odds = site_odds(ask, *result.value)
    return _site_json(result.site, "answered", "", odds, now)


def _site_json(
    site: str, status: str, reason: str, odds: Optional[SiteOdds], now: int
) -> Dict[str, Any]:
    offer = odds.offer if odds is not None else None
    return {
        "site": site,
        "status": status,
        "reason": reason,
        "offer": None if offer is None else offer.offer_id,
        "start": None if offer is None else offer.start,
        "total": None if offer is None else offer.total,
        "unit_price": None if offer is None else offer.unit_price,
        "no_offer": "" if odds is None else odds.no_offer,
        "lead_s": None if odds is None else odds.lead_s,
        "submit_by": None if odds is None else odds.submit_by,
        "queue_walltime": None if odds is None else odds.queue_walltime,
        "too_late": odds is not None and odds.too_late(now),
    }


def _request_json(ask: Ask) -> Dict[str, Any]:
    return {
        "cores": ask.cores,
        "walltime": ask.walltime,
        "start_by": ask.start_by,
        "probability": ask.probability,
    }


def _print(rows: List[Dict[str, Any]], ask: Ask) -> None:
    shown = [
        {
            **row,
            "start": local_time(row["start"]),
            "submit_by": local_time(row["submit_by"]),
            "queue_walltime": _duration(row["queue_walltime"]),
            "note": _note(row),
        }
        for row in rows
    ]
    console.print_table(
        shown,
        COLUMNS,
        title=f"{ask.cores} core(s) for {console.format_duration(ask.walltime)} from "
        f"{local_time(ask.start_by)}: the cheapest reservation starting by then, or when to "
        f"submit to the queue to be running by then with probability >= {ask.probability:g}",
        headers={
            "start": "reserved from",
            "total": "price",
            "submit_by": "or submit by",
            "queue_walltime": "asking",
        },
    )


def _note(row: Dict[str, Any]) -> str:
    """Why a column is empty: the site failed, offers nothing by then, or bounds nothing."""
    if row["status"] != "answered":
        return f"{row['status']}: {row['reason']}"
    notes = [row["no_offer"]] if row["no_offer"] else []
    if row["lead_s"] is None:
        notes.append("no bound: too few waits like this job's")
    elif row["too_late"]:
        notes.append("too late to submit")
    return "; ".join(notes)


def _duration(seconds: Optional[int]) -> Optional[str]:
    return None if seconds is None else console.format_duration(seconds)
