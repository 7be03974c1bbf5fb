"""Workflows to provision: WfFormat instances, hand-written YAML DAGs, and ensembles of both.

An ensemble (several workflows provisioned together) is merged into one graph under a
structural entry and exit task, as the thesis combines DAGs (ch. 4.9); each member's task ids
are prefixed with its name and ``/``, so that members may reuse ids.

A YAML file (read with ``yaml.safe_load``; unknown keys are errors naming the key and the
file) holds one workflow, ``tasks: [...]``, or an ensemble, ``workflows: [...]`` of members
``{name, tasks}`` or ``{name, wfformat: FILE}`` (relative to the YAML file)::

    workflows:
      - name: prep
        tasks:
          - {id: split, cores: 1, runtime: 60, outputs: {chunks.tar: 2000000000}}
          - {id: fit, cores: 16, work: 7.2e6, parents: [split], inputs: {chunks.tar: 2000000000},
             requirements: {architecture: x86_64}}
      - {name: sky, wfformat: montage.json}

``runtime`` is in seconds, ``work`` in millions of cycles per core (run time = work / the
site's ``cpu_speed_mhz``), file sizes in bytes; ``requirements`` takes ``architecture``,
``os``, ``min_cpu_speed_mhz`` and ``min_memory_per_core_mb``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import AbstractSet, Any, Dict, List, Mapping, Sequence, Tuple

import yaml

from siteagent.client.tasks import Requirements, Task, TaskGraph, WorkflowError, task_graph
from siteagent.client.wfformat import read_wfformat

#: The ids of the structural tasks an ensemble is merged under.
ENTRY, EXIT = "entry", "exit"

TASK_KEYS = {"id", "cores", "runtime", "work", "parents", "inputs", "outputs", "requirements"}
_REQUIREMENT_KEYS = {"architecture", "os", "min_cpu_speed_mhz", "min_memory_per_core_mb"}


def load_workflow(path: Path) -> TaskGraph:
    """The workflow in ``path``: WfFormat JSON (``.json``) or this module's YAML."""
    if path.suffix.lower() == ".json":
        return read_wfformat(path)
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise WorkflowError(f"{path}: cannot read the workflow: {exc}") from None
    if not isinstance(document, dict):
        raise WorkflowError(f"{path}: expected tasks: or workflows: at the top")
    _known(document, {"tasks", "workflows"}, str(path))
    if ("tasks" in document) == ("workflows" in document):
        raise WorkflowError(f"{path}: give either tasks: (one workflow) or workflows:")
    if "tasks" in document:
        return yaml_graph(document["tasks"], str(path))
    return ensemble(_members(document["workflows"], path))


def yaml_graph(tasks: Any, where: str) -> TaskGraph:
    """One workflow from its YAML task list."""
    if not isinstance(tasks, list) or not tasks:
        raise WorkflowError(f"{where}: tasks must be a non-empty list")
    return task_graph((_yaml_task(raw, where) for raw in tasks), where)


def ensemble(members: Sequence[Tuple[str, TaskGraph]]) -> TaskGraph:
    """The members as one graph: ids prefixed ``name/``, every member's first tasks children
    of a structural ``entry``, its last tasks parents of a structural ``exit``."""
    names = [name for name, _ in members]
    if not members or len(set(names)) != len(names) or any("/" in n or not n for n in names):
        raise WorkflowError(f"an ensemble needs distinct member names without '/': {names}")
    merged = TaskGraph()
    merged.add_node(ENTRY, task=Task(ENTRY, cores=0))
    merged.add_node(EXIT, task=Task(EXIT, cores=0))
    for name, graph in members:
        ids = {node: f"{name}/{node}" for node in graph.nodes}
        for node, data in graph.nodes(data=True):
            task: Task = data["task"]
            merged.add_node(ids[node], task=dataclasses.replace(task, id=ids[node]))
            if graph.in_degree(node) == 0:
                merged.add_edge(ENTRY, ids[node], bytes=0)
            if graph.out_degree(node) == 0:
                merged.add_edge(ids[node], EXIT, bytes=0)
        for parent, child, data in graph.edges(data=True):
            merged.add_edge(ids[parent], ids[child], bytes=data["bytes"])
    return merged


