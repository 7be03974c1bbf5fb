"""``siteagent offer`` and ``siteagent reservations ...``: the reservation lifecycle by hand.

For administrators (look at, and cancel, what the agent holds) and for tests (drive accept and
confirm from separate processes while ``siteagent serve`` runs). Every command works on a state
directory shared with ``siteagent serve``: the SQLite store and, for the replay backend, the
simulated cluster's state file, so all of them see the same reservations.

The lifecycle options (confirm timeout, name prefix, penalty factor) must be the same for
``serve`` and for the commands that accept reservations; the configuration file will make them
one setting.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import os
import re
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Dict, Optional

from siteagent import console
from siteagent.backends.swf import SwfReplayBackend
from siteagent.model import Offer, Request
from siteagent.pricing.quote import DEFAULT_PENALTY_FACTOR
from siteagent.reservations import DEFAULT_CONFIRM_TIMEOUT_S, ReservationManager
from siteagent.scheduling import plan
from siteagent.store import ReservationRecord, ReservationState, Store

#: Files in the state directory.
STORE_FILE = "siteagent.sqlite3"
REPLAY_STATE_FILE = "replay-state.json"

#: PLACEHOLDER pricing (``siteagent offer``) until ``siteagent.pricing`` replaces it: an offer's
#: window starts this long after now at the earliest, so that it has not begun by the time the
#: buyer accepts it, and the offer is valid that long.
OFFER_LEAD_S = 60
#: PLACEHOLDER flat price per core-hour (the thesis' default c = 1), no fee.
FLAT_PRICE = Decimal("1")

_DURATION_RE = re.compile(r"^(\d+)([smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def default_state_dir() -> str:
    """systemd's ``$STATE_DIRECTORY``, else ``$XDG_DATA_HOME/siteagent`` (~/.local/share)."""
    systemd = os.environ.get("STATE_DIRECTORY", "")
    if systemd:
        return systemd.split(":")[0]
    data_home = os.environ.get("XDG_DATA_HOME", "") or os.path.expanduser("~/.local/share")
    return os.path.join(data_home, "siteagent")


# --------------------------------------------------------------------------- options


def add_state_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        default=default_state_dir(),
        metavar="DIR",
        help="where the agent keeps its database and the simulated cluster's state, shared "
        "by `serve` and the reservation commands (default: %(default)s)",
    )


def add_lifecycle_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--confirm-timeout",
        type=float,
        default=DEFAULT_CONFIRM_TIMEOUT_S,
        metavar="SECONDS",
        help="how long a tentative reservation waits for its confirm (default %(default)g)",
    )
    parser.add_argument(
        "--name-prefix",
        default="sa-",
        help="prefix of the reservations this agent owns in the batch system; anything "
        "without it is never touched (default %(default)s)",
    )
    parser.add_argument(
        "--penalty-factor",
        type=_decimal,
        default=DEFAULT_PENALTY_FACTOR,
        metavar="P",
        help="cancelling a confirmed reservation costs P x its fee (default %(default)s)",
    )


@dataclass
class Site:
    """The pieces every lifecycle command needs, opened on one state directory."""

    store: Store
    backend: SwfReplayBackend
    manager: ReservationManager

    def close(self) -> None:
        self.store.close()
        self.backend.close()


def open_site(
    args: argparse.Namespace,
    trace: Optional[str] = None,
    speed: Optional[float] = None,
    offset_s: Optional[int] = None,
) -> Site:
    """Store, replay backend and manager on ``args.state_dir`` with the lifecycle options."""
    store = open_store(args)
    backend = open_backend(args, trace, speed, offset_s)
    manager = ReservationManager(
        store,
        backend,
        clock=backend.now,
        confirm_timeout=args.confirm_timeout,
        name_prefix=args.name_prefix,
        penalty_factor=args.penalty_factor,
    )
    return Site(store, backend, manager)


