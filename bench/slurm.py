"""The agent on a real slurmctld: accept latency, snapshot cost, agreement with Slurm's starts,
and overlapping accepts.

Starts the test suite's four-node Slurm cluster (testbed/slurm/cluster.py: Debian's slurmctld and
four slurmd on localhost, 64 cores), then a second one of mixed node sizes and weights with two
partitions sharing nodes, and measures, in one run:

- **accept**: ``ReservationManager.accept`` of a recorded offer, up to a verified TENTATIVE
  reservation (re-check against the running work and reservations read now, intent written,
  ``scontrol create``, read back, record moved), next to the bare ``scontrol create
  reservation`` + ``delete`` with the very argument list the backend builds; rounds
  interleaved so both see the same load. Target: median < 50 ms and at most 10x the bare
  command. Measured on an idle queue and again with the queue full, where consecutive
  accepts reuse the running jobs the last one read (no job started or ended between them),
  and once more with every accept reading them; each through the commands and, where
  pyslurm runs in this process (the host's release), through pyslurm. ``--only accepts``
  measures only these, best on a quiet machine.
- **snapshot**: ``SlurmBackend.snapshot`` (squeue --json, sinfo --json, scontrol show
  reservation, parsed) and a conservative ``plan`` of it with 2,000 jobs queued, next to the
  bare ``squeue --json`` it starts with.
- **agreement**: for random queues (core and whole-node requests, some with reservations and
  jobs in one), how many of Slurm's published expected starts the planner predicts within a
  minute, and how far off it is (``siteagent.core.estimates.compare_starts``): the node-aware
  plan the agent uses, and the pooled one it used before on the same snapshot. Target: 80 %.
- **overlapping accepts**: 50 clients accepting overlapping offers at once, on whole nodes and
  on cores: how many Slurm refused or shrank after the agent admitted them. Target: none.
- **pyslurm**: the same snapshot through the pyslurm backend (libslurm's calls, no child
  processes) next to the command backend's, interleaved, on the same 2,000-job queue; needs
  pyslurm installed (./test builds 22.5.3 into .venv), else the section says why it is missing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import pickle
import random
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Sequence, Tuple, Union

from bench.common import machine, md_table, median, write_results
from siteagent.backends.base import BackendError
from siteagent.backends.pyslurm import PyslurmBackend
from siteagent.backends.slurm import SlurmBackend
from siteagent.backends.slurm.arguments import reservation_args
from siteagent.config import loading
from siteagent.core.estimates import DEFAULT_TOLERANCE_S, compare_starts
from siteagent.core.prediction import plan
from siteagent.core.values import (
    Backfill,
    CapacityUnit,
    ClusterSnapshot,
    Placement,
    ReservationSpec,
)
from siteagent.market.lifecycle import OfferRefused, ReservationFailed
from siteagent.market.site import Site, open_site
from testbed.inprocess.offers import record_offer
from testbed.slurm.cluster import (
    MIXED_NODES,
    MIXED_PARTITIONS,
    ClusterError,
    SlurmTestCluster,
)
from testbed.slurm.install import SlurmInstall, install_for, selected_series
from testbed.slurm.queue import (
    BACKFILL_PASS_S,
    mixed_queue,
    random_queue,
    reserve_windows,
    submit_into,
    submit_many,
)

TARGET_ACCEPT_MEDIAN_S = 0.050
TARGET_ACCEPT_RATIO = 10.0
TARGET_AGREEMENT = 0.8
WORK = Path(__file__).resolve().parent / ".work" / "slurm"
SNAPSHOTS = WORK / "snapshots"
RESULTS = Path(__file__).resolve().parent / "results"
DEBUG_BACKFILL = ("DebugFlags=Backfill,BackfillMap", "SlurmctldDebug=verbose")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (p99 of 50 samples is the largest but one)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def latency(values: Sequence[float]) -> Dict[str, float]:
    return {
        "median_ms": median(values) * 1000,
        "p99_ms": percentile(values, 99) * 1000,
        "samples": len(values),
    }


def timed(action: Callable[..., Any], *args: Any, **kwargs: Any) -> float:
    began = time.perf_counter()
    action(*args, **kwargs)
    return time.perf_counter() - began


def open_slurm_site(
    cluster: SlurmTestCluster,
    state_dir: Path,
    unit: CapacityUnit = CapacityUnit.CORE,
    backend: str = "slurm",
) -> Site:
    """The site ``siteagent serve`` would open for this cluster (partition ``batch``), through
    the commands (``slurm``) or libslurm (``pyslurm``)."""
    config = loading.parse(
        {
            "state_dir": str(state_dir),
            "backend": {
                "type": backend,
                "slurm": {
                    **cluster.backend_options(),
                    "partition": "batch",
                    "unit": unit.value,
                    "users": ["root"],
                },
            },
            "reservations": {"confirm_timeout_s": 600},
        }
    )
    return open_site(config)


def bare_create_delete(cluster: SlurmTestCluster, backend: SlurmBackend, name: str) -> None:
    """What an administrator would type: the backend's own argument list, then delete."""
    start = int(time.time()) + 7200
    spec = ReservationSpec(name=name, start=start, duration=1800, size=8, users=("root",))
    cluster.run(reservation_args(spec, backend.config, int(time.time())))
    cluster.run(["scontrol", "delete", f"ReservationName={name}"])