def _members(raw: Any, path: Path) -> List[Tuple[str, TaskGraph]]:
    if not isinstance(raw, list) or not raw:
        raise WorkflowError(f"{path}: workflows must be a non-empty list")
    members = []
    for entry in raw:
        if not isinstance(entry, dict):
            raise WorkflowError(f"{path}: each workflow must be a mapping")
        _known(entry, {"name", "tasks", "wfformat"}, f"{path}: a workflow")
        name = entry.get("name")
        if not isinstance(name, str):
            raise WorkflowError(f"{path}: each workflow needs a name")
        if ("tasks" in entry) == ("wfformat" in entry):
            raise WorkflowError(f"{path}: workflow {name}: give either tasks: or wfformat:")
        if "tasks" in entry:
            members.append((name, yaml_graph(entry["tasks"], f"{path}: workflow {name}")))
        else:
            members.append((name, read_wfformat(path.parent / str(entry["wfformat"]))))
    return members


def _yaml_task(raw: Any, where: str) -> Tuple[Task, List[str]]:
    task = read_task(raw, where, TASK_KEYS)
    parents = raw.get("parents", [])
    if not isinstance(parents, list):
        raise WorkflowError(f"{where}: task {task.id}: parents must be a list of task ids")
    return task, [str(p) for p in parents]


def read_task(raw: Any, where: str, known: AbstractSet[str]) -> Task:
    """One task of a YAML list: its ``id``, ``cores``, ``runtime`` or ``work``, files and
    ``requirements``; any key outside ``known`` is an error (a bag of tasks knows no parents
    nor files, and adds keys of its own, which the caller reads)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), (str, int)):
        raise WorkflowError(f"{where}: each task is a mapping with an id")
    task_id = str(raw["id"])
    here = f"{where}: task {task_id}"
    _known(raw, known, here)
    requirements = raw.get("requirements", {})
    if not isinstance(requirements, dict):
        raise WorkflowError(f"{here}: requirements must be a mapping")
    _known(requirements, _REQUIREMENT_KEYS, f"{here}: requirements")
    fields = {
        "cores": number(raw, "cores", here, int, required=True),
        "runtime_s": number(raw, "runtime", here, float),
        "work_mcycles": number(raw, "work", here, float),
        "inputs": _sizes(raw.get("inputs", {}), f"{here}: inputs"),
        "outputs": _sizes(raw.get("outputs", {}), f"{here}: outputs"),
        "requirements": Requirements(
            architecture=_text(requirements, "architecture", here),
            os=_text(requirements, "os", here),
            min_cpu_speed_mhz=number(requirements, "min_cpu_speed_mhz", here, int),
            min_memory_per_core_mb=number(requirements, "min_memory_per_core_mb", here, int),
        ),
    }
    try:
        return Task(task_id, **fields)
    except WorkflowError as exc:  # the task's own checks, told with the file
        raise WorkflowError(f"{where}: {exc}") from None


def number(raw: Mapping[str, Any], key: str, where: str, kind: Any, required: bool = False) -> Any:
    """A non-negative number (``kind`` int takes whole numbers only; a YAML ``7.2e6`` is
    text to PyYAML, so numbers written as text are read too)."""
    if key not in raw:
        if required:
            raise WorkflowError(f"{where}: {key} is required")
        return None
    value = raw[key]
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise WorkflowError(f"{where}: {key} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise WorkflowError(f"{where}: {key} must be a number >= 0")
    if kind is int:
        if value != int(value):
            raise WorkflowError(f"{where}: {key} must be a whole number")
        return int(value)
    return float(value)


def _sizes(raw: Any, where: str) -> Dict[str, int]:
    if not isinstance(raw, dict):
        raise WorkflowError(f"{where}: give file names and their sizes in bytes")
    return {str(name): number(raw, name, where, int, required=True) for name in raw}


def _text(raw: Mapping[str, Any], key: str, where: str) -> Any:
    value = raw.get(key)
    if value is not None and not isinstance(value, str):
        raise WorkflowError(f"{where}: {key} must be text")
    return value


def _known(raw: Mapping[str, Any], keys: Any, where: str) -> None:
    unknown = sorted(set(raw) - set(keys))
    if unknown:
        raise WorkflowError(f"{where}: unknown key {unknown[0]} (known: {', '.join(sorted(keys))})")
