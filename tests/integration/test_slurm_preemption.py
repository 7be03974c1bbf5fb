"""Absolute priorities through Slurm's own preemption, on the real test cluster (2 nodes x 8
cores, accounting on): QoS ``p1`` to ``p4``, each preempting the ones below it
(``PreemptType=preempt/qos``, ``PreemptMode=REQUEUE``; SUSPEND,GANG time-slices jobs of one
partition instead of suspending them), the agent told their levels (``backend.slurm.qos_levels``)
and that Slurm requeues (``planner.preemption: requeue``).

With both nodes full of ``p1`` jobs, the agent's plan predicts that a ``p4`` job starts at
once, and Slurm starts it at once; and in an English auction the agent, bidding only what is
free now or held by lower-priority jobs (``auctions.mode: now``), bids for a ``p4`` job with
the ``p1`` work it would push out counted, wins, reserves the window over the running job
(``IGNORE_JOBS``), and the job submitted into the reservation with its QoS runs there, Slurm
requeueing the ``p1`` job it displaced.
"""

from __future__ import annotations

import dataclasses
import time
from decimal import Decimal
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

from siteagent.backends.slurm import SlurmBackend
from siteagent.backends.slurm.config import SlurmConfig
from siteagent.client.auctioneer import Auctioneer, SitePool
from siteagent.client.jobs import Job
from siteagent.client.journal import Journal
from siteagent.core.prediction import plan
from siteagent.core.values import Job as BatchJob
from siteagent.protocol.models import AuctionedJob
from testbed.processes.agents import SlurmBatch
from testbed.processes.programs import running_slurm, wait_until
from testbed.slurm.cluster import SlurmTestCluster
from testbed.slurm.site import SlurmSite

pytestmark = pytest.mark.slurm

LEVELS = {"p1": 1, "p2": 2, "p3": 3, "p4": 4}
PREEMPTION = [
    "PreemptType=preempt/qos",
    "PreemptMode=REQUEUE",
    "AccountingStorageEnforce=associations,qos",
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmTestCluster]:
    """The host's release only (preemption by QoS is what this tests, not a release)."""
    for made in running_slurm(accounting=True, nodes=2, cpus_per_node=8, extra_config=PREEMPTION):
        add_levels(made)
        yield made


def add_levels(cluster: SlurmTestCluster) -> None:
    """QoS p1 to p4, each preempting those below it, granted to root's account."""
    for qos in LEVELS:
        sacctmgr(cluster, "add", "qos", qos)
    for qos, level in LEVELS.items():
        lower = [name for name, other in LEVELS.items() if other < level]
        if lower:
            sacctmgr(cluster, "modify", "qos", qos, "set", "preempt=" + ",".join(lower))
    sacctmgr(cluster, "add", "account", "fed", f"cluster={cluster.cluster_name}")
    sacctmgr(
        cluster,
        "add",
        "user",
        "root",
        "account=fed",
        f"cluster={cluster.cluster_name}",
        "qos=normal," + ",".join(LEVELS),
    )
    cluster.run(["scontrol", "reconfigure"])
    wait_until("the QoS reaching slurmctld", lambda: accepts_qos(cluster), 60)
    cluster.cancel_all()


def sacctmgr(cluster: SlurmTestCluster, *args: str) -> None:
    cluster.run(["sacctmgr", "-i", *args])


def accepts_qos(cluster: SlurmTestCluster) -> bool:
    """Whether slurmctld knows the QoS yet: a held job of p1 is accepted."""
    probe = ["sbatch", "--parsable", f"--chdir={cluster.dir}/jobs", "--output=/dev/null"]
    probe += ["-A", "fed", "--qos=p1", "-n", "1", "-t", "1", "--hold", "--wrap", "true"]
    return cluster.run(probe, check=False).returncode == 0


def submit(cluster: SlurmTestCluster, qos: str, cores: int, *extra: str) -> str:
    return cluster.submit("-A", "fed", f"--qos={qos}", "-n", str(cores), "-t", "30", *extra)


