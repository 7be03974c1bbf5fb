"""Ch. 6: virtual (VAR) against advance reservations (AR), on a replayed production queue.

Each trial stands at an instant T of the replay and asks for each of the thesis' 12 shapes
({32, 64} nodes × {1, 4} h × start in {1, 4, 8} h) a reservation of n nodes over [S, S + D):

- **AR**: the site's price for that window (form 17, ch. 5's externality fee over the
  conservative schedule of the queue at T); a window that collides with running work or a
  reservation is refused (a failure). Normalized cost f / (n·D).
- **VAR**: a job submitted to the queue early enough, asking D plus the lead, so that it is
  running by S. When to submit comes from the queue's own history up to T (the waits of the
  jobs that started, binned as the agent bins them, 500 most recent per bin): by the thesis'
  scan (Figure 33: every 30 s, the submission with the highest share of past waits within the
  lead, for a job asking D + lead) or by the project's closed form (``var.latest_submission``:
  the bin's QBETS bound at q = 0.75 or 0.95). The job is then submitted into a fork of the
  replay (``Simulator.submit``) and the fork run until S: it succeeds if it started at T2 ≤ S,
  at normalized cost (S − T2)/D (it idles until S).
- **combined** (Figure 45, p = 0.1): from the AR and scan-VAR outcomes of the same trial, as
  the thesis simulated it from its recorded data.
"""

from __future__ import annotations

import argparse
import bisect
import functools
import math
import statistics
import time
from decimal import Decimal
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from bench.repro.options import Options
from bench.repro.report import Report
from bench.repro.seeds import uniform
from bench.repro.singh.sites import (
    DAY_S,
    HOUR_S,
    NATIVE,
    SITES,
    interval_why,
    replay,
    save_figure,
    span_s,
    sweep,
)
from bench.repro.stats import Estimate, paired_change
from bench.repro.verdicts import DIFFERS, MATCH, TREND
from siteagent.client.var import latest_submission, scan_submission
from siteagent.core.engines import Policy
from siteagent.core.machine import Task
from siteagent.core.qbets import BoundSettings
from siteagent.core.waits import QueueWait, WaitTable, wait_table
from siteagent.pricing import ExternalityFee, FlatPrice, Pricing, Refused
from siteagent.pricing.base import Window
from siteagent.protocol.models import WaitHistory
from siteagent.sim.simulator import Simulator
from siteagent.sim.snapshot import snapshot_of

NODES = (32, 64)
DURATIONS_H = (1, 4)
STARTS_H = (1, 4, 8)
#: Figure 45's cancellation penalty factor.
PENALTY = 0.1
QUANTILES = (0.75, 0.95)
WARMUP_DAYS = 7


def shapes() -> List[Tuple[int, int, int]]:
    """(nodes, duration h, start in h) in the thesis' order."""
    return [(n, d, s) for n in NODES for d in DURATIONS_H for s in STARTS_H]


def shape_key(shape: Tuple[int, int, int]) -> str:
    return f"{shape[0]}n-{shape[1]}h-start{shape[2]}h"


def trial_times(site: str, seed: int, days: int) -> List[int]:
    """One instant per day for ``days`` consecutive days from a day drawn by the seed (after
    a week of warm-up), each at a time of day drawn by (site, day, seed)."""
    last_day = span_s(site) // DAY_S - days - 1
    first = WARMUP_DAYS + int(uniform("var-days", site, seed) * (last_day - WARMUP_DAYS))
    return [
        (first + day) * DAY_S + int(uniform("var-time", [site, day], seed) * DAY_S)
        for day in range(days)
    ]


class History:
    """The waits of the jobs the replay has started: ``on_start`` callback."""

    def __init__(self) -> None:
        self.waits: List[QueueWait] = []

    def __call__(self, task: Task) -> None:
        assert task.start is not None
        self.waits.append(
            QueueWait(str(task.key), task.size, task.estimate, task.submit, task.start)
        )

    def table(self) -> WaitTable:
        # the bins' statistics want epoch-like times above 0: shift by one second
        return wait_table(
            (
                QueueWait(w.job_id, w.cores, w.walltime, w.submit + 1, w.start + 1)
                for w in self.waits
            ),
            bounds=BoundSettings(window=500),
        )