def accept_rounds(
    cluster: SlurmTestCluster, site: Site, rounds: int, label: str, reread: bool = False
) -> Dict[str, Any]:
    """Interleaved rounds of the bare command and of accept; ours is cleaned up untimed.
    ``reread``: every re-check reads the running jobs (as the first accept after a job
    started or ended does), none reuses the last accept's."""
    commands = SlurmBackend(cluster.slurm_config(users=("root",), partition="batch"))
    backend = site.backend
    assert isinstance(backend, (SlurmBackend, PyslurmBackend))
    bare: List[float] = []
    accept: List[float] = []
    for index in range(rounds):
        bare.append(timed(bare_create_delete, cluster, commands, f"sa-bare-{label}-{index}"))
        start = int(time.time()) + 7200
        offer = record_offer(site.manager, 8, start, 1800)
        if reread:
            backend.running.forget()
        accept.append(timed(site.manager.accept, offer.id, "bench", offer.id, users=("root",)))
        cluster.delete_all_reservations()
        print(f"  {label} round {index + 1}/{rounds}", end="\r", flush=True)
    print()
    ours, reference = latency(accept), latency(bare)
    return {
        "queue": label,
        "backend": backend.name,
        "accept": ours,
        "bare_create_delete": reference,
        "ratio_median": ours["median_ms"] / reference["median_ms"],
    }


def snapshot_cost(cluster: SlurmTestCluster, site: Site, repeats: int) -> Dict[str, Any]:
    squeue_s = [timed(lambda: cluster.run(["squeue", "--json"])) for _ in range(repeats)]
    snapshot_s: List[float] = []
    plan_s: List[float] = []
    for _ in range(repeats):
        began = time.perf_counter()
        snapshot = site.backend.snapshot()
        snapshot_s.append(time.perf_counter() - began)
        plan_s.append(timed(plan, snapshot))
    return {
        "pending": len(snapshot.pending),
        "running": len(snapshot.running),
        "squeue_json_s": median(squeue_s),
        "snapshot_s": median(snapshot_s),
        "plan_s": median(plan_s),
        "ratio_snapshot_to_squeue": median(snapshot_s) / median(squeue_s),
    }


def pyslurm_snapshot_cost(site: Site, repeats: int) -> Dict[str, Any]:
    """The snapshot through pyslurm and through the commands, rounds interleaved so both see
    the same load; ``{"skipped": why}`` where pyslurm cannot be used."""
    commands = site.backend
    assert isinstance(commands, SlurmBackend)
    try:
        pyslurm = PyslurmBackend(commands.config)
    except BackendError as exc:
        return {"skipped": str(exc)}
    commands_s: List[float] = []
    pyslurm_s: List[float] = []
    try:
        for _ in range(repeats):
            commands_s.append(timed(commands.snapshot))
            pyslurm_s.append(timed(pyslurm.snapshot))
        jobs = len(pyslurm.snapshot().pending)
        version = pyslurm.pyslurm.__version__
    finally:
        pyslurm.close()
    return {
        "pyslurm": version,
        "pending": jobs,
        "commands_snapshot_s": median(commands_s),
        "pyslurm_snapshot_s": median(pyslurm_s),
        "ratio_pyslurm_to_commands": median(pyslurm_s) / median(commands_s),
    }


