"""The provisioning part's rows, figures and setup (ch. 4 and 7 against best effort).

Every figure is a ratio to best effort of the same workflow submitted at the same instant
(paired per sample): mean provisioned / mean best effort with a paired BCa interval
(``ratio_ci``); comparisons between settings are paired per sample too (the same seed and
instant, as the sweeps draw them).
"""

from __future__ import annotations

import functools
import math
import statistics
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from bench.repro.paper_values import paper_value
from bench.repro.report import Report
from bench.repro.singh.sites import judge_row, save_figure
from bench.repro.stats import Estimate, mean_ci, paired_change, ratio_ci
from bench.repro.verdicts import DIFFERS, MATCH, NOT_RUN, TREND

Records = List[Dict[str, Any]]
#: The sweeps each row needs.
NEEDS = {
    "002-7": "alpha",
    "002-8": "size",
    "002-9": "tasks",
    "002-10": "load",
    "002-11": "cybershake",
    "002-12": "sites",
    "002-28": "alpha",
    "002-29": "size",
    "002-30": "tasks",
    "002-31": "load",
    "002-32": "sites",
}


def _a(alpha: float) -> str:
    return str(float(alpha))


def values(records: Records, planner: str, alpha: float, name: str) -> List[float]:
    return [float(r[planner][_a(alpha)][name]) for r in records]


def best(records: Records, name: str) -> List[float]:
    return [float(r["best_effort"][name]) for r in records]


def ratio(records: Records, planner: str, alpha: float, name: str = "makespan_s") -> Estimate:
    return ratio_ci(values(records, planner, alpha, name), best(records, name))


def per_sample(
    records: Records, planner: str, alpha: float, name: str = "makespan_s"
) -> List[float]:
    return [p / b for p, b in zip(values(records, planner, alpha, name), best(records, name))]


def reduction(estimate: Estimate) -> Estimate:
    """A makespan ratio as the per cent it saves: 100 × (1 − ratio)."""
    return Estimate(
        100 * (1 - estimate.value),
        100 * (1 - estimate.high),
        100 * (1 - estimate.low),
        estimate.n,
        estimate.method,
        tuple(100 * (1 - x) for x in estimate.samples),
    )


def refused(sweeps: Mapping[str, Any]) -> int:
    return sum(
        outcome["refused_windows"]
        for sweep in sweeps.values()
        for records in sweep.samples.values()
        for record in records
        for planner in ("greedy", "genetic")
        for outcome in record.get(planner, {}).values()
    )


def add_rows(
    report: Report,
    sweeps: Mapping[str, Any],
    sites: Sequence[str],
    alphas: Sequence[float],
    quick: bool,
) -> None:
    for result_id, sweep in NEEDS.items():
        if sweep not in sweeps or (result_id in ("002-9", "002-30") and "CTC" not in sites):
            why = (
                "--quick runs SDSC's α sweep only"
                if quick
                else f"this run's --sweeps left out {sweep}"
            )
            report.row(result_id, NOT_RUN, why=why)
            continue
        ROWS[result_id](report, sweeps[sweep].samples, sites, alphas)
    report.section(
        "Plans the replay refused",
        (
            f"Every planned window was put into a fork of the replay as an advance reservation: "
            f"{refused(sweeps)} were refused over all runs (with exact estimates a plan made from "
            "the snapshot is always admissible; a refusal would be a plan the site cannot keep)."
        ),
    )


# -- ch. 4 --------------------------------------------------------------------------------------


