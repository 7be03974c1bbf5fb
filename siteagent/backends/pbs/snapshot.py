"""The planner's view of the configured PBS queue, from what the clients reported."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, Iterable, List, Sequence

from siteagent.backends.pbs.config import PbsConfig
from siteagent.backends.pbs.jobs import EXCLUSIVE_PLACE, PbsJobs
from siteagent.backends.pbs.nodes import FORCED_EXCLUSIVE, PbsNode
from siteagent.backends.pbs.reservations import HOLDING_STATES, PbsReservation
from siteagent.backends.pbs.values import exec_vnodes
from siteagent.backends.scope import Scope
from siteagent.core.values import Allocation, BatchReservation, ClusterSnapshot, Job, Placement


def vnodes_in_queue(nodes: Iterable[PbsNode], queue: str) -> List[PbsNode]:
    """Vnodes serving ``queue``: associated with it, or with no queue (shared by all)."""
    return [n for n in nodes if not queue or not n.node.partitions or queue in n.node.partitions]


def build_snapshot(
    now: int,
    nodes: Sequence[PbsNode],
    jobs: PbsJobs,
    reservations: Sequence[PbsReservation],
    config: PbsConfig,
    server: str = "",
) -> ClusterSnapshot:
    """Assemble the planner's view, limited to the configured queue.

    Capacity and running jobs are counted as :class:`~siteagent.backends.scope.Scope` says. A
    job placed ``excl``, or any job where every vnode forces exclusive use, takes whole vnodes:
    a running one the cores of its vnodes, a pending one at least ``nodect`` x cores per node.
    Reservations count while they hold vnodes (confirmed or running; not unconfirmed or being
    deleted), and jobs in a reservation queue name the reservation as the snapshot names it.
    Running jobs and reservations carry the CPUs they hold on each vnode (whole vnodes where
    placed ``excl``): new reservations are placed beside them as pbs_sched places them
    (placement PBS, docs/pbs.md §11.5).
    """
    served = vnodes_in_queue(nodes, config.queue)
    scope = Scope(tuple(n.node for n in served), config.unit)
    by_name = {n.name: n for n in scope.nodes}
    cores_per_node = scope.cores_per_node
    usable = [n for n in served if n.node.usable]
    forced = bool(usable) and all(n.sharing in FORCED_EXCLUSIVE for n in usable)

    held = [
        r
        for r in reservations
        if r.state in HOLDING_STATES
        and r.record.end > now
        and (not config.queue or set(exec_vnodes(r.record.node_list)) & set(by_name))
    ]
    names = {r.queue: r.record.name for r in reservations}

    def whole_vnodes(on: Sequence[str]) -> Allocation:
        return tuple((v, by_name[v].cores) for v in on if v in by_name)

    def settle(job: Job) -> Job:
        if job.reservation:
            job = replace(job, reservation=names.get(job.reservation, job.reservation))
        if job.id in jobs.exclusive or forced:
            on = [by_name[v] for v in jobs.nodes_of.get(job.id, []) if v in by_name]
            whole = sum(n.cores for n in on) if on else job.nodes * cores_per_node
            allocation = whole_vnodes(jobs.nodes_of.get(job.id, [])) or job.allocation
            job = replace(job, cores=max(job.cores, whole), allocation=allocation)
        return job

    def settle_reservation(res: BatchReservation) -> BatchReservation:
        if forced or EXCLUSIVE_PLACE & set(res.flags):
            return replace(res, allocation=whole_vnodes(res.node_names) or res.allocation)
        return res

    def in_queue(job: Job) -> bool:
        return not config.queue or job.partition == config.queue or job.reservation in names

    running, dropped = scope.running(jobs.running, jobs.nodes_of, in_queue)
    pending = [settle(j) for j in jobs.pending if in_queue(j)]
    extra: Dict[str, Any] = {
        "pbs_server": server,
        "reservation_ids": {r.record.name: r.id for r in reservations},
        "running_on_unusable_nodes": dropped,
        "arrays_expanded": list(jobs.arrays_expanded),
        "finished_jobs_ignored": jobs.finished,
    }
    running = [settle(j) for j in running]
    records = [settle_reservation(r.record) for r in held]
    snapshot = scope.snapshot(now, running, pending, records, "pbs", extra)
    return replace(snapshot, placement=Placement.PBS)
