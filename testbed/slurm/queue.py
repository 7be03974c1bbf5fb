"""Use this when a Slurm test or `bench slurm` needs a queue of real jobs.

Queues of real jobs for the Slurm test cluster, shared by the tests and ``bench slurm``.

Each builder submits sleep jobs with sbatch and waits for what the comparison needs: the
running jobs running, and Slurm's backfill (``bf_interval=5``) having published an expected
start for the pending ones.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, List, Sequence, Tuple

from testbed.slurm.cluster import ClusterError, SlurmTestCluster

#: Two running jobs and six pending ones whose starts follow from the running jobs' limits
#: (cores, minutes), in priority (submission) order: backfill plans every one of them.
SIMPLE_RUNNING: Sequence[Tuple[int, int]] = ((40, 10), (20, 20))
SIMPLE_PENDING: Sequence[Tuple[int, int]] = (
    (64, 30),
    (16, 15),
    (8, 5),
    (48, 40),
    (4, 60),
    (32, 25),
)

#: Seconds of one backfill pass in the test cluster's slurm.conf, plus a margin.
BACKFILL_PASS_S = 6.0


def wait_for(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``check`` until it holds; AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.3)


def job_state(cluster: SlurmTestCluster, job_id: str) -> str:
    return cluster.run(["squeue", "-h", "-j", job_id, "-o", "%T"], check=False).stdout.strip()


def published_starts(cluster: SlurmTestCluster) -> List[Tuple[str, str]]:
    """(job id, START_TIME) of every pending job, ``N/A`` where Slurm published none."""
    out = cluster.run(["squeue", "-h", "-r", "-t", "PD", "-o", "%i|%S"]).stdout
    return [(f[0], f[1]) for f in (line.split("|") for line in out.splitlines()) if len(f) == 2]


def submit_queue(
    cluster: SlurmTestCluster,
    running: Sequence[Tuple[int, int]],
    pending: Sequence[Tuple[int, int]],
    timeout: float = 60.0,
) -> List[str]:
    """Submit ``running`` then ``pending`` (cores, minutes); return the pending job ids once the
    first group runs and Slurm published a start for every pending job (one more backfill
    pass is waited for, so that the estimates reflect the whole queue)."""
    started = [cluster.submit(f"-n{c}", "-t", str(m)) for c, m in running]
    queued = [cluster.submit(f"-n{c}", "-t", str(m)) for c, m in pending]
    wait_for(
        "the first jobs to run",
        lambda: all(job_state(cluster, j) == "RUNNING" for j in started),
        timeout,
    )

    def published() -> bool:
        starts = dict(published_starts(cluster))
        return all(starts.get(j, "N/A") != "N/A" for j in queued)

    wait_for("backfill estimates for every pending job", published, timeout)
    time.sleep(BACKFILL_PASS_S)
    return queued


def random_queue(
    seed: int, running: int, pending: int, capacity: int
) -> Tuple[List[Tuple[int, int]], List[Tuple[int, int]]]:
    """A reproducible queue: ``running`` jobs that together fit in ``capacity`` cores, then
    ``pending`` jobs of mixed sizes (1 core to the whole machine) and limits (5 min to 2 h)."""
    rng = random.Random(seed)
    sizes = [1, 2, 4, 8, 12, 16, 24, 32, 48, capacity]
    first: List[Tuple[int, int]] = []
    free = capacity
    while len(first) < running:
        cores = rng.choice([s for s in sizes if s <= max(1, free // 2)] or [1])
        first.append((cores, rng.randrange(5, 121, 5)))
        free -= cores
    later = [(rng.choice(sizes), rng.randrange(5, 121, 5)) for _ in range(pending)]
    return first, later


def mixed_queue(
    seed: int, count: int, cores: Sequence[int], max_nodes: int, partitions: Sequence[str] = ()
) -> List[List[str]]:
    """sbatch arguments of a reproducible queue on nodes of ``cores``: one job in four asks
    for whole nodes (``-N k --exclusive``, k up to ``max_nodes``), the others for cores
    (``-n``, from one to half the machine); limits 5 min to 2 h. With ``partitions``, one job
    in three goes to another partition than the first."""
    rng = random.Random(seed)
    largest = max(cores)
    sizes = sorted({1, 2, 4, largest // 2, largest, largest * 3 // 2, sum(cores) // 2} - {0})
    queue: List[List[str]] = []
    for _ in range(count):
        limit = ["-t", str(rng.randrange(5, 121, 5))]
        if rng.random() < 0.25:
            job = ["-N", str(rng.randint(1, max_nodes)), "--exclusive", *limit]
        else:
            job = [f"-n{rng.choice(sizes)}", *limit]
        if len(partitions) > 1 and rng.random() < 1 / 3:
            job = ["-p", rng.choice(partitions[1:]), *job]
        queue.append(job)
    return queue


def reserve_windows(cluster: SlurmTestCluster, node: str) -> None:
    """A maintenance window on ``node`` in three hours and two core reservations Slurm
    places: ``cores`` (6 cores in 90 min) and ``later`` (8 cores in 2 h, for jobs of its own:
    :func:`submit_into`)."""
    for name, start, minutes, size in (
        ("maint", 3 * 3600, 120, f"Nodes={node}"),
        ("cores", 5400, 60, "CoreCnt=6"),
        ("later", 7200, 90, "CoreCnt=8"),
    ):
        begin = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + start))
        cluster.run(
            [
                *("scontrol", "create", "reservation", f"ReservationName={name}"),
                f"StartTime={begin}",
                f"Duration={minutes}",
                size,
                "Users=root",
            ]
        )


def submit_into(
    cluster: SlurmTestCluster, queue: Sequence[Sequence[str]], reservation: str = ""
) -> None:
    """Submit the queue (with ``reservation``, every fifteenth job into it) and wait for
    Slurm's backfill to plan it."""
    for index, args in enumerate(queue):
        extra = [f"--reservation={reservation}"] if reservation and index % 15 == 7 else []
        cluster.submit(*extra, *args)
    time.sleep(4 * BACKFILL_PASS_S)


def submit_many(
    cluster: SlurmTestCluster, count: int, args: Sequence[str], workers: int = 4
) -> List[str]:
    """Submit ``count`` identical jobs with ``args`` (several sbatch at a time); their ids."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        ids = list(pool.map(lambda _: cluster.submit(*args), range(count)))
    if len(set(ids)) != count:
        raise ClusterError(f"submitted {count} jobs but got {len(set(ids))} distinct ids")
    return ids
