"""``siteagent-client recover`` and ``siteagent-client reservations``: the buyer's
reservations across sites, from the journal.

``recover`` finishes or undoes every auction a crash or a second Ctrl-C interrupted:
tentative reservations are cancelled, answers that were lost are asked for again, confirmed
parts are kept and listed. ``reservations list`` shows what the journal holds (offline);
``show`` asks the reservation's site and records what it says; ``cancel`` cancels it (a
confirmed one at its penalty). A reservation is named by its id, or ``SITE:ID`` when ids of
two sites collide.
"""

from __future__ import annotations

import argparse
from typing import Any, Dict, List, Optional

from siteagent.cli import console
from siteagent.cli.buyer import common
from siteagent.cli.console import EXIT_REFUSED, EXIT_UNAVAILABLE
from siteagent.cli.exits import BadInput
from siteagent.cli.options import local_time
from siteagent.client.journal import RELEASED, HoldState, Journal, JournalEntry, default_path
from siteagent.client.recovery import Patient, observe, recover, settle
from siteagent.client.sites import Registry, Site


def existing_journal(args: argparse.Namespace) -> Optional[Journal]:
    """The journal a command only reads and settles: None if the default one was never made
    (nothing was bought yet); a ``--journal`` that does not exist is a mistake (a typo must
    not become an empty journal saying all is well)."""
    path = args.journal or default_path()
    if path.exists():
        return Journal(path)
    if args.journal is not None:
        raise BadInput(
            f"{path}: no such journal; give the file auction, provision and select wrote "
            f"(the default is {default_path()})"
        )
    return None


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    recover_command = commands.add_parser(
        "recover",
        help="finish or undo interrupted auctions from the journal",
        description=(
            "For every auction no running process holds: ask each site what it holds of the "
            "journal's unsettled steps (an accept or confirm without its answer is asked "
            "again, with its idempotency key), cancel every tentative reservation, and list "
            "the confirmed ones, which are kept (cancel them with `reservations cancel`, at "
            "their penalty). Exits 0 when nothing is left unsettled, 75 when a site did not "
            "answer (run it again later; a tentative reservation there expires at its "
            "deadline anyway)."
        ),
    )
    common.add_sites_options(recover_command, choose=False)
    common.add_journal_option(recover_command)
    recover_command.set_defaults(command=_recover)

    reservations = commands.add_parser(
        "reservations",
        help="the reservations of your auctions, across sites, from the journal",
        description="List, show or cancel the reservations the journal knows, at any site.",
    )
    actions = reservations.add_subparsers(title="actions", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list",
        help="what the journal holds (tentative, confirmed and unsettled; --all: everything)",
    )
    listing.add_argument("--all", action="store_true", help="released and refused ones too")
    listing.set_defaults(command=_list)
    show = actions.add_parser("show", help="ask the reservation's site and record its answer")
    show.add_argument("reservation", metavar="[SITE:]ID")
    show.set_defaults(command=_show)
    cancel = actions.add_parser("cancel", help="cancel it (a confirmed one at its penalty)")
    cancel.add_argument("reservation", metavar="[SITE:]ID")
    cancel.set_defaults(command=_cancel)
    for action in (listing, show, cancel):
        common.add_sites_options(action, choose=False)
        common.add_journal_option(action)


# --------------------------------------------------------------------------- recover


def _recover(args: argparse.Namespace) -> int:
    journal = existing_journal(args)
    if journal is None:
        return _nothing_yet(args, {"settled": [], "confirmed": [], "unsettled": [], "running": []})
    registry = common.registry(args)
    sites = {entry.site for entry in journal.unsettled()}
    with common.connected([s for s in registry.sites if s.name in sites]) as connections:
        sellers = {connection.site.name: Patient(connection) for connection in connections}
        touched, running = recover(journal, sellers)
    # an entry recover tried but whose site did not answer is still unsettled: not "settled"
    settled = [entry for entry in touched if entry.settled]
    left = [entry for entry in journal.unsettled() if entry.auction_id not in running]
    confirmed = [
        entry
        for entry in journal.entries()
        if entry.state is HoldState.CONFIRMED
        and entry.auction_id in {e.auction_id for e in touched}
    ]
    if args.json:
        console.print_json(
            {
                "settled": [entry.to_json() for entry in settled],
                "confirmed": [entry.to_json() for entry in confirmed],
                "unsettled": [entry.to_json() for entry in left],
                "running": running,
            }
        )
    else:
        _print_recovery(settled, confirmed, left, running, registry)
    return EXIT_UNAVAILABLE if left else 0


