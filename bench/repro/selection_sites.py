"""The sites of ``repro-selection`` (Ha et al., paper 004): three HPC machines whose queues are
PWA traces replayed by the project's simulator, and an OSG-like pool of single-core slots.

The paper's XSEDE machines and their XDMoD wait histories are gone (docs/repro-selection.md §2), so
each HPC site replays a trace as its background load, the machines matched by size order
(Comet, the largest of the three, on the largest trace; SuperMIC, the smallest, on the
smallest that still holds a 1,024-core pilot): the traces the spec suggests (SDSC-BLUE, HPC2N,
CTC-SP2) have 128-1,152 cores and cannot hold the paper's 1,024-task pilots at all.

A workload is submitted at one instant ``t_sub`` of each trace (keyed by the seed). At that
instant a site shows what the paper's model and the project's ``select`` read: the waits of
the jobs that started in the 7 days before (as ``GET /v1/history/waits`` publishes them: core
and walltime bins, means and QBETS bounds), its queue length and its free cores. A pilot
submitted then waits as the replayed scheduler (EASY backfilling, the replay backend's
default) makes it wait behind the trace's own jobs. Each replay starts 9 days before ``t_sub``
so that the queue has built up (2 days of warm-up before the 7 days of history).
"""

from __future__ import annotations

import bisect
import functools
import json
import logging
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from bench.common import INSTALLS, TRACES
from bench.repro.seeds import uniform
from siteagent.core.engines import Policy
from siteagent.core.machine import Task
from siteagent.core.waits import QueueWait, wait_table
from siteagent.sim.simulator import Simulator
from siteagent.sim.workload import Workload

DAY = 86400
#: How far back the history the model reads goes (the paper's XDMoD window).
HISTORY_S = 7 * DAY
#: Replay before the history starts, so that the queue is full when it does.
WARM_UP_S = 2 * DAY
#: A pilot not started this long after its submission counts as never started.
GIVE_UP_S = 30 * DAY
#: Trace times are offsets from the first submit; waits are published in epoch seconds > 0.
EPOCH = 1_000_000_000
#: The replayed scheduler: EASY backfilling, as the replay backend runs its traces.
POLICY = Policy.EASY


@dataclass(frozen=True)
class HpcSite:
    """One XSEDE machine of the paper: its trace, cores per node (pilots are padded to whole
    nodes) and Table I's clocks (GHz)."""

    name: str
    trace: str
    cores_per_node: int
    base_ghz: float
    max_ghz: float
    avg_ghz: float


#: Table I's clocks; the traces matched by size order (see the module's docstring).
HPC_SITES = (
    HpcSite("Bridges", "RICC-2010-2.swf.gz", 28, 2.30, 3.30, 2.732),
    HpcSite("Comet", "LLNL-Atlas-2006-2.1-cln.swf.gz", 24, 2.50, 3.30, 2.888),
    HpcSite("SuperMIC", "LLNL-Thunder-2007-1.1-cln.swf.gz", 20, 2.80, 3.60, 3.589),
)
SITE_OF = {site.name: site for site in HPC_SITES}


Row = Tuple[int, int, int, int]  # submit, size, estimate, run


@dataclass(frozen=True)
class TraceJobs:
    """A trace as the simulator reads it: its cores, its jobs (submit, size, estimate, run)
    and how many lines it cannot replay (no processors, a negative run time)."""

    cores: int
    rows: Tuple[Row, ...]
    skipped: int


@functools.cache
def trace_jobs(trace: str) -> TraceJobs:
    """The trace, read once per process from a copy parsed once per machine (reading RICC's
    447,794 lines takes seconds, in every worker); the lines it cannot replay are counted,
    not warned of (every worker would warn again)."""
    source = TRACES / trace
    cached = INSTALLS / f"selection-{trace}-{source.stat().st_size}.npz"
    if not cached.exists():
        logging.getLogger("siteagent.sim.workload").setLevel(logging.ERROR)
        workload = Workload(str(source), skip_invalid=True)
        try:
            table = np.array(
                [(t.submit, t.size, t.estimate, t.run) for t in workload.tasks()], dtype=np.int64
            )
        finally:
            workload.close()
        INSTALLS.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.npz")
        np.savez(partial, rows=table, cores=workload.cores, skipped=workload.skipped_total)
        partial.replace(cached)
    with np.load(cached) as saved:
        rows = tuple(map(tuple, saved["rows"].tolist()))
        return TraceJobs(int(saved["cores"]), rows, int(saved["skipped"]))


def submission_time(site: str, seed: int) -> int:
    """The instant of ``site``'s trace the seed's workload is submitted at: uniform over the
    trace, leaving the warm-up and history before it and 10 days after it."""
    rows = trace_jobs(SITE_OF[site].trace).rows
    first, last = rows[0][0], rows[-1][0]
    low, high = first + WARM_UP_S + HISTORY_S, last - 10 * DAY
    return low + int(uniform("submission", site, seed) * (high - low))


