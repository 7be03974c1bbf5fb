"""From SWF records to simulated tasks: which jobs can run, their sizes, estimates and arrivals.

The rules, fixed so that two correct simulators agree job for job: a job's processors are field
5 if > 0, else field 8; records with no processors, negative run time or submit time, or more
processors than the cluster are skipped (counted by reason); the estimate is field 9 if > 0,
else the run time; a job runs min(run time, estimate).

Load is raised the ways the papers do: inter-arrival times scaled by a factor, and a second
copy of the trace shifted by one week whose jobs are each admitted with probability p.
"""

from __future__ import annotations

import collections
import random
from dataclasses import dataclass
from typing import Deque, Dict, Iterator, Optional, Tuple

from siteagent.scheduling import Task
from siteagent.swf import SwfReader, SwfRecord

WEEK_S = 7 * 86400

#: Overlay jobs keep their original job number plus this, so output job numbers stay unique.
OVERLAY_JOB_OFFSET = 10_000_000


class UnsimulableJob(ValueError):
    """A record the simulator cannot run, with the reason and how to get past it."""


@dataclass(frozen=True)
class LoadScaling:
    """How to raise (or lower) the offered load of a trace."""

    interarrival_factor: float = 1.0
    overlay_probability: float = 0.0
    overlay_shift_s: int = WEEK_S
    seed: int = 1

    def __post_init__(self) -> None:
        if self.interarrival_factor <= 0:
            raise ValueError(f"interarrival factor must be > 0, got {self.interarrival_factor}")
        if not 0.0 <= self.overlay_probability <= 1.0:
            raise ValueError(f"overlay probability must be in [0, 1], got {self.overlay_probability}")


class Workload:
    """Tasks from an SWF file in arrival order, with the skip and load rules applied.

    ``skip_invalid`` skips records the simulator cannot run (and malformed lines), counting
    them in ``skipped`` by reason; without it the first such record is an error that names the
    file, line and reason. ``dropped`` counts overlay jobs not admitted.
    """

    def __init__(
        self,
        path: str,
        cores: Optional[int] = None,
        skip_invalid: bool = False,
        scaling: LoadScaling = LoadScaling(),
    ) -> None:
        self.path = path
        self.skip_invalid = skip_invalid
        self.scaling = scaling
        self._reader = SwfReader(path, skip_malformed=skip_invalid)
        header_cores = self._reader.header.max_procs
        if cores is None:
            if not header_cores:
                raise ValueError(f"{path}: the header has no MaxProcs; give the cluster size (--cores)")
            cores = header_cores
        if cores <= 0:
            raise ValueError(f"cluster size must be positive, got {cores}")
        self.cores = cores
        self.skipped: Dict[str, int] = collections.Counter()
        self.dropped = 0
        self.header = self._reader.header
        self._first_submit = 0

    @property
    def progress(self) -> float:
        return self._reader.progress

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values()) + sum(self._reader.skipped.values())

    def skipped_by_reason(self) -> Dict[str, int]:
        reasons = collections.Counter(self.skipped)
        reasons.update(self._reader.skipped)
        return dict(reasons)

    def close(self) -> None:
        self._reader.close()

    def tasks(self) -> Iterator[Task]:
        """Tasks in arrival order (ties in trace order, the original before the overlay copy)."""
        for order, (record, copy) in enumerate(self._arrivals()):
            yield self._task(record, order, copy)

    def _arrivals(self) -> Iterator[Tuple[SwfRecord, int]]:
        """Records with their copy number (0 original, 1 overlay), merged by submit time.

        Overlay copies wait in a FIFO, already in order because the shift is constant, so the
        merge holds at most one shift's worth of jobs.
        """
        scaling = self.scaling
        if scaling.overlay_probability <= 0:
            for record in self._valid_records():
                yield record, 0
            return
        rng = random.Random(scaling.seed)
        shifted: Deque[Tuple[int, SwfRecord]] = collections.deque()
        for record in self._valid_records():
            submit = self._scaled_submit(record.submit)
            while shifted and shifted[0][0] < submit:
                yield shifted.popleft()[1], 1
            yield record, 0
            if rng.random() < scaling.overlay_probability:
                shifted.append((submit + scaling.overlay_shift_s, record))
            else:
                self.dropped += 1
        while shifted:
            yield shifted.popleft()[1], 1

    def _valid_records(self) -> Iterator[SwfRecord]:
        first = True
        last_submit = -1
        for record in self._reader:
            reason = self._unsimulable(record)
            if reason is None and record.submit < last_submit:
                reason = "submit time earlier than the previous job's"
            if reason is not None:
                if not self.skip_invalid:
                    raise UnsimulableJob(
                        f"{self.path}: job {record.job}: {reason} "
                        "(use --skip-invalid to skip records that cannot be simulated)"
                    )
                self.skipped[reason] += 1
                continue
            if first:
                first = False
                self._first_submit = record.submit
            last_submit = record.submit
            yield record

    def _unsimulable(self, record: SwfRecord) -> Optional[str]:
        procs = record.procs if record.procs > 0 else record.req_procs
        if procs <= 0:
            return "no processors"
        if record.submit < 0:
            return "negative submit time"
        if record.run < 0:
            return "negative run time"
        if procs > self.cores:
            return f"more processors than the cluster's {self.cores}"
        return None

    def _scaled_submit(self, submit: int) -> int:
        factor = self.scaling.interarrival_factor
        if factor == 1.0:
            return submit
        first = self._first_submit
        return first + int(round((submit - first) * factor))

    def _task(self, record: SwfRecord, seq: int, copy: int) -> Task:
        procs = record.procs if record.procs > 0 else record.req_procs
        estimate = record.req_time if record.req_time > 0 else record.run
        submit = self._scaled_submit(record.submit)
        if copy:
            submit += self.scaling.overlay_shift_s
            record = record._replace(job=record.job + OVERLAY_JOB_OFFSET)
        return Task(seq, procs, estimate, submit, run=min(record.run, estimate), payload=record)

