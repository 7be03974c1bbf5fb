"""``siteagent reservations ...``: the reservation lifecycle by hand.

For administrators (look at, and cancel, what the agent holds) and for tests (drive accept and
confirm from separate processes while ``siteagent serve`` runs). Every command opens the site
of ``--config`` and ``--state-dir`` (:mod:`siteagent.cli.options`,
:func:`siteagent.market.site.open_site`),
the same SQLite store and batch system as ``siteagent serve``, so all of them see the same
reservations. Offers to accept come from ``siteagent quote``.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Tuple

from siteagent.cli import console, options
from siteagent.cli.exits import BadInput, as_bad_input
from siteagent.core.usage import Usage
from siteagent.market.deals import Deal, Deals, open_deals
from siteagent.market.lifecycle import ReservationRecord, ReservationState
from siteagent.market.site import STORE_FILE, open_site
from siteagent.market.store import Store
from siteagent.market.usage import reservation_usage
from siteagent.protocol.documents import confirm_body
from siteagent.protocol.keys import load_private_key, public_key_text
from siteagent.security.clients import AuthorizedClient, read_authorized_clients


def _open_store(args: argparse.Namespace) -> Store:
    """Only the site's database: listing and showing need no batch system."""
    return Store(str(options.load_config(args).state_dir / STORE_FILE))


