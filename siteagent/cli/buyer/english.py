"""``siteagent-client english-auction JOBS``: each job of a jobs file auctioned at every site
(the sites bid with their free capacity, the highest bid wins), the winner reserved through the
two-phase commit, the other bids released; every job's auction from its arrival, none waiting
behind another's.

Exits 0 when every job was placed; 3 when some job was not (no site bid, or none could be
reserved; the table says why); 75 when no site answered; 130 when interrupted (Ctrl-C: no new
auction opens, the requests in flight get their answers, what is held is released).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Dict, List

from siteagent.cli import console
from siteagent.cli.buyer import common
from siteagent.cli.buyer.common import interruptible
from siteagent.cli.console import EXIT_INTERRUPTED, EXIT_REFUSED, EXIT_UNAVAILABLE
from siteagent.cli.exits import BadInput
from siteagent.cli.options import duration, local_time
from siteagent.client.auctioneer import Auctioneer, JobAuction, SitePool
from siteagent.client.english import DEFAULT_K, DEFAULT_ROUNDS, auction_length
from siteagent.client.jobs import load_jobs, mean_walltime

#: The columns of a job's row.
COLUMNS = ["job", "priority", "cores", "state", "site", "value", "bids", "raises", "start", "note"]


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    english = commands.add_parser(
        "english-auction",
        help="auction each job of a file at every site (sites bid for jobs), reserve the winner",
        description=(
            "For each job of JOBS (a YAML or JSON file: jobs with cores, walltime, priority, "
            "input_bytes, input_site, submit; see docs/client.md), from its arrival: announce it "
            "to every site, which bids with its free capacity (the value of the cores it "
            "offers by how soon they are free, less the cost of pushing its queue back and "
            "the input's transfer time) and holds that capacity; ask again in --rounds "
            "rounds over the auction's length, k x the mean run time, naming the standing "
            "bid; then reserve the highest bid (accept and confirm, signed and journaled; the "
            "next bid if the site refuses) and release the others. Jobs' auctions run at "
            "once, each from its arrival: none waits behind another. Exits 0 when every job "
            "was placed, 3 when some was not, 75 when no site answered, 130 when interrupted."
        ),
    )
    english.add_argument("jobs", type=Path, metavar="JOBS", help="the jobs file (YAML or JSON)")
    english.add_argument(
        "-k",
        type=float,
        default=DEFAULT_K,
        metavar="K",
        help=f"the auction lasts K x the mean run time ({DEFAULT_K}; the paper finds 0.3-0.4 best)",
    )
    english.add_argument(
        "--mean-run-time",
        type=duration,
        metavar="D",
        help="the jobs' mean run time (default: the mean of their walltimes)",
    )
    english.add_argument(
        "--rounds",
        type=int,
        default=DEFAULT_ROUNDS,
        metavar="N",
        help=f"rounds per auction, at least a second apart ({DEFAULT_ROUNDS})",
    )
    english.add_argument(
        "--start-price",
        type=_value,
        metavar="V",
        help="a first bid must beat this value (core-hours; default: any bid)",
    )
    common.add_sites_options(english)
    common.add_journal_option(english)
    english.set_defaults(command=_english_auction)


def _value(text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: give a number") from None
    if not value.is_finite():
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: give a finite number")
    return value


def _english_auction(args: argparse.Namespace) -> int:
    if args.k < 0 or args.rounds < 1:
        raise BadInput("-k must be at least 0 and --rounds at least 1")
    jobs = load_jobs(args.jobs)
    mean = args.mean_run_time if args.mean_run_time is not None else mean_walltime(jobs)
    length = auction_length(args.k, mean)
    sites = common.registry(args).select(args.site)
    journal = common.open_journal(args)
    for site in sites:
        site.signing_key()  # a missing or unsafe key is the buyer's to fix: say so now
    done: List[JobAuction] = []
    with (
        interruptible() as interrupted,
        console.progress_bar(
            f"{len(jobs)} jobs at {len(sites)} sites", enabled=not args.json
        ) as update,
    ):

        def decided(placement: JobAuction) -> None:
            done.append(placement)
            update(len(done) / len(jobs))

        with (
            contextlib.closing(SitePool(sites)) as pool,
            Auctioneer(
                pool, journal, length, args.rounds, args.start_price, interrupted
            ) as auctioneer,
        ):
            placements = auctioneer.run(jobs, decided)
        stopped = interrupted()
    _report(args, placements, length, mean)
    if stopped:
        return EXIT_INTERRUPTED
    unplaced = [p for p in placements if p.state != "placed"]
    if not unplaced and len(placements) == len(jobs):
        return 0
    answered = any(placement.answered for placement in placements)
    return EXIT_REFUSED if answered else EXIT_UNAVAILABLE


def _report(
    args: argparse.Namespace, placements: List[JobAuction], length: float, mean: float
) -> None:
    placed = [p for p in placements if p.state == "placed"]
    shares = [p.participation for p in placements]
    figures: Dict[str, Any] = {
        "k": args.k,
        "mean_run_time_s": mean,
        "auction_length_s": length,
        "jobs": len(placements),
        "placed": len(placed),
        "participation": statistics.mean(shares) if shares else None,
    }
    if args.json:
        console.print_json({**figures, "auctions": [_json(p) for p in placements]})
        return
    console.print_table([_row(p) for p in placements], COLUMNS, title="Jobs")
    console.stdout.print(
        f"{len(placed)} of {len(placements)} jobs placed; auctions of {length:.1f} s "
        f"(k {args.k:g} x mean run time {mean:.0f} s); sites taking part "
        f"{(figures['participation'] or 0) * 100:.0f}% on average"
    )


def _row(placement: JobAuction) -> Dict[str, Any]:
    job = placement.job
    return {
        "job": job.name,
        "priority": job.job.priority,
        "cores": job.job.cores,
        "state": placement.state,
        "site": placement.site,
        "value": placement.value,
        "bids": f"{len(placement.bidders)}/{len(placement.asked)}",
        "raises": len(placement.raises),
        "start": local_time(placement.start),
        "note": "" if placement.state == "placed" else placement.message,
    }


def _json(placement: JobAuction) -> Dict[str, Any]:
    return {
        "job": placement.job.name,
        "priority": placement.job.job.priority,
        "auction": placement.auction_id,
        "state": placement.state,
        "message": placement.message,
        "site": placement.site,
        "value": None if placement.value is None else str(placement.value),
        "reservation": placement.reservation_id,
        "start": placement.start,
        "end": placement.end,
        "asked": list(placement.asked),
        "bidders": list(placement.bidders),
        "raises": [
            {"site": r.site, "value": str(r.value), "round": r.round} for r in placement.raises
        ],
        "rounds": placement.rounds,
        "length_s": placement.length_s,
        "overhead_s": placement.overhead_s,
    }