def agreement(cluster: SlurmTestCluster, site: Site, label: str, jobs: int) -> Dict[str, Any]:
    """The node-aware plan's agreement with Slurm's published starts, and the pooled plan's on
    the same snapshot. Jobs Slurm publishes no start for (its search left its one-day window)
    are counted, not compared; so are jobs in a reservation (unplanned)."""
    snapshot = site.backend.snapshot()
    compared = compare_starts(snapshot)
    ours = compared.summary()
    pooled = compare_starts(dataclasses.replace(snapshot, placement=Placement.POOLED)).summary()
    name = keep_snapshot(snapshot, f"{cluster.install.series} {label}")
    log = cluster.dir / "log" / "slurmctld.log"
    if log.exists():
        shutil.copyfile(log, SNAPSHOTS / f"{name}.slurmctld.log")
    return {
        "queue": label,
        "jobs": jobs,
        "compared": ours["compared"],
        "no published start": ours["without_estimate"],
        "in a reservation": ours["unplanned"],
        "within 1 min": ours["fraction_within_1_min"],
        "median |diff| s": ours["median_abs_difference_s"],
        "pooled within 1 min": pooled["fraction_within_1_min"],
        "pooled median |diff| s": pooled["median_abs_difference_s"],
        "pairs": [[p.job_id, p.published, p.predicted] for p in compared.pairs],
    }


def keep_snapshot(snapshot: ClusterSnapshot, label: str) -> str:
    """The snapshot an agreement row was measured on, pickled under bench/.work/slurm, so a
    change to the plan can be checked against the very same queue (python -m bench slurm
    --replay)."""
    name = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
    SNAPSHOTS.mkdir(parents=True, exist_ok=True)
    (SNAPSHOTS / f"{name}.pickle").write_bytes(pickle.dumps(snapshot))
    return name


def old_queue(cluster: SlurmTestCluster, site: Site, seed: int, pending: int) -> Dict[str, Any]:
    """The queue measured before: 4 running and ``pending`` core jobs (testbed.random_queue)."""
    cluster.reset()
    running, queued = random_queue(seed, 4, pending, 64)
    for cores, minutes in running + queued:
        cluster.submit(f"-n{cores}", "-t", str(minutes))
    time.sleep(3 * BACKFILL_PASS_S)
    return agreement(cluster, site, f"cores only, seed {seed}", len(running) + pending)


def new_queue(
    cluster: SlurmTestCluster, site: Site, seed: int, jobs: int, partitions: Sequence[str] = ()
) -> Dict[str, Any]:
    """A mixed queue (testbed.mixed_queue) with reservations and jobs in one."""
    cluster.reset()
    reserve_windows(cluster, cluster.node_names[2])
    cores = [node.cpus for node in cluster.nodes]
    max_nodes = min(len(part.nodes) for part in cluster.partitions) - 1
    queue = mixed_queue(seed, jobs, cores, max_nodes, partitions)
    submit_into(cluster, queue, "later")
    label = f"mixed, seed {seed}, reservations" + (", two partitions" if partitions else "")
    return agreement(cluster, site, label, jobs)


def overlapping_accepts(
    cluster: SlurmTestCluster, state_dir: Path, unit: CapacityUnit, sizes: Sequence[int]
) -> Dict[str, Any]:
    """50 clients accept at once offers whose windows overlap in the next six minutes."""
    cluster.reset()
    site = open_slurm_site(cluster, state_dir, unit)
    try:
        rng = random.Random(1)
        now = int(site.manager.clock())
        offers = [
            record_offer(
                site.manager,
                rng.randint(*sizes),
                now + 60 + rng.randint(0, 240),
                rng.randint(30, 90),
                valid_s=600,
            )
            for _ in range(50)
        ]
        outcomes = accept_at_once(site, offers)
    finally:
        site.close()
    return overlap_row(unit.value, f"{sizes[0]}-{sizes[1]}", outcomes)


