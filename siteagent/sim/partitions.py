"""Replaying on a topology machine: which machine and job shapes, and where each job ran.

``MachineSpec`` names a midplane machine (:mod:`siteagent.sim.topology`) and the paper's shape
choices (:mod:`siteagent.sim.shapes`); ``PartitionWriter`` writes, one JSON line per job as it
starts, the midplanes and links it holds, so that anyone can check that no two running jobs
share either (docs/design.md §4.9).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import IO

from siteagent.core.machine import Task
from siteagent.sim.shapes import Shaper
from siteagent.sim.swf import SwfJob
from siteagent.sim.topology import TopologyMachine, topology

#: How dimensions are named in the partitions file.
DIMENSIONS = ("x", "y", "z")


@dataclass(frozen=True)
class MachineSpec:
    """A topology machine by name (``bgl`` or ``torus3d``) and how jobs get their shapes:
    fattened with probability ``fat``, toroidal with probability ``torus``, both drawn by
    job and ``seed``; sizes first divided by ``divide`` (rounded up) and, with ``fat_sizes``,
    adjusted to the fat shape's volume (the paper's Fig. 8)."""

    name: str
    fat: float = 0.0
    torus: float = 0.0
    seed: int = 1
    fat_sizes: bool = False
    divide: int = 1

    def build(self, now: int = 0) -> TopologyMachine:
        shaper = Shaper(self.fat, self.torus, self.seed, self.fat_sizes, self.divide)
        return TopologyMachine(topology(self.name), now, shaper)

    def describe(self) -> str:
        extra = ", sizes as fat" if self.fat_sizes else ""
        divided = f", sizes / {self.divide}" if self.divide != 1 else ""
        return f"{self.name} (fat {self.fat:g}, torus {self.torus:g}{divided}{extra})"


class PartitionWriter:
    """An ``on_start`` callback writing each job's partition as one JSON object a line:
    ``job`` (the SWF job number), ``submit``, ``start``, ``end`` (start + time run), ``dims``
    (the box's extents x, y, z as placed), ``torus``, ``midplanes`` ([x, y, z] each) and
    ``links`` ([dimension, [the line's other two coordinates], from, to] each)."""

    def __init__(self, path: str, machine: TopologyMachine) -> None:
        self._file: IO[str] = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self._machine = machine

    def __call__(self, task: Task) -> None:
        machine = self._machine
        partition = machine.partition(task.key)
        assert task.start is not None
        record = {
            "job": task.payload.job if isinstance(task.payload, SwfJob) else task.key,
            "submit": task.submit,
            "start": task.start,
            "end": task.start + task.run,
            "dims": list(partition.dims) if partition is not None else None,
            "torus": machine.request_of(task).torus,
            "midplanes": [list(mp) for mp in partition.midplanes()] if partition else [],
            "links": [
                [DIMENSIONS[dim], list(line), a, b]
                for dim, line, a, b in partition.line_links(machine.topology)
            ]
            if partition
            else [],
        }
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._file.close()
