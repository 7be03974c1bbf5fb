"""One workflow submitted at one instant of a replay, three ways (thesis ch. 4 and 7):

- **best effort**: its tasks submitted just in time in HEFT order (``siteagent.sim.dag``) into
  a fork of the replay, which goes on with its own work; makespan from the first submission to
  the last end, cost Σ cores × run time at 1 SU per core-hour;
- **ch. 4**: the genetic planner over the slots the sites advertise at that instant (their
  conservative schedule's holes, c = 1, f = 0), the plan of the Pareto set chosen by α;
- **ch. 7**: the greedy planner over the priced alternatives the sites quote (c = 1 plus the
  externality fee), held one task after the other.

Planned windows are then put into a fork of the replay as advance reservations: a window the
replay refuses would be a plan the site could not keep (counted; none is expected with exact
estimates). Every planner is the client's own (``siteagent.client``); the sites are in memory
(``testbed.inprocess.provisioning.MarketSites``), quoting and advertising from the replay's
snapshot.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Dict, List, Mapping, Sequence, Tuple

from siteagent.client.genetic import pareto_plans
from siteagent.client.greedy import provision
from siteagent.client.heft import rank_order, upward_ranks
from siteagent.client.plans import Network, ProvisioningPlan
from siteagent.client.tasks import TaskGraph, edge_bytes, task_of
from siteagent.core.engines import ReservationConflict
from siteagent.core.money import cost
from siteagent.core.values import ClusterSnapshot
from siteagent.protocol.models import SiteAttributes
from siteagent.sim.dag import DagJob, run_just_in_time
from siteagent.sim.simulator import Simulator
from siteagent.sim.snapshot import snapshot_of
from testbed.inprocess.provisioning import MarketSites, attributes

#: Data between sites (thesis ch. 4.9): 10 Gbps with 150 s of latency.
NETWORK = Network(bytes_per_s=10e9 / 8, latency_s=150)
#: How many priced starts a site lists per query (the agent's default, form (19)).
ALTERNATIVES = 100

Planned = Dict[float, Tuple[ProvisioningPlan, float]]


@dataclass
class Outcome:
    """One approach at one instant: makespan (s), cost (SU), and what it took."""

    makespan_s: int
    cost_su: float
    seconds: float = 0.0
    refused_windows: int = 0

    def to_dict(self) -> Dict[str, float]:
        return {
            "makespan_s": self.makespan_s,
            "cost_su": self.cost_su,
            "seconds": round(self.seconds, 3),
            "refused_windows": self.refused_windows,
        }


def dag_jobs(graph: TaskGraph, sites: Sequence[SiteAttributes]) -> List[DagJob]:
    """The workflow's tasks as batch jobs in HEFT order (the thesis uses one order for best
    effort and provisioning), each asking its run time (known, as the thesis assumes)."""
    order = rank_order(graph, upward_ranks(graph, sites, NETWORK))
    jobs = []
    for node in order:
        task = task_of(graph, node)
        run = task.walltime(sites[0]) or 1
        parents = tuple(graph.predecessors(node))
        transfers = tuple(
            NETWORK.transfer_s(edge_bytes(graph, p, node), same_site=False) for p in parents
        )
        jobs.append(DagJob(node, task.cores, run, parents, run, transfers))
    return jobs


def best_effort_cost(jobs: Sequence[DagJob]) -> float:
    """Σ cores × run time (thesis eq. 16), billed as the sites bill: each job to the cent at
    1 SU per core-hour, as a reservation of its shape without a fee would be."""
    total = sum((cost(job.size, job.run, Decimal(1), Decimal(0)) for job in jobs), Decimal(0))
    return float(total)


def best_effort(
    replays: Mapping[str, Simulator], jobs: Sequence[DagJob], early: bool = False
) -> Outcome:
    """The workflow just in time on forks of the replays (the replays do not move); with
    ``early``, queued at once with its dependencies (``sbatch --dependency=afterok``)."""
    began = time.perf_counter()
    forks = {name: sim.fork() for name, sim in replays.items()}
    run = run_just_in_time(forks, jobs, early=early)
    return Outcome(run.makespan, best_effort_cost(jobs), time.perf_counter() - began)


def greedy_plans(
    graph: TaskGraph, snapshots: Mapping[str, ClusterSnapshot], alphas: Sequence[float], now: int
) -> Planned:
    """Ch. 7: a greedy plan per α over the sites' priced alternatives, and its seconds."""
    sites = [attributes(name) for name in snapshots]
    out: Planned = {}
    for alpha in alphas:
        began = time.perf_counter()
        offers = MarketSites(dict(snapshots), limit=ALTERNATIVES)
        plan = provision(graph, sites, offers, NETWORK, alpha, now)
        out[alpha] = (plan, time.perf_counter() - began)
    return out


