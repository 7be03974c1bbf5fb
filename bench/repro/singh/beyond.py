"""Beyond the thesis (the spec's part 5, paper 002): provisioning against stronger best-effort
baselines, with the logs' requested estimates, and on WfCommons workflows.

- **EASY**: the same workflow just in time on the same site scheduled by EASY (aggressive)
  backfilling instead of conservative: a stronger best effort than the thesis' (its jobs may
  start sooner where the protected head allows).
- **Dependencies** (`sbatch --dependency=afterok`): every task queued at the workflow's start,
  each held until its parents end and then queued with that early priority, ahead of the jobs
  that arrived meanwhile (``Simulator.submit(since=...)``): most of the just-in-time penalty
  the thesis measures is the wait behind those later jobs.
- **Requested estimates**: the thesis assumed every job asks its exact run time. Here the
  trace's jobs ask what their users asked: the site plans (and prices, and advertises slots)
  with those estimates, jobs end early, best effort gains from it; a provisioned plan's windows
  are held as planned, so its makespan is the planned one (every window was admitted: counted).
- **WfCommons**: synthetic Montage, Epigenomics, 1000Genome, Seismology and SoyKB instances of
  1,000 tasks (WfChef recipes, through the ``wfcommons`` package the client extra installs),
  planned greedily (ch. 7) on CTC.
- **On real Slurm**: one workflow provisioned through an agent on the Slurm test cluster and
  run in its reservations, the makespan Slurm realizes beside the planned one and best
  effort's (bench/repro/singh/realized.py).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from bench.repro.options import Options
from bench.repro.report import Report
from bench.repro.singh import realized
from bench.repro.singh.provision import LOADS, MEAN_CORES, layered_spec, provision_run
from bench.repro.singh.provision_rows import Records, best, ratio, values
from bench.repro.singh.sites import DAY_S, add_calibrations, calibrate_run, span_s, sweep

RECIPES = ("Montage", "Epigenomics", "Genome", "Seismology", "Soykb")
WFCOMMONS_TASKS = 1000


def part(report: Report, options: Options, args: argparse.Namespace) -> None:
    quick = options.quick
    seeds = options.seed_list if (quick or args.seeds is not None) else list(range(5))
    per = max(1, (args.submissions or 20) // 5) if not quick else 2
    sites = ("SDSC",) if quick else ("CTC", "SDSC")
    limit = 40 if quick else None
    calibrations = sweep(
        options,
        args,
        calibrate_run,
        [
            {
                "site": site,
                "target": LOADS[site][0],
                "days": limit or span_s(site) / DAY_S,
                "exact": True,
                "seed": 0,
            }
            for site in sites
        ],
        "singh beyond load calibration",
    )
    knobs: Dict[Tuple[str, int], Any] = {}
    found = iter(calibrations)
    for site in sites:
        runs = [next(found)]  # one calibration per site, shared by the seeds (as provision)
        for seed in seeds:
            knobs[(site, seed)] = runs[0]["knobs"]
        add_calibrations(report, f"beyond {site} {LOADS[site][0]:.0%}", runs)
    plan: List[Tuple[str, Tuple[Any, ...]]] = []
    configs: List[Dict[str, Any]] = []

    def add(name: str, key: Tuple[Any, ...], site: str, seed: int, **config: Any) -> None:
        plan.append((name, key))
        configs.append(
            {
                "sites": [[site, site, knobs[(site, seed)]]],
                "seed": seed,
                "submissions": per,
                "baselines": ["easy", "chained"],
                "days": limit,
                **config,
            }
        )

    for seed in seeds:
        for site in sites:
            for exact in (True, False):
                add(
                    "estimates",
                    (site, exact),
                    site,
                    seed,
                    exact=exact,
                    workflow=layered_spec(100, MEAN_CORES[site]),
                    alphas=[0.0, 0.5, 1.0],
                    planners=["greedy", "genetic"],
                )
        if not quick:
            for recipe in RECIPES:
                add(
                    "wfcommons",
                    (recipe,),
                    "CTC",
                    seed,
                    workflow={"kind": "wfcommons", "recipe": recipe, "tasks": WFCOMMONS_TASKS},
                    alphas=[0.0, 1.0],
                    planners=["greedy"],
                    submissions=max(1, per // 3),
                )
    runs = sweep(options, args, provision_run, configs, "singh beyond")
    samples: Dict[Tuple[str, Tuple[Any, ...]], Records] = {}
    for key, run in zip(plan, runs):
        samples.setdefault(key, []).extend(run["samples"])
    report.data["beyond"] = [
        {"sweep": name, "key": list(key), **config, **run}
        for (name, key), config, run in zip(plan, configs, runs)
    ]
    report.not_run(
        _all_ids(),
        "beyond the thesis: this part measures what the thesis did not (its sections); the "
        "thesis' results are in repro-singh-{slots,fees,var,provision}.md",
    )
    report.section("Stronger baselines and requested estimates", _estimates(samples, sites))
    if not quick:
        report.section("WfCommons workflows (1,000 tasks, CTC, greedy)", _wfcommons(samples))
    report.section("On the real Slurm test cluster", _on_slurm(report, quick))
    report.section("Setup (beyond the thesis)", __doc__ or "")


def _on_slurm(report: Report, quick: bool) -> str:
    """Run realized.py's two arms (minutes of wall time, little CPU) and say what they gave."""
    why = realized.unavailable()
    if why:
        report.data["slurm"] = {"not_run": why}
        return f"Not run: {why}.\n"
    print("singh beyond: a workflow on the real Slurm test cluster (minutes) ...", flush=True)
    with tempfile.TemporaryDirectory(prefix="repro-singh-slurm-") as work:
        result = realized.run(Path(work), quick)
    figures = realized.summary(result)
    report.data["slurm"] = {**result, "summary": figures}
    late = figures["start_after_window_s"]
    return (
        f"{figures['tasks']} tasks, each a {result['runtime_s']}-s window in which its job "
        f"sleeps {result['runtime_s'] - realized.SLACK_S} s (one run: a check on real "
        "software, not a statistic). Makespans in seconds from the workflow's submission.\n\n"
        "| planned | realized in the reservations | realized / planned | best effort "
        "(`--dependency=afterok`) | realized / best effort |\n|---|---|---|---|---|\n"
        f"| {figures['planned_makespan_s']:.0f} | {figures['realized_makespan_s']:.0f} | "
        f"{figures['realized_over_planned']:.3f} | {figures['best_effort_makespan_s']:.0f} | "
        f"{figures['realized_over_best_effort']:.3f} |\n\n"
        f"Each task's job started {late['median']:.1f} s (median; at most {late['max']:.1f} s) "
        "after its window opened: the first scheduling pass after the reservation began "
        f"(`bf_interval=5`); {figures['ended_inside_window']} of {figures['tasks']} ended "
        f"inside their windows. The reservations cost {figures['cost']} SU.\n"
    )


