"""Registers every command of this program on the top-level parser (cli/main.py)."""

from __future__ import annotations

import argparse


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The site's commands after ``serve`` and ``simulate``, in ``siteagent --help``'s order."""
    from siteagent.cli.site import history, install, keys_config, ledger, market, reservations

    for command in (reservations, market, keys_config, install, history, ledger):
        command.add_commands(commands)