def empirical(table: WaitTable) -> Callable[[int, int, int], float]:
    """P(wait ≤ x) for a job of (units, walltime): the share of its bin's 500 most recent
    waits that were at most x (0 for an empty bin)."""
    recent: Dict[Tuple[int, int], List[int]] = {}

    def bin_of(units: int, walltime: int) -> Tuple[int, int]:
        for i, b in enumerate(table.bins):
            in_units = b.cores_lo <= units and (b.cores_hi is None or units <= b.cores_hi)
            in_wall = walltime > b.walltime_lo and (
                b.walltime_hi is None or walltime <= b.walltime_hi
            )
            if in_units and in_wall:
                return (i, 0)
        return (-1, 0)

    def probability(units: int, walltime: int, wait: int) -> float:
        key = bin_of(units, walltime)
        if key not in recent:
            waits = [] if key[0] < 0 else sorted(table.bins[key[0]].waits[-500:])
            recent[key] = waits
        waits = recent[key]
        return bisect.bisect_right(waits, wait) / len(waits) if waits else 0.0

    return probability


def realize(
    simulator: Simulator, units: int, submit_at: int, walltime: int, start_by: int
) -> Optional[int]:
    """Submit a job of ``units`` asking ``walltime`` at ``submit_at`` into a fork of the
    replay; when it started, if by ``start_by`` (None: not by then)."""
    fork = simulator.fork()
    fork.advance_to(submit_at)
    task = Task(("var", submit_at, units, walltime), units, walltime, submit_at, walltime)
    fork.submit(task)
    fork.advance_to(start_by)
    return task.start if task.start is not None and task.start <= start_by else None


def combined(
    ar_fee: Optional[float], var_start: Optional[int], start_by: int, units: int, duration: int
) -> Tuple[bool, Optional[float]]:
    """Figure 45 with penalty p: (success, normalized cost)."""
    base = units * duration / HOUR_S
    if ar_fee is None:  # AR refused: VAR is the only way
        if var_start is None:
            return False, None
        return True, (start_by - var_start) / duration
    if ar_fee == 0 or var_start is None:
        return True, ar_fee / base
    var_cost = units * (start_by - var_start) / HOUR_S
    if var_cost + PENALTY * ar_fee <= ar_fee:
        return True, (var_cost + PENALTY * ar_fee) / base
    return True, ar_fee / base


def var_run(config: Mapping[str, Any]) -> Dict[str, Any]:
    """All trials of one seed on one site (a sweep configuration): ``site``, ``seed``,
    ``days``; per trial and shape, the AR, VAR and combined outcomes."""
    began = time.perf_counter()
    site = SITES[config["site"]]
    seed = int(config["seed"])
    history = History()
    simulator = replay(site.name, NATIVE, exact=False, on_start=history)
    pricing = Pricing(FlatPrice(Decimal(1)), ExternalityFee(Decimal(1)), Policy.CONSERVATIVE)
    trials = []
    for t in trial_times(site.name, seed, int(config["days"])):
        simulator.advance_to(t)
        table = history.table()
        waits = WaitHistory(**table.to_json())
        probability = empirical(table)
        context = pricing.context(snapshot_of(simulator))
        outcomes: Dict[str, Any] = {}
        for shape in shapes():
            units, hours, start_in = shape
            duration, start_by = hours * HOUR_S, t + start_in * HOUR_S
            try:
                price = pricing.price(context, Window(start_by, units, duration))
                fee: Optional[float] = float(price.fee)
            except Refused:
                fee = None
            chance_of = functools.partial(probability, units)
            scan, chance = scan_submission(chance_of, duration, start_by, t)
            scan_start = realize(simulator, units, scan.submit_at, scan.walltime, start_by)
            record: Dict[str, Any] = {
                "ar_fee": fee,
                "ar_cost": None if fee is None else fee / (units * hours),
                "scan_submit_s": scan.submit_at - t,
                "scan_probability": chance,
                "scan_start_s": None if scan_start is None else scan_start - t,
                "scan_cost": None if scan_start is None else (start_by - scan_start) / duration,
            }
            for q in QUANTILES:
                found = latest_submission(waits, units, duration, start_by, q, t)
                started = None
                if found is not None:
                    started = realize(simulator, units, found.submit_at, found.walltime, start_by)
                record[f"q{q}_cost"] = None if started is None else (start_by - started) / duration
                record[f"q{q}_planned"] = found is not None
            success, cost = combined(fee, scan_start, start_by, units, duration)
            record["combined_success"] = success
            record["combined_cost"] = cost
            if shape == (32, 4, 4):
                record["p_within_4h"] = probability(units, duration, 4 * HOUR_S)
            outcomes[shape_key(shape)] = record
        trials.append({"t": t, "queued": len(simulator.queued), "shapes": outcomes})
    return {"trials": trials, "seconds": round(time.perf_counter() - began, 2)}


