"""What the ``siteagent-client`` commands share: the sites file and its options, a connection
to every site chosen, a fan-out with a progress bar, Ctrl-C between requests, the journal,
and the options several commands declare (the request, price caps, --alpha, the network).

Every command takes ``--sites FILE`` (default ``$SITEAGENT_CLIENT_SITES``, else
``~/.config/siteagent/sites.yaml``) and ``--json``; those that ask sites take ``--site NAME``
(repeatable) to ask only some. A command that asks several sites succeeds when at least one
answered: the others are rows of the table, never a failure of the command.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from siteagent.cli import console, options
from siteagent.cli.exits import BadInput
from siteagent.cli.options import amount, duration, local_time, price, quote_request
from siteagent.client.batches import single_calls
from siteagent.client.connection import SiteConnection
from siteagent.client.journal import Journal, JournalEntry
from siteagent.client.journal import default_path as default_journal
from siteagent.client.sites import Registry, Site, default_path, load_registry
from siteagent.core.errors import SiteagentError
from siteagent.protocol.models import QuoteRequest


def add_sites_options(parser: argparse.ArgumentParser, choose: bool = True) -> None:
    """``--sites FILE`` and ``--json``; with ``choose``, ``--site NAME`` too."""
    parser.add_argument(
        "--sites",
        type=Path,
        metavar="FILE",
        help=f"the sites file (default: $SITEAGENT_CLIENT_SITES, else {default_path({})})",
    )
    if choose:
        parser.add_argument(
            "--site",
            action="append",
            default=[],
            metavar="NAME",
            help="ask only this site of the file (repeat for several; default: every site)",
        )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def registry(args: argparse.Namespace) -> Registry:
    return load_registry(args.sites)


def add_batches_option(parser: argparse.ArgumentParser) -> None:
    """``--no-batches``: one request per part even to sites that take batches."""
    parser.add_argument(
        "--no-batches",
        action="store_true",
        help="send one quote, accept and confirm per part even to sites that take batches "
        "(docs/batches.md); sites that do not are always sent single calls",
    )


@contextlib.contextmanager
def connected(sites: Sequence[Site], batches: bool = True) -> Iterator[List[SiteConnection]]:
    """A connection to each site, all closed afterwards; without ``batches``, each sent
    single calls only."""
    connections = [SiteConnection(site) for site in sites]
    if not batches:
        for connection in connections:
            single_calls(connection)
    try:
        yield connections
    finally:
        for connection in connections:
            connection.close()


@contextlib.contextmanager
def progress(what: str, count: int, quiet: bool) -> Iterator[Callable[[object], None]]:
    """A progress bar on stderr of sites answered out of ``count``; yields what a fan-out
    calls with each result."""
    with console.progress_bar(f"{what} {count} sites", enabled=not quiet) as update:
        answered = 0

        def one_more(_result: object) -> None:
            nonlocal answered
            answered += 1
            update(answered / count)

        yield one_more


class PlannersMissing(SiteagentError):
    """The planners' libraries (the ``client`` extra) are not installed: the other commands
    work without them, so they are imported only when a workflow or a bag is planned."""


def planners_missing(command: str, exc: ModuleNotFoundError) -> PlannersMissing:
    """What ``command`` says when it cannot import a planner's library."""
    return PlannersMissing(
        f"{command} needs the planners' libraries, and {exc.name} is not installed: "
        "pip install 'siteagent[client]'"
    )


def latency_ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


@contextlib.contextmanager
def interruptible() -> Iterator[Callable[[], bool]]:
    """Ctrl-C as a flag the auction checks between requests (so the journal stays exact and
    what is held is released); a second Ctrl-C stops at once."""
    pressed: List[bool] = []

    def on_interrupt(signum: int, frame: Optional[FrameType]) -> None:
        if pressed:
            raise KeyboardInterrupt
        pressed.append(True)
        console.error(
            "interrupted: finishing the request in flight, then releasing what is held "
            "(Ctrl-C again to stop now; `siteagent-client recover` finishes the job)"
        )

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield lambda: bool(pressed)
    finally:
        signal.signal(signal.SIGINT, previous)


