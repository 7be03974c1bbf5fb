"""From SWF records to simulated tasks: which jobs can run, their sizes, estimates and arrivals.

The rules, fixed so that two correct simulators agree job for job: a job's processors are field
5 if > 0, else field 8; records with no processors, negative run time or submit time, or more
processors than the cluster are skipped (counted by reason, and reported in one warning once
the whole trace is read); the estimate is field 9 if > 0, else the run time; a job runs
min(run time, estimate).

Load is raised the ways the papers do: inter-arrival times scaled by a factor, and a second
copy of the trace shifted by one week whose jobs are each admitted with probability p.
"""

from __future__ import annotations

import collections
import logging
import random
from dataclasses import dataclass
from typing import Deque, Dict, Iterator, Optional, Tuple

from siteagent.core.machine import Task
from siteagent.sim.swf import SwfJob, SwfReader

log = logging.getLogger("siteagent.sim.workload")

WEEK_S = 7 * 86400

#: Overlay jobs keep their original job number plus this, so output job numbers stay unique.
OVERLAY_JOB_OFFSET = 10_000_000


class UnsimulableJob(ValueError):  # not a SiteagentError: mypyc cannot subclass it here
    """A record (or a trace) the simulator cannot run, with the reason and how to get past
    it."""


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
            raise ValueError(
                f"overlay probability must be in [0, 1], got {self.overlay_probability}"
            )


class Workload:
    """Tasks from an SWF file in arrival order, with the skip and load rules applied.

    ``skip_invalid`` skips records the simulator cannot run (and malformed lines), counting
    them in ``skipped`` by reason and logging one warning with the count and the first one's
    line and reason when the trace has been read to its end (a line that vanishes without a
    word is a job the administrator believes is replayed); without it the first such record
    is an error that names the file, line and reason. ``dropped`` counts overlay jobs not
    admitted. ``exact_estimates`` takes each job's run time as its estimate (the thesis'
    "accurate estimates" experiments).
    """

    def __init__(
        self,
        path: str,
        cores: Optional[int] = None,
        skip_invalid: bool = False,
        scaling: Optional[LoadScaling] = None,
        exact_estimates: bool = False,
    ) -> None:
        self.path = path
        self.exact_estimates = exact_estimates
        self.skip_invalid = skip_invalid
        self.scaling = scaling or LoadScaling()
        self._reader = SwfReader(path, skip_malformed=skip_invalid)
        header_cores = self._reader.header.max_procs
        if cores is None:
            if not header_cores:
                raise UnsimulableJob(
                    f"{path}: the header has no MaxProcs; give the cluster size (--cores, "
                    "or backend.swf.cores for the replay backend)"
                )
            cores = header_cores
        if cores <= 0:
            raise UnsimulableJob(f"cluster size must be positive, got {cores}")
        self.cores = cores
        self.skipped: Dict[str, int] = collections.Counter()
        self._first_unsimulable: Optional[Tuple[int, str]] = None
        self.dropped = 0
        self.header = self._reader.header

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

    @property
    def first_skipped(self) -> Optional[Tuple[int, str]]:
        """(line number, why) of the first line skipped, malformed or not simulable."""
        skipped = [self._reader.first_skipped, self._first_unsimulable]
        found = [first for first in skipped if first is not None]
        return min(found) if found else None

    def close(self) -> None:
        self._reader.close()

    def tasks(self) -> Iterator[Task]:
        """Tasks in arrival order (ties in trace order, the original before the overlay copy).

        Task keys count arrivals from 0; the payload is the record's SwfJob (job number shifted
        by OVERLAY_JOB_OFFSET for overlay copies). This loop runs once per job of traces with
        hundreds of thousands of them, so the rules are written out in it.
        """
        scaling = self.scaling
        overlay = scaling.overlay_probability > 0
        rng = random.Random(scaling.seed)
        shifted: Deque[Task] = collections.deque()
        factor = scaling.interarrival_factor
        first_submit: Optional[int] = None
        last_submit = 0  # submits below it are skipped: negative, or out of order
        order = 0
        cores = self.cores
        for record in self._reader.jobs():
            submit, run, procs = record.submit, record.run, record.procs
            req_procs, req_time = record.req_procs, record.req_time
            if procs <= 0:
                procs = req_procs
            if procs <= 0 or run < 0 or submit < last_submit or procs > cores:
                self._skip(record, procs, last_submit)
                continue
            last_submit = submit
            if factor != 1.0:
                if first_submit is None:
                    first_submit = submit
                submit = first_submit + round((submit - first_submit) * factor)
            estimate = req_time if req_time > 0 and not self.exact_estimates else run
            if overlay:
                while shifted and shifted[0].submit < submit:
                    task = shifted.popleft()
                    task.key = order
                    order += 1
                    yield task
                if rng.random() < scaling.overlay_probability:
                    shifted.append(self._overlay_copy(record, procs, estimate, submit))
                else:
                    self.dropped += 1
            yield Task(order, procs, estimate, submit, run if run < estimate else estimate, record)
            order += 1
        self._report_skipped()
        while shifted:
            task = shifted.popleft()
            task.key = order
            order += 1
            yield task

    def _overlay_copy(self, record: SwfJob, procs: int, estimate: int, submit: int) -> Task:
        copy = record.renumbered(record.job + OVERLAY_JOB_OFFSET)
        run = min(record.run, estimate)
        return Task(-1, procs, estimate, submit + self.scaling.overlay_shift_s, run, copy)

    def _skip(self, record: SwfJob, procs: int, last_submit: int) -> None:
        """Count a record the simulator cannot run, or stop with where and why."""
        if procs <= 0:
            reason = "no processors"
        elif record.submit < 0:
            reason = "negative submit time"
        elif record.run < 0:
            reason = "negative run time"
        elif record.submit < last_submit:
            reason = "submit time earlier than the previous job's"
        else:
            reason = f"more processors than the cluster's {self.cores}"
        if not self.skip_invalid:
            raise UnsimulableJob(
                f"{self.path}:{self._reader.line}: job {record.job}: {reason} "
                "(use --skip-invalid to skip records that cannot be simulated)"
            )
        self.skipped[reason] += 1
        if self._first_unsimulable is None:
            self._first_unsimulable = (self._reader.line, f"job {record.job}: {reason}")

    def _report_skipped(self) -> None:
        """One warning for the whole trace: how many lines were skipped, why, and the first."""
        first = self.first_skipped
        if first is None:
            return
        reasons = ", ".join(
            f"{count} {reason}" for reason, count in sorted(self.skipped_by_reason().items())
        )
        log.warning(
            "%s: %d line(s) skipped as they cannot be simulated (%s); the first is line %d: %s",
            self.path,
            self.skipped_total,
            reasons,
            first[0],
            first[1],
        )
