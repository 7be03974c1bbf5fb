"""Singh's thesis, reproduced: slot statistics (ch. 3) and externality-fee trends (ch. 5).

Both use the CTC-SP2 (430 processors operational) and SDSC-SP2 (128) traces with exact run
times as estimates, as the thesis does, and only the package's own code: the simulator
replays, ``advertise`` cuts the slots out of the conservative engine's own profile, and
``Pricing.alternatives`` + ``choose`` price and pick each reservation.

(a) Slots: the replay is sampled every hour of simulated time; at each sample the advertised
slot set of the current schedule is recorded (count, sizes) with the tasks in the system.

(b) Fees: the first ``days`` days of each trace; a random 10% of the jobs become reservations
as they arrive (the simulator's ``on_arrival`` hook): the site lists up to 100 priced starts
for the job's size and run time, the buyer picks one with trade-off α, and the simulator
reserves it. Load is raised as the thesis does, by duplicating jobs: the simulator's overlay
copy (the trace shifted one week, each job admitted with probability 0.2 or 0.4).
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from bench.common import RESULTS, TRACES, machine, md_table, running_compiled, write_results
from siteagent.cli.console import progress_bar
from siteagent.core.model import Request
from siteagent.core.scheduling import Policy, ReservationConflict, Task
from siteagent.core.slots import advertise
from siteagent.pricing import ExternalityFee, FlatPrice, Pricing, Refused, choose
from siteagent.sim import LoadScaling, Simulator, Workload
from siteagent.sim.snapshot import schedule_plan, snapshot_of

TRACE_FILES = {
    "CTC-SP2": ("CTC-SP2-1996-3.1-cln.swf.gz", 430),
    "SDSC-SP2": ("SDSC-SP2-1998-4.2-cln.swf.gz", 128),
}
ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)
HORIZON_S = 48 * 3600
DAY_S = 86400

#: The thesis' own figures, as printed in its text (figures are read off the plots only
#: where the text gives no number; those are marked "approx.").
THESIS: Dict[str, Any] = {
    "mean_slots": {"CTC-SP2": 27, "SDSC-SP2": 14},
    "slot_sizes": "a large percentage of slots have only few processors (1-10)",
    "utilization_ch3": {"CTC-SP2": 0.63, "SDSC-SP2": 0.70},
    "fee_trend": "mean fee falls as alpha rises, 0 at alpha = 1; SDSC above CTC (Fig. 23, "
    "approx. 0-40 SU)",
    "load": "fee rises with load at every alpha (Fig. 25: utilization CTC 58.7/68.4/78.8%, "
    "SDSC 63.4/77.8/87.4%, up to approx. 200 SU)",
    "policy": "aggressive (EASY) backfilling gives higher fees than conservative (Fig. 29)",
}


def _workload(name: str, overlay: float = 0.0) -> Workload:
    file, cores = TRACE_FILES[name]
    return Workload(
        str(TRACES / file),
        cores=cores,
        skip_invalid=True,
        scaling=LoadScaling(overlay_probability=overlay),
        exact_estimates=True,
    )


# -- (a) slot statistics ------------------------------------------------------------------------


def slot_statistics(name: str, period: int, days: Optional[float]) -> Dict[str, Any]:
    workload = _workload(name)
    simulator = Simulator(workload.tasks(), workload.cores, Policy.CONSERVATIVE)
    first = simulator.now
    stop = None if days is None else first + int(days * DAY_S)
    counts: List[int] = []
    in_system: List[int] = []
    sizes: Dict[int, int] = {}
    next_sample = first
    began = time.perf_counter()
    with progress_bar(f"slots {name}") as advance:
        while True:
            t = simulator.next_event_time()
            if t is None or (stop is not None and t > stop):
                break
            simulator.advance_to(t)
            if t < next_sample:
                continue
            next_sample = t + period
            slots = advertise(schedule_plan(simulator, HORIZON_S))
            counts.append(len(slots))
            in_system.append(len(simulator.running) + len(simulator.engine.queue))
            for slot in slots:
                sizes[slot.cores] = sizes.get(slot.cores, 0) + 1
            advance(workload.progress)
    workload.close()
    total = sum(sizes.values())
    return {
        "samples": len(counts),
        "mean_slots": sum(counts) / len(counts),
        "median_slots": sorted(counts)[len(counts) // 2],
        "count_histogram": _histogram(counts, [(0, 1)] + [(k, k + 2) for k in range(2, 57, 3)]),
        "share_slots_1_to_10_procs": sum(n for c, n in sizes.items() if c <= 10) / total,
        "size_histogram": _histogram_weighted(
            sizes, [(1, 1)] + [(k, k + 3) for k in range(2, 63, 4)]
        ),
        "mean_tasks_in_system": sum(in_system) / len(in_system),
        "correlation_slots_tasks": _correlation(counts, in_system),
        "utilization": simulator.summary().utilization,
        "seconds": time.perf_counter() - began,
    }


def _histogram(values: List[int], bins: List[Tuple[int, int]]) -> Dict[str, float]:
    out = {f"{low}-{high}": 0.0 for low, high in bins}
    out["more"] = 0.0
    for value in values:
        key = next((f"{lo}-{hi}" for lo, hi in bins if lo <= value <= hi), "more")
        out[key] += 100.0 / len(values)
    return out


def _histogram_weighted(counts: Dict[int, int], bins: List[Tuple[int, int]]) -> Dict[str, float]:
    total = sum(counts.values())
    out = {(f"{lo}" if lo == hi else f"{lo}-{hi}"): 0.0 for lo, hi in bins}
    out["more"] = 0.0
    for value, n in counts.items():
        key = next(
            ((f"{lo}" if lo == hi else f"{lo}-{hi}") for lo, hi in bins if lo <= value <= hi),
            "more",
        )
        out[key] += 100.0 * n / total
    return out


def _correlation(xs: List[int], ys: List[int]) -> float:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    vx = sum((x - mx) ** 2 for x in xs) ** 0.5
    vy = sum((y - my) ** 2 for y in ys) ** 0.5
    return cov / (vx * vy) if vx and vy else float("nan")


# -- (b) fees ---------------------------------------------------------------------------------


@dataclass
class Reserver:
    """Turns a random share of arrivals into reservations priced by the site's own pricing."""

    simulator_ref: List[Simulator]
    pricing: Pricing
    alpha: Optional[float]
    fraction: float
    rng: random.Random
    fees: List[float] = field(default_factory=list)
    waits: List[int] = field(default_factory=list)
    refused: int = 0
    #: alternatives the simulator's engine refused: would mean the snapshot and the engine
    #: disagree about running work (expected 0)
    conflicts: int = 0

    def __call__(self, task: Task) -> bool:
        if self.rng.random() >= self.fraction:
            return True
        simulator = self.simulator_ref[0]
        alpha = self.rng.random() if self.alpha is None else self.alpha
        snapshot = snapshot_of(simulator)
        request = Request(cores=task.size, duration=max(task.run, 1), earliest=simulator.now)
        try:
            alternatives = self.pricing.alternatives(self.pricing.context(snapshot), request)
        except Refused:
            self.refused += 1
            return True
        chosen = alternatives[choose(alternatives, alpha)]
        window = chosen.window
        try:
            simulator.add_reservation(
                ("reservation", task.key), window.start, window.end, task.size
            )
        except ReservationConflict:
            self.conflicts += 1
            return True
        self.fees.append(float(chosen.fee))
        self.waits.append(window.start - task.submit)
        return False


