"""English auctions for prioritised jobs (Baranov et al., docs/design.md §4.6): placement rate,
participation and the auctioneer's overhead as the auction's length goes from 0 to the jobs'
mean run time.

The federation: 4 real ``siteagent serve`` agents on loopback (replay backends, each a
64-core cluster about 60% busy with its own stream of small local jobs, testbed/processes/market.py)
booking at one ``siteagent ledger serve``; the auctioneer is the client library
(:class:`siteagent.client.auctioneer.Auctioneer`, as ``siteagent-client english-auction``
runs it) in this process. The agents' rate limits are raised: one auctioneer here stands for a
federation's dispatcher, not for one of many buyers.

The stream, as the paper's test bed had it: jobs whose priorities are uniform over 4 levels,
Poisson arrivals (``--rate`` per second), cores 1 to 8, run times (walltimes) uniform around a
mean of ``--mean-run-time`` seconds, inputs of 0.1 to 2 GB spread uniformly over the sites: at
the default rate, about 70% of the cores the sites' local work (about 60% of each machine)
leaves free. A won window starts once the winner's time to accept is over (10 s here), so the
mean run time is 200 s by default: the accept window is 5% of it, not a whole run time inside
every Tw (the reproduction's agents mode, docs/english-auction.md §4). A run lasts as long as
its arrivals (``--jobs`` of them, 40 by default: 7 minutes) plus the longest auction, in wall
time. For each auction
length ``T_a = k x mean run time``, k from 0 to 1, the same stream (one seed per repeat) is
auctioned; measured per run:

- **jobs placed per second**: placed jobs over the time from the first arrival to the last
  decision, and the share of jobs placed;
- **share of sites taking part**: in each auction, the sites that bid at least once out of 4,
  averaged over the auctions (the paper finds about 70% at k = 0.3-0.4);
- **overhead per job**: the time a job waited beyond its auction's own length, from opening
  to its reservation confirmed (median, p90); of it, the auctioneer's own share (not waiting
  for a site: its journal, signatures, TLS, threads), and its CPU per job;
- **response time by priority**: from arrival to the reservation's end, in mean run times
  (the paper's Tw), for each priority level.

Then, at k = 0, jobs auctioned one at a time (``--serial`` of them, each arriving once the one
before is decided, in ``--serial-runs`` fresh federations): the overhead per job with nothing
else in flight, and the auctioneer's own share of it. Target: < 50 ms. Before each run a fixed
Python loop is timed, since the figure follows how fast the shared machine runs at the time.

Every run has a federation of its own, started afresh, so that no run inherits what another
left in the agents' databases and replayed clusters. Each finished run is kept in
bench/.work/english by its settings and the code's digest (the sweep's ResultCache): an
interrupted bench resumes where it stopped, and the report says how many runs it read back and
the load each run saw. Figures are medians over ``--repeats``
runs. Everything runs on one machine: the agents, the bank and the auctioneer share its CPUs
and its disk, where every bid, accept and confirm is written before it is answered (and synced,
but for a bid: see siteagent/core/transactions.py).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Sequence, Tuple

from bench.common import ROOT, cpu_probe_s, machine, md_table, median, write_results
from bench.repro.sweep import ResultCache, code_version
from siteagent.client.auctioneer import Auctioneer, JobAuction, SitePool
from siteagent.client.english import auction_length
from siteagent.client.jobs import Job, arrival_order
from siteagent.client.journal import Journal
from siteagent.client.sites import load_registry
from siteagent.protocol.models import AuctionedJob
from testbed.processes.market import Market, SiteSpec

TARGET_OVERHEAD_S = 0.050
SITES = 4
PRIORITIES = 4
KS = (0.0, 0.2, 0.35, 0.5, 0.75, 1.0)
QUICK_KS = (0.0, 0.35, 1.0)
#: Seconds after a close that the winner has to accept (and its window's earliest start).
ACCEPT_WINDOW_S = 10
#: What one auctioneer may ask of a site here (a federation's dispatcher).
GENEROUS = {"per_second": 1000.0, "burst": 1000}
#: Where finished runs are kept, by settings and code (an interrupted bench resumes).
RUNS = ROOT / "bench" / ".work" / "english"
CODE = ("siteagent", "testbed/processes", "bench/english.py")


def local_jobs(seed: int, count: int = 4000) -> List[Tuple[int, int, int, int]]:
    """A site's own stream (submit, run time, cores, walltime) on 64 cores: small jobs keeping
    about 60% of the machine busy (the paper's sites take local and global flows alike)."""
    rng = random.Random(seed)
    rows, t = [], 0
    for _ in range(count):
        t += rng.randint(3, 25)
        run = rng.randint(10, 240)
        rows.append((t, run, rng.randint(1, 8), run + rng.randint(0, 60)))
    return rows


def specs() -> List[SiteSpec]:
    return [
        SiteSpec(
            f"hpc{i + 1}",
            seed=101 * (i + 1),
            offset=600 + 300 * i,
            pricing={"policy": "flat"},
            jobs=local_jobs(101 * (i + 1)),
            settings={
                "api": {
                    "rate_limits": {"quotes": GENEROUS, "reservations": GENEROUS, "bids": GENEROUS},
                    "max_live_offers_per_client": 100_000,
                },
                # a window starts once the winner's time to accept is over: short here, since
                # the jobs are short; long enough for an accept on a loaded machine
                "auctions": {"max_open_per_client": 10_000, "accept_window_s": ACCEPT_WINDOW_S},
            },
        )
        for i in range(SITES)
    ]


def stream(count: int, rate: float, mean_run_time: float, seed: int) -> List[Job]:
    """The paper's job stream: Poisson arrivals, priorities uniform over 4 levels, inputs
    spread uniformly over the sites."""
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for index in range(count):
        t += rng.expovariate(rate)
        job = AuctionedJob(
            cores=rng.choice((1, 2, 4, 8)),
            walltime=max(1, round(rng.uniform(0.5, 1.5) * mean_run_time)),
            priority=rng.randint(1, PRIORITIES),
            input_bytes=rng.randint(10**8, 2 * 10**9),
            input_site=f"hpc{rng.randint(1, SITES)}",
        )
        jobs.append(Job(f"job-{index + 1}", job, submit=t))
    return sorted(jobs, key=arrival_order)


@contextlib.contextmanager
def federation(root: Path) -> Iterator[Market]:
    """Four fresh agents and a bank: each run finds the sites as a new day would, whatever
    the runs before it left in their databases and replayed clusters."""
    market = Market(root, specs(), credit="10000000.00")
    market.start()
    try:
        yield market
    finally:
        market.stop()


def auction(
    market: Market, jobs: Sequence[Job], length_s: float, rounds: int, work: Path
) -> Dict[str, Any]:
    """Auction the stream; its figures."""
    registry = load_registry(market.sites_file)
    journal = Journal(work / "journal.db")
    pool = SitePool(registry.sites)
    cpu = time.process_time()
    try:
        with Auctioneer(pool, journal, length_s, rounds) as auctioneer:
            placements = auctioneer.run(jobs)
    finally:
        cpu = time.process_time() - cpu
        pool.close()
        journal.close()
    return figures(placements, length_s, cpu)


def serial(market: Market, jobs: Sequence[Job], work: Path) -> List[JobAuction]:
    """The placed jobs of auctions at k = 0, one at a time."""
    registry = load_registry(market.sites_file)
    journal = Journal(work / "journal.db")
    pool = SitePool(registry.sites)
    try:
        with Auctioneer(pool, journal, 0.0, 1) as auctioneer:
            placements = [auctioneer.place(job) for job in jobs]
    finally:
        pool.close()
        journal.close()
    return [p for p in placements if p.state == "placed"]


def figures(placements: Sequence[JobAuction], length_s: float, cpu_s: float) -> Dict[str, Any]:
    placed = [p for p in placements if p.state == "placed"]
    span = max(p.decided_at for p in placements) - min(p.opened_at for p in placements)
    mean_run = statistics.mean(p.job.job.walltime for p in placements)
    began = min(p.opened_at - p.job.submit for p in placements)
    response: Dict[str, float] = {}
    for level in range(1, PRIORITIES + 1):
        times = [
            (p.end - (began + p.job.submit)) / mean_run
            for p in placed
            if p.job.job.priority == level and p.end is not None
        ]
        response[str(level)] = statistics.mean(times) if times else math.nan
    overheads = sorted(p.overhead_s for p in placed)
    own = sorted(p.own_overhead_s for p in placed)
    return {
        "length_s": length_s,
        "jobs": len(placements),
        "placed": len(placed),
        "placed_share": len(placed) / len(placements),
        "placed_per_s": len(placed) / span if span > 0 else math.nan,
        "participation": statistics.mean(p.participation for p in placements),
        "raises_per_auction": statistics.mean(len(p.raises) for p in placements),
        "overhead_median_s": median(overheads),
        "overhead_p90_s": p90(overheads),
        "own_overhead_median_s": median(own),
        "auctioneer_cpu_per_job_s": cpu_s / len(placements),
        "response_by_priority": response,
    }


def p90(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[int(0.9 * (len(ordered) - 1))] if ordered else math.nan


def run(args: argparse.Namespace) -> Dict[str, Any]:
    ks = QUICK_KS if args.quick else KS
    count = 10 if args.quick else args.jobs
    repeats = 1 if args.quick else args.repeats
    results: Dict[str, Any] = {
        "machine": machine(),
        "settings": {
            "sites": SITES,
            "jobs": count,
            "rate_per_s": args.rate,
            "mean_run_time_s": args.mean_run_time,
            "rounds": args.rounds,
            "repeats": repeats,
            "ks": list(ks),
        },
        "levels": [],
        "runs": [],
        "target_overhead_s": TARGET_OVERHEAD_S,
    }
    with tempfile.TemporaryDirectory(prefix="bench-english-") as scratch:
        work = Path(scratch)
        jobs = stream(args.serial, args.rate, args.mean_run_time, seed=99)
        serial_runs = []
        for number in range(1, args.serial_runs + 1):
            probe = cpu_probe_s()
            with federation(work / f"serial-{number}") as market:
                placed = serial(market, [Job(j.name, j.job) for j in jobs], work / "serial")
            serial_runs.append((placed, probe))
            print(
                f"serial run {number}: {median([p.overhead_s for p in placed]) * 1000:.0f} ms "
                f"median overhead (CPU probe {probe} s)",
                flush=True,
            )
        runs: Dict[float, List[Dict[str, Any]]] = {k: [] for k in ks}
        cache = ResultCache(RUNS, CODE, any_version=args.reuse_runs)
        for repeat in range(repeats):
            for k in ks:
                config = {**results["settings"], "ks": None, "repeat": repeat + 1, "k": k}
                kept = cache.get(level_run, config)
                if kept is None:
                    made = level_run(config, work)
                    cache.put(level_run, config, made)
                else:
                    made = kept["result"]
                    print(f"repeat {repeat + 1}, k {k}: kept from {made['at']}", flush=True)
                runs[k].append(made.pop("figures"))
                results["runs"].append({"repeat": repeat + 1, "k": k, **made, "kept": bool(kept)})
        results["levels"] = [
            {"k": k, **medians(runs[k]), "tw_top_runs": [tw_top(run) for run in runs[k]]}
            for k in ks
        ]
    results["serial"] = serial_figures(serial_runs, args.serial)
    return results


def level_run(config: Mapping[str, Any], work: Path) -> Dict[str, Any]:
    """One run at one auction length on one repeat's stream, in a federation of its own: its
    figures, with when it ran and how fast the machine was then."""
    repeat, k = config["repeat"], config["k"]
    jobs = stream(config["jobs"], config["rate_per_s"], config["mean_run_time_s"], seed=repeat)
    length = auction_length(k, statistics.mean(job.job.walltime for job in jobs))
    at, probe, began = machine(), cpu_probe_s(), time.monotonic()
    where = work / f"run-{repeat}-{k}"
    with federation(where) as market:
        figures = auction(market, jobs, length, config["rounds"], where)
    took = time.monotonic() - began
    print(f"repeat {repeat}, k {k}: T_a {length:.1f} s, {took:.0f} s", flush=True)
    return {
        "figures": figures,
        "at": at["date"],
        "load_at_start": at["load_average_1m_at_start"],
        "cpu_probe_s": probe,
        "code": code_version(CODE),
    }


def serial_figures(runs: Sequence[Tuple[Sequence[JobAuction], float]], jobs: int) -> Dict[str, Any]:
    """Each serial run's median overhead (with the CPU probe taken before it), and over all
    runs' placed jobs the median and p90, of the whole overhead and of the auctioneer's own."""
    placed = [p for run, _ in runs for p in run]
    overheads = [p.overhead_s for p in placed]
    own = [p.own_overhead_s for p in placed]
    return {
        "jobs": jobs * len(runs),
        "placed": len(placed),
        "runs": [
            {"overhead_median_s": median([p.overhead_s for p in run]), "cpu_probe_s": probe}
            for run, probe in runs
        ],
        "overhead_median_s": median(overheads),
        "overhead_p90_s": p90(overheads),
        "own_overhead_median_s": median(own),
        "own_overhead_p90_s": p90(own),
        "met": median(overheads) < TARGET_OVERHEAD_S,
        "own_met": median(own) < TARGET_OVERHEAD_S,
    }


def tw_top(run: Mapping[str, Any]) -> float:
    """The top priority's Tw in one run."""
    return float(run["response_by_priority"][str(PRIORITIES)])


def medians(runs: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """Each figure's median over the runs of one level."""
    out: Dict[str, Any] = {}
    for key, value in runs[0].items():
        if isinstance(value, dict):
            out[key] = {name: median([run[key][name] for run in runs]) for name in value}
        else:
            out[key] = median([run[key] for run in runs])
    return out


def provenance(runs: Sequence[Mapping[str, Any]]) -> str:
    """When the level runs were made and how busy the machine was (a resumed bench spans
    sessions): one sentence."""
    if not runs:
        return ""
    kept = sum(1 for run in runs if run["kept"])
    dates = sorted(run["at"] for run in runs)
    loads = [run["load_at_start"] for run in runs]
    probes = [run["cpu_probe_s"] for run in runs]
    codes = len({run["code"] for run in runs})
    return (
        f"{len(runs)} runs by {codes} code version(s), made {dates[0]} to {dates[-1]} "
        f"({kept} read back from an earlier, interrupted invocation: bench/.work/english); "
        "load average at their starts "
        f"{min(loads)}-{max(loads)} (median {median(loads)}), CPU probe {min(probes)}-"
        f"{max(probes)} s (per run in the JSON)."
    )


def markdown(results: Mapping[str, Any]) -> str:
    settings = results["settings"]
    rows = []
    for level in results["levels"]:
        response = level["response_by_priority"]
        rows.append(
            {
                "k": level["k"],
                "T_a (s)": level["length_s"],
                "placed/s": level["placed_per_s"],
                "placed": f"{level['placed_share'] * 100:.0f}%",
                "sites taking part": f"{level['participation'] * 100:.0f}%",
                "raises": level["raises_per_auction"],
                "overhead p50 (ms)": level["overhead_median_s"] * 1000,
                "overhead p90 (ms)": level["overhead_p90_s"] * 1000,
                "own p50 (ms)": level["own_overhead_median_s"] * 1000,
                "client CPU/job (ms)": level["auctioneer_cpu_per_job_s"] * 1000,
                **{f"Tw p{p}": response[p] for p in sorted(response)},
                f"Tw p{PRIORITIES} runs (min-max)": "{:.2f}-{:.2f}".format(
                    min(level["tw_top_runs"]), max(level["tw_top_runs"])
                ),
            }
        )
    columns = list(rows[0]) if rows else []
    serial = results["serial"]
    met = "met" if serial["met"] else "NOT met"
    own_met = "met" if serial["own_met"] else "NOT met"
    lines = [
        "# English auction (python -m bench english)",
        "",
        f"{settings['sites']} agents (replay, 64 cores each, about 60% busy with local jobs) "
        f"and a bank on loopback; {settings['jobs']} jobs in {PRIORITIES} priority levels, "
        f"Poisson arrivals at {settings['rate_per_s']}/s, mean run time "
        f"{settings['mean_run_time_s']} s; up to {settings['rounds']} rounds per auction; "
        f"medians of {settings['repeats']} run(s) per level. Tw: mean time from arrival to the "
        "reservation's end, in mean run times, by priority (4 the highest). A won window "
        f"starts {ACCEPT_WINDOW_S} s after the close (the time to accept): "
        f"{ACCEPT_WINDOW_S / settings['mean_run_time_s']:.0%} of the mean run time.",
        "",
        md_table(rows, columns),
        provenance(results["runs"]),
        "",
        f"One auction at a time at k = 0 ({serial['placed']} of {serial['jobs']} jobs placed, "
        f"{len(serial['runs'])} runs of {serial['jobs'] // len(serial['runs'])} in fresh "
        "federations): "
        f"overhead per job median {serial['overhead_median_s'] * 1000:.0f} ms (p90 "
        f"{serial['overhead_p90_s'] * 1000:.0f} ms), target < "
        f"{TARGET_OVERHEAD_S * 1000:.0f} ms: {met}; of it the auctioneer's own share "
        f"(the rest is the sites answering: bids, accept, confirm with the bank, each written "
        f"to disk before it answers) median {serial['own_overhead_median_s'] * 1000:.0f} ms "
        f"(p90 {serial['own_overhead_p90_s'] * 1000:.0f} ms): {own_met}. Each run's median: "
        + ", ".join(
            f"{run['overhead_median_s'] * 1000:.0f} ms (CPU probe {run['cpu_probe_s']} s)"
            for run in serial["runs"]
        )
        + "; the probe is a fixed Python loop timed just before the run, for how fast the "
        "shared machine ran then.",
        "",
        f"Measured {results['machine']['date']} on {results['machine']['cpus']} CPUs "
        f"(load {results['machine']['load_average_1m_at_start']} at start), Python "
        f"{results['machine']['python']}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench english", description=__doc__)
    parser.add_argument("--jobs", type=int, default=40, help="jobs in the stream (40)")
    parser.add_argument("--rate", type=float, default=0.09, help="arrivals per second (0.09)")
    parser.add_argument(
        "--mean-run-time", type=float, default=200.0, help="the jobs' mean walltime, s (200)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds per auction (3)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per level (5)")
    parser.add_argument("--serial", type=int, default=40, help="jobs one at a time (40)")
    parser.add_argument(
        "--serial-runs", type=int, default=3, help="runs of those, each federation fresh (3)"
    )
    parser.add_argument("--quick", action="store_true", help="10 jobs, 3 levels, 1 run")
    parser.add_argument(
        "--reuse-runs",
        action="store_true",
        help="take a kept run (bench/.work/english) whatever code made it, not only this "
        "tree's: to finish an interrupted bench after an unrelated change (each run's code "
        "digest is in the JSON)",
    )
    args = parser.parse_args(argv)
    results = run(args)
    write_results("english", results, markdown(results))
    return 0
