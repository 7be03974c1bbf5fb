"""``siteagent simulate``: replay an SWF trace with the agent's own scheduling engines.

The replay itself is :func:`siteagent.sim.replay_trace` (docs/simulation.md); this module is
its options and its summary, a table or one JSON object.
"""

from __future__ import annotations

import argparse
from typing import Dict, List, Optional

from siteagent.cli import console
from siteagent.cli.exits import BadInput, as_bad_input
from siteagent.core.engines import Policy
from siteagent.sim import LoadScaling, MachineSpec, replay_trace
from siteagent.sim.swf import SwfError
from siteagent.sim.topology import MACHINES
from siteagent.sim.workload import UnsimulableJob


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def _simulate(args: argparse.Namespace) -> int:
    machine = _machine_spec(args)
    with as_bad_input(ValueError):  # sim/'s types check the options' ranges
        scaling = LoadScaling(
            interarrival_factor=args.interarrival_factor,
            overlay_probability=args.overlay,
            seed=args.seed,
        )
        if machine is not None:
            machine.build()
    # sim/'s errors stay outside the root (mypyc cannot subclass it): converted here
    with (
        console.progress_bar(f"replaying {args.trace}", enabled=not args.json) as update,
        as_bad_input(SwfError, UnsimulableJob, OSError),
    ):
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
            raise BadInput(
                "--fat, --torus, --fat-sizes and --divide-sizes shape jobs on a topology "
                "machine: add --machine bgl or --machine torus3d"
            )
        return None
    if args.cores is not None:
        raise BadInput(
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
