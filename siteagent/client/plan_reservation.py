"""Reserving a plan made elsewhere: each task at the site the plan names, as near its planned
window as the site now offers.

The genetic planner (:mod:`.genetic`) plans over the slots the sites advertised, a picture
that is already old when the search ends; the plan is then held through the same
:class:`~siteagent.client.greedy.SiteOffers` as the greedy planner's, task by task in the
plan's order (parents first), each at the earliest window its site offers from both its
planned start and the time its parents' outputs can be there as actually held. A task whose
site no longer offers a window (or refuses every one) fails the whole (PlanningError), and the
commit releases what was held.

Resource selection's assignment of a bag (:func:`.selection.as_plan`: each task at its site
from now, no edges) is reserved the same way: each task at the earliest window its site
offers.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Dict, Sequence

from siteagent.client.greedy import SiteOffers, data_ready
from siteagent.client.plans import Network, PlanningError, ProvisioningPlan, TaskPlacement
from siteagent.client.tasks import TaskGraph, task_of
from siteagent.protocol.models import SiteAttributes


def reserve(
    plan: ProvisioningPlan,
    graph: TaskGraph,
    sites: Sequence[SiteAttributes],
    offers: SiteOffers,
    network: Network,
) -> ProvisioningPlan:
    """Hold every task of ``plan`` at its site; the plan as held."""
    by_name = {site.name: site for site in sites}
    held: Dict[str, TaskPlacement] = {}
    for planned in plan.placements:
        node = planned.task
        if planned.site is None:
            ready = max((held[p].finish for p in graph.predecessors(node)), default=plan.began)
            held[node] = TaskPlacement(node, None, ready, ready, Decimal(0))
            continue
        held[node] = _hold(graph, planned, by_name[planned.site], held, offers, network)
    return ProvisioningPlan(tuple(held.values()), plan.began)


def _hold(
    graph: TaskGraph,
    planned: TaskPlacement,
    site: SiteAttributes,
    held: Dict[str, TaskPlacement],
    offers: SiteOffers,
    network: Network,
) -> TaskPlacement:
    task = task_of(graph, planned.task)
    walltime = task.walltime(site)
    if walltime is None:
        raise PlanningError(f"task {planned.task}: {site.name} cannot run it")
    earliest = max((planned.start, *data_ready(graph, planned.task, site.name, held, network)))
    windows = sorted(
        (
            a
            for a in offers.alternatives(site.name, task.cores, walltime, earliest)
            if a.start >= earliest and a.end - a.start >= walltime
        ),
        key=lambda a: (a.start, a.cost),
    )
    for window in windows:
        if offers.hold(site.name, task.cores, window):
            finish = window.start + walltime
            return TaskPlacement(planned.task, site.name, window.start, finish, window.cost)
    if windows:
        raise PlanningError(f"task {planned.task}: none of {site.name}'s windows could be held")
    raise PlanningError(f"task {planned.task}: {site.name} no longer offers a window")
