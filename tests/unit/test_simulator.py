"""The simulator against an independent reference, job for job.

The reference below is written from the rules alone (the foundation issue), as plainly as
possible: lists, everything recomputed from scratch at every instant, no shortcuts. It shares
no code with ``siteagent.core.scheduling`` or ``siteagent.core.profile`` and reads SWF files itself.

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

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from siteagent.core.model import BatchReservation, ClusterSnapshot, Job
from siteagent.core.scheduling import Policy, Task, plan
from siteagent.sim.simulator import Simulator
from siteagent.sim.workload import Workload
from testbed.traces import swf_row, trace_prefix, write_swf

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
        if all(_load([*accepted, rect], x) <= cores for x in range(start, start + length)):
            accepted.append(rect)
    return accepted


def _load(rects: Iterable[Rect], t: int) -> int:
    return sum(size for start, end, size in rects if start <= t < end)


_SCRATCH: List[Path] = []


def scratch_swf(rows: List[List[int]], cores: int) -> Path:
    """Write a random workload to one scratch file (a fresh directory per example is slow)."""
    if not _SCRATCH:
        _SCRATCH.append(Path(tempfile.mkdtemp(prefix="siteagent-test-sim-")))
        atexit.register(shutil.rmtree, _SCRATCH[0], True)
    return write_swf(_SCRATCH[0] / "w.swf", rows, max_procs=cores)


def _compare(
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


# =============================================================================================
# The reference checks itself
# =============================================================================================


def test_reference_reads_the_rules(tmp_path: Path) -> None:
    rows = [
        swf_row(1, 0, 10, 2, req_time=20),  # field 5, estimate from field 9
        swf_row(2, 1, 30, -1, req_procs=3, req_time=20),  # field 8; runs past its estimate
        swf_row(3, 2, 7, 0, req_procs=1),  # no field 9: estimate = run time
        swf_row(4, 3, 5, -1, req_procs=-1),  # no processors
        swf_row(5, 4, -1, 1),  # negative run time
        swf_row(6, 5, 5, 9),  # more than P
        swf_row(7, -1, 5, 1),  # negative submit
    ]
    cores, jobs, skipped = ref_read_swf(write_swf(tmp_path / "r.swf", rows, max_procs=4))
    assert cores == 4 and skipped == 4
    assert [(j.job, j.size, j.est, j.run) for j in jobs] == [
        (1, 2, 20, 10),
        (2, 3, 20, 20),
        (3, 1, 7, 7),
    ]


@settings(PROPERTY)
@given(workloads())
def test_reference_easy_counters_equal_rectangles(workload: Tuple[int, List[List[int]]]) -> None:
    """Without reservations, the textbook counters and the rectangle formulation agree."""
    cores, rows = workload
    _, jobs, _ = ref_read_swf(scratch_swf(rows, cores))
    again = [RefJob(j.job, j.submit, j.size, j.est, j.run) for j in jobs]
    counters = ref_simulate(jobs, cores, EASY, easy="counters")
    rectangles = ref_simulate(again, cores, EASY, easy="rectangles")
    assert counters == rectangles


# =============================================================================================
# Real simulator == reference, job for job
# =============================================================================================


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.value)
@AGREEMENT
@given(data=st.data())
def test_simulator_matches_reference(policy: Policy, data: st.DataObject) -> None:
    """Half the workloads run on an open machine (EASY: against the textbook counters), half
    around advance reservations."""
    cores, rows = data.draw(workloads())
    reservations = data.draw(st.one_of(st.just([]), reservation_sets(cores)))
    _compare(cores, rows, policy, reservations, "rectangles" if reservations else "counters")


@AGREEMENT
@given(data=st.data())
def test_greedy_matches_reference(data: st.DataObject) -> None:
    """Backfilling without reservations (Aridor et al.'s), open or around reservations."""
    cores, rows = data.draw(workloads())
    reservations = data.draw(st.one_of(st.just([]), reservation_sets(cores)))
    _compare(cores, rows, GREEDY, reservations)


@settings(AGREEMENT, max_examples=300)
@given(workload=same_shape_workloads())
def test_conservative_matches_reference_on_queues_of_few_shapes(
    workload: Tuple[int, List[List[int]]],
) -> None:
    cores, rows = workload
    _compare(cores, rows, CONSERVATIVE, ())


@pytest.mark.parametrize("policy", [EASY, CONSERVATIVE, FCFS, GREEDY], ids=lambda p: p.value)
def test_simulator_matches_reference_on_kth_prefix(policy: Policy, tmp_path: Path) -> None:
    path = trace_prefix("KTH-SP2-1996-2.1-cln.swf.gz", 3000, tmp_path / "kth.swf")
    real = real_simulate(path, policy)
    cores, jobs, _ = ref_read_swf(path)
    assert cores == 100 and len(jobs) >= 2990
    expected = ref_simulate(jobs, cores, policy)
    assert len(real.starts) == len(expected)
    differing = [job for job in expected if real.starts.get(job) != expected[job]]
    assert not differing, (
        f"{len(differing)} jobs differ, first {differing[0]}: "
        f"real {real.starts.get(differing[0])}, reference {expected[differing[0]]}"
    )


@pytest.mark.parametrize("policy", [EASY, CONSERVATIVE], ids=lambda p: p.value)
def test_simulator_matches_reference_on_kth_prefix_at_double_load(
    policy: Policy, tmp_path: Path
) -> None:
    """Submit times halved: long queues, many backfilling decisions per instant."""
    path = _compressed_prefix("KTH-SP2-1996-2.1-cln.swf.gz", 1000, 2, tmp_path)
    real = real_simulate(path, policy)
    cores, jobs, _ = ref_read_swf(path)
    expected = ref_simulate(jobs, cores, policy)
    assert sum(expected[j.job] - j.submit for j in jobs) / len(jobs) > 10_000  # really loaded
    assert real.starts == expected


@pytest.mark.slow
@pytest.mark.parametrize("policy", [EASY, CONSERVATIVE], ids=lambda p: p.value)
def test_simulator_matches_reference_on_longer_kth_prefix_at_double_load(
    policy: Policy, tmp_path: Path
) -> None:
    path = _compressed_prefix("KTH-SP2-1996-2.1-cln.swf.gz", 3000, 2, tmp_path)
    real = real_simulate(path, policy)
    cores, jobs, _ = ref_read_swf(path)
    assert real.starts == ref_simulate(jobs, cores, policy)


def _compressed_prefix(name: str, jobs: int, divide: int, tmp_path: Path) -> Path:
    """A trace prefix whose submit times are divided by ``divide`` (higher offered load)."""
    plain = trace_prefix(name, jobs, tmp_path / "prefix.swf")
    lines = []
    for line in plain.read_text(encoding="latin-1").splitlines():
        fields = line.split()
        if fields and not line.lstrip().startswith(";"):
            fields[1] = str(int(fields[1]) // divide)
            line = " ".join(fields)
        lines.append(line)
    out = tmp_path / "compressed.swf"
    out.write_text("\n".join(lines) + "\n", encoding="latin-1")
    return out


# =============================================================================================
# Hand-worked replays (small enough to check on paper)
# =============================================================================================


def _replay(
    tmp_path: Path,
    cores: int,
    rows: List[List[int]],
    policy: Policy,
    reservations: Sequence[Rect] = (),
) -> Dict[int, int]:
    path = write_swf(tmp_path / f"{policy.value}.swf", rows, max_procs=cores)
    starts = real_simulate(path, policy, reservations).starts
    _, jobs, _ = ref_read_swf(path)
    easy = "rectangles" if reservations else "counters"
    assert ref_simulate(jobs, cores, policy, reservations, easy=easy) == starts, "reference"
    return starts


def test_runs_are_cut_at_the_estimate(tmp_path: Path) -> None:
    """P=2. Job 1 (2 cores) says 10 s but would run 50 s: it is killed at 10 and job 2 (2
    cores, submitted at 1) starts at 10. Job 3 has no field 9: its estimate is its run time
    (4 s), so under EASY it backfills... it cannot (0 free); it starts when job 2 ends at 15."""
    rows = [
        swf_row(1, 0, 50, 2, req_time=10),
        swf_row(2, 1, 5, -1, req_procs=2, req_time=5),
        swf_row(3, 2, 4, 1),
    ]
    for policy in ALL_POLICIES:
        assert _replay(tmp_path, 2, rows, policy) == {1: 0, 2: 10, 3: 15}


def test_zero_length_job_frees_its_cores_at_the_same_instant(tmp_path: Path) -> None:
    """P=2. Job 1 (2 cores, estimate 10) runs 0 s: it starts and ends at 0, and job 2 (2
    cores, submitted at 0 too) starts at 0 in the second pass of that instant."""
    rows = [swf_row(1, 0, 0, 2, req_time=10), swf_row(2, 0, 5, 2, req_time=5)]
    for policy in ALL_POLICIES:
        assert _replay(tmp_path, 2, rows, policy) == {1: 0, 2: 0}


def test_zero_length_reservation_is_not_built_over(tmp_path: Path) -> None:
    """P=2, all at 0. Job 1 (1 core, estimate 1, runs 0 s); job 2 (2 cores, estimate 0);
    job 3 (1 core, 2 s). Conservative: job 1 starts; job 2 needs both cores for an instant:
    reserved at 1, holding [1, 2); job 3 cannot be placed over that instant: reserved at 2.
    Job 1 ends at once (0 s): job 2 moves to 0, job 3 to 1 (behind job 2's claim); job 2
    starts and ends at once; job 3 moves to 0. All start at 0.

    (Were job 2's reservation to hold nothing, job 3 would be placed at 0 over it, job 2
    could then neither move nor start at 1, and with no event at 1 the replay stalls.)"""
    rows = [
        swf_row(1, 0, 0, 1, req_time=1),
        swf_row(2, 0, 0, 2),
        swf_row(3, 0, 2, 1),
    ]
    for policy in ALL_POLICIES:
        assert _replay(tmp_path, 2, rows, policy) == {1: 0, 2: 0, 3: 0}, policy


def test_easy_protects_a_zero_length_head(tmp_path: Path) -> None:
    """P=4. Job 1 (2 cores, 10 s) runs from 0. Job 2 (4 cores, estimate 0) arrives at 1 and does
    not fit: shadow 10, extra = 4 - 4 = 0. Job 3 (2 cores, 100 s) fits now but runs past the
    shadow and needs 2 > 0 extra cores: refused, or job 2 would wait until 101. Job 2 starts at
    10 and ends at once; job 3 starts at 10 too."""
    rows = [
        swf_row(1, 0, 10, 2, req_time=10),
        swf_row(2, 1, 0, 4),
        swf_row(3, 1, 100, 2, req_time=100),
    ]
    assert _replay(tmp_path, 4, rows, EASY) == {1: 0, 2: 10, 3: 10}
    # with a reservation far away the engine takes its general path: same answer
    assert _replay(tmp_path, 4, rows, EASY, [(10_000, 10_001, 1)]) == {1: 0, 2: 10, 3: 10}


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.value)
def test_removing_a_reservation_starts_the_waiting_job_at_once(policy: Policy) -> None:
    """P=2, both cores reserved over [0, 100). A (2 cores, 10 s) arrives at 5 and waits. The
    reservation is cancelled at 20: A starts at 20, in the pass the removal triggers."""
    starts: Dict[str, int] = {}
    sim = Simulator(
        iter([Task("A", 2, 10, 5)]),
        2,
        policy,
        start_time=0,
        on_start=lambda task: starts.update({task.key: task.start}),
    )
    sim.add_reservation("maint", 0, 100, 2)
    sim.advance_to(20)
    assert sim.now == 20 and starts == {} and [t.key for t in sim.queued] == ["A"]
    sim.remove_reservation("maint")
    assert starts == {"A": 20}
    sim.run()
    assert sim.finished


def test_exact_estimates_take_the_run_time(tmp_path: Path) -> None:
    """Job 1 asks 100 s and runs 30 s; job 2 gives no estimate. With exact estimates both
    estimates are the run times; without, job 1 keeps its 100 s."""
    path = write_swf(
        tmp_path / "t.swf", [swf_row(1, 0, 30, 2, req_time=100), swf_row(2, 5, 7, 1)], 4
    )
    exact = [(t.estimate, t.run) for t in Workload(str(path), exact_estimates=True).tasks()]
    asked = [(t.estimate, t.run) for t in Workload(str(path)).tasks()]
    assert exact == [(30, 30), (7, 7)]
    assert asked == [(100, 30), (7, 7)]


def test_reservation_from_on_arrival_replans_from_that_instant() -> None:
    """P=2, conservative. A (1 core, 100 s) runs from 0; B (2 cores, 10 s) is planned at 100;
    C (1 core, 150 s) waits behind B, planned at 110. D arrives at 50 and the on_arrival hook
    turns it into a reservation of 1 core over [100, 300) instead of queueing it: B moves to
    300 and C now fits at 50, when the reservation is made (not at 0, the engine's previous
    instant, where it would never start)."""
    starts: Dict[str, int] = {}
    seen: List[Tuple[str, int]] = []

    def on_arrival(task: Task) -> bool:
        seen.append((task.key, sim.now))
        if task.key != "D":
            return True
        sim.add_reservation("r", 100, 300, 1)
        return False

    tasks = [Task("A", 1, 100, 0), Task("B", 2, 10, 0), Task("C", 1, 150, 0), Task("D", 1, 5, 50)]
    sim = Simulator(
        iter(tasks),
        2,
        Policy.CONSERVATIVE,
        start_time=0,
        on_start=lambda task: starts.update({task.key: task.start}),
        on_arrival=on_arrival,
    )
    sim.run()
    assert seen == [("A", 0), ("B", 0), ("C", 0), ("D", 50)]
    assert starts == {"A": 0, "C": 50, "B": 300}
    assert sim.finished


def test_summary_of_a_replay() -> None:
    """P=4, FCFS. A (3, 10 s) at 0; B (2, 5 s) at 1; C (1, 5 s) at 2: A 0-10, B and C 10-15.
    Waits 0, 9, 8. Bounded slowdowns (tau 10 s): 1, (9+5)/10, (8+5)/10. Core-seconds
    30 + 10 + 5 = 45 over 4 cores x 15 s."""
    tasks = [Task("A", 3, 10, 0), Task("B", 2, 5, 1), Task("C", 1, 5, 2)]
    finished: List[str] = []
    sim = Simulator(iter(tasks), 4, FCFS, on_finish=lambda task: finished.append(task.key))
    summary = sim.run()
    assert finished == ["A", "B", "C"]
    assert (summary.jobs, summary.cores, summary.policy) == (3, 4, "fcfs")
    assert summary.mean_wait_s == pytest.approx(17 / 3)
    assert summary.mean_bounded_slowdown == pytest.approx((1 + 1.4 + 1.3) / 3)
    assert summary.utilization == pytest.approx(45 / 60)
    assert (summary.first_submit, summary.last_end, summary.makespan_s) == (0, 15, 15)


# =============================================================================================
# Properties of the real simulator on random queues
# =============================================================================================


def _observe(
    cores: int, rows: List[List[int]], policy: Policy, reservations: Sequence[Rect]
) -> Tuple[Observed, List[RefJob]]:
    path = scratch_swf(rows, cores)
    seen = real_simulate(path, policy, reservations, observe=True)
    _, jobs, _ = ref_read_swf(path)
    return seen, jobs


def _check_capacity(cores: int, seen: Observed, reservations: Sequence[Rect]) -> None:
    """Running jobs and reservations never hold more than P cores at any instant."""
    tasks = list(seen.tasks.values())
    points = {task.start for task in tasks} | {start for start, _, _ in reservations}
    for t in points:
        jobs = sum(task.size for task in tasks if task.start <= t < task.start + task.run)
        held = _load(reservations, t)
        assert jobs + held <= cores, f"at {t}: jobs hold {jobs}, reservations {held}, P={cores}"


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.value)
@PROPERTY
@given(data=st.data())
def test_replay_properties(policy: Policy, data: st.DataObject) -> None:
    """On random queues with advance reservations:

    * every simulable job starts exactly once, never before its submit time, with the size,
      estimate and run the rules give it;
    * running jobs and reservations never hold more than P cores (no job intrudes on a
      reservation);
    * FCFS starts jobs in submit order;
    * conservative: no job starts later than the reservation it got in the pass it arrived in;
    * EASY (textbook guarantee): estimates are upper bounds (jobs are killed at them), so once a
      job is the protected head with shadow time S, backfilling never pushes it past S. Early
      completions can only bring S forward: the shadow times a head is given never increase,
      and it starts no later than the last one.
    """
    cores, rows = data.draw(workloads())
    reservations = data.draw(reservation_sets(cores))
    seen, jobs = _observe(cores, rows, policy, reservations)
    assert sorted(seen.starts) == sorted(job.job for job in jobs)
    for job in jobs:
        task = seen.tasks[job.job]
        assert task.start >= job.submit  # type: ignore[operator]
        assert (task.size, task.estimate, task.run) == (job.size, job.est, job.run)
    _check_capacity(cores, seen, reservations)
    if policy is FCFS:
        starts = [seen.starts[job.job] for job in jobs]
        assert starts == sorted(starts)
    elif policy is CONSERVATIVE:
        for job in jobs:
            assert seen.starts[job.job] <= seen.first_planned[job.job], job
    else:
        for job, shadows in seen.shadows.items():
            assert shadows == sorted(shadows, reverse=True), (job, shadows)
            assert seen.starts[job] <= shadows[-1], (job, shadows, seen.starts[job])


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.value)
@settings(PROPERTY, max_examples=100)
@given(workload=workloads())
def test_far_reservation_changes_nothing(
    policy: Policy, workload: Tuple[int, List[List[int]]]
) -> None:
    """A 1-core reservation after every job could end changes no decision. For EASY it moves
    the engine from its fast path (counters) to its general path (fits around the head's
    window): the two must give the same schedule."""
    cores, rows = workload
    seen, jobs = _observe(cores, rows, policy, ())
    far = max([job.submit for job in jobs], default=0) + 2 * sum(j.est for j in jobs) + 10
    with_far, _ = _observe(cores, rows, policy, [(far, far + 5, 1)])
    assert with_far.starts == seen.starts


