"""Use this when a provisioning test or benchmark needs sites in memory and workflows.

Sites in memory and synthetic workflows, for the provisioning tests and benchmark.

:class:`MarketSites` answers the greedy planner as agents would, with the agent's own pricing
(the thesis' adaptive externality fee over a conservative plan of each site's queue), and
holds what the planner picks as a reservation in that site's snapshot, so that the next
quote sees it. Through real agents, the client's ``LiveOffers`` does the same
(tests/integration/test_client_provision.py).
"""

from __future__ import annotations

import random
from dataclasses import asdict, replace
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import yaml

from siteagent.client import generators
from siteagent.client.greedy import Alternative
from siteagent.client.tasks import TaskGraph, task_of
from siteagent.core.prediction import Plan, replan_with_reservation
from siteagent.core.profile import Profile
from siteagent.core.slots import advertise
from siteagent.core.values import BatchReservation, ClusterSnapshot, Job, Request
from siteagent.pricing.base import Context, Refused
from siteagent.pricing.externality import ExternalityFee
from siteagent.pricing.flat import FlatPrice
from siteagent.pricing.site_pricing import Pricing
from siteagent.protocol.models import SiteAttributes, SlotList, WaitHistory, slot_json

T0 = 1_795_000_000
#: The horizon of a plan (``prediction.plan``'s default).
HORIZON_S = 48 * 3600

#: The agent's adaptive pricing (thesis ch. 5): c = 1 per core-hour, fee = the queue's delay.
ADAPTIVE = Pricing(FlatPrice(Decimal(1)), ExternalityFee(Decimal(1)))


def attributes(name: str, cpu_speed_mhz: Optional[int] = None, **more: object) -> SiteAttributes:
    """A site's RFQL attributes as ``GET /v1/info`` shows them."""
    fields: Dict[str, object] = {
        "name": name,
        "description": "",
        "architecture": "x86_64",
        "os": "linux",
        "cpu_speed_mhz": cpu_speed_mhz,
        "memory_per_core_mb": 4096,
        "cores_per_node": 1,
        "partitions": [],
    }
    fields.update(more)
    return SiteAttributes(**fields)


