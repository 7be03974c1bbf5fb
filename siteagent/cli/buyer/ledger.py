"""``siteagent-client balance`` and ``siteagent-client statement``: the buyer's own account at
the federation's bank (the sites file's ``ledger`` section), read with signed GETs."""

from __future__ import annotations

import argparse
from typing import Callable, Tuple, TypeVar

from pydantic import BaseModel

from siteagent.cli import console
from siteagent.cli.buyer import common
from siteagent.cli.options import local_time
from siteagent.client.connection import SiteConnection
from siteagent.client.ledger import Account

M = TypeVar("M", bound=BaseModel)


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for verb, summary, command in (
        ("balance", "your balance and credit at the federation's bank", _balance),
        (
            "statement",
            "your account's movements at the bank, each deal with its receipt",
            _statement,
        ),
    ):
        sub = commands.add_parser(
            verb,
            help=summary,
            description=(
                f"Print {summary}: the account of your key id (buyer.key_id) at the bank the "
                "sites file's ledger section names, read with a GET signed by your key."
            ),
        )
        common.add_sites_options(sub, choose=False)
        sub.set_defaults(command=command)


def _read(args: argparse.Namespace, read: Callable[[Account], M]) -> Tuple[Account, M]:
    """``read`` of the buyer's account at the sites file's bank, the connection closed."""
    account = Account(SiteConnection(common.registry(args).bank()))
    with account.connection:
        return account, read(account)


def _balance(args: argparse.Namespace) -> int:
    account, balance = _read(args, Account.balance)
    if args.json:
        console.print_json(balance.model_dump())
        return 0
    console.print_pairs(
        [("account", balance.account), ("balance", balance.balance), ("credit", balance.credit)],
        title=f"Balance at {account.connection.site.url}",
    )
    return 0


def _statement(args: argparse.Namespace) -> int:
    account, statement = _read(args, Account.statement)
    if args.json:
        console.print_json(statement.model_dump())
        return 0
    console.print_table(
        [{**line.model_dump(), "at": local_time(line.at)} for line in statement.lines],
        ["transaction_id", "at", "kind", "amount", "balance", "receipt_id", "memo"],
        title=f"Statement of {statement.account} at {account.connection.site.url}: "
        f"balance {statement.balance}",
        headers={"transaction_id": "transaction", "receipt_id": "receipt"},
    )
    return 0
