"""Registers every command of this program on the top-level parser (cli/main.py)."""

from __future__ import annotations

import argparse


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Every site command, in the order ``siteagent --help`` lists them."""
    from siteagent.cli.site import (
        history,
        install,
        keys_config,
        ledger,
        market,
        reservations,
        serve,
        simulate,
    )

    for command in (serve, simulate, reservations, market, keys_config, install, history, ledger):
        command.add_commands(commands)
