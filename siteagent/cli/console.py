"""How every command talks to a person or a program: tables, JSON, progress bars, errors.

Tables go to stdout for people; ``--json`` prints one JSON object on stdout for programs;
progress bars and errors go to stderr so they never mix with either.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

#: Exit code for input a user must fix (bad trace, bad configuration); argparse uses 2.
EXIT_BAD_INPUT = 1
#: The site refused, or the request is not allowed now (offer expired, not the owner, ...).
EXIT_REFUSED = 3
#: The batch system did not answer: retry later (with the same --key). sysexits' EX_TEMPFAIL.
EXIT_UNAVAILABLE = 75
#: Ctrl-C: 128 + SIGINT, as a shell reports it.
EXIT_INTERRUPTED = 130

#: Width when stdout is a file or a pipe: wide enough that tables keep one line per row.
PIPE_WIDTH = 160

# soft_wrap: text lines (errors, paths, YAML snippets) are never broken; tables still fit the width.
stdout = Console(soft_wrap=True)
if not stdout.is_terminal:
    stdout = Console(width=PIPE_WIDTH, soft_wrap=True)
stderr = Console(stderr=True, soft_wrap=True)


def print_json(obj: Any) -> None:
    """One JSON document on stdout (keys sorted, so output diffs cleanly)."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def print_table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    title: Optional[str] = None,
    headers: Optional[Mapping[str, str]] = None,
) -> None:
    """A table with one row per mapping; ``headers`` renames columns for people."""
    headers = headers or {}
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(headers.get(column, column), overflow="fold")
    for row in rows:
        table.add_row(*(format_value(row.get(column)) for column in columns))
    stdout.print(table)


def print_pairs(pairs: Sequence[tuple[str, Any]], title: Optional[str] = None) -> None:
    """A two-column table of names and values (a summary)."""
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    for name, value in pairs:
        table.add_row(name, format_value(value))
    stdout.print(table)


def format_value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def format_duration(seconds: float) -> str:
    """Seconds as a person reads them: 13943 -> '3 h 52 min (13,943 s)'."""
    whole = round(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    parts = [f"{days} d"] if days else []
    if hours or days:
        parts.append(f"{hours} h")
    parts.append(f"{minutes} min")
    return f"{' '.join(parts)} ({whole:,} s)"


#: The program errors and warnings are prefixed with (``siteagent-client`` sets its own).
program = "siteagent"


def error(message: str) -> None:
    """An error for a person: what went wrong and, where we know it, how to fix it. The
    message is text, never markup: it may quote what the user typed or a site answered; it is
    one line whatever it holds (a YAML parser's or a library's message may span several)."""
    stderr.print(f"[bold red]{program}: error:[/] {escape(one_line(message))}", highlight=False)


def warning(message: str) -> None:
    """Something that works but should change (a deprecated key); text, as for :func:`error`."""
    stderr.print(
        f"[bold yellow]{program}: warning:[/] {escape(one_line(message))}", highlight=False
    )


def one_line(message: str) -> str:
    """``message`` with its line breaks (and the indentation after them) made single spaces."""
    return re.sub(r"\s*\n\s*", " ", message.strip())


@contextlib.contextmanager
def progress_bar(description: str, enabled: bool = True) -> Iterator[Callable[[float], None]]:
    """A progress bar on stderr; yields ``update(fraction)``. Silent when not on a terminal."""
    if not enabled or not stderr.is_terminal:
        yield lambda fraction: None
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>5.1f}%"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=stderr, transient=True) as bar:
        task = bar.add_task(description, total=1.0)
        yield lambda fraction: bar.update(task, completed=fraction)
