"""Stand-ins for the agent's surroundings inside one process: a clock the test moves, and a
backend that misbehaves on request (refuses, shrinks, loses answers, goes down)."""

from __future__ import annotations

import dataclasses
from typing import List, Optional

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
