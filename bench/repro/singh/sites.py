"""The replayed clusters of the thesis reproduction: traces, units, load, submission instants.

CTC-SP2 (430 processors operational) and SDSC-SP2 (128) are the thesis' own sites (ch. 3-5,
7). ch. 6 ran against the NCSA TeraGrid cluster's live queue, gone since; LLNL Thunder (1,002
four-way nodes, 2007) and SDSC-BLUE (144 eight-way nodes) stand in, replayed in whole nodes
as a batch system that allocates nodes would hold them (the spec's part 2).

Every replay here starts its clock at the trace's first arrival, moved to 0, so that sites
of different years share one time line (ch. 4.9's several sites).
"""

from __future__ import annotations

import argparse
import functools
import logging
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from bench.common import ROOT, TRACES
from bench.repro.calibrate import MAX_STEPS, days, overlay_scaling, utilization
from bench.repro.options import Options
from bench.repro.paper_values import paper_value
from bench.repro.report import Report
from bench.repro.seeds import uniform
from bench.repro.stats import Estimate
from bench.repro.sweep import ResultCache, code_version
from bench.repro.verdicts import DIFFERS, Verdict, judge
from siteagent.core.engines import Policy
from siteagent.core.machine import Task
from siteagent.sim.calibration import calibrate_load
from siteagent.sim.simulator import Simulator
from siteagent.sim.window import TraceReplay
from siteagent.sim.workload import LoadScaling, Workload

DAY_S = 86400
HOUR_S = 3600

# Every replay of a trace warns of the lines it skips (SDSC: 5,671 with negative run times);
# the reports say so once (docs/reproductions-singh.md), the workers need not repeat it.
logging.getLogger("siteagent.sim.workload").setLevel(logging.ERROR)


@dataclass(frozen=True)
class Site:
    """A trace replayed on ``units`` units: cores, or whole nodes of ``per_node`` cores."""

    name: str
    file: str
    units: int
    per_node: int = 1

    @property
    def path(self) -> str:
        return str(TRACES / self.file)

    def replay(self, exact: bool) -> TraceReplay:
        return TraceReplay(self.path, self.units * self.per_node, exact_estimates=exact)


SITES: Dict[str, Site] = {
    site.name: site
    for site in (
        Site("CTC", "CTC-SP2-1996-3.1-cln.swf.gz", 430),
        Site("SDSC", "SDSC-SP2-1998-4.2-cln.swf.gz", 128),
        Site("Thunder", "LLNL-Thunder-2007-1.1-cln.swf.gz", 1002, per_node=4),
        Site("BLUE", "SDSC-BLUE-2000-4.2-cln.swf.gz", 144, per_node=8),
    )
}


#: The load knobs a replay runs with: overlay probability, inter-arrival factor, and the seed
#: of the overlay's admission draws (bench.repro.calibrate.overlay_scaling).
Knobs = Tuple[float, float, int]
NATIVE: Knobs = (0.0, 1.0, 1)


def scaling_of(knobs: Knobs) -> LoadScaling:
    return LoadScaling(
        overlay_probability=knobs[0], interarrival_factor=knobs[1], seed=int(knobs[2])
    )


@functools.lru_cache(maxsize=4)
def tasks_of(name: str, knobs: Knobs, exact: bool) -> Tuple[Task, ...]:
    """The site's trace as the replay runs it: in units, times from the first arrival.
    Kept per process (a sweep's worker runs many configurations of one trace); callers
    replay copies (:func:`fresh`), never these."""
    site = SITES[name]
    workload = Workload(
        site.path,
        cores=site.units * site.per_node,
        skip_invalid=True,
        scaling=scaling_of(knobs),
        exact_estimates=exact,
    )
    try:
        out: List[Task] = []
        first = None
        for task in workload.tasks():
            if first is None:
                first = task.submit
            size = math.ceil(task.size / site.per_node)
            out.append(
                Task(task.key, size, task.estimate, task.submit - first, task.run, task.payload)
            )
        return tuple(out)
    finally:
        workload.close()


def fresh(tasks: Tuple[Task, ...]) -> Iterator[Task]:
    """Copies of ``tasks`` for one replay (the simulator writes into the tasks it runs)."""
    for task in tasks:
        yield Task(task.key, task.size, task.estimate, task.submit, task.run, task.payload)


def replay(
    name: str,
    knobs: Knobs,
    exact: bool,
    policy: Policy = Policy.CONSERVATIVE,
    on_start: Optional[Callable[[Task], None]] = None,
) -> Simulator:
    """A replay of the site's trace, standing at its first arrival (time 0)."""
    tasks = fresh(tasks_of(name, knobs, exact))
    return Simulator(tasks, SITES[name].units, policy, start_time=0, on_start=on_start)


def span_s(name: str) -> int:
    """From the trace's first arrival to its last (native load)."""
    tasks = tasks_of(name, NATIVE, True)
    return tasks[-1].submit


def instants(
    purpose: str, name: str, seed: int, count: int, warmup_s: int, tail_s: int, span: int
) -> List[int]:
    """``count`` instants uniform over [warmup, span − tail), each drawn by (purpose, (site,
    k), seed): the same for every arm of a comparison; sorted."""
    low, high = warmup_s, span - tail_s
    if high <= low:
        raise ValueError(f"{name}: no room for instants between {low} and {high} s")
    return sorted(low + int(uniform(purpose, [name, k], seed) * (high - low)) for k in range(count))