def _first_days(tasks: Iterator[Task], until: int) -> Iterator[Task]:
    for task in tasks:
        if task.submit >= until:
            return
        yield task


def fee_run(
    name: str,
    policy: Policy,
    alpha: Optional[float],
    overlay: float,
    days: float,
    fraction: float,
    tick: Callable[[], None],
) -> Dict[str, Any]:
    workload = _workload(name, overlay)
    tasks = workload.tasks()
    first = next(tasks)
    until = first.submit + int(days * DAY_S)

    def chained() -> Iterator[Task]:
        yield first
        yield from _first_days(tasks, until)

    ref: List[Simulator] = []
    pricing = Pricing(FlatPrice(), ExternalityFee(Decimal(1)), policy)
    reserver = Reserver(ref, pricing, alpha, fraction, random.Random(7))
    simulator = Simulator(chained(), workload.cores, policy, on_arrival=reserver)
    ref.append(simulator)
    began = time.perf_counter()
    summary = simulator.run(progress=tick, every=200)
    workload.close()
    fees = reserver.fees
    return {
        "trace": name,
        "policy": policy.value,
        "alpha": "random" if alpha is None else alpha,
        "overlay": overlay,
        "reservations": len(fees),
        "refused": reserver.refused,
        "conflicts": reserver.conflicts,
        "best_effort_jobs": summary.jobs,
        "mean_fee_su": sum(fees) / len(fees) if fees else float("nan"),
        "mean_reservation_wait_h": sum(reserver.waits) / len(fees) / 3600 if fees else 0.0,
        "mean_best_effort_wait_h": summary.mean_wait_s / 3600,
        "utilization_best_effort": summary.utilization,
        "seconds": time.perf_counter() - began,
    }


