"""``siteagent ledger ...``: the bank's commands.

``serve`` runs the ledger as its own HTTPS service for a federation of agents (ledger_service.py);
``balance``, ``statement`` and ``deposit`` work on the ledger database of the configuration
(``ledger.path``: an agent's embedded ledger, or the service's, which they may share while it
runs: every operation is one SQLite transaction). ``deposit`` is how an administrator funds a
buyer's account in the virtual currency.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from typing import Any, Callable, Dict

from siteagent.cli import console, options
from siteagent.config.schema import Config
from siteagent.ledger.bank import BANK, Ledger, LedgerError

#: Exit code of a refused ledger operation (unknown account) or a service that cannot start.


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ledger = commands.add_parser(
        "ledger",
        help="the bank: serve it for a federation, balances, statements, deposits",
        description=(
            "The double-entry ledger of confirmed deals (virtual currency). Every agent has "
            "one embedded (ledger.path); `ledger serve` runs one as an HTTPS service that the "
            "agents of a federation book at (their ledger.url)."
        ),
    )
    verbs = ledger.add_subparsers(title="commands", metavar="COMMAND", required=True)
    _add_serve(verbs)
    for verb, summary, command in (
        ("balance", "an account's balance", _balance),
        ("statement", "an account's movements with the running balance", _statement),
    ):
        sub = verbs.add_parser(verb, help=summary, description=f"Print {summary}.")
        sub.add_argument("account", metavar="ACCOUNT", help=f"a site, a client's key id, or {BANK}")
        sub.add_argument("--json", action="store_true", help="print one JSON object")
        options.add_site_options(sub)
        sub.set_defaults(command=command)
    _add_deposit(verbs)


def _add_serve(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = verbs.add_parser(
        "serve",
        help="run the ledger as an HTTPS service for a federation",
        description=(
            "Serve the ledger at ledger.path over HTTPS (the api.tls certificate; a "
            "self-signed one for localhost by default) on ledger.listen:ledger.port. Accounts "
            "are opened for the sites and clients of the ledger.participants file (sites: "
            "{NAME: {public_key}}, clients: the authorized-clients format). Agents book there "
            "when their ledger.url names it."
        ),
    )
    sub.add_argument("--listen", metavar="ADDRESS", help="(default: ledger.listen, 127.0.0.1)")
    sub.add_argument("--port", type=int, metavar="N", help="(default: ledger.port, 8444)")
    options.add_site_options(sub)
    sub.set_defaults(command=_serve)


def _add_deposit(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = verbs.add_parser(
        "deposit",
        help="credit an account from the bank (fund a buyer)",
        description=(
            "Credit ACCOUNT with AMOUNT of the virtual currency, issued by the bank account. "
            "The account must exist: opened by an agent for its authorized clients, or from "
            "ledger.participants (registered now if the configuration names the file)."
        ),
    )
    sub.add_argument("account", metavar="ACCOUNT", help="a client's key id (or a site)")
    sub.add_argument("amount", metavar="AMOUNT", type=options.amount, help="e.g. 100.00")
    sub.add_argument("--memo", default="deposit", help="what the statement says (default: deposit)")
    sub.add_argument("--json", action="store_true", help="print the transaction as JSON")
    options.add_site_options(sub)
    sub.set_defaults(command=_deposit)


# --------------------------------------------------------------------------- commands


def _serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # imported here: the web stack takes a while to load and only `serve` needs it
    from siteagent.ledger.service import serve
    from siteagent.serving.server import ServiceError

    loaded = options.load_config(args)
    try:
        ledger = options.with_listener(loaded.ledger, args.listen, args.port)
        serve(dataclasses.replace(loaded, ledger=ledger))
    except (ServiceError, LedgerError) as exc:
        console.error(str(exc))
        return console.EXIT_BAD_INPUT
    return 0


def _balance(args: argparse.Namespace) -> int:
    def show(ledger: Ledger, _: Config) -> None:
        balance = ledger.balance(args.account)
        if args.json:
            console.print_json({"account": args.account, "balance": str(balance)})
        else:
            console.stdout.print(f"{args.account}: {balance}")

    return _with_ledger(args, show)


def _statement(args: argparse.Namespace) -> int:
    def show(ledger: Ledger, _: Config) -> None:
        lines = [line.to_json() for line in ledger.statement(args.account)]
        balance = lines[-1]["balance"] if lines else "0.00"
        if args.json:
            console.print_json({"account": args.account, "balance": balance, "lines": lines})
            return
        rows = [{**line, "at": options.local_time(line["at"])} for line in lines]
        title = f"{args.account}: balance {balance}, {len(lines)} movement(s)"
        columns = ["transaction_id", "at", "kind", "amount", "balance", "receipt_id", "memo"]
        headers = {"transaction_id": "#", "receipt_id": "receipt"}
        console.print_table(rows, columns, title, headers=headers)

    return _with_ledger(args, show)


def _deposit(args: argparse.Namespace) -> int:
    def credit(ledger: Ledger, loaded: Config) -> None:
        if loaded.ledger.participants is not None:
            from siteagent.ledger.participants import load_participants, register_all

            register_all(ledger, load_participants(loaded.ledger.participants))
        booked: Dict[str, Any] = ledger.deposit(args.account, args.amount, args.memo).to_json()
        if args.json:
            console.print_json(booked)
        else:
            console.stdout.print(
                f"deposited {args.amount} to {args.account}; balance {ledger.balance(args.account)}"
            )

    return _with_ledger(args, credit)


def _with_ledger(args: argparse.Namespace, use: Callable[[Ledger, Config], None]) -> int:
    """Run ``use`` on the configuration's ledger database; a refusal is one line on stderr."""
    loaded = options.load_config(args)
    if loaded.ledger.url is not None:
        raise ValueError(
            f"this configuration books at the ledger service {loaded.ledger.url} (ledger.url); "
            "run the command on the ledger's host, with the service's configuration"
        )
    ledger = Ledger(loaded.ledger.path)
    try:
        use(ledger, loaded)
    except LedgerError as exc:
        console.error(str(exc))
        return console.EXIT_BAD_INPUT
    finally:
        ledger.close()
    return 0
