"""``siteagent-client auction``: the reverse auction across the sites file's sites, then the
two-phase commit of the best offers, every step journaled before it is sent.

Exits 0 when every part is confirmed; 3 when nothing meets the constraints (the closest offers
are in the message) or no choice could be held and confirmed; 75 when no site answered; 130
when interrupted (Ctrl-C: the request in flight gets its answer, then every tentative
reservation is cancelled; a second Ctrl-C stops at once, and ``recover`` finishes the job).
"""

from __future__ import annotations

import argparse
import contextlib
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

from siteagent.cli import console, options
from siteagent.cli.buyer import common
from siteagent.cli.buyer.common import interruptible
from siteagent.cli.console import EXIT_INTERRUPTED, EXIT_REFUSED, EXIT_UNAVAILABLE
from siteagent.cli.exits import BadInput
from siteagent.cli.options import amount, duration, local_time
from siteagent.client.batchcommit import BatchCommit
from siteagent.client.commit import CommitOutcome
from siteagent.client.journal import AuctionState, Journal, JournalEntry
from siteagent.client.recovery import Patient
from siteagent.client.reverse_auction import (
    DEFAULT_ROUNDS,
    Auction,
    Constraints,
    Mode,
    Preference,
    Shortfall,
    run_rounds,
)
from siteagent.client.reverse_rounds import round_asker
from siteagent.protocol.models import QuoteRequest

#: Exit code of an interrupted command (128 + SIGINT), as shells report it.


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    auction = commands.add_parser(
        "auction",
        help="reverse auction across sites, then reserve the best offers (two-phase commit)",
        description=(
            "Send the request for quotes to every site; for --rounds rounds send it again with "
            "the lowest price offered so far, so that sites lower their price or drop out; "
            "rank the offers (--mode: cheapest, earliest, or alpha x cost + (1 - alpha) x "
            "end), keep those within --budget and --deadline, accept the best (a tentative "
            "reservation; on refusal the next), and once every part is held confirm them "
            "all, signed. With --parts N the request is N parts starting within --tolerance "
            "of each other (co-allocation across sites): if one cannot be had, every part "
            "held is released. Every step is journaled before it is sent; Ctrl-C releases "
            "what is held. Exits 0 when every part is confirmed, 3 when nothing meets the "
            "constraints (the closest offers are shown) or nothing could be reserved, 75 "
            "when no site answered, 130 when interrupted."
        ),
    )
    common.add_request_options(auction, ranking=False)
    parts = auction.add_argument_group("parts and constraints")
    parts.add_argument(
        "--parts", type=int, default=1, metavar="N", help="co-allocate N such parts (1)"
    )
    parts.add_argument(
        "--tolerance",
        type=duration,
        default=0,
        metavar="D",
        help="the parts' starts may differ by this much (0)",
    )
    parts.add_argument(
        "--budget", type=amount, metavar="AMOUNT", help="most the whole request may cost"
    )
    parts.add_argument(
        "--deadline",
        metavar="T",
        help="every part ends by then: +DURATION, epoch or ISO time (checked by the client, "
        "so that the closest offers can be shown when none meets it)",
    )
    ranking = auction.add_argument_group("rounds and ranking")
    ranking.add_argument(
        "--rounds",
        type=int,
        default=DEFAULT_ROUNDS,
        metavar="N",
        help=f"bidding rounds ({DEFAULT_ROUNDS})",
    )
    ranking.add_argument(
        "--round-interval",
        type=duration,
        default=0,
        metavar="D",
        help="each round lasts at least D (the next one, or the close, starts D after it "
        "began), so that the market moves between rounds as under the marketplace paper's "
        "round timer; 0 asks again as soon as every site answered (0)",
    )
    ranking.add_argument(
        "--mode",
        choices=[mode.value for mode in Mode],
        default=Mode.CHEAPEST.value,
        help="best means cheapest (then earliest), earliest (then cheapest), or the alpha "
        "trade-off (cheapest)",
    )
    common.add_alpha_option(ranking, "with --mode alpha: 1 cheapest ... 0 earliest (0.5)")
    common.add_sites_options(auction)
    common.add_batches_option(auction)
    common.add_journal_option(auction)
    auction.set_defaults(command=_auction)


def _auction(args: argparse.Namespace) -> int:
    now = int(time.time())
    if args.parts < 1 or args.rounds < 1 or args.tolerance < 0 or args.round_interval < 0:
        raise BadInput(
            "--parts and --rounds must be at least 1, --tolerance and --round-interval at least 0"
        )
    request = common.request_for_quotes(args, now, ranking=False)
    constraints = Constraints(
        budget=args.budget,
        deadline=options.when(args.deadline, now) if args.deadline else None,
        tolerance=args.tolerance,
    )
    preference = Preference(Mode(args.mode), args.alpha)
    sites = common.registry(args).select(args.site)
    journal = common.open_journal(args)
    batches = not args.no_batches
    with common.connected(sites, batches) as connections, interruptible() as interrupted:
        for connection in connections:
            connection.signing_key()  # a missing or unsafe key is the buyer's to fix: say so now
        by_name = {connection.site.name: connection for connection in connections}
        record = journal.open_auction(_described(args, request, constraints))
        with journal.running(record.id):
            auction = Auction([request] * args.parts, list(by_name), constraints, preference)
            with _progress(len(connections), args.rounds, args.json) as answered:
                asker = round_asker(by_name, journal, record.id, answered)
                run_rounds(auction, args.rounds, asker, interrupted, args.round_interval)
            if interrupted():
                journal.set_auction(record.id, AuctionState.INTERRUPTED, "interrupted bidding")
                return _report(args, journal, record.id, auction, EXIT_INTERRUPTED)
            choices = auction.choices(int(time.time()))
            if not choices:
                return _no_choice(args, journal, record.id, auction)
            sellers = {name: Patient(connection) for name, connection in by_name.items()}
            commit = BatchCommit(
                journal,
                record.id,
                sellers,
                args.parts,
                constraints.budget,
                interrupted,
                connections=by_name,
            )
            outcome = commit.run(choices)
    return _report(args, journal, record.id, auction, _exit_code(outcome))