# --------------------------------------------------------------------------- parsers


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``reservations`` on the ``siteagent`` parser."""
    sub = commands.add_parser(
        "reservations",
        help="list, show, accept, confirm and cancel the agent's reservations",
        description=(
            "The agent's reservations, from its state directory. `accept` and `confirm` drive "
            "the lifecycle by hand (tests, administrators); the API does it for clients."
        ),
    )
    actions = sub.add_subparsers(title="actions", metavar="ACTION", required=True)

    lister = _action(actions, "list", "every reservation, newest last", _list)
    lister.add_argument(
        "--state",
        action="append",
        choices=[state.value for state in ReservationState],
        help="only reservations in this state (repeatable)",
    )
    shower = _action(
        actions, "show", "one reservation, its history and the jobs that ran in it", _show
    )
    shower.add_argument("id", help="reservation id")

    accepter = _action(
        actions, "accept", "accept an offer: a verified tentative reservation", _accept
    )
    accepter.add_argument("offer_id", metavar="OFFER_ID")
    accepter.add_argument(
        "--user", action="append", default=[], help="scheduler user the reservation is for"
    )
    accepter.add_argument(
        "--account", action="append", default=[], help="scheduler account it is for"
    )
    _client_options(accepter)
    options.add_lifecycle_options(accepter)

    confirmer = _action(
        actions,
        "confirm",
        "confirm a tentative reservation before its deadline: the buyer signs the deal, the "
        "site countersigns it into a receipt and books it in the ledger, as the API does",
        _confirm,
    )
    confirmer.add_argument(
        "--signing-key",
        type=Path,
        required=True,
        metavar="FILE",
        help="the buyer's Ed25519 private key (PEM, the client.key `siteagent keys` writes); "
        "--client must be its key id in the authorized-clients file",
    )
    canceller = _action(actions, "cancel", "cancel a reservation (says the penalty)", _cancel)
    for parser in (confirmer, canceller):
        parser.add_argument("id", help="reservation id")
        _client_options(parser)
        options.add_lifecycle_options(parser)


def _action(
    actions: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    what: str,
    command: Callable[[argparse.Namespace], int],
) -> argparse.ArgumentParser:
    parser = actions.add_parser(name, help=what, description=what[0].upper() + what[1:] + ".")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options.add_site_options(parser)
    parser.set_defaults(command=command)
    return parser


def _client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--client",
        default=getpass.getuser(),
        help="who is asking; only a reservation's owner may confirm or cancel it "
        "(default: your user name, %(default)s)",
    )
    parser.add_argument(
        "--key",
        help="idempotency key: send the same key again to retry this very request without "
        "repeating its effect (default: a new random key)",
    )


# --------------------------------------------------------------------------- commands


def _list(args: argparse.Namespace) -> int:
    store = _open_store(args)
    try:
        states = None if not args.state else [ReservationState(s) for s in args.state]
        records = store.reservations(states)
    finally:
        store.close()
    if args.json:
        console.print_json({"reservations": [record.to_dict() for record in records]})
        return 0
    console.print_table(
        [_row(record) for record in records],
        ["id", "name", "state", "client", "size", "start", "end", "deadline", "total", "penalty"],
        title=f"Reservations ({len(records)})",
    )
    return 0


def _show(args: argparse.Namespace) -> int:
    store = _open_store(args)
    try:
        record = store.get_reservation(args.id)
        history = store.history(args.id)
        usage = None if record is None else reservation_usage(store, record, int(time.time()))
    finally:
        store.close()
    if record is None or usage is None:
        raise BadInput(f"no reservation {args.id!r} in this site's database")
    steps = [
        {
            "at": step.at,
            "actor": step.actor,
            "from": None if step.from_state is None else step.from_state.value,
            "to": step.to_state.value,
            "reason": step.reason,
        }
        for step in history
    ]
    if args.json:
        console.print_json(
            {"reservation": record.to_dict(), "history": steps, "usage": usage.to_json()}
        )
        return 0
    _print_record(record, f"Reservation {record.id}")
    console.print_table(
        [{**step, "at": options.local_time(step["at"])} for step in steps],
        ["at", "actor", "from", "to", "reason"],
        title="History",
    )
    _print_usage(usage)
    return 0


def _accept(args: argparse.Namespace) -> int:
    with _deals(args) as (deals, _):
        key = args.key or uuid.uuid4().hex
        deal = deals.accept(args.offer_id, args.client, key, args.user, args.account)
    return _answer(deal, args.json, "Accepted: tentative until its confirm deadline")


def _confirm(args: argparse.Namespace) -> int:
    with _deals(args) as (deals, clients):
        client = clients.get(args.client)
        if client is None:
            raise BadInput(
                f"--client {args.client!r} is not in the authorized-clients file: a confirm "
                "is checked against the buyer's key registered there"
            )
        with as_bad_input(OSError, ValueError):
            signing_key = load_private_key(args.signing_key)
        if public_key_text(signing_key.public_key()) != public_key_text(client.public_key):
            raise BadInput(
                f"--signing-key {args.signing_key} is not the key of {client.key_id} in the "
                "authorized-clients file"
            )
        body = confirm_body(deals.show(args.id).deal, signing_key, client.key_id)
        deal = deals.confirm(args.id, body, client, args.key or uuid.uuid4().hex)
    return _answer(deal, args.json, "Confirmed: receipt countersigned and booked")


def _cancel(args: argparse.Namespace) -> int:
    with _deals(args) as (deals, _):
        deal = deals.cancel(args.id, args.client, args.key or uuid.uuid4().hex)
    return _answer(deal, args.json, f"Cancelled, penalty {deal.record.penalty}")


@contextlib.contextmanager
def _deals(args: argparse.Namespace) -> Iterator[Tuple[Deals, Dict[str, AuthorizedClient]]]:
    """The site's deals (its store, batch system, signing key and bank), as ``serve`` opens
    them, and its authorized clients; closed afterwards."""
    site = open_site(options.load_config(args))
    try:
        clients = read_authorized_clients(site.config.security.authorized_clients)
        deals = open_deals(site.config, site.manager, clients.values())
        try:
            yield deals, clients
        finally:
            deals.close()
    finally:
        site.close()


# --------------------------------------------------------------------------- output


def _answer(deal: Deal, as_json: bool, title: str) -> int:
    """The reservation as the API answers it: under ``reservation`` with ``--json``."""
    if as_json:
        console.print_json({"reservation": deal.to_json()})
    else:
        _print_record(deal.record, title)
    return 0


def _print_usage(usage: Usage) -> None:
    """The jobs that ran in a reservation, and what they used of it."""
    console.print_table(
        [
            {
                "job": job.job_id,
                "user": job.user,
                "cores": job.cores,
                "nodes": job.nodes,
                "start": options.local_time(job.start),
                "end": "running" if job.end is None else options.local_time(job.end),
            }
            for job in usage.jobs
        ],
        ["job", "user", "cores", "nodes", "start", "end"],
        title=f"Jobs ({len(usage.jobs)})",
    )
    unit = usage.unit.value
    console.print_pairs(
        [
            ("core-hours used", f"{usage.core_hours:.2f}"),
            (
                f"{unit}-hours used of sold",
                f"{usage.used_unit_seconds / 3600:.2f} of {usage.sold_unit_seconds / 3600:.2f}",
            ),
            ("utilization", f"{usage.utilization:.1%}"),
            ("figures", f"{'final' if usage.final else 'so far'}, from {usage.source.value}"),
        ],
        title="Usage",
    )


def _print_record(record: ReservationRecord, title: str) -> None:
    data = record.to_dict()
    for key in ("start", "end", "deadline", "created", "updated"):
        data[key] = options.local_time(data[key])
    console.print_pairs(list(data.items()), title=title)


def _row(record: ReservationRecord) -> Dict[str, Any]:
    return {
        "id": record.id,
        "name": record.name,
        "state": record.state.value,
        "client": record.client,
        "size": f"{record.size} {record.unit.value}s",
        "start": options.local_time(record.start),
        "end": options.local_time(record.end),
        "deadline": options.local_time(record.deadline),
        "total": str(record.total),
        "penalty": None if record.penalty is None else str(record.penalty),
    }
