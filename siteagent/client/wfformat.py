"""WfCommons instances (WfFormat JSON, schema 1.5 and 1.6) read into a task graph.

WfFormat is the field's exchange format for workflows (https://github.com/wfcommons/WfFormat):
``workflow.specification`` holds the tasks (``id``, ``name``, ``parents``, ``inputFiles``,
``outputFiles``) and the files (``id``, ``sizeInBytes``); ``workflow.execution.tasks`` holds
what a run measured of each (``runtimeInSeconds``, ``coreCount``, possibly fractional). The
bytes on an edge are the sizes of the files the parent writes and the child reads.

Read here rather than with the ``wfcommons`` package, whose reader validates every instance
against the schema it downloads from GitHub at run time (unreachable from most login nodes),
costs seconds and a few hundred MB to import (pandas, scipy, matplotlib), and from 1.3 on
installs on Python 3.11 or later only. The tests check this reader against the graphs
``wfcommons``' own generators build. Instances of older schemas (1.4 and before, one flat task
list) are refused with a pointer to WfFormat's migration tool.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, List, Mapping

from siteagent.client.tasks import Task, TaskGraph, WorkflowError, task_graph

#: The schema versions read here: the specification/execution layout.
SCHEMA_VERSIONS = ("1.5", "1.6")


def read_wfformat(path: Path) -> TaskGraph:
    """The instance at ``path`` as a graph of :class:`Task` nodes (attribute ``task``) and
    edges carrying the ``bytes`` the child reads of what the parent writes."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise WorkflowError(f"{path}: cannot read a JSON instance: {exc}") from None
    return wfformat_graph(document, str(path))


def wfformat_graph(document: Any, where: str) -> TaskGraph:
    """An instance already parsed from JSON; ``where`` names it in errors."""
    version = _field(document, "schemaVersion", str, where)
    if version not in SCHEMA_VERSIONS:
        raise WorkflowError(
            f"{where}: WfFormat schema {version} is not read here (only "
            f"{', '.join(SCHEMA_VERSIONS)}); migrate it with WfFormat's "
            "tools/wfcommons-migrate-instance.py"
        )
    workflow = _field(document, "workflow", dict, where)
    specification = _field(workflow, "specification", dict, f"{where}: workflow")
    execution = workflow.get("execution") or {}
    if not isinstance(execution, dict):
        raise WorkflowError(f"{where}: workflow.execution must be an object")
    sizes = _file_sizes(specification.get("files", []), where)
    measured = _measured(execution.get("tasks", []), where)
    tasks = _field(specification, "tasks", list, f"{where}: workflow.specification")
    return task_graph(
        ((_task(raw, sizes, measured, where), _parents(raw, where)) for raw in tasks), where
    )


def _parents(raw: Any, where: str) -> List[str]:
    return [str(p) for p in _field(raw, "parents", list, f"{where}: task {raw.get('id')}")]


def _task(
    raw: Any, sizes: Mapping[str, int], measured: Mapping[str, Dict[str, Any]], where: str
) -> Task:
    if not isinstance(raw, dict):
        raise WorkflowError(f"{where}: a task must be an object")
    task_id = _field(raw, "id", str, f"{where}: a task")
    run = measured.get(task_id)
    if run is None:
        raise WorkflowError(
            f"{where}: task {task_id} has no runtimeInSeconds in workflow.execution "
            "(a specification without an execution cannot be planned)"
        )
    return Task(
        id=task_id,
        cores=max(1, math.ceil(run.get("coreCount", 1))),
        runtime_s=float(run["runtimeInSeconds"]),
        inputs={name: sizes.get(name, 0) for name in raw.get("inputFiles", [])},
        outputs={name: sizes.get(name, 0) for name in raw.get("outputFiles", [])},
    )


def _file_sizes(files: Any, where: str) -> Dict[str, int]:
    sizes: Dict[str, int] = {}
    for entry in files if isinstance(files, list) else []:
        name = _field(entry, "id", str, f"{where}: a file")
        size = _field(entry, "sizeInBytes", int, f"{where}: file {name}")
        if size < 0:
            raise WorkflowError(f"{where}: file {name} has a negative size")
        sizes[name] = size
    return sizes


def _measured(tasks: Any, where: str) -> Dict[str, Dict[str, Any]]:
    """The execution's figures by task id, checked where the planners rely on them."""
    runs: Dict[str, Dict[str, Any]] = {}
    for entry in tasks if isinstance(tasks, list) else []:
        task_id = _field(entry, "id", str, f"{where}: an executed task")
        runtime = _field(entry, "runtimeInSeconds", (int, float), f"{where}: {task_id}")
        cores = entry.get("coreCount", 1)
        if runtime < 0 or isinstance(cores, bool) or not isinstance(cores, (int, float)):
            raise WorkflowError(f"{where}: task {task_id}: runtime or coreCount is not usable")
        if cores < 1:
            raise WorkflowError(f"{where}: task {task_id}: coreCount must be at least 1")
        runs[task_id] = entry
    return runs


def _field(container: Any, key: str, kind: Any, where: str) -> Any:
    """``container[key]``, required, of type ``kind`` (booleans are not numbers)."""
    if not isinstance(container, dict) or key not in container:
        raise WorkflowError(f"{where}: {key} is required")
    value = container[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise WorkflowError(f"{where}: {key} has the wrong type")
    return value
