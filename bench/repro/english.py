"""The English auction with absolute priorities (Baranov et al. 2018), reproduced in
simulated time: the project's own auctioneer and its sites' own bidding on simulated clusters
(testbed/sims/english.py), the auction's length T_a = k x the mean run time swept from 0 to 1.

Arms, on the same streams (paired seeds):

- **paper**: sites bid only cores free now or held by running jobs of lower absolute priority
  (``auctions.mode: now``) and preempt; a job nobody bid for is auctioned again when a site
  gives capacity back;
- **project**: the project's own mechanism, sites bidding future windows (the default
  ``auctions.mode: future``), won windows reserved, no preemption;
- **greedy**: no auction; each job sent on arrival to the site whose plan (preemptive) starts
  it soonest once its input is there.

Setup (docs/english-auction.md §4): 4 sites of 4, 6, 6 and 8 nodes of 8 cores; local Poisson streams
of 1-2-node jobs at the lowest priority keeping each site about half busy; a global Poisson
stream of 400 jobs of 1, 2 or 4 nodes, priorities uniform over 1-4, total offered load 0.85;
inputs on a random site, U(0, 0.1) units to reach the others. The paper's figures: Fig. 4 (Tw
against T_a by priority), Fig. 5 (share of sites taking part against T_a for mean run times of
1, 2 and 3 units). ``python -m bench english`` is the same auction between real agents.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Sequence, Tuple

from bench.common import ROOT
from bench.repro.common import (
    DIFFERS,
    MATCH,
    TREND,
    Estimate,
    Report,
    add_options,
    draw_replica,
    mean_ci,
    options_from,
    paired_change,
    rng,
)
from bench.repro.sweep import ResultCache
from siteagent.config.schema import BidMode
from siteagent.core.machine import Task
from testbed.sims.english import (
    ACCEPT_WINDOW_S,
    GlobalJob,
    JobRecord,
    SiteSpec,
    World,
    lognormal_run,
    make_sites,
)

NODES = (4, 6, 6, 8)
CORES_PER_NODE = 8
LOCAL_NODES = (1, 2)
GLOBAL_NODES = (1, 2, 4)
PRIORITIES = (1, 2, 3, 4)
LOCAL_LOAD = 0.5
OFFERED_LOAD = 0.85
#: the lognormal spread of run times (the paper does not say; NPB runs vary little)
SIGMA = 0.5
#: an input's transfer to another site: U(0, TRANSFER_UNITS) units
TRANSFER_UNITS = 0.1
JOBS = 400
UNIT_S = 100
KS = tuple(round(0.1 * k, 1) for k in range(11))
#: Fig. 5's mean run times, and the auction lengths (in units of the first) they run at
MEANS = (1, 2, 3)
FIG5_KS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
#: the scale check: one unit of 1,000 s beside 100 s
SCALE_UNIT_S = 1000
SCALE_KS = (0.0, 0.3, 0.5, 1.0)
QUICK_JOBS = 100
QUICK_KS = (0.0, 0.3, 1.0)


# ---- one run


def site_specs(mean_s: float) -> List[SiteSpec]:
    """The four sites, each with a local stream keeping it about half busy."""
    mean_local = CORES_PER_NODE * statistics.mean(LOCAL_NODES)
    return [
        SiteSpec(
            f"site{i + 1}",
            nodes * CORES_PER_NODE,
            LOCAL_LOAD * nodes * CORES_PER_NODE / (mean_local * mean_s),
            tuple(n * CORES_PER_NODE for n in LOCAL_NODES),
            mean_s,
            SIGMA,
        )
        for i, nodes in enumerate(NODES)
    ]


def local_stream(spec: SiteSpec, seed: int) -> Iterator[Task]:
    """A site's local jobs. The draws do not depend on the mean run time, only their scale:
    the streams of every mean and unit are the same jobs, stretched."""
    draws = rng("local", spec.name, seed)
    t = 0.0
    number = 0
    while True:
        number += 1
        t += draws.expovariate(spec.rate)
        run = lognormal_run(draws, spec.mean_run_s, spec.sigma)
        size = draws.choice(spec.sizes)
        yield Task(f"{spec.name}-l{number}", size, run, int(t), run=run, priority=1)


def global_stream(count: int, mean_s: float, unit_s: float, seed: int) -> List[GlobalJob]:
    """The global stream: Poisson arrivals at the rate that brings the offered load to 0.85."""
    cores = CORES_PER_NODE * sum(NODES)
    mean_size = CORES_PER_NODE * statistics.mean(GLOBAL_NODES)
    rate = (OFFERED_LOAD - LOCAL_LOAD) * cores / (mean_size * mean_s)
    draws = rng("global", "stream", seed)
    sites = [f"site{i + 1}" for i in range(len(NODES))]
    jobs, t = [], 0.0
    for number in range(1, count + 1):
        t += draws.expovariate(rate)
        jobs.append(
            GlobalJob(
                name=f"g{number}",
                submit=int(t),
                cores=CORES_PER_NODE * draws.choice(GLOBAL_NODES),
                run=lognormal_run(draws, mean_s, SIGMA),
                priority=draws.choice(PRIORITIES),
                input_site=draws.choice(sites),
                transfer_s=round(draws.uniform(0, TRANSFER_UNITS) * unit_s),
            )
        )
    return jobs


#: Where runs already made are kept, by configuration and code (``--part fig4`` then ``all``
#: runs the first part once; an interrupted run resumes): the sweep's ResultCache.
CACHE = ResultCache(
    ROOT / "bench" / ".work" / "repro-english",
    (
        "siteagent",
        "testbed/sims/english.py",
        "testbed/inprocess/sellers.py",
        "bench/repro/english.py",
    ),
)


def simulate(config: Mapping[str, Any]) -> Dict[str, Any]:
    """One arm at one auction length on one seed's streams: Tw by priority (in mean run
    times), the share of sites that bid in each auction, and the load achieved."""
    unit_s, mean_s = config["unit_s"], config["mean"] * config["unit_s"]
    specs = site_specs(mean_s)
    jobs = global_stream(config["jobs"], mean_s, unit_s, config["seed"])
    arm = config["arm"]
    mode = BidMode.FUTURE if arm == "project" else BidMode.NOW
    sites = make_sites(
        specs, mode, {spec.name: local_stream(spec, config["seed"]) for spec in specs}
    )
    length_s = round(config["k"] * unit_s)
    began = time.process_time()
    with tempfile.TemporaryDirectory(prefix="repro-english-") as work:
        world = World(sites, jobs, length_s, Path(work), greedy=arm == "greedy")
        records = world.run()
    cpu = time.process_time() - began
    return figures(records, mean_s, world, cpu)


def figures(
    records: Sequence[JobRecord], mean_s: float, world: World, cpu: float
) -> Dict[str, Any]:
    end = max(record.end or 0 for record in records)
    capacity = CORES_PER_NODE * sum(NODES)
    tw = {
        str(p): statistics.mean(r.response_s / mean_s for r in records if r.job.priority == p)
        for p in PRIORITIES
    }
    auctions = [share for r in records for share in r.participation]
    first = [r.participation[0] for r in records if r.participation]
    return {
        "tw": tw,
        "tw_all": statistics.mean(r.response_s / mean_s for r in records),
        "participation": statistics.mean(auctions) if auctions else None,
        "participation_first": statistics.mean(first) if first else None,
        "bid_for": statistics.mean(1.0 if s > 0 else 0.0 for s in auctions) if auctions else None,
        "auctions_per_job": statistics.mean(r.auctions for r in records),
        "no_bid_lowest": _share(
            [r.job.priority == PRIORITIES[0] for r in records for x in r.participation if x == 0]
        ),
        "rounds": statistics.mean(n for r in records for n in r.rounds) if auctions else 0,
        "started_at_once": {
            str(p): statistics.mean(
                1.0
                if r.start is not None and r.start - r.job.submit <= r.job.transfer_s + 1
                else 0.0
                for r in records
                if r.job.priority == p
            )
            for p in PRIORITIES
        },
        "wait_after_placed": {
            str(p): statistics.mean(
                ((r.start or 0) - (r.placed_at or 0)) / mean_s
                for r in records
                if r.job.priority == p
            )
            for p in PRIORITIES
        },
        "placed_after": {
            str(p): statistics.mean(
                ((r.placed_at or 0) - r.job.submit) / mean_s for r in records if r.job.priority == p
            )
            for p in PRIORITIES
        },
        "utilization": world.busy_core_seconds / (capacity * end) if end else None,
        "cpu_s": cpu,
    }


def _share(flags: Sequence[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


# ---- the sweep


def configurations(quick: bool, seeds: Sequence[int], whole: bool) -> List[Dict[str, Any]]:
    """Every run: both arms over the k sweep (Fig. 4) and the greedy baseline; ``whole``, the
    paper's arm at mean run times of 2 and 3 units (Fig. 5) and at a unit of 1,000 s (the
    scale check) too."""
    jobs = QUICK_JOBS if quick else JOBS
    ks = QUICK_KS if quick else KS
    base = {"jobs": jobs, "unit_s": UNIT_S, "mean": 1}
    configs = []
    for seed in seeds:  # Fig. 4 first: a run cut short has it whole (and kept)
        for arm in ("paper", "project"):
            configs += [{**base, "arm": arm, "k": k, "seed": seed} for k in ks]
        configs.append({**base, "arm": "greedy", "k": 0.0, "seed": seed})
    for seed in seeds if whole else ():
        for mean in MEANS[1:]:
            configs += [
                {**base, "arm": "paper", "k": k, "mean": mean, "seed": seed} for k in FIG5_KS
            ]
        configs += [
            {**base, "arm": "paper", "k": k, "unit_s": SCALE_UNIT_S, "seed": seed} for k in SCALE_KS
        ]
    return configs


Runs = Dict[Tuple[str, float, int, int], List[Dict[str, Any]]]


def by_setup(configs: Sequence[Mapping[str, Any]], results: Sequence[Dict[str, Any]]) -> Runs:
    """The runs of each (arm, k, mean, unit), in seed order."""
    runs: Runs = {}
    for config, result in zip(configs, results):
        key = (config["arm"], config["k"], config["mean"], config["unit_s"])
        runs.setdefault(key, []).append(result)
    return runs


def series(
    runs: Runs, arm: str, ks: Sequence[float], value: Any, mean: int = 1, unit: int = UNIT_S
) -> List[Tuple[float, Estimate]]:
    return [(k, mean_ci([value(r) for r in runs[(arm, k, mean, unit)]])) for k in ks]


# ---- the report


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench repro-english", description=__doc__)
    parser.add_argument(
        "--part",
        choices=("fig4", "all"),
        default="all",
        help="fig4: the k sweep of both arms and greedy dispatch only; all (default): Fig. 5's "
        "longer jobs and the scale check too (runs already made are read back)",
    )
    add_options(parser)
    args = parser.parse_args(argv)
    options = options_from(args)
    whole = args.part == "all" and not options.quick
    began = time.monotonic()
    configs = configurations(options.quick, options.seed_list, whole)
    results = options.sweep(simulate, configs, "english", cache=CACHE)
    runs = by_setup(configs, results)
    report = Report(
        "english", "English auction with absolute priorities, reproduced", options, seed="003"
    )
    report.data["runs"] = [{**c, **r} for c, r in zip(configs, results)]
    report.data["wall_s"] = time.monotonic() - began
    ks = QUICK_KS if options.quick else KS
    judge_fig4(report, runs, ks, options.seeds)
    judge_fig5(report, runs, ks, whole)
    judge_scale(report, runs, whole)
    describe(report, runs, ks, options.quick)
    draw(report, runs, ks, whole)
    return report.finish()


def average(rows: Sequence[Dict[str, Any]], value: Any) -> float:
    return statistics.mean(value(r) for r in rows)


def tw_cells(rows: Sequence[Dict[str, Any]]) -> str:
    """Mean Tw of each priority, lowest first."""
    return " / ".join(
        f"{average(rows, lambda r, p=p: float(r['tw'][str(p)])):.2f}" for p in PRIORITIES
    )


def top_tw(run: Dict[str, Any]) -> float:
    return float(run["tw"][str(PRIORITIES[-1])])


def judge_fig4(report: Report, runs: Runs, ks: Sequence[float], seeds: int) -> None:
    """003-1: where the top priority's Tw is lowest, and whether Tw is ordered by priority."""
    curves = {k: [top_tw(r) for r in runs[("paper", k, 1, UNIT_S)]] for k in ks}
    best_ks = [min(ks, key=lambda k: curves[k][s]) for s in range(seeds)]
    best = min(ks, key=lambda k: statistics.mean(curves[k]))
    below_0 = paired_change(curves[ks[0]], curves[best])
    below_1 = paired_change(curves[ks[-1]], curves[best])
    located = 0.2 <= statistics.mean(best_ks) <= 0.5
    lower = below_0.high < 0 and below_1.high < 0
    rises = paired_change(curves[ks[0]], curves[ks[-1]])
    if located and lower:
        verdict, why = MATCH, ""
    elif below_0.high < 0:
        verdict, why = TREND, f"Tw falls from T_a = 0 to {best} but its low is not in [0.2, 0.5]"
    else:
        verdict = DIFFERS
        at_zero = runs[("paper", ks[0], 1, UNIT_S)]
        once = statistics.mean(r["started_at_once"][str(PRIORITIES[-1])] for r in at_zero)
        placed = statistics.mean(r["placed_after"][str(PRIORITIES[-1])] for r in at_zero)
        why = (
            f"measured: the top priority's Tw is lowest at T_a = {best} (per seed: mean "
            f"{statistics.mean(best_ks):.2f}) and rises by {rises.text()} mean run times from "
            f"T_a = 0 to 1. At T_a = 0, {once:.0%} of top-priority jobs start within their "
            f"input's transfer of arriving (placed {placed:.3f} units after arrival on "
            "average): every site runs lower-priority work it can suspend, so the first "
            "auction always has bidders and a longer auction only adds its length"
        )
    report.row(
        "003-1",
        verdict,
        mean_ci(best_ks),
        point="best_ta",
        why=why,
        result="Fig. 4: the T_a at which the top priority's Tw is lowest (paper mode, per seed); "
        f"Tw(best) - Tw(0) = {below_0.text()}, Tw(best) - Tw(1) = {below_1.text()}",
    )
    disorders = []
    for k in ks:
        for low, high in zip(PRIORITIES, PRIORITIES[1:]):
            change = paired_change(
                [float(r["tw"][str(low)]) for r in runs[("paper", k, 1, UNIT_S)]],
                [float(r["tw"][str(high)]) for r in runs[("paper", k, 1, UNIT_S)]],
            )
            if not change.high < 0:
                disorders.append(f"k = {k}: priority {high} vs {low}: {change.text()}")
    ordered = len(ks) * (len(PRIORITIES) - 1) - len(disorders)
    report.row(
        "003-1",
        MATCH if not disorders else DIFFERS,
        f"{ordered} of {len(ks) * (len(PRIORITIES) - 1)} adjacent pairs ordered",
        why=""
        if not disorders
        else "measured (paired Tw(higher) - Tw(lower), not below 0): " + "; ".join(disorders),
        result="Fig. 4: Tw ordered by priority at every k (paired, adjacent priorities)",
        paper="higher priority is faster",
    )


