"""Workflows the thesis evaluates provisioning with, built to its stated parameters.

Singh's thesis (ch. 4.7, Figure 12) plans a synthetic layered workflow from "a parameterized
task graph generator": ``tasks`` tasks on ``levels`` levels, run times around 1,000 s, each
task below the first level with two parents on the level above (ch. 4.9), the mean cores per
task chosen per site. Ch. 4.8 (Figure 17, Table 2) plans a real one, the seismic hazard
analysis CyberShake: 8,039 tasks on five levels, two of them 288-core runs of a day each. Both
are built here as the graphs every planner takes (:mod:`siteagent.client.tasks`).
"""

from __future__ import annotations

import random
from typing import List, Sequence, Tuple

from siteagent.client.tasks import Task, TaskGraph, task_graph

#: CyberShake's modules (thesis Table 2): tasks, mean run time (s), processors.
CYBERSHAKE_MODULES: Tuple[Tuple[str, int, int, int], ...] = (
    ("fd_grid_xyz", 1, 1, 1),
    ("preSGT", 1, 300, 1),
    ("fd_grid_cvm", 1, 2100, 288),
    ("pmvl_chk1", 1, 86400, 288),
    ("pmvl_chk2", 1, 86400, 288),
    ("synthSGT", 4017, 519, 1),
    ("peakValCal", 4017, 1, 1),
)
#: The sites (rupture variations) of the thesis' run: one synthSGT and one peakValCal each.
CYBERSHAKE_SITES = 4017


def layered(
    seed: int,
    tasks: int = 100,
    levels: int = 10,
    mean_runtime: int = 1000,
    mean_cores: int = 6,
    mean_bytes: int = 10**9,
) -> TaskGraph:
    """The thesis' synthetic workflow: ``tasks`` tasks over ``levels`` levels (as even as
    they divide), run times uniform in [mean/2, 3·mean/2] s, cores uniform in
    [1, 2·mean_cores − 1], each task below the first level reading about ``mean_bytes`` from
    each of two parents on the level above. ``seed`` fixes the instance."""
    rng = random.Random(seed)
    per_level = [tasks // levels + (1 if k < tasks % levels else 0) for k in range(levels)]
    entries = []
    above: List[str] = []
    for level, count in enumerate(per_level):
        here = [f"L{level}T{k}" for k in range(count)]
        for name in here:
            parents = rng.sample(above, min(2, len(above)))
            size = rng.randint(mean_bytes // 2, mean_bytes * 3 // 2)
            task = Task(
                name,
                cores=rng.randint(1, 2 * mean_cores - 1),
                runtime_s=float(rng.randint(mean_runtime // 2, mean_runtime * 3 // 2)),
                inputs={f"{p}.out": size for p in parents},
                outputs={f"{name}.out": size},
            )
            entries.append((task, parents))
        above = here
    return task_graph(entries, "layered workflow")


def cybershake(
    sites: int = CYBERSHAKE_SITES, runtime_scale: float = 1.0, output_bytes: int = 10**9
) -> TaskGraph:
    """CyberShake as the thesis ran it (Table 2, Figure 17): fd_grid_xyz feeds preSGT and
    fd_grid_cvm, which both feed the two 288-core strain Green tensor runs pmvl_chk1 and
    pmvl_chk2; every synthSGT reads both tensors, and each peakValCal reads its synthSGT.
    With the default ``sites`` that is the thesis' 8,039 tasks; fewer make a cut of it.
    ``runtime_scale`` stretches every run time; each task writes ``output_bytes``."""
    if sites < 1:
        raise ValueError(f"CyberShake needs at least one site, got {sites}")
    modules = {name: (runtime, cores) for name, _, runtime, cores in CYBERSHAKE_MODULES}

    def task(name: str, module: str, reads: Sequence[str]) -> Tuple[Task, List[str]]:
        runtime, cores = modules[module]
        made = Task(
            name,
            cores,
            runtime_s=runtime * runtime_scale,
            inputs={f"{r}.out": output_bytes for r in reads},
            outputs={f"{name}.out": output_bytes},
        )
        return made, list(reads)

    entries = [
        task("fd_grid_xyz", "fd_grid_xyz", []),
        task("preSGT", "preSGT", ["fd_grid_xyz"]),
        task("fd_grid_cvm", "fd_grid_cvm", ["fd_grid_xyz"]),
        task("pmvl_chk1", "pmvl_chk1", ["preSGT", "fd_grid_cvm"]),
        task("pmvl_chk2", "pmvl_chk2", ["preSGT", "fd_grid_cvm"]),
    ]
    for k in range(sites):
        entries.append(task(f"synthSGT{k}", "synthSGT", ["pmvl_chk1", "pmvl_chk2"]))
        entries.append(task(f"peakValCal{k}", "peakValCal", [f"synthSGT{k}"]))
    return task_graph(entries, "cybershake")
