"""HEFT ranks and greedy provisioning across sites (thesis ch. 7), on hand-worked cases and
as a property: every plan respects the workflow's dependencies and its data's arrival."""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Dict, List, Sequence, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from siteagent.client.greedy import Alternative, data_ready, provision, provision_in_batches
from siteagent.client.heft import rank_order, upward_ranks
from siteagent.client.plans import Network, PlanningError
from siteagent.client.tasks import (
    Requirements,
    Task,
    TaskGraph,
    edge_bytes,
    task_graph,
    task_of,
)
from siteagent.client.workflow import ensemble
from siteagent.core.prediction import plan as plan_afresh
from siteagent.core.values import BatchReservation
from testbed.inprocess.provisioning import (
    T0,
    BatchMarketSites,
    MarketSites,
    attributes,
    busy_site,
    layered_workflow,
)

GB = 10**9
#: 1 GB/s and 10 s of latency: 2 GB take 12 s between two sites.
NET = Network(bytes_per_s=GB, latency_s=10)


def diamond() -> TaskGraph:
    """a -> b (2 GB), a -> c (nothing), b -> d, c -> d."""
    a = Task("a", 1, runtime_s=100, outputs={"a.out": 2 * GB})
    b = Task("b", 1, runtime_s=200, inputs={"a.out": 2 * GB})
    c = Task("c", 1, runtime_s=50)
    d = Task("d", 1, runtime_s=10)
    return task_graph([(a, []), (b, ["a"]), (c, ["a"]), (d, ["b", "c"])], "diamond")


def test_upward_ranks_by_hand() -> None:
    """rank(d) = 10; rank(b) = 200 + 10; rank(c) = 50 + 10; rank(a) = 100 + max(12 + 210,
    0 + 60) = 322: the critical path a-b-d, with a's 2 GB to b at 10 s + 2 s."""
    ranks = upward_ranks(diamond(), [attributes("x")], NET)
    assert ranks == {"d": 10, "b": 210, "c": 60, "a": 322}
    assert rank_order(diamond(), ranks) == ["a", "b", "c", "d"]


def test_a_tasks_rank_counts_its_mean_run_time_over_the_sites() -> None:
    """3.6e6 megacycles: 2,000 s at 1.8 GHz, 1,000 s at 3.6 GHz, 1,500 s on average; a site
    without a clock rate cannot say and does not count."""
    graph = task_graph([(Task("w", 4, work_mcycles=3.6e6), [])], "one")
    sites = [attributes("slow", 1800), attributes("fast", 3600), attributes("unknown")]
    assert upward_ranks(graph, sites, NET) == {"w": 1500}


def test_ties_keep_a_topological_order() -> None:
    """Zero-length tasks and edges tie on rank; a parent still comes before its child."""
    entry = ensemble([("m", task_graph([(Task("t", 1, runtime_s=0), [])], "m"))])
    order = rank_order(entry, upward_ranks(entry, [attributes("x")], NET))
    assert order == ["entry", "m/t", "exit"]


class Fixed:
    """Sites answering fixed alternatives; records what it was asked; refuses some holds."""

    def __init__(self, offers: Dict[str, List[Alternative]], refuse: Sequence[str] = ()) -> None:
        self.offers = offers
        self.refuse = set(refuse)
        self.asked: List[Tuple[str, int, int, int]] = []
        self.held: List[Tuple[str, Alternative]] = []

    def alternatives(
        self, site: str, cores: int, walltime: int, earliest_start: int
    ) -> Sequence[Alternative]:
        self.asked.append((site, cores, walltime, earliest_start))
        return [a for a in self.offers.get(site, []) if a.start >= earliest_start]

    def hold(self, site: str, cores: int, alternative: Alternative) -> bool:
        if site in self.refuse:
            return False
        self.held.append((site, alternative))
        return True


def one_task() -> TaskGraph:
    return task_graph([(Task("t", 2, runtime_s=100), [])], "one")


OFFERS = {
    "A": [Alternative(0, 100, Decimal("10.00")), Alternative(200, 300, Decimal("0.00"))],
    "B": [Alternative(50, 150, Decimal("2.00"))],
}