def open_store(args: argparse.Namespace) -> Store:
    return Store(os.path.join(args.state_dir, STORE_FILE))


def open_backend(
    args: argparse.Namespace,
    trace: Optional[str] = None,
    speed: Optional[float] = None,
    offset_s: Optional[int] = None,
) -> SwfReplayBackend:
    """The simulated cluster of the state directory (a new one there if it has none)."""
    return SwfReplayBackend.open(
        os.path.join(args.state_dir, REPLAY_STATE_FILE), trace, speed, offset_s
    )


# --------------------------------------------------------------------------- parsers


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``offer`` and ``reservations`` on the ``siteagent`` parser."""
    _add_offer(commands)
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
    shower = _action(actions, "show", "one reservation and its history", _show)
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
    add_lifecycle_options(accepter)

    for name, what, command in (
        ("confirm", "confirm a tentative reservation before its deadline", _confirm),
        ("cancel", "cancel a reservation (says the penalty)", _cancel),
    ):
        parser = _action(actions, name, what, command)
        parser.add_argument("id", help="reservation id")
        _client_options(parser)
        add_lifecycle_options(parser)


def _add_offer(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "offer",
        help="record an offer at the earliest feasible start (placeholder flat price)",
        description=(
            "Record an offer for CORES during DURATION at the earliest start from which no "
            "running job and no reservation is in the way, at a flat price per core-hour and "
            "no fee. A placeholder for tests and administrators until the pricing module "
            "quotes real offers."
        ),
    )
    sub.add_argument("--cores", type=int, required=True, help="cores (capacity units) to reserve")
    sub.add_argument(
        "--duration", type=_duration, required=True, help="seconds, or with s/m/h/d: 90m, 2h"
    )
    sub.add_argument(
        "--start",
        help="earliest start: epoch seconds, ISO date-time (local time unless it says), or "
        f"+DURATION from now (default +{OFFER_LEAD_S}s)",
    )
    sub.add_argument(
        "--valid",
        type=_duration,
        default=OFFER_LEAD_S,
        help="how long the offer may be accepted (default %(default)s s)",
    )
    sub.add_argument("--price", type=_decimal, default=FLAT_PRICE, help="per core-hour")
    sub.add_argument("--json", action="store_true", help="print one JSON object")
    add_state_dir(sub)
    sub.set_defaults(command=_offer)


def _action(
    actions: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    what: str,
    command: Callable[[argparse.Namespace], int],
) -> argparse.ArgumentParser:
    parser = actions.add_parser(name, help=what, description=what[0].upper() + what[1:] + ".")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_state_dir(parser)
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


def _offer(args: argparse.Namespace) -> int:
    """PLACEHOLDER offer creation, replaced by ``siteagent.pricing``: earliest feasible start
    (running work and reservations only: queued jobs are planned around a reservation), flat
    unit price, no fee."""
    if args.cores <= 0 or args.duration <= 0:
        raise ValueError("--cores and --duration must be positive")
    store, backend = open_store(args), open_backend(args)
    try:
        snapshot = backend.snapshot()
        earliest = _epoch(args.start or f"+{OFFER_LEAD_S}", snapshot.now)
        free = plan(dataclasses.replace(snapshot, pending=())).profile
        start = free.earliest_fit(args.cores, args.duration, max(earliest, snapshot.now))
        if start is None:
            raise ValueError(
                f"{args.cores} cores never fit: the cluster has {snapshot.capacity} usable"
            )
        offer = Offer(
            id=uuid.uuid4().hex[:16],
            request=Request(cores=args.cores, duration=args.duration, earliest=earliest),
            start=start,
            duration=args.duration,
            size=args.cores,
            unit_price=args.price,
            fee=Decimal("0"),
            expires=snapshot.now + args.valid,
        )
        ReservationManager(store, backend, clock=backend.now).record_offer(offer)
    finally:
        store.close()
        backend.close()
    row = {
        "id": offer.id,
        "start": offer.start,
        "end": offer.end,
        "cores": offer.size,
        "unit_price": str(offer.unit_price),
        "fee": str(offer.fee),
        "total": str(offer.total),
        "expires": offer.expires,
    }
    if args.json:
        console.print_json({"offer": row})
    else:
        console.print_pairs(
            [(k, _local(v) if k in ("start", "end", "expires") else v) for k, v in row.items()],
            title="Offer (placeholder flat price)",
        )
    return 0


def _list(args: argparse.Namespace) -> int:
    store = open_store(args)
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
    store = open_store(args)
    try:
        record = store.get_reservation(args.id)
        history = store.history(args.id)
    finally:
        store.close()
    if record is None:
        raise ValueError(f"no reservation {args.id!r} in {args.state_dir}")
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
        console.print_json({"reservation": record.to_dict(), "history": steps})
        return 0
    _print_record(record, f"Reservation {record.id}")
    console.print_table(
        [{**step, "at": _local(step["at"])} for step in steps],
        ["at", "actor", "from", "to", "reason"],
        title="History",
    )
    return 0


def _accept(args: argparse.Namespace) -> int:
    site = open_site(args)
    try:
        record = site.manager.accept(
            args.offer_id, args.client, args.key or uuid.uuid4().hex, args.user, args.account
        )
    finally:
        site.close()
    return _answer(record, args.json, "Accepted: tentative until its confirm deadline")


def _confirm(args: argparse.Namespace) -> int:
    site = open_site(args)
    try:
        record = site.manager.confirm(args.id, args.client, args.key or uuid.uuid4().hex)
    finally:
        site.close()
    return _answer(record, args.json, "Confirmed")


def _cancel(args: argparse.Namespace) -> int:
    site = open_site(args)
    try:
        record = site.manager.cancel(args.id, args.client, args.key or uuid.uuid4().hex)
    finally:
        site.close()
    return _answer(record, args.json, f"Cancelled, penalty {record.penalty}")


# --------------------------------------------------------------------------- output


def _answer(record: ReservationRecord, as_json: bool, title: str) -> int:
    if as_json:
        console.print_json({"reservation": record.to_dict()})
    else:
        _print_record(record, title)
    return 0


def _print_record(record: ReservationRecord, title: str) -> None:
    data = record.to_dict()
    for key in ("start", "end", "deadline", "created", "updated"):
        data[key] = _local(data[key])
    console.print_pairs(list(data.items()), title=title)


def _row(record: ReservationRecord) -> Dict[str, Any]:
    return {
        "id": record.id,
        "name": record.name,
        "state": record.state.value,
        "client": record.client,
        "size": f"{record.size} {record.unit.value}s",
        "start": _local(record.start),
        "end": _local(record.end),
        "deadline": _local(record.deadline),
        "total": str(record.total),
        "penalty": None if record.penalty is None else str(record.penalty),
    }


def _local(epoch: Any) -> Optional[str]:
    if not isinstance(epoch, (int, float)):
        return None
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


# --------------------------------------------------------------------------- argument types


def _duration(text: str) -> int:
    """Seconds from ``90``, ``90s``, ``15m``, ``2h``, ``1d``."""
    match = _DURATION_RE.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: give seconds, or a number with s, m, h or d (90m)"
        )
    return int(match.group(1)) * _UNIT_S[match.group(2)]


def _decimal(text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if not value.is_finite() or value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _epoch(text: str, now: int) -> int:
    """A time: ``+DURATION`` from ``now``, epoch seconds, or an ISO 8601 date-time."""
    text = text.strip()
    if text.startswith("+"):
        return now + _duration(text[1:])
    if text.isdigit():
        return int(text)
    try:
        return int(datetime.fromisoformat(text).timestamp())
    except ValueError:
        raise ValueError(
            f"invalid time {text!r}: give +DURATION (+10m), epoch seconds, or an ISO date-time "
            "(2026-11-22T10:00)"
        ) from None