def judge_fig5(report: Report, runs: Runs, ks: Sequence[float], whole: bool) -> None:
    """003-2: participation 70 ± 10 % at k = 0.3-0.4; falling as jobs get longer."""
    for k in [k for k in ks if k in (0.3, 0.4)]:
        shares = [100 * r["participation"] for r in runs[("paper", k, 1, UNIT_S)]]
        estimate = mean_ci(shares)
        first = statistics.mean(
            100 * r["participation_first"] for r in runs[("paper", k, 1, UNIT_S)]
        )
        bid_for = statistics.mean(100 * r["bid_for"] for r in runs[("paper", k, 1, UNIT_S)])
        lowest = statistics.mean(r["no_bid_lowest"] for r in runs[("paper", k, 1, UNIT_S)])
        why = (
            f"measured: {estimate.value:.0f} % of the 4 sites bid per auction over all "
            f"auctions, {first:.0f} % in each job's first; {100 - bid_for:.0f} % of auctions "
            f"drew no bid at all, {lowest:.0%} of them for jobs of the lowest priority "
            "(which can suspend nothing: they are auctioned again until a site frees cores)"
        )
        report.judge(
            "003-2",
            estimate,
            point="participation_at_best_ta",
            why=why,
            result=f"Fig. 5: share of sites bidding per auction at k = {k} (mean 1)",
        )
        firsts = mean_ci([100 * r["participation_first"] for r in runs[("paper", k, 1, UNIT_S)]])
        report.judge(
            "003-2",
            firsts,
            point="participation_at_best_ta",
            why=f"measured: {firsts.value:.0f} % in each job's first auction (repeats left out)",
            result=f"Fig. 5: share of sites bidding in each job's first auction at k = {k}",
        )
    if not whole:
        report.not_run(["003-2"], "--quick and --part fig4 run mean run times of 1 unit only")
        return
    falls: List[str] = []
    rises: List[str] = []
    for k in FIG5_KS:
        one = [r["participation"] for r in runs[("paper", k, 1, UNIT_S)]]
        three = [r["participation"] for r in runs[("paper", k, 3, UNIT_S)]]
        change = paired_change(one, three)
        (falls if change.high < 0 else rises).append(f"T_a = {k}: {change.text()}")
    verdict = TREND if not rises else DIFFERS
    report.row(
        "003-2",
        verdict,
        f"falls at {len(falls)} of {len(FIG5_KS)} T_a",
        why=""
        if not rises
        else "measured (paired participation(mean 3) - (mean 1)): " + "; ".join(rises),
        result="Fig. 5: at a fixed T_a, participation falls from mean run time 1 to 3 units",
        paper="longer jobs: less participation",
    )


