"""Registers every command of this program on the top-level parser (cli/main.py)."""

from __future__ import annotations

import argparse


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Every buyer command, in the order ``siteagent-client --help`` lists them."""
    from siteagent.cli.buyer import (
        auction,
        english,
        ledger,
        odds,
        provision,
        quotes,
        reservations,
        select,
        sites,
    )

    for command in (sites, quotes, auction, english, provision, select, odds, reservations, ledger):
        command.add_commands(commands)
