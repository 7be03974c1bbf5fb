"""Command-line entry points: ``siteagent ...`` (site side) and ``siteagent-client ...``.

Each command is a small function that parses nothing itself, calls the library, and prints a
table (or one JSON object with ``--json``). Errors a user can fix are one line on stderr and a
non-zero exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from siteagent import __version__
from siteagent.agent.state import CycleState
from siteagent.backends.base import BackendError, BackendUnavailable
from siteagent.cli import console, options, parsing
from siteagent.cli.console import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
)
from siteagent.cli.site import commands as site_commands
from siteagent.config.schema import Config
from siteagent.core.defaults import DEFAULT_POLL_INTERVAL_S
from siteagent.core.engines import Policy
from siteagent.core.errors import SiteagentError
from siteagent.market.store import StoreError
from siteagent.protocol.errors import status_of
from siteagent.sim import LoadScaling, MachineSpec, replay_trace
from siteagent.sim.swf import SwfError
from siteagent.sim.topology import MACHINES
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
    _add_serve(commands)
    _add_simulate(commands)
    site_commands.add_commands(commands)
    return parser


def _add_serve(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def _add_simulate(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "simulate",
        help="replay an SWF trace under FCFS, EASY, conservative or greedy backfilling",
        description=(
            "Replay a Standard Workload Format trace (plain or gzipped) on a cluster of P cores "
            "with the agent's own scheduling engines, and summarise the schedule. Jobs run "
            "min(run time, requested time); requested time (field 9) is the estimate. With "
            "--machine, jobs run on a machine of 8 x 4 x 4 midplanes (Blue Gene/L, or a plain "
            "3D torus) as boxes of midplanes joined as a mesh or a torus through link switches "
            "(docs/topology.md): a job's size in midplanes becomes a box by the rules of "
            "Aridor et al. 2005."
        ),
    )
    sub.add_argument("trace", help="SWF file (.swf or .swf.gz)")
    sub.add_argument(
        "--policy",
        choices=[policy.value for policy in Policy],
        default=Policy.EASY.value,
        help="scheduling policy (default: easy)",
    )
    sub.add_argument("--cores", type=int, help="cluster size P (default: the header's MaxProcs)")
    sub.add_argument(
        "--skip-invalid",
        action="store_true",
        help="skip records that cannot be simulated (no processors, negative run or submit "
        "time, larger than the cluster, malformed lines) and count them, instead of stopping",
    )
    sub.add_argument("--out", metavar="FILE.swf", help="write the simulated schedule as SWF")
    sub.add_argument(
        "--interarrival-factor",
        type=float,
        default=1.0,
        help="multiply inter-arrival times (below 1 raises the load; default 1)",
    )
    sub.add_argument(
        "--overlay",
        type=float,
        default=0.0,
        metavar="P",
        help="add a copy of the trace shifted by one week, each job admitted with probability P",
    )
    sub.add_argument(
        "--seed",
        type=int,
        default=1,
        help="random seed for --overlay and for the shapes --fat and --torus draw (default 1)",
    )
    sub.add_argument(
        "--machine",
        choices=MACHINES,
        help="run on midplanes joined through link switches: bgl (Blue Gene/L) or torus3d "
        "(every line a plain ring); --out then writes each job's midplanes and links as JSON "
        "lines",
    )
    sub.add_argument(
        "--fat",
        type=float,
        default=0.0,
        metavar="P",
        help="with --machine: a job is fat (at least 2 midplanes every way) with probability P "
        "(default 0: slim shapes)",
    )
    sub.add_argument(
        "--torus",
        type=float,
        default=0.0,
        metavar="P",
        help="with --machine: a job wants a torus with probability P, else a mesh (default 0)",
    )
    sub.add_argument(
        "--fat-sizes",
        action="store_true",
        help="with --machine: every job's size becomes its fat shape's volume, fat or not "
        "(the paper's Fig. 8)",
    )
    sub.add_argument(
        "--divide-sizes",
        type=int,
        default=1,
        metavar="N",
        help="with --machine: a job of p processors needs ceil(p / N) midplanes (the paper "
        "divides CTC's by 4; default 1)",
    )
    sub.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    sub.set_defaults(command=_simulate)


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
        swf = dataclasses.replace(swf, trace=Path(args.trace))
    if args.speed is not None:
        swf = dataclasses.replace(swf, speed=args.speed)
    if args.offset is not None:
        swf = dataclasses.replace(swf, offset=args.offset)
    if args.cores is not None:
        swf = dataclasses.replace(swf, cores=args.cores)
    given = {"trace": args.trace, "speed": args.speed, "offset": args.offset, "cores": args.cores}
    explicit.update(f"backend.swf.{key}" for key, value in given.items() if value is not None)
    planner = loaded.planner
    if args.policy is not None:
        planner = dataclasses.replace(planner, policy=Policy(args.policy))
    if args.poll_interval is not None:
        if not args.poll_interval > 0:
            raise ValueError(f"--poll-interval must be > 0 s, got {args.poll_interval}")
        planner = dataclasses.replace(planner, poll_interval_s=args.poll_interval)
    return dataclasses.replace(
        loaded,
        backend=dataclasses.replace(loaded.backend, swf=swf),
        planner=planner,
        api=options.with_listener(loaded.api, args.listen, args.port),
        explicit=frozenset(explicit),
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


def _simulate(args: argparse.Namespace) -> int:
    scaling = LoadScaling(
        interarrival_factor=args.interarrival_factor,
        overlay_probability=args.overlay,
        seed=args.seed,
    )
    machine = _machine_spec(args)
    with console.progress_bar(f"replaying {args.trace}", enabled=not args.json) as update:
        summary = replay_trace(
            args.trace,
            Policy(args.policy),
            cores=args.cores,
            skip_invalid=args.skip_invalid,
            scaling=scaling,
            out=args.out,
            progress=update,
            machine=machine,
        )
    result: Dict[str, object] = {"trace": args.trace, **summary.to_dict()}
    if args.json:
        console.print_json(result)
        return 0
    skipped = ", ".join(f"{count} {why}" for why, count in summary.skipped_by_reason.items())
    rows: List[tuple[str, object]] = [
        ("trace", args.trace),
        ("policy", summary.policy),
        *([("machine", machine.describe())] if machine is not None else []),
        ("midplanes" if machine is not None else "cores", summary.cores),
        ("jobs simulated", summary.jobs),
        ("jobs skipped", f"{summary.skipped:,}" + (f" ({skipped})" if skipped else "")),
        ("overlay jobs dropped", summary.dropped),
        ("mean wait", console.format_duration(summary.mean_wait_s)),
        ("mean bounded slowdown (10 s)", summary.mean_bounded_slowdown),
        ("utilization", f"{summary.utilization:.1%}"),
        ("makespan", console.format_duration(summary.makespan_s)),
        (
            "wall time",
            f"{summary.wall_s:.2f} s ({summary.jobs / max(summary.wall_s, 1e-9):,.0f} jobs/s)",
        ),
    ]
    if args.out:
        what = "partitions" if machine is not None else "schedule"
        rows.append((f"{what} written to", args.out))
    console.print_pairs(rows, title="Simulation summary")
    return 0


def _machine_spec(args: argparse.Namespace) -> Optional[MachineSpec]:
    """The topology machine asked for, None for cores; shape options need a machine."""
    shaping = args.fat or args.torus or args.fat_sizes or args.divide_sizes != 1
    if args.machine is None:
        if shaping:
            raise ValueError(
                "--fat, --torus, --fat-sizes and --divide-sizes shape jobs on a topology "
                "machine: add --machine bgl or --machine torus3d"
            )
        return None
    if args.cores is not None:
        raise ValueError(
            f"--cores does not apply with --machine ({args.machine} has 128 midplanes); "
            "use --divide-sizes N to turn processors into midplanes"
        )
    return MachineSpec(
        args.machine,
        fat=args.fat,
        torus=args.torus,
        seed=args.seed,
        fat_sizes=args.fat_sizes,
        divide=args.divide_sizes,
    )


if __name__ == "__main__":
    sys.exit(main())