#: Bytes per second between sites when not told: the thesis' 10 Gbps (ch. 4.9).
DEFAULT_BANDWIDTH = 1.25e9


def add_alpha_option(parser: Any, meaning: str) -> None:
    """``--alpha A`` (0.5): the cost-time trade-off, ``meaning`` saying which end is which
    for the command (``parser`` may be an argument group)."""
    parser.add_argument("--alpha", type=float, default=0.5, metavar="A", help=meaning)


def add_network_options(parser: argparse.ArgumentParser) -> None:
    """``--bandwidth`` and ``--latency`` between sites, for a task's inputs to arrive."""
    parser.add_argument(
        "--bandwidth",
        type=float,
        default=DEFAULT_BANDWIDTH,
        metavar="BYTES_PER_S",
        help=f"between sites, for a parent's output to reach a child ({DEFAULT_BANDWIDTH:g})",
    )
    parser.add_argument(
        "--latency", type=float, default=0.0, metavar="S", help="of a transfer between sites (0)"
    )


#: The columns of a journal entry in a table.
ENTRY_COLUMNS = ["part", "site", "reservation", "state", "start", "end", "cores", "price", "note"]


#: The command line's name of each field of the request for quotes.
OPTION_OF = {
    "walltime": "--duration",
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
    # --duration is the word for how long capacity is held (docs/design.md §2); --walltime,
    # the name first published, stays an alias with the same dest
    how_long = size.add_mutually_exclusive_group(required=True)
    how_long.add_argument(
        "--duration", type=duration, metavar="D", help="how long: seconds, or 90m, 2h, 1d"
    )
    how_long.add_argument(
        "--walltime",
        dest="duration",
        type=duration,
        metavar="D",
        help="the same as --duration (the name published first, kept as an alias)",
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
        add_alpha_option(terms, "0 earliest ... 1 cheapest (0.5)")
    terms.add_argument("--limit", type=int, metavar="N", help="at most N offers per site (20)")
    machine = parser.add_argument_group("machine (RFQL attributes a site must advertise)")
    machine.add_argument("--architecture")
    machine.add_argument("--os")
    machine.add_argument("--cpu-speed", type=int, metavar="MHZ")
    machine.add_argument("--memory-per-core", type=int, metavar="MB")
    machine.add_argument("--disk", type=int, metavar="GB")


def request_for_quotes(args: argparse.Namespace, now: int, ranking: bool = True) -> QuoteRequest:
    """The command line's request (the options :func:`add_request_options` added, with the
    same ``ranking``)."""
    if args.cores is None and args.nodes is None:
        raise BadInput("give the size: --cores N, or --nodes N (with --cores-per-node N)")
    fields: Dict[str, Any] = {
        "walltime": args.duration,
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


def add_journal_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--journal",
        type=Path,
        metavar="FILE",
        help=f"the client's journal (default: {default_journal()}, under $XDG_STATE_HOME)",
    )


def open_journal(args: argparse.Namespace) -> Journal:
    """The journal a command writes to (made if it does not exist yet)."""
    return Journal(args.journal or default_journal())


def entry_row(entry: JournalEntry) -> Dict[str, Any]:
    """A journal entry as a table row."""
    return {
        "auction": entry.auction_id,
        "part": entry.part + 1,
        "site": entry.site,
        "reservation": entry.reservation_id or f"(offer {entry.offer_id})",
        "state": entry.state.value,
        "start": local_time(entry.bid.start),
        "end": local_time(entry.bid.end),
        "cores": entry.bid.size,
        "price": str(entry.bid.total),
        "note": entry.message,
    }


def add_price_caps(parser: argparse.ArgumentParser) -> None:
    """``--max-price`` and ``--budget``, as ``auction`` has them."""
    parser.add_argument(
        "--max-price",
        type=price,
        metavar="P",
        help="most per core-hour of any task's reservation (sites offer nothing dearer)",
    )
    parser.add_argument(
        "--budget",
        type=amount,
        metavar="AMOUNT",
        help="most the reservations may cost together: a window that would pass it is not "
        "held (the task takes another, or the whole is released)",
    )
