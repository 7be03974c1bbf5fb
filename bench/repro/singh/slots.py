"""Ch. 3: the slots a site advertises, sampled over a whole replayed trace.

At each sampling instant the replay's conservative schedule is cut into slots (``advertise``
over the engine's own profile, horizon now + 48 h or the last planned end + 5 min), and the
count, the tasks in the system (running and queued) and every slot's start (from now),
duration and processors are recorded. Sampling is hourly, the hour's grid shifted by the
seed (phase s starts s × 360 s in: the replay is deterministic, the grid is the only chance),
or at every arrival (ch. 4: "re-advertised whenever a new task is submitted"). The thesis says
only "periodically".
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from bench.repro.options import Options
from bench.repro.paper_values import paper_value
from bench.repro.report import Report
from bench.repro.singh.sites import (
    DAY_S,
    HOUR_S,
    NATIVE,
    SITES,
    add_calibrations,
    calibrate_run,
    fresh,
    judge_row,
    save_figure,
    span_s,
    sweep,
    tasks_of,
)
from bench.repro.stats import Estimate, mean_ci, paired_change
from bench.repro.verdicts import DIFFERS, MATCH, TREND
from siteagent.core.engines import Policy
from siteagent.core.slots import advertise
from siteagent.sim.simulator import Simulator
from siteagent.sim.snapshot import schedule_plan

HORIZON_S = 48 * HOUR_S
#: The thesis' Fig. 4 bins of the slot count: 0-1, 2-4, 5-7, ..., 56-58, more.
COUNT_BINS: List[Tuple[int, int]] = [(0, 1)] + [(k, k + 2) for k in range(2, 57, 3)]
#: Fig. 7's bins of a slot's processors: 1, 2-5, 6-9, ..., 62-65, more.
SIZE_BINS: List[Tuple[int, int]] = [(1, 1)] + [(k, k + 3) for k in range(2, 63, 4)]
#: About how many slots a run keeps for the scatter plots (Figs. 6 and 8).
SCATTER = 1500
PHASE_S = 360


def bin_label(low: int, high: int) -> str:
    return str(low) if low == high else f"{low}-{high}"


def histogram(values: Mapping[int, int], bins: Sequence[Tuple[int, int]]) -> Dict[str, float]:
    """Per cent of the weight of ``values`` (value -> count) in each bin, and "more"."""
    total = sum(values.values())
    out = {bin_label(lo, hi): 0.0 for lo, hi in bins}
    out["more"] = 0.0
    for value, count in values.items():
        label = next((bin_label(lo, hi) for lo, hi in bins if lo <= value <= hi), "more")
        out[label] += 100.0 * count / total if total else 0.0
    return out


def sample_times(kind: str, phase: int, arrivals: Sequence[int], last: int) -> List[int]:
    """Hourly from ``phase`` × 360 s, or every arrival instant."""
    if kind == "hourly":
        return list(range(phase * PHASE_S, last + 1, HOUR_S))
    return sorted(set(arrivals))


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float:
    if len(xs) < 2 or min(xs) == max(xs) or min(ys) == max(ys):
        return math.nan
    return statistics.correlation(xs, ys)


def ranks(values: Sequence[float]) -> List[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2
        i = j + 1
    return out


def slot_run(config: Mapping[str, Any]) -> Dict[str, Any]:
    """One replay sampled (a sweep configuration): ``site``, ``knobs``, ``exact``,
    ``sampling`` ("hourly" or "arrival"), ``phase``; returns per-sample series (count,
    tasks, median start and duration) and the slot statistics of Figs. 4-8."""
    began = time.perf_counter()
    site = SITES[config["site"]]
    tasks = tasks_of(site.name, tuple(config["knobs"]), bool(config["exact"]))
    arrivals = [task.submit for task in tasks]
    last = arrivals[-1] if config.get("days") is None else int(float(config["days"]) * DAY_S)
    times = [
        t
        for t in sample_times(config["sampling"], int(config["phase"]), arrivals, last)
        if t <= last
    ]
    # every step-th instant's slots go to the scatter plots (about SCATTER slots in all)
    step = max(1, len(times) * 20 // SCATTER)
    simulator = Simulator(fresh(tasks), site.units, Policy.CONSERVATIVE, start_time=0)
    counts: List[int] = []
    in_system: List[int] = []
    median_start: List[float] = []
    median_duration: List[float] = []
    sizes: Dict[int, int] = {}
    starts: List[float] = []
    diagonal = total = 0
    scatter: List[Tuple[float, float]] = []
    for index, t in enumerate(times):
        simulator.advance_to(t)
        slots = advertise(schedule_plan(simulator, HORIZON_S))
        counts.append(len(slots))
        in_system.append(len(simulator.running) + len(simulator.engine.queue))
        if not slots:
            continue
        offsets = [(slot.start - t) / HOUR_S for slot in slots]
        durations = [slot.duration / HOUR_S for slot in slots]
        median_start.append(statistics.median(offsets))
        median_duration.append(statistics.median(durations))
        for slot, offset in zip(slots, offsets):
            sizes[slot.cores] = sizes.get(slot.cores, 0) + 1
            starts.append(offset)
            total += 1
            diagonal += slot.end - t == HORIZON_S
        if index % step == 0:
            scatter.extend(zip(offsets, durations))
    starts.sort()
    quartile = lambda q: starts[min(len(starts) - 1, int(q * len(starts)))]  # noqa: E731
    return {
        "samples": len(counts),
        "times": times,
        "counts": counts,
        "in_system": in_system,
        "median_start_h": median_start,
        "median_duration_h": median_duration,
        "mean_slots": statistics.fmean(counts),
        "count_histogram": histogram(_counter(counts), COUNT_BINS),
        "size_histogram": histogram(sizes, SIZE_BINS),
        "sizes": {str(size): n for size, n in sorted(sizes.items())},
        "share_1_to_10": 100.0 * sum(n for c, n in sizes.items() if c <= 10) / max(total, 1),
        "pearson": pearson(counts, in_system),
        "spearman": pearson(ranks(counts), ranks(in_system)),
        "diagonal_share": diagonal / max(total, 1),
        "start_iqr_h": quartile(0.75) - quartile(0.25) if starts else math.nan,
        "start_median_h": quartile(0.5) if starts else math.nan,
        "start_p90_h": quartile(0.9) if starts else math.nan,
        "scatter": scatter,
        "utilization": simulator.summary().utilization,
        "seconds": round(time.perf_counter() - began, 2),
    }


def _counter(values: Sequence[int]) -> Dict[int, int]:
    out: Dict[int, int] = {}
    for value in values:
        out[value] = out.get(value, 0) + 1
    return out


def local_maxima(sizes: Mapping[int, int], width: int = 1) -> List[int]:
    """Sizes whose count exceeds every other size within ``width`` on each side."""
    return [
        size
        for size, n in sizes.items()
        if all(
            sizes.get(other, 0) < n
            for other in range(size - width, size + width + 1)
            if other != size
        )
    ]


# -- the part -----------------------------------------------------------------------------------

#: The thesis' utilizations of ch. 3 (whole traces).
TARGETS = {"CTC": 0.63, "SDSC": 0.70}
THESIS_MEAN = {"CTC": 27, "SDSC": 14}
POWERS = (2, 4, 8, 16, 32, 64)


def part(report: Report, options: Options, args: argparse.Namespace) -> None:
    """Ch. 3: rows 002-1 ... 002-6 and Figs. 4-8."""
    sites = ("SDSC",) if options.quick else ("CTC", "SDSC")
    limit = 60 if options.quick else None  # --quick: the first 60 days
    calibrations = sweep(
        options,
        args,
        calibrate_run,
        [
            {
                "site": site,
                "target": TARGETS[site],
                "days": limit or span_s(site) / DAY_S,
                "exact": True,
                "seed": 0,
            }
            for site in sites
        ],
        "singh slots: load calibration",
    )
    knobs = {"native": {site: list(NATIVE) for site in sites}}
    knobs["calibrated"] = {site: c["knobs"] for site, c in zip(sites, calibrations)}
    for site, found in zip(sites, calibrations):
        window = f"first {limit} days" if limit else "whole trace"
        add_calibrations(report, f"slots {site} {TARGETS[site]:.0%}, {window}", [found])
    plan = [
        (site, exact, load, sampling, phase)
        for site in sites
        for exact in (True, False)
        for load in (("calibrated",) if options.quick else ("native", "calibrated"))
        for sampling, phases in (("hourly", options.seed_list), ("arrival", [0]))
        for phase in phases
    ]
    configs = [
        {
            "site": site,
            "knobs": knobs[load][site],
            "exact": exact,
            "sampling": sampling,
            "phase": phase,
            "days": limit,
        }
        for site, exact, load, sampling, phase in plan
    ]
    runs = sweep(options, args, slot_run, configs, "singh slots")
    by: Dict[Tuple[str, bool, str, str], List[Dict[str, Any]]] = {}
    for (site, exact, load, sampling, _), run in zip(plan, runs):
        by.setdefault((site, exact, load, sampling), []).append(run)
    report.data["slots"] = [
        {**c, **{k: v for k, v in r.items() if k not in SERIES}} for c, r in zip(configs, runs)
    ]
    _rows(report, by, sites)
    _figures(report, by, sites)
    report.section("Ch. 3 setup (slots)", SETUP)
    report.section("Ch. 3: mean slots by variant", _variants(by, sites))


#: Per-sample series kept out of the report's JSON (they are large; the summaries stay).
SERIES = ("times", "counts", "in_system", "median_start_h", "median_duration_h", "scatter")


def _mean(runs: Sequence[Mapping[str, Any]], field: str) -> Estimate:
    return mean_ci([float(run[field]) for run in runs])


def _rows(
    report: Report,
    by: Mapping[Tuple[str, bool, str, str], List[Dict[str, Any]]],
    sites: Sequence[str],
) -> None:
    closest = {site: by[(site, True, "calibrated", "hourly")] for site in sites}
    for site in sites:
        ours = _mean(closest[site], "mean_slots")
        why = _gap_why(by, site, ours)
        judge_row(
            report,
            "002-1",
            ours,
            point=site,
            why=why,
            result=f"Fig. 4: mean advertised slots, {site} (exact estimates, calibrated "
            "load, hourly)",
        )
    pearson = {site: _mean(closest[site], "pearson") for site in sites}
    spearman = {site: _mean(closest[site], "spearman") for site in sites}
    weakest = min(sites, key=lambda s: pearson[s].value)
    judge_row(
        report,
        "002-2",
        pearson[weakest],
        point="correlation_min",
        result="Fig. 5: Pearson of slots and tasks in the system, the lower site; "
        + "; ".join(
            f"{s}: Pearson {pearson[s].text(2)}, Spearman {spearman[s].text(2)}" for s in sites
        ),
        why=f"{weakest}'s correlation is below 0.5",
    )
    diagonal = {site: _mean(closest[site], "diagonal_share") for site in sites}
    if len(sites) == 2:
        spread = paired_change(
            [r["start_iqr_h"] for r in closest["CTC"]], [r["start_iqr_h"] for r in closest["SDSC"]]
        )
        ok = spread.low > 0 and all(diagonal[s].value > 0 for s in sites)
        report.row(
            "002-3",
            TREND if ok else DIFFERS,
            spread,
            result="Fig. 6: SDSC − CTC start IQR (h), paired by phase; 48-h diagonal share "
            + ", ".join(f"{s} {diagonal[s].value:.0%}" for s in sites),
            why="" if ok else "the SDSC start IQR is not above CTC's, or no slot on the diagonal",
        )
    else:
        report.row("002-3", "not run", why="needs both sites (--quick runs SDSC only)")
    shares = {site: _mean(closest[site], "share_1_to_10") for site in sites}
    peaks = {site: _peaks(closest[site]) for site in sites}
    low = min(sites, key=lambda s: shares[s].value)
    ok = shares[low].value >= 50 and all(not missing for missing in peaks.values())
    report.row(
        "002-4",
        MATCH if ok else DIFFERS,
        shares[low],
        point="share_1_to_10_min",
        result="Fig. 7: % of slots with 1-10 processors (the lower site); "
        + "; ".join(
            f"{s}: {shares[s].value:.0f} %, powers of 2 not local maxima: {peaks[s] or 'none'}"
            for s in sites
        ),
        why=""
        if ok
        else "; ".join(f"{s}: {_sizes_text(closest[s])}" for s in sites)
        + ": 1-processor slots outnumber 2-processor ones, so 2 is no local maximum (4 to 64 "
        "are)"
        if shares[low].value >= 50
        else "fewer than half the slots have 1-10 processors",
    )
    for site in sites:
        exact_runs = by[(site, True, "calibrated", "hourly")]
        asked_runs = by[(site, False, "calibrated", "hourly")]
        # paired over sampling instants: the same hourly grid, the same phase
        later = [
            statistics.fmean(a - e for a, e in zip(ra["median_start_h"], re_["median_start_h"]))
            for ra, re_ in zip(asked_runs, exact_runs)
        ]
        duration = [
            100
            * (
                statistics.median(ra["median_duration_h"])
                / statistics.median(re_["median_duration_h"])
                - 1
            )
            for ra, re_ in zip(asked_runs, exact_runs)
        ]
        start_change, duration_change = mean_ci(later), mean_ci(duration)
        lo, hi = paper_value("002-5").band("duration_change_percent")
        ok = start_change.low > 0 and lo <= duration_change.value <= hi
        report.row(
            "002-5",
            MATCH if ok else DIFFERS,
            duration_change,
            point="duration_change_percent",
            result=f"Fig. 8: requested − exact estimates, {site}: median slot start later by "
            f"{start_change.text(2)} h (paired over instants); median duration change (%)",
            why="" if ok else "the median start is not later, or the duration moved > 25 %",
        )
    seconds = {site: by[(site, True, "calibrated", "hourly")][0]["seconds"] for site in sites}
    report.not_run(["002-6"], "")
    report.rows[-1].ours_text = ", ".join(f"{s}: {v:.1f} s" for s, v in seconds.items())
    report.rows[-1].why += (
        " Ours: one hourly-sampled replay with every advertisement, "
        f"{', '.join(f'{s} {v:.1f} s' for s, v in seconds.items())}."
    )


def _sizes_text(runs: Sequence[Mapping[str, Any]]) -> str:
    sizes: Dict[int, int] = {}
    for run in runs:
        for size, n in run["sizes"].items():
            sizes[int(size)] = sizes.get(int(size), 0) + int(n)
    total = sum(sizes.values())
    return ", ".join(f"{k} processors {100 * sizes.get(k, 0) / total:.1f} %" for k in (1, 2, 3))


def _peaks(runs: Sequence[Mapping[str, Any]]) -> List[int]:
    """Powers of two that are not local maxima of the exact-size histogram (all phases)."""
    sizes: Dict[int, int] = {}
    for run in runs:
        for size, n in run["sizes"].items():
            sizes[int(size)] = sizes.get(int(size), 0) + int(n)
    maxima = set(local_maxima(sizes))
    return [p for p in POWERS if p not in maxima]


def _gap_why(
    by: Mapping[Tuple[str, bool, str, str], List[Dict[str, Any]]], site: str, ours: Estimate
) -> str:
    """What moves the mean count, measured: every variant's mean, and the nearest one."""
    means = {
        key[1:]: statistics.fmean(run["mean_slots"] for run in runs)
        for key, runs in by.items()
        if key[0] == site
    }
    nearest = min(means, key=lambda key: abs(means[key] - THESIS_MEAN[site]))
    utilization = by[(site, *nearest)][0]["utilization"]

    def name(key: Tuple[bool, str, str]) -> str:
        return f"{'exact' if key[0] else 'requested'}/{key[1]}/{key[2]}"

    return (
        f"ours {ours.value:.1f} against {THESIS_MEAN[site]}. Measured by variant "
        "(estimates/load/sampling): "
        + ", ".join(f"{name(k)} {v:.1f}" for k, v in sorted(means.items()))
        + f". The nearest is {name(nearest)} ({means[nearest]:.1f}, utilization "
        f"{utilization:.0%}): load moves the count most, and the thesis' count and its stated "
        f"utilization are not both met by this log (SDSC's cleaned log runs at 83 % natively "
        f"against the thesis' 70 %; CTC's has 77,222 jobs against its 79,285). The "
        "band-cutting rule (horizontal bands here, Figure 2's leftover slots there) is not "
        "measured"
    )


