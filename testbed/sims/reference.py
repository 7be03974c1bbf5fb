"""Use this when the simulator is checked against an independent reference.

An independent reference simulator, written from the rules alone, and the random
workloads the simulator is held to it with (tests/unit/test_simulator.py,
tests/unit/test_preemption.py).

The reference is written from the rules alone (the foundation issue), as plainly as
possible: lists, everything recomputed from scratch at every instant, no shortcuts. It shares
no code with ``siteagent.core.engines`` or ``siteagent.core.profile`` and reads SWF files itself.

The rules: P defaults to the header's MaxProcs; a job's processors are field 5 if > 0, else
field 8; records with no processors, negative run time or submit time, or more processors than
P are skipped; estimate = field 9 if > 0, else the run time; a job runs min(run time,
estimate). At each instant: completions first, then the pass.

* FCFS starts queue-head jobs while they fit.
* EASY starts queue-head jobs while they fit; for the first that does not, the shadow time is
  the earliest estimated instant with enough free cores and ``extra`` = cores free then beyond
  its need; each later job starts now if it fits now and either ends (by estimate) by the
  shadow time or uses no more than ``extra`` (which it then reduces).
* Conservative: queued jobs are revisited in queue order and each moves to its earliest fit if
  that is earlier than its reservation (never later); then the instant's arrivals, in trace
  order, get reservations at their earliest fit; jobs whose reservation is now start.
* Greedy: every queued job, in queue order, starts if it fits now; nobody is protected.

Injected advance reservations are fixed rectangles no job may overlap.

Conventions the rules leave implicit, and which the reference fixes as follows:

* a started job holds its cores over [start, start + estimate) in every plan and really runs
  over [start, start + run); a job that runs 0 s ends at the instant it starts, and (as with
  any completion) the policy then gets another pass at that same instant;
* a job with estimate 0 needs ``size`` free cores at the instant it starts ("fits now") and,
  once started, holds nothing. A reservation for a queued job (conservative's, or the claim
  of EASY's head at its shadow time) holds the cores for its estimate and at least for the
  instant it starts: a reservation that held nothing could be built over by later arrivals and
  then not fit when its instant came;
* with advance reservations, EASY's "fits now without delaying the head" is: fits over its
  estimated window given running jobs, reservations and the head's claim. Without
  reservations this is exactly the counter formulation above (a test holds the two to each
  other).
"""

from __future__ import annotations

import atexit
import collections
import gzip
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from siteagent.core.engines import Policy
from siteagent.core.machine import Task
from siteagent.sim.simulator import Simulator
from siteagent.sim.workload import Workload
from testbed.inprocess.traces import swf_row, write_swf

FCFS, EASY, CONSERVATIVE = Policy.FCFS, Policy.EASY, Policy.CONSERVATIVE
GREEDY = Policy.GREEDY
ALL_POLICIES = (FCFS, EASY, CONSERVATIVE)

Rect = Tuple[int, int, int]  # [start, end) x size

# =============================================================================================
# The reference simulator
# =============================================================================================


@dataclass(eq=False)
class RefJob:
    job: int
    submit: int
    size: int
    est: int
    run: int  # what it really runs: min(run time, estimate)
    start: Optional[int] = None
    resv: Optional[int] = None  # conservative: the reservation it holds now
    first_resv: Optional[int] = None  # conservative: the reservation it got on arrival