# -- the part -----------------------------------------------------------------------------------

ARMS = ("scan", "q0.75", "q0.95", "ar", "combined")


def _outcomes(trials: Sequence[Mapping[str, Any]], key: str) -> Dict[str, List[Optional[float]]]:
    """Per arm, the normalized cost of each trial of one shape (None: a failure)."""
    out: Dict[str, List[Optional[float]]] = {arm: [] for arm in ARMS}
    for trial in trials:
        record = trial["shapes"][key]
        out["scan"].append(record["scan_cost"])
        out["q0.75"].append(record["q0.75_cost"])
        out["q0.95"].append(record["q0.95_cost"])
        out["ar"].append(record["ar_cost"])
        out["combined"].append(record["combined_cost"] if record["combined_success"] else None)
    return out


def _paired(a: Sequence[Optional[float]], b: Sequence[Optional[float]]) -> Optional[Estimate]:
    """b − a over the trials where both succeeded."""
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    return paired_change([x for x, _ in pairs], [y for _, y in pairs]) if len(pairs) > 1 else None


def _rate(values: Sequence[Optional[float]]) -> float:
    return sum(v is not None for v in values) / len(values) if values else math.nan


def part(report: Report, options: Options, args: argparse.Namespace) -> None:
    """Ch. 6: rows 002-23 ... 002-27 and Figs. 38-49 as bar charts by shape."""
    sites = ("Thunder",) if options.quick else ("Thunder", "BLUE")
    days = 1 if options.quick else 30
    plan = [(site, seed) for site in sites for seed in options.seed_list]
    runs = sweep(
        options,
        args,
        var_run,
        [{"site": site, "seed": seed, "days": days} for site, seed in plan],
        "singh var",
    )
    trials: Dict[str, List[Dict[str, Any]]] = {site: [] for site in sites}
    for (site, _), run in zip(plan, runs):
        trials[site].extend(run["trials"])
    report.data["var"] = [{"site": s, "seed": seed, **r} for (s, seed), r in zip(plan, runs)]
    keys = [shape_key(shape) for shape in shapes()]
    summary = {site: {key: _outcomes(trials[site], key) for key in keys} for site in sites}
    p4 = [t["shapes"][shape_key((32, 4, 4))]["p_within_4h"] for s in sites for t in trials[s]]
    report.not_run(["002-23"], "")
    report.rows[-1].why += (
        f" Ours (the replays' own history, empirical share of waits): P(32 nodes × 4 h starts "
        f"within 4 h) {statistics.fmean(p4):.2f} on average over {len(p4)} trials "
        "(thesis 0.38 on NCSA)."
    )
    for site in sites:
        idle = sum(t["queued"] == 0 for t in trials[site]) / len(trials[site])
        gaps = {key: _paired(summary[site][key]["ar"], summary[site][key]["scan"]) for key in keys}
        below = [k for k, g in gaps.items() if g is not None and g.high < 0]
        first = gaps[keys[0]]
        report.row(
            "002-24",
            TREND if len(below) == len(keys) else DIFFERS,
            first,
            result=f"Figs. 38/41: VAR (scan) − AR normalized cost, {site}, per shape: "
            + "; ".join(f"{k}: {g.text(2) if g else '-'}" for k, g in gaps.items()),
            why=""
            if len(below) == len(keys)
            else f"VAR below AR in {len(below)} of {len(keys)} shapes. Measured: the queue was "
            f"empty at {idle:.0%} of the trial instants, where AR costs nothing (no queued job "
            "to delay) and the scan, whose chance grows with the lead, submits at once and "
            "idles until the start",
        )
        ar_nodes = []
        var_nodes = []
        for d in DURATIONS_H:
            for s in STARTS_H:
                small, large = (
                    summary[site][shape_key((32, d, s))],
                    summary[site][shape_key((64, d, s))],
                )
                ar_nodes += [
                    (x, y)
                    for x, y in zip(small["ar"], large["ar"])
                    if x is not None and y is not None
                ]
                var_nodes += [
                    (x, y)
                    for x, y in zip(small["scan"], large["scan"])
                    if x is not None and y is not None
                ]
        ar_change = paired_change([x for x, _ in ar_nodes], [y for _, y in ar_nodes])
        var_change = paired_change([x for x, _ in var_nodes], [y for _, y in var_nodes])
        report.row(
            "002-24",
            TREND if ar_change.low > 0 else DIFFERS,
            ar_change,
            result=f"Figs. 38/41: AR cost 64 − 32 nodes (normalized, paired by trial), {site}",
            why="" if ar_change.low > 0 else interval_why(ar_change),
        )
        same = var_change.low <= 0 <= var_change.high
        report.row(
            "002-24",
            MATCH if same else DIFFERS,
            var_change,
            result=f"Figs. 38/41: VAR normalized cost 64 − 32 nodes (the thesis: the same), {site}",
            why="" if same else "the paired change excludes 0",
        )
        rates = {
            key: (_rate(summary[site][key]["ar"]), _rate(summary[site][key]["scan"]))
            for key in keys
        }
        ok = all(ar >= v for ar, v in rates.values())
        success = [
            (1.0 if a is not None else 0.0, 1.0 if v is not None else 0.0)
            for key in keys
            for a, v in zip(summary[site][key]["ar"], summary[site][key]["scan"])
        ]
        pooled = paired_change([v for _, v in success], [a for a, _ in success])
        report.row(
            "002-25",
            TREND if ok and pooled.low > 0 else (MATCH if ok else DIFFERS),
            pooled,
            result=f"Figs. 39/43: AR − VAR success rate (pooled over shapes), {site}; per shape "
            "AR/VAR: " + "; ".join(f"{k}: {a:.0%}/{v:.0%}" for k, (a, v) in rates.items()),
            why="" if ok else "VAR succeeds more often than AR for some shape",
        )
        cheaper = {}
        for key in keys:
            both = [
                (a, v)
                for a, v in zip(summary[site][key]["ar"], summary[site][key]["scan"])
                if a is not None and v is not None
            ]
            cheaper[key] = sum(a < v for a, v in both) / len(both) if both else math.nan
        expected = {key: ("AR" if key.startswith("32n-1h") else "VAR") for key in keys}
        agree = [k for k in keys if (cheaper[k] > 0.5) == (expected[k] == "AR")]
        report.row(
            "002-26",
            MATCH if len(agree) == len(keys) else DIFFERS,
            f"{len(agree)}/{len(keys)} shapes",
            result=f"Figs. 40/44: share of trials where AR is cheaper, {site}: "
            + "; ".join(f"{k}: {cheaper[k]:.0%}" for k in keys),
            why=""
            if len(agree) == len(keys)
            else "the majority disagrees with the thesis for shapes "
            + ", ".join(k for k in keys if k not in agree)
            + f" (AR costs nothing at the {idle:.0%} of instants with an empty queue)",
        )
        violations = 0
        for key in keys:
            for t in trials[site]:
                record = t["shapes"][key]
                if record["ar_cost"] is not None and record["combined_success"]:
                    violations += record["combined_cost"] > record["ar_cost"] + 1e-9
                if not record["combined_success"] and (
                    record["ar_cost"] is not None or record["scan_cost"] is not None
                ):
                    violations += 1
        target = _paired(
            summary[site]["32n-1h-start8h"]["scan"], summary[site]["32n-1h-start8h"]["combined"]
        )
        ok = violations == 0 and target is not None and target.high < 0
        report.row(
            "002-27",
            TREND if ok else DIFFERS,
            target,
            result=f"Figs. 46-49: combined − VAR cost at 32 nodes / 1 h / 8 h, {site}; "
            f"invariants (combined ≤ AR, success ≥ both) broken in {violations} trial-shapes",
            why=""
            if ok
            else (
                "an invariant is broken"
                if violations
                else "the combined scheme is not below VAR there (paired)"
            ),
        )
    _figure(report, summary, sites, keys)
    report.section("Ch. 6 setup (VAR)", _setup(days, options.seeds))
    report.section("Ch. 6: every arm by shape", _table(summary, sites, keys))


