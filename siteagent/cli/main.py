"""Command-line entry points: ``siteagent ...`` (site side) and ``siteagent-client ...``.

Each command is a small function that parses nothing itself, calls the library, and prints a
table (or one JSON object with ``--json``). Errors a user can fix are one line on stderr and a
non-zero exit code (cli/exits.py); any other exception is a bug and shows its traceback.
The commands are registered by cli/site/commands.py and cli/buyer/commands.py.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Optional, Sequence

from siteagent import __version__
from siteagent.cli import console, exits, parsing
from siteagent.cli.site import commands as site_commands


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``siteagent``: the site agent and its tools."""
    console.program = "siteagent"
    args = _site_parser().parse_args(argv)
    return exits.run(args.command, args)


def client_main(argv: Optional[Sequence[str]] = None) -> int:
    """``siteagent-client``: find, price and reserve compute across sites."""
    console.program = "siteagent-client"
    args = _buyer_parser().parse_args(argv)
    return exits.run(args.command, args)


def _site_parser() -> argparse.ArgumentParser:
    return _parser(
        "siteagent",
        "Site agent for HPC batch systems: predicts the schedule, advertises free slots, "
        "prices and creates advance reservations. Run `siteagent COMMAND --help` for details.",
        site_commands.add_commands,
    )


def _buyer_parser() -> argparse.ArgumentParser:
    # imported here: the client's HTTP stack is no business of `siteagent`'s commands
    from siteagent.cli.buyer import commands as buyer_commands

    return _parser(
        "siteagent-client",
        "The buyer's side: find, price and reserve compute across the site agents of a "
        "sites file (default: $SITEAGENT_CLIENT_SITES, else "
        "~/.config/siteagent/sites.yaml). Run `siteagent-client COMMAND --help` for details.",
        buyer_commands.add_commands,
    )


def _parser(
    prog: str,
    description: str,
    add_commands: Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None],
) -> argparse.ArgumentParser:
    """One program's parser: ``--version`` and its subcommands."""
    parser = parsing.Parser(prog=prog, description=description)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    add_commands(parsing.subcommands(parser))
    return parser


if __name__ == "__main__":
    sys.exit(main())