def jobs(cluster: SlurmTestCluster) -> Dict[str, List[str]]:
    """Each job's QoS, state and nodes."""
    out = cluster.run(["squeue", "-h", "-o", "%i|%q|%T|%N"]).stdout
    return {f[0]: f[1:] for f in (line.split("|") for line in out.splitlines() if line)}


@pytest.fixture
def full(cluster: SlurmTestCluster) -> Iterator[List[str]]:
    """Both nodes running a p1 job of 8 cores."""
    cluster.cancel_all()
    cluster.delete_all_reservations()
    low = [submit(cluster, "p1", 8) for _ in range(2)]
    wait_until(
        "the p1 jobs running", lambda: all(jobs(cluster)[j][1] == "RUNNING" for j in low), 60
    )
    try:
        yield low
    finally:
        cluster.cancel_all()
        cluster.delete_all_reservations()


def backend(cluster: SlurmTestCluster) -> SlurmBackend:
    return SlurmBackend(
        SlurmConfig(
            slurm_conf=str(cluster.conf),
            partition="batch",
            users=("root",),
            qos_levels=tuple(LEVELS.items()),
        )
    )


def test_the_plan_predicts_slurms_preemption_and_slurm_does_it(
    cluster: SlurmTestCluster, full: List[str]
) -> None:
    snapshot = backend(cluster).snapshot()
    assert sorted(job.absolute_priority for job in snapshot.running) == [1, 1]
    waiting = BatchJob("top", 8, snapshot.now, 600, absolute_priority=4)
    asked = dataclasses.replace(snapshot, pending=(waiting,))
    without = plan(asked).starts["top"]
    with_requeue = plan(asked, preemptive=True, requeue=True).starts["top"]
    assert with_requeue == snapshot.now
    assert without >= snapshot.now + 30 * 60 - 60  # the p1 jobs' limit
    top = submit(cluster, "p4", 8)
    wait_until("the p4 job running", lambda: jobs(cluster)[top][1] == "RUNNING", 60)
    states = jobs(cluster)
    assert sorted(states[j][1] for j in full) == ["PENDING", "RUNNING"]  # one requeued


def test_an_auction_wins_capacity_of_lower_priority_work_and_slurm_makes_room(
    cluster: SlurmTestCluster, full: List[str], tmp_path: Path
) -> None:
    backend = SlurmBatch(cluster).backend_config(tmp_path)
    backend["slurm"]["qos_levels"] = LEVELS
    sections = {
        "site": {"cores_per_node": 8},
        "backend": backend,
        "planner": {"preemption": "requeue"},
        "auctions": {"mode": "now"},
    }
    site = SlurmSite(cluster, tmp_path, sections)
    try:
        time.sleep(2)  # a poll of the full cluster
        journal = Journal(tmp_path / "client.db")
        pool = SitePool([site.site()])
        job = Job("urgent", AuctionedJob(cores=8, walltime=600, priority=4))
        try:
            with Auctioneer(pool, journal, length_s=2.0, rounds=2) as auctioneer:
                (placement,) = auctioneer.run([job])
            rounds = journal.rounds(placement.auction_id)
        finally:
            pool.close()
            journal.close()
        assert placement.state == "placed", placement.message
        assert placement.value is not None and placement.value < Decimal(4 * 8 * 600) / 3600
        assert "open" in rounds[0]["answers"]["slurm1"]
        reservation = next(
            line
            for line in cluster.run(["scontrol", "show", "reservation", "-o"]).stdout.splitlines()
            if "ReservationName=sa-" in line
        )
        fields = dict(tok.split("=", 1) for tok in reservation.split() if "=" in tok)
        assert "IGNORE_JOBS" in fields["Flags"] and fields["CoreCnt"] == "8"
        top = submit(cluster, "p4", 8, f"--reservation={fields['ReservationName']}")
        wait_until(
            "the p4 job running in its reservation", lambda: jobs(cluster)[top][1] == "RUNNING", 120
        )
        states = jobs(cluster)
        assert states[top][2] == fields["Nodes"]
        assert sorted(states[j][1] for j in full) == ["PENDING", "RUNNING"]  # requeued
    finally:
        site.service.stop()
