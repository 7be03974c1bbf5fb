"""Many clients accepting overlapping offers at once never overcommit the machine.

Each client has its own offer; the offers' windows overlap so that they cannot all be
granted. Whatever the interleaving, the reservations granted must together fit beside the
running jobs at every instant (checked against the batch system's own list, and by planning
the cluster with all of them), every one must have its TENTATIVE record, and none may FAIL:
a FAILED accept would mean two accepts passed the re-check for the same cores and the batch
system had to refuse the second, i.e. that "re-check then create" was not atomic.
"""

from __future__ import annotations

import json
import random
import threading
from typing import List, Tuple

from siteagent.model import Offer
from siteagent.reservations import LifecycleError, OfferRefused, ReservationManager
from siteagent.scheduling import plan
from siteagent.store import ReservationState
from tests.integration.lifecycle_site import ReplaySite
from tests.lifecycle import capacity_overruns, ours, record_offer

S = ReservationState


def overlapping_offers(manager: ReservationManager, count: int, seed: int) -> List[Offer]:
    """``count`` offers of 8 to 24 cores (of 64) whose windows overlap in the next 6 minutes."""
    rng = random.Random(seed)
    now = int(manager.clock())
    return [
        record_offer(
            manager,
            size=rng.randint(8, 24),
            start=now + 60 + rng.randint(0, 240),
            duration=rng.randint(30, 90),
            valid_s=600,
        )
        for _ in range(count)
    ]


def check_granted(site: ReplaySite, manager: ReservationManager) -> Tuple[int, int]:
    """The promises after the stampede; returns (granted, failed) counts."""
    snapshot = manager.backend.snapshot()
    held = list(ours(manager.backend, site.prefix).values())
    assert capacity_overruns(snapshot, held) == []
    plan(snapshot)  # raises ReservationConflict if the reservations overcommit the machine
    records = manager.store.reservations()
    tentative = {r.name for r in records if r.state is S.TENTATIVE}
    assert tentative == {r.name for r in held}
    return len(tentative), sum(1 for r in records if r.state is S.FAILED)


def test_fifty_threads_accepting_at_once(lifecycle_site: ReplaySite) -> None:
    store, backend = lifecycle_site.open_store(), lifecycle_site.open_backend()
    manager = lifecycle_site.manager(store, backend)
    offers = overlapping_offers(manager, 50, seed=1)
    barrier = threading.Barrier(len(offers))
    outcomes: List[str] = []

    def client(index: int, offer: Offer) -> None:
        barrier.wait()
        try:
            manager.accept(offer.id, f"client-{index}", "k")
            outcomes.append("granted")
        except OfferRefused as refused:
            outcomes.append(refused.code)
        except LifecycleError as exc:
            outcomes.append(f"error: {exc}")

    threads = [threading.Thread(target=client, args=item) for item in enumerate(offers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    granted, failed = check_granted(lifecycle_site, manager)
    assert failed == 0
    assert sorted(set(outcomes)) == ["capacity_gone", "granted"], outcomes
    assert granted == outcomes.count("granted") >= 2


def test_ten_processes_accepting_at_once(lifecycle_site: ReplaySite) -> None:
    store, backend = lifecycle_site.open_store(), lifecycle_site.open_backend()
    manager = lifecycle_site.manager(store, backend)
    offers = overlapping_offers(manager, 10, seed=2)
    clients = [
        lifecycle_site.spawn(
            [
                *("reservations", "accept", offer.id, "--client", f"c{i}", "--key", "k"),
                *("--json", *lifecycle_site.lifecycle_args()),
            ]
        )
        for i, offer in enumerate(offers)
    ]
    codes = []
    for process in clients:
        out, err = process.communicate(timeout=120)
        codes.append(process.returncode)
        if process.returncode == 0:
            assert json.loads(out)["reservation"]["state"] == "TENTATIVE"
        else:
            assert "no longer free" in err, err
    granted, failed = check_granted(lifecycle_site, manager)
    assert failed == 0
    assert granted == codes.count(0) >= 2 and 3 in codes, codes