def _variants(
    by: Mapping[Tuple[str, bool, str, str], List[Dict[str, Any]]], sites: Sequence[str]
) -> str:
    lines = [
        "| site | estimates | load | sampling | mean slots | utilization |",
        "|---|---|---|---|---|---|",
    ]
    for (site, exact, load, sampling), runs in sorted(by.items()):
        lines.append(
            f"| {site} | {'exact' if exact else 'requested'} | {load} | {sampling} | "
            f"{_mean(runs, 'mean_slots').text(3)} | {runs[0]['utilization']:.3f} |"
        )
    return "\n".join(lines) + (
        "\n\nThe thesis: CTC 27, SDSC 14, at 63 % and 70 % (exact estimates; sampling "
        '"periodically"). Utilization: the replay\'s whole-trace summary.\n'
    )


SETUP = """
- Sites: CTC-SP2 (cleaned log 3.1: 77,222 jobs, 430 processors) and SDSC-SP2 (4.2-cln,
  128); conservative backfilling; whole traces.
- Slots: `siteagent.core.slots.advertise` over the replay's own conservative schedule
  (`sim.snapshot.schedule_plan`), horizon now + 48 h or the last planned end + 5 min.
- Variants: exact or requested estimates × hourly sampling or every arrival × native load or
  calibrated to the thesis' 63 % / 70 % (whole-trace utilization; the knob found with exact
  estimates is used for both). The variant closest to the thesis' stated setup (exact,
  calibrated, hourly) is the one judged.
- Seeds: the phase of the hourly grid (phase s samples at s × 360 s + k h); the replay is
  deterministic, so sampling at every arrival has one run.
- Fig. 6's diagonal: slots ending exactly at now + 48 h (edge slots when the horizon is 48 h).
"""


