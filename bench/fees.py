"""Fees and plans as the market grows, against a reference revision measured in the same run.

Issue 34's targets for the pricing and planning core, on busy snapshots of the HPC2N trace
replayed on a 10,000-core machine (built and cached as ``python -m bench slots`` builds
them, bench/slots_probe.py):

- **fees** (10,000 and 50,000 jobs waiting): a 20-offer quote with the agent's default
  pricing (flat unit price and the externality fee, conservative), 100 priced alternatives
  (the externality fee, conservative), and one EASY fee (the earliest admissible window), each
  on a fresh context so that nothing is remembered between rounds;
- **plans**: plan + slots (conservative) at 10,000, 50,000, 100,000 and 200,000 jobs waiting
  (RICC's log, ``--plan-trace``, its arrivals 6 times as fast, ``--plan-overload``: at 2.5
  the replay ends before 200,000 queue), the exponent of a least-squares fit of log(time) on
  log(jobs), and a 50,000-core machine with 100,000 jobs waiting and about 10,000 running.

Both the working tree and ``--reference`` (default: the commit issue 34 started from) are
installed as users get them (compiled) in venvs of their own; every round runs each side in
turn, the order alternating, in child processes (bench/fees_probe.py) that time their own CPU
(``time.process_time``): on a machine shared with other work wall time measures the others.
Figures are medians over the rounds; the fees of both sides are compared for equality.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence

from bench.common import (
    OUTSIDE,
    ROOT,
    TRACES,
    commit_of,
    installed_siteagent,
    machine,
    md_table,
    median,
    run_measured,
    source_at,
    write_results,
)
from bench.slots import snapshot_path

PROBE = str(ROOT / "bench" / "fees_probe.py")
BUILD = str(ROOT / "bench" / "slots_probe.py")
#: The commit issue 34 started from (main when the work began).
START = "7fdf490"
TRACE = "HPC2N-2002-2.2-cln.swf.gz"
#: The plans' trace: HPC2N's 202,871 jobs never queue 100,000 on 10,000 cores at OVERLOAD
#: (the replay ends first); RICC's 447,794 queue 100,000 there, not 200,000 (655 s CPU to
#: find out), which they do at PLAN_OVERLOAD (402 s CPU to build, once).
PLAN_TRACE = "RICC-2010-2.swf.gz"
PLAN_OVERLOAD = 6.0
OVERLOAD = 2.5

#: (name, seconds) of each target: the issue's figures.
TARGETS = {
    ("quote20", 10_000): 0.05,
    ("alternatives100", 10_000): 0.3,
    ("easy_fee", 10_000): 0.05,
    ("alternatives100", 50_000): 1.5,
    ("easy_fee", 50_000): 0.5,
}
WHAT = {
    "quote20": "a 20-offer quote, default pricing",
    "alternatives100": "100 priced alternatives (externality fee, conservative)",
    "easy_fee": "one EASY fee (externality)",
    "easy_context": "EASY plan for a quote's context (per poll)",
}


def snapshot(
    python: str, cores: int, pending: int, overload: float = OVERLOAD, trace: str = TRACE
) -> Path:
    """The busy snapshot (built once, by the package's simulator)."""
    path = snapshot_path(trace, cores, pending, overload)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        print(
            f"building the snapshot: {pending} jobs of {trace} waiting on {cores} cores ...",
            flush=True,
        )
        argv = [python, BUILD, "build", "--trace", str(TRACES / trace), "--cores", str(cores)]
        argv += ["--pending", str(pending), "--overload", str(overload), "--out", str(path)]
        child(argv)
    return path


def child(argv: Sequence[str]) -> Dict[str, Any]:
    measured = run_measured(argv, cwd=OUTSIDE, timeout=4 * 3600)
    if measured.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({measured.returncode}): {measured.stderr}")
    lines = measured.stdout.strip().splitlines()
    result: Dict[str, Any] = json.loads(lines[-1]) if lines else {}
    return result


def run(args: argparse.Namespace) -> Dict[str, Any]:
    sides = {
        "this tree": installed_siteagent(),
        "reference": installed_siteagent(source_at(args.reference)),
    }
    mine = sides["this tree"]
    results: Dict[str, Any] = {
        "machine": machine(),
        "reference": {"revision": args.reference, "commit": commit_of(args.reference)},
        "rounds": args.rounds,
    }
    fee_snapshots = {n: snapshot(mine, 10_000, n) for n in args.fee_pending}
    plan_snapshots = {
        n: snapshot(mine, 10_000, n, args.plan_overload, args.plan_trace) for n in args.plan_pending
    }
    big = (
        snapshot(mine, args.big_cores, args.big_pending, args.big_overload)
        if args.big_pending
        else None
    )
    quotes: Dict[str, Dict[int, List[Dict[str, Any]]]] = {side: {} for side in sides}
    plans: Dict[str, List[Dict[str, Any]]] = {side: [] for side in sides}
    for i in range(args.rounds):
        order = list(sides) if i % 2 == 0 else list(reversed(sides))
        for side in order:
            python = sides[side]
            for pending, path in fee_snapshots.items():
                easy = args.easy if side == "this tree" else int(i < args.reference_easy_rounds)
                argv = [python, PROBE, "quotes", "--snapshot", str(path), "--repeats", "1"]
                quotes[side].setdefault(pending, []).append(child([*argv, "--easy", str(easy)]))
            paths = [str(p) for p in plan_snapshots.values()] + ([str(big)] if big else [])
            argv = [python, PROBE, "plans", "--snapshots", *paths, "--repeats", "1"]
            plans[side].append(child(argv))
            print(f"round {i + 1}/{args.rounds}: {side} done", flush=True)
    results["fees"] = {side: summarise_quotes(runs) for side, runs in quotes.items()}
    results["fees_identical"] = {
        str(n): identical([run["fees"] for side in sides for run in quotes[side][n]])
        for n in fee_snapshots
    }
    results["plans"] = {side: summarise_plans(runs) for side, runs in plans.items()}
    results["load_average_at_end"] = round(os.getloadavg()[0], 2)
    return results


def identical(runs: Sequence[Mapping[str, Any]]) -> bool:
    """Whether every run that priced a thing found the same fees for it."""
    seen: Dict[str, Any] = {}
    for run in runs:
        for name, fees in run.items():
            if seen.setdefault(name, fees) != fees:
                return False
    return True


def summarise_quotes(runs: Dict[int, List[Dict[str, Any]]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for pending, rounds in runs.items():
        times: Dict[str, List[float]] = {}
        for run in rounds:
            for name, values in run["times_s"].items():
                times.setdefault(name, []).extend(values)
        out[str(pending)] = {
            name: {"median_s": median(values), "all_s": [round(v, 4) for v in values]}
            for name, values in times.items()
        }
    return out


def summarise_plans(rounds: List[Dict[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for run in rounds:
        for path, entry in run.items():
            row = out.setdefault(
                Path(path).name,
                {
                    "pending": entry["pending"],
                    "running": entry["running"],
                    "capacity": entry["capacity"],
                    "plan_and_slots_s": [],
                    "plan_s": [],
                },
            )
            for r in entry["runs"]:
                row["plan_and_slots_s"].append(r["plan_s"] + r["advertise_s"])
                row["plan_s"].append(r["plan_s"])
    for row in out.values():
        row["median_s"] = median(row["plan_and_slots_s"])
    return out


def exponent(points: Sequence[Sequence[float]]) -> float:
    """Slope of the least-squares line through (log jobs, log seconds)."""
    xs = [math.log(x) for x, _ in points]
    ys = [math.log(y) for _, y in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def markdown(results: Dict[str, Any], args: argparse.Namespace) -> str:
    where, ref = results["machine"], results["reference"]
    mine, theirs = results["fees"]["this tree"], results["fees"]["reference"]
    lines = [
        "# Fees and plans as the market grows (`python -m bench fees`)",
        "",
        f"Measured {where['date']} on {where['cpus']} CPUs shared with other work, Python "
        f"{where['python']}, load average {where['load_average_1m_at_start']} at start and "
        f"{results['load_average_at_end']} at the end. This tree against the reference "
        f"{ref['revision']} ({ref['commit'][:12]}), both installed and compiled as users get "
        f"them, measured in turn in each of {results['rounds']} rounds (the order alternating); "
        "figures are medians of each side's CPU seconds (a busy neighbour stretches wall time, "
        "not these). Request: 64 cores x 4 h from now, on the HPC2N trace replayed on "
        f"10,000 cores, its arrivals {OVERLOAD} times as fast, until the queue holds the "
        "stated number of jobs (bench/slots_probe.py); the plans on 10,000 cores replay "
        f"{args.plan_trace} the same way, its arrivals {args.plan_overload} times as fast "
        "(HPC2N's 202,871 jobs never queue 100,000 there, nor RICC's 200,000 at 2.5: the "
        "replay ends first).",
        "",
        "## Fees",
        "",
    ]
    rows: List[Mapping[str, Any]] = []
    for (name, pending), target in TARGETS.items():
        a = mine.get(str(pending), {}).get(name)
        b = theirs.get(str(pending), {}).get(name)
        if a is None:
            continue
        row = {
            "what": WHAT[name],
            "jobs waiting": pending,
            "this tree s": a["median_s"],
            "reference s": b["median_s"] if b else "",
            "reference / this tree": b["median_s"] / a["median_s"] if b else "",
            "target s": target,
            "met": "yes" if a["median_s"] < target else "NO",
        }
        rows.append(row)
    for pending in mine:
        for name in ("easy_context",):
            a, b = mine[pending].get(name), theirs.get(pending, {}).get(name)
            if a:
                rows.append(
                    {
                        "what": WHAT[name],
                        "jobs waiting": int(pending),
                        "this tree s": a["median_s"],
                        "reference s": b["median_s"] if b else "",
                        "reference / this tree": b["median_s"] / a["median_s"] if b else "",
                    }
                )
    lines.append(md_table(rows, list(rows[0])))
    same = results["fees_identical"]
    lines += [
        f"Fees identical on both sides, every round: {same}.",
        "",
        "## Plan + slots",
        "",
    ]
    prow: List[Dict[str, Any]] = []
    fits: Dict[str, float] = {}
    for side, plans in results["plans"].items():
        points = [
            (row["pending"], row["median_s"]) for row in plans.values() if row["capacity"] == 10_000
        ]
        if len(points) >= 2:
            fits[side] = exponent(points)
    mine_p, theirs_p = results["plans"]["this tree"], results["plans"]["reference"]
    for name, row in mine_p.items():
        other = theirs_p.get(name)
        prow.append(
            {
                "cores": row["capacity"],
                "jobs waiting": row["pending"],
                "running": row["running"],
                "this tree s": row["median_s"],
                "reference s": other["median_s"] if other else "",
                "reference / this tree": other["median_s"] / row["median_s"] if other else "",
            }
        )
    prow.sort(key=lambda r: (r["cores"], r["jobs waiting"]))
    lines.append(md_table(list(prow), list(prow[0])))
    lines.append(
        "Exponent of plan + slots in the jobs waiting (10,000 cores, least squares on the "
        "logs): "
        + ", ".join(f"{side} {value:.2f}" for side, value in fits.items())
        + f" (target <= 1.15: {'met' if fits.get('this tree', 9) <= 1.15 else 'NOT met'})."
    )
    big = [r for r in prow if r["cores"] != 10_000]
    for r in big:
        lines.append(
            f"{r['jobs waiting']:,} jobs waiting and {r['running']:,} running on "
            f"{r['cores']:,} cores: plan + slots {r['this tree s']:.2f} s (target < 1 s: "
            f"{'met' if r['this tree s'] < 1 else 'NOT met'})."
        )
    lines.append("")
    return "\n".join(lines)


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench fees", description=__doc__)
    parser.add_argument("--reference", default=START, help=f"revision to compare ({START})")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (3)")
    parser.add_argument("--fee-pending", type=int, nargs="+", default=[10_000, 50_000])
    parser.add_argument(
        "--plan-pending", type=int, nargs="+", default=[10_000, 50_000, 100_000, 200_000]
    )
    parser.add_argument(
        "--plan-trace",
        default=PLAN_TRACE,
        help=f"the trace under traces/ the plans' snapshots replay ({PLAN_TRACE})",
    )
    parser.add_argument(
        "--plan-overload",
        type=float,
        default=PLAN_OVERLOAD,
        help=f"arrival overload of the plans' snapshots ({PLAN_OVERLOAD}: at 2.5 RICC's replay "
        "ends before 200,000 queue)",
    )
    parser.add_argument("--big-cores", type=int, default=50_000)
    parser.add_argument("--big-pending", type=int, default=100_000, help="0: skip")
    parser.add_argument(
        "--big-overload",
        type=float,
        default=6.0,
        help="arrival overload of the big machine's snapshot (6: at 2.5 the trace ends first)",
    )
    parser.add_argument("--easy", type=int, default=3, help="EASY fees per round, this tree (3)")
    parser.add_argument(
        "--reference-easy-rounds",
        type=int,
        default=1,
        help="rounds in which the reference times an EASY fee (1: they take minutes)",
    )
    args = parser.parse_args(argv)
    results = run(args)
    write_results("fees", results, markdown(results, args))
    return 0
