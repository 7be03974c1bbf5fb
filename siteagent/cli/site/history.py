"""``siteagent history``: how long jobs like yours waited in the queue.

Reads the waits the agent recorded from its own snapshots (``--source store``, any backend) or
Slurm's accounting (``--source sacct``, needs slurmdbd), and prints them by core-count and
walltime bins, with each bin's upper bounds on the quantiles of the wait (QBETS): a table
for people, one JSON object (the API's shape) with ``--json``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Dict, List, Optional

from siteagent.backends.slurm import SlurmBackend
from siteagent.backends.slurm.sacct import sacct_waits
from siteagent.cli import console, options
from siteagent.cli.exits import BadInput
from siteagent.cli.options import add_site_options, load_config
from siteagent.config.schema import BackendType, Config
from siteagent.core.durations import SINCE_FORMS
from siteagent.core.waits import QueueWait, wait_table
from siteagent.market.site import STORE_FILE, slurm_config
from siteagent.market.store import Store

#: How far back ``history`` looks when ``--since`` is not given.
DEFAULT_SINCE_S = 30 * 86400


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "history",
        help="queue waits of started jobs, by core count and walltime limit",
        description=(
            "Queue waits of jobs that started since --since, grouped by core count (1, 2-4, "
            "5-16, 17-64, 65-256, 257+) and walltime limit (<=1h, <=4h, <=12h, <=24h, >24h): "
            "jobs, mean, median and 90th percentile per bin, and upper bounds on the wait's "
            "quantiles at 95% confidence from each bin's most recent waits (QBETS' binomial "
            "method; '-' where a bin holds too few). --source store reads the waits "
            "`siteagent serve` recorded from its snapshots (any backend); --source sacct asks "
            "Slurm's accounting (slurm/pyslurm backends with slurmdbd), where a wait counts "
            "from when the job became eligible."
        ),
    )
    add_site_options(sub)
    sub.add_argument(
        "--since",
        metavar="T",
        help=f"{SINCE_FORMS}; default 30d",
    )
    sub.add_argument("--source", choices=("store", "sacct"), default="store")
    sub.add_argument("--json", action="store_true", help="print one JSON object")
    sub.set_defaults(command=_history)


def _history(args: argparse.Namespace) -> int:
    config = load_config(args)
    now = int(time.time())
    since = options.since(args.since, now) if args.since else now - DEFAULT_SINCE_S
    if args.source == "sacct":
        waits = sacct_waits(_sacct_backend(config), since, now)
    else:
        waits = _stored_waits(str(config.state_dir / STORE_FILE), since)
    table = wait_table(waits, source=args.source).to_json()
    table["since"] = since
    if args.json:
        console.print_json(table)
        return 0
    rows = [_row(b) for b in table["bins"] if b["jobs"]]
    title = (
        f"Queue waits since {time.strftime('%Y-%m-%d %H:%M', time.localtime(since))} "
        f"({args.source}): {table['jobs']} jobs"
    )
    if not rows:
        console.stdout.print(f"{title}; no started jobs recorded")
        return 0
    bounds = [_bound_column(b) for b in table["bins"][0]["wait_bounds"]]
    columns = ["cores", "walltime", "jobs", "mean", "median", "p90", *bounds]
    console.print_table(rows, columns, f"{title}; {_bounds_note(table)}")
    return 0


def _sacct_backend(config: Config) -> SlurmBackend:
    """The Slurm command-line backend of a slurm or pyslurm site: sacct is a command either
    way, so pyslurm is not loaded for it. Other batch systems have no sacct."""
    if config.backend.type not in (BackendType.SLURM, BackendType.PYSLURM):
        raise BadInput(
            f"--source sacct needs a Slurm site (backend.type slurm or pyslurm), this one is "
            f"{config.backend.type.value}; use --source store"
        )
    return SlurmBackend(slurm_config(config))


def _stored_waits(path: str, since: int) -> List[QueueWait]:
    store = Store(path)
    try:
        return store.queue_waits(since)
    finally:
        store.close()


def _row(b: Dict[str, Any]) -> Dict[str, Any]:
    return {
        "cores": _cores(*b["cores"]),
        "walltime": _walltime(*b["walltime_s"]),
        "jobs": b["jobs"],
        "mean": _wait(b["mean_wait_s"]),
        "median": _wait(b["median_wait_s"]),
        "p90": _wait(b["p90_wait_s"]),
        **{_bound_column(w): _wait(w["upper_bound_s"]) for w in b["wait_bounds"]},
    }


def _bound_column(bound: Dict[str, Any]) -> str:
    """``p95 <=``: the column of the upper bound on the 95th percentile."""
    return f"p{bound['quantile'] * 100:g} <="


def _bounds_note(table: Dict[str, Any]) -> str:
    confidence = table["bins"][0]["wait_bounds"][0]["confidence"]
    return (
        f"'<=' columns: upper bounds at {confidence * 100:g}% confidence, "
        f"from each bin's last {table['bound_window_jobs']} waits"
    )


def _cores(lo: int, hi: Optional[int]) -> str:
    if hi is None:
        return f"{lo}+"
    return str(hi) if lo == hi else f"{lo}-{hi}"


def _walltime(lo: int, hi: Optional[int]) -> str:
    if hi is None:
        return f"> {lo / 3600:g}h"
    if lo == 0:
        return f"<= {hi / 3600:g}h"
    return f"{lo / 3600:g}-{hi / 3600:g}h"


def _wait(seconds: Any) -> str:
    """A wait as people read it: 45s, 12m, 3.5h."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