@dataclass(frozen=True)
class Pilot:
    """A pilot job: ``cores`` for ``walltime_s`` asked, running ``run_s``."""

    cores: int
    walltime_s: int
    run_s: int


def replay(site: str, t_sub: int, pilots: Sequence[Pilot] = ()) -> Dict[str, Any]:
    """Replay ``site`` from 9 days before ``t_sub``: what it shows just before ``t_sub``
    (history, queue length, free cores), and the wait of each of ``pilots`` submitted alone
    at ``t_sub`` (None: not started within 30 days).

    The replay up to ``t_sub`` is shared: each pilot goes on from there in a forked copy of
    the simulator (a pilot sits in the arrivals at ``t_sub`` as a task whose size the copy
    sets), so that a dozen pilots cost one 9-day replay, not twelve."""
    jobs = trace_jobs(SITE_OF[site].trace)
    begin = bisect.bisect_left(jobs.rows, (t_sub - HISTORY_S - WARM_UP_S,))
    slot = Task("pilot", 1, 1, t_sub, 1)
    started: List[Task] = []
    simulator = Simulator(
        _tasks(jobs.rows, begin, slot), jobs.cores, POLICY, on_start=started.append
    )
    simulator.advance_to(t_sub - 1)
    shown: Dict[str, Any] = {
        "history": history(started, t_sub),
        "queued": len(simulator.queued),
        "free_cores": jobs.cores - sum(task.size for task in simulator.running),
        "cores": jobs.cores,
    }
    waits = []
    for pilot in pilots:

        def wait(pilot: Pilot = pilot) -> Optional[int]:
            slot.size, slot.estimate, slot.run = pilot.cores, pilot.walltime_s, pilot.run_s
            return _pilot_wait(simulator, slot, t_sub)

        waits.append(_forked(wait))
    return {**shown, "pilot_waits_s": waits}


def _tasks(rows: Sequence[Row], begin: int, slot: Task) -> Iterator[Task]:
    """The trace's jobs from ``begin`` on, the pilot's ``slot`` after those submitted
    before its time."""
    inserted = False
    for index in range(begin, len(rows)):
        submit, size, estimate, run = rows[index]
        if not inserted and submit >= slot.submit:
            inserted = True
            yield slot
        yield Task(index, size, estimate, submit, run)
    if not inserted:
        yield slot


def _pilot_wait(simulator: Simulator, pilot: Task, t_sub: int) -> Optional[int]:
    """Advance until the pilot starts; its wait, or None if it does not start in time."""
    while pilot.start is None:
        t = simulator.next_event_time()
        if t is None or t > t_sub + GIVE_UP_S:
            return None
        simulator.advance_to(t)
    return pilot.start - t_sub


def _forked(compute: Callable[[], Optional[int]]) -> Optional[int]:
    """``compute()`` in a forked child (which may change the simulator at will), its answer
    through a pipe."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer, and leave without running the parent's cleanup
        code = 1
        try:
            os.close(read)
            os.write(write, json.dumps(compute()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        answer = pipe.read()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0 or not answer:
        raise RuntimeError(f"the forked pilot replay failed (status {status})")
    value: Optional[int] = json.loads(answer)
    return value


def history(started: Sequence[Task], t_sub: int) -> Dict[str, Any]:
    """The waits of the jobs started in the 7 days before ``t_sub``, as a site publishes
    them (``GET /v1/history/waits``: bins, means, QBETS bounds)."""
    waits = [
        QueueWait(str(task.key), task.size, task.estimate, task.submit + EPOCH, task.start + EPOCH)
        for task in started
        if task.start is not None and t_sub - HISTORY_S <= task.start < t_sub
    ]
    return wait_table(waits, source="replay").to_json()


def pilot_cores(site: str, tasks: int) -> int:
    """A pilot for ``tasks`` single-core tasks: whole nodes, padded (as the paper did)."""
    per_node = SITE_OF[site].cores_per_node
    return math.ceil(tasks / per_node) * per_node


def observe(config: Dict[str, Any]) -> Dict[str, Any]:
    """Sweep function: what ``config['site']`` shows at the seed's submission instant."""
    site, seed = config["site"], config["seed"]
    t_sub = submission_time(site, seed)
    shown = replay(site, t_sub)
    del shown["pilot_waits_s"]
    return {**shown, "t_sub": t_sub}


def pilot_waits(config: Dict[str, Any]) -> Dict[str, Optional[int]]:
    """Sweep function: the wait of each pilot ``config['pilots']`` lists ([cores, walltime,
    run]) at ``config['site']``, each submitted alone at the seed's instant."""
    site, seed = config["site"], config["seed"]
    pilots = [Pilot(*pilot) for pilot in config["pilots"]]
    waits = replay(site, submission_time(site, seed), pilots)["pilot_waits_s"]
    return {f"{p.cores}x{p.walltime_s}": wait for p, wait in zip(pilots, waits)}