def calibrate_run(config: Mapping[str, Any]) -> Dict[str, Any]:
    """A sweep configuration: the knobs giving best-effort utilization ``target`` over the
    first ``days`` of ``site``'s trace (``exact`` estimates, conservative backfilling) with
    ``seed``'s overlay draws, within one point (the harness' calibration, without its
    progress bar: this runs in a worker; the worker keeps each measurement, so the seeds' and
    targets' shared steps run once in it)."""
    site = SITES[config["site"]]
    replay_ = site.replay(bool(config["exact"]))
    window = days(float(config["days"]))
    found = calibrate_load(
        functools.partial(utilization, replay_, window=window, policy=Policy.CONSERVATIVE),
        float(config["target"]),
        0.01,
        overlay_scaling(replay_, int(config["seed"])),
        MAX_STEPS,
    )
    scaling = found.scaling
    return {
        "knobs": [scaling.overlay_probability, scaling.interarrival_factor, scaling.seed],
        "target": found.target,
        "achieved": found.achieved,
        "converged": found.converged,
        "steps": len(found.steps),
    }


def add_calibrations(report: Report, label: str, runs: Sequence[Mapping[str, Any]]) -> None:
    """One line of the report's calibration table for a target calibrated once per seed
    (each seed draws its own overlay): the achieved utilizations' mean and range."""
    achieved = [float(run["achieved"]) for run in runs]
    knobs = [run["knobs"] for run in runs]
    report.calibrations.append(
        {
            "label": f"{label}, {len(runs)} seeds",
            "target": runs[0]["target"],
            "achieved": f"{statistics.fmean(achieved):.3f} [{min(achieved):.3f}, "
            f"{max(achieved):.3f}]",
            "converged": f"{sum(bool(run['converged']) for run in runs)}/{len(runs)}",
            "overlay_probability": round(statistics.fmean(k[0] for k in knobs), 3),
            "interarrival_factor": round(statistics.fmean(k[1] for k in knobs), 3),
            "steps": round(statistics.fmean(run["steps"] for run in runs), 1),
        }
    )


def judge_row(
    report: Report,
    result_id: str,
    ours: Optional[Estimate] = None,
    point: Optional[str] = None,
    change: Optional[Estimate] = None,
    why: str = "",
    result: str = "",
) -> None:
    """``report.judge``, with ``why`` kept only for a differs (a match needs no excuse); a
    differing ``change`` with no ``why`` says where its interval lies."""
    verdict = judge(paper_value(result_id), ours, point, change, "")
    if verdict.verdict == DIFFERS:
        verdict = Verdict(DIFFERS, why or (interval_why(change) if change is not None else ""))
    report.row(result_id, verdict, ours if ours is not None else change, point, result=result)


def interval_why(change: Estimate) -> str:
    """Why a paired change is no trend: its interval holds 0, or lies on the other side."""
    if change.low <= 0 <= change.high:
        return "the paired change does not exclude 0"
    return f"the paired change {change.text(3)} goes the other way"


def save_figure(report: Report, figure: Any, name: str) -> None:
    """Save a matplotlib figure as the report's figure ``name`` and close it."""
    import matplotlib.pyplot as plt

    path = report.figure_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


#: Where each configuration's run is kept as it finishes (by configuration and code), so that
#: an interrupted run resumes and ``--reuse-runs`` rebuilds a report without running again.
RUNS = ROOT / "bench" / ".work" / "repro-singh"
#: The code a run's result depends on: the package, the test sites, the thesis' modules.
CODE = (
    "siteagent",
    "testbed",
    "bench/common.py",
    "bench/repro/singh",
    "bench/repro/calibrate.py",
    "bench/repro/seeds.py",
)


def sweep(
    options: Options,
    args: argparse.Namespace,
    function: Any,
    configs: List[Dict[str, Any]],
    label: str,
) -> List[Any]:
    """``options.sweep``, keeping each run under bench/.work/repro-singh; with
    ``--reuse-runs`` a kept run of the same configuration is read back whatever code made it
    (after a change to the report's code only)."""
    cache = ResultCache(RUNS, CODE, any_version=getattr(args, "reuse_runs", False))
    results = options.sweep(function, configs, label, cache=cache)
    for version, count in cache.read.items():
        MADE.kept[version] = MADE.kept.get(version, 0) + count
    MADE.ran += len(configs) - sum(cache.read.values())
    return results


@dataclass
class Provenance:
    """This process's runs: how many ran now, and how many each code version's kept results
    gave back."""

    ran: int = 0
    kept: Dict[str, int] = field(default_factory=dict)


MADE = Provenance()


def kept_runs_note() -> str:
    """Which code made this report's runs (more than one version only with --reuse-runs)."""
    now = code_version(CODE)
    made = ", ".join(
        f"{n} by {version}{' (this tree)' if version == now else ''}"
        for version, n in sorted(MADE.kept.items())
    )
    return (
        f"{MADE.ran} runs ran now (code version {now}); read back from "
        f"bench/.work/repro-singh: {made or 'none'}.\n"
    )
