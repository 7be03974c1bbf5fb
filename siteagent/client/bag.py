"""A bag of tasks: independent tasks to place across sites (``siteagent-client select``).

Ha et al.'s resource selection (:mod:`.selection`) takes tasks that depend on nothing and
move no data, so a bag is a workflow's YAML without ``parents``, ``inputs`` and ``outputs``,
and with ``count`` for many equal tasks (a parameter sweep)::

    tasks:
      - {id: render, cores: 4, runtime: 1800, count: 50}
      - {id: fit, cores: 16, work: 7.2e6, requirements: {architecture: x86_64}}

Each task takes the workflow's fields (:mod:`.workflow`): ``id``, ``cores`` (at least one),
``runtime`` in seconds or ``work`` in millions of cycles per core, ``requirements``; and
``count`` (1 by default, at most :data:`MAX_TASKS` in all), which makes ``render/1`` ...
``render/50`` of ``render``. Ids must differ once counted out.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, List

import yaml

from siteagent.client.tasks import Task, WorkflowError
from siteagent.client.workflow import number, read_task

#: The most tasks a bag may count out: a typo in ``count`` must not fill the memory.
MAX_TASKS = 100_000

_KEYS = {"id", "cores", "runtime", "work", "requirements", "count"}


def load_bag(path: Path) -> List[Task]:
    """The tasks of the bag in ``path``, counted out, in the file's order."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise WorkflowError(f"{path}: cannot read the bag of tasks: {exc}") from None
    if not isinstance(document, dict) or set(document) != {"tasks"}:
        raise WorkflowError(f"{path}: expected only tasks: at the top")
    return bag_tasks(document["tasks"], str(path))


def bag_tasks(raw: Any, where: str) -> List[Task]:
    """The bag's tasks from its YAML task list; ``where`` names it in errors."""
    if not isinstance(raw, list) or not raw:
        raise WorkflowError(f"{where}: tasks must be a non-empty list")
    tasks: List[Task] = []
    for entry in raw:
        task = read_task(entry, where, _KEYS)
        here = f"{where}: task {task.id}"
        if task.structural:
            raise WorkflowError(f"{here}: cores must be at least 1")
        count = number(entry, "count", here, int)
        count = 1 if count is None else count
        if not 1 <= count <= MAX_TASKS - len(tasks):
            raise WorkflowError(
                f"{here}: count must be at least 1, and the bag at most {MAX_TASKS:,} tasks"
            )
        if count == 1:
            tasks.append(task)
        else:
            tasks += [dataclasses.replace(task, id=f"{task.id}/{k}") for k in range(1, count + 1)]
    seen = set()
    for task in tasks:
        if task.id in seen:
            raise WorkflowError(f"{where}: task {task.id} is given twice")
        seen.add(task.id)
    return tasks
