"""Resource selection for a bag of independent tasks (Ha, Turilli, Merzky and Jha, *Towards
General Distributed Resource Selection*).

Viability first: a site can run a task only if it advertises what the task requires (the
paper's adapted matchmaking, Algorithms 1-2). Then affinity: the paper sends each task to the
viable site with the lowest predicted time to completion, ``TTC = T_q + T_x``: the queue wait
of similar jobs on that site (same core-count and walltime bin, recent window) plus the run
time there (work over the site's published clock rate, eq. 2). The wait here is the site's
published bound for the task's bin (:mod:`siteagent.core.qbets`), at a probability the caller
picks; a bin too empty to bound takes the site's largest bound at that probability (the paper
likewise falls back on the machine's other jobs when a bin is empty), and a site that
publishes none ranks after every site that does.

The paper assigns every task independently, so all of them may go to the one best site, which
then cannot start them all and the later ones queue behind the earlier. Here each site also
says how many cores it can start (``capacity``, e.g. the cores of its slots that begin now):
tasks, largest first, go to the best site that still has room, and those that fit nowhere are
left for a later round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Dict, List, Optional, Sequence, Tuple

from siteagent.client.plans import ProvisioningPlan, TaskPlacement
from siteagent.client.tasks import Task, TaskGraph, task_graph
from siteagent.client.waits import bin_bound, wait_bound
from siteagent.protocol.models import Info, SiteAttributes, SlotList, WaitHistory

#: The probability the waits are bounded at unless the caller says otherwise: the median.
DEFAULT_PROBABILITY = 0.5


@dataclass(frozen=True)
class Candidate:
    """A site as selection sees it: its attributes and size (``GET /v1/info``: ``site`` and
    ``cluster.cores``), its queue waits (``GET /v1/history/waits``) and how many cores it can
    start now."""

    attributes: SiteAttributes
    cores: int
    waits: WaitHistory
    capacity: int

    @property
    def name(self) -> str:
        return self.attributes.name


def site_candidate(
    name: str, info: Info, waits: WaitHistory, slots: Optional[SlotList] = None
) -> Candidate:
    """The site a buyer calls ``name`` as its answers show it: attributes and cores from
    ``GET /v1/info`` (no cores before its first poll), waits from ``GET /v1/history/waits``.
    Its capacity is its cores (the most of the bag it can run at once), or with ``slots``
    (``GET /v1/slots``) the cores free now: those of the slots that begin at its ``now``
    (slots are disjoint bands of the free capacity, so they add up; a site that counts in
    nodes is converted at its cores per node)."""
    cluster = info.cluster
    cores = cluster.cores if cluster is not None else 0
    capacity = cores if slots is None else _free_cores_now(info, slots)
    return Candidate(info.site.model_copy(update={"name": name}), cores, waits, capacity)


def _free_cores_now(info: Info, slots: SlotList) -> int:
    cluster = info.cluster
    per_unit = 1
    if slots.unit == "node":
        nodes = cluster.nodes if cluster is not None else None
        per_unit = info.site.cores_per_node or (cluster.cores // nodes if cluster and nodes else 1)
    return per_unit * sum(slot.cores for slot in slots.slots if slot.start <= slots.now)


@dataclass(frozen=True)
class Estimate:
    """A task's predicted time to completion on a site; ``wait_s`` None if unknown."""

    site: str
    wait_s: Optional[int]
    run_s: float

    @property
    def key(self) -> Tuple[bool, float]:
        """Known waits first, then the shortest time to completion."""
        return (self.wait_s is None, (self.wait_s or 0) + self.run_s)


@dataclass(frozen=True)
class Selection:
    """Each assigned task's site and estimate, and the tasks no site had room for."""

    assigned: Dict[str, Estimate]
    unassigned: Tuple[str, ...]


def estimate(task: Task, site: Candidate, probability: float) -> Optional[Estimate]:
    """The task's TTC on ``site``; None if the site is not viable for it."""
    return _estimate(task, site, probability, _largest_bound(site.waits, probability))


def ranking(task: Task, sites: Sequence[Candidate], probability: float) -> List[Estimate]:
    """The viable sites for ``task``, best first (the paper's affinity order)."""
    return _ranking(task, sites, probability, _fallbacks(sites, probability))


def select(
    tasks: Sequence[Task], sites: Sequence[Candidate], probability: float = DEFAULT_PROBABILITY
) -> Selection:
    """Assign the tasks, largest first, each to its best site with room left."""
    room = {site.name: site.capacity for site in sites}
    fallbacks = _fallbacks(sites, probability)
    assigned: Dict[str, Estimate] = {}
    unassigned: List[str] = []
    for task in sorted(tasks, key=lambda t: (-t.cores, t.id)):
        choices = _ranking(task, sites, probability, fallbacks)
        choice = next((e for e in choices if room[e.site] >= task.cores), None)
        if choice is None:
            unassigned.append(task.id)
            continue
        room[choice.site] -= task.cores
        assigned[task.id] = choice
    return Selection(assigned, tuple(unassigned))


def as_plan(
    selection: Selection, tasks: Sequence[Task], now: int
) -> Tuple[TaskGraph, ProvisioningPlan]:
    """The assignment as a plan to reserve (:func:`siteagent.client.plan_reservation.reserve`): each
    assigned task at its site from ``now``, since a reservation waits in no queue, in the
    bag's order; the tasks as a graph without edges (independent tasks)."""
    assigned = [task for task in tasks if task.id in selection.assigned]
    placements = []
    for task in assigned:
        chosen = selection.assigned[task.id]
        finish = now + math.ceil(chosen.run_s)
        placements.append(TaskPlacement(task.id, chosen.site, now, finish, Decimal(0)))
    graph = task_graph(((task, []) for task in assigned), "the bag")
    return graph, ProvisioningPlan(tuple(placements), now)


def _estimate(
    task: Task, site: Candidate, probability: float, fallback: Optional[int]
) -> Optional[Estimate]:
    walltime = task.walltime(site.attributes)
    run = task.run_time(site.attributes)
    if walltime is None or run is None or task.cores > site.cores:
        return None
    wait = wait_bound(site.waits, task.cores, walltime, probability)
    return Estimate(site.name, fallback if wait is None else wait, run)


def _ranking(
    task: Task,
    sites: Sequence[Candidate],
    probability: float,
    fallbacks: Dict[str, Optional[int]],
) -> List[Estimate]:
    found = (_estimate(task, site, probability, fallbacks[site.name]) for site in sites)
    return sorted((e for e in found if e is not None), key=lambda e: e.key)


def _fallbacks(sites: Sequence[Candidate], probability: float) -> Dict[str, Optional[int]]:
    """Each site's largest bound at ``probability``: the wait of a task whose bin has none."""
    return {site.name: _largest_bound(site.waits, probability) for site in sites}


def _largest_bound(waits: WaitHistory, probability: float) -> Optional[int]:
    bounds = [b for b in (bin_bound(bin_, probability) for bin_ in waits.bins) if b is not None]
    return max(bounds) if bounds else None
