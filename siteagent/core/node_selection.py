"""Which nodes a job gets, and how many cores on each: Slurm's select/cons_tres choice
(and PBS's ``place=free`` for reservations, :func:`free_placement`).

Slurm (22.05, ``_eval_nodes`` of select/cons_tres, no topology plugin) cuts the nodes the job
may use into sets of consecutive nodes (in the node table's order) of equal scheduling weight;
a node with nothing the job can use ends a set. It then picks, among the sets of the lowest
weight, the first that holds the whole job with the fewest spare CPUs, or, if none does, the
largest; inside it, a job that fits on one node goes to the node with the fewest free CPUs
that holds it (best fit), else it takes the set's nodes in order. If the set was not enough it
picks the next set the same way. The job's CPUs are then laid out block by block: each node in
order gives all it has, keeping one CPU for every chosen node still to come.

Observed on the test cluster: ``-n4`` on four idle 16-core nodes goes to the first; ``-n24``
to the first two as 16 + 8; ``-n20`` with 0, 2, 16, 16 free goes to the last three as
2 + 16 + 2; ``-N2`` takes one core on each of the first two nodes.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from siteagent.core.machine import NodeCores, Shape


def choose_nodes(usable: List[int], weights: List[int], shape: Shape) -> Optional[NodeCores]:
    """The nodes ``shape`` gets, or None if ``usable`` (the CPUs the job could use on each
    node, 0 for a node it cannot use) does not hold it.

    ``usable`` is what a whole-node job may use too: the caller offers such a job only the
    nodes that are entirely free, with all their CPUs.
    """
    count = len(usable)
    max_nodes = shape.max_nodes if shape.max_nodes > 0 else count
    chosen = _choose(list(usable), weights, shape.cpus, shape.min_nodes, max_nodes)
    if chosen is None:
        return None
    if shape.exclusive:
        return tuple((node, usable[node]) for node in chosen)
    return _lay_out(chosen, usable, shape.cpus)


def _choose(
    avail: List[int], weights: List[int], cpus: int, min_nodes: int, max_nodes: int
) -> Optional[List[int]]:
    """The node indices chosen, in node order (``avail`` is spoilt)."""
    sets = _consecutive_sets(avail, weights)
    chosen: List[int] = []
    rem_cpus, rem_nodes = cpus, min_nodes
    while sets and max_nodes > 0:
        best = _best_set(sets, avail, rem_cpus, rem_nodes)
        if best < 0:
            break
        first, last, _ = sets.pop(best)
        if rem_nodes <= 1:
            single = _best_fit_node(avail, first, last, rem_cpus)
            if single >= 0:
                for node in range(first, last + 1):
                    if node != single:
                        avail[node] = 0
        for node in range(first, last + 1):
            if max_nodes == 0 or (rem_nodes <= 0 and rem_cpus <= 0):
                break
            if avail[node] <= 0 or (max_nodes == 1 and avail[node] < rem_cpus):
                continue
            chosen.append(node)
            rem_cpus -= avail[node]
            rem_nodes -= 1
            max_nodes -= 1
        if rem_nodes <= 0 and rem_cpus <= 0:
            return sorted(chosen)
    if rem_cpus <= 0 and rem_nodes <= 0:
        return sorted(chosen)
    return None


def _consecutive_sets(avail: List[int], weights: List[int]) -> List[Tuple[int, int, int]]:
    """(first, last, weight) of each run of usable nodes of one weight."""
    sets: List[Tuple[int, int, int]] = []
    first = -1
    for node in range(len(avail)):
        if avail[node] <= 0:
            if first >= 0:
                sets.append((first, node - 1, weights[first]))
                first = -1
            continue
        if first >= 0 and weights[node] != weights[first]:
            sets.append((first, node - 1, weights[first]))
            first = -1
        if first < 0:
            first = node
    if first >= 0:
        sets.append((first, len(avail) - 1, weights[first]))
    return sets


def _best_set(
    sets: List[Tuple[int, int, int]], avail: List[int], rem_cpus: int, rem_nodes: int
) -> int:
    """Index of the set to take from: lowest weight, then the first sufficient one with the
    fewest CPUs, else the one with the most CPUs; -1 if no set has a usable node."""
    best = -1
    best_cpus = best_weight = 0
    best_sufficient = False
    for index in range(len(sets)):
        first, last, weight = sets[index]
        cpus = nodes = 0
        for node in range(first, last + 1):
            if avail[node] > 0:
                cpus += avail[node]
                nodes += 1
        if nodes == 0:
            continue
        sufficient = cpus >= rem_cpus and nodes >= rem_nodes
        if best < 0 or weight < best_weight:
            better = True
        else:
            better = weight == best_weight and (
                (sufficient and not best_sufficient)
                or (sufficient and cpus < best_cpus)
                or (not sufficient and cpus > best_cpus)
            )
        if better:
            best, best_cpus, best_weight, best_sufficient = index, cpus, weight, sufficient
    return best


def _best_fit_node(avail: List[int], first: int, last: int, cpus: int) -> int:
    """The node of [first, last] with the fewest CPUs that still holds ``cpus``; -1 if none."""
    best, best_size = -1, 0
    for node in range(first, last + 1):
        if avail[node] < cpus or avail[node] <= 0:
            continue
        if best < 0 or avail[node] < best_size:
            best, best_size = node, avail[node]
            if best_size == cpus:
                break
    return best


def _lay_out(chosen: List[int], usable: List[int], cpus: int) -> NodeCores:
    """Block layout: each chosen node in order gives what it can, leaving one CPU for each
    chosen node after it."""
    laid: List[Tuple[int, int]] = []
    left = cpus
    for position, node in enumerate(chosen):
        after = len(chosen) - position - 1
        take = max(1, min(usable[node], left - after))
        laid.append((node, take))
        left -= take
    return tuple(laid)


def free_placement(usable: List[int], chunks: int) -> Optional[NodeCores]:
    """PBS's ``place=free`` for ``chunks`` one-CPU chunks: the vnodes in order, each taking as
    many chunks as it has CPUs free (pbs_sched's ``eval_selspec``, docs/pbs.md §11.5), or None
    if ``usable`` does not hold them all."""
    laid: List[Tuple[int, int]] = []
    left = chunks
    for node in range(len(usable)):
        if left <= 0:
            break
        take = min(usable[node], left)
        if take > 0:
            laid.append((node, take))
            left -= take
    return tuple(laid) if left <= 0 else None
