"""The client pieces the thesis reproduction adds: its workflows (ch. 4.7 and Table 2) and
the VAR scan of ch. 6 (Figure 33)."""

from __future__ import annotations

from collections import Counter

import networkx as nx
import pytest

from siteagent.client.generators import CYBERSHAKE_MODULES, cybershake, layered
from siteagent.client.tasks import task_of
from siteagent.client.var import Submission, scan_submission
from testbed.inprocess import provisioning as bed


def test_cybershake_is_table_2() -> None:
    """8,039 tasks on five levels; each module's count, run time and processors as Table 2
    prints them; every synthSGT reads both tensors and feeds its own peakValCal."""
    graph = cybershake()
    assert graph.number_of_nodes() == 8039
    table = {name: (count, runtime, cores) for name, count, runtime, cores in CYBERSHAKE_MODULES}

    def module(node: str) -> str:
        return node if node in table else node.rstrip("0123456789")

    assert Counter(module(node) for node in graph) == {n: c for n, (c, _, _) in table.items()}
    for node in graph:
        _, runtime, cores = table[module(node)]
        task = task_of(graph, node)
        assert (task.runtime_s, task.cores) == (runtime, cores)
    assert nx.dag_longest_path_length(graph) == 4  # five levels
    assert set(graph.predecessors("synthSGT4016")) == {"pmvl_chk1", "pmvl_chk2"}
    assert list(graph.successors("synthSGT4016")) == ["peakValCal4016"]
    assert set(graph.predecessors("pmvl_chk1")) == {"preSGT", "fd_grid_cvm"}


def test_the_testbed_workflows_are_the_generators() -> None:
    """The test bed's cut of CyberShake and its layered workflow are the product's."""
    assert nx.utils.graphs_equal(bed.cybershake(40), cybershake(40))
    assert bed.cybershake(40).number_of_nodes() == 85
    made, again = bed.layered_workflow(3, tasks=30, levels=5), layered(3, tasks=30, levels=5)
    assert nx.utils.graphs_equal(made, again)
    assert [task_of(made, n) for n in made] == [task_of(again, n) for n in again]


def test_layered_workflow_has_the_thesis_shape() -> None:
    """100 tasks on 10 levels of 10, two parents each below the first, mean cores as asked
    (uniform in [1, 2m - 1]) and run times in [500, 1500] s."""
    graph = layered(7, mean_cores=22)
    assert graph.number_of_nodes() == 100
    assert nx.dag_longest_path_length(graph) == 9
    below = [n for n in graph if not n.startswith("L0")]
    assert all(graph.in_degree(n) == 2 for n in below)
    cores = [task_of(graph, n).cores for n in graph]
    assert min(cores) >= 1 and max(cores) <= 43 and 17 < sum(cores) / 100 < 27
    assert all(500 <= (task_of(graph, n).runtime_s or 0) <= 1500 for n in graph)


def test_var_scan_keeps_the_likeliest_submission_and_asks_for_the_lead() -> None:
    """A start wanted 240 min from now for 60 min (the thesis' Figure 36, left): the chance
    peaks when the lead is 130 min, so the scan submits at 110 min asking 190 min; earlier
    ties keep the earliest."""

    def probability(walltime: int, lead: int) -> float:
        assert walltime == 3600 + lead
        return 0.772 if lead == 130 * 60 else min(0.5, lead / 36000)

    submission, chance = scan_submission(probability, 3600, start_by=240 * 60, now=0)
    assert submission == Submission(110 * 60, 190 * 60) and chance == 0.772
    flat, chance = scan_submission(lambda w, lead: 0.3, 3600, start_by=600, now=0)
    assert flat == Submission(0, 3600 + 600) and chance == 0.3


def test_var_scan_without_any_chance_submits_now() -> None:
    submission, chance = scan_submission(lambda w, lead: 0.0, 600, start_by=1000, now=100)
    assert submission == Submission(100, 1500) and chance == 0.0
    with pytest.raises(ValueError, match="step"):
        scan_submission(lambda w, lead: 0.0, 600, start_by=1000, now=100, step=0)
