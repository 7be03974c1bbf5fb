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
from typing import Dict, List, Optional, Protocol, Sequence, Tuple

from siteagent.client.heft import rank_order, upward_ranks
from siteagent.client.plans import Network, PlanningError, ProvisioningPlan, TaskPlacement
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


#: What the planner asks a site for, for one task: cores, walltime, earliest start.
Ask = Tuple[int, int, int]


class BatchOffers(SiteOffers, Protocol):
    """The sites as the planner sees them when it asks for several tasks at once."""

    def alternatives_all(self, site: str, asks: Sequence[Ask]) -> List[Sequence[Alternative]]:
        """Each ask's alternatives at ``site`` (see :meth:`SiteOffers.alternatives`), in one
        request where the site takes batches."""

    def hold_all(self, site: str, holds: Sequence[Tuple[int, int, Alternative]]) -> List[bool]:
        """Hold each (part, cores, alternative) at ``site``: which were held (at a site that
        takes batches, all of them or none)."""


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
) -> ProvisioningPlan:
    """A plan for every task of ``graph`` starting no earlier than ``now``; PlanningError if
    a task finds no site and window."""
    tradeoff.check_alpha(alpha)
    placed: Dict[str, TaskPlacement] = {}
    for node in rank_order(graph, upward_ranks(graph, sites, network)):
        task = task_of(graph, node)
        if task.structural:
            ready = max((placed[p].finish for p in graph.predecessors(node)), default=now)
            placed[node] = TaskPlacement(node, None, ready, ready, Decimal(0))
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
    return ProvisioningPlan(tuple(placed.values()), now)


def provision_in_batches(
    graph: TaskGraph,
    sites: Sequence[SiteAttributes],
    offers: BatchOffers,
    network: Network,
    alpha: float,
    now: int,
) -> ProvisioningPlan:
    """:func:`provision` with the sites asked in batches (docs/batches.md): the tasks taken in
    HEFT order as there, but every run of them whose parents are all placed is quoted at
    once (one request per site), each chooses its best alternative as :func:`provision`
    would, and the chosen windows at one site are held together. A site's batch that cannot
    be held (two of the run chose the same capacity) is planned again task by task, each
    quoted afresh and held alone. Agents answer quotes from their latest poll, so a task
    quoted after its predecessor in the run was held seldom sees that hold: the plans are
    the sequential planner's but where a run's tasks collide (bench/results/provision.md
    compares them). Each task held is the plan's part of its rank among the real tasks."""
    tradeoff.check_alpha(alpha)
    order = rank_order(graph, upward_ranks(graph, sites, network))
    real = [node for node in order if not task_of(graph, node).structural]
    part_of = {node: part for part, node in enumerate(real)}
    placed: Dict[str, TaskPlacement] = {}
    k = 0
    while k < len(order):
        run: List[str] = []
        while k < len(order) and all(p in placed for p in graph.predecessors(order[k])):
            node = order[k]
            if task_of(graph, node).structural:
                ready = max((placed[p].finish for p in graph.predecessors(node)), default=now)
                placed[node] = TaskPlacement(node, None, ready, ready, Decimal(0))
            else:
                run.append(node)
            k += 1
        if run:
            _place_run(graph, run, part_of, sites, offers, network, alpha, now, placed)
    return ProvisioningPlan(tuple(placed[node] for node in order), now)


def _place_run(
    graph: TaskGraph,
    run: Sequence[str],
    part_of: Dict[str, int],
    sites: Sequence[SiteAttributes],
    offers: BatchOffers,
    network: Network,
    alpha: float,
    now: int,
    placed: Dict[str, TaskPlacement],
) -> None:
    """Quote every task of ``run`` at every site (a batch each), choose, hold by site."""
    found: Dict[str, List[_Candidate]] = {node: [] for node in run}
    for site in sites:
        asked: List[Tuple[str, Ask]] = []
        for node in run:
            ask = _ask(graph, node, site, placed, network, now)
            if ask is not None:
                asked.append((node, ask))
        if not asked:
            continue
        answers = offers.alternatives_all(site.name, [ask for _, ask in asked])
        for (node, (_, walltime, earliest)), alternatives in zip(asked, answers):
            found[node] += [
                _Candidate(site.name, walltime, a)
                for a in alternatives
                if a.start >= earliest and a.end - a.start >= walltime
            ]
    chosen: Dict[str, List[Tuple[str, _Candidate]]] = {}
    for node in run:
        candidates = found[node]
        if candidates:
            best = candidates[_best(candidates, alpha)]
            chosen.setdefault(best.site, []).append((node, best))
    for name, picks in chosen.items():
        holds = [(part_of[node], task_of(graph, node).cores, c.alternative) for node, c in picks]
        for (node, best), held in zip(picks, offers.hold_all(name, holds)):
            if held:
                alternative = best.alternative
                placed[node] = TaskPlacement(
                    node, name, alternative.start, best.finish, alternative.cost
                )
    for node in run:
        if node not in placed:  # its site's batch failed, or no site offered: alone, afresh
            placed[node] = _place_alone(
                graph, node, part_of[node], sites, offers, network, alpha, now, placed
            )


def _ask(
    graph: TaskGraph,
    node: str,
    site: SiteAttributes,
    placed: Dict[str, TaskPlacement],
    network: Network,
    now: int,
) -> Optional[Ask]:
    task = task_of(graph, node)
    walltime = task.walltime(site)
    if walltime is None:
        return None
    earliest = max((now, *data_ready(graph, node, site.name, placed, network)))
    return (task.cores, walltime, earliest)


def _place_alone(
    graph: TaskGraph,
    node: str,
    part: int,
    sites: Sequence[SiteAttributes],
    offers: BatchOffers,
    network: Network,
    alpha: float,
    now: int,
    placed: Dict[str, TaskPlacement],
) -> TaskPlacement:
    """One task quoted at every site and held alone, the best candidate that holds."""
    candidates: List[_Candidate] = []
    for site in sites:
        ask = _ask(graph, node, site, placed, network, now)
        if ask is None:
            continue
        _, walltime, earliest = ask
        [alternatives] = offers.alternatives_all(site.name, [ask])
        candidates += [
            _Candidate(site.name, walltime, a)
            for a in alternatives
            if a.start >= earliest and a.end - a.start >= walltime
        ]
    cores = task_of(graph, node).cores
    left = list(candidates)
    while left:
        best = left.pop(_best(left, alpha))
        if offers.hold_all(best.site, [(part, cores, best.alternative)])[0]:
            chosen = best.alternative
            return TaskPlacement(node, best.site, chosen.start, best.finish, chosen.cost)
    reason = "none of its offers could be held" if candidates else "no site offers a window"
    raise PlanningError(f"task {node}: {reason}")


def _best(candidates: Sequence[_Candidate], alpha: float) -> int:
    """The index of the best candidate by the trade-off (as :func:`_hold_best` chooses)."""
    costs = [float(c.alternative.cost) for c in candidates]
    return tradeoff.choose(costs, [float(c.finish) for c in candidates], alpha)


def data_ready(
    graph: TaskGraph, node: str, site: str, placed: Dict[str, TaskPlacement], network: Network
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
    placed: Dict[str, TaskPlacement],
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
) -> TaskPlacement:
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
            return TaskPlacement(node, best.site, chosen.start, best.finish, chosen.cost)
    reason = "none of its offers could be held" if candidates else "no site offers a window"
    raise PlanningError(f"task {node}: {reason}")
