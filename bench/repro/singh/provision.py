"""Ch. 4 and 7: a workflow provisioned at instants of replayed sites, against best effort.

A run (one sweep configuration) replays its sites (each at its calibrated load) through
``submissions`` instants drawn by the seed, after a week of warm-up; at each, every approach
of :mod:`bench.repro.singh.workflows` gets the same workflow instance at the same instant: the
samples are paired. The instance is drawn by (sweep, workflow parameters, seed).
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from bench.repro.options import Options
from bench.repro.report import Report
from bench.repro.seeds import seed_int
from bench.repro.singh import provision_rows as rows
from bench.repro.singh.sites import (
    DAY_S,
    add_calibrations,
    calibrate_run,
    instants,
    replay,
    span_s,
    sweep,
)
from bench.repro.singh.workflows import at_instant
from siteagent.client.generators import cybershake, layered
from siteagent.client.tasks import TaskGraph
from siteagent.client.wfformat import read_wfformat
from siteagent.core.engines import Policy
from testbed.inprocess.provisioning import wfcommons_instance

WARMUP_S = 7 * DAY_S
#: Room left after the last instant: the workflow must finish inside the trace.
TAIL_S = {"layered": 3 * DAY_S, "cybershake": 30 * DAY_S}


def workflow(spec: Mapping[str, Any], seed: int) -> TaskGraph:
    """The instance a run plans: ``kind`` "layered" (``tasks``, ``levels``, ``mean_cores``,
    ``mean_bytes``) or "cybershake" (``sites``)."""
    if spec["kind"] == "cybershake":
        return cybershake(int(spec.get("sites", 4017)))
    if spec["kind"] == "wfcommons":
        with tempfile.TemporaryDirectory(prefix="repro-singh-") as tmp:
            path = wfcommons_instance(
                Path(tmp),
                spec["recipe"],
                int(spec["tasks"]),
                seed_int("workflow", [spec["recipe"], spec["tasks"]], seed) % 2**32,
            )
            return read_wfformat(path)
    key = [spec["tasks"], spec["levels"], spec["mean_cores"]]
    return layered(
        seed_int("workflow", key, seed),
        tasks=int(spec["tasks"]),
        levels=int(spec["levels"]),
        mean_cores=int(spec["mean_cores"]),
        mean_bytes=int(spec.get("mean_bytes", 10**9)),
    )


def provision_run(config: Mapping[str, Any]) -> Dict[str, Any]:
    """``sites`` [[label, trace name, knobs], ...], ``workflow`` (see :func:`workflow`),
    ``alphas``, ``planners``, ``submissions``, ``seed``, ``exact`` (the traces' jobs ask their
    run times; else what they asked), ``check`` (put plans into the replay), ``days`` (only
    the trace's first days, if given), ``baselines`` ("easy": best effort on the same sites
    scheduled by EASY backfilling as well; "chained": queued at once with dependencies)."""
    began = time.perf_counter()
    seed = int(config["seed"])
    spec = config["workflow"]
    graph = workflow(spec, seed)
    labels = [label for label, _, _ in config["sites"]]
    exact = bool(config.get("exact", True))
    replays = {label: replay(name, tuple(knobs), exact) for label, name, knobs in config["sites"]}
    extra = {
        name: {}
        if name == "chained"
        else {
            label: replay(site, tuple(knobs), exact, Policy(name))
            for label, site, knobs in config["sites"]
        }
        for name in config.get("baselines", [])
    }
    span = min(span_s(name) for _, name, _ in config["sites"])
    if config.get("days") is not None:
        span = min(span, int(float(config["days"]) * DAY_S))
    times = instants(
        "submission",
        "+".join(labels),
        seed,
        int(config["submissions"]),
        WARMUP_S,
        TAIL_S[spec["kind"]],
        span,
    )
    records: List[Dict[str, Any]] = []
    for k, t in enumerate(times):
        for simulator in [*replays.values(), *(s for r in extra.values() for s in r.values())]:
            simulator.advance_to(t)
        records.append(
            at_instant(
                replays,
                graph,
                [float(a) for a in config["alphas"]],
                list(config["planners"]),
                seed_int("genetic", [labels, k], seed),
                check=bool(config.get("check", True)),
                baselines=extra,
            )
        )
    return {"samples": records, "seconds": round(time.perf_counter() - began, 2)}


# -- the part -----------------------------------------------------------------------------------

SWEEPS = ("alpha", "size", "tasks", "load", "cybershake", "sites")
ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)
#: The thesis' utilizations (ch. 4.7: the traces alone gave 63 % and 70 %; Fig. 16 and 55).
LOADS = {"CTC": (0.63, 0.76, 0.88), "SDSC": (0.70, 0.78, 0.84, 0.90)}
MEAN_CORES = {"CTC": 22, "SDSC": 6}
TASK_SIZES = {"CTC": (3, 10, 20, 30), "SDSC": (1, 3, 6, 9)}
SIZES = (100, 200, 300, 400)
#: Ch. 4.9's sites, added in this order: (trace, utilization).
SITE_ORDER = (
    ("CTC", 0.88),
    ("SDSC", 0.84),
    ("CTC", 0.76),
    ("SDSC", 0.78),
    ("CTC", 0.63),
    ("SDSC", 0.70),
)
#: Ch. 4.9: 1,000 Gb per edge on average (10 Gbps and 150 s: 250 s), 14 processors a task.
MULTI_BYTES = 125 * 10**9
MULTI_CORES = 14


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("provision part")
    group.add_argument(
        "--submissions",
        type=int,
        default=None,
        metavar="N",
        help="submission instants per seed in the α sweeps (default 20, --quick 3; "
        "the spec's 250 samples: 50); the other sweeps take N/5, CyberShake and several "
        "sites N/10 (at least 1)",
    )
    group.add_argument(
        "--sweeps",
        default=",".join(SWEEPS),
        metavar="LIST",
        help=f"which provisioning sweeps to run, comma-separated (default all: {','.join(SWEEPS)})",
    )


def layered_spec(tasks: int, cores: int, mean_bytes: int = 10**9) -> Dict[str, Any]:
    levels = 10 if tasks == 100 else round(math.sqrt(tasks))
    return {
        "kind": "layered",
        "tasks": tasks,
        "levels": levels,
        "mean_cores": cores,
        "mean_bytes": mean_bytes,
    }


class Sweep:
    """The configurations of one sweep and, once run, its samples by configuration key."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.keys: List[Tuple[Any, ...]] = []
        self.configs: List[Dict[str, Any]] = []
        self.samples: Dict[Tuple[Any, ...], List[Dict[str, Any]]] = {}

    def add(self, key: Tuple[Any, ...], config: Dict[str, Any]) -> None:
        self.keys.append(key)
        self.configs.append(config)


