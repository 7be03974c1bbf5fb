"""Jobs as ``squeue`` shows them: the JSON of either layout, and the text of the running ones.

Finished jobs are dropped here because JSON ignores squeue's filters (docs/slurm.md §3); the
text form is what ``-t`` filters work on, so an accept's re-check reads only the running jobs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

from siteagent.backends.slurm.hostlist import array_indices, expand_hostlist
from siteagent.backends.slurm.layout import (
    as_text,
    check_errors,
    is_infinite,
    number,
    state_words,
)
from siteagent.backends.slurm.times import parse_slurm_time, parse_time_limit
from siteagent.core.values import UNLIMITED_S, Allocation, Job

#: Pending reasons under which a job cannot start whatever the free capacity.
BLOCKED_REASONS = frozenset(
    {
        "JobHeldUser",
        "JobHeldAdmin",
        "Dependency",
        "DependencyNeverSatisfied",
        "BadConstraints",
        "PartitionDown",
        "PartitionInactive",
        "InvalidAccount",
        "InvalidQOS",
    }
)
#: Base states of jobs that hold resources (suspended jobs keep their allocation).
RUNNING_STATES = frozenset({"running", "completing", "configuring", "suspended", "resizing"})
PENDING_STATES = frozenset({"pending", "requeued", "requeue_hold", "requeue_fed"})


@dataclass
class SlurmJobs:
    """Jobs read from ``squeue --json``, already normalised and ordered.

    ``pending`` is in Slurm's order (priority descending, then submit time). ``nodes_of``
    holds running jobs' node names; ``qos_of`` every job's QoS; ``array_throttle`` an array id
    to its ``%N`` limit.
    """

    running: List[Job] = field(default_factory=list)
    pending: List[Job] = field(default_factory=list)
    nodes_of: Dict[str, List[str]] = field(default_factory=dict)
    qos_of: Dict[str, str] = field(default_factory=dict)
    array_throttle: Dict[str, int] = field(default_factory=dict)
    finished: int = 0


def _job_id(rec: Mapping[str, Any]) -> str:
    """Slurm's display id: ``A_T`` for a started array task, else the numeric id."""
    array_id = number(rec.get("array_job_id")) or 0
    task = number(rec.get("array_task_id"))
    if array_id and task is not None:
        return f"{array_id}_{task}"
    return str(number(rec.get("job_id")) or rec.get("job_id"))


def _limit_s(rec: Mapping[str, Any]) -> int:
    """Time limit in seconds; ``null``/infinite/unset mean unlimited (``UNLIMITED_S``)."""
    raw = rec.get("time_limit")
    minutes = None if is_infinite(raw) else number(raw)
    return minutes * 60 if minutes and minutes > 0 else UNLIMITED_S


def _max_nodes(rec: Mapping[str, Any]) -> int:
    """The most nodes the job asked for; 0 if it named none. From 26.05 slurmctld sets the
    task count there itself, flagged ``JOB_IMPLICIT_MAX_NODES`` ("scheduled as min_nodes
    only", job_mgr.c): that is no request."""
    flags = rec.get("flags")
    if isinstance(flags, list) and "JOB_IMPLICIT_MAX_NODES" in flags:
        return 0
    return number(rec.get("max_nodes")) or 0


def _named(rec: Mapping[str, Any], ids: Set[str]) -> bool:
    """Whether ``ids`` names the job, or a task of its array remainder (``A_I``)."""
    if _job_id(rec) in ids:
        return True
    array_id = number(rec.get("array_job_id")) or 0
    return bool(array_id) and any(i.startswith(f"{array_id}_") for i in ids)


def _is_exclusive(rec: Mapping[str, Any]) -> bool:
    shared = rec.get("shared")
    if isinstance(shared, list):
        return any(str(s).lower() == "none" for s in shared)
    return isinstance(shared, str) and shared.lower() == "none"


#: ``squeue -O`` columns of a pending job's exclusivity, which 26.05's JSON no longer says.
EXCLUSIVE_FORMAT = "JobArrayID:64,Exclusive:16"


def parse_exclusive_text(text: str) -> Set[str]:
    """Ids of the jobs ``squeue -h -r -O JobArrayID,Exclusive`` shows holding whole nodes
    (``NODE``): from 26.05 ``squeue --json`` drops the job's ``shared`` field (its
    data_parser v0.0.45 lists it as removed) and leaves ``--exclusive`` nowhere else."""
    out = set()
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and words[1].upper() == "NODE":
            out.add(words[0])
    return out


