"""Slots and priced alternatives on a busy 10,000-core snapshot, compiled and pure.

The snapshot comes from a real trace (HPC2N by default) replayed by the package's simulator on
a 10,000-core machine: the trace's arrivals are sped up by 10,000 / 240 (its own cores) and by
an overload factor so that the queue grows, and the replay stops at the first instant with
10,000 jobs waiting. It is built once and cached under bench/.work/slots/. Each round runs a
child with the installed, mypyc-compiled package and one with the package installed uncompiled
(bench/slots_probe.py), interleaved so both see the same machine load; figures are medians.

Measured: slots (conservative ``plan`` + ``advertise``), and the list of up to 100 priced
alternatives (``Pricing.alternatives`` with ``ExternalityFee``) under conservative backfilling;
under EASY a few alternatives only, since each EASY fee is a full EASY re-plan.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Dict, List, Mapping

from bench.common import (
    INSTALLS,
    OUTSIDE,
    ROOT,
    TRACES,
    compiled,
    installed_siteagent,
    machine,
    md_table,
    median,
    run_measured,
    write_results,
)

PROBE = str(ROOT / "bench" / "slots_probe.py")
TARGET_SLOTS_S = 0.5
TARGET_ALTERNATIVES_S = 3.0


def snapshot_path(trace: str, cores: int, pending: int, overload: float) -> Path:
    return INSTALLS / "slots" / f"{Path(trace).name}-{cores}-{pending}-{overload}.json"


def ensure_snapshot(python: str, args: argparse.Namespace) -> Dict[str, Any]:
    """Build the busy snapshot once (the replay is deterministic), then reuse it."""
    path = snapshot_path(args.trace, args.cores, args.pending, args.overload)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        print(f"building the snapshot: replaying {args.trace} ...", flush=True)
        argv = [python, PROBE, "build", "--trace", str(TRACES / args.trace)]
        argv += ["--cores", str(args.cores), "--pending", str(args.pending)]
        argv += ["--overload", str(args.overload), "--out", str(path)]
        _run(argv)
    data = json.loads(path.read_text())
    return {
        "path": str(path.relative_to(ROOT)),
        "trace": args.trace,
        "capacity": data["capacity"],
        "running_jobs": len(data["running"]),
        "pending_jobs": len(data["pending"]),
        "busy_cores": sum(job[1] for job in data["running"]),
        "interarrival_factor": data["interarrival_factor"],
        "replay_s": round(data["replay_s"], 2),
    }


def _run(argv: List[str]) -> Dict[str, Any]:
    measured = run_measured(argv, cwd=OUTSIDE, timeout=7200)
    if measured.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({measured.returncode}): {measured.stderr}")
    lines = measured.stdout.strip().splitlines()
    result: Dict[str, Any] = json.loads(lines[-1]) if lines else {}
    return result


def measure(python: str, snapshot: str, policies: List[str], limit: int, repeats: int) -> Any:
    argv = [python, PROBE, "measure", "--snapshot", snapshot, "--repeats", str(repeats)]
    argv += ["--quote-repeats", "1", "--limit", str(limit), "--policies", *policies]
    return _run(argv)


def run(args: argparse.Namespace) -> Dict[str, Any]:
    mine = installed_siteagent()
    pure = installed_siteagent(pure=True)
    results: Dict[str, Any] = {
        "machine": machine(),
        "request": {"cores": 64, "duration_s": 4 * 3600},
        "snapshot": ensure_snapshot(mine, args),
        "compiled_is_compiled": compiled(mine),
        "pure_is_pure": not compiled(pure),
    }
    snapshot = str(ROOT / results["snapshot"]["path"])
    runs: Dict[str, List[Any]] = {"compiled": [], "pure": []}
    for i in range(args.rounds):
        for side, python in (("compiled", mine), ("pure", pure)):
            runs[side].append(measure(python, snapshot, ["conservative"], args.limit, 5))
            print(f"round {i + 1}/{args.rounds}: {side} done", flush=True)
    easy = measure(mine, snapshot, ["easy"], args.easy_limit, 1) if args.easy_limit else None
    results["sides"] = {side: summarise(side_runs) for side, side_runs in runs.items()}
    if easy is not None:
        seconds = easy["times_s"]["alternatives_easy"][0]
        count = easy["counts"]["alternatives_easy"]
        results["easy_compiled"] = {
            "alternatives": count,
            "seconds": seconds,
            "seconds_per_alternative": seconds / count,
            "fees": easy["counts"]["fee_list_easy"],
        }
    results["fees_conservative"] = runs["compiled"][-1]["counts"]["fee_list_conservative"]
    same = all(
        r["counts"]["fee_list_conservative"] == results["fees_conservative"]
        for side_runs in runs.values()
        for r in side_runs
    )
    results["fees_identical_compiled_and_pure"] = same
    return results


def summarise(side_runs: List[Any]) -> Dict[str, Any]:
    def all_of(key: str) -> List[float]:
        return [t for r in side_runs for t in r["times_s"][key]]

    alternatives = all_of("alternatives_conservative")
    context = all_of("context_conservative")
    count = side_runs[0]["counts"]["alternatives_conservative"]
    return {
        "compiled": side_runs[0]["compiled"],
        "slots_count": side_runs[0]["counts"]["slots"],
        "plan_s_median": median(all_of("plan")),
        "advertise_s_median": median(all_of("advertise")),
        "slots_s_median": median(all_of("slots")),
        "slots_s_all": [round(t, 3) for t in all_of("slots")],
        "alternatives": count,
        "alternatives_s_median": median(alternatives),
        "alternatives_s_all": [round(t, 2) for t in alternatives],
        "context_s_median": median(context),
        "seconds_per_alternative": median(alternatives) / count,
        "fees": side_runs[0]["counts"]["fees_conservative"],
        "delayed_first": side_runs[0]["counts"]["delayed_jobs_first_conservative"],
    }


def markdown(results: Dict[str, Any]) -> str:
    where, snap = results["machine"], results["snapshot"]
    rows: List[Mapping[str, Any]] = []
    for side, entry in results["sides"].items():
        rows.append(
            {
                "build": side,
                "slots s": entry["slots_s_median"],
                "(plan s)": entry["plan_s_median"],
                "(advertise s)": entry["advertise_s_median"],
                "slots": entry["slots_count"],
                "alternatives": entry["alternatives"],
                "alternatives s": entry["alternatives_s_median"],
                "s per alternative": entry["seconds_per_alternative"],
                "context s": entry["context_s_median"],
            }
        )
    columns = list(rows[0])
    c, p = results["sides"]["compiled"], results["sides"]["pure"]
    lines = [
        "# Slots and priced alternatives on a busy 10,000-core snapshot",
        "",
        f"Measured {where['date']} on {where['cpus']} CPUs shared with other work, Python "
        f"{where['python']}, load average {where['load_average_1m_at_start']} at start. "
        "Medians over the runs in bench/results/slots.json.",
        "",
        f"Snapshot: {snap['trace']} replayed (EASY) on {snap['capacity']:,} cores, arrivals "
        f"sped up by {1 / snap['interarrival_factor']:.1f}x, stopped at the first instant with "
        f"{snap['pending_jobs']:,} jobs waiting: {snap['running_jobs']:,} running on "
        f"{snap['busy_cores']:,} cores. Request: 64 cores x 4 h, from now, ExternalityFee "
        "under conservative backfilling, FlatPrice.",
        "",
        md_table(rows, columns),
        f"- Slots (plan + advertise): {c['slots_s_median']:.2f} s compiled, "
        f"{p['slots_s_median']:.2f} s pure (target < {TARGET_SLOTS_S} s): "
        f"{'met' if c['slots_s_median'] < TARGET_SLOTS_S else 'NOT met'} compiled.",
        f"- {c['alternatives']} priced alternatives: {c['alternatives_s_median']:.1f} s compiled, "
        f"{p['alternatives_s_median']:.1f} s pure (target < {TARGET_ALTERNATIVES_S:.0f} s): "
        f"{'met' if c['alternatives_s_median'] < TARGET_ALTERNATIVES_S else 'NOT met'}. "
        f"Compiled is {p['alternatives_s_median'] / c['alternatives_s_median']:.1f}x pure.",
        f"- Fees identical compiled and pure: {results['fees_identical_compiled_and_pure']}; "
        f"{c['fees']['nonzero']} of {c['alternatives']} alternatives have a fee, the largest "
        f"{c['fees']['max']:,.0f} core-hours.",
    ]
    easy = results.get("easy_compiled")
    if easy:
        lines.append(
            f"- EASY fees, compiled: {easy['alternatives']} alternatives in "
            f"{easy['seconds']:.0f} s, {easy['seconds_per_alternative']:.0f} s each: every EASY "
            "fee re-plans the whole queue by running the EASY engine forward, whose pass "
            "scans the queue at every event (quadratic in the queue length)."
        )
    met = c["alternatives_s_median"] < TARGET_ALTERNATIVES_S
    lines += [
        "",
        "Why this is the hard case: the machine is full and the queue is packed, so a 64-core "
        "reservation near now pushes back almost every queued job "
        f"({c['delayed_first']:,} of {snap['pending_jobs']:,} are delayed by the earliest "
        "alternative). The fee is the sum of those delays, so each alternative re-plans nearly "
        "the whole queue; the re-plan never re-joins the base plan (the pushed-back jobs leave "
        "holes that later jobs move into, all the way down the queue). "
        + (
            "What makes 100 of them fit: each placement checks a window spanning hundreds of "
            "breakpoints of the plan, and the profile keeps its breakpoints in chunks with "
            "their least and greatest free capacity, so a check or a search costs a few chunks "
            "rather than every segment (siteagent/core/profile.py). Before the chunks the same "
            "list took 31.1 s compiled (bench/results/slots.md at commit 153d5c4)."
            if met
            else "The re-plans are still too slow for the target on this machine."
        ),
        "",
    ]
    return "\n".join(lines)


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench slots", description=__doc__)
    parser.add_argument("--trace", default="HPC2N-2002-2.2-cln.swf.gz", help="under traces/")
    parser.add_argument("--cores", type=int, default=10_000, help="cluster size (10000)")
    parser.add_argument("--pending", type=int, default=10_000, help="queue length (10000)")
    parser.add_argument("--overload", type=float, default=2.5, help="arrival overload (2.5)")
    parser.add_argument("--rounds", type=int, default=3, help="compiled+pure rounds (3)")
    parser.add_argument("--limit", type=int, default=100, help="alternatives (100)")
    parser.add_argument(
        "--easy-limit", type=int, default=2, help="EASY alternatives, compiled (2; 0 skips)"
    )
    args = parser.parse_args(argv)
    results = run(args)
    write_results("slots", results, markdown(results))
    return 0