def _figures(
    report: Report,
    by: Mapping[Tuple[str, bool, str, str], List[Dict[str, Any]]],
    sites: Sequence[str],
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 3, figsize=(17, 9))
    for site in sites:
        runs = by[(site, True, "calibrated", "hourly")]
        hist = {
            k: statistics.fmean(r["count_histogram"][k] for r in runs)
            for k in runs[0]["count_histogram"]
        }
        axes[0][0].plot(list(hist), list(hist.values()), marker="o", label=f"ours: {site}")
        axes[0][0].axvline(
            _bin_index(THESIS_MEAN[site]),
            linestyle=":",
            color="black" if site == "CTC" else "grey",
            label=f"thesis' mean, {site} ({THESIS_MEAN[site]})",
        )
        one = runs[0]
        axes[0][1].scatter(one["in_system"], one["counts"], s=3, alpha=0.3, label=site)
        scatter = one["scatter"]
        axes[0][2].scatter(
            [p[0] for p in scatter], [p[1] for p in scatter], s=3, alpha=0.4, label=f"{site}, exact"
        )
        sizes = {
            k: statistics.fmean(r["size_histogram"][k] for r in runs)
            for k in runs[0]["size_histogram"]
        }
        axes[1][0].plot(list(sizes), list(sizes.values()), marker="o", label=site)
        exact_sizes: Dict[int, int] = {}
        for run in runs:
            for size, n in run["sizes"].items():
                exact_sizes[int(size)] = exact_sizes.get(int(size), 0) + int(n)
        xs = [x for x in sorted(exact_sizes) if x <= 70]
        total = sum(exact_sizes.values())
        axes[1][1].bar(
            [x + (0.4 if site == "SDSC" else 0) for x in xs],
            [100 * exact_sizes[x] / total for x in xs],
            width=0.4,
            label=site,
        )
        asked = by[(site, False, "calibrated", "hourly")][0]["scatter"]
        axes[1][2].scatter(
            [p[0] for p in asked], [p[1] for p in asked], s=3, alpha=0.4, label=f"{site}, requested"
        )
    for power in POWERS:
        axes[1][1].axvline(power, linestyle=":", color="grey")
    axes[0][0].set(title="Fig. 4: slots advertised", xlabel="slots", ylabel="% of samples")
    axes[0][1].set(
        title="Fig. 5: slots vs tasks (phase 0)", xlabel="tasks in system", ylabel="slots"
    )
    axes[0][2].set(
        title="Fig. 6: start vs duration", xlabel="start (h from now)", ylabel="duration (h)"
    )
    axes[0][2].plot([0, 48], [48, 0], color="black", linewidth=0.8, label="start + duration = 48 h")
    axes[1][0].set(title="Fig. 7: processors per slot", xlabel="processors", ylabel="% of slots")
    axes[1][1].set(
        title="Fig. 7: exact sizes (powers of 2 dotted)", xlabel="processors", ylabel="% of slots"
    )
    axes[1][2].set(
        title="Fig. 8: requested estimates", xlabel="start (h from now)", ylabel="duration (h)"
    )
    for axis in axes.flat:
        axis.legend(fontsize="small")
    for axis in (axes[0][0], axes[1][0]):
        axis.tick_params(axis="x", rotation=70)
    figure.suptitle("Ch. 3: advertised slots (exact estimates, calibrated load, hourly)")
    save_figure(report, figure, "fig4-8")


def _bin_index(value: int) -> float:
    """Where ``value`` falls on the Fig. 4 axis (its bin's position)."""
    for index, (low, high) in enumerate(COUNT_BINS):
        if low <= value <= high:
            return float(index)
    return float(len(COUNT_BINS))
