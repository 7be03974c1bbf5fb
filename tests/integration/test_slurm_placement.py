"""The node-aware plan and reservations on particular nodes, on real Slurm clusters.

Slurm publishes the start its backfill pass expects for each pending job; the agent predicts
them with those published starts hidden (``compare_starts``), on random queues of core and
whole-node requests with a couple of reservations and jobs inside one: on the session's
cluster (four 16-core nodes) and on a second one of mixed node sizes and weights whose two
partitions share nodes. And a reservation the agent accepts is created on the nodes its plan
chose, with the cores on each, as ``scontrol show reservation`` shows.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Dict, Iterator

import pytest

from siteagent.backends.slurm import SlurmBackend
from siteagent.core.estimates import DEFAULT_TOLERANCE_S, compare_starts
from siteagent.core.values import ClusterSnapshot, Placement
from siteagent.market.reservations import ReservationManager
from siteagent.market.store import Store
from testbed.inprocess.offers import record_offer
from testbed.processes.programs import running_slurm
from testbed.slurm.cluster import MIXED_NODES, MIXED_PARTITIONS, SlurmTestCluster
from testbed.slurm.install import SlurmInstall, known_gap
from testbed.slurm.queue import (
    job_state,
    mixed_queue,
    reserve_windows,
    submit_into,
    wait_for,
)

pytestmark = pytest.mark.slurm

#: The issue's target: Slurm's published starts predicted within a minute.
TARGET = 0.8


@pytest.fixture(scope="module")
def mixed(slurm_version: SlurmInstall) -> Iterator[SlurmTestCluster]:
    """A cluster of 8-, 24-, 16-, 8- and 32-core nodes of weights 10, 1, 5, 1 and 20, in two
    partitions sharing two nodes (testbed.slurm.cluster.MIXED_NODES), of each Slurm release."""
    yield from running_slurm(install=slurm_version, shape=(MIXED_NODES, MIXED_PARTITIONS))


def snapshot_of(cluster: SlurmTestCluster) -> ClusterSnapshot:
    config = cluster.slurm_config(partition="batch", users=("root",))
    return SlurmBackend(config).snapshot()


def test_random_queue_starts_agree_with_slurms(slurm: SlurmTestCluster) -> None:
    reserve_windows(slurm, "n3")
    submit_into(slurm, mixed_queue(seed=7, count=60, cores=[16] * 4, max_nodes=3), "later")
    snapshot = snapshot_of(slurm)
    assert snapshot.placement is Placement.SLURM
    agreement = compare_starts(snapshot)
    assert len(agreement.pairs) >= 20 and agreement.unplanned >= 2
    within = agreement.fraction_within(DEFAULT_TOLERANCE_S)
    known_gap(slurm.install.series, "starts predicted within a minute", within, TARGET)
    assert within >= TARGET, agreement.pairs
    pooled = compare_starts(dataclasses.replace(snapshot, placement=Placement.POOLED))
    assert pooled.fraction_within(DEFAULT_TOLERANCE_S) < TARGET  # what nodes change


def test_mixed_nodes_and_shared_partitions_agree_with_slurm(mixed: SlurmTestCluster) -> None:
    reserve_windows(mixed, "m3")
    cores = [node.cpus for node in MIXED_NODES]
    queue = mixed_queue(seed=8, count=60, cores=cores, max_nodes=2, partitions=("batch", "wide"))
    submit_into(mixed, queue, "later")
    snapshot = snapshot_of(mixed)
    assert {job.partition for job in snapshot.neighbours.pending} == {"wide"}
    assert [node.name for node in snapshot.neighbours.nodes] == ["m5"]
    agreement = compare_starts(snapshot)
    assert len(agreement.pairs) >= 15
    within = agreement.fraction_within(DEFAULT_TOLERANCE_S)
    known_gap(mixed.install.series, "starts predicted within a minute", within, TARGET)
    assert within >= TARGET, agreement.pairs


def show_reservation(cluster: SlurmTestCluster, name: str) -> Dict[str, str]:
    out = cluster.run(["scontrol", "show", "reservation", "-o", name]).stdout
    return dict(token.split("=", 1) for token in out.split() if "=" in token)


def test_an_accepted_reservation_is_on_the_nodes_the_plan_chose(
    slurm: SlurmTestCluster, tmp_path: Path
) -> None:
    """Jobs leave 4, 6, 16 and 16 cores free: twenty cores for an hour go on the first two
    nodes with room in Slurm's order and weights, as the plan chose, with the cores on each."""
    jobs = [
        slurm.submit(f"-w{node}", f"-n{cores}", "-t", "120")
        for node, cores in (
            ("n1", 12),
            ("n2", 10),
        )
    ]
    wait_for("the jobs to run", lambda: all(job_state(slurm, j) == "RUNNING" for j in jobs))
    config = slurm.slurm_config(partition="batch", users=("root",))
    manager = ReservationManager(Store(str(tmp_path / "store.db")), SlurmBackend(config))
    offer = record_offer(manager, 20, int(time.time()) + 600, 3600)
    record = manager.accept(offer.id, "buyer", "k", users=("root",))
    assert record.allocation == (("n1", 4), ("n2", 6), ("n3", 10))
    shown = show_reservation(slurm, record.name)
    assert (shown["Nodes"], shown["CoreCnt"]) == ("n[1-3]", "20")