@pytest.mark.parametrize(
    ("alpha", "site", "start"),
    [
        (0.0, "A", 0),  # the earliest finish, 100
        (1.0, "A", 200),  # the cheapest, free at 200
        # costs 10, 0, 2 -> 1, 0, .2; finishes 100, 300, 150 -> 0, 1, .25:
        # A@0 .5, A@200 .5, B@50 .225
        (0.5, "B", 50),
    ],
)
def test_the_alpha_choice_by_hand(alpha: float, site: str, start: int) -> None:
    sites = [attributes("A"), attributes("B")]
    plan = provision(one_task(), sites, Fixed(OFFERS), NET, alpha, now=0)
    placement = plan.placement("t")
    assert (placement.site, placement.start, placement.finish) == (site, start, start + 100)
    assert plan.cost == placement.cost and plan.makespan == start + 100


def test_a_refused_hold_falls_back_to_the_next_best() -> None:
    sites = [attributes("A"), attributes("B")]
    plan = provision(one_task(), sites, Fixed(OFFERS, refuse=["B"]), NET, 0.5, now=0)
    assert plan.placement("t").site == "A"  # B's offer was best but could not be held
    with pytest.raises(PlanningError, match="none of its offers could be held"):
        provision(one_task(), sites, Fixed(OFFERS, refuse=["A", "B"]), NET, 0.5, now=0)
    with pytest.raises(PlanningError, match="no site offers a window"):
        provision(one_task(), sites, Fixed({}), NET, 0.5, now=0)
    with pytest.raises(ValueError, match="alpha"):
        provision(one_task(), sites, Fixed(OFFERS), NET, 1.5, now=0)


def test_a_task_no_site_can_run_says_what_it_needs_rather_than_no_window() -> None:
    needs = Requirements(architecture="aarch64")
    graph = task_graph([(Task("t", 2, runtime_s=100, requirements=needs), [])], "one")
    sites = [attributes("A"), attributes("B")]
    with pytest.raises(PlanningError, match=r"no site can run it: .* architecture aarch64"):
        provision(graph, sites, Fixed(OFFERS), NET, 0.5, now=0)


def test_children_are_asked_from_when_their_parents_data_can_arrive() -> None:
    """a runs on A until 100; b reads its 2 GB: on A from 100, on B from 112."""
    graph = task_graph(
        [
            (Task("a", 1, runtime_s=100, outputs={"x": 2 * GB}), []),
            (Task("b", 1, runtime_s=50, inputs={"x": 2 * GB}), ["a"]),
        ],
        "pair",
    )
    late = Alternative(10_000, 10_100, Decimal(0))
    offers = Fixed({"A": [Alternative(0, 100, Decimal(1)), late], "B": [late]})
    plan = provision(graph, [attributes("A"), attributes("B")], offers, NET, 0.0, now=0)
    assert plan.placement("a").site == "A"
    assert ("A", 1, 50, 100) in offers.asked and ("B", 1, 50, 112) in offers.asked


sites_and_workflows = st.tuples(
    st.integers(0, 10_000), st.integers(2, 3), st.integers(3, 14), st.floats(0, 1)
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sites_and_workflows)
def test_every_greedy_plan_respects_dependencies_and_data_arrival(
    case: Tuple[int, int, int, float],
) -> None:
    seed, count, tasks, alpha = case
    snapshots = {f"s{i}": busy_site(seed + i, 32, 6, 8) for i in range(count)}
    sites = [attributes(name) for name in snapshots]
    graph = layered_workflow(seed, tasks=tasks, levels=3, mean_cores=4, mean_bytes=GB)
    market = MarketSites(snapshots, limit=4)
    plan = provision(graph, sites, market, NET, alpha, now=T0)
    placed = {p.task: p for p in plan.placements}
    assert set(placed) == set(graph.nodes)
    for node, p in placed.items():
        assert p.start >= T0 and p.site in snapshots
        assert p.finish - p.start == task_of(graph, node).walltime(sites[0])
        for parent in graph.predecessors(node):
            moved = NET.transfer_s(edge_bytes(graph, parent, node), placed[parent].site == p.site)
            assert p.start >= placed[parent].finish + moved
        assert p.start >= max((T0, *data_ready(graph, node, p.site, placed, NET)))
    assert plan.makespan == max(p.finish for p in plan.placements) - T0
    assert len(market.held) == len(placed)


