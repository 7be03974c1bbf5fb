"""``siteagent ledger ...``: the bank's commands.

``serve`` runs the ledger as its own HTTPS service for a federation of agents (ledger_service.py);
``balance``, ``statement``, ``deposit`` and ``check`` work on the ledger database of the
configuration (``ledger.database`` if it names PostgreSQL, else the SQLite file ``ledger.path``:
an agent's embedded ledger, or the service's, which they may share while it runs: every
operation is one transaction). ``deposit`` is how an administrator funds a buyer's account in
the virtual currency; ``check`` verifies the books' invariants; ``migrate`` moves the books from
one database to another (SQLite to PostgreSQL). docs/ledger.md.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any, Callable, Dict

from siteagent.cli import console, options
from siteagent.cli.exits import BadInput, as_bad_input
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
    _add_check(verbs)
    _add_migrate(verbs)


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


def _add_check(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = verbs.add_parser(
        "check",
        help="verify the books: balances = sums of entries, transactions balanced",
        description=(
            "Check the ledger database's invariants in one transaction (safe while banks "
            "book): the schema version, every account's kept balance against the sum of its "
            "entries, every transaction's entries summing to zero, all balances summing to "
            "zero. Exits 1 if one fails. The database is the configuration's (ledger.database, "
            "else ledger.path) unless --database names one."
        ),
    )
    sub.add_argument(
        "--database",
        metavar="LOCATION",
        help="postgresql://... or sqlite:PATH (default: the configuration's)",
    )
    sub.add_argument("--json", action="store_true", help="print one JSON object")
    options.add_site_options(sub)
    sub.set_defaults(command=_check)


def _add_migrate(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = verbs.add_parser(
        "migrate",
        help="move the books to another database (SQLite to PostgreSQL)",
        description=(
            "Copy every account, receipt, transaction and entry from --from into the empty "
            "database --to, ids kept, in one transaction; then compare every account's balance "
            "and statement on both sides and check the target's books. Exits 1 unless all are "
            "equal. Stop the bank that writes --from first; both databases are brought to the "
            "current schema version. Example: siteagent ledger migrate --from "
            "sqlite:bank-state/ledger.sqlite3 --to postgresql://bank@db.example.org/bank"
        ),
    )
    sub.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="LOCATION",
        help="sqlite:PATH (or postgresql://...)",
    )
    sub.add_argument(
        "--to",
        dest="target",
        required=True,
        metavar="LOCATION",
        help="postgresql://... (or sqlite:PATH), an empty database",
    )
    sub.add_argument("--json", action="store_true", help="print one JSON object")
    sub.set_defaults(command=_migrate)


# --------------------------------------------------------------------------- commands


def _serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # imported here: the web stack takes a while to load and only `serve` needs it
    from siteagent.http.server import ServiceError
    from siteagent.ledger.service import serve

    loaded = options.load_config(args)
    try:
        ledger = options.with_listener(loaded.ledger, args.listen, args.port)
        serve(loaded.model_copy(update=dict(ledger=ledger)))
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


def _check(args: argparse.Namespace) -> int:
    from siteagent.ledger.audit import check

    location = args.database or options.load_config(args).ledger.location
    ledger = _open(location)
    try:
        audit = check(ledger.database)
    finally:
        ledger.close()
    if args.json:
        console.print_json(audit.to_json())
    else:
        title = (
            f"{audit.database}: schema {audit.schema_version}, {audit.accounts} account(s), "
            f"{audit.transactions} transaction(s), {audit.entries} entries"
        )
        rows = [finding.to_json() for finding in audit.findings]
        console.print_table(rows, ["check", "ok", "detail"], title)
    return 0 if audit.ok else console.EXIT_BAD_INPUT


def _migrate(args: argparse.Namespace) -> int:
    from siteagent.ledger.migration import migrate_books

    if str(args.source) == str(args.target):
        raise BadInput("--from and --to name the same database")
    source = _open(args.source)
    try:
        target = _open(args.target)
        try:
            with console.progress_bar("migrating the books", enabled=not args.json) as update:
                moved = migrate_books(source, target, update)
        finally:
            target.close()
    finally:
        source.close()
    if args.json:
        console.print_json(
            {
                "from": source.database.describe(),
                "to": target.database.describe(),
                "ok": moved.ok,
                "rows": moved.rows,
                "accounts": [account.to_json() for account in moved.accounts],
                "check": moved.audit.to_json(),
            }
        )
    else:
        copied = ", ".join(f"{count} {table}" for table, count in moved.rows.items())
        console.stdout.print(
            f"copied {copied} from {source.database.describe()} to {target.database.describe()}"
        )
        title = "balances and statements on both sides"
        columns = [
            "account",
            "source_balance",
            "target_balance",
            "source_lines",
            "target_lines",
            "equal",
        ]
        headers = {
            "source_balance": "balance before",
            "target_balance": "balance after",
            "source_lines": "lines before",
            "target_lines": "lines after",
        }
        console.print_table([a.to_json() for a in moved.accounts], columns, title, headers)
        console.print_table(
            [f.to_json() for f in moved.audit.findings],
            ["check", "ok", "detail"],
            f"ledger check of {moved.audit.database}",
        )
    if not moved.ok:
        console.error("the books differ after the copy (see above); the target was not cleared")
    return 0 if moved.ok else console.EXIT_BAD_INPUT


def _with_ledger(args: argparse.Namespace, use: Callable[[Ledger, Config], None]) -> int:
    """Run ``use`` on the configuration's ledger database; a refusal is one line on stderr."""
    loaded = options.load_config(args)
    if loaded.ledger.url is not None:
        raise BadInput(
            f"this configuration books at the ledger service {loaded.ledger.url} (ledger.url); "
            "run the command on the ledger's host, with the service's configuration"
        )
    ledger = _open(loaded.ledger.location)
    try:
        use(ledger, loaded)
    except LedgerError as exc:
        console.error(str(exc))
        return console.EXIT_BAD_INPUT
    finally:
        ledger.close()
    return 0


def _open(location: Any) -> Ledger:
    """The books at ``location``; a directory that cannot be made is input to fix."""
    with as_bad_input(OSError):
        return Ledger(location)