def fig13(
    report: Report,
    s: Mapping[Tuple[Any, ...], Records],
    sites: Sequence[str],
    alphas: Sequence[float],
    planner: str = "genetic",
    rid: str = "002-7",
) -> None:
    for site in sites:
        records = s[(site,)]
        spans = {a: ratio(records, planner, a) for a in alphas}
        worst = max(alphas, key=lambda a: spans[a].high)
        ok = all(e.high < 1 for e in spans.values())
        report.row(
            rid,
            MATCH if ok else DIFFERS,
            spans[worst],
            point="makespan_ratio_max" if rid == "002-7" else None,
            result=f"Fig. {13 if rid == '002-7' else 52}: makespan / BE by α, {site}: "
            + ", ".join(f"{a}: {e.text(3)}" for a, e in spans.items()),
            why=""
            if ok
            else f"at α = {worst} the interval reaches 1: "
            + _why_makespan(records, planner, worst),
        )
        cost = ratio(records, planner, 1.0, "cost_su")
        judge_row(
            report,
            rid,
            cost,
            point="cost_ratio_alpha1",
            result=f"Fig. {13 if rid == '002-7' else 52}: cost / BE at α = 1, {site}",
            why=f"cost ratio {cost.text(4)}",
        )


def _why_makespan(records: Records, planner: str, alpha: float) -> str:
    """What makes the provisioned makespan long: its share of samples worse than BE."""
    worse = sum(
        p > b
        for p, b in zip(values(records, planner, alpha, "makespan_s"), best(records, "makespan_s"))
    )
    return (
        f"the plan is longer than best effort in {worse} of {len(records)} samples "
        "(mean BE wait per task is short at this load: see the JSON's samples)"
    )


def fig14(
    report: Report,
    s: Mapping[Tuple[Any, ...], Records],
    sites: Sequence[str],
    alphas: Sequence[float],
    planner: str = "genetic",
    rid: str = "002-8",
) -> None:
    for site in sites:
        ends = {n: s[(site, n)] for n in (100, 400)}
        change = paired_change(
            per_sample(ends[100], planner, 0.0), per_sample(ends[400], planner, 0.0)
        )
        cost = paired_change(
            per_sample(ends[100], planner, 0.0, "cost_su"),
            per_sample(ends[400], planner, 0.0, "cost_su"),
        )
        by_n = {n: ratio(s[(site, n)], planner, 0.0) for n in (100, 200, 300, 400)}
        if rid == "002-8":
            judge_row(
                report,
                rid,
                change=change,
                result=f"Fig. 14: makespan / BE at α = 0, 400 − 100 tasks, {site} "
                f"(cost / BE change {cost.text(2)}); by size "
                + ", ".join(f"{n}: {e.text(2)}" for n, e in by_n.items()),
            )
            continue
        better = all(
            ratio(s[(site, n)], planner, a).high < 1
            for n in (100, 200, 300, 400)
            for a in (0.0, 1.0)
        )
        close = all(
            abs(
                statistics.fmean(values(s[(site, n)], planner, 0.0, "makespan_s"))
                / statistics.fmean(values(s[(site, n)], planner, 1.0, "makespan_s"))
                - 1
            )
            <= 0.10
            for n in (100, 200, 300, 400)
        )
        apart = all(
            statistics.fmean(values(s[(site, n)], planner, 0.0, "cost_su"))
            / statistics.fmean(values(s[(site, n)], planner, 1.0, "cost_su"))
            >= 1.5
            for n in (100, 200, 300, 400)
        )
        ok = better and close and apart
        report.row(
            rid,
            TREND if ok else DIFFERS,
            by_n[400],
            result=f"Fig. 53: makespan / BE at α = 0 by size, {site}: "
            + ", ".join(f"{n}: {e.text(2)}" for n, e in by_n.items())
            + f"; 400 − 100 paired {change.text(2)}",
            why=""
            if ok
            else "; ".join(
                w
                for w, bad in (
                    ("not below BE at every size and α", not better),
                    ("α = 0 and α = 1 makespans more than 10 % apart", not close),
                    ("α = 0 and α = 1 costs less than 50 % apart", not apart),
                )
                if bad
            ),
        )