# -- asking several tasks at once (docs/batches.md) ------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sites_and_workflows)
def test_every_batched_plan_respects_dependencies_and_data_arrival(
    case: Tuple[int, int, int, float],
) -> None:
    """The planner asking runs of tasks together keeps every promise of the one-by-one
    planner; it holds each task once, and holds tasks together."""
    seed, count, tasks, alpha = case
    snapshots = {f"s{i}": busy_site(seed + i, 32, 6, 8) for i in range(count)}
    sites = [attributes(name) for name in snapshots]
    graph = layered_workflow(seed, tasks=tasks, levels=3, mean_cores=4, mean_bytes=GB)
    market = BatchMarketSites(snapshots, limit=4)
    plan = provision_in_batches(graph, sites, market, NET, alpha, now=T0)
    placed = {p.task: p for p in plan.placements}
    assert set(placed) == set(graph.nodes)
    assert [p.task for p in plan.placements] == rank_order(graph, upward_ranks(graph, sites, NET))
    for node, p in placed.items():
        assert p.start >= T0 and p.site in snapshots
        assert p.finish - p.start == task_of(graph, node).walltime(sites[0])
        for parent in graph.predecessors(node):
            moved = NET.transfer_s(edge_bytes(graph, parent, node), placed[parent].site == p.site)
            assert p.start >= placed[parent].finish + moved
    assert len(market.held) == len(placed)


def test_a_run_is_quoted_at_once_and_held_together() -> None:
    """Ten independent tasks: each site asked once for all ten, and the windows chosen at a
    site held in one batch; the plan is the one-by-one planner's when nothing collides."""
    graph = layered_workflow(1, tasks=10, levels=1, mean_cores=2)
    snapshots = {f"s{i}": busy_site(3 + i, 256, 2, 2) for i in range(2)}
    sites = [attributes(name) for name in snapshots]
    market = BatchMarketSites(dict(snapshots), limit=4)
    batched = provision_in_batches(graph, sites, market, NET, 0.0, now=T0)
    assert max(market.batches) > 1 and len(market.batches) <= len(sites)
    alone = provision(graph, sites, MarketSites(dict(snapshots), limit=4), NET, 0.0, now=T0)
    assert [(p.task, p.site, p.start) for p in batched.placements] == [
        (p.task, p.site, p.start) for p in alone.placements
    ]


def test_a_batch_that_cannot_be_held_is_planned_again_task_by_task() -> None:
    """Two tasks that both choose the only window a site has: their batch fails, and each
    is quoted afresh and held alone (the second elsewhere, or later)."""
    a = Task("a", 2, runtime_s=100)
    b = Task("b", 2, runtime_s=100)
    graph = task_graph([(a, []), (b, [])], "pair")

    class OneWindow(BatchMarketSites):
        def taken(self) -> bool:
            return any(held.start == 0 for held in self.held)

        def alternatives(
            self, site: str, cores: int, walltime: int, earliest_start: int
        ) -> Sequence[Alternative]:
            if not self.taken():
                return [Alternative(0, 100, Decimal(0))]
            return [Alternative(500, 600, Decimal(5))]

        def hold(self, site: str, cores: int, alternative: Alternative) -> bool:
            if alternative.start == 0 and self.taken():
                return False
            self.held.append(BatchReservation(site, alternative.start, alternative.end, cores))
            return True

    market = OneWindow({"A": busy_site(1, 8, 0, 0)}, limit=4)
    plan = provision_in_batches(graph, [attributes("A")], market, NET, 0.0, now=0)
    assert sorted(p.start for p in plan.placements) == [0, 500]
    assert market.batches == [2, 1, 1]  # the pair failed; then each alone


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), holds=st.integers(1, 12))
def test_sites_in_memory_keep_the_plan_a_fresh_one_would_make(seed: int, holds: int) -> None:
    """Holding windows one after another (the greedy planner's way), the sites in memory
    update their plan instead of planning again: it is the plan ``plan()`` makes of the
    snapshot with every window held, start for start and in its free capacity."""
    site = busy_site(seed, 64, running=8, queued=25)
    sites = MarketSites({"s": site}, limit=20)
    rng = random.Random(seed)
    for _ in range(holds):
        cores = rng.randint(1, 32)
        offers = sites.alternatives("s", cores, rng.randint(60, 7200), T0 + rng.randint(0, 20_000))
        if offers:
            assert sites.hold("s", cores, rng.choice(offers))
    fresh = plan_afresh(sites.snapshots["s"])
    kept = sites.context("s").plan
    assert kept.starts == fresh.starts
    assert list(kept.profile.segments()) == list(fresh.profile.segments())
    assert kept.horizon == fresh.horizon