def parse_jobs(
    doc: Mapping[str, Any],
    now: int,
    cores_per_node: int = 1,
    exclusive: Optional[Set[str]] = None,
) -> SlurmJobs:
    """Running and pending jobs of a ``squeue --json`` document (either layout).

    Finished jobs are dropped here because JSON ignores squeue's filters (docs/slurm.md §3). A
    pending array remainder becomes one Job per pending index (``A_I``), each with the per-task
    size, since Slurm starts them as separate jobs; Slurm's expected start goes on the first
    only. Pending ``--exclusive`` jobs report ``cpus`` 1, so they count whole nodes of
    ``cores_per_node``. ``exclusive``, when given, names the jobs holding whole nodes
    (:func:`parse_exclusive_text`, for releases whose JSON does not say).
    """
    check_errors(doc, "squeue")
    out = SlurmJobs()
    keyed: List[Tuple[int, int, int, int, Job]] = []
    for seq, rec in enumerate(doc.get("jobs") or []):
        base, _flags = state_words(rec.get("job_state"))
        if base in RUNNING_STATES:
            job = _running_job(rec)
            out.running.append(job)
            out.nodes_of[job.id] = expand_hostlist(as_text(rec.get("nodes")))
            out.qos_of[job.id] = as_text(rec.get("qos"))
        elif base in PENDING_STATES:
            priority = number(rec.get("priority")) or 0
            for idx, job in enumerate(_pending_jobs(rec, now, cores_per_node, out, exclusive)):
                keyed.append((-priority, job.submit, seq, idx, job))
                out.qos_of[job.id] = as_text(rec.get("qos"))
        else:
            out.finished += 1
    keyed.sort(key=lambda k: k[:4])
    out.pending = [k[4] for k in keyed]
    out.running.sort(key=lambda j: (j.start or 0, j.id))
    return out


def with_levels(jobs: SlurmJobs, levels: Mapping[str, int]) -> SlurmJobs:
    """The jobs with their absolute priorities, the levels of their QoS (``qos_levels``: where
    Slurm preempts by QoS, ``PreemptType=preempt/qos``; docs/english-auction.md §5); a QoS
    not listed has none (0)."""
    if not levels:
        return jobs

    def levelled(job: Job) -> Job:
        return dataclasses.replace(
            job, absolute_priority=levels.get(jobs.qos_of.get(job.id, ""), 0)
        )

    return dataclasses.replace(
        jobs,
        running=[levelled(job) for job in jobs.running],
        pending=[levelled(job) for job in jobs.pending],
    )


