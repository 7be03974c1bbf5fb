"""Use this when a test needs a clock it moves or a backend that misbehaves on request.

Stand-ins for the agent's surroundings inside one process: a clock the test moves, a
backend that misbehaves on request (refuses, shrinks, loses answers, goes down), a small
batch system that places work on particular nodes as Slurm does, and a Slurm command that
answers what the test says."""

from __future__ import annotations

import dataclasses
import subprocess
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from siteagent.backends.base import Backend, BackendUnavailable, ReservationRefused
from siteagent.backends.slurm.snapshot import reservation_allocation
from siteagent.core.values import (
    Allocation,
    BatchReservation,
    ClusterSnapshot,
    Job,
    NodeState,
    Placement,
    ReservationSpec,
)
from siteagent.protocol import httpsig
from siteagent.security.authentication import Authenticator
from siteagent.security.clients import AuthorizedClient


class FakeClock:
    """Wall-clock time that moves only when the test says so."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class FaultyBackend(Backend):
    """Another backend that refuses, shrinks, or stops answering when the test asks it to.

    ``refuse``: the next creations are refused with this message. ``shrink``: creations get
    this many units less than asked (Slurm's silent NodeCnt reduction). ``unavailable``: every
    call fails as if the controller were down. ``lose_answer``: creations happen but the answer
    is lost (a timeout after the controller acted).
    """

    name = "faulty"

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.refuse: Optional[str] = None
        self.shrink = 0
        self.unavailable = False
        self.lose_answer = False

    def _check(self) -> None:
        if self.unavailable:
            raise BackendUnavailable("controller down (test)")

    def snapshot(self) -> ClusterSnapshot:
        self._check()
        return self.inner.snapshot()

    def create_reservation(self, spec: ReservationSpec) -> BatchReservation:
        self._check()
        if self.refuse is not None:
            raise ReservationRefused(self.refuse)
        made = self.inner.create_reservation(
            dataclasses.replace(spec, size=spec.size - self.shrink)
        )
        if self.lose_answer:
            raise BackendUnavailable("scontrol did not answer within 30 s (test)")
        return made

    def held_window(self, start: int, end: int) -> Tuple[int, int]:
        return self.inner.held_window(start, end)

    def delete_reservation(self, name: str) -> None:
        self._check()
        self.inner.delete_reservation(name)

    def list_reservations(self) -> List[BatchReservation]:
        self._check()
        return self.inner.list_reservations()


class NodeCluster(Backend):
    """Nodes of given cores with running jobs, and reservations created as Slurm creates them:
    for whole minutes, on the nodes named (refused as busy where running work or an
    overlapping reservation leaves too few cores all along; ``moved`` puts the next new
    reservation on other nodes or splits it otherwise, as a batch system choosing for itself
    would). Like pyslurm's legacy API it lists a reservation's nodes but not its cores on each
    when there are several; with ``lists_cores`` it lists them, as ``scontrol`` does.
    """

    name = "nodes"

    def __init__(self, cores: Mapping[str, int], running: Sequence[Job], now: int) -> None:
        self.cores = dict(cores)
        self.running = tuple(running)
        self.clock = now
        self.held: Dict[str, Tuple[BatchReservation, Allocation]] = {}
        self.moved: Allocation = ()
        self.lists_cores = False
        self.created: List[ReservationSpec] = []

    def now(self) -> int:
        return self.clock

    def snapshot(self) -> ClusterSnapshot:
        return ClusterSnapshot(
            now=self.clock,
            capacity=sum(self.cores.values()),
            running=self.running,
            reservations=tuple(
                dataclasses.replace(res, allocation=reservation_allocation(res, self.cores))
                for res, _ in self.held.values()
            ),
            nodes=tuple(NodeState(name, cores) for name, cores in self.cores.items()),
            placement=Placement.SLURM,
            backend=self.name,
        )

    def held_window(self, start: int, end: int) -> Tuple[int, int]:
        return start, start + -(-(end - start) // 60) * 60

    def create_reservation(self, spec: ReservationSpec) -> BatchReservation:
        self.created.append(spec)
        placed, self.moved = self.moved or spec.allocation, ()
        start, end = self.held_window(spec.start, spec.end)
        for name, cores in placed:
            if cores > self._free(name, start, end):
                raise ReservationRefused("Requested nodes are busy")
        made = BatchReservation(
            name=spec.name,
            start=start,
            end=end,
            cores=sum(cores for _, cores in placed),
            node_names=tuple(name for name, _ in placed),
            allocation=placed if len(placed) == 1 or self.lists_cores else (),
        )
        self.held[spec.name] = (made, placed)
        return made

    def _free(self, node: str, start: int, end: int) -> int:
        free = self.cores[node]
        for job in self.running:
            assert job.start is not None
            if job.start + job.limit > start:
                free -= sum(cores for name, cores in job.allocation if name == node)
        for res, placed in self.held.values():
            if res.start < end and start < res.end:
                free -= sum(cores for name, cores in placed if name == node)
        return free

    def delete_reservation(self, name: str) -> None:
        self.held.pop(name, None)

    def list_reservations(self) -> List[BatchReservation]:
        return [res for res, _ in self.held.values()]


class Trusting(Authenticator):
    """Takes every request as signed by ``client``: for tests of what happens after the
    signature check (generated bodies, the faces of one use case), which the gate runs
    before any route."""

    def __init__(self, client: AuthorizedClient) -> None:
        super().__init__({client.key_id: client}, ())
        self.client = client

    def authenticate(
        self, method: str, url: str, headers: httpsig.Headers, body: bytes
    ) -> AuthorizedClient:
        return self.client


class FakeRun:
    """Stands in for SlurmBackend._run: records argument lists, answers with one result."""

    def __init__(self, rc: int, stdout: str = "", stderr: str = "") -> None:
        self.calls: List[List[str]] = []
        self.result = (rc, stdout, stderr)

    def __call__(self, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(args))
        rc, out, err = self.result
        return subprocess.CompletedProcess(list(args), rc, out, err)
