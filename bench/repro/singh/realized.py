"""Beyond the thesis: a workflow provisioned on the real Slurm test cluster, the makespan Slurm
realizes beside the planned one, and best effort's on the same background queue.

Two throw-away clusters of the test bed (testbed/slurm: real slurmctld and slurmd, 4 nodes of
16 cores) start with the same background queue of sleep jobs, each sleeping its whole limit
(exact estimates, as the thesis assumes). On the first, an agent (``siteagent serve``, Slurm
backend) runs and ``siteagent-client provision`` reserves every task (greedy, α = 0.5); each
task is then submitted as its user would, ``sbatch --reservation=NAME`` with the name
``siteagent-client reservations show --json`` gives. On the second, the same tasks are
submitted at the same instant, each with ``--dependency=afterok`` on its parents: best effort
as Slurm offers it. Every task's job writes when it started and ended (its own clock);
makespans count from the submission instant, ``LEAD_S`` after the background queue's.

A task sleeps its runtime less ``SLACK_S``: it starts at the first scheduling pass after its
window opens, and Slurm ends a job at its reservation's end (``ResvOverRun=0``). Slurm limits
are whole minutes, so are the tasks' runtimes.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Sequence, Tuple

import yaml

from bench.provision import CLIENT
from testbed.inprocess.buyer_files import sites_file
from testbed.slurm.cluster import SlurmTestCluster, missing_binaries
from testbed.slurm.site import SlurmSite

#: A task: (id, cores, parents).
Task = Tuple[str, int, Tuple[str, ...]]
#: How much shorter than its window a task's job sleeps (see above).
SLACK_S = 10
#: Seconds from the background queue's submission to the workflow's (the agent starts within).
LEAD_S = 30
#: (cores, minutes) of the background: jobs that start at once, then jobs that queue.
Background = Tuple[Sequence[Tuple[int, int]], Sequence[Tuple[int, int]]]


@dataclass(frozen=True)
class Experiment:
    """The workflow (every task running ``runtime_s``, whole minutes) and the background."""

    tasks: Sequence[Task]
    background: Background
    runtime_s: int


QUICK = Experiment(
    (("a", 16, ()), ("b", 8, ("a",)), ("c", 32, ("a",))),
    (((48, 1), (8, 1)), ((64, 1),)),
    runtime_s=60,
)
FULL = Experiment(
    (
        ("a1", 16, ()),
        ("a2", 8, ()),
        ("b1", 32, ("a1", "a2")),
        ("b2", 16, ("a1",)),
        ("b3", 8, ("a2",)),
        ("c1", 48, ("b1", "b2")),
        ("c2", 16, ("b2", "b3")),
        ("d1", 8, ("c1", "c2")),
    ),
    (((32, 3), (16, 2), (8, 4)), ((64, 2), (24, 3), (48, 2), (16, 5), (64, 1))),
    runtime_s=120,
)


def unavailable() -> str:
    """Why the clusters cannot start here ("" if they can)."""
    if os.geteuid() != 0:
        return "the Slurm test cluster runs its daemons as root; this run is not root"
    missing = missing_binaries()
    return f"Slurm is not installed here (missing {', '.join(missing)})" if missing else ""


def run(work: Path, quick: bool) -> Dict[str, Any]:
    """Both arms side by side (each on its own cluster); their tasks' windows and runs."""
    experiment = QUICK if quick else FULL
    with ThreadPoolExecutor(max_workers=2) as pool:
        arms = {
            name: pool.submit(arm, work / name, experiment)
            for name, arm in (("provisioned", provisioned), ("best_effort", best_effort))
        }
        result = {name: future.result() for name, future in arms.items()}
    tasks = [list(task) for task in experiment.tasks]
    return {"tasks": tasks, "runtime_s": experiment.runtime_s, **result}


def provisioned(root: Path, experiment: Experiment) -> Dict[str, Any]:
    """Reserve the workflow through an agent on the cluster, then submit each task into its
    reservation."""
    with _cluster(root) as cluster:
        t0 = _background(cluster, experiment.background)
        site = SlurmSite(cluster, root)
        try:
            client = _client_env(root, site)
            workflow = _workflow_file(root / "workflow.yaml", experiment)
            _sleep_until(t0)
            done = _client(client, "provision", str(workflow), "--alpha", "0.5")
            plan = {row["task"]: row for row in done["tasks"]}
            jobs: Dict[str, str] = {}
            for task_id, size, _ in experiment.tasks:
                held = plan[task_id]["reservation"]
                name = _client(client, "reservations", "show", f"slurm1:{held}")["site"]["name"]
                jobs[task_id] = _submit(
                    cluster, experiment, task_id, size, [f"--reservation={name}"]
                )
            runs = _wait_for_runs(cluster, jobs)
        finally:
            site.service.stop()
    return {
        "t0": t0,
        "cost": done["cost"],
        "windows": {t: [row["start"], row["finish"]] for t, row in plan.items()},
        "runs": runs,
    }


def best_effort(root: Path, experiment: Experiment) -> Dict[str, Any]:
    """Submit every task at once, each held by ``--dependency=afterok`` until its parents end."""
    with _cluster(root) as cluster:
        t0 = _background(cluster, experiment.background)
        _sleep_until(t0)
        jobs: Dict[str, str] = {}
        for task_id, size, parents in experiment.tasks:
            held = [f"--dependency=afterok:{':'.join(jobs[p] for p in parents)}"]
            jobs[task_id] = _submit(cluster, experiment, task_id, size, held if parents else [])
        runs = _wait_for_runs(cluster, jobs)
    return {"t0": t0, "runs": runs}