def _allocation(rec: Mapping[str, Any], cpus: int) -> Allocation:
    """The CPUs a running job holds on each node, from ``job_resources`` (v0.0.38: each
    allocated node's ``sockets`` map lists its cores; its CPU counters are not filled in
    22.05). Cores are scaled to the job's CPUs when a core has several threads. Empty when the
    document does not say."""
    resources = rec.get("job_resources")
    nodes = resources.get("allocated_nodes") if isinstance(resources, Mapping) else None
    if not isinstance(nodes, list):
        return _node_allocation(resources)
    counted: List[Tuple[str, int]] = []
    for node in nodes:
        sockets = node.get("sockets") if isinstance(node, Mapping) else None
        if not isinstance(sockets, Mapping):
            return ()
        cores = sum(len(s.get("cores") or ()) for s in sockets.values() if isinstance(s, Mapping))
        counted.append((as_text(node.get("nodename")), cores))
    total = sum(cores for _, cores in counted)
    if not total or any(not name for name, _ in counted):
        return ()
    threads = max(1, cpus // total) if cpus > total else 1
    return tuple((name, cores * threads) for name, cores in counted)


def _node_allocation(resources: Any) -> Allocation:
    """data_parser's ``job_resources.nodes.allocation`` (23.02 on): each node with the CPUs
    the job holds there (``cpus.count``; its ``sockets`` list every core, held or not)."""
    nodes = resources.get("nodes") if isinstance(resources, Mapping) else None
    listed = nodes.get("allocation") if isinstance(nodes, Mapping) else None
    if not isinstance(listed, list):
        return ()
    counted = []
    for node in listed:
        cpus = node.get("cpus") if isinstance(node, Mapping) else None
        count = number(cpus.get("count")) if isinstance(cpus, Mapping) else None
        name = as_text(node.get("name")) if isinstance(node, Mapping) else ""
        if not name or not count:
            return ()
        counted.append((name, count))
    return tuple(counted)


def _running_job(rec: Mapping[str, Any]) -> Job:
    cpus = number(rec.get("cpus")) or 0
    return Job(
        id=_job_id(rec),
        cores=cpus,
        submit=number(rec.get("submit_time")) or 0,
        limit=_limit_s(rec),
        start=number(rec.get("start_time")) or 0,
        nodes=number(rec.get("node_count")) or 0,
        user=as_text(rec.get("user_name")),
        account=as_text(rec.get("account")),
        partition=as_text(rec.get("partition")),
        reservation=as_text(rec.get("resv_name") or rec.get("reservation")),
        allocation=_allocation(rec, cpus),
    )


#: Text squeue columns for the running work (``-t`` filters only work in text form,
#: docs/slurm.md §3): id, cores, submit, start, time limit, node count, user, account,
#: partition, reservation, node list.
RUNNING_FORMAT = "%i|%C|%V|%S|%l|%D|%u|%a|%P|%v|%N"
#: The states squeue -t takes for ``RUNNING_STATES``.
RUNNING_STATE_FILTER = "RUNNING,COMPLETING,CONFIGURING,SUSPENDED,RESIZING"


def parse_running_text(text: str) -> SlurmJobs:
    """Lines of ``squeue -h -t <running states> -o RUNNING_FORMAT`` (times in UTC)."""
    out = SlurmJobs()
    for number_, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != 11:
            raise ValueError(f"squeue line {number_}: expected 11 columns, got {line!r}")
        job_id, cores, submit, start, limit, nodes, user, account, part, resv, node_list = fields
        job = Job(
            id=job_id,
            cores=int(cores),
            submit=parse_slurm_time(submit) or 0,
            limit=parse_time_limit(limit),
            start=parse_slurm_time(start) or 0,
            nodes=int(nodes),
            user=user,
            account="" if account == "(null)" else account,
            partition=part,
            reservation="" if resv == "(null)" else resv,
        )
        out.running.append(job)
        out.nodes_of[job.id] = expand_hostlist(node_list)
    out.running.sort(key=lambda j: (j.start or 0, j.id))
    return out


def _pending_jobs(
    rec: Mapping[str, Any],
    now: int,
    cores_per_node: int,
    out: SlurmJobs,
    whole: Optional[Set[str]] = None,
) -> List[Job]:
    """One pending record as Jobs: one, or one per index for an array remainder."""
    priority = number(rec.get("priority"))
    reason = as_text(rec.get("state_reason"))
    resv = as_text(rec.get("resv_name") or rec.get("reservation"))
    eligible = not (priority == 0 or reason in BLOCKED_REASONS or reason.startswith("Dependency"))
    nodes = number(rec.get("node_count")) or 1
    cores = number(rec.get("cpus")) or 1
    exclusive = _is_exclusive(rec) or (whole is not None and _named(rec, whole))
    if exclusive:
        cores = max(cores, nodes * max(1, cores_per_node))
    start = number(rec.get("start_time")) or 0
    expected = start if eligible and not resv and start > 0 else None
    eligible_time = number(rec.get("eligible_time")) or 0
    not_before = eligible_time if eligible and eligible_time > now else None
    array_id = number(rec.get("array_job_id")) or 0
    task_string = as_text(rec.get("array_task_string"))
    if array_id and number(rec.get("array_task_id")) is None and task_string:
        ids = [f"{array_id}_{i}" for i in array_indices(task_string)]
        throttle = number(rec.get("array_max_tasks")) or 0
        if throttle:
            out.array_throttle[str(array_id)] = throttle
    else:
        ids = [_job_id(rec)]
    jobs = []
    for i, job_id in enumerate(ids):
        jobs.append(
            Job(
                id=job_id,
                cores=cores,
                submit=number(rec.get("submit_time")) or 0,
                limit=_limit_s(rec),
                nodes=nodes,
                user=as_text(rec.get("user_name")),
                account=as_text(rec.get("account")),
                partition=as_text(rec.get("partition")),
                expected_start=expected if i == 0 else None,
                eligible=eligible,
                not_before=not_before,
                reservation=resv,
                exclusive=exclusive,
                max_nodes=_max_nodes(rec),
                priority=priority or 0,
            )
        )
    return jobs
