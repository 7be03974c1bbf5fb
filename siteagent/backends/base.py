"""The interface every batch-system adapter implements, and the errors it may raise.

The core only ever talks to a Backend, so the reservation lifecycle, the agent loop and the tests
run unchanged on the SWF replay, a real Slurm, or the PBS stand-in.
"""

from __future__ import annotations

import abc
import dataclasses
import time
from typing import List, Optional, Tuple

from siteagent.core.errors import SiteagentError
from siteagent.core.usage import JobUsage
from siteagent.core.values import BatchReservation, ClusterSnapshot, ReservationSpec


class BackendError(SiteagentError):
    """The batch system could not do what was asked; the message is the batch system's own."""

    code = "backend_error"


class BackendUnavailable(BackendError):
    """The batch system did not answer (controller down, command hung, garbage output).

    Distinct from an empty cluster: callers answer 503 and retry, they never plan on it.
    """

    code = "backend_unavailable"


class ReservationRefused(BackendError):
    """The batch system refused a reservation (capacity gone, invalid user, ...)."""


class Backend(abc.ABC):
    """A batch system, seen through the four operations the agent needs."""

    #: short name used in logs, metrics labels and the API ("swf", "slurm", "pbs", ...)
    name: str = "backend"

    @abc.abstractmethod
    def snapshot(self) -> ClusterSnapshot:
        """The cluster now: nodes, running and pending jobs, reservations."""

    @abc.abstractmethod
    def create_reservation(self, spec: ReservationSpec) -> BatchReservation:
        """Create a reservation and return it as the batch system reports it afterwards.

        The returned record is read back from the batch system, so a reservation that was
        silently shrunk shows its real size; the caller compares it with ``spec``.
        """

    @abc.abstractmethod
    def delete_reservation(self, name: str) -> None:
        """Delete a reservation; deleting one that does not exist is not an error."""

    @abc.abstractmethod
    def list_reservations(self) -> List[BatchReservation]:
        """Every reservation the batch system holds, ours and others'."""

    def held_window(self, start: int, end: int) -> Tuple[int, int]:
        """The window the batch system holds for a reservation asked for over [start, end):
        what an accept must find room for (Slurm rounds durations up to whole minutes)."""
        return start, end

    def occupancy(self) -> ClusterSnapshot:
        """The cluster now without its queue: nodes, running jobs, reservations.

        What an accept's re-check needs (queued jobs are planned around a reservation, never
        in its way), so a backend that can leave the queue out answers faster on a long one.
        """
        return dataclasses.replace(self.snapshot(), pending=())

    def reservation_jobs(self, name: str, start: int, end: int) -> Optional[List[JobUsage]]:
        """The jobs that ran in reservation ``name`` over [start, end), exactly, from the batch
        system's accounting; None when it keeps none the agent can read (the default), and
        the agent counts from its polls instead."""
        return None

    def now(self) -> int:
        """The batch system's clock (epoch seconds): wall time, except on a replayed cluster."""
        return int(time.time())

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release whatever the backend holds (processes, sockets). Default: nothing."""
