"""Jobs as ``qstat -f -F json -t`` shows them (docs/pbs.md §2): every job with every attribute,
the subjobs of arrays listed (``-t``) so that running subjobs hold their cores."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import UTC, tzinfo
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

from siteagent.backends.pbs.values import (
    array_indices,
    as_text,
    check_header,
    exec_allocation,
    exec_vnodes,
    number,
    owner,
    parse_duration,
    parse_pbs_time,
    select_totals,
)
from siteagent.core import names
from siteagent.core.values import UNLIMITED_S, Job

#: Job states that hold resources (§2.1): running, exiting, suspended (S, U). Suspended jobs
#: may release CPUs depending on the site; counting them keeps the plan conservative.
RUNNING_STATES = frozenset({"R", "E", "S", "U"})
#: Job states of work not started: queued, held, waiting (``-a``), in transit, array begun.
PENDING_STATES = frozenset({"Q", "H", "W", "T", "B"})
#: Placement words of jobs that take whole vnodes.
EXCLUSIVE_PLACE = frozenset({"excl", "exclhost"})


@dataclass
class PbsJobs:
    """Jobs read from ``qstat -f -F json -t``, normalised, in qstat's (submission) order.

    ``nodes_of`` holds running jobs' vnodes; ``exclusive`` the ids of jobs placed ``excl``
    (their cores are settled against the vnodes when the snapshot is built);
    ``arrays_expanded`` the arrays whose subjobs were not listed (qstat without ``-t``),
    whose queued indices were expanded from ``array_indices_remaining``.
    """

    running: List[Job] = field(default_factory=list)
    pending: List[Job] = field(default_factory=list)
    nodes_of: Dict[str, List[str]] = field(default_factory=dict)
    exclusive: Set[str] = field(default_factory=set)
    arrays_expanded: List[str] = field(default_factory=list)
    finished: int = 0


def _resources(rec: Mapping[str, Any]) -> Tuple[int, int, bool]:
    """(cores, chunks, exclusive placement) of a job's ``Resource_List``."""
    rl = rec.get("Resource_List")
    rl = rl if isinstance(rl, dict) else {}
    chunks, ncpus = 0, 0
    select = rl.get("select")
    if isinstance(select, str):
        try:
            chunks, ncpus = select_totals(select)
        except ValueError:
            chunks, ncpus = 0, 0
    cores = number(rl.get("ncpus")) or ncpus or 1
    nodes = number(rl.get("nodect")) or chunks or 1
    place = set(re.split(r"[:,]", as_text(rl.get("place"))))
    return cores, nodes, bool(place & EXCLUSIVE_PLACE)


def _job(job_id: str, rec: Mapping[str, Any], tz: tzinfo, now: int, start: Optional[int]) -> Job:
    state = as_text(rec.get("job_state"))
    cores, nodes, _ = _resources(rec)
    rl = rec.get("Resource_List")
    walltime = parse_duration(rl.get("walltime")) if isinstance(rl, dict) else None
    submit = parse_pbs_time(rec.get("ctime"), tz) or parse_pbs_time(rec.get("qtime"), tz) or 0
    queue = as_text(rec.get("queue"))
    execution = parse_pbs_time(rec.get("Execution_Time"), tz)
    # held, or waiting with no start time to wait for: a failed stage-in (§2.1)
    held = (
        state == "H"
        or as_text(rec.get("Hold_Types", "n")) not in ("", "n")
        or (state == "W" and execution is None)
    )
    expected = None
    estimated = rec.get("estimated")
    in_reservation = names.is_valid(names.PBS_RESERVATION_ID, queue)
    if isinstance(estimated, dict) and not held and not in_reservation:
        expected = parse_pbs_time(estimated.get("start_time"), tz)
    allocation = exec_allocation(rec.get("exec_vnode")) if start is not None else ()
    if start is not None:
        nodes = len(exec_vnodes(rec.get("exec_vnode"))) or nodes
    return Job(
        id=job_id,
        cores=cores,
        submit=submit,
        limit=walltime if walltime and walltime > 0 else UNLIMITED_S,
        start=start,
        nodes=nodes,
        user=owner(rec.get("Job_Owner") or rec.get("euser")),
        account=as_text(rec.get("Account_Name")),
        partition=queue,
        expected_start=expected,
        eligible=not held,
        not_before=execution if execution is not None and execution > now else None,
        reservation=queue if in_reservation else "",
        allocation=allocation,
    )


def _array_parent(job_id: str) -> str:
    """``123[4].server`` → ``123[].server``; other ids unchanged."""
    return re.sub(r"\[\d+\]", "[]", job_id, count=1)


def parse_jobs(doc: Mapping[str, Any], now: int, tz: tzinfo = UTC) -> PbsJobs:
    """Running and pending jobs of a ``qstat -f -F json [-t]`` document.

    A missing ``Jobs`` key is an empty queue (§2). Finished, moved and expired jobs (history
    with ``-x``) are counted and dropped. Held jobs (state H or a hold type) are not eligible;
    ``Execution_Time`` in the future becomes ``not_before``; ``estimated.start_time`` (top jobs
    only, §2.1) becomes ``expected_start``; a job in queue ``R123`` waits for or runs in that
    reservation. An array parent (``123[]``) is dropped when its subjobs are listed (``-t``),
    its estimate (PBS puts it on the parent) going to the first queued subjob; otherwise its
    queued indices become one pending Job each, the size of one subjob.
    """
    check_header(doc, "qstat")
    out = PbsJobs()
    jobs = doc.get("Jobs")
    if jobs is None:
        return out
    if not isinstance(jobs, dict):
        raise ValueError("qstat: 'Jobs' is not an object")
    listed_parents = {_array_parent(j) for j in jobs if re.search(r"\[\d+\]", j)}
    parent_estimates: Dict[str, Optional[int]] = {}
    for job_id, rec in jobs.items():
        if not isinstance(rec, dict):
            raise ValueError(f"qstat: job {job_id} is not an object")
        state = as_text(rec.get("job_state"))
        if state in RUNNING_STATES:
            start = parse_pbs_time(rec.get("stime"), tz)
            job = _job(job_id, rec, tz, now, start if start is not None else now)
            out.running.append(job)
            out.nodes_of[job_id] = exec_vnodes(rec.get("exec_vnode"))
        elif "[]" in job_id:
            if job_id in listed_parents:
                parent_estimates[job_id] = _job(job_id, rec, tz, now, None).expected_start
            else:
                out.pending.extend(_expand_array(job_id, rec, tz, now))
                out.arrays_expanded.append(job_id)
            continue
        elif state in PENDING_STATES:
            out.pending.append(_job(job_id, rec, tz, now, None))
        else:
            out.finished += 1
            continue
        if _resources(rec)[2]:
            out.exclusive.add(job_id)
    for i, job in enumerate(out.pending):
        expected = parent_estimates.pop(_array_parent(job.id), None)
        if expected is not None and job.expected_start is None:
            out.pending[i] = replace(job, expected_start=expected)
    return out


def _expand_array(job_id: str, rec: Mapping[str, Any], tz: tzinfo, now: int) -> List[Job]:
    """One pending Job per queued index; PBS's estimate (on the parent) goes on the first."""
    template = _job(job_id, rec, tz, now, None)
    out: List[Job] = []
    for i in array_indices(as_text(rec.get("array_indices_remaining"))):
        sub = replace(template, id=job_id.replace("[]", f"[{i}]"))
        out.append(sub if not out else replace(sub, expected_start=None))
    return out
