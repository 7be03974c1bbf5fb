"""The jobs that ran in the agent's reservations: recorded each cycle, made final after the window.

Each cycle (:meth:`UsageRecorder.observe`) the snapshot's running jobs whose reservation is one
of the agent's are written to the store (new ones added, known ones marked seen); a job recorded
as running that the snapshot no longer shows ended then, or at its reservation's end if that
came first (the batch system ends it there). Once a reservation is over (:meth:`settle`), its
figures become final: the batch system's accounting replaces them where it keeps any (Slurm with
slurmdbd: exact starts and ends, and the jobs that started and ended between two polls), else the
polls' figures stand, each end known to within one poll interval.

A job belongs to a reservation by the batch system's own record of it (squeue's ``resv_name``,
sacct's ``Reservation``, or in accounting the tag contrib/slurm/job_submit.lua puts in the
admin comment, which only operators may change): the batch system lets a job run in a
reservation only if the reservation admits it, so that is the attribution nobody can fake.
"""

from __future__ import annotations

import logging
from typing import Callable, Dict, List, Optional

from siteagent.backends.base import Backend
from siteagent.core.usage import JobUsage, Usage, UsageSource, usage_of
from siteagent.core.values import ClusterSnapshot
from siteagent.market.lifecycle import ReservationRecord, ReservationState
from siteagent.market.store import Store

log = logging.getLogger("siteagent.usage")

S = ReservationState

#: How long after a reservation's end accounting may still show one of its jobs without an
#: end (seconds): the batch system ends them at the end, and writes the record once the job
#: is gone from the nodes. Past this the figures are made final with what accounting has.
ACCOUNTING_GRACE_S = 600

#: Reservations whose figures can become final: the window is over, or the reservation vanished.
OVER = (S.COMPLETED, S.LOST)


class UsageRecorder:
    """Records the jobs in the agent's reservations (names starting with ``name_prefix``) in
    ``store``, and asks ``backend`` for their accounting once they are over; ``clock`` is the
    batch system's."""

    def __init__(
        self, store: Store, backend: Backend, name_prefix: str, clock: Callable[[], float]
    ) -> None:
        self.store = store
        self.backend = backend
        self.name_prefix = name_prefix
        self.clock = clock

    def observe(self, snapshot: ClusterSnapshot) -> None:
        """Record the jobs running in the agent's reservations, and end those no longer seen."""
        now = snapshot.now
        records: Dict[str, Optional[ReservationRecord]] = {}
        running: Dict[str, List[JobUsage]] = {}
        for job in snapshot.running:
            if not job.reservation.startswith(self.name_prefix):
                continue
            if job.reservation not in records:
                records[job.reservation] = self._recording(job.reservation)
            record = records[job.reservation]
            if record is None:
                continue
            running.setdefault(record.id, []).append(
                JobUsage(job.id, job.user, job.cores, job.nodes, job.start or now)
            )
        self.store.record_running(running, now)
        for reservation_id, jobs in self.store.open_jobs().items():
            seen = {job.job_id for job in running.get(reservation_id, [])}
            gone = [job.job_id for job in jobs if job.job_id not in seen]
            if gone:
                record = self.store.get_reservation(reservation_id)
                end = now if record is None else min(now, record.end)
                self.store.close_jobs(reservation_id, gone, end)

    def _recording(self, name: str) -> Optional[ReservationRecord]:
        """The reservation called ``name`` if its figures are still being recorded."""
        record = self.store.reservation_by_name(name)
        if record is None or self.store.usage_source(record.id) is not None:
            return None
        return record

    def settle(self) -> List[str]:
        """Make the figures of the reservations that are over final; their ids. A failing
        accounting query is raised (the next cycle tries again)."""
        now = int(self.clock())
        settled = []
        for record in self.store.unsettled(OVER):
            end = record.end
            if record.state is S.LOST:  # vanished before its end: nothing ran after that
                end = min(end, int(record.updated))
            if end > now:
                continue
            accounted = self.backend.reservation_jobs(record.name, record.start, end)
            if accounted is None:
                self.store.settle_usage(record.id, UsageSource.POLL, now, end)
            elif any(job.end is None for job in accounted) and now < end + ACCOUNTING_GRACE_S:
                continue  # accounting has not recorded every end yet
            else:
                self.store.settle_usage(record.id, UsageSource.ACCOUNTING, now, end, accounted)
            usage = reservation_usage(self.store, record, now)
            log.info(
                "reservation %s: %d job(s), %.2f core-hours, %.0f%% of what was sold used (%s)",
                record.name,
                len(usage.jobs),
                usage.core_hours,
                100 * usage.utilization,
                usage.source.value,
            )
            settled.append(record.id)
        return settled


def reservation_usage(store: Store, record: ReservationRecord, now: int) -> Usage:
    """A reservation's jobs and what they used of it, as the store has them at ``now``."""
    source = store.usage_source(record.id)
    return usage_of(
        store.reservation_jobs(record.id),
        record.unit,
        record.size,
        record.start,
        record.end,
        now,
        source or UsageSource.POLL,
        final=source is not None,
    )