def fig15(
    report: Report,
    s: Mapping[Tuple[Any, ...], Records],
    sites: Sequence[str],
    alphas: Sequence[float],
    planner: str = "genetic",
    rid: str = "002-9",
) -> None:
    points = (
        [
            ("ctc3_makespan_a0", 3, 0.0, "makespan_s"),
            ("ctc3_makespan_a1", 3, 1.0, "makespan_s"),
            ("ctc3_cost_a0", 3, 0.0, "cost_su"),
            ("ctc3_cost_a1", 3, 1.0, "cost_su"),
            ("ctc30_makespan_a0", 30, 0.0, "makespan_s"),
            ("ctc30_makespan_a1", 30, 1.0, "makespan_s"),
            ("ctc30_cost_a0", 30, 0.0, "cost_su"),
            ("ctc30_cost_a1", 30, 1.0, "cost_su"),
        ]
        if rid == "002-9"
        else [
            ("ctc3_makespan_a0", 3, 0.0, "makespan_s"),
            ("ctc3_cost_a0", 3, 0.0, "cost_su"),
            ("ctc3_makespan_a1", 3, 1.0, "makespan_s"),
            ("ctc3_cost_a1", 3, 1.0, "cost_su"),
        ]
    )
    figure = 15 if rid == "002-9" else 54
    for point, cores, alpha, name in points:
        estimate = ratio(s[("CTC", cores)], planner, alpha, name)
        judge_row(
            report,
            rid,
            estimate,
            point=point,
            result=f"Fig. {figure}: CTC, {cores} processors, α = {alpha:g}, "
            f"{'makespan' if name == 'makespan_s' else 'cost'} / BE",
            why=f"measured {estimate.text(3)}: " + _task_why(s, cores, planner, alpha, name),
        )
    if rid == "002-30":
        small = ratio(s[("SDSC", 1)], planner, 0.0, "cost_su")
        judge_row(
            report,
            rid,
            small,
            point="sdsc_small_cost_a0",
            result="Fig. 54: SDSC, 1 processor, α = 0, cost / BE",
            why=f"measured {small.text(3)}: the fees of the earliest windows are smaller "
            "than the thesis' at this load",
        )
        return
    improving = []
    for site in sites:
        sizes = sorted(k[1] for k in s if k[0] == site)
        change = paired_change(
            per_sample(s[(site, sizes[0])], planner, 0.0),
            per_sample(s[(site, sizes[-1])], planner, 0.0),
        )
        improving.append((site, sizes, change))
    ok = all(c.high < 0 for _, _, c in improving)
    report.row(
        rid,
        TREND if ok else DIFFERS,
        improving[0][2],
        result="Fig. 15: makespan / BE at α = 0, largest − smallest tasks (paired): "
        + "; ".join(
            f"{site} {sizes[-1]} − {sizes[0]}: {c.text(2)}" for site, sizes, c in improving
        ),
        why="" if ok else "the ratio does not fall with task size on both sites",
    )


def _task_why(
    s: Mapping[Tuple[Any, ...], Records], cores: int, planner: str, alpha: float, name: str
) -> str:
    records = s[("CTC", cores)]
    be_h = statistics.fmean(best(records, "makespan_s")) / 3600
    ours_h = statistics.fmean(values(records, planner, alpha, "makespan_s")) / 3600
    return (
        f"BE makespan {be_h:.2f} h and ours {ours_h:.2f} h on average at CTC's 63 %; the "
        "ratio follows how long best-effort tasks of this size wait at this load"
    )


def fig16(
    report: Report,
    s: Mapping[Tuple[Any, ...], Records],
    sites: Sequence[str],
    alphas: Sequence[float],
    planner: str = "genetic",
    rid: str = "002-10",
) -> None:
    for site in sites:
        loads = sorted({k[1] for k in s if k[0] == site})
        largest = max(k[2] for k in s if k[0] == site)
        low, high = s[(site, loads[0], largest)], s[(site, loads[-1], largest)]
        change = paired_change(per_sample(low, planner, 0.5), per_sample(high, planner, 0.5))
        table = "; ".join(
            f"{round(100 * load)} %: "
            + ", ".join(
                f"{c}: {statistics.fmean(per_sample(s[(site, load, c)], planner, 0.5)):.2f}"
                for c in sorted({k[2] for k in s if k[0] == site})
            )
            for load in loads
        )
        judge_row(
            report,
            rid,
            change=change,
            result=f"Fig. {16 if rid == '002-10' else 55}: makespan / BE at α = 0.5, "
            f"{largest} processors, {round(100 * loads[-1])} % − {round(100 * loads[0])} % "
            f"load, {site}; by load and task size: {table}",
        )