def _all_ids() -> List[str]:
    from bench.repro.paper_values import seed_ids

    return list(seed_ids("002"))


def _line(records: Records, planner: str, alpha: float) -> str:
    cb = ratio(records, planner, alpha)
    easy = ratio_to(records, planner, alpha, "best_effort_easy")
    chained = ratio_to(records, planner, alpha, "best_effort_chained")
    return f"{cb.text(3)} | {easy.text(3)} | {chained.text(3)}"


def ratio_to(records: Records, planner: str, alpha: float, baseline: str) -> Any:
    from bench.repro.stats import ratio_ci

    return ratio_ci(
        values(records, planner, alpha, "makespan_s"),
        [float(r[baseline]["makespan_s"]) for r in records],
    )


def _estimates(samples: Dict[Tuple[str, Tuple[Any, ...]], Records], sites: Sequence[str]) -> str:
    lines = [
        "Makespan of the provisioned plan over best effort's, mean over mean with a paired "
        "95 % interval; best effort under conservative (CB) and under EASY backfilling of the "
        "same site. Best effort's own makespans in hours beside.",
        "",
        "| site | estimates | approach | α | / BE on CB | / BE on EASY | / BE with dependencies |",
        "|---|---|---|---|---|---|---|",
    ]
    notes = []
    for site in sites:
        for exact in (True, False):
            records = samples[("estimates", (site, exact))]
            label = "exact" if exact else "requested"
            for planner in ("greedy", "genetic"):
                for alpha in (0.0, 0.5, 1.0):
                    lines.append(
                        f"| {site} | {label} | {planner} | {alpha:g} | "
                        f"{_line(records, planner, alpha)} |"
                    )
            cb = statistics.fmean(best(records, "makespan_s")) / 3600
            easy, chained = (
                statistics.fmean(float(r[f"best_effort_{name}"]["makespan_s"]) for r in records)
                / 3600
                for name in ("easy", "chained")
            )
            refused = sum(
                o["refused_windows"]
                for r in records
                for p in ("greedy", "genetic")
                for o in r[p].values()
            )
            notes.append(
                f"- {site}, {label} estimates: best effort {cb:.2f} h on CB, "
                f"{easy:.2f} h on EASY, {chained:.2f} h with dependencies "
                f"({len(records)} samples); planned windows the replay refused: {refused}."
            )
    return "\n".join([*lines, "", *notes]) + "\n"


def _wfcommons(samples: Dict[Tuple[str, Tuple[Any, ...]], Records]) -> str:
    lines = [
        "| workflow | samples | BE (h) | α = 0: makespan / BE, cost / BE | "
        "α = 1: makespan / BE, cost / BE | / BE on EASY (α = 0) |",
        "|---|---|---|---|---|---|",
    ]
    for recipe in RECIPES:
        records = samples.get(("wfcommons", (recipe,)))
        if not records:
            continue
        be = statistics.fmean(best(records, "makespan_s")) / 3600
        cells = [
            f"{ratio(records, 'greedy', a).text(3)}, "
            f"{ratio(records, 'greedy', a, 'cost_su').text(3)}"
            for a in (0.0, 1.0)
        ]
        lines.append(
            f"| {recipe} | {len(records)} | {be:.2f} | {cells[0]} | {cells[1]} | "
            f"{ratio_to(records, 'greedy', 0.0, 'best_effort_easy').text(3)} |"
        )
    return "\n".join(lines) + "\n"
