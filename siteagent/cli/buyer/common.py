"""What the ``siteagent-client`` commands share: the sites file and its options, a connection
to every site chosen, a fan-out with a progress bar.

Every command takes ``--sites FILE`` (default ``$SITEAGENT_CLIENT_SITES``, else
``~/.config/siteagent/sites.yaml``) and ``--json``; those that ask sites take ``--site NAME``
(repeatable) to ask only some. A command that asks several sites succeeds when at least one
answered: the others are rows of the table, never a failure of the command.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
from pathlib import Path
from types import FrameType
from typing import Callable, Iterator, List, Optional, Sequence

from siteagent.cli import console
from siteagent.client.batches import single_calls
from siteagent.client.connection import SiteConnection
from siteagent.client.sites import Registry, Site, default_path, load_registry
from siteagent.core.errors import SiteagentError


def add_sites_options(parser: argparse.ArgumentParser, choose: bool = True) -> None:
    """``--sites FILE`` and ``--json``; with ``choose``, ``--site NAME`` too."""
    parser.add_argument(
        "--sites",
        type=Path,
        metavar="FILE",
        help=f"the sites file (default: $SITEAGENT_CLIENT_SITES, else {default_path({})})",
    )
    if choose:
        parser.add_argument(
            "--site",
            action="append",
            default=[],
            metavar="NAME",
            help="ask only this site of the file (repeat for several; default: every site)",
        )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def registry(args: argparse.Namespace) -> Registry:
    return load_registry(args.sites)


def add_batches_option(parser: argparse.ArgumentParser) -> None:
    """``--no-batches``: one request per part even to sites that take batches."""
    parser.add_argument(
        "--no-batches",
        action="store_true",
        help="send one quote, accept and confirm per part even to sites that take batches "
        "(docs/batches.md); sites that do not are always sent single calls",
    )


@contextlib.contextmanager
def connected(sites: Sequence[Site], batches: bool = True) -> Iterator[List[SiteConnection]]:
    """A connection to each site, all closed afterwards; without ``batches``, each sent
    single calls only."""
    connections = [SiteConnection(site) for site in sites]
    if not batches:
        for connection in connections:
            single_calls(connection)
    try:
        yield connections
    finally:
        for connection in connections:
            connection.close()


@contextlib.contextmanager
def progress(what: str, count: int, quiet: bool) -> Iterator[Callable[[object], None]]:
    """A progress bar on stderr of sites answered out of ``count``; yields what a fan-out
    calls with each result."""
    with console.progress_bar(f"{what} {count} sites", enabled=not quiet) as update:
        answered = 0

        def one_more(_result: object) -> None:
            nonlocal answered
            answered += 1
            update(answered / count)

        yield one_more


class PlannersMissing(SiteagentError):
    """The planners' libraries (the ``client`` extra) are not installed: the other commands
    work without them, so they are imported only when a workflow or a bag is planned."""


def planners_missing(command: str, exc: ModuleNotFoundError) -> PlannersMissing:
    """What ``command`` says when it cannot import a planner's library."""
    return PlannersMissing(
        f"{command} needs the planners' libraries, and {exc.name} is not installed: "
        "pip install 'siteagent[client]'"
    )


def latency_ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


@contextlib.contextmanager
def interruptible() -> Iterator[Callable[[], bool]]:
    """Ctrl-C as a flag the auction checks between requests (so the journal stays exact and
    what is held is released); a second Ctrl-C stops at once."""
    pressed: List[bool] = []

    def on_interrupt(signum: int, frame: Optional[FrameType]) -> None:
        if pressed:
            raise KeyboardInterrupt
        pressed.append(True)
        console.error(
            "interrupted: finishing the request in flight, then releasing what is held "
            "(Ctrl-C again to stop now; `siteagent-client recover` finishes the job)"
        )

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield lambda: bool(pressed)
    finally:
        signal.signal(signal.SIGINT, previous)