def busy_site(
    seed: int, capacity: int, running: int, queued: int, now: int = T0
) -> ClusterSnapshot:
    """A cluster of ``capacity`` cores at ``now`` with random running and queued jobs."""
    rng = random.Random(seed)
    jobs, used = [], 0
    for k in range(running):
        size = rng.randint(1, max(1, capacity // 4))
        if used + size > capacity:
            break
        used += size
        started = now - rng.randint(0, 3600)
        jobs.append(
            Job(f"r{k}", size, started, now - started + rng.randint(600, 4 * 3600), start=started)
        )
    pending = tuple(
        Job(
            f"q{k}",
            rng.randint(1, capacity // 2),
            now - rng.randint(0, 600),
            rng.randint(600, 3 * 3600),
        )
        for k in range(queued)
    )
    return ClusterSnapshot(now=now, capacity=capacity, running=tuple(jobs), pending=pending)


class MarketSites:
    """Sites in memory, quoting with the agent's pricing; implements ``SiteOffers``."""

    def __init__(self, snapshots: Dict[str, ClusterSnapshot], limit: int = 10) -> None:
        self.snapshots = dict(snapshots)
        self.limit = limit
        self._contexts: Dict[str, Context] = {}
        self.held: List[BatchReservation] = []

    def context(self, site: str) -> Context:
        if site not in self._contexts:
            self._contexts[site] = ADAPTIVE.context(self.snapshots[site])
        return self._contexts[site]

    def alternatives(
        self, site: str, cores: int, walltime: int, earliest_start: int
    ) -> Sequence[Alternative]:
        request = Request(cores, walltime, earliest=earliest_start)
        try:
            prices = ADAPTIVE.alternatives(self.context(site), request, self.limit)
        except Refused:
            return []
        return [Alternative(p.window.start, p.window.end, p.total) for p in prices]

    def hold(self, site: str, cores: int, alternative: Alternative) -> bool:
        duration = alternative.end - alternative.start
        context = self.context(site)
        if not context.hard.fits(cores, alternative.start, duration):
            return False
        name = f"hold{len(self.held)}"
        reservation = BatchReservation(name, alternative.start, alternative.end, cores)
        self.held.append(reservation)
        snapshot = self.snapshots[site]
        self.snapshots[site] = replace(snapshot, reservations=(*snapshot.reservations, reservation))
        base = with_reservation(
            context.plan, context.hard, alternative.start, alternative.end, cores
        )
        if base is None:
            self._contexts.pop(site, None)
        else:
            self._contexts[site] = ADAPTIVE.context(self.snapshots[site], base)
        return True

    def slot_lists(self) -> Dict[str, SlotList]:
        """Each site's advertised slots, as ``GET /v1/slots`` answers them."""
        return {
            site: SlotList(
                now=snapshot.now,
                unit="core",
                slots=[slot_json(s) for s in advertise(self.context(site).plan)],
            )
            for site, snapshot in self.snapshots.items()
        }


class BatchMarketSites(MarketSites):
    """:class:`MarketSites` asked several tasks at once (``BatchOffers``): a batch's holds
    all or none, as an agent's batch accept; ``batches`` counts the holds asked together."""

    def __init__(self, snapshots: Dict[str, ClusterSnapshot], limit: int = 10) -> None:
        super().__init__(snapshots, limit)
        self.batches: List[int] = []

    def alternatives_all(
        self, site: str, asks: Sequence[Tuple[int, int, int]]
    ) -> List[Sequence[Alternative]]:
        return [self.alternatives(site, *ask) for ask in asks]

    def hold_all(self, site: str, holds: Sequence[Tuple[int, int, Alternative]]) -> List[bool]:
        self.batches.append(len(holds))
        before, held = self.snapshots[site], len(self.held)
        for _, cores, alternative in holds:
            if not self.hold(site, cores, alternative):
                self.snapshots[site] = before  # none of the batch held
                del self.held[held:]
                self._contexts.pop(site, None)
                return [False] * len(holds)
        return [True] * len(holds)


def with_reservation(base: Plan, hard: Profile, start: int, end: int, size: int) -> Optional[Plan]:
    """The plan ``plan()`` would make of ``base``'s snapshot with one more reservation, built
    from ``base`` (``replan_with_reservation``'s starts) instead of planned from scratch: a
    workflow held task by task adds thousands of reservations, and planning every one again
    made holding quadratic. None where ``base`` cannot be re-used (plan from scratch then)."""
    starts = replan_with_reservation(base, hard, start, end, size)
    if starts is None:
        return None
    profile = hard.copy()
    profile.reserve(start, end, size)
    ends = {}
    for job_id, planned in starts.items():
        ends[job_id] = planned + base.ends[job_id] - base.starts[job_id]
        if ends[job_id] > planned:
            profile.reserve(planned, ends[job_id], base.sizes[job_id])
    last = max(ends.values(), default=base.now)
    return Plan(
        now=base.now,
        capacity=base.capacity,
        policy=base.policy,
        profile=profile,
        starts=starts,
        ends=ends,
        sizes=dict(base.sizes),
        sources=dict(base.sources),
        unplanned=list(base.unplanned),
        horizon=max(base.now + HORIZON_S, last + 300),
        placed_at_once=True,
    )


def layered_workflow(
    seed: int,
    tasks: int = 100,
    levels: int = 10,
    mean_runtime: int = 1000,
    mean_cores: int = 6,
    mean_bytes: int = 10**9,
) -> TaskGraph:
    """The thesis' synthetic workflow (ch. 4.7, Figure 12; ch. 4.9):
    :func:`siteagent.client.generators.layered`."""
    return generators.layered(seed, tasks, levels, mean_runtime, mean_cores, mean_bytes)


def wait_bin(
    cores: Sequence[Optional[int]], walltime: Sequence[Optional[int]], **bounds: Optional[int]
) -> Dict[str, Any]:
    """A bin of ``GET /v1/history/waits``: jobs of ``cores[0]..cores[1]`` asking a walltime in
    ``(walltime[0], walltime[1]]``, the upper bounds on its wait by quantile (``q50=600,
    q95=None``: the median bounded at 600 s, the 0.95-quantile not bounded) at 95% confidence."""
    return {
        "cores": list(cores),
        "walltime_s": list(walltime),
        "jobs": 100,
        "mean_wait_s": None,
        "median_wait_s": None,
        "p90_wait_s": None,
        "wait_bounds": [
            {"quantile": int(q[1:]) / 100, "confidence": 0.95, "upper_bound_s": value}
            for q, value in bounds.items()
        ],
    }


def wait_history(*bins: Dict[str, Any]) -> WaitHistory:
    """A site's ``GET /v1/history/waits`` of ``bins`` (:func:`wait_bin`)."""
    return WaitHistory(bins=list(bins), jobs=100 * len(bins), skipped=0, source="store")


def write_workflow(graph: TaskGraph, path: Path) -> Path:
    """``graph`` as the YAML ``siteagent-client provision`` reads (siteagent/client/workflow.py):
    each task's cores, run time or work, parents, files and requirements, so that it reads
    back the same."""
    tasks = []
    for node in graph:
        task = task_of(graph, node)
        entry: Dict[str, object] = {"id": task.id, "cores": task.cores}
        if task.runtime_s is not None:
            entry["runtime"] = task.runtime_s
        if task.work_mcycles is not None:
            entry["work"] = task.work_mcycles
        parents = sorted(graph.predecessors(node))
        if parents:
            entry["parents"] = parents
        for files in ("inputs", "outputs"):
            if getattr(task, files):
                entry[files] = dict(getattr(task, files))
        required = {k: v for k, v in asdict(task.requirements).items() if v is not None}
        if required:
            entry["requirements"] = required
        tasks.append(entry)
    path.write_text(yaml.safe_dump({"tasks": tasks}), encoding="utf-8")
    return path


def montage_instance(directory: Path, tasks: int, seed: int = 1) -> Path:
    """A synthetic Montage instance (WfFormat JSON) from WfCommons' WfChef recipe."""
    return wfcommons_instance(directory, "Montage", tasks, seed)


def wfcommons_instance(directory: Path, recipe: str, tasks: int, seed: int = 1) -> Path:
    """A synthetic instance (WfFormat JSON) of ``tasks`` tasks from WfCommons' WfChef recipe
    ``recipe`` ("Montage", "Epigenomics", "Genome" (1000Genome), "Seismology", "Soykb", ...:
    the ``wfcommons.wfchef.recipes`` class without "Recipe")."""
    from wfcommons import WorkflowGenerator
    from wfcommons.wfchef import recipes

    random.seed(seed)
    kind = getattr(recipes, f"{recipe}Recipe")
    workflow = WorkflowGenerator(kind.from_num_tasks(tasks)).build_workflow()
    path = directory / f"{recipe.lower()}-{tasks}.json"
    workflow.write_json(path)
    return path


def cybershake(sites: int = 40, runtime_scale: float = 1.0) -> TaskGraph:
    """A cut of the thesis' CyberShake (Table 2, Figure 17) with ``sites`` synthSGT/peakValCal
    pairs instead of 4,017: :func:`siteagent.client.generators.cybershake`."""
    return generators.cybershake(sites, runtime_scale)