def _mean_or_nan(values: Sequence[Optional[float]]) -> float:
    done = [v for v in values if v is not None]
    return statistics.fmean(done) if done else math.nan


def _table(
    summary: Mapping[str, Mapping[str, Mapping[str, List[Optional[float]]]]],
    sites: Sequence[str],
    keys: Sequence[str],
) -> str:
    lines = [
        "| site | shape | " + " | ".join(f"{a} cost / success" for a in ARMS) + " |",
        "|---|---|" + "---|" * len(ARMS),
    ]
    for site in sites:
        for key in keys:
            cells = [
                f"{_mean_or_nan(summary[site][key][a]):.2f} / {_rate(summary[site][key][a]):.0%}"
                for a in ARMS
            ]
            lines.append(f"| {site} | {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + (
        "\n\nCost: normalized (VAR: idle time / duration; AR: fee / (nodes × duration)), mean "
        "over the trials where the arm succeeded. q0.75 / q0.95: the closed form "
        "(`var.latest_submission`) at that quantile of the bin's QBETS bounds.\n"
    )


def _figure(
    report: Report,
    summary: Mapping[str, Mapping[str, Mapping[str, List[Optional[float]]]]],
    sites: Sequence[str],
    keys: Sequence[str],
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(sites), 2, figsize=(16, 5 * len(sites)), squeeze=False)
    width = 0.16
    for row, site in enumerate(sites):
        for index, arm in enumerate(ARMS):
            xs = [k + index * width for k in range(len(keys))]
            axes[row][0].bar(
                xs, [_mean_or_nan(summary[site][key][arm]) for key in keys], width=width, label=arm
            )
            axes[row][1].bar(
                xs, [100 * _rate(summary[site][key][arm]) for key in keys], width=width, label=arm
            )
        for column, label in ((0, "normalized cost"), (1, "success (%)")):
            axis = axes[row][column]
            axis.set_xticks([k + 2 * width for k in range(len(keys))])
            axis.set_xticklabels(keys, rotation=60, fontsize="small")
            axis.set(
                ylabel=label,
                title=f"{site}: Figs. 38/41/46/48" if column == 0 else f"{site}: Figs. 39/43/47/49",
            )
            axis.legend(fontsize="small")
    save_figure(report, figure, "fig38-49")