def _described(
    args: argparse.Namespace, request: QuoteRequest, constraints: Constraints
) -> Dict[str, Any]:
    """What the journal keeps of the command: enough to say later what was asked."""
    return {
        "parts": args.parts,
        "rfq": request.model_dump(mode="json", exclude_unset=True),
        "rounds": args.rounds,
        "round_interval_s": args.round_interval,
        "mode": args.mode,
        "alpha": args.alpha,
        "budget": None if constraints.budget is None else str(constraints.budget),
        "deadline": constraints.deadline,
        "tolerance": constraints.tolerance,
    }


def _exit_code(outcome: CommitOutcome) -> int:
    if outcome.state is AuctionState.DONE:
        return 0
    if outcome.state is AuctionState.INTERRUPTED:
        return EXIT_INTERRUPTED
    return EXIT_REFUSED


def _no_choice(
    args: argparse.Namespace, journal: Journal, auction_id: str, auction: Auction
) -> int:
    """Nothing to accept: the closest offers if there are any, else why no site offered."""
    closest = auction.closest(int(time.time()))
    if closest:
        shown = "; ".join(_closest_text(shortfall) for shortfall in closest)
        message = f"no offer meets the constraints; the closest: {shown}"
        code = EXIT_REFUSED
    else:
        reasons = sorted({f"{n.site}: {n.reason}" for n in auction.no_bids})
        message = "no site offered anything" + (f" ({'; '.join(reasons)})" if reasons else "")
        answered = any(n.answered for n in auction.no_bids)
        code = EXIT_REFUSED if answered else EXIT_UNAVAILABLE
    journal.set_auction(auction_id, AuctionState.FAILED, message)
    return _report(args, journal, auction_id, auction, code, closest)


def _closest_text(shortfall: Shortfall) -> str:
    bid = shortfall.bid
    return (
        f"part {bid.part + 1} at {bid.site} ({bid.offer_id}, {local_time(bid.start)} to "
        f"{local_time(bid.end)}, {bid.total}): {', '.join(shortfall.problems)}"
    )


def _report(
    args: argparse.Namespace,
    journal: Journal,
    auction_id: str,
    auction: Auction,
    code: int,
    closest: Optional[List[Shortfall]] = None,
) -> int:
    record = journal.auction(auction_id)
    entries = journal.entries(auction_id)
    rounds = journal.rounds(auction_id)
    if args.json:
        console.print_json(
            {
                "auction": auction_id,
                "state": record.state.value,
                "message": record.message,
                "rounds": rounds,
                "confirmed": [e.to_json() for e in entries if e.state.value == "confirmed"],
                "entries": [e.to_json() for e in entries],
                "closest": [
                    {"bid": s.bid.offer_id, "site": s.bid.site, "problems": list(s.problems)}
                    for s in closest or []
                ],
            }
        )
    else:
        _print_rounds(rounds, len(auction.parts))
        _print_entries(entries)
    for entry in entries:
        if not entry.settled:
            console.error(
                f"{entry.site} may hold part {entry.part + 1} ({entry.state.value}: "
                f"{entry.message}); `siteagent-client recover` settles it once the site "
                "answers (a tentative reservation expires at its deadline there anyway)"
            )
    if code != 0:
        console.error(f"auction {auction_id}: {record.message}")
    elif not args.json:
        console.stdout.print(f"auction {auction_id}: {record.message}")
    return code


def _print_rounds(rounds: List[Dict[str, Any]], parts: int) -> None:
    rows = [
        {
            "round": summary["round"],
            "best": ", ".join(price or "-" for price in summary["best_price"]),
            "bids": summary["bids"],
            "sites": "; ".join(f"{site}: {said}" for site, said in summary["answers"].items()),
        }
        for summary in rounds
    ]
    best = "best price per part" if parts > 1 else "best price"
    console.print_table(
        rows, ["round", "best", "bids", "sites"], title="Rounds", headers={"best": best}
    )


def _print_entries(entries: List[JournalEntry]) -> None:
    if entries:
        console.print_table(
            [common.entry_row(entry) for entry in entries],
            common.ENTRY_COLUMNS,
            title="Accepts, confirms and cancels",
        )


@contextlib.contextmanager
def _progress(sites: int, rounds: int, quiet: bool) -> Iterator[Callable[[object], None]]:
    """A progress bar on stderr of the answers of every round."""
    with console.progress_bar(f"{rounds} rounds at {sites} sites", enabled=not quiet) as update:
        answers = 0

        def one_more(_result: object) -> None:
            nonlocal answers
            answers += 1
            update(answers / (sites * rounds))

        yield one_more
