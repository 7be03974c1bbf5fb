"""pyslurm's ``Job`` and ``Node`` objects as the records the Slurm backend's parsers read.

The object API (``pyslurm.Jobs.load()``, ``pyslurm.Nodes.load()``) is the same in every
supported release (22.5 on). Its objects are turned into the records ``squeue --json`` and
``sinfo --json`` would give, and :func:`~siteagent.backends.slurm.jobs.parse_jobs` and
:func:`~siteagent.backends.slurm.nodes.parse_nodes` do the rest, so job states, pending
reasons, array remainders, exclusive jobs, where running jobs run and unusable nodes are
interpreted once, the same way for both backends.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from siteagent.backends.slurm.reservations import core_count


def epoch(value: Any) -> int:
    """pyslurm times are epoch ints, None when unset."""
    return int(value) if isinstance(value, (int, float)) and value > 0 else 0


def job_record(job: Any) -> Dict[str, Any]:
    """A ``pyslurm.Job`` as the v0.0.38 ``squeue --json`` record ``parse_jobs`` reads.

    pyslurm gives None for unset values (array fields of plain jobs, unlimited time limits,
    no start yet) exactly where v0.0.38 gives ``null``/``0``, and for an array task id of 0
    too: a task of an array that has no tasks left to split off is task 0. ``resource_sharing``
    ``NO`` is ``--exclusive`` (squeue's ``shared: "none"``). Where a running job runs is its
    resource layout (:func:`job_resources`).
    """
    exclusive = str(getattr(job, "resource_sharing", "") or "").upper() == "NO"
    task = job.array_task_id
    if job.array_id and task is None and not job.array_tasks_waiting:
        task = 0  # an array's task 0: pyslurm reads a task id of 0 as unset
    return {
        "job_id": job.id,
        "job_state": job.state,
        "state_reason": job.state_reason or "",
        "priority": job.priority,
        "user_name": job.user_name or "",
        "account": job.account or "",
        "partition": job.partition or "",
        "resv_name": job.reservation or "",
        "nodes": job.allocated_nodes or "",
        "node_count": job.num_nodes,
        "max_nodes": job.max_nodes or 0,
        "cpus": job.cpus,
        "shared": "none" if exclusive else None,
        "time_limit": job.time_limit,
        "submit_time": epoch(job.submit_time),
        "eligible_time": epoch(job.eligible_time),
        "start_time": epoch(job.start_time),
        "array_job_id": job.array_id or 0,
        "array_task_id": task,
        "array_task_string": job.array_tasks_waiting or "",
        "array_max_tasks": job.array_tasks_parallel or 0,
        "job_resources": job_resources(job.get_resource_layout_per_node()),
    }


def job_resources(layout: Mapping[str, Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """A job's ``get_resource_layout_per_node()`` (node name -> its CPU ids, ``0-3,8``) as
    squeue's ``job_resources``: each node's cores, listed under one socket (the parser counts
    them, whatever the sockets). None for a job that holds nothing (pending).

    pyslurm 22.5 names the ids ``cpu_ids``; some later releases call them ``cpus``.
    """
    nodes: List[Dict[str, Any]] = []
    for name, resources in layout.items():
        ids = resources.get("cpu_ids", resources.get("cpus"))
        count = ids if isinstance(ids, int) else core_count(str(ids or ""))
        cores = {str(core): "allocated" for core in range(count)}
        nodes.append({"nodename": name, "sockets": {"0": {"cores": cores}}})
    return {"allocated_nodes": nodes} if nodes else None


def node_record(node: Any) -> Dict[str, Any]:
    """A ``pyslurm.Node`` as the ``sinfo --json`` record ``parse_nodes`` reads; its state is
    Slurm's complete string (``IDLE+DRAIN``), which the parser splits the same way."""
    memory = node.real_memory
    return {
        "name": node.name,
        "cpus": node.total_cpus,
        "alloc_cpus": node.allocated_cpus,
        "state": client_state(str(node.state or ""), node.allocated_cpus, node.total_cpus),
        "partitions": list(node.partitions or []),
        "real_memory": memory if isinstance(memory, int) else 0,
        "reason": node.reason or "",
        "weight": node.weight,
    }


def client_state(state: str, allocated: Any, total: Any) -> str:
    """A node's state as Slurm's clients show it. slurmctld keeps a partly allocated node
    ALLOCATED; sinfo and scontrol call it MIXED (keeping the flags: ``MIXED+DRAIN``), and so
    does this, so that both backends report the same node the same way."""
    base, plus, flags = state.partition("+")
    partly = isinstance(allocated, int) and isinstance(total, int) and 0 < allocated < total
    return f"MIXED{plus}{flags}" if base.upper() == "ALLOCATED" and partly else state
