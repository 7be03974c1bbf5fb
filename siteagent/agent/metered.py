"""A backend whose operations are timed, and their failures counted, for the metrics.

The wrapper only measures: every call and every exception passes through unchanged.
Exported as docs/admin.md's administrator's guide describes (Metrics).
"""

from __future__ import annotations

import time
from typing import Callable, List, Optional, Protocol, Tuple, TypeVar

from siteagent.backends.base import Backend, BackendUnavailable, ReservationRefused
from siteagent.core.usage import JobUsage
from siteagent.core.values import BatchReservation, ClusterSnapshot, ReservationSpec

_T = TypeVar("_T")


class CallObserver(Protocol):
    """What the wrapper reports to (:class:`~siteagent.agent.metrics.Metrics`)."""

    def observe_backend_call(
        self, backend: str, operation: str, seconds: float, error: Optional[BaseException]
    ) -> None: ...


def error_kind(error: BaseException) -> str:
    """The label of a failed operation: unavailable, refused or error."""
    if isinstance(error, BackendUnavailable):
        return "unavailable"
    if isinstance(error, ReservationRefused):
        return "refused"
    return "error"


class MeteredBackend(Backend):
    """A backend whose operations are timed, and their failures counted, in a Metrics."""

    def __init__(self, inner: Backend, metrics: CallObserver) -> None:
        self.inner = inner
        self.metrics = metrics
        self.name = inner.name

    def _timed(self, operation: str, call: Callable[[], _T]) -> _T:
        began = time.monotonic()
        try:
            result = call()
        except Exception as exc:
            self.metrics.observe_backend_call(self.name, operation, time.monotonic() - began, exc)
            raise
        self.metrics.observe_backend_call(self.name, operation, time.monotonic() - began, None)
        return result

    def snapshot(self) -> ClusterSnapshot:
        return self._timed("snapshot", self.inner.snapshot)

    def occupancy(self) -> ClusterSnapshot:
        return self._timed("occupancy", self.inner.occupancy)

    def create_reservation(self, spec: ReservationSpec) -> BatchReservation:
        return self._timed("create_reservation", lambda: self.inner.create_reservation(spec))

    def delete_reservation(self, name: str) -> None:
        self._timed("delete_reservation", lambda: self.inner.delete_reservation(name))

    def list_reservations(self) -> List[BatchReservation]:
        return self._timed("list_reservations", self.inner.list_reservations)

    def reservation_jobs(self, name: str, start: int, end: int) -> Optional[List[JobUsage]]:
        return self._timed(
            "reservation_jobs", lambda: self.inner.reservation_jobs(name, start, end)
        )

    def now(self) -> int:
        return self.inner.now()

    def held_window(self, start: int, end: int) -> Tuple[int, int]:
        return self.inner.held_window(start, end)

    def close(self) -> None:
        self.inner.close()
