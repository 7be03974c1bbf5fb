"""``siteagent serve``: run the agent, by default on a replay of a bundled trace slice.

The command line overrides the configuration file (``backend.swf.*``, ``planner.*``,
``api.*``) and is re-applied on SIGHUP; ``--once`` prints one snapshot (docs/admin.md).
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from siteagent.agent.state import CycleState
from siteagent.cli import console, options
from siteagent.cli.console import EXIT_BAD_INPUT
from siteagent.cli.exits import BadInput
from siteagent.config.schema import Config
from siteagent.core.defaults import DEFAULT_POLL_INTERVAL_S
from siteagent.core.engines import Policy


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "serve",
        help="run the agent (default: replay of the bundled SDSC-SP2 slice, no configuration)",
        description=(
            "Run the site agent: poll the cluster, predict its schedule, log what it sees, "
            "expire unconfirmed reservations and reconcile its records with the batch system. "
            "With no options it replays a bundled slice of a real trace (SDSC-SP2, 128 cores) "
            "in real time as a simulated cluster, kept in the state directory so that a "
            "restarted agent finds the same cluster and reservations."
        ),
    )
    sub.add_argument("--trace", help="SWF trace to replay instead of the bundled one")
    sub.add_argument(
        "--speed",
        type=float,
        help="replay N times faster than real time (default 1, or the saved cluster's)",
    )
    sub.add_argument(
        "--offset",
        type=int,
        metavar="SECONDS",
        help="start this long after the trace's first submit, so the queue has built up "
        "(default 2 days, or the saved cluster's)",
    )
    sub.add_argument(
        "--cores",
        type=int,
        metavar="N",
        help="the replayed cluster's size (default: the trace header's MaxProcs, or the saved "
        "cluster's)",
    )
    sub.add_argument(
        "--policy",
        choices=[policy.value for policy in Policy],
        help="policy the schedule is predicted with (default: planner.policy, conservative)",
    )
    sub.add_argument(
        "--poll-interval",
        type=float,
        metavar="SECONDS",
        help=f"(default: planner.poll_interval_s, {DEFAULT_POLL_INTERVAL_S:g})",
    )
    sub.add_argument("--listen", metavar="ADDRESS", help="API address (default: api.listen)")
    sub.add_argument("--port", type=int, metavar="N", help="API port (default: api.port, 8443)")
    sub.add_argument("--once", action="store_true", help="take one snapshot, print it and exit")
    sub.add_argument("--json", action="store_true", help="with --once: print one JSON object")
    options.add_site_options(sub)
    options.add_lifecycle_options(sub)
    sub.set_defaults(command=_serve)


def _serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # imported here: the web stack takes a while to load and only `serve` needs it
    from siteagent.daemon.daemon import serve
    from siteagent.http.server import ServiceError

    try:
        serve(
            _serve_config(args),
            once=args.once,
            show=lambda state: _print_state(state, args.json),
            reload_config=lambda: _serve_config(args),
        )
    except ServiceError as exc:
        console.error(str(exc))
        return EXIT_BAD_INPUT
    return 0


def _serve_config(args: argparse.Namespace) -> Config:
    """The configuration with the site options and serve's own overrides (re-read on SIGHUP
    with the same command line)."""
    loaded = options.load_config(args)
    swf, explicit = loaded.backend.swf, set(loaded.explicit)
    if args.trace is not None:
        swf = swf.model_copy(update=dict(trace=Path(args.trace)))
    if args.speed is not None:
        swf = swf.model_copy(update=dict(speed=args.speed))
    if args.offset is not None:
        swf = swf.model_copy(update=dict(offset=args.offset))
    if args.cores is not None:
        swf = swf.model_copy(update=dict(cores=args.cores))
    given = {"trace": args.trace, "speed": args.speed, "offset": args.offset, "cores": args.cores}
    explicit.update(f"backend.swf.{key}" for key, value in given.items() if value is not None)
    planner = loaded.planner
    if args.policy is not None:
        planner = planner.model_copy(update=dict(policy=Policy(args.policy)))
    if args.poll_interval is not None:
        if not args.poll_interval > 0:
            raise BadInput(f"--poll-interval must be > 0 s, got {args.poll_interval}")
        planner = planner.model_copy(update=dict(poll_interval_s=args.poll_interval))
    return loaded.model_copy(
        update=dict(
            backend=loaded.backend.model_copy(update=dict(swf=swf)),
            planner=planner,
            api=options.with_listener(loaded.api, args.listen, args.port),
            explicit=frozenset(explicit),
        )
    )


def _print_state(state: CycleState, as_json: bool) -> None:
    snapshot, predicted = state.snapshot, state.plan
    pending = [
        {
            "id": job.id,
            "cores": job.cores,
            "limit_s": job.limit,
            "submitted": job.submit,
            "planned_start": predicted.starts.get(job.id),
            "source": predicted.sources[job.id].value if job.id in predicted.sources else None,
        }
        for job in snapshot.pending
    ]
    summary = {
        "backend": snapshot.backend,
        "now": snapshot.now,
        "capacity": snapshot.capacity,
        "unit": snapshot.unit.value,
        "busy": state.busy,
        "running": len(snapshot.running),
        "pending": len(snapshot.pending),
        "reservations": len(snapshot.reservations),
        "policy": predicted.policy.value,
    }
    if as_json:
        console.print_json({**summary, "pending_jobs": pending})
        return
    console.print_pairs(list(summary.items()), title="Cluster now")
    console.print_table(
        [
            {
                **row,
                "planned_start": _clock_time(row["planned_start"]),
                "submitted": _clock_time(row["submitted"]),
            }
            for row in pending[:20]
        ],
        ["id", "cores", "limit_s", "submitted", "planned_start", "source"],
        title=f"Pending jobs (first 20 of {len(pending)}), planned by {predicted.policy.value}",
    )


def _clock_time(epoch: object) -> str:
    if not isinstance(epoch, int):
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))
