"""Greedy provisioning of a workflow across sites (Singh, thesis ch. 7, Figure 51).

Tasks are taken in HEFT order. For each, every site that can run it is asked for priced
alternatives for the task's cores and its run time there, from the time the outputs of all
its parents can be on that site (a parent's finish, plus the transfer if it ran elsewhere).
Of all the sites' answers together, the one minimising ``α·norm(cost) + (1−α)·norm(finish)``
is held, and the next task is planned against the sites as they are with it held. α = 1 is
the cheapest plan, α = 0 the fastest.

The planner is a pure function of what the sites answer: it sees them through
:class:`SiteOffers`, which the client implements over the agents' quotes (``alternatives``)
and tentative reservations (``hold``), and tests and benchmarks over sites in memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Dict, List, Protocol, Sequence, Tuple

from siteagent.client.heft import rank_order, upward_ranks
from siteagent.client.plans import Network, Placement, Plan, PlanningError
from siteagent.client.tasks import Task, TaskGraph, edge_bytes, task_of
from siteagent.core import tradeoff
from siteagent.protocol.models import SiteAttributes


@dataclass(frozen=True)
class Alternative:
    """A window a site offers for a request: ``[start, end)`` at ``cost``."""

    start: int
    end: int
    cost: Decimal


class SiteOffers(Protocol):
    """The sites as the planner sees them."""

    def alternatives(
        self, site: str, cores: int, walltime: int, earliest_start: int
    ) -> Sequence[Alternative]:
        """Priced windows of ``cores`` for ``walltime`` seconds starting at or after
        ``earliest_start`` (empty if the site has none)."""

    def hold(self, site: str, cores: int, alternative: Alternative) -> bool:
        """Keep ``alternative`` for this plan (a tentative reservation); False if it is gone,
        and the planner picks another."""


@dataclass(frozen=True)
class _Candidate:
    site: str
    walltime: int
    alternative: Alternative

    @property
    def finish(self) -> int:
        return self.alternative.start + self.walltime


def provision(
    graph: TaskGraph,
    sites: Sequence[SiteAttributes],
    offers: SiteOffers,
    network: Network,
    alpha: float,
    now: int,
) -> Plan:
    """A plan for every task of ``graph`` starting no earlier than ``now``; PlanningError if
    a task finds no site and window."""
    tradeoff.check_alpha(alpha)
    placed: Dict[str, Placement] = {}
    for node in rank_order(graph, upward_ranks(graph, sites, network)):
        task = task_of(graph, node)
        if task.structural:
            ready = max((placed[p].finish for p in graph.predecessors(node)), default=now)
            placed[node] = Placement(node, None, ready, ready, Decimal(0))
            continue
        if all(task.walltime(site) is None for site in sites):
            raise PlanningError(
                f"task {node}: no site can run it: it needs a site to advertise "
                f"{task.why_not()} (`siteagent-client sites` shows what each advertises)"
            )
        candidates = [
            c
            for site in sites
            for c in _candidates(graph, node, task, site, placed, offers, network, now)
        ]
        placed[node] = _hold_best(node, task, candidates, offers, alpha)
    return Plan(tuple(placed.values()), now)


def data_ready(
    graph: TaskGraph, node: str, site: str, placed: Dict[str, Placement], network: Network
) -> Tuple[int, ...]:
    """When each parent's output can be on ``site``: its finish, plus the transfer unless it
    ran there (a structural parent sends nothing)."""
    return tuple(
        placed[parent].finish
        + network.transfer_s(
            edge_bytes(graph, parent, node), same_site=placed[parent].site in (site, None)
        )
        for parent in graph.predecessors(node)
    )


def _candidates(
    graph: TaskGraph,
    node: str,
    task: Task,
    site: SiteAttributes,
    placed: Dict[str, Placement],
    offers: SiteOffers,
    network: Network,
    now: int,
) -> List[_Candidate]:
    walltime = task.walltime(site)
    if walltime is None:
        return []
    earliest = max((now, *data_ready(graph, node, site.name, placed, network)))
    return [
        _Candidate(site.name, walltime, alternative)
        for alternative in offers.alternatives(site.name, task.cores, walltime, earliest)
        if alternative.start >= earliest and alternative.end - alternative.start >= walltime
    ]


def _hold_best(
    node: str, task: Task, candidates: List[_Candidate], offers: SiteOffers, alpha: float
) -> Placement:
    """Hold the best candidate by the trade-off; if its site refuses, the best of the rest."""
    left = list(candidates)
    while left:
        best = left.pop(
            tradeoff.choose(
                [float(c.alternative.cost) for c in left], [float(c.finish) for c in left], alpha
            )
        )
        if offers.hold(best.site, task.cores, best.alternative):
            chosen = best.alternative
            return Placement(node, best.site, chosen.start, best.finish, chosen.cost)
    reason = "none of its offers could be held" if candidates else "no site offers a window"
    raise PlanningError(f"task {node}: {reason}")