def boundary_accepts(cluster: SlurmTestCluster, state_dir: Path) -> Dict[str, Any]:
    """48 clients accept at once 10-minute offers of 4 to 8 cores that start one second
    before, at and one second after the end of a running job's limit on each node (the
    boundary a buyer found: docs/slurm.md §11); the agent must withdraw the first two kinds,
    as Slurm would refuse them."""
    cluster.reset()
    jobs = [cluster.submit("-n16", "-t", str(minutes)) for minutes in (6, 7, 8, 9)]
    site = open_slurm_site(cluster, state_dir)
    try:
        deadline = time.monotonic() + 60
        running: List[Any] = []
        while len(running) < len(jobs) and time.monotonic() < deadline:
            running = [j for j in site.backend.snapshot().running if j.id in jobs]
            time.sleep(0.5)
        rng = random.Random(2)
        offers = [
            record_offer(
                site.manager, rng.randint(4, 8), job.start + job.limit + offset, 600, valid_s=600
            )
            for job in running
            for offset in (-1, 0, 1)
            for _ in range(4)
        ]
        outcomes = accept_at_once(site, offers)
    finally:
        site.close()
    return overlap_row("core, at running jobs' ends", "4-8", outcomes)


def accept_at_once(site: Site, offers: Sequence[Any]) -> List[str]:
    """Each offer accepted by its own client thread, all released together; the outcomes."""
    outcomes: List[str] = []
    barrier = threading.Barrier(len(offers))

    def client(index: int, offer_id: str) -> None:
        barrier.wait()
        try:
            site.manager.accept(offer_id, f"client-{index}", "k", users=("root",))
            outcomes.append("granted")
        except OfferRefused:
            outcomes.append("withdrawn")
        except ReservationFailed:
            outcomes.append("refused by Slurm")

    threads = [
        threading.Thread(target=client, args=(index, offer.id))
        for index, offer in enumerate(offers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def overlap_row(unit: str, sizes: str, outcomes: Sequence[str]) -> Dict[str, Any]:
    return {
        "unit": unit,
        "offer sizes": sizes,
        "accepts": len(outcomes),
        "granted": outcomes.count("granted"),
        "withdrawn (capacity gone)": outcomes.count("withdrawn"),
        "refused or shrunk by Slurm": outcomes.count("refused by Slurm"),
    }


def report(data: Dict[str, Any]) -> str:
    """One table with a column per Slurm release, then each release's measurements."""
    versions: Dict[str, Dict[str, Any]] = data["versions"]
    rows: List[Dict[str, Any]] = []
    for label, value in SUMMARY:
        rows.append({"": label, **{series: value(v) for series, v in versions.items()}})
    return (
        "# The agent on a real slurmctld, on every Slurm release tested\n\n"
        f"Measured {data['machine']['date']} on {data['machine']['cpus']} CPUs shared with other "
        f"work (load average {data['machine']['load_average_1m_at_start']} at the start: the "
        "latencies are the machine's as much as the agent's; compare the columns, which ran "
        "one after another, with care); one slurmctld and a slurmd per node on localhost (the "
        "host's Slurm, and newer "
        "ones in chroots: testbed/slurm/install.py). Four 16-core nodes (64 cores), and for "
        "the second shape nodes of 8, 24, 16, 8 and 32 cores of weights 10, 1, 5, 1 and 20 in "
        "two partitions sharing two nodes (testbed.slurm.cluster.MIXED_NODES). "
        f"{data['rounds']} interleaved rounds; medians."
        + _parts(data.get("parts", []))
        + "\n\n"
        + md_table(rows, list(rows[0]))
        + "\nTargets: agreement >= 80 % within 60 s, 0 refused after admission, accept "
        "median < 50 ms with 2,000 queued. The node-aware plan follows each release's backfill "
        "(docs/slurm.md §10, and §11 for what changed in 24.11).\n\n"
        + "\n".join(
            f"# Slurm {series} ({v['release']})\n\n" + version_report(v)
            for series, v in versions.items()
        )
    )


def _parts(parts: Sequence[Mapping[str, Any]]) -> str:
    """When each part was measured, where runs of ``--only`` replaced some figures."""
    if len(parts) < 2:
        return ""
    said = [
        f"{p['part']} on {p['date']} ({', '.join(p['releases'])}"
        + (f"; load {p['load']} at its start)" if p["load"] is not None else ")")
        for p in parts
    ]
    return (
        " Measured in parts (python -m bench slurm --only PART replaces one part's figures): "
        + "; then ".join(said)
        + ". Each figure is from the last part that measured it."
    )


def _agreement(v: Mapping[str, Any]) -> str:
    agree = v["agreement"]
    compared = sum(row["compared"] for row in agree)
    within = sum(row["within 1 min"] * row["compared"] for row in agree)
    return f"{within / compared:.0%} of {compared}" if compared else "-"


def _accept(v: Mapping[str, Any], queue: str, backend: str = "slurm") -> Any:
    """The median accept of one queue through one backend, ms; "-" where not measured."""
    for row in v["accept"]:
        if row["queue"] == queue and row.get("backend", "slurm") == backend:
            return round(row["accept"]["median_ms"], 1)
    return "-"


#: The rows of the table across releases: a label and how to read it from one release's data.
SUMMARY: Sequence[Tuple[str, Callable[[Mapping[str, Any]], Any]]] = (
    ("release", lambda v: v["release"]),
    ("published starts predicted within 60 s", _agreement),
    (
        "overlapping accepts refused by Slurm after admission",
        lambda v: sum(row["refused or shrunk by Slurm"] for row in v["overlapping"]),
    ),
    (
        "  of them at running jobs' ends (boundary)",
        lambda v: v["overlapping"][-1]["refused or shrunk by Slurm"],
    ),
    ("accept median ms, idle", lambda v: _accept(v, "idle")),
    ("accept median ms, 2,000 queued", lambda v: _accept(v, "full")),
    ("  through pyslurm, idle", lambda v: _accept(v, "idle", "pyslurm")),
    ("  through pyslurm, 2,000 queued", lambda v: _accept(v, "full", "pyslurm")),
    (
        "bare scontrol create+delete median ms",
        lambda v: round(v["accept"][0]["bare_create_delete"]["median_ms"], 1),
    ),
    ("snapshot s, 2,000 queued", lambda v: round(v["snapshot"]["snapshot_s"], 3)),
)


def version_report(data: Mapping[str, Any]) -> str:
    accept_rows: List[Mapping[str, Any]] = [
        {
            "queue": r["queue"],
            "backend": r.get("backend", "slurm"),
            "accept median ms": r["accept"]["median_ms"],
            "accept p99 ms": r["accept"]["p99_ms"],
            "bare median ms": r["bare_create_delete"]["median_ms"],
            "bare p99 ms": r["bare_create_delete"]["p99_ms"],
            "ratio (medians)": r["ratio_median"],
        }
        for r in data["accept"]
    ]
    snap = data["snapshot"]
    agree: List[Mapping[str, Any]] = data["agreement"]
    compared = sum(row["compared"] for row in agree)
    within = sum(row["within 1 min"] * row["compared"] for row in agree)
    pooled = sum(row["pooled within 1 min"] * row["compared"] for row in agree)
    accepted: List[Mapping[str, Any]] = data["overlapping"]
    through_pyslurm = data["pyslurm_snapshot"]
    met = {
        backend: all(
            r["accept"]["median_ms"] < TARGET_ACCEPT_MEDIAN_S * 1000
            and r["ratio_median"] <= TARGET_ACCEPT_RATIO
            for r in data["accept"]
            if r.get("backend", "slurm") == backend and r["queue"] != "full-squeue-each-time"
        )
        for backend in sorted({r.get("backend", "slurm") for r in data["accept"]})
    }
    pyslurm_accept = data.get("pyslurm_accept", "its accepts were measured before it had rows")
    agreed = within >= TARGET_AGREEMENT * compared
    none_refused = all(row["refused or shrunk by Slurm"] == 0 for row in accepted)
    return (
        "## Predicted starts against Slurm's published starts\n\n"
        + md_table(agree, list(agree[0]))
        + f"\nOver all queues: {within:.0f} of {compared} published starts predicted within "
        f"{DEFAULT_TOLERANCE_S} s ({within / compared:.0%}) by the node-aware plan, "
        f"{pooled:.0f} ({pooled / compared:.0%}) by the pooled plan on the same snapshots. "
        f"Target >= {TARGET_AGREEMENT:.0%}: {'met' if agreed else 'NOT met'}.\n\n"
        "The node-aware plan places each pending job as this release's backfill with "
        "select/cons_tres does (siteagent.core.nodes): best fit over weight-ordered nodes, "
        "running jobs core by core, planned jobs holding their nodes whole, reservations. The "
        "pooled plan counts the partition's cores as one pool; Slurm's fragmentation then "
        "pushes many starts later than it predicts. The agent's live plan takes Slurm's "
        "published start wherever there is one (Source.BATCH) and predicts the rest, so this "
        "is what the prediction is worth where Slurm publishes nothing (beyond bf_window).\n\n"
        "## Fifty overlapping accepts\n\n"
        + md_table(accepted, list(accepted[0]))
        + "\nTarget: none refused or shrunk by Slurm after the agent admitted it: "
        f"{'met' if none_refused else 'NOT met'}. The accept's re-check places the window on "
        "the node-aware plan (cores free all along it, as Slurm requires, over the whole "
        "minutes Slurm holds, and from a second after a running job's limit, docs/slurm.md "
        "§11) and creates it on those nodes (Nodes=, with CoreCnt= per node up to 23.02 and "
        "one total from 23.11). The last row's offers start a second before, at, and a second "
        "after running jobs' ends.\n\n"
        "## Accept to a verified tentative reservation\n\n"
        + md_table(accept_rows, list(accept_rows[0]))
        + "\nTarget: median < 50 ms and <= 10x the bare command, idle and full: "
        + "; ".join(f"{b} {'met' if ok else 'NOT met'}" for b, ok in met.items())
        + ". The re-check reads the nodes and reservations, and the running work (text squeue "
        "-t, without the queue; through pyslurm, the loaded jobs' running ones) only when a job "
        "started or ended since the last accept read it (the nodes' allocated cores say so) or "
        "that read is 10 s old: with 2,000 jobs queued squeue alone takes about 20 ms, since "
        "slurmctld 22.05 sends every job and squeue filters them. The full-squeue-each-time "
        "rows read it every time. The pyslurm backend makes no child process: "
        + (
            "its rows are above."
            if pyslurm_accept == "measured"
            else f"not measured on this release ({pyslurm_accept})."
        )
        + "\n\n"
        f"## Snapshot with {snap['pending']:,} jobs queued\n\n"
        + md_table([snap], list(snap))
        + "\n## Snapshot through pyslurm against the commands\n\n"
        + (
            f"Not measured: {through_pyslurm['skipped']}\n"
            if "skipped" in through_pyslurm
            else md_table([through_pyslurm], list(through_pyslurm))
            + "\nThe same queue, the two backends' snapshots interleaved (medians). The "
            "commands run squeue --json, sinfo --json and scontrol at once; pyslurm makes the "
            "three calls one after another on its worker thread, without forking or JSON.\n"
        )
    )


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench slurm", description=__doc__)
    parser.add_argument("--rounds", type=int, default=30, help="accept rounds (default 30)")
    parser.add_argument("--queued", type=int, default=2000, help="jobs queued (default 2000)")
    parser.add_argument("--seed", type=int, default=3, help="random queue seed (default 3)")
    parser.add_argument(
        "--versions",
        default=",".join(selected_series()),
        help="Slurm releases to measure, comma-separated (default: SLURM_VERSIONS, else every "
        "one: the host's and those of the chroots tests/setup/build-slurm-chroots makes)",
    )
    parser.add_argument(
        "--only",
        choices=PARTS,
        help="measure one part again and keep the last run's figures for the rest: "
        "'agreement' with Slurm's starts (a few minutes a release), or 'accepts', the accept "
        "latency through the commands and through pyslurm (best on a quiet machine)",
    )
    parser.add_argument(
        "--debug-backfill",
        action="store_true",
        help="run slurmctld with DebugFlags=Backfill,BackfillMap and keep its log beside each "
        "kept snapshot (bench/.work/slurm/snapshots), to see why Slurm planned a job where it did",
    )
    parser.add_argument(
        "--replay",
        action="store_true",
        help="start no cluster: compare the plan again on the snapshots the last runs kept "
        "under bench/.work/slurm/snapshots (after changing the plan), print the agreement",
    )
    args = parser.parse_args(argv)
    if args.replay:
        return replay()
    WORK.mkdir(parents=True, exist_ok=True)
    data: Dict[str, Any] = {
        "machine": machine(),
        "rounds": args.rounds,
        "seed": args.seed,
        "versions": {},
    }
    previous = carried_over(data) if args.only else {}
    data["parts"] = [
        *data.get("parts", []),
        {
            "part": args.only or "everything",
            "releases": args.versions.split(","),
            "date": data["machine"]["date"],
            "load": data["machine"]["load_average_1m_at_start"],
        },
    ]
    for series in args.versions.split(","):
        print(f"== Slurm {series}", flush=True)
        data["versions"][series] = {
            k: v for k, v in previous.pop(series, {}).items() if k not in PARTS.get(args.only, ())
        }
        try:
            measure(args, data["versions"][series], install_for(series))
        except (ClusterError, LookupError) as exc:
            print(f"the Slurm {series} test cluster failed: {exc}")
            return 1
    data["versions"].update(previous)  # releases not measured this time, as they were
    data["versions"] = dict(sorted(data["versions"].items(), key=lambda kv: release(kv[0])))
    write_results("slurm", data, report(data))
    return 0


def release(series: str) -> Tuple[int, int]:
    major, minor = series.split(".")
    return int(major), int(minor)


#: The parts ``--only`` measures again, and the keys of a release's figures each one writes.
PARTS: Dict[str, Tuple[str, ...]] = {
    "agreement": ("agreement",),
    "accepts": ("accept", "pyslurm_accept"),
}


def carried_over(data: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """With --only, the last run's figures (bench/results/slurm.json) per release, and the
    parts it was measured in (``parts``: which part, releases, when, at what load); the part
    measured now replaces its figures for the releases measured now, and the report lists
    every part, so each figure's date is known."""
    path = RESULTS / "slurm.json"
    if not path.exists():
        raise SystemExit("--only needs a full run's bench/results/slurm.json first")
    last = json.loads(path.read_text())
    data["parts"] = last.get("parts") or _parts_before(last)
    versions: Dict[str, Dict[str, Any]] = last["versions"]
    return versions


def _parts_before(last: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The parts of a result written before they were recorded: one full run, then perhaps
    the agreement again (``carried_over`` named the full run's date)."""
    releases = sorted(last["versions"], key=release)
    if not last.get("carried_over"):
        date, load = last["machine"]["date"], last["machine"]["load_average_1m_at_start"]
        return [{"part": "everything", "releases": releases, "date": date, "load": load}]
    full = {"part": "everything", "releases": releases, "date": last["carried_over"], "load": None}
    again = {
        "part": "agreement",
        "releases": last.get("measured", releases),
        "date": last["machine"]["date"],
        "load": last["machine"]["load_average_1m_at_start"],
    }
    return [full, again]


def measure(args: argparse.Namespace, data: Dict[str, Any], install: SlurmInstall) -> None:
    state = WORK / f"state-{install.series}-{int(time.time())}"
    data["release"] = install.release()
    debug = DEBUG_BACKFILL if args.debug_backfill else ()
    if args.only == "accepts":
        with SlurmTestCluster(install=install) as cluster:
            site = open_slurm_site(cluster, state / "site")
            try:
                measure_accept_latency(args, data, cluster, site, state)
            finally:
                site.close()
        return
    with SlurmTestCluster(install=install, extra_config=debug) as cluster:
        site = open_slurm_site(cluster, state / "site")
        try:
            print("agreement on the four-node cluster ...", flush=True)
            data["agreement"] = [
                old_queue(cluster, site, args.seed, 40),
                new_queue(cluster, site, args.seed, 40),
                new_queue(cluster, site, args.seed + 1, 200),
            ]
            if args.only != "agreement":
                measure_accepts(args, data, cluster, site, state)
        finally:
            site.close()
    print("agreement on the mixed cluster ...", flush=True)
    shape = (MIXED_NODES, MIXED_PARTITIONS)
    with SlurmTestCluster(install=install, shape=shape, extra_config=debug) as mixed:
        site = open_slurm_site(mixed, state / "mixed")
        try:
            for seed, jobs in ((args.seed, 60), (args.seed + 1, 150)):
                data["agreement"].append(new_queue(mixed, site, seed, jobs, ("batch", "wide")))
        finally:
            site.close()


def measure_accepts(
    args: argparse.Namespace,
    data: Dict[str, Any],
    cluster: SlurmTestCluster,
    site: Site,
    state: Path,
) -> None:
    """The overlapping accepts, accept latency and snapshot cost on the four-node cluster."""
    print("overlapping accepts ...", flush=True)
    data["overlapping"] = [
        overlapping_accepts(cluster, state / "nodes", CapacityUnit.NODE, (1, 2)),
        overlapping_accepts(cluster, state / "cores", CapacityUnit.CORE, (8, 24)),
        boundary_accepts(cluster, state / "boundary"),
    ]
    cluster.reset()
    measure_accept_latency(args, data, cluster, site, state, snapshots=True)


def measure_accept_latency(
    args: argparse.Namespace,
    data: Dict[str, Any],
    cluster: SlurmTestCluster,
    site: Site,
    state: Path,
    snapshots: bool = False,
) -> None:
    """Accepts on the idle cluster, then with the queue full, through the commands and, where
    pyslurm runs in this process, through it (its rows beside theirs, rounds one after the
    other); with ``snapshots``, the snapshot's cost on the full queue too."""
    print("accepts ...", flush=True)
    through = open_pyslurm_site(cluster, state / "pyslurm")
    sites = [site] if isinstance(through, str) else [site, through]
    try:
        data["accept"] = [accept_rounds(cluster, s, args.rounds, "idle") for s in sites]
        print(f"submitting {args.queued} jobs ...", flush=True)
        submit_many(cluster, args.queued, ["-n64", "-t", "60"])
        if snapshots:
            data["snapshot"] = snapshot_cost(cluster, site, repeats=7)
            data["pyslurm_snapshot"] = pyslurm_snapshot_cost(site, repeats=7)
        for s in sites:
            data["accept"].append(accept_rounds(cluster, s, args.rounds, "full"))
        for s in sites:
            data["accept"].append(
                accept_rounds(cluster, s, args.rounds, "full-squeue-each-time", reread=True)
            )
    finally:
        if not isinstance(through, str):
            through.close()
    data["pyslurm_accept"] = through if isinstance(through, str) else "measured"


def open_pyslurm_site(cluster: SlurmTestCluster, state_dir: Path) -> Union[Site, str]:
    """The same site through pyslurm, or why it cannot run here (no pyslurm installed, or
    the release's Slurm runs in a chroot, where this process's libslurm cannot reach it)."""
    try:
        return open_slurm_site(cluster, state_dir, backend="pyslurm")
    except BackendError as exc:
        return str(exc)


def replay() -> int:
    """The plan's agreement again on every kept snapshot (see keep_snapshot)."""
    paths = sorted(SNAPSHOTS.glob("*.pickle"))
    if not paths:
        print(f"no snapshots under {SNAPSHOTS}: run python -m bench slurm first")
        return 1
    for path in paths:
        snapshot: ClusterSnapshot = pickle.loads(path.read_bytes())
        major, minor = path.stem.split("-")[:2]
        old = snapshot.backfill
        backfill = Backfill.of_release(
            (int(major), int(minor)),
            resolution=old.resolution,
            window=old.window,
            kill_wait=old.kill_wait,
        )
        snapshot = dataclasses.replace(snapshot, backfill=backfill)
        summary = compare_starts(snapshot).summary()
        print(f"{path.stem:60s} {summary['fraction_within_1_min']:6.1%} of {summary['compared']}")
    return 0
