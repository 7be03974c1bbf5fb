"""Reserving a plan made elsewhere (the genetic planner's) through the sites' offers: each task
at the site the plan names, no earlier than planned nor before its parents' data, and a site
that no longer offers a window failing the whole."""

from __future__ import annotations

from typing import Sequence

import pytest

from siteagent.client import genetic, plan_reservation
from siteagent.client.greedy import Alternative
from siteagent.client.plans import Network, PlanningError, ProvisioningPlan
from siteagent.client.tasks import TaskGraph
from testbed.inprocess.provisioning import T0, MarketSites, attributes, busy_site, layered_workflow

NET = Network(bytes_per_s=1.25e9)
SITES = [attributes("a"), attributes("b")]


def market() -> MarketSites:
    return MarketSites(
        {
            "a": busy_site(seed=1, capacity=64, running=8, queued=6),
            "b": busy_site(seed=2, capacity=64, running=8, queued=6),
        }
    )


def genetic_plan(graph: TaskGraph, sites: MarketSites) -> ProvisioningPlan:
    """The genetic planner's choice at α = 0.5 over the sites' slots (a short search)."""
    pareto = genetic.pareto_plans(
        graph, SITES, sites.slot_lists(), NET, T0, population=20, generations=3, seed=1
    )
    return pareto.choose(0.5).plan


def test_a_genetic_plan_is_held_at_its_sites_from_its_windows() -> None:
    graph = layered_workflow(seed=3, tasks=12, levels=3)
    sites = market()
    plan = genetic_plan(graph, sites)
    held = plan_reservation.reserve(plan, graph, SITES, sites, NET)
    assert len(sites.held) == 12
    for planned in plan.placements:
        got = held.placement(planned.task)
        assert got.site == planned.site and got.start >= planned.start
        for parent in graph.predecessors(planned.task):
            assert got.start >= held.placement(parent).finish


class Refusing:
    """Sites that offer nothing at ``gone`` any more."""

    def __init__(self, sites: MarketSites, gone: str) -> None:
        self.sites, self.gone = sites, gone

    def alternatives(
        self, site: str, cores: int, walltime: int, earliest_start: int
    ) -> Sequence[Alternative]:
        if site == self.gone:
            return []
        return self.sites.alternatives(site, cores, walltime, earliest_start)

    def hold(self, site: str, cores: int, alternative: Alternative) -> bool:
        return self.sites.hold(site, cores, alternative)


def test_a_site_that_no_longer_offers_a_window_fails_the_plan() -> None:
    graph = layered_workflow(seed=3, tasks=12, levels=3)
    sites = market()
    plan = genetic_plan(graph, sites)
    gone = sorted({p.site for p in plan.placements if p.site is not None})[0]
    with pytest.raises(PlanningError, match=f"{gone} no longer offers a window"):
        plan_reservation.reserve(plan, graph, SITES, Refusing(sites, gone), NET)