def fee_cases(quick: bool) -> List[Tuple[str, Policy, Optional[float], float]]:
    """(trace, policy, alpha, overlay): the α sweep, the load sweep, and EASY vs conservative."""
    cases: List[Tuple[str, Policy, Optional[float], float]] = []
    for name in TRACE_FILES:
        for alpha in ALPHAS:
            cases.append((name, Policy.CONSERVATIVE, alpha, 0.0))
        loads = (0.4,) if quick else (0.2, 0.4)
        for overlay in loads:
            for alpha in (0.0, 0.5) if quick else ALPHAS:
                cases.append((name, Policy.CONSERVATIVE, alpha, overlay))
        cases.append((name, Policy.CONSERVATIVE, None, 0.0))
        cases.append((name, Policy.EASY, None, 0.0))
        cases.append((name, Policy.EASY, 0.0, 0.0))
    return cases


# -- report -------------------------------------------------------------------------------------


def plots(results: Dict[str, Any]) -> List[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, stats in results["slots"].items():
        hist = stats["count_histogram"]
        axes[0].plot(list(hist), list(hist.values()), marker="o", label=name)
        sizes = stats["size_histogram"]
        axes[1].plot(list(sizes), list(sizes.values()), marker="o", label=name)
    axes[0].set(xlabel="number of advertised slots", ylabel="% of samples")
    axes[1].set(xlabel="processors of a slot", ylabel="% of slots")
    for axis in axes:
        axis.tick_params(axis="x", rotation=70)
        axis.legend()
    fig.suptitle("Advertised slots (thesis Fig. 4 and 7)")
    fig.tight_layout()
    path = RESULTS / "thesis-slots.png"
    fig.savefig(path, dpi=100)
    written.append(path.name)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=False)
    for axis, name in zip(axes, TRACE_FILES):
        for overlay in sorted({r["overlay"] for r in results["fees"]}):
            rows = [
                r
                for r in results["fees"]
                if r["trace"] == name
                and r["policy"] == "conservative"
                and r["overlay"] == overlay
                and r["alpha"] != "random"
            ]
            if rows:
                label = "original" if overlay == 0 else f"+{overlay:.0%} jobs"
                axis.plot(
                    [r["alpha"] for r in rows],
                    [r["mean_fee_su"] for r in rows],
                    marker="o",
                    label=label,
                )
        axis.set(title=name, xlabel="trade-off α", ylabel="mean fee (core-hours)")
        axis.legend()
    fig.suptitle("Externality fee vs α and load, conservative (thesis Fig. 23 and 25)")
    fig.tight_layout()
    path = RESULTS / "thesis-fees.png"
    fig.savefig(path, dpi=100)
    written.append(path.name)
    plt.close("all")
    return written


def markdown(results: Dict[str, Any]) -> str:
    where = results["machine"]
    lines = [
        "# Singh's thesis, reproduced: slots (ch. 3) and externality fees (ch. 5)",
        "",
        f"Run {where['date']} on {where['cpus']} CPUs shared with other work (load average "
        f"{where['load_average_1m_at_start']} at start), "
        f"{'mypyc-compiled engines' if results.get('compiled') else 'pure Python sources'}, "
        f"{'quick' if results['quick'] else 'full'} configuration: fees over the first "
        f"{results['days']} days, {results['fraction']:.0%} of jobs as reservations. Time per "
        "part in bench/results/thesis.json. Plots: " + ", ".join(results["plots"]) + ".",
        "",
        f"Slot statistics took {results['slots_seconds']:.0f} s, the "
        f"{len(results['fees'])} fee runs {results['fees_seconds']:.0f} s.",
        "",
        "## Slots (exact run times as estimates, sampled hourly)",
        "",
    ]
    rows: List[Mapping[str, Any]] = []
    for name, stats in results["slots"].items():
        rows.append(
            {
                "trace": name,
                "samples": stats["samples"],
                "mean slots": stats["mean_slots"],
                "thesis mean slots": THESIS["mean_slots"][name],
                "median slots": stats["median_slots"],
                "slots with 1-10 procs": f"{stats['share_slots_1_to_10_procs']:.0%}",
                "corr(slots, tasks)": stats["correlation_slots_tasks"],
                "utilization": stats["utilization"],
                "thesis utilization": THESIS["utilization_ch3"][name],
                "seconds": stats["seconds"],
            }
        )
    lines.append(md_table(rows, list(rows[0])))
    lines += [
        f"Thesis: {THESIS['slot_sizes']}; slot count positively correlated with tasks in the "
        "system (Fig. 5).",
        "",
        "## Fees (core-hours of delay caused, rate 1; SU = processor-hour)",
        "",
    ]
    columns = [
        "trace",
        "policy",
        "alpha",
        "overlay",
        "reservations",
        "mean_fee_su",
        "mean_reservation_wait_h",
        "mean_best_effort_wait_h",
        "utilization_best_effort",
        "seconds",
    ]
    lines.append(md_table(results["fees"], columns))
    lines += [
        "Thesis, for comparison: "
        + "; ".join(THESIS[k] for k in ("fee_trend", "load", "policy"))
        + ".",
        "",
        "Trends found here:",
        "",
    ]
    lines += [f"- {check}" for check in results["trends"]]
    lines.append("")
    return "\n".join(lines)


