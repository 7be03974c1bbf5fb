"""Where Slurm draws the line at a running job's end, on a real cluster of every release.

A buyer found it: on partition a (two 8-core nodes; b has one), with an 8-core ``-t 30`` job
running on one node and jobs pending, two accepts of a zero-fee 4-core × 10 min offer starting
exactly when that job's limit ends were admitted by the agent and refused by slurmctld
("Requested nodes are busy"). slurmctld counts a running job as busy for a core reservation
through the very second its limit ends (reservation.c ``_select_nodes``, the same in 22.05,
24.11 and 26.05; docs/slurm.md §6.1), so the agent's plan offers such capacity from one second
later and its accept re-check withdraws an offer that starts earlier.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest

from siteagent.backends.slurm import SlurmBackend
from siteagent.market.lifecycle import OfferRefused, ReservationState
from siteagent.market.reservations import ReservationManager
from siteagent.market.store import Store
from testbed.inprocess.offers import earliest_start, record_offer
from testbed.processes.programs import running_slurm
from testbed.slurm.cluster import SlurmTestCluster
from testbed.slurm.cluster import TestNode as Node
from testbed.slurm.cluster import TestPartition as Partition
from testbed.slurm.install import SlurmInstall
from testbed.slurm.queue import job_state, wait_for

pytestmark = pytest.mark.slurm

#: The buyer's cluster: partition a of two 8-core nodes, b of one.
TWO_PARTITIONS = (
    (Node("a1", 8), Node("a2", 8), Node("b1", 8)),
    (Partition("a", ("a1", "a2")), Partition("b", ("b1",))),
)


@pytest.fixture(scope="module")
def two_partitions(slurm_version: SlurmInstall) -> Iterator[SlurmTestCluster]:
    yield from running_slurm(install=slurm_version, shape=TWO_PARTITIONS)


@pytest.fixture
def cluster(two_partitions: SlurmTestCluster) -> Iterator[SlurmTestCluster]:
    two_partitions.reset()
    yield two_partitions
    two_partitions.reset()


def test_offers_from_a_running_jobs_end_are_created_as_admitted(
    cluster: SlurmTestCluster, tmp_path: Path
) -> None:
    short = cluster.submit("-p", "a", "-n8", "-t", "30")
    long = cluster.submit("-p", "a", "-n8", "-t", "120")
    for _ in range(2):
        cluster.submit("-p", "a", "-n8", "-t", "30")  # pending behind them
    wait_for(
        "both jobs to run", lambda: {job_state(cluster, j) for j in (short, long)} == {"RUNNING"}
    )
    backend = SlurmBackend(cluster.slurm_config(partition="a", users=("root",)))
    [job] = [j for j in backend.snapshot().running if j.id == short]
    assert job.start is not None
    end = job.start + 1800
    [(node, _)] = job.allocation
    manager = ReservationManager(Store(str(tmp_path / "store.db")), backend)

    # Slurm itself: a 4-core reservation on that node from the job's end is busy, a second
    # later it is not
    def create(start: int) -> str:
        proc = cluster.run(
            [
                "scontrol",
                "create",
                "reservation",
                "ReservationName=probe",
                "Users=root",
                f"StartTime={time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(start))}",
                "Duration=10",
                f"Nodes={node}",
                "CoreCnt=4",
            ],
            check=False,
            env={"TZ": "UTC"},
        )
        cluster.run(["scontrol", "delete", "ReservationName=probe"], check=False)
        return proc.stdout + proc.stderr

    assert "Requested nodes are busy" in create(end)
    assert "Reservation created" in create(end + 1)

    # offers made for the job's end (as the plan made them before): withdrawn at the accept
    for key in ("k1", "k2"):
        offer = record_offer(manager, 4, end, 600)
        with pytest.raises(OfferRefused, match="no longer free"):
            manager.accept(offer.id, "buyer", key, users=("root",))

    # the plan's earliest room for them is a second later, and both accepts there are created
    start = earliest_start(backend, 4, 600, int(time.time()))
    assert start == end + 1
    for key in ("k3", "k4"):
        offer = record_offer(manager, 4, start, 600)
        record = manager.accept(offer.id, "buyer", key, users=("root",))
        assert record.state is ReservationState.TENTATIVE
        assert record.allocation == ((node, 4),)