def fig18(
    report: Report,
    s: Mapping[Tuple[Any, ...], Records],
    sites: Sequence[str],
    alphas: Sequence[float],
) -> None:
    loads = sorted(k[1] for k in s)
    be63 = mean_ci(best(s[("CTC", loads[0])], "makespan_s"))
    judge_row(
        report,
        "002-11",
        be63,
        point="be_makespan_63_s",
        result="Fig. 18: CyberShake best-effort makespan at 63 % (s)",
        why=f"measured {be63.text()} s on the cleaned CTC log at a calibrated 63 %",
    )
    for load, point in ((loads[0], "reduction_63_percent"), (loads[-1], "reduction_88_percent")):
        records = s[("CTC", load)]
        fee_free = reduction(ratio(records, "greedy", 1.0))
        adaptive = reduction(ratio(records, "greedy", 0.5))
        judge_row(
            report,
            "002-11",
            fee_free,
            point=point,
            result=f"Fig. 18: CyberShake makespan reduction (%) at {round(100 * load)} %, "
            f"greedy over fee-free windows (ch. 4's slots); adaptive prices, α = 0.5: "
            f"{adaptive.text(3)}",
            why=f"measured {fee_free.text(3)} %; BE "
            f"{statistics.fmean(best(records, 'makespan_s')) / 3600:.0f} h on average",
        )


def fig19(
    report: Report,
    s: Mapping[Tuple[Any, ...], Records],
    sites: Sequence[str],
    alphas: Sequence[float],
) -> None:
    counts = sorted(k[0] for k in s)
    by = {k: ratio(s[(k,)], "genetic", 0.5) for k in counts}
    for k, point in ((counts[0], "makespan_ratio_2_sites"), (counts[-1], "makespan_ratio_6_sites")):
        judge_row(
            report,
            "002-12",
            by[k],
            point=point,
            result=f"Fig. 19: makespan / BE with {k} sites (genetic, α = 0.5); all: "
            + ", ".join(f"{c}: {e.text(2)}" for c, e in by.items()),
            why=f"measured {by[k].text(3)}: BE at the most loaded sites "
            f"{statistics.fmean(best(s[(k,)], 'makespan_s')) / 3600:.1f} h on average",
        )


# -- ch. 7 --------------------------------------------------------------------------------------


def fig56(
    report: Report,
    s: Mapping[Tuple[Any, ...], Records],
    sites: Sequence[str],
    alphas: Sequence[float],
) -> None:
    counts = sorted(k[0] for k in s)
    be = [statistics.fmean(best(s[(k,)], "makespan_s")) for k in counts]
    ours = [statistics.fmean(values(s[(k,)], "greedy", 0.5, "makespan_s")) for k in counts]
    rho = _spearman(counts, be)
    slope = _slope(counts, ours) / statistics.fmean(ours)
    genetic = [statistics.fmean(values(s[(k,)], "genetic", 0.5, "makespan_s")) for k in counts]
    below = paired_change(
        [x for k in counts for x in values(s[(k,)], "genetic", 0.5, "makespan_s")],
        [x for k in counts for x in values(s[(k,)], "greedy", 0.5, "makespan_s")],
    )
    ok = rho <= -0.8 and abs(slope) <= 0.10 and below.high < 0
    report.row(
        "002-32",
        TREND if ok else DIFFERS,
        below,
        result="Fig. 56: greedy − genetic makespan (s, paired); BE makespan by sites "
        + ", ".join(f"{k}: {b / 3600:.1f} h" for k, b in zip(counts, be))
        + f" (Spearman {rho:.2f}); greedy "
        + ", ".join(f"{o / 3600:.1f}" for o in ours)
        + f" h (slope {100 * slope:+.1f} %/site); genetic "
        + ", ".join(f"{g / 3600:.1f}" for g in genetic)
        + " h",
        why=""
        if ok
        else "; ".join(
            w
            for w, bad in (
                (f"BE does not fall with sites (Spearman {rho:.2f})", rho > -0.8),
                (
                    f"the provisioned makespan moves {100 * slope:+.1f} % per site",
                    abs(slope) > 0.10,
                ),
                ("greedy is not below the genetic planner (paired)", below.high >= 0),
            )
            if bad
        ),
    )
    cost = ratio(s[(counts[0],)], "greedy", 0.5, "cost_su")
    judge_row(
        report,
        "002-32",
        cost,
        point="cost_ratio_2_sites",
        result=f"Fig. 56: cost / BE with {counts[0]} sites (greedy, α = 0.5)",
        why=f"measured {cost.text(3)}",
    )