def genetic_plans(
    graph: TaskGraph,
    snapshots: Mapping[str, ClusterSnapshot],
    alphas: Sequence[float],
    now: int,
    seed: int,
) -> Planned:
    """Ch. 4: one Pareto set over the sites' advertised slots (population 100, 10
    generations), each α's plan chosen from it (eq. 15); they share the search's seconds."""
    sites = [attributes(name) for name in snapshots]
    began = time.perf_counter()
    slot_lists = MarketSites(dict(snapshots)).slot_lists()
    found = pareto_plans(graph, sites, slot_lists, NETWORK, now, seed=seed % 2**32)
    seconds = time.perf_counter() - began
    return {alpha: (found.choose(alpha).plan, seconds) for alpha in alphas}


def refused_windows(
    replays: Mapping[str, Simulator], plan: ProvisioningPlan, graph: TaskGraph
) -> int:
    """Put the plan's windows into forks of the replays as reservations: how many the
    replays refuse (each a window its site could not have given)."""
    forks: Dict[str, Simulator] = {}
    refused = 0
    for placement in plan.placements:
        if placement.site is None:
            continue
        fork = forks.get(placement.site)
        if fork is None:
            fork = forks[placement.site] = replays[placement.site].fork()
        cores = task_of(graph, placement.task).cores
        try:
            fork.add_reservation(("plan", placement.task), placement.start, placement.finish, cores)
        except ReservationConflict:
            refused += 1
    return refused


def at_instant(
    replays: Mapping[str, Simulator],
    graph: TaskGraph,
    alphas: Sequence[float],
    planners: Sequence[str],
    seed: int,
    check: bool = True,
    baselines: Mapping[str, Mapping[str, Simulator]] = {},
) -> Dict[str, object]:
    """Every approach for ``graph`` submitted now (the replays stand at one instant); each of
    ``baselines`` (name: replays of the same sites run otherwise, at the same instant; none
    for "chained", the workflow queued at once with its dependencies on ``replays``) runs
    best effort too, as ``best_effort_NAME``."""
    now = next(iter(replays.values())).now
    snapshots = {name: snapshot_of(sim) for name, sim in replays.items()}
    jobs = dag_jobs(graph, [attributes(name) for name in replays])
    record: Dict[str, object] = {"now": now, "best_effort": best_effort(replays, jobs).to_dict()}
    for name, others in baselines.items():
        early = name == "chained"
        record[f"best_effort_{name}"] = best_effort(others or replays, jobs, early).to_dict()
    planned: Dict[str, Planned] = {}
    if "greedy" in planners:
        planned["greedy"] = greedy_plans(graph, snapshots, alphas, now)
    if "genetic" in planners:
        planned["genetic"] = genetic_plans(graph, snapshots, alphas, now, seed)
    for name, plans in planned.items():
        record[name] = {
            str(alpha): Outcome(
                plan.makespan,
                float(plan.cost),
                seconds,
                refused_windows(replays, plan, graph) if check else 0,
            ).to_dict()
            for alpha, (plan, seconds) in plans.items()
        }
    return record