def part(report: Report, options: Options, args: argparse.Namespace) -> None:
    """Ch. 4 and 7: rows 002-7 ... 002-12 and 002-28 ... 002-32, Figs. 13-19 and 52-56."""
    quick = options.quick
    chosen = [s for s in args.sweeps.split(",") if s]
    unknown = [s for s in chosen if s not in SWEEPS]
    if unknown:
        raise SystemExit(f"repro-singh: unknown sweep(s) {unknown}; choose from {list(SWEEPS)}")
    seeds = options.seed_list if (quick or args.seeds is not None) else list(range(5))
    per = args.submissions or (3 if quick else 20)
    other = max(1, per // 5)
    few = max(1, per // 10)
    if quick:
        chosen = ["alpha"]
    sites = ("SDSC",) if quick else ("CTC", "SDSC")
    limit = 40 if quick else None  # --quick: the first 40 days
    needed = (
        ("alpha", "size", "tasks") if not {"load", "cybershake", "sites"} & set(chosen) else SWEEPS
    )
    targets = sorted(
        {
            (site, load)
            for site in sites
            for load in LOADS[site]
            if load == LOADS[site][0] or set(needed) == set(SWEEPS)
        }
        | ({("CTC", load) for load in LOADS["CTC"]} if "cybershake" in chosen else set())
    )
    calibrations = sweep(
        options,
        args,
        calibrate_run,
        [
            {
                "site": site,
                "target": load,
                "days": limit or span_s(site) / DAY_S,
                "exact": True,
                "seed": 0,
            }
            for site, load in targets
        ],
        "singh provision: load calibration",
    )
    # one calibration per load, its overlay draws (seed 0's) shared by every seed: a whole
    # trace is replayed some five times per calibration, and the seeds vary the workflow
    # instance and the instants, which is what the samples pair on
    knobs: Dict[Tuple[str, float, int], Any] = {}
    found = iter(calibrations)
    for site, load in targets:
        runs = [next(found)]
        for seed in seeds:
            knobs[(site, load, seed)] = runs[0]["knobs"]
        window = f"first {limit} days" if limit else "whole trace"
        add_calibrations(report, f"provision {site} {load:.0%}, {window}", runs)
    base = {site: LOADS[site][0] for site in sites}
    alphas = (0.0, 1.0) if quick else ALPHAS
    planners = ["greedy", "genetic"]
    sweeps = {name: Sweep(name) for name in chosen}

    def single(
        name: str,
        key: Tuple[Any, ...],
        site: str,
        load: float,
        wf: Dict[str, Any],
        seed: int,
        count: int,
        alphas_: Sequence[float],
        planners_: Sequence[str],
    ) -> None:
        sweeps[name].add(
            key,
            {
                "sites": [[site, site, knobs[(site, load, seed)]]],
                "workflow": wf,
                "alphas": list(alphas_),
                "planners": list(planners_),
                "submissions": count,
                "seed": seed,
                "days": limit,
            },
        )

    for seed in seeds:
        for site in sites:
            if "alpha" in sweeps:
                single(
                    "alpha",
                    (site,),
                    site,
                    base[site],
                    layered_spec(100, MEAN_CORES[site]),
                    seed,
                    per,
                    alphas,
                    planners,
                )
            if "size" in sweeps:
                for n in SIZES:
                    single(
                        "size",
                        (site, n),
                        site,
                        base[site],
                        layered_spec(n, MEAN_CORES[site]),
                        seed,
                        other,
                        (0.0, 1.0),
                        planners,
                    )
            if "tasks" in sweeps:
                for cores in TASK_SIZES[site]:
                    single(
                        "tasks",
                        (site, cores),
                        site,
                        base[site],
                        layered_spec(100, cores),
                        seed,
                        other,
                        (0.0, 1.0),
                        planners,
                    )
            if "load" in sweeps:
                for load in LOADS[site]:
                    for cores in TASK_SIZES[site]:
                        single(
                            "load",
                            (site, load, cores),
                            site,
                            load,
                            layered_spec(100, cores),
                            seed,
                            other,
                            (0.5,),
                            planners,
                        )
        if "cybershake" in sweeps:
            for load in LOADS["CTC"]:
                single(
                    "cybershake",
                    ("CTC", load),
                    "CTC",
                    load,
                    {"kind": "cybershake"},
                    seed,
                    few,
                    (0.5, 1.0),
                    ["greedy"],
                )
        if "sites" in sweeps:
            for count in range(2, 7):
                members = [
                    [f"{name}@{round(100 * load)}", name, knobs[(name, load, seed)]]
                    for name, load in SITE_ORDER[:count]
                ]
                sweeps["sites"].add(
                    (count,),
                    {
                        "sites": members,
                        "workflow": layered_spec(100, MULTI_CORES, MULTI_BYTES),
                        "alphas": [0.5],
                        "planners": planners,
                        "submissions": few,
                        "seed": seed,
                    },
                )
    for one in sweeps.values():
        runs = sweep(options, args, provision_run, one.configs, f"singh provision {one.name}")
        for key, run in zip(one.keys, runs):
            one.samples.setdefault(key, []).extend(run["samples"])
        report.data[f"provision_{one.name}"] = [
            {"key": list(key), **config, **run}
            for key, config, run in zip(one.keys, one.configs, runs)
        ]
    rows.add_rows(report, sweeps, sites, alphas, quick)
    rows.figures(report, sweeps, sites, alphas)
    report.section(
        "Ch. 4 and 7 setup (provisioning)", rows.setup(len(seeds), per, other, few, chosen, quick)
    )
