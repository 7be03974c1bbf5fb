"""``repro-ramp --part slurm``: Table 2 sites on real Slurm, beside their simulated twins
(beyond the paper; docs/repro-ramp.md §4).

The paper's Resource Agents read a recorded schedule (``fake_qstat``): no scheduler decided
anything, and a won job was a line added to a log. Here two Table 2 resources (atlas1, ricc1)
each run on a real Slurm test cluster (testbed/slurm/cluster.py: slurmctld and 4 slurmd of 256
cores), fed a slice of their trace from their Table 2 offset as ``sbatch --wrap "sleep"`` jobs:
the jobs still running at its start (as recorded) first; thinned to the cluster's size (a job
kept with probability 1,024 / the trace's cores, one wider than the cluster as a whole-cluster
job kept proportionally more often, so that the load is the trace's in expectation); times
compressed 15-fold (as the other agents' replay runs at 15 times the wall clock); walltimes in
whole minutes, as Slurm takes them. Each has a twin agent replaying the very same jobs with
the project's simulator. The same auctions
(Table 3's 16-core requests, their times compressed alike) run on the Slurm pair and on the twin
pair, one after the other: the offers, the prices and the winners side by side, and every
reservation the Slurm agents confirmed looked up in Slurm itself (``scontrol show
reservation``).
"""

from __future__ import annotations

import bisect
import logging
import math
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import yaml

from bench.auction import TABLE2, TRACE_OF
from bench.common import TRACES, ended, machine
from bench.repro import ramp_market
from bench.repro.ramp_market import Buyers, buyer_process
from bench.repro.ramp_parts import request, summary
from bench.repro.seeds import uniform
from siteagent.sim.workload import Workload
from testbed.inprocess.parties import Party
from testbed.processes.market import Market, SiteSpec, on_slurm
from testbed.slurm.cluster import SlurmTestCluster, missing_binaries

SITES = ("atlas1", "ricc1")
COMPRESSION = 15
#: The test cluster: 4 nodes of 256 cores (slurmd's configured size; the jobs only sleep).
NODES, CORES_PER_NODE = 4, 256
CLUSTER_CORES = NODES * CORES_PER_NODE
#: Trace fed before the first auction, and in all; the jobs of the day before the slice that
#: the trace shows still running when it starts come first, with what is left of them.
WARM_UP_S, SLICE_S, DAY_S = 2 * 3600, 4 * 3600, 86400
#: Table 3's 16-core requests; a start sooner than the agents' minute of lead (their offers
#: start a minute after the quote at the earliest) becomes a minute and a half.
REQUESTS = (("exp1", 300, 70), ("exp2", 3600, 55), ("exp3", 43200, 35))
CORES = 16
#: The requests' hour, compressed.
WALLTIME_S = 3600 // COMPRESSION


def unavailable() -> str:
    """Why real Slurm cannot run here ('' when it can)."""
    missing = missing_binaries()
    if missing:
        return (
            f"the Slurm test cluster needs {', '.join(missing)} (tests/setup/install-system-deps)"
        )
    if os.geteuid() != 0:
        return "the Slurm test cluster runs slurmd, which needs root"
    return ""


Job = Tuple[int, int, int, int]  # submit, run, cores, walltime (s, compressed)