def judge_scale(report: Report, runs: Runs, whole: bool) -> None:
    """003-3: Tw(k) at a unit of 100 s and of 1,000 s agree within their CIs."""
    if not whole:
        report.not_run(["003-3"], "--quick and --part fig4 run one unit (100 s) only")
        return
    apart = []
    for k in SCALE_KS:
        change = paired_change(
            [r["tw_all"] for r in runs[("paper", k, 1, UNIT_S)]],
            [r["tw_all"] for r in runs[("paper", k, 1, SCALE_UNIT_S)]],
        )
        if not change.contains(0.0):
            apart.append(f"k = {k}: {change.text()}")
    report.row(
        "003-3",
        MATCH if not apart else DIFFERS,
        f"agree at {len(SCALE_KS) - len(apart)} of {len(SCALE_KS)} k",
        why="" if not apart else "measured (paired Tw at 1,000 s - at 100 s): " + "; ".join(apart),
        result="Tw(k), all priorities, at 1 unit = 100 s and = 1,000 s (paired difference)",
    )


def describe(report: Report, runs: Runs, ks: Sequence[float], quick: bool) -> None:
    """The project's mode and the greedy baseline beside the paper's; the setup."""
    rows = [
        "| T_a (k) | paper Tw p1-p4 | project Tw p1-p4 | paper: sites bidding | project: sites "
        "bidding |",
        "|---|---|---|---|---|",
    ]
    for k in ks:
        paper, project = runs[("paper", k, 1, UNIT_S)], runs[("project", k, 1, UNIT_S)]
        rows.append(
            f"| {k} | {tw_cells(paper)} | {tw_cells(project)} | "
            f"{100 * average(paper, lambda r: r['participation']):.0f} % | "
            f"{100 * average(project, lambda r: r['participation']):.0f} % |"
        )
    greedy = runs[("greedy", 0.0, 1, UNIT_S)]
    rows.append(f"| greedy (no auction) | {tw_cells(greedy)} | | | |")
    project_curve = {k: [top_tw(r) for r in runs[("project", k, 1, UNIT_S)]] for k in ks}
    paper_curve = {k: [top_tw(r) for r in runs[("paper", k, 1, UNIT_S)]] for k in ks}
    best_paper = min(ks, key=lambda k: statistics.mean(paper_curve[k]))
    best_project = min(ks, key=lambda k: statistics.mean(project_curve[k]))
    monotone = paired_change(project_curve[ks[0]], project_curve[ks[-1]])
    beside = paired_change(paper_curve[best_paper], project_curve[best_project])
    versus_greedy = paired_change([top_tw(r) for r in greedy], paper_curve[best_paper])
    loads = [r["utilization"] for rs in runs.values() for r in rs if r["utilization"]]
    report.section(
        "The project's mode and the greedy baseline",
        f"Tw (mean time from arrival to completion, in mean run times) by priority, 1 to 4, "
        f"means over {len(greedy)} seeds; sites bidding: the share of the 4 sites that bid, "
        "per auction (repeated auctions of a job nobody bid for included).\n\n"
        + "\n".join(rows)
        + f"\n\nProject mode: top-priority Tw(1) - Tw(0) = {monotone.text()} (paired; the "
        f"future-window bid makes waiting useless, so Tw should rise with k). Its best "
        f"(k = {best_project}) against the paper mode's best (k = {best_paper}), top priority: "
        f"{beside.text()} (project - paper). Paper mode's best against greedy dispatch, top "
        f"priority: {versus_greedy.text()} (paper - greedy).\n",
    )
    cpu = [r["cpu_s"] for rs in runs.values() for r in rs]
    report.section(
        "Setup and choices where the paper is silent",
        f"""
- Sites: {len(NODES)} of {", ".join(map(str, NODES))} nodes x {CORES_PER_NODE} cores (the paper:
  "4 to 8 MVS-100K nodes"); each a simulated cluster under conservative backfilling, its
  queue in priority order; in the paper and greedy arms it suspends lower-priority work.
- Local streams: Poisson, priority 1 (the lowest), {LOCAL_NODES} nodes, {LOCAL_LOAD:.0%} of each
  site offered. Global stream: {QUICK_JOBS if quick else JOBS} jobs, priorities uniform over 1-4,
  {GLOBAL_NODES} nodes, Poisson at the rate that brings the offered load to {OFFERED_LOAD}.
  Measured utilization (work done until the last global job ended, over capacity x that
  time): mean {statistics.mean(loads):.2f} (min {min(loads):.2f}, max {max(loads):.2f}).
- Run times lognormal (spread {SIGMA}, our choice), estimates exact (our choice); inputs on a
  uniformly random site, U(0, {TRANSFER_UNITS}) units to reach the others; a job starts once
  its input has arrived.
- 1 unit = {UNIT_S} s (and {SCALE_UNIT_S} s for the scale check). Fig. 5's curves at mean run
  times of 2 and 3 units use the same jobs stretched, at T_a = k units (k of {FIG5_KS}).
- The auctioneer is the project's (siteagent.client.auctioneer), rounds asked at each instant a
  site's capacity changed while the auction is open, the close at T_a; sites bid through
  siteagent.market.english_bids; a winner has {ACCEPT_WINDOW_S} s to accept (the least an offer
  allows). A job nobody bid for is auctioned again when a site gives capacity back (the
  paper repeats auctions until every job is placed; it does not say when).
- Each run's CPU: median {statistics.median(cpu):.1f} s, max {max(cpu):.1f} s; the whole
  sweep took {report.data["wall_s"]:.0f} s of wall time.
""",
    )


