"""What a task asks of a site: cores, how long it runs there, what it needs, what it moves.

The planners compare sites by how long a task would run on each. A task gives either its run
time in seconds (the same everywhere) or its work in millions of cycles per core, which Ha et
al.'s cost model turns into a run time on any site from one published capability, the clock
rate: ``work / cpu_speed_mhz`` seconds (*Towards General Distributed Resource Selection*, eq. 2
with one consumable, cycles). A site that does not publish its clock rate cannot run a task
known only by its work: nobody can say for how long to reserve it.

A task of zero cores is structural: the entry and exit that merge an ensemble into one graph
(thesis ch. 4.9). It runs nowhere and takes no time.

Every planner takes one directed acyclic graph (networkx) whose nodes carry a :class:`Task`
(attribute ``task``) and whose edges carry the ``bytes`` the child reads of what its parent
writes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, List, Mapping, Optional, Tuple

import networkx as nx

from siteagent.core.errors import SiteagentError
from siteagent.protocol.errors import INVALID_WORKFLOW
from siteagent.protocol.models import SiteAttributes

if TYPE_CHECKING:
    TaskGraph = nx.DiGraph[str]
else:
    TaskGraph = nx.DiGraph


class WorkflowError(SiteagentError, ValueError):
    """A workflow that cannot be read or planned: says which file, task or field."""

    code = INVALID_WORKFLOW


@dataclass(frozen=True)
class Requirements:
    """What a site must advertise to run the task (Ha et al.'s viability, ClassAd-style):
    ``None`` is "don't care". A site that does not advertise an attribute a task names is not
    viable for it, as an agent refuses an RFQL request naming an attribute it lacks."""

    architecture: Optional[str] = None
    os: Optional[str] = None
    min_cpu_speed_mhz: Optional[int] = None
    min_memory_per_core_mb: Optional[int] = None

    def met_by(self, site: SiteAttributes) -> bool:
        return (
            _same(self.architecture, site.architecture)
            and _same(self.os, site.os)
            and _at_least(self.min_cpu_speed_mhz, site.cpu_speed_mhz)
            and _at_least(self.min_memory_per_core_mb, site.memory_per_core_mb)
        )


def _same(wanted: Optional[str], offered: Optional[str]) -> bool:
    return wanted is None or (offered is not None and wanted.lower() == offered.lower())


def _at_least(wanted: Optional[int], offered: Optional[int]) -> bool:
    return wanted is None or (offered is not None and offered >= wanted)


@dataclass(frozen=True)
class Task:
    """One task: ``runtime_s`` or ``work_mcycles`` (at least one unless it is structural),
    the files it reads and writes with their sizes in bytes, and its requirements."""

    id: str
    cores: int
    runtime_s: Optional[float] = None
    work_mcycles: Optional[float] = None
    inputs: Mapping[str, int] = field(default_factory=dict)
    outputs: Mapping[str, int] = field(default_factory=dict)
    requirements: Requirements = field(default_factory=Requirements)

    def __post_init__(self) -> None:
        if self.cores < 0:
            raise WorkflowError(f"task {self.id}: cores must not be negative")
        for value in (self.runtime_s, self.work_mcycles):
            if value is not None and not (value >= 0 and math.isfinite(value)):
                raise WorkflowError(f"task {self.id}: run time and work must be >= 0")
        if self.cores and self.runtime_s is None and self.work_mcycles is None:
            raise WorkflowError(f"task {self.id}: give its runtime or its work")

    @property
    def structural(self) -> bool:
        """The entry or exit of an ensemble: runs nowhere, takes no time."""
        return self.cores == 0

    def run_time(self, site: SiteAttributes) -> Optional[float]:
        """Seconds the task runs on ``site``; None if the site cannot say (no clock rate for a
        task known by its work) or cannot run it (requirements not met)."""
        if self.structural:
            return 0.0
        if not self.requirements.met_by(site):
            return None
        if self.runtime_s is not None:
            return self.runtime_s
        if site.cpu_speed_mhz is None or site.cpu_speed_mhz <= 0 or self.work_mcycles is None:
            return None
        return self.work_mcycles / site.cpu_speed_mhz

    def why_not(self) -> str:
        """Why a site may be unable to run the task: what it must advertise."""
        asked = {
            "architecture": self.requirements.architecture,
            "os": self.requirements.os,
            "cpu_speed_mhz >=": self.requirements.min_cpu_speed_mhz,
            "memory_per_core_mb >=": self.requirements.min_memory_per_core_mb,
        }
        needs = [f"{what} {value}" for what, value in asked.items() if value is not None]
        if self.runtime_s is None:
            needs.append("its cpu_speed_mhz (the task is given by its work)")
        return ", ".join(needs) or "nothing"

    def walltime(self, site: SiteAttributes) -> Optional[int]:
        """Whole seconds to reserve on ``site`` (at least one), or None as :meth:`run_time`."""
        seconds = self.run_time(site)
        return None if seconds is None else max(1, math.ceil(seconds))


def task_graph(entries: Iterable[Tuple[Task, List[str]]], where: str) -> TaskGraph:
    """The graph of tasks, each given with the ids of its parents; ``where`` names the source
    in errors (unknown parents, a task given twice, a cycle)."""
    graph = TaskGraph()
    parents = {}
    for task, names in entries:
        if task.id in graph:
            raise WorkflowError(f"{where}: task {task.id} is given twice")
        graph.add_node(task.id, task=task)
        parents[task.id] = names
    for child, names in parents.items():
        for parent in names:
            if parent not in graph:
                raise WorkflowError(f"{where}: task {child} names an unknown parent {parent}")
            graph.add_edge(parent, child, bytes=_shared_bytes(graph, parent, child))
    if not nx.is_directed_acyclic_graph(graph):
        cycle = " -> ".join(str(u) for u, _ in nx.find_cycle(graph))
        raise WorkflowError(f"{where}: the tasks depend on each other in a circle: {cycle}")
    return graph


def task_of(graph: TaskGraph, node: str) -> Task:
    task: Task = graph.nodes[node]["task"]
    return task


def edge_bytes(graph: TaskGraph, parent: str, child: str) -> int:
    """The bytes ``child`` reads of what ``parent`` writes."""
    size: int = graph.edges[parent, child]["bytes"]
    return size


def _shared_bytes(graph: TaskGraph, parent: str, child: str) -> int:
    """The bytes of the files ``parent`` writes and ``child`` reads."""
    written = task_of(graph, parent).outputs
    return sum(size for name, size in task_of(graph, child).inputs.items() if name in written)