def _spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    if len(xs) < 3:
        return math.nan
    rx = [sorted(xs).index(x) for x in xs]
    ry = [sorted(ys).index(y) for y in ys]
    return statistics.correlation(rx, ry)


def _slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


ROWS = {
    "002-7": fig13,
    "002-8": fig14,
    "002-9": fig15,
    "002-10": fig16,
    "002-11": fig18,
    "002-12": fig19,
    # ch. 7's greedy planner, judged as ch. 4's genetic one
    "002-28": functools.partial(fig13, planner="greedy", rid="002-28"),
    "002-29": functools.partial(fig14, planner="greedy", rid="002-29"),
    "002-30": functools.partial(fig15, planner="greedy", rid="002-30"),
    "002-31": functools.partial(fig16, planner="greedy", rid="002-31"),
    "002-32": fig56,
}


# -- figures ------------------------------------------------------------------------------------


def figures(
    report: Report, sweeps: Mapping[str, Any], sites: Sequence[str], alphas: Sequence[float]
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.repro.plots import draw_replica

    def thesis(rid: str, *points: Tuple[float, str]) -> List[Tuple[float, ...]]:
        entry = paper_value(rid)
        out: List[Tuple[float, ...]] = []
        for x, point in points:
            low, high = entry.band(point)
            value = entry.value(point)
            finite = [b for b in (low, high) if math.isfinite(b)]
            out.append((x, value, max((abs(b - value) for b in finite), default=0.0)))
        return out

    if "alpha" in sweeps:
        s = sweeps["alpha"].samples
        figure, axes = plt.subplots(len(sites), 2, figsize=(13, 4.5 * len(sites)), squeeze=False)
        for row, site in enumerate(sites):
            for column, name in enumerate(("makespan_s", "cost_su")):
                draw_replica(
                    axes[row][column],
                    {
                        p: [(a, ratio(s[(site,)], p, a, name)) for a in alphas]
                        for p in ("genetic", "greedy")
                    },
                    {"thesis: cost = BE at α = 1": [(1.0, 1.0)]}
                    if name == "cost_su"
                    else {"thesis: below 1 for every α": [(a, 1.0) for a in alphas]},
                    "α",
                    f"{'makespan' if column == 0 else 'cost'} / best effort",
                    f"{site}: Figs. 13 (genetic) and 52 (greedy)",
                )
        save_figure(report, figure, "fig13-52-alpha")
    if "size" in sweeps:
        s = sweeps["size"].samples
        figure, axes = plt.subplots(len(sites), 2, figsize=(13, 4.5 * len(sites)), squeeze=False)
        for row, site in enumerate(sites):
            for column, name in enumerate(("makespan_s", "cost_su")):
                draw_replica(
                    axes[row][column],
                    {
                        f"{p}, α = {a:g}": [(n, ratio(s[(site, n)], p, a, name)) for n in SIZES_]
                        for p in ("genetic", "greedy")
                        for a in (0.0, 1.0)
                    },
                    {},
                    "tasks",
                    f"{'makespan' if column == 0 else 'cost'} / best effort",
                    f"{site}: Figs. 14 and 53",
                )
        save_figure(report, figure, "fig14-53-size")
    if "tasks" in sweeps:
        s = sweeps["tasks"].samples
        figure, axes = plt.subplots(len(sites), 2, figsize=(13, 4.5 * len(sites)), squeeze=False)
        for row, site in enumerate(sites):
            sizes = sorted(k[1] for k in s if k[0] == site)
            for column, name in enumerate(("makespan_s", "cost_su")):
                paper: Dict[str, List[Tuple[float, ...]]] = {}
                if site == "CTC":
                    kind = "makespan" if column == 0 else "cost"
                    paper = {
                        "thesis, Fig. 15": thesis(
                            "002-9",
                            (3, f"ctc3_{kind}_a0"),
                            (3, f"ctc3_{kind}_a1"),
                            (30, f"ctc30_{kind}_a0"),
                            (30, f"ctc30_{kind}_a1"),
                        ),
                        "thesis, Fig. 54": thesis(
                            "002-30", (3, f"ctc3_{kind}_a0"), (3, f"ctc3_{kind}_a1")
                        ),
                    }
                draw_replica(
                    axes[row][column],
                    {
                        f"{p}, α = {a:g}": [(c, ratio(s[(site, c)], p, a, name)) for c in sizes]
                        for p in ("genetic", "greedy")
                        for a in (0.0, 1.0)
                    },
                    paper,
                    "mean processors per task",
                    f"{'makespan' if column == 0 else 'cost'} / best effort",
                    f"{site}: Figs. 15 and 54",
                )
        save_figure(report, figure, "fig15-54-task-size")
    if "load" in sweeps:
        s = sweeps["load"].samples
        figure, axes = plt.subplots(len(sites), 2, figsize=(13, 4.5 * len(sites)), squeeze=False)
        for row, site in enumerate(sites):
            loads = sorted({k[1] for k in s if k[0] == site})
            sizes = sorted({k[2] for k in s if k[0] == site})
            for column, planner in enumerate(("genetic", "greedy")):
                draw_replica(
                    axes[row][column],
                    {
                        f"{c} processors": [
                            (100 * load, ratio(s[(site, load, c)], planner, 0.5)) for load in loads
                        ]
                        for c in sizes
                    },
                    {},
                    "utilization (%)",
                    "makespan / best effort",
                    f"{site}, {planner}, α = 0.5: Fig. {16 if planner == 'genetic' else 55}",
                )
        save_figure(report, figure, "fig16-55-load")
    if "cybershake" in sweeps:
        s = sweeps["cybershake"].samples
        loads = sorted(k[1] for k in s)
        figure, axis = plt.subplots(figsize=(7, 4.5))
        draw_replica(
            axis,
            {
                "best effort": [
                    (100 * load, mean_ci([x / 3600 for x in best(s[("CTC", load)], "makespan_s")]))
                    for load in loads
                ],
                "greedy, fee-free windows": [
                    (
                        100 * load,
                        mean_ci(
                            [
                                x / 3600
                                for x in values(s[("CTC", load)], "greedy", 1.0, "makespan_s")
                            ]
                        ),
                    )
                    for load in loads
                ],
                "greedy, α = 0.5": [
                    (
                        100 * load,
                        mean_ci(
                            [
                                x / 3600
                                for x in values(s[("CTC", load)], "greedy", 0.5, "makespan_s")
                            ]
                        ),
                    )
                    for load in loads
                ],
            },
            {"thesis: best effort at 63 %": [(63, 476811 / 3600, 0.35 * 476811 / 3600)]},
            "utilization (%)",
            "makespan (h)",
            "CyberShake on CTC: Fig. 18",
        )
        save_figure(report, figure, "fig18-cybershake")
    if "sites" in sweeps:
        s = sweeps["sites"].samples
        counts = sorted(k[0] for k in s)
        figure, axes = plt.subplots(1, 2, figsize=(13, 4.5))
        draw_replica(
            axes[0],
            {
                "best effort": [
                    (k, mean_ci([x / 3600 for x in best(s[(k,)], "makespan_s")])) for k in counts
                ],
                **{
                    p: [
                        (k, mean_ci([x / 3600 for x in values(s[(k,)], p, 0.5, "makespan_s")]))
                        for k in counts
                    ]
                    for p in ("genetic", "greedy")
                },
            },
            {},
            "sites",
            "makespan (h)",
            "Figs. 19 and 56",
        )
        draw_replica(
            axes[1],
            {p: [(k, ratio(s[(k,)], p, 0.5)) for k in counts] for p in ("genetic", "greedy")},
            {
                "thesis, Fig. 19": thesis(
                    "002-12", (2, "makespan_ratio_2_sites"), (6, "makespan_ratio_6_sites")
                )
            },
            "sites",
            "makespan / best effort",
            "Fig. 19 as ratios",
        )
        save_figure(report, figure, "fig19-56-sites")


SIZES_ = (100, 200, 300, 400)


def setup(seeds: int, per: int, other: int, few: int, chosen: Sequence[str], quick: bool) -> str:
    return f"""
- Sites: CTC-SP2 (430 processors) and SDSC-SP2 (128), exact run times as estimates,
  conservative backfilling, each replayed whole at a calibrated utilization (whole-trace
  best-effort utilization within one point; one calibration per load, its overlay draws shared
  by the seeds): 63 % / 70 % (the thesis' traces alone) unless a sweep sets another.
- Workflow: the thesis' generator (`siteagent.client.generators.layered`): 100 tasks on 10
  levels (√n levels for n tasks), run times uniform in 500-1,500 s, cores uniform in
  [1, 2m − 1] for a mean m (22 on CTC, 6 on SDSC unless swept), two parents per task. One
  instance per seed, drawn by (sizes, seed). CyberShake: Table 2 exactly, 8,039 tasks.
- Samples: {seeds} seeds; submission instants uniform after a week of warm-up (and before
  the trace's last 3 days, 30 for CyberShake), drawn by (sites, k, seed): {per} per seed in
  the α sweeps, {other} in the size, task-size and load sweeps, {few} for CyberShake and several
  sites (the spec asks 50 / 20 / 20 / 10: `--submissions 50`; this machine, shared by
  eight engineers, gave each worker a tenth of a core). Every approach plans the same
  instance at the same instant.
- Best effort: `siteagent.sim.dag.run_just_in_time` on a fork of the replay (ready tasks in
  HEFT order, submitted the instant their parents end; across sites to the one with the fewest
  running + queued jobs, data 250 s on average between sites). Cost Σ cores × run time at
  1 SU per core-hour, each job to the cent.
- Ch. 4: `client.genetic.pareto_plans` (NSGA-II, population 100, 10 generations, two-point
  crossover, 1/n bit flips) over the slots the replay's schedule advertises (c = 1, f = 0),
  the plan chosen by eq. 15. The thesis uses MOGA with fitness sharing (sigma_share 0.041);
  NSGA-II keeps diversity by crowding instead.
- Ch. 7: `client.greedy.provision` over each site's priced alternatives (form 19, up to 100
  starts per query, c = 1 plus the externality fee), holding each task's window before the
  next. CyberShake is planned with the greedy planner only: at α = 1 it takes fee-free windows
  (the holes of ch. 4's model, no queued job delayed) and stands in for ch. 4's MOGA, whose
  search over 8,039 tasks is out of this run's time (about 1,000 schedules of 8,039 tasks per
  plan); α = 0.5 is ch. 7's trade-off.
- Ratios: mean provisioned / mean best effort over all samples, BCa interval with the pairs
  resampled together; changes between settings paired per sample (same seed and instant).
- Sweeps run: {", ".join(chosen)}.
""" + (
        "- `--quick`: SDSC's first 40 days, 2 seeds, 3 instants each, α ∈ {0, 1}.\n"
        if quick
        else ""
    )
