"""Stand-ins for the agent's surroundings inside one process: a clock the test moves, a
backend that misbehaves on request (refuses, shrinks, loses answers, goes down), and a Slurm
command that answers what the test says."""

from __future__ import annotations

import dataclasses
import subprocess
from typing import List, Optional, Sequence

from siteagent.backends.base import Backend, BackendUnavailable, ReservationRefused
from siteagent.core.model import BatchReservation, ClusterSnapshot, ReservationSpec
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

    def delete_reservation(self, name: str) -> None:
        self._check()
        self.inner.delete_reservation(name)

    def list_reservations(self) -> List[BatchReservation]:
        self._check()
        return self.inner.list_reservations()


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