def ref_read_swf(path: Path, cores: Optional[int] = None) -> Tuple[int, List[RefJob], int]:
    """(P, simulable jobs in trace order, number of records skipped), by the rules."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    lines = raw.decode("latin-1").splitlines()
    if cores is None:
        for line in lines:
            found = re.match(r"\s*;\s*MaxProcs:\s*(\d+)", line)
            if found:
                cores = int(found.group(1))
                break
    assert cores is not None and cores > 0
    jobs, skipped = [], 0
    for line in lines:
        fields = line.split()
        if not fields or fields[0].startswith(";"):
            continue
        job, submit, run = int(fields[0]), int(fields[1]), int(fields[3])
        procs, req_procs, req_time = int(fields[4]), int(fields[7]), int(fields[8])
        size = procs if procs > 0 else req_procs
        if size <= 0 or run < 0 or submit < 0 or size > cores:
            skipped += 1
            continue
        estimate = req_time if req_time > 0 else run
        jobs.append(RefJob(job, submit, size, estimate, min(run, estimate)))
    return cores, jobs, skipped


def free_segments(cores: int, rects: Iterable[Rect], t: int) -> List[Tuple[int, int]]:
    """[(from, free)]: the free cores from each point on (until the next), for times >= t."""
    change: Dict[int, int] = collections.Counter()
    for start, end, size in rects:
        start = max(start, t)
        if end > start:
            change[start] -= size
            change[end] += size
    free = cores
    segments = []
    for point in sorted(set(change) | {t}):
        free += change[point]
        segments.append((point, free))
    return segments


def earliest_fit(
    segments: List[Tuple[int, int]], size: int, duration: int, own: Optional[Rect] = None
) -> int:
    """The earliest start with ``size`` free over [start, start + duration).

    Only segment starts need trying: a window that fits and starts inside a segment could slide
    back to that segment's start unless free capacity rose there, and rises happen only at
    segment starts. A zero-length window needs ``size`` free at its start. ``own`` is a
    rectangle counted in ``segments`` that is to be taken as free (a job's own reservation);
    segments are split at its edges, so each segment is wholly inside it or outside.
    """

    def free_of(k: int) -> int:
        point, free = segments[k]
        if own is not None and own[0] <= point < own[1]:
            free += own[2]
        return free

    for i, (start, _) in enumerate(segments):
        if free_of(i) < size:
            continue
        j = i + 1
        while j < len(segments) and segments[j][0] < start + duration:
            if free_of(j) < size:
                break
            j += 1
        else:
            return start
    raise AssertionError(f"nothing ever fits {size} cores")


def ref_simulate(
    jobs: List[RefJob],
    cores: int,
    policy: Policy,
    reservations: Sequence[Rect] = (),
    running: Sequence[RefJob] = (),
    easy: str = "counters",
) -> Dict[int, int]:
    """Start time of every job, by the rules. ``running`` are jobs already started.

    ``easy`` picks the EASY formulation: "counters" (shadow time and extra cores, as the rules
    state it; only valid without reservations) or "rectangles" (fits around the head's claim).
    """
    queue: List[RefJob] = []
    running = list(running)
    now: Optional[int] = None
    i = 0
    while True:
        instants = [job.start + job.run for job in running]  # type: ignore[operator]
        if i < len(jobs):
            instants.append(jobs[i].submit)
        instants += [end for _, end, _ in reservations if now is None or end > now]
        instants += [job.resv for job in queue if job.resv is not None]
        if not instants:
            break
        t = min(instants)
        assert now is None or t > now, "the reference went back in time"
        arrivals = []
        while i < len(jobs) and jobs[i].submit == t:
            arrivals.append(jobs[i])
            i += 1
        while True:
            running = [job for job in running if job.start + job.run > t]  # type: ignore[operator]
            if policy is CONSERVATIVE:
                started = _conservative_pass(t, cores, queue, running, reservations, arrivals)
            else:
                queue.extend(arrivals)
                if policy is FCFS:
                    started = _fcfs_pass(t, cores, queue, running, reservations)
                elif policy is GREEDY:
                    started = _greedy_pass(t, cores, queue, running, reservations)
                elif easy == "counters":
                    assert not reservations
                    started = _easy_pass_counters(t, cores, queue, running)
                else:
                    started = _easy_pass_rectangles(t, cores, queue, running, reservations)
            arrivals = []
            running += started
            if not any(job.run == 0 for job in started):
                break
        now = t
    assert not queue
    return {job.job: job.start for job in jobs}  # type: ignore[misc]


def _rects(running: Iterable[RefJob], reservations: Iterable[Rect]) -> List[Rect]:
    """Running jobs hold their cores until start + estimate; reservations hold theirs."""
    held = [(job.start, job.start + job.est, job.size) for job in running]
    return held + list(reservations)  # type: ignore[arg-type]


def _held(job: RefJob) -> int:
    """How long a reservation (or EASY's claim) for a queued job holds its cores: its estimate,
    and at least the instant it starts, which it needs ("fits now")."""
    return max(job.est, 1)


def _start(job: RefJob, t: int, queue: List[RefJob], started: List[RefJob]) -> None:
    job.start = t
    queue.remove(job)
    started.append(job)


def _fcfs_pass(t, cores, queue, running, reservations) -> List[RefJob]:  # type: ignore[no-untyped-def]
    started: List[RefJob] = []
    while queue:
        head = queue[0]
        segments = free_segments(cores, _rects(running + started, reservations), t)
        if earliest_fit(segments, head.size, head.est) != t:
            break
        _start(head, t, queue, started)
    return started


def _greedy_pass(t, cores, queue, running, reservations) -> List[RefJob]:  # type: ignore[no-untyped-def]
    started: List[RefJob] = []
    for job in list(queue):
        segments = free_segments(cores, _rects(running + started, reservations), t)
        if earliest_fit(segments, job.size, job.est) == t:
            _start(job, t, queue, started)
    return started


def _easy_pass_counters(t, cores, queue, running) -> List[RefJob]:  # type: ignore[no-untyped-def]
    started: List[RefJob] = []

    def holding(after: int) -> int:
        """Cores held by started jobs past ``after`` (by estimate)."""
        return sum(job.size for job in running + started if job.start + job.est > after)

    free = cores - holding(t)
    while queue and queue[0].size <= free:
        _start(queue[0], t, queue, started)
        free = cores - holding(t)
    if not queue:
        return started
    head = queue[0]
    ends = sorted({job.start + job.est for job in running + started})
    shadow = next(end for end in ends if cores - holding(end) >= head.size)
    extra = cores - holding(shadow) - head.size
    for job in list(queue[1:]):
        if job.size > free:
            continue
        if t + job.est <= shadow:
            pass
        elif job.size <= extra:
            extra -= job.size
        else:
            continue
        _start(job, t, queue, started)
        free = cores - holding(t)
    return started


def _easy_pass_rectangles(t, cores, queue, running, reservations) -> List[RefJob]:  # type: ignore[no-untyped-def]
    started: List[RefJob] = []

    def segments(claims: Sequence[Rect] = ()) -> List[Tuple[int, int]]:
        rects = _rects(running + started, reservations) + list(claims)
        return free_segments(cores, rects, t)

    while queue and earliest_fit(segments(), queue[0].size, queue[0].est) == t:
        _start(queue[0], t, queue, started)
    if not queue:
        return started
    head = queue[0]
    shadow = earliest_fit(segments(), head.size, head.est)
    claim = (shadow, shadow + _held(head), head.size)
    for job in list(queue[1:]):
        if earliest_fit(segments([claim]), job.size, job.est) == t:
            _start(job, t, queue, started)
    return started


def _conservative_pass(t, cores, queue, running, reservations, arrivals) -> List[RefJob]:  # type: ignore[no-untyped-def]
    base = _rects(running, reservations)

    def segments() -> List[Tuple[int, int]]:
        plans = [(job.resv, job.resv + _held(job), job.size) for job in queue]
        return free_segments(cores, base + plans, t)

    now = segments()
    for job in queue:
        own = (job.resv, job.resv + _held(job), job.size)
        fit = earliest_fit(now, job.size, _held(job), own=own)
        if fit < job.resv:
            job.resv = fit
            now = segments()
    for job in arrivals:
        job.resv = job.first_resv = earliest_fit(now, job.size, _held(job))
        queue.append(job)
        now = segments()
    started = [job for job in queue if job.resv == t]
    for job in started:
        job.start = t
        queue.remove(job)
    return started


# =============================================================================================
# Driving the real simulator
# =============================================================================================


class Observed:
    """What a real replay did: starts, tasks, and what the engine held after each instant."""

    def __init__(self) -> None:
        self.starts: Dict[int, int] = {}
        self.tasks: Dict[int, Task] = {}
        self.first_planned: Dict[int, int] = {}  # conservative: planned right after arrival
        self.shadows: Dict[int, List[int]] = collections.defaultdict(list)  # EASY head


def real_simulate(
    path: Path,
    policy: Policy,
    reservations: Sequence[Rect] = (),
    cores: Optional[int] = None,
    observe: bool = False,
) -> Observed:
    """Replay an SWF file with the real Workload and Simulator, keyed by job number."""
    seen = Observed()
    workload = Workload(str(path), cores=cores, skip_invalid=True)

    def started(task: Task) -> None:
        job = task.payload.job  # type: ignore[attr-defined]
        seen.starts[job] = task.start  # type: ignore[assignment]
        seen.tasks[job] = task
        seen.first_planned.setdefault(job, task.start)  # type: ignore[arg-type]

    sim = Simulator(workload.tasks(), workload.cores, policy, start_time=0, on_start=started)
    for k, (start, end, size) in enumerate(reservations):
        sim.add_reservation(("r", k), start, end, size)
    if not observe:
        sim.run()
    else:
        while True:
            t = sim.next_event_time()
            if t is None:
                break
            sim.advance_to(t)
            for task in sim.queued:
                job = task.payload.job  # type: ignore[attr-defined]
                if job not in seen.first_planned and task.planned is not None:
                    seen.first_planned[job] = task.planned
            queue = sim.engine.queue
            if policy is EASY and queue and queue[0].planned is not None:
                seen.shadows[queue[0].payload.job].append(queue[0].planned)  # type: ignore[attr-defined]
        assert sim.finished
    return seen


# =============================================================================================
# Random workloads
# =============================================================================================

GAPS = st.sampled_from([0, 0, 0, 0, 1, 1, 2, 3, 5, 8])
RUNS = st.integers(0, 12)
REQ_TIMES = st.one_of(st.sampled_from([-1, 0]), st.integers(1, 12))
KINDS = st.sampled_from(["alloc"] * 4 + ["req"] * 2 + ["both", "too big", "no procs", "neg run"])


@st.composite
def workloads(draw: Callable, max_jobs: int = 14) -> Tuple[int, List[List[int]]]:  # type: ignore[type-arg]
    """(P, SWF rows): many simultaneous submits, zero-length runs, runs past the estimate."""
    cores = draw(st.integers(1, 6))
    specs = draw(
        st.lists(
            st.tuples(GAPS, st.integers(1, cores), st.integers(1, cores), RUNS, REQ_TIMES, KINDS),
            min_size=1,
            max_size=max_jobs,
        )
    )
    rows, submit = [], 0
    for number, (gap, size, other, run, req_time, kind) in enumerate(specs, 1):
        submit += gap
        procs, req_procs = size, -1
        if kind == "req":
            procs, req_procs = -1, size
        elif kind == "both":
            req_procs = other  # field 5 wins over field 8
        elif kind == "too big":
            procs = cores + 1
        elif kind == "no procs":
            procs, req_procs = -1, 0
        elif kind == "neg run":
            run = -1
        rows.append(swf_row(number, submit, run, procs, req_procs, req_time))
    return cores, rows


@st.composite
def same_shape_workloads(draw: Callable) -> Tuple[int, List[List[int]]]:  # type: ignore[type-arg]
    """(P, SWF rows): long queues of jobs of two or three shapes, many ending early. The
    conservative engine answers "where does this shape fit?" once per shape and keeps the
    answer across moves while it stays exact; these queues put that to the test."""
    cores = draw(st.integers(2, 6))
    shapes = draw(
        st.lists(st.tuples(st.integers(1, cores), st.integers(1, 9)), min_size=2, max_size=3)
    )
    specs = draw(
        st.lists(
            st.tuples(
                st.sampled_from([0, 0, 1, 2, 3]), st.integers(0, len(shapes) - 1), st.integers(0, 9)
            ),
            min_size=10,
            max_size=40,
        )
    )
    rows, submit = [], 0
    for number, (gap, shape, run) in enumerate(specs, 1):
        submit += gap
        size, estimate = shapes[shape]
        rows.append(swf_row(number, submit, run, size, req_time=estimate))
    return cores, rows


@st.composite
def reservation_sets(draw: Callable, cores: int) -> List[Rect]:  # type: ignore[type-arg]
    """Up to three advance reservations that fit together in ``cores``."""
    wanted = draw(
        st.lists(
            st.tuples(st.integers(0, 30), st.integers(1, 15), st.integers(1, cores)), max_size=3
        )
    )
    accepted: List[Rect] = []
    for start, length, size in wanted:
        rect = (start, start + length, size)
        if all(load_at([*accepted, rect], x) <= cores for x in range(start, start + length)):
            accepted.append(rect)
    return accepted


def load_at(rects: Iterable[Rect], t: int) -> int:
    return sum(size for start, end, size in rects if start <= t < end)


_SCRATCH: List[Path] = []


def scratch_swf(rows: List[List[int]], cores: int) -> Path:
    """Write a random workload to one scratch file (a fresh directory per example is slow)."""
    if not _SCRATCH:
        _SCRATCH.append(Path(tempfile.mkdtemp(prefix="siteagent-test-sim-")))
        atexit.register(shutil.rmtree, _SCRATCH[0], True)
    return write_swf(_SCRATCH[0] / "w.swf", rows, max_procs=cores)


def compare_with_reference(
    cores: int,
    rows: List[List[int]],
    policy: Policy,
    reservations: Sequence[Rect],
    easy: str = "counters",
) -> None:
    path = scratch_swf(rows, cores)
    real = real_simulate(path, policy, reservations)
    ref_cores, jobs, _ = ref_read_swf(path)
    assert ref_cores == cores
    expected = ref_simulate(jobs, cores, policy, reservations, easy=easy)
    assert real.starts == expected


#: the agreement tests: several hundred random workloads per policy
AGREEMENT = settings(
    max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
#: the other property tests
PROPERTY = settings(
    max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
