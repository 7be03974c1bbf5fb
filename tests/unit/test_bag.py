"""The bag-of-tasks format of ``siteagent-client select``: the workflow's task fields, no
dependencies, ``count`` for many equal tasks."""

from __future__ import annotations

from pathlib import Path

import pytest

from siteagent.client.bag import MAX_TASKS, bag_tasks, load_bag
from siteagent.client.tasks import Requirements, Task, WorkflowError


def test_a_bag_counts_out_its_tasks_in_the_files_order(tmp_path: Path) -> None:
    path = tmp_path / "bag.yaml"
    path.write_text(
        "tasks:\n"
        "  - {id: render, cores: 4, runtime: 1800, count: 3}\n"
        "  - {id: fit, cores: 16, work: 7.2e6, requirements: {architecture: x86_64}}\n"
        "  - {id: 7, cores: 1, runtime: 60, count: 1}\n",
        encoding="utf-8",
    )
    assert load_bag(path) == [
        Task("render/1", 4, runtime_s=1800.0),
        Task("render/2", 4, runtime_s=1800.0),
        Task("render/3", 4, runtime_s=1800.0),
        Task("fit", 16, work_mcycles=7.2e6, requirements=Requirements(architecture="x86_64")),
        Task("7", 1, runtime_s=60.0),
    ]


@pytest.mark.parametrize(
    ("tasks", "message"),
    [
        ([{"id": "a", "cores": 1, "runtime": 1, "parents": ["b"]}], "unknown key parents"),
        ([{"id": "a", "cores": 1, "runtime": 1, "outputs": {"f": 1}}], "unknown key outputs"),
        ([{"id": "a", "cores": 0, "runtime": 1}], "task a: cores must be at least 1"),
        ([{"id": "a", "cores": 1}], "task a: give its runtime or its work"),
        ([{"id": "a", "cores": 1, "runtime": 1, "count": 0}], "task a: count must be at least 1"),
        ([{"id": "a", "cores": 1, "runtime": 1, "count": 2.5}], "count must be a whole number"),
        (
            [{"id": "a", "cores": 1, "runtime": 1, "count": MAX_TASKS + 1}],
            f"the bag at most {MAX_TASKS:,} tasks",
        ),
        (
            [
                {"id": "a", "cores": 1, "runtime": 1, "count": 2},
                {"id": "a/2", "cores": 1, "runtime": 1},
            ],
            "task a/2 is given twice",
        ),
        ([], "tasks must be a non-empty list"),
    ],
)
def test_a_bag_that_is_wrong_says_which_task_and_what(tasks: object, message: str) -> None:
    with pytest.raises(WorkflowError, match=r"^bag\.yaml: ") as raised:
        bag_tasks(tasks, "bag.yaml")
    assert message in str(raised.value)


def test_a_bag_file_holds_tasks_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "bag.yaml"
    path.write_text("tasks: [{id: a, cores: 1, runtime: 1}]\nworkflows: []\n", encoding="utf-8")
    with pytest.raises(WorkflowError, match="expected only tasks: at the top"):
        load_bag(path)
    with pytest.raises(WorkflowError, match="cannot read the bag of tasks"):
        load_bag(tmp_path / "missing.yaml")