def trends(fees: List[Dict[str, Any]]) -> List[str]:
    """The thesis' claims, checked against our runs, one sentence each."""
    out = []

    def fee(name: str, policy: str, alpha: Any, overlay: float) -> Optional[float]:
        for r in fees:
            if (r["trace"], r["policy"], r["alpha"], r["overlay"]) == (
                name,
                policy,
                alpha,
                overlay,
            ):
                return float(r["mean_fee_su"])
        return None

    for name in TRACE_FILES:
        sweep = [fee(name, "conservative", a, 0.0) for a in ALPHAS]
        falling = all(a is not None and b is not None and b <= a for a, b in zip(sweep, sweep[1:]))
        out.append(
            f"{name}: mean fee by α {', '.join(f'{v:.1f}' for v in sweep if v is not None)}: "
            f"{'falls monotonically' if falling else 'does NOT fall monotonically'}, "
            f"{'0' if sweep[-1] == 0 else 'not 0'} at α = 1."
        )
        easy, cons = fee(name, "easy", "random", 0.0), fee(name, "conservative", "random", 0.0)
        if easy is not None and cons is not None:
            verdict = "higher" if easy > cons else "NOT higher"
            out.append(
                f"{name}: EASY {easy:.1f} vs conservative {cons:.1f} (random α): EASY {verdict}."
            )
        for alpha in (0.0, 0.5):
            levels = [(o, fee(name, "conservative", alpha, o)) for o in (0.0, 0.2, 0.4)]
            known = [(o, v) for o, v in levels if v is not None]
            rising = all(b[1] >= a[1] for a, b in zip(known, known[1:]))
            out.append(
                f"{name}, α = {alpha}: fee by load "
                + ", ".join(f"+{o:.0%}: {v:.1f}" for o, v in known)
                + (": rises with load." if rising else ": does NOT rise with load.")
            )
    return out


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench thesis", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer days and load cases")
    parser.add_argument("--days", type=float, default=None, help="fee runs' days (30; quick 7)")
    parser.add_argument("--fraction", type=float, default=0.1, help="share of reservations")
    parser.add_argument("--slot-days", type=float, default=None, help="slot replay days (all)")
    args = parser.parse_args(argv)
    days = args.days if args.days is not None else (7.0 if args.quick else 30.0)
    results: Dict[str, Any] = {
        "machine": machine(),
        "compiled": running_compiled(),
        "quick": args.quick,
        "days": days,
        "fraction": args.fraction,
        "thesis": THESIS,
        "slots": {},
        "fees": [],
    }
    began = time.perf_counter()
    for name in TRACE_FILES:
        results["slots"][name] = slot_statistics(name, 3600, args.slot_days)
        print(f"slots {name}: mean {results['slots'][name]['mean_slots']:.1f}", flush=True)
    results["slots_seconds"] = time.perf_counter() - began
    cases = fee_cases(args.quick)
    began = time.perf_counter()
    with progress_bar("fee runs") as advance:
        for i, (name, policy, alpha, overlay) in enumerate(cases):
            run = fee_run(name, policy, alpha, overlay, days, args.fraction, lambda: None)
            results["fees"].append(run)
            advance((i + 1) / len(cases))
            print(
                f"fees {i + 1}/{len(cases)}: {name} {policy.value} alpha={run['alpha']} "
                f"+{overlay:.0%}: mean fee {run['mean_fee_su']:.1f} ({run['seconds']:.0f} s)",
                flush=True,
            )
    results["fees_seconds"] = time.perf_counter() - began
    results["trends"] = trends(results["fees"])
    results["plots"] = plots(results)
    write_results("thesis", results, markdown(results))
    return 0
