"""How a command's failure ends, for both programs: one line saying why and one exit code.

A command raises a :class:`~siteagent.core.errors.SiteagentError` for what a person can fix or
wait out; the top of each program (cli/main.py) catches only that and Ctrl-C, so any other
exception is a bug and shows its traceback. The exit codes are in cli/console.py.
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Callable, Iterator, Type

from siteagent.backends.base import BackendError, BackendUnavailable
from siteagent.cli import parsing
from siteagent.cli.console import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
)
from siteagent.core.errors import SiteagentError
from siteagent.market.store import StoreError
from siteagent.protocol.errors import BAD_INPUT, INTERRUPTED, INVALID_REQUEST, status_of

Command = Callable[[argparse.Namespace], int]


class BadInput(SiteagentError):
    """Input a person must fix that no library type names: a file that cannot be read, an
    option that contradicts another, a trace that cannot be replayed."""

    code = BAD_INPUT


@contextlib.contextmanager
def as_bad_input(*kinds: Type[Exception]) -> Iterator[None]:
    """Errors of ``kinds`` raised in the block (a library's OSError or ValueError on a file or
    value the user named) become :class:`BadInput` with the same message."""
    try:
        yield
    except kinds as exc:
        raise BadInput(str(exc)) from exc


def run(command: Command, args: argparse.Namespace) -> int:
    """``command(args)``'s exit status; a failure said once (with ``--json`` also as one
    JSON error object)."""
    as_json = bool(getattr(args, "json", False))
    try:
        return command(args)
    except SiteagentError as exc:
        status = exit_code(exc)
        parsing.report(message(exc), exc.code, status, as_json, exc.field)
        return status
    except KeyboardInterrupt:
        parsing.report("interrupted", INTERRUPTED, EXIT_INTERRUPTED, as_json)
        return EXIT_INTERRUPTED


def exit_code(error: SiteagentError) -> int:
    """What ``error`` exits with. A site's (or the bank's) answer: a refusal (4xx) is
    EXIT_REFUSED, no answer, a 5xx or an answer that is not the protocol EXIT_UNAVAILABLE.
    A local error: by its code's HTTP status, 503 (what passes by itself: a batch system or
    a bank that did not answer) EXIT_UNAVAILABLE, another 4xx but invalid_request
    EXIT_REFUSED; anything else (a state directory written by a newer siteagent, a bad file,
    a bad option) EXIT_BAD_INPUT."""
    # imported here, on failure only: `siteagent`'s commands never load the client otherwise
    from siteagent.client.connection import BadAnswer, SiteError, SiteUnreachable

    if isinstance(error, (SiteUnreachable, BadAnswer)):
        return EXIT_UNAVAILABLE
    if isinstance(error, SiteError):
        return EXIT_REFUSED if error.status is not None and error.status < 500 else EXIT_UNAVAILABLE
    if isinstance(error, BackendUnavailable):
        return EXIT_UNAVAILABLE
    if isinstance(error, (BackendError, StoreError)):
        return EXIT_BAD_INPUT
    status = status_of(error.code)
    if status == 503:
        return EXIT_UNAVAILABLE
    if 400 < status < 500 and error.code != INVALID_REQUEST:
        return EXIT_REFUSED
    return EXIT_BAD_INPUT


def message(error: SiteagentError) -> str:
    """The line that says ``error``: a batch system's failure says it was the batch system."""
    if isinstance(error, BackendUnavailable):
        return f"the batch system did not answer: {error}; retry later"
    if isinstance(error, BackendError):
        return f"the batch system failed: {error}"
    return str(error)
