"""The agent's reservation lifecycle on the real OpenPBS, as on the real Slurm cluster
(tests/integration/test_slurm_agent.py): the site is assembled from its configuration
(``open_site``) as ``siteagent serve`` does, and the checks go through the ReservationManager.
An accepted reservation exists in PBS as asked, an unconfirmed one is deleted at its deadline,
reconciliation deletes only the agent's leftovers, and PBS's refusal reaches the FAILED record.
Reconciliation after a kill of the agent is the crash campaign's (tests/integration/
test_crash.py, whose ``lifecycle_site`` includes this cluster). Expectations are read with
``pbs_rstat -f`` text.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Dict, Iterator, Tuple

import pytest

from siteagent.config import loading
from siteagent.core.prediction import plan
from siteagent.market.lifecycle import (
    OfferRefused,
    ReservationFailed,
    ReservationRecord,
    ReservationState,
)
from siteagent.market.site import Site, open_site
from siteagent.market.view import market_view
from testbed.inprocess.offers import record_offer
from testbed.pbs.cluster import PbsTestCluster, text_blocks
from testbed.processes.programs import wait_until

pytestmark = pytest.mark.pbs

CONFIRM_TIMEOUT_S = 3.0


@pytest.fixture
def site(
    openpbs: PbsTestCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Site]:
    """The site ``siteagent serve`` would open for this cluster (queue ``workq``)."""
    monkeypatch.setenv("PATH", openpbs.env["PATH"])  # the PBS commands, in the namespace
    config = loading.parse(
        {
            "state_dir": str(tmp_path / "state"),
            "backend": {"type": "pbs", "pbs": {"pbs_conf": str(openpbs.conf), "queue": "workq"}},
            "reservations": {"confirm_timeout_s": CONFIRM_TIMEOUT_S},
        }
    )
    opened = open_site(config)
    try:
        yield opened
    finally:
        opened.close()


def reservations(cluster: PbsTestCluster) -> Dict[str, Dict[str, str]]:
    """``pbs_rstat -f`` by reservation name."""
    blocks = text_blocks(cluster.run(["pbs_rstat", "-f"]).stdout).values()
    return {block["Reserve_Name"]: block for block in blocks}


def stamp(epoch: int) -> str:
    return time.strftime("%Y%m%d%H%M.%S", time.gmtime(epoch))


def rsub(cluster: PbsTestCluster, name: str, start: int, end: int, select: str) -> None:
    cluster.run(
        [
            "pbs_rsub",
            "-I",
            "30",
            "-R",
            stamp(start),
            "-E",
            stamp(end),
            "-N",
            name,
            "-l",
            f"select={select}",
        ]
    )


def accept(
    site: Site, size: int, start: int, duration: int, users: Tuple[str, ...] = ("root",)
) -> ReservationRecord:
    """Offer exactly this window and accept it, as a buyer mapped to ``users`` would."""
    offer = record_offer(site.manager, size, start, duration)
    return site.manager.accept(offer.id, "buyer", offer.id, users=users)


def test_accepted_reservation_is_in_pbs_as_asked(openpbs: PbsTestCluster, site: Site) -> None:
    start = int(time.time()) + 600
    record = accept(site, 24, start, 1800)
    assert record.state is ReservationState.TENTATIVE
    shown = reservations(openpbs)[record.name]
    assert shown["reserve_state"] == "RESV_CONFIRMED"
    assert shown["Resource_List.ncpus"] == "24" and shown["reserve_duration"] == "1800"
    assert shown["Authorized_Users"].split(",")[0] == "root"
    assert record.name.startswith("sa-") and len(record.name) <= 15  # PBS's name limit


def test_unconfirmed_reservation_is_deleted_at_its_deadline(
    openpbs: PbsTestCluster, site: Site
) -> None:
    record = accept(site, 8, int(time.time()) + 600, 600)
    assert record.deadline is not None
    assert site.manager.reconciler.housekeeping().expired == []  # before the deadline: kept
    assert record.name in reservations(openpbs)
    wait_until(
        "the confirm deadline",
        lambda: site.manager.clock() >= (record.deadline or 0),
        timeout=CONFIRM_TIMEOUT_S + 5,
    )
    assert site.manager.reconciler.housekeeping().expired == [record.id]
    expired = site.store.get_reservation(record.id)
    assert expired is not None and expired.state is ReservationState.EXPIRED
    assert record.name not in reservations(openpbs)


def test_reconciliation_deletes_the_agents_orphan_only(openpbs: PbsTestCluster, site: Site) -> None:
    live = accept(site, 4, int(time.time()) + 600, 600)
    start = int(time.time()) + 1200
    for name in ("sa-orphan0001", "someone-else"):
        rsub(openpbs, name, start, start + 600, "4:ncpus=1")
    result = site.manager.reconciler.reconcile()
    assert result.orphans_deleted == ["sa-orphan0001"]
    assert result.lost == [] and result.failed == []
    wait_until("the orphan's deletion", lambda: "sa-orphan0001" not in reservations(openpbs))
    assert sorted(reservations(openpbs)) == sorted([live.name, "someone-else"])


def test_pbs_refusal_is_carried_into_the_failed_record(openpbs: PbsTestCluster, site: Site) -> None:
    openpbs.qmgr("set server acl_resv_user_enable = True")
    openpbs.qmgr("set server acl_resv_users = nobody")
    try:
        with pytest.raises(ReservationFailed) as failed:
            accept(site, 4, int(time.time()) + 600, 600)
    finally:
        openpbs.qmgr("set server acl_resv_user_enable = False")
        openpbs.qmgr("unset server acl_resv_users")
    record = site.store.get_reservation(failed.value.record.id)
    assert record is not None and record.state is ReservationState.FAILED
    assert "Requestor not authorized to make reservations" in (record.message or "")
    assert reservations(openpbs) == {}


def test_admission_follows_pbs_placement_over_the_window(
    openpbs: PbsTestCluster, site: Site
) -> None:
    """n1 is reserved for the first minute, n2 for the second: at every instant 48 CPUs
    are free, but only the 32 of n3 and n4 for both minutes. A 40-CPU accept must be refused
    by the agent (its capacity is gone), never admitted and then denied by PBS; the slots
    advertised promise no more than 32 CPUs for both minutes."""
    start = (int(time.time()) // 60 + 15) * 60
    rsub(openpbs, "by-hand-1", start, start + 60, "1:ncpus=16:vnode=n1")
    rsub(openpbs, "by-hand-2", start + 60, start + 120, "1:ncpus=16:vnode=n2")
    snapshot = site.backend.snapshot()
    slots = market_view(snapshot, plan(snapshot), site.pricing).slots
    spanning = [s for s in slots if s.start <= start and start + 120 <= s.end]
    assert sum(s.cores for s in spanning) == 32  # pooled, the bands said 48
    with pytest.raises(OfferRefused) as refused:
        accept(site, 40, start, 120)  # pooled: admitted, then "PBS denied R.." (FAILED)
    assert refused.value.reason == "capacity_gone"
    assert accept(site, 32, start, 120).state is ReservationState.TENTATIVE