@contextlib.contextmanager
def _cluster(root: Path) -> Iterator[SlurmTestCluster]:
    """A started cluster (stopped after) with a folder for the tasks' times."""
    root.mkdir(parents=True, exist_ok=True)
    with SlurmTestCluster(nodes=4, cpus_per_node=16) as cluster:
        (cluster.dir / "times").mkdir()
        yield cluster


def _background(cluster: SlurmTestCluster, background: Background) -> float:
    """Submit the background queue (each job sleeping its whole limit); the workflow's
    submission instant."""
    began = time.time()
    for cores, minutes in [*background[0], *background[1]]:
        cluster.submit(f"-n{cores}", "-t", str(minutes), wrap=f"sleep {60 * minutes}")
    return began + LEAD_S


def _sleep_until(instant: float) -> None:
    time.sleep(max(0.0, instant - time.time()))


def _submit(
    cluster: SlurmTestCluster, experiment: Experiment, task_id: str, cores: int, extra: List[str]
) -> str:
    times = f"{cluster.inner_dir}/times/{task_id}"
    sleep = experiment.runtime_s - SLACK_S
    wrap = f"date +%s.%N > {times}.start; sleep {sleep}; date +%s.%N > {times}.end"
    minutes = str(experiment.runtime_s // 60)
    return cluster.submit(*extra, f"-n{cores}", "-t", minutes, wrap=wrap)


def _wait_for_runs(
    cluster: SlurmTestCluster, jobs: Mapping[str, str], timeout_s: float = 1800
) -> Dict[str, List[float]]:
    """Each task's [start, end] as its job (``jobs``: task to job id) wrote them, once every
    one has ended; an error as soon as one is gone without ending (Slurm killed it, as at its
    reservation's end), or after ``timeout_s``."""
    times = cluster.dir / "times"
    deadline = time.monotonic() + timeout_s
    while not all((times / f"{t}.end").exists() for t in jobs):
        live = set(cluster.live_job_ids())
        killed = [
            t for t, job in jobs.items() if job not in live and not (times / f"{t}.end").exists()
        ]
        if killed or time.monotonic() > deadline:
            queue = cluster.run(["squeue"], check=False).stdout
            raise RuntimeError(
                f"tasks {killed} were ended before their sleep did\n{queue}"
                if killed
                else f"the workflow's jobs did not all end within {timeout_s:.0f} s:\n{queue}"
            )
        time.sleep(1.0)
    return {
        t: [float((times / f"{t}.{edge}").read_text()) for edge in ("start", "end")] for t in jobs
    }


def _client_env(root: Path, site: SlurmSite) -> Dict[str, str]:
    sites = sites_file(root, site.alice, [("slurm1", site.url, site.buyer.cert)])
    return {
        **os.environ,
        "SITEAGENT_CLIENT_SITES": str(sites),
        "XDG_STATE_HOME": str(root / "client-state"),
    }


def _client(env: Mapping[str, str], *args: str) -> Dict[str, Any]:
    """``siteagent-client ARGS --json``'s answer."""
    done = subprocess.run(
        [str(CLIENT), *args, "--json"],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"siteagent-client {' '.join(args)} exited {done.returncode}: {done.stderr}"
        )
    answer: Dict[str, Any] = json.loads(done.stdout)
    return answer


def _workflow_file(path: Path, experiment: Experiment) -> Path:
    """The workflow as ``siteagent-client provision`` reads it (docs/client.md): tiny outputs,
    so that the plan is the schedule's, not the network's."""
    document = [
        {
            "id": task_id,
            "cores": size,
            "runtime": experiment.runtime_s,
            "outputs": {f"{task_id}.out": 1000},
            **({"parents": list(parents)} if parents else {}),
            **({"inputs": {f"{p}.out": 1000 for p in parents}} if parents else {}),
        }
        for task_id, size, parents in experiment.tasks
    ]
    path.write_text(yaml.safe_dump({"tasks": document}), encoding="utf-8")
    return path


def summary(result: Mapping[str, Any]) -> Dict[str, Any]:
    """Makespans (s from the submission instant) and how the runs kept their windows."""
    mine, theirs = result["provisioned"], result["best_effort"]
    windows = mine["windows"]
    late = [mine["runs"][t][0] - windows[t][0] for t in windows]
    early_end = [windows[t][1] - mine["runs"][t][1] for t in windows]
    planned = max(end for _, end in windows.values()) - mine["t0"]
    realized = max(end for _, end in mine["runs"].values()) - mine["t0"]
    best = max(end for _, end in theirs["runs"].values()) - theirs["t0"]
    return {
        "planned_makespan_s": planned,
        "realized_makespan_s": realized,
        "best_effort_makespan_s": best,
        "realized_over_planned": realized / planned,
        "realized_over_best_effort": realized / best,
        "start_after_window_s": {"median": statistics.median(late), "max": max(late)},
        "ended_inside_window": sum(1 for margin in early_end if margin >= 0),
        "tasks": len(windows),
        "cost": mine["cost"],
    }
