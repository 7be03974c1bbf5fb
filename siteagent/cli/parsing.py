"""Command lines that fail as every command fails: one line on stderr, exit 1 (input to fix),
and with ``--json`` one JSON error object on stdout.

argparse's own way (a usage dump and exit 2) is not what the README promises: a value it
refuses (``--walltime abc``, ``--max-price -1``) is input to fix like any other, so it exits
:data:`~siteagent.cli.console.EXIT_BAD_INPUT` with the same one-line error a bad sites file
gets. A value that starts with a minus and a digit (``--walltime -5m``, ``--earliest -90``)
is read as the option's value, to be refused or taken by its type, never as an unknown
option.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Dict, NoReturn, Optional, Sequence, cast

from siteagent.cli import console

#: What argparse takes for a value rather than an option: a minus, then a digit or a point.
_NEGATIVE_VALUE = re.compile(r"^-\.?\d")


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line and exit 1 (see the module's docstring);
    its subcommands' parsers are of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # argparse reads "-5m" as an option unless it looks like a negative number to it
        self._negative_number_matcher = _NEGATIVE_VALUE

    def parse_known_args(  # type: ignore[override]
        self, args: Optional[Sequence[str]] = None, namespace: Optional[Any] = None
    ) -> Any:
        self._argv = list(sys.argv[1:] if args is None else args)  # for error(): --json?
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        _program, _, command = self.prog.partition(" ")  # the program is the prefix already
        said = f"{command}: {message}" if command else message
        said += f" (see `{self.prog} --help`)"
        argv = getattr(self, "_argv", sys.argv[1:])
        fail(said, "bad_usage", console.EXIT_BAD_INPUT, wants_json(argv))


def subcommands(parser: Parser) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """The program's commands (one required), each parsed by a :class:`Parser`."""
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    return cast("argparse._SubParsersAction[argparse.ArgumentParser]", commands)


def wants_json(argv: Sequence[str]) -> bool:
    """Whether a command line asks for JSON (read before, or without, parsing it)."""
    return "--json" in argv


def fail(message: str, code: str, status: int, as_json: bool) -> NoReturn:
    """Say ``message`` (one line on stderr; with ``as_json`` also one JSON error object on
    stdout) and exit with ``status``."""
    report(message, code, status, as_json)
    raise SystemExit(status)


def report(
    message: str, code: str, status: int, as_json: bool, field: Optional[str] = None
) -> None:
    """One failure, said once for people and, with ``as_json``, once for programs:
    ``{"error": {"code", "message", "exit", "field"?}}``."""
    console.error(message)
    if as_json:
        error: Dict[str, Any] = {"code": code, "message": message, "exit": status}
        if field is not None:
            error["field"] = field
        console.print_json({"error": error})