def slice_of(name: str, seed: int, warm_up_s: int = WARM_UP_S) -> List[Job]:
    """The resource's trace from its Table 2 offset (shifted by the seed), the warm-up before
    it, thinned to the cluster and compressed: submit from the first job, run, cores,
    walltime (whole minutes)."""
    row = next(row for row in TABLE2 if row[0] == name)
    logging.getLogger("siteagent.sim.workload").setLevel(logging.ERROR)  # counted elsewhere
    workload = Workload(str(TRACES / TRACE_OF[row[1]]), skip_invalid=True)
    try:
        tasks = [(t.submit, t.run, t.size, t.estimate) for t in workload.tasks()]
        cores = workload.cores
    finally:
        workload.close()
    first = tasks[0][0]
    begin = first + row[2] + seed * ramp_market.SEED_SHIFT_S - warm_up_s
    jobs: List[Job] = []
    at = bisect.bisect_left(tasks, (begin - DAY_S,))
    for index, (submit, run, size, estimate) in enumerate(tasks[at:], start=at):
        if submit >= begin + SLICE_S:
            break
        if submit < begin:  # running when the slice starts (as recorded): what is left of it
            if submit + run <= begin:
                continue
            run, estimate = submit + run - begin, max(estimate - (begin - submit), 60)
            submit = begin
        kept = min(size, CLUSTER_CORES)
        if uniform("slurm-slice", [name, index], seed) >= size / kept * CLUSTER_CORES / cores:
            continue
        walltime = 60 * max(1, math.ceil(estimate / COMPRESSION / 60))
        run_s = min(max(1, run // COMPRESSION), walltime)
        jobs.append(((submit - begin) // COMPRESSION, run_s, kept, walltime))
    # times from the first job: where the twin's replay starts (its offset 0)
    return [(submit - jobs[0][0], run, size, wall) for submit, run, size, wall in jobs]


def feed(
    cluster: SlurmTestCluster, jobs: Sequence[Job], origin: float, stop: threading.Event
) -> None:
    """Submit each job at its time after ``origin`` (wall clock) until the slice or ``stop``
    ends."""
    for submit, run, cores, walltime in jobs:
        if stop.wait(max(0.0, origin + submit - time.time())):
            return
        cluster.submit("-n", str(cores), "-t", str(walltime // 60), wrap=f"sleep {run}")


def reservations(cluster: SlurmTestCluster) -> List[Dict[str, str]]:
    """Slurm's reservations on the cluster, each as its fields."""
    shown = cluster.run(["scontrol", "show", "reservation", "-o"]).stdout
    out = []
    for line in shown.splitlines():
        if line.startswith("ReservationName="):
            out.append(dict(field.split("=", 1) for field in line.split() if "=" in field))
    return out


def run(root: Path, seed: int, repetitions: int, warm_up_s: int = WARM_UP_S) -> Dict[str, Any]:
    """The Slurm pair and the twin pair, the auctions on each (after ``warm_up_s`` of trace),
    and what Slurm holds after."""
    started = machine()
    slices = {name: slice_of(name, seed, warm_up_s) for name in SITES}
    clusters = {name: SlurmTestCluster(NODES, CORES_PER_NODE, base_dir=str(root)) for name in SITES}
    stop = threading.Event()
    feeders: List[threading.Thread] = []
    market = None
    buyers = None
    try:
        for cluster in clusters.values():
            cluster.start()
        origin = time.time() + 5
        specs = []
        for name in SITES:
            start, low = ramp_market.prices_of(name)
            pricing = {
                "policy": "load",
                "load": {
                    "start_price": str(start),
                    "min_price": str(low),
                    "rounds": ramp_market.SITE_ROUNDS,
                },
                "externality": {"enabled": False},
            }
            trace = root / f"{name}-slice.swf"
            _write_slice(trace, slices[name])
            twin = {
                "type": "swf",
                "swf": {
                    "trace": str(trace),
                    "offset": 0,
                    "speed": 1.0,
                    "origin": origin,
                    "cores": CLUSTER_CORES,
                },
            }
            specs.append(on_slurm(SiteSpec(f"{name}-slurm", seed, 0, pricing), clusters[name]))
            specs.append(SiteSpec(f"{name}-replay", seed, 0, pricing, twin))
        for name in SITES:
            thread = threading.Thread(
                target=feed, args=(clusters[name], slices[name], origin, stop), daemon=True
            )
            thread.start()
            feeders.append(thread)
        market = Market(
            root / "market",
            specs,
            credit="1000000.00",
            buyers=[Party("slurm-buyer@ramp")],
            poll_interval_s=ramp_market.POLL_S,
            start_timeout_s=ramp_market.START_TIMEOUT_S,
            start_together=len(specs),
        )
        market.start()
        sites = market.write_sites_file(market.buyers[0], "buyer1")
        buyers = Buyers([buyer_process(root / "buyer-state", sites, time.time(), 1.0)])
        files = {kind: _sites_file(market, kind) for kind in ("slurm", "replay")}
        _until(origin + warm_up_s / COMPRESSION)
        auctions = []
        for rep in range(repetitions):
            for exp, start_in, price in REQUESTS:
                for kind in ("slurm", "replay"):
                    command = {
                        "id": f"slurm-{kind}-{rep}-{exp}",
                        "auction": [
                            *request(CORES, price, 3, 1, walltime=WALLTIME_S),
                            *("--sites", str(files[kind])),
                        ],
                        "start_in_s": max(90, start_in // COMPRESSION),
                        "walltime_s": WALLTIME_S,
                        "cancel": False,
                    }
                    found = summary(buyers.run([(0, command)])[0])
                    auctions.append({"kind": kind, "rep": rep, "exp": exp, "price": price, **found})
        held = {name: reservations(cluster) for name, cluster in clusters.items()}
        logged = _logged(market)
        return {
            "auctions": auctions,
            "slurm_reservations": held,
            "offers_logged": logged,
            "jobs_fed": {name: len(jobs) for name, jobs in slices.items()},
            "machine": ended(started),
        }
    finally:
        stop.set()
        if buyers is not None:
            buyers.stop()
        if market is not None:
            market.stop()
        for cluster in clusters.values():
            cluster.stop()


def _write_slice(path: Path, jobs: Sequence[Job]) -> None:
    lines = ["; Version: 2.2", f"; MaxProcs: {CLUSTER_CORES}"]
    for number, (submit, run, cores, walltime) in enumerate(jobs, start=1):
        fields = [number, submit, -1, run, cores, -1, -1, cores, walltime, -1, 1] + [-1] * 7
        lines.append(" ".join(str(v) for v in fields))
    path.write_text("\n".join(lines) + "\n", encoding="latin-1")


def _sites_file(market: Market, kind: str) -> Path:
    """The buyer's sites file naming only the ``kind`` agents (``-slurm`` or ``-replay``)."""
    document = yaml.safe_load((market.root / "buyer1-sites.yaml").read_text())
    document["sites"] = [s for s in document["sites"] if s["name"].endswith(f"-{kind}")]
    path = market.root / f"buyer1-{kind}-sites.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def _until(instant: float) -> None:
    pause = instant - time.time()
    if pause > 0:
        time.sleep(pause)


def _logged(market: Market) -> Dict[str, List[Dict[str, Any]]]:
    found: Dict[str, List[Dict[str, Any]]] = {}
    for name in market.agents:
        text = (market.root / f"{name}.log").read_text(errors="replace")
        found[name] = [
            {"at": int(m[0]), "round": int(m[1]), "load": float(m[4]), "offer": float(m[6])}
            for m in ramp_market.PRICE_LINE.findall(text)
        ]
    return found


def in_temp(seed: int, repetitions: int, warm_up_s: int = WARM_UP_S) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="repro-ramp-slurm-") as root:
        return run(Path(root), seed, repetitions, warm_up_s)
