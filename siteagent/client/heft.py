"""HEFT's upward rank: which task to provision first.

Topcuoglu, Hariri and Wu's *Heterogeneous Earliest Finish Time* ranks a task by the length of
the longest path from it to the end of the workflow, counting each task at its mean run time
over the sites and each edge at its mean transfer time (thesis eq. 7):

    rank(v) = w̄(v) + max over children s of (c̄(v, s) + rank(s))

Tasks in non-increasing rank are in topological order (a parent's rank exceeds its child's by
at least the parent's run time) and the critical path comes first. Ties (zero-length tasks
and edges) are broken by a topological order, so that the order stays topological.
"""

from __future__ import annotations

from statistics import fmean
from typing import Dict, List, Sequence

import networkx as nx

from siteagent.client.plans import Network
from siteagent.client.tasks import TaskGraph, edge_bytes, task_of
from siteagent.protocol.models import SiteAttributes


def mean_run_time(graph: TaskGraph, node: str, sites: Sequence[SiteAttributes]) -> float:
    """w̄: the task's run time averaged over the sites that can run it (0 if none can; such
    a task makes no plan anyway)."""
    times = [t for t in (task_of(graph, node).run_time(site) for site in sites) if t is not None]
    return fmean(times) if times else 0.0


def upward_ranks(
    graph: TaskGraph, sites: Sequence[SiteAttributes], network: Network
) -> Dict[str, float]:
    """rank(v) for every task; the mean transfer c̄ of an edge is its time between two
    different sites (thesis ch. 4.9 averages it so: latency + bytes / bandwidth)."""
    ranks: Dict[str, float] = {}
    for node in reversed(list(nx.topological_sort(graph))):
        tail = max(
            (
                network.transfer_s(edge_bytes(graph, node, child), same_site=False) + ranks[child]
                for child in graph.successors(node)
            ),
            default=0.0,
        )
        ranks[node] = mean_run_time(graph, node, sites) + tail
    return ranks


def rank_order(graph: TaskGraph, ranks: Dict[str, float]) -> List[str]:
    """The tasks by non-increasing rank, ties in topological order."""
    position = {node: i for i, node in enumerate(nx.topological_sort(graph))}
    return sorted(graph.nodes, key=lambda node: (-ranks[node], position[node]))
