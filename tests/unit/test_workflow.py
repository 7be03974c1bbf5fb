"""Workflows in the field's format: WfFormat instances, hand-written YAML DAGs, ensembles."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import pytest

from siteagent.client.tasks import Requirements, Task, WorkflowError, edge_bytes, task_of
from siteagent.client.wfformat import read_wfformat, wfformat_graph
from siteagent.client.workflow import ENTRY, EXIT, ensemble, load_workflow, yaml_graph
from testbed.inprocess.provisioning import attributes, montage_instance


def instance(version: str = "1.6") -> Dict[str, Any]:
    """split -> (fit, plot) -> merge; fit reads what split writes, plot reads nothing of it."""
    spec = [
        {"id": "split", "name": "split", "parents": [], "children": ["fit", "plot"],
         "inputFiles": ["in.dat"], "outputFiles": ["a.part", "b.part"]},
        {"id": "fit", "name": "fit", "parents": ["split"], "children": ["merge"],
         "inputFiles": ["a.part", "b.part"], "outputFiles": ["fit.out"]},
        {"id": "plot", "name": "plot", "parents": ["split"], "children": ["merge"],
         "inputFiles": ["style.cfg"], "outputFiles": ["plot.png"]},
        {"id": "merge", "name": "merge", "parents": ["fit", "plot"], "children": [],
         "inputFiles": ["fit.out", "plot.png"], "outputFiles": []},
    ]  # fmt: skip
    files = {"in.dat": 10, "a.part": 300, "b.part": 700, "style.cfg": 5, "fit.out": 40,
             "plot.png": 60}  # fmt: skip
    runs = [
        {"id": "split", "runtimeInSeconds": 12.5, "coreCount": 1},
        {"id": "fit", "runtimeInSeconds": 600, "coreCount": 7.5},
        {"id": "plot", "runtimeInSeconds": 30},
        {"id": "merge", "runtimeInSeconds": 3, "coreCount": 2},
    ]
    return {
        "name": "toy",
        "schemaVersion": version,
        "workflow": {
            "specification": {
                "tasks": spec,
                "files": [{"id": k, "sizeInBytes": v} for k, v in files.items()],
            },
            "execution": {"makespanInSeconds": 650, "executedAt": "2026-01-01T00:00:00Z",
                          "tasks": runs},
        },
    }  # fmt: skip


def test_a_wfformat_instance_becomes_a_graph_of_tasks_with_the_bytes_they_move() -> None:
    graph = wfformat_graph(instance(), "toy.json")
    assert sorted(graph.edges) == [
        ("fit", "merge"), ("plot", "merge"), ("split", "fit"), ("split", "plot")
    ]  # fmt: skip
    assert edge_bytes(graph, "split", "fit") == 1000  # a.part + b.part
    assert edge_bytes(graph, "split", "plot") == 0  # plot reads none of split's files
    assert edge_bytes(graph, "fit", "merge") == 40
    fit = task_of(graph, "fit")
    assert fit.cores == 8  # 7.5 cores asked: 8 reserved
    assert fit.runtime_s == 600.0 and fit.inputs == {"a.part": 300, "b.part": 700}
    assert task_of(graph, "plot").cores == 1  # no coreCount: one core
    assert wfformat_graph(instance("1.5"), "old.json").number_of_nodes() == 4


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(schemaVersion="1.4"), "migrate it with WfFormat's"),
        (lambda d: d["workflow"]["specification"]["tasks"][1]["parents"].append("nope"),
         "unknown parent nope"),
        (lambda d: d["workflow"]["specification"]["tasks"][0]["parents"].append("merge"),
         "in a circle"),
        (lambda d: d["workflow"]["execution"]["tasks"].pop(), "task merge has no runtimeInSeconds"),
        (lambda d: d["workflow"]["execution"]["tasks"][0].update(coreCount=0.5),
         "coreCount must be at least 1"),
        (lambda d: d["workflow"]["specification"]["files"][0].update(sizeInBytes="10"),
         "sizeInBytes has the wrong type"),
    ],
)  # fmt: skip
def test_an_instance_that_cannot_be_planned_is_refused_naming_why(
    change: Any, message: str
) -> None:
    document = instance()
    change(document)
    with pytest.raises(WorkflowError, match=message):
        wfformat_graph(document, "toy.json")


def test_the_reader_agrees_with_wfcommons_on_a_generated_montage(tmp_path: Path) -> None:
    """WfCommons' WfChef recipe builds a Montage workflow in memory and writes it as
    WfFormat; reading the file back gives the same tasks, dependencies, run times, cores and
    the sizes of the files each child reads from its parents."""
    from wfcommons import WorkflowGenerator
    from wfcommons.wfchef.recipes import MontageRecipe

    generated = WorkflowGenerator(MontageRecipe.from_num_tasks(60)).build_workflow()
    path = tmp_path / "montage.json"
    generated.write_json(path)
    graph = read_wfformat(path)
    assert set(graph.nodes) == set(generated.nodes)
    assert set(graph.edges) == set(generated.edges)
    for node in generated.nodes:
        theirs = generated.nodes[node]["task"]
        ours = task_of(graph, node)
        assert ours.runtime_s == pytest.approx(theirs.runtime)
        assert ours.cores == max(1, int(theirs.cores or 1))
    for parent, child in generated.edges:
        written = {f.file_id for f in generated.nodes[parent]["task"].output_files}
        read = generated.nodes[child]["task"].input_files
        assert edge_bytes(graph, parent, child) == sum(f.size for f in read if f.file_id in written)
    assert sum(edge_bytes(graph, *e) for e in graph.edges) > 0


def test_a_yaml_workflow_with_work_and_requirements(tmp_path: Path) -> None:
    path = tmp_path / "wf.yaml"
    path.write_text(
        "tasks:\n"
        "  - {id: split, cores: 1, runtime: 60, outputs: {chunks.tar: 2000000000}}\n"
        "  - {id: fit, cores: 16, work: 7.2e6, parents: [split],\n"
        "     inputs: {chunks.tar: 2000000000}, requirements: {architecture: aarch64}}\n"
    )
    graph = load_workflow(path)
    assert edge_bytes(graph, "split", "fit") == 2_000_000_000
    fit = task_of(graph, "fit")
    assert fit.work_mcycles == 7.2e6  # PyYAML reads 7.2e6 as text: read as a number
    assert fit.requirements == Requirements(architecture="aarch64")
    arm = attributes("arm", cpu_speed_mhz=2000, architecture="aarch64")
    assert fit.run_time(arm) == 3600.0
    assert fit.walltime(attributes("x86", cpu_speed_mhz=2000)) is None  # not viable
    assert fit.run_time(attributes("arm2", architecture="aarch64")) is None  # no clock rate


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tasks: [{id: a, cores: 1, runtime: 5, colour: red}]", "unknown key colour"),
        ("tasks: [{id: a, cores: 2}]", "give its runtime or its work"),
        ("tasks: [{id: a, cores: 1.5, runtime: 5}]", "cores must be a whole number"),
        ("tasks: [{id: a, cores: 1, runtime: -5}]", "runtime must be a number >= 0"),
        ("tasks: [{id: a, cores: 1, runtime: 5, parents: [b]}]", "unknown parent b"),
        ("workflows: [{name: x, tasks: [], wfformat: y.json}]", "either tasks: or wfformat:"),
        ("jobs: []", "unknown key jobs"),
    ],
)
def test_yaml_mistakes_name_the_file_and_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(WorkflowError, match=message) as caught:
        load_workflow(path)
    assert str(path) in str(caught.value)


def test_an_ensemble_merges_its_members_under_one_entry_and_exit(tmp_path: Path) -> None:
    (tmp_path / "toy.json").write_text(json.dumps(instance()))
    path = tmp_path / "ensemble.yaml"
    path.write_text(
        "workflows:\n"
        "  - name: pre\n"
        "    tasks: [{id: a, cores: 1, runtime: 5}, {id: b, cores: 1, runtime: 5, parents: [a]}]\n"
        "  - {name: toy, wfformat: toy.json}\n"
    )
    graph = load_workflow(path)
    assert set(graph.successors(ENTRY)) == {"pre/a", "toy/split"}
    assert set(graph.predecessors(EXIT)) == {"pre/b", "toy/merge"}
    assert edge_bytes(graph, "toy/split", "toy/fit") == 1000
    assert task_of(graph, ENTRY).structural and task_of(graph, EXIT).structural
    assert task_of(graph, "toy/fit").cores == 8
    with pytest.raises(WorkflowError, match="distinct member names"):
        ensemble([("x", yaml_graph([{"id": "a", "cores": 1, "runtime": 1}], "m")),
                  ("x", yaml_graph([{"id": "a", "cores": 1, "runtime": 1}], "m"))])  # fmt: skip


def test_synthetic_montage_instances_come_from_wfcommons(tmp_path: Path) -> None:
    graph = read_wfformat(montage_instance(tmp_path, 60))
    assert graph.number_of_nodes() >= 50
    assert all(isinstance(task_of(graph, n), Task) for n in graph.nodes)