def _print_recovery(
    settled: List[JournalEntry],
    confirmed: List[JournalEntry],
    left: List[JournalEntry],
    running: List[str],
    registry: Registry,
) -> None:
    if not settled and not left:
        console.stdout.print("Nothing to recover: every step of the journal is settled.")
    if settled:
        console.print_table(
            [common.entry_row(e) for e in settled], common.ENTRY_COLUMNS, title="Settled"
        )
    if confirmed:
        console.print_table(
            [common.entry_row(e) for e in confirmed],
            common.ENTRY_COLUMNS,
            title="Confirmed and kept (cancel with `siteagent-client reservations cancel`)",
        )
    known = {site.name for site in registry.sites}
    for entry in left:
        why = entry.message if entry.site in known else f"{entry.site} is not in the sites file"
        console.error(f"{_name(entry)} is still {entry.state.value}: {why}")
    for auction_id in running:
        console.stdout.print(f"auction {auction_id} is running in another process: left alone")


# --------------------------------------------------------------------------- reservations


def _list(args: argparse.Namespace) -> int:
    journal = existing_journal(args)
    if journal is None:
        return _nothing_yet(args, {"reservations": []})
    entries = [
        entry
        for entry in journal.entries()
        if args.all
        or (entry.state not in RELEASED and entry.reservation_id is not None)
        or entry.state is HoldState.ACCEPTING
    ]
    if args.json:
        console.print_json({"reservations": [entry.to_json() for entry in entries]})
    elif entries:
        console.print_table(
            [common.entry_row(e) for e in entries], ["auction", *common.ENTRY_COLUMNS]
        )
    else:
        console.stdout.print("The journal holds no reservation" + ("." if args.all else " now."))
    return 0


def _show(args: argparse.Namespace) -> int:
    journal = _journal_of(args)
    entry = _find(journal, args.reservation)
    with common.connected([_site(args, entry)]) as (connection,):
        view = connection.reservation(entry.reservation_id or "")
        entry = observe(entry, Patient(connection), journal)
    if args.json:
        console.print_json({"journal": entry.to_json(), "site": view.model_dump(mode="json")})
    else:
        console.print_pairs(
            [
                ("reservation", _name(entry)),
                ("at the site", view.state),
                ("batch system name", view.name),  # what jobs name to run in it
                ("in the journal", entry.state.value),
                ("start", local_time(view.start)),
                ("end", local_time(view.end)),
                ("size", f"{view.size} {view.unit}s"),
                ("price", view.total),
                ("confirm by", local_time(view.deadline) if view.state == "TENTATIVE" else None),
                ("receipt", view.receipt.id if view.receipt else None),
                ("penalty kept", view.penalty),
            ]
        )
    return 0


def _cancel(args: argparse.Namespace) -> int:
    journal = _journal_of(args)
    entry = _find(journal, args.reservation)
    with common.connected([_site(args, entry)]) as (connection,):
        entry = settle(entry, Patient(connection), journal, True, raise_refusals=True)
    if args.json:
        console.print_json({"reservation": entry.to_json()})
    if entry.state in RELEASED:
        if not args.json:
            note = f" ({entry.message})" if entry.message else ""
            console.stdout.print(f"{_name(entry)}: {entry.state.value}{note}")
        return 0
    console.error(f"{_name(entry)} is still {entry.state.value}: {entry.message}")
    return EXIT_REFUSED if entry.settled else EXIT_UNAVAILABLE  # refused, or no answer


def _nothing_yet(args: argparse.Namespace, empty: Dict[str, Any]) -> int:
    """What a reading command says before anything was ever journaled."""
    if args.json:
        console.print_json(empty)
    else:
        console.stdout.print(
            f"No journal yet at {default_path()}: nothing was bought with this account here "
            "(auction, provision, select and english-auction write it)."
        )
    return 0


def _journal_of(args: argparse.Namespace) -> Journal:
    """The journal a reservation is looked up in, which must exist."""
    journal = existing_journal(args)
    if journal is None:
        raise BadInput(
            f"no journal yet at {default_path()}: it knows no reservation {args.reservation}"
        )
    return journal


def _find(journal: Journal, name: str) -> JournalEntry:
    site, _, reservation_id = name.rpartition(":")
    found = journal.find(reservation_id, site or None)
    if len(found) == 1:
        return found[0]
    if not found:
        raise BadInput(f"the journal {journal.path} knows no reservation {name}")
    sites = ", ".join(sorted(f"{e.site}:{reservation_id}" for e in found))
    raise BadInput(f"{name} is at several sites: name one of {sites}")


def _site(args: argparse.Namespace, entry: JournalEntry) -> Site:
    (site,) = common.registry(args).select([entry.site])
    return site


def _name(entry: JournalEntry) -> str:
    return f"{entry.site}:{entry.reservation_id or entry.offer_id}"