def draw(report: Report, runs: Runs, ks: Sequence[float], whole: bool) -> None:
    """Fig. 4 and Fig. 5 replicas, and the three arms' top priority."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6.4, 4.2))
    ours = {
        f"priority {p}": series(runs, "paper", ks, lambda r, p=p: float(r["tw"][str(p)]))
        for p in PRIORITIES
    }
    draw_replica(
        axis,
        ours,
        {},
        "T_a (mean run times)",
        "Tw (mean run times)",
        "Fig. 4: Tw against the auction's length (paper mode)",
    )
    axis.axvspan(0.3, 0.4, color="grey", alpha=0.25, label="paper: lowest Tw")
    axis.legend(fontsize="small")
    _save(figure, report.figure_path("fig4"))

    figure, axis = plt.subplots(figsize=(6.4, 4.2))
    means = MEANS if whole else (1,)
    ours = {}
    for mean in means:
        chosen = ks if mean == 1 else FIG5_KS
        ours[f"mean run time {mean}"] = series(
            runs, "paper", chosen, lambda r: 100 * r["participation"], mean=mean
        )
    draw_replica(
        axis,
        ours,
        {"about 70 % at 0.3-0.4": [(0.3, 70, 10), (0.4, 70, 10)]},
        "T_a (units)",
        "sites bidding (%)",
        "Fig. 5: share of sites taking part",
    )
    _save(figure, report.figure_path("fig5"))

    figure, axis = plt.subplots(figsize=(6.4, 4.2))
    ours = {
        "paper mode": series(runs, "paper", ks, top_tw),
        "project mode (future windows)": series(runs, "project", ks, top_tw),
    }
    greedy = mean_ci([top_tw(r) for r in runs[("greedy", 0.0, 1, UNIT_S)]])
    draw_replica(
        axis,
        ours,
        {},
        "T_a (mean run times)",
        "Tw of priority 4 (mean run times)",
        "The top priority under three mechanisms",
    )
    axis.axhline(greedy.value, color="black", linestyle=":", label="greedy dispatch (no auction)")
    axis.legend(fontsize="small")
    _save(figure, report.figure_path("arms"))


def _save(figure: Any, path: Path) -> None:
    import matplotlib.pyplot as plt

    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
