"""The running jobs an accept read, kept for the next accepts while the nodes say that no job
has started or ended since.

An accept re-checks its window against the work running now. Slurm 22.05's ``squeue -t``
filters on the client side: slurmctld sends every job, so with 2,000 jobs queued reading the
few running ones took 20 ms, the largest part of an accept. The nodes are read anyway (their
states), and each node's allocated cores is a fingerprint of what runs on it: while every
node's count is what it was when the running jobs were read, a few seconds ago, and those
jobs accounted for every allocated core then, the same jobs are running. The one change it
cannot see, a job ending and another of the same size starting on the same nodes within those
seconds, makes Slurm refuse or shrink the reservation (it checks the cores itself), and the
backend then forgets what it kept (:meth:`RunningJobs.forget`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Tuple

from siteagent.backends.slurm.jobs import SlurmJobs
from siteagent.core.values import NodeState

#: How long a read of the running jobs is reused at most (seconds): a burst of accepts.
REUSE_S = 10.0


def allocated(nodes: Sequence[NodeState]) -> Tuple[Tuple[str, int], ...]:
    """Each node's allocated cores, in name order: what changes when a job starts or ends."""
    return tuple(sorted((node.name, node.alloc_cores) for node in nodes))


@dataclass(frozen=True)
class _Read:
    jobs: SlurmJobs
    allocated: Tuple[Tuple[str, int], ...]
    at: float


class RunningJobs:
    """The last read of the running jobs, and whether it still holds (thread-safe)."""

    def __init__(
        self, reuse_s: float = REUSE_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.reuse_s = reuse_s
        self.clock = clock
        self._read: Optional[_Read] = None
        self._lock = threading.Lock()

    def recent(self) -> bool:
        """Whether a read young enough to be reused is kept (worth checking before reading)."""
        with self._lock:
            return self._read is not None and self.clock() - self._read.at < self.reuse_s

    def still(self, nodes: Sequence[NodeState]) -> Optional[SlurmJobs]:
        """The kept jobs if they are young enough and ``nodes`` (read now) show the same
        allocated cores as when they were read; None otherwise."""
        with self._lock:
            read = self._read
        if read is None or self.clock() - read.at >= self.reuse_s:
            return None
        return read.jobs if allocated(nodes) == read.allocated else None

    def keep(self, jobs: SlurmJobs, nodes: Sequence[NodeState], read_at: float) -> None:
        """Keep ``jobs`` (read from ``read_at`` on) if they account for every core ``nodes``
        show allocated: when the two reads straddle a job's start or end, they do not, and
        nothing is kept."""
        total = sum(node.alloc_cores for node in nodes)
        read = _Read(jobs, allocated(nodes), read_at)
        with self._lock:
            self._read = read if sum(job.cores for job in jobs.running) == total else None

    def current(
        self, nodes: Sequence[NodeState], read: Callable[[], SlurmJobs], read_at: float
    ) -> SlurmJobs:
        """The kept jobs while they still hold (:meth:`still`), else ``read()``'s (begun at
        ``read_at``, before ``nodes`` were read), kept for the next accepts."""
        jobs = self.still(nodes)
        if jobs is None:
            jobs = read()
            self.keep(jobs, nodes, read_at)
        return jobs

    def forget(self) -> None:
        """Read them again next time (Slurm disagreed with what they implied)."""
        with self._lock:
            self._read = None
