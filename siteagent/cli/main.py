"""Command-line entry points: ``siteagent ...`` (site side) and ``siteagent-client ...``.

Each command is a small function that parses nothing itself, calls the library, and prints a
table (or one JSON object with ``--json``). Errors a user can fix are one line on stderr and a
non-zero exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Optional, Sequence

from siteagent import __version__
from siteagent.backends.base import BackendError, BackendUnavailable
from siteagent.cli import console, parsing
from siteagent.cli.console import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
)
from siteagent.cli.site import commands as site_commands
from siteagent.core.errors import SiteagentError
from siteagent.market.store import StoreError
from siteagent.protocol.errors import status_of
from siteagent.sim.swf import SwfError
from siteagent.sim.workload import UnsimulableJob

Command = Callable[[argparse.Namespace], int]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``siteagent``: the site agent and its tools."""
    console.program = "siteagent"
    parser = _site_parser()
    args = parser.parse_args(argv)
    command: Command = args.command
    as_json = bool(getattr(args, "json", False))
    try:
        return command(args)
    except BackendUnavailable as exc:
        return _failed(f"the batch system did not answer: {exc}; retry later", exc, as_json)
    except BackendError as exc:
        return _failed(f"the batch system failed: {exc}", exc, as_json, EXIT_BAD_INPUT)
    except SiteagentError as exc:
        return _failed(str(exc), exc, as_json, exit_code(exc))
    except (SwfError, UnsimulableJob, FileNotFoundError, ValueError) as exc:
        return _failed(str(exc), exc, as_json, EXIT_BAD_INPUT)
    except KeyboardInterrupt as exc:
        return _failed("interrupted", exc, as_json, EXIT_INTERRUPTED)


def _failed(
    message: str, error: BaseException, as_json: bool, status: int = EXIT_UNAVAILABLE
) -> int:
    """Say why a command failed (one line; with ``--json`` one JSON error object too) and
    return its exit status."""
    code = getattr(error, "code", None)
    if not isinstance(code, str):
        code = "interrupted" if isinstance(error, KeyboardInterrupt) else "bad_input"
    parsing.report(message, code, status, as_json, getattr(error, "field", None))
    return status


def exit_code(error: SiteagentError) -> int:
    """A site's refusal (the API's 4xx) is EXIT_REFUSED, what passes by itself (its 503, a
    bank that did not answer) EXIT_UNAVAILABLE, anything else (a state directory written by a
    newer siteagent, a bad file) bad input."""
    if isinstance(error, StoreError):
        return EXIT_BAD_INPUT
    status = status_of(error.code)
    if status == 503:
        return EXIT_UNAVAILABLE
    if 400 < status < 500 and error.code != "invalid_request":
        return EXIT_REFUSED
    return EXIT_BAD_INPUT


def client_main(argv: Optional[Sequence[str]] = None) -> int:
    """``siteagent-client``: find, price and reserve compute across sites."""
    # imported here: the client's HTTP stack is no business of `siteagent`'s commands
    from siteagent.cli.buyer import commands as buyer_commands
    from siteagent.cli.buyer.common import exit_code as buyer_exit_code

    console.program = "siteagent-client"
    parser = parsing.Parser(
        prog="siteagent-client",
        description=(
            "The buyer's side: find, price and reserve compute across the site agents of a "
            "sites file (default: $SITEAGENT_CLIENT_SITES, else "
            "~/.config/siteagent/sites.yaml). Run `siteagent-client COMMAND --help` for details."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parsing.subcommands(parser)
    buyer_commands.add_commands(commands)
    args = parser.parse_args(argv)
    command: Command = args.command
    as_json = bool(getattr(args, "json", False))
    try:
        return command(args)
    except (SiteagentError, ValueError, OSError) as exc:
        return _failed(str(exc), exc, as_json, buyer_exit_code(exc))
    except KeyboardInterrupt as exc:
        return _failed("interrupted", exc, as_json, EXIT_INTERRUPTED)


def _site_parser() -> argparse.ArgumentParser:
    parser = parsing.Parser(
        prog="siteagent",
        description=(
            "Site agent for HPC batch systems: predicts the schedule, advertises free slots, "
            "prices and creates advance reservations. Run `siteagent COMMAND --help` for details."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parsing.subcommands(parser)
    site_commands.add_commands(commands)
    return parser


if __name__ == "__main__":
    sys.exit(main())
