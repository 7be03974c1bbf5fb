"""Multi-objective provisioning over the sites' advertised slots (Singh, thesis ch. 4).

A resource plan is a subset of the slots every site advertises (``GET /v1/slots``), encoded as
one bit per slot (ch. 4.5, "Solution representation"). A plan is judged by two costs at once:
its allocation cost AC, what the slots it uses cost by the thesis' Table 1, and its scheduling
cost SC, the workflow's makespan on them. The makespan comes from scheduling the workflow on
the plan's slots: tasks in HEFT order, each on the site whose slots let it finish first, no
earlier than its parents' outputs can arrive (Figure 2's fit with an earliest start), the slots
it takes cut to what is left (Figure 3). A plan on which some task fits nowhere is infeasible.

The thesis evolves the Pareto set with MOGA (Fonseca and Fleming); here it is pymoo's NSGA-II,
the same kind of search (a population ranked by domination, kept diverse, here by crowding
distance and tournaments rather than MOGA's fitness sharing and proportionate selection) with
the thesis' operators: two-point crossover and bit-flip mutation with probability 1/n per bit.
Defaults
are the thesis' own (ch. 4.7, p. 55 of the dissertation): "The population size in MOGA was
100 while the number of iterations was limited to 10". The user's trade-off α then picks one
plan of the set by eq. 15, each cost normalised over the set (:mod:`siteagent.core.tradeoff`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from pymoo.algorithms.moo.nsga2 import NSGA2
from pymoo.core.problem import ElementwiseProblem
from pymoo.operators.crossover.pntx import TwoPointCrossover
from pymoo.operators.mutation.bitflip import BitflipMutation
from pymoo.optimize import minimize

from siteagent.client.heft import rank_order, upward_ranks
from siteagent.client.plans import Network, PlanningError, ProvisioningPlan, TaskPlacement
from siteagent.client.tasks import TaskGraph, edge_bytes, task_of
from siteagent.core import tradeoff
from siteagent.core.slots import fit_request, remainder
from siteagent.core.values import Slot
from siteagent.protocol.models import SiteAttributes, SlotList

#: The thesis' MOGA settings (ch. 4.7): 100 plans per generation, 10 generations.
DEFAULT_POPULATION = 100
DEFAULT_GENERATIONS = 10


@dataclass(frozen=True)
class SlotPlan:
    """One plan of the Pareto set: the slots its genome selects (site, slot) and the schedule
    of the workflow on them, whose placements say what is held and paid (a selected slot no
    task uses costs nothing)."""

    slots: Tuple[Tuple[str, Slot], ...]
    plan: ProvisioningPlan


@dataclass(frozen=True)
class ParetoSet:
    """The non-dominated plans found, cheapest first."""

    plans: Tuple[SlotPlan, ...]

    def choose(self, alpha: float) -> SlotPlan:
        """The plan minimising α·norm(AC) + (1−α)·norm(SC) over the set (thesis eq. 15)."""
        costs = [float(p.plan.cost) for p in self.plans]
        makespans = [float(p.plan.makespan) for p in self.plans]
        return self.plans[tradeoff.choose(costs, makespans, alpha)]


def advertised(slot_lists: Mapping[str, SlotList]) -> List[Tuple[str, Slot]]:
    """Every site's advertised slots as one list (the thesis' global set Â)."""
    return [
        (
            site,
            Slot(
                s.start,
                s.duration,
                s.cores,
                Decimal(str(s.unit_price)),
                Decimal(str(s.fee)),
                s.divisible,
                s.extensible,
            ),
        )
        for site, answer in slot_lists.items()
        for s in answer.slots
    ]


class SlotScheduler:
    """Schedules the workflow on any set of slots (one call per plan the search judges):
    tasks in HEFT order, each where it finishes first (the cheaper on a tie). What does not
    depend on the slots is worked out once: the order, each task's walltime on each site,
    and the transfer time of each edge between two sites."""

    def __init__(
        self, graph: TaskGraph, sites: Sequence[SiteAttributes], network: Network, now: int
    ) -> None:
        self.now = now
        self.sites = [site.name for site in sites]
        self.order = rank_order(graph, upward_ranks(graph, sites, network))
        self.tasks = {node: task_of(graph, node) for node in graph.nodes}
        self.walltimes = {
            node: {site.name: task.walltime(site) for site in sites}
            for node, task in self.tasks.items()
        }
        self.inbound = {
            node: [
                (parent, network.transfer_s(edge_bytes(graph, parent, node), same_site=False))
                for parent in graph.predecessors(node)
            ]
            for node in graph.nodes
        }
        # the sites each task can run on, in the sites' order, and for how long
        self.runs_on = {
            node: [(name, w) for name, w in walltimes.items() if w is not None]
            for node, walltimes in self.walltimes.items()
        }
        # a piece shorter than every task's walltime there can never hold one
        self.shortest = {name: self._shortest_walltime(name) for name in self.sites}

    def _shortest_walltime(self, site: str) -> int:
        walltimes = [
            w
            for w in (self.walltimes[n][site] for n, t in self.tasks.items() if not t.structural)
            if w is not None
        ]
        return min(walltimes, default=0)

    def plan(self, chosen: Sequence[Tuple[str, Slot]]) -> Optional[ProvisioningPlan]:
        """The schedule on the ``chosen`` (site, slot) pairs; None if some task fits nowhere."""
        # each site's free slots in order, by identity: taking one out is then one step
        free: Dict[str, Dict[int, Slot]] = {name: {} for name in self.sites}
        for site_name, slot in chosen:
            if slot.extensible or slot.duration >= self.shortest[site_name]:
                free[site_name][id(slot)] = slot
        placed: Dict[str, TaskPlacement] = {}
        for node in self.order:
            task = self.tasks[node]
            arrivals = self._arrivals(node, placed)
            if task.structural:
                ready = max((finish for finish, _, _ in arrivals), default=self.now)
                placed[node] = TaskPlacement(node, None, ready, ready, Decimal(0))
                continue
            best: Optional[Tuple[int, Decimal, str, Any, int]] = None
            for name, walltime in self.runs_on[node]:
                if not free[name]:
                    continue
                earliest = self._ready(arrivals, name)
                if best is not None and earliest + walltime > best[0]:
                    continue  # it cannot finish there as early as where it already fits
                fit = fit_request(list(free[name].values()), task.cores, walltime, earliest)
                if fit is not None:
                    finish = fit.start + walltime
                    if best is None or (finish, fit.cost) < (best[0], best[1]):
                        best = (finish, fit.cost, name, fit, walltime)
            if best is None:
                return None
            finish, cost, name, fit, walltime = best
            self._take(free[name], name, fit.parts, task.cores, fit.start, fit.start + walltime)
            placed[node] = TaskPlacement(node, name, fit.start, finish, cost)
        return ProvisioningPlan(tuple(placed.values()), self.now)

    def _arrivals(
        self, node: str, placed: Dict[str, TaskPlacement]
    ) -> List[Tuple[int, Optional[str], int]]:
        """Each parent's output of ``node``: when it is ready, on which site, and how long it
        takes to reach another one."""
        return [
            (placed[parent].finish, placed[parent].site, transfer)
            for parent, transfer in self.inbound[node]
        ]

    def _ready(self, arrivals: Sequence[Tuple[int, Optional[str], int]], site: str) -> int:
        """When all the parents' outputs can be on ``site`` (as :func:`greedy.data_ready`,
        with the transfers worked out once)."""
        ready = self.now
        for finish, source, transfer in arrivals:
            ready = max(ready, finish + (0 if source in (site, None) else transfer))
        return ready

    def _take(
        self,
        free: Dict[int, Slot],
        site: str,
        parts: Sequence[Tuple[Slot, int]],
        cores: int,
        start: int,
        end: int,
    ) -> None:
        """Replace each slot the task took part of by what is left of it that could still
        hold a task."""
        needed = cores
        for slot, _ in parts:
            used = min(slot.cores, needed)
            needed -= used
            del free[id(slot)]
            for piece in remainder(slot, used, start, end):
                if piece.extensible or piece.duration >= self.shortest[site]:
                    free[id(piece)] = piece


class _SlotProblem(ElementwiseProblem):  # type: ignore[misc]  # pymoo is untyped
    """Minimise (AC, SC) over bit vectors; a plan on which some task fits nowhere violates
    its one constraint by the number of tasks."""

    def __init__(self, evaluate: Any, bits: int, tasks: int) -> None:
        super().__init__(n_var=bits, n_obj=2, n_ieq_constr=1, xl=0, xu=1, vtype=bool)
        self._evaluate_plan = evaluate
        self._tasks = tasks

    def _evaluate(self, x: Any, out: Dict[str, Any], *args: Any, **kwargs: Any) -> None:
        plan = self._evaluate_plan(x)
        if plan is None:
            out["F"] = [math.inf, math.inf]
            out["G"] = [float(self._tasks)]
        else:
            out["F"] = [float(plan.cost), float(plan.makespan)]
            out["G"] = [0.0]


def pareto_plans(
    graph: TaskGraph,
    sites: Sequence[SiteAttributes],
    slot_lists: Mapping[str, SlotList],
    network: Network,
    now: int,
    population: int = DEFAULT_POPULATION,
    generations: int = DEFAULT_GENERATIONS,
    seed: Optional[int] = None,
) -> ParetoSet:
    """The Pareto set of plans over the sites' advertised slots; PlanningError if no subset
    of them holds the workflow."""
    candidates = advertised(slot_lists)
    if not candidates:
        raise PlanningError("the sites advertise no slots")
    scheduler = SlotScheduler(graph, sites, network, now)
    decoded: Dict[bytes, Optional[ProvisioningPlan]] = {}

    def plan_of(bits: Any) -> Optional[ProvisioningPlan]:
        """The schedule a genome encodes, worked out once per genome: the search meets some
        genomes again (the Pareto set it returns is read back here at the end)."""
        key = np.asarray(bits, dtype=bool).tobytes()
        if key not in decoded:
            decoded[key] = scheduler.plan([c for c, keep in zip(candidates, bits) if keep])
        return decoded[key]

    # the thesis' random first plans (each slot in or out with even odds), and one with every
    # slot, the likeliest to hold the whole workflow, so that the search starts from a
    # feasible plan whenever the slots allow one
    rng = np.random.default_rng(seed)
    first = rng.random((population, len(candidates))) < 0.5
    first[0, :] = True
    algorithm = NSGA2(
        pop_size=population,
        sampling=first,
        crossover=TwoPointCrossover(),
        mutation=BitflipMutation(prob=1.0, prob_var=1.0 / len(candidates)),
        eliminate_duplicates=True,
    )
    problem = _SlotProblem(plan_of, len(candidates), graph.number_of_nodes())
    result = minimize(problem, algorithm, ("n_gen", generations), seed=seed, verbose=False)
    if result.X is None:
        raise PlanningError("no subset of the advertised slots holds the workflow")
    found: Dict[Tuple[Decimal, int], SlotPlan] = {}
    for bits in np.atleast_2d(result.X):
        plan = plan_of(bits)
        if plan is None:
            continue
        chosen = tuple(c for c, keep in zip(candidates, bits) if keep)
        key = (plan.cost, plan.makespan)
        if key not in found or len(chosen) < len(found[key].slots):
            found[key] = SlotPlan(chosen, plan)
    return ParetoSet(tuple(found[key] for key in sorted(found)))