def _setup(days: int, seeds: int) -> str:
    return f"""
- Stand-ins for NCSA's TeraGrid queue (the spec's part 2): LLNL Thunder (1,002 four-way
  nodes) and SDSC-BLUE (144 eight-way nodes), native load, their requested estimates, replayed
  in whole nodes (a job of p processors holds ⌈p / cores per node⌉ nodes), conservative
  backfilling.
- Trials: {days} consecutive days from a day drawn by the seed (after a week), one instant a
  day at a time drawn by (site, day, seed); {seeds} seeds; the 12 shapes at each.
- History: the waits of every job the replay started before the instant, binned as the agent
  bins them (1, 2-4, 5-16, 17-64, 65-256, 257+ nodes × ≤1, ≤4, ≤12, ≤24, >24 h asked), the 500
  most recent of a bin. The thesis' QBETS is replaced by the share of those waits within the
  lead (the scan) and by the bin's QBETS bounds (`core/qbets.py`, the closed form).
- AR: `Pricing(FlatPrice(1), ExternalityFee(1), conservative).price` of [S, S + D) on the
  snapshot at the instant (form 17). VAR jobs run in a fork of the replay
  (`Simulator.fork`, `Simulator.submit`) until S.
- Combined (Figure 45, p = 0.1): from each trial's AR and scan-VAR outcomes, as the thesis
  computed it from its recorded data (the AR window is not in the VAR job's replay).
"""