# =============================================================================================
# plan() over a snapshot == the reference with every job running to its estimate
# =============================================================================================


@st.composite
def snapshots(draw: Callable) -> ClusterSnapshot:  # type: ignore[type-arg]
    now = 1000
    cores = draw(st.integers(1, 8))
    running, used = [], 0
    for k, (size, began, left) in enumerate(
        draw(
            st.lists(
                st.tuples(st.integers(1, cores), st.integers(0, 20), st.integers(1, 15)), max_size=4
            )
        )
    ):
        if used + size <= cores:
            used += size
            running.append(Job(f"run{k}", size, now - began - 5, began + left, start=now - began))
    pending = [
        Job(f"p{k}", size, now - 1, limit, not_before=None if later is None else now + later)
        for k, (size, limit, later) in enumerate(
            draw(
                st.lists(
                    st.tuples(
                        st.integers(1, cores),
                        st.integers(1, 12),
                        st.one_of(st.none(), st.none(), st.integers(0, 10)),
                    ),
                    min_size=1,
                    max_size=10,
                )
            )
        )
    ]
    reservations: List[BatchReservation] = []
    held = [(now, job.start + job.limit, job.cores) for job in running]  # type: ignore[operator]
    for k, (start, length, size) in enumerate(
        draw(
            st.lists(
                st.tuples(
                    st.integers(now - 5, now + 20), st.integers(1, 12), st.integers(1, cores)
                ),
                max_size=3,
            )
        )
    ):
        rect = (max(start, now), start + length, size)
        if rect[1] > now and all(_load([*held, rect], x) <= cores for x in range(now, now + 40)):
            held.append(rect)
            reservations.append(BatchReservation(f"res{k}", start, start + length, size))
    return ClusterSnapshot(
        now=now,
        capacity=cores,
        running=tuple(running),
        pending=tuple(pending),
        reservations=tuple(reservations),
    )


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.value)
@PROPERTY
@given(snapshot=snapshots())
def test_plan_matches_reference(policy: Policy, snapshot: ClusterSnapshot) -> None:
    now = snapshot.now
    result = plan(snapshot, policy)
    running = [
        RefJob(-1, job.submit, job.cores, job.limit, job.limit, start=job.start)
        for job in snapshot.running
    ]
    jobs = [
        RefJob(k, max(job.not_before or now, now), job.cores, job.limit, job.limit)
        for k, job in enumerate(snapshot.pending)
    ]
    jobs.sort(key=lambda job: job.submit)  # stable: ties in priority order
    rects = [(max(r.start, now), r.end, r.cores) for r in snapshot.reservations]
    easy = "rectangles" if rects else "counters"
    expected = ref_simulate(jobs, snapshot.capacity, policy, rects, running, easy=easy)
    assert result.starts == {f"p{k}": start for k, start in expected.items()}
    assert result.unplanned == []
    # the plan's profile: running jobs, reservations and pending jobs at their planned windows
    held = [(now, job.start + job.limit, job.cores) for job in snapshot.running]  # type: ignore[operator]
    held += rects
    held += [(result.starts[j.id], result.ends[j.id], j.cores) for j in snapshot.pending]
    for start, _, free in result.profile.segments():
        assert free == snapshot.capacity - _load(held, start), start
    assert all(result.ends[j.id] - result.starts[j.id] == j.limit for j in snapshot.pending)
    assert result.horizon >= max(result.ends.values()) + 300
