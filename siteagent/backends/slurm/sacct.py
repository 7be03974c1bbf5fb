"""Slurm accounting: ``sacct --json`` read into queue waits (:class:`QueueWait`) and into the
jobs that ran in a reservation (:class:`JobUsage`).

Accounting (slurmdbd) knows every job that started, also those that started between two of the
agent's polls, and when each ended to the second. The document layouts are 22.05's
``openapi/dbv0.0.38`` and the data_parser layouts of 23.02+.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Collection, List, Mapping, Optional, Set, Tuple

from siteagent.backends.base import BackendUnavailable
from siteagent.backends.slurm.arguments import SACCT_USAGE_FIELDS
from siteagent.backends.slurm.layout import check_errors, is_infinite, number, state_words
from siteagent.backends.slurm.times import parse_slurm_time
from siteagent.core.usage import JobUsage
from siteagent.core.values import UNLIMITED_S
from siteagent.core.waits import QueueWait

if TYPE_CHECKING:  # the backend runs sacct and reads its answer with this module
    from siteagent.backends.slurm.backend import SlurmBackend

#: Slurm's "no value" markers for 32-bit fields (NO_VAL, INFINITE) as dbv0.0.38 prints them.
_NO_VAL32 = (0xFFFFFFFE, 0xFFFFFFFF)


#: What sacct prints in ``nodes`` for a job that never got an allocation.
_NO_NODES = ("", "None assigned", "(null)")


def _value(value: Any) -> Optional[int]:
    """An integer field of either layout, None when unset, infinite or Slurm's NO_VAL."""
    n = number(value)
    return None if n is None or n in _NO_VAL32 else n


def _cores(rec: Mapping[str, Any]) -> int:
    """Allocated CPUs (``tres.allocated`` type ``cpu``), else the requested ``required.CPUs``."""
    allocated = _object(rec, "tres").get("allocated")
    for item in allocated if isinstance(allocated, list) else []:
        if isinstance(item, dict) and item.get("type") == "cpu":
            count = _value(item.get("count"))
            if count:
                return count
    return _value(_object(rec, "required").get("CPUs")) or 0


def _walltime(times: Mapping[str, Any]) -> int:
    """``time.limit`` (minutes) in seconds; unset, 0 or infinite count as unlimited."""
    raw = times.get("limit")
    minutes = None if is_infinite(raw) else _value(raw)
    return minutes * 60 if minutes else UNLIMITED_S


def _object(rec: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """A nested object of a record, empty when missing or not an object."""
    value = rec.get(key)
    return value if isinstance(value, dict) else {}


def _sacct_job_id(rec: Mapping[str, Any]) -> str:
    """``A_T`` for an array task (as squeue and the agent's snapshots name it), else the id."""
    array = _object(rec, "array")
    array_id = _value(array.get("job_id")) or 0
    task = _value(array.get("task_id"))
    if array_id and task is not None:
        return f"{array_id}_{task}"
    return str(_value(rec.get("job_id")) or rec.get("job_id"))


def waits_from_sacct(document: Mapping[str, Any]) -> List[QueueWait]:
    """The waits of the jobs of a ``sacct --json`` document that started.

    The wait is counted from ``time.eligible`` when it is set and later than the submission
    (a held job, a ``--begin`` job or one with a dependency was not waiting for resources
    before then), else from ``time.submission``; ``QueueWait.submit`` carries that moment.
    Jobs with no start (cancelled while pending, still pending) are left out. An ``errors``
    entry raises BackendUnavailable, as for ``squeue --json``.
    """
    check_errors(document, "sacct")
    out = []
    for rec in document.get("jobs") or []:
        if not isinstance(rec, dict):
            continue
        times = _object(rec, "time")
        start = _value(times.get("start")) or 0
        submit = _value(times.get("submission")) or 0
        eligible = _value(times.get("eligible")) or 0
        base, _flags = state_words(_object(rec, "state").get("current"))
        if start <= 0 or base == "pending" or str(rec.get("nodes") or "") in _NO_NODES:
            continue
        since = eligible if submit < eligible <= start else submit
        out.append(QueueWait(_sacct_job_id(rec), _cores(rec), _walltime(times), since, start))
    return out


#: What the job_submit.lua script of contrib/slurm writes into the admin comment of a job
#: submitted into one of the agent's reservations.
RESERVATION_TAG = "siteagent:reservation="


def reservation_jobs_from_sacct(
    text: str, reservation: str, ids: Collection[str] = ()
) -> List[JobUsage]:
    """The jobs of ``sacct_usage_args``' output that ran in ``reservation``: by the
    reservation accounting names, by its accounting ``ids`` where the name is empty (a job
    that started in the reservation's first second, docs/slurm.md §6.8), or by the tag
    job_submit.lua gave the job (kept in the admin comment even where the reservation's record
    is not). Times are UTC text; a job still running has no end; jobs that never started are
    left out."""
    tag = RESERVATION_TAG + reservation
    out = []
    for number_, fields in _usage_lines(text):
        job_id, user, cores, nodes, start, end, name, resv_id, comment = fields
        unnamed = not name and resv_id in ids
        if name != reservation and not unnamed and tag not in comment.split():
            continue
        started = parse_slurm_time(start)
        if started is None:
            continue
        try:
            out.append(
                JobUsage(job_id, user, int(cores), int(nodes), started, parse_slurm_time(end))
            )
        except ValueError:
            raise BackendUnavailable(f"sacct line {number_}: not a job: {fields!r}") from None
    return out


def unnamed_reservation_ids(text: str) -> Set[str]:
    """The reservation ids of jobs in ``sacct_usage_args``' output whose reservation accounting
    does not name (docs/slurm.md §6.8): if none, the name alone finds every job."""
    ids = set()
    for _number, fields in _usage_lines(text):
        name, resv_id = fields[-3], fields[-2]
        if not name and resv_id not in ("", "0"):
            ids.add(resv_id)
    return ids


def _usage_lines(text: str) -> List[Tuple[int, List[str]]]:
    """The non-empty lines of ``sacct_usage_args``' output split into their fields, numbered."""
    out = []
    for number_, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("|", len(SACCT_USAGE_FIELDS))
        if len(fields) != len(SACCT_USAGE_FIELDS) + 1:
            raise BackendUnavailable(f"sacct line {number_}: unexpected fields in {line!r}")
        out.append((number_, fields))
    return out


def sacct_waits(backend: SlurmBackend, since: int, until: int) -> List[QueueWait]:
    """The waits of the jobs Slurm accounting saw start between ``since`` and ``until``."""
    return [w for w in waits_from_sacct(backend.accounting(since, until)) if w.start >= since]
