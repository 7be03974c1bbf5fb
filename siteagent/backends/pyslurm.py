"""Slurm through pyslurm's object API: the Slurm backend without child processes.

Why: a site that already runs pyslurm avoids forking ``squeue``/``sinfo``/``scontrol`` on
every poll, and gets the controller's answers as objects rather than text. Jobs and nodes come
from ``pyslurm.Jobs.load()`` / ``pyslurm.Nodes.load()`` (pyslurm 23.2.1+), reservations from
``pyslurm.Reservations.load()``, ``pyslurm.Reservation(...).create()`` and ``.delete()``, which
exist from pyslurm 25.5 on (pyslurm PR #373; earlier releases only have the old dict API).
pyslurm must be built for the local Slurm's major version (pyslurm ``X.Y.*`` for Slurm
``X.Y``), so it is imported lazily and only this backend needs it.

The pyslurm objects are turned into the records ``squeue --json``/``sinfo --json`` would give,
and the Slurm backend's parsers do the rest, so job states, pending reasons, array remainders,
exclusive jobs and unusable nodes are interpreted once, the same way for both backends.
Reservations are validated by the same :func:`~siteagent.backends.slurm.arguments.reservation_args`.

libslurm calls cannot be interrupted, so each runs on one worker thread and the agent stops
waiting after ``SlurmConfig.timeout`` (BackendUnavailable); a call still hanging then delays
the next ones, which time out in turn until the controller answers again.
"""

from __future__ import annotations

import functools
import importlib
import operator
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, TypeVar

from siteagent.backends.base import Backend, BackendError, BackendUnavailable, ReservationRefused
from siteagent.backends.checks import check_ours
from siteagent.backends.slurm.arguments import reservation_args
from siteagent.backends.slurm.config import SlurmConfig
from siteagent.backends.slurm.errors import is_unavailable
from siteagent.backends.slurm.jobs import parse_jobs
from siteagent.backends.slurm.nodes import parse_nodes
from siteagent.backends.slurm.snapshot import build_snapshot, node_cores
from siteagent.backends.slurm.times import parse_slurm_time
from siteagent.core import names
from siteagent.core.model import BatchReservation, CapacityUnit, ClusterSnapshot, ReservationSpec

#: The first pyslurm release with the Reservation/Reservations classes.
MIN_RESERVATION_API = "25.5"

#: scontrol reservation flag names (what SlurmConfig accepts) to pyslurm's ReservationFlags.
FLAG_NAMES: Dict[str, str] = {
    "IGNORE_JOBS": "IGNORE_RUNNING_JOBS",
    "OVERLAP": "OVERLAP",
    "MAINT": "MAINTENANCE",
    "STATIC_ALLOC": "STATIC_NODES",
    "NO_HOLD_JOBS_AFTER": "NO_JOB_HOLD_AFTER_END",
    "REPLACE_DOWN": "REPLACE_DOWN",
}
_SCONTROL_FLAG = {v: k for k, v in FLAG_NAMES.items()}

T = TypeVar("T")


def import_pyslurm(slurm_conf: Optional[str] = None) -> Any:
    """The pyslurm module, or BackendError saying how to install it.

    ``SLURM_CONF`` is set first: libslurm reads it once, when pyslurm initialises on import.
    """
    if slurm_conf:
        os.environ["SLURM_CONF"] = slurm_conf
    try:
        module = importlib.import_module("pyslurm")
    except ImportError as exc:
        raise BackendError(
            f"the pyslurm backend needs pyslurm built for this Slurm: "
            f"pip install pyslurm=={slurm_series() or '<Slurm version, e.g. 25.5>'}.* "
            f"(or use backend.type slurm) [{exc}]"
        ) from exc
    if not hasattr(module, "Reservations"):
        version = getattr(module, "__version__", "?")
        raise BackendError(
            f"pyslurm {version} has no Reservation API (pyslurm >= {MIN_RESERVATION_API} has "
            f"it); upgrade pyslurm together with Slurm, or use backend.type slurm"
        )
    return module


def slurm_series() -> str:
    """The local Slurm's version as pyslurm numbers it (Slurm 25.05.3 → ``25.5``), or "".

    Only used to make the install hint exact; any failure just leaves it out.
    """
    try:
        out = subprocess.run(
            ["scontrol", "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    parts = out.split()[-1].split(".") if out.split() else []
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return ""
    return f"{int(parts[0])}.{int(parts[1])}"


# --------------------------------------------------------------------------- object → record


def _epoch(value: Any) -> int:
    """pyslurm times are epoch ints, None when unset."""
    return int(value) if isinstance(value, (int, float)) and value > 0 else 0


def job_record(job: Any) -> Dict[str, Any]:
    """A ``pyslurm.Job`` as the v0.0.38 ``squeue --json`` record :func:`parse_jobs` reads.

    pyslurm gives None for unset values (array fields of plain jobs, unlimited time limits,
    no start yet) exactly where v0.0.38 gives ``null``/``0``. ``resource_sharing`` ``NO`` is
    ``--exclusive`` (squeue's ``shared: "none"``).
    """
    exclusive = str(getattr(job, "resource_sharing", "") or "").upper() == "NO"
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
        "cpus": job.cpus,
        "shared": "none" if exclusive else None,
        "time_limit": job.time_limit,
        "submit_time": _epoch(job.submit_time),
        "eligible_time": _epoch(job.eligible_time),
        "start_time": _epoch(job.start_time),
        "array_job_id": job.array_id or 0,
        "array_task_id": job.array_task_id,
        "array_task_string": job.array_tasks_waiting or "",
        "array_max_tasks": job.array_tasks_parallel or 0,
    }


def node_record(node: Any) -> Dict[str, Any]:
    """A ``pyslurm.Node`` as the ``sinfo --json`` record :func:`parse_nodes` reads; its state
    is Slurm's complete string (``IDLE+DRAIN``), which the parser splits the same way."""
    memory = getattr(node, "real_memory", 0)
    return {
        "name": node.name,
        "cpus": node.total_cpus,
        "alloc_cpus": node.alloc_cpus,
        "state": node.state,
        "partitions": list(node.partitions or []),
        "real_memory": memory if isinstance(memory, int) else 0,
        "reason": node.reason or "",
    }


def batch_reservation(resv: Any, now: int) -> BatchReservation:
    """A ``pyslurm.Reservation`` as the agent's record. Cores come from TRES ``cpu`` (CPUs,
    the unit jobs use), else the core count, as for ``scontrol show reservation``."""
    tres = resv.tres if isinstance(resv.tres, Mapping) else {}
    cpus = tres.get("cpu")
    start, end = _epoch(resv.start_time), _epoch(resv.end_time)
    return BatchReservation(
        name=resv.name,
        start=start,
        end=end,
        cores=int(cpus) if cpus is not None else int(resv.cpus or 0),
        nodes=int(resv.node_count or 0),
        node_list=resv.nodes or "",
        users=tuple(resv.users or ()),
        accounts=tuple(resv.accounts or ()),
        partition=resv.partition or "",
        flags=flag_names(resv.flags),
        state="ACTIVE" if start <= now < end else "INACTIVE",
    )


def flag_names(flags: Any) -> Tuple[str, ...]:
    """scontrol names of a ReservationFlags value (pyslurm's own name where none maps)."""
    members = [m for m in type(flags) if m.value and m in flags] if flags else []
    return tuple(_SCONTROL_FLAG.get(m.name, m.name) for m in members)


# --------------------------------------------------------------------------- the backend


class PyslurmBackend(Backend):
    """A Slurm cluster through pyslurm (25.5+ for reservations; see the module docstring)."""

    name = "pyslurm"

    def __init__(self, config: Optional[SlurmConfig] = None, module: Any = None) -> None:
        self.config = config or SlurmConfig()
        self.pyslurm = module if module is not None else import_pyslurm(self.config.slurm_conf)
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pyslurm")

    def close(self) -> None:
        self._worker.shutdown(wait=False)

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run one pyslurm call on the worker with the configured timeout; RPCError becomes
        BackendError (BackendUnavailable when the controller did not answer)."""
        future = self._worker.submit(fn)
        try:
            return future.result(timeout=self.config.timeout)
        except FutureTimeout as exc:
            raise BackendUnavailable(
                f"{what} did not answer within {self.config.timeout:g} s"
            ) from exc
        except self.pyslurm.RPCError as exc:
            msg = _rpc_message(exc)
            if is_unavailable(msg):
                raise BackendUnavailable(f"{what}: {msg}") from exc
            raise BackendError(f"{what}: {msg}") from exc

    # ---- reading

    def snapshot(self) -> ClusterSnapshot:
        now = int(time.time())
        nodes = parse_nodes(
            {"nodes": [node_record(n) for n in self._load("Nodes.load", self.pyslurm.Nodes)]}
        )
        jobs_doc = {"jobs": [job_record(j) for j in self._load("Jobs.load", self.pyslurm.Jobs)]}
        reservations = self.list_reservations()
        jobs = parse_jobs(jobs_doc, now, node_cores(nodes, self.config.partition))
        layout = f"pyslurm/{getattr(self.pyslurm, '__version__', '?')}"
        snapshot = build_snapshot(now, nodes, jobs, reservations, self.config, layout)
        return replace(snapshot, backend=self.name)

    def _load(self, what: str, collection: Any) -> List[Any]:
        return self._call(f"pyslurm.{what}", lambda: list(collection.load().values()))

    def list_reservations(self) -> List[BatchReservation]:
        now = int(time.time())
        return [
            batch_reservation(r, now)
            for r in self._load("Reservations.load", self.pyslurm.Reservations)
        ]

    def get_reservation(self, name: str) -> Optional[BatchReservation]:
        """One reservation as Slurm holds it now, or None if there is none of that name."""
        names.check(names.NAME, name, "reservation name")
        found = self._call(
            "pyslurm.Reservations.load", lambda: self.pyslurm.Reservations.load().get(name)
        )
        return batch_reservation(found, int(time.time())) if found is not None else None

    # ---- writing

    def create_reservation(self, spec: ReservationSpec) -> BatchReservation:
        """Create the reservation, then read it back (Slurm may shrink it).

        The request is validated and shaped by the Slurm backend's ``reservation_args`` (start
        not in the past, whole minutes, users or accounts required, allowed flags only) and its
        ``Key=Value`` words are set on a ``pyslurm.Reservation``. A retry that finds its own
        reservation ("Duplicate reservation name", same window) returns it.
        """
        fields = _fields(reservation_args(spec, self.config, int(time.time())))
        start = parse_slurm_time(fields["StartTime"])
        if start is None:  # reservation_args always writes a valid StartTime
            raise ValueError(f"unparsable start time {fields['StartTime']!r}")
        end = start + int(fields["Duration"]) * 60
        resv = self._call("pyslurm.Reservation", lambda: self._reservation(fields, start, end))
        try:
            self._call(f"create reservation {spec.name}", resv.create)
        except BackendUnavailable:
            raise
        except BackendError as exc:
            if "Duplicate reservation name" in str(exc):
                existing = self.get_reservation(spec.name)
                if existing is not None and (existing.start, existing.end) == (start, end):
                    return existing
            raise ReservationRefused(str(exc)) from exc
        made = self.get_reservation(spec.name)
        if made is None:
            raise BackendError(f"reservation {spec.name} was created but cannot be read back")
        return made

    def _reservation(self, fields: Mapping[str, str], start: int, end: int) -> Any:
        """A ``pyslurm.Reservation`` for the validated ``scontrol`` fields (start before end:
        pyslurm's end_time setter compares with the start already set)."""
        resv = self.pyslurm.Reservation(fields["ReservationName"])
        resv.start_time = start
        resv.end_time = end
        if self.config.unit is CapacityUnit.NODE:
            resv.node_count = int(fields["NodeCnt"])
        else:
            resv.cpus = int(fields["CoreCnt"])
        if fields.get("Users"):
            resv.users = fields["Users"].split(",")
        if fields.get("Accounts"):
            resv.accounts = fields["Accounts"].split(",")
        if fields.get("PartitionName"):
            resv.partition = fields["PartitionName"]
        if fields.get("Flags"):
            resv.flags = self._flags(fields["Flags"].split(","))
        return resv

    def _flags(self, names: List[str]) -> Any:
        flag_type = self.pyslurm.ReservationFlags
        missing = [n for n in names if not hasattr(flag_type, FLAG_NAMES[n])]
        if missing:
            raise BackendError(
                f"this pyslurm ({getattr(self.pyslurm, '__version__', '?')}) cannot set "
                f"reservation flag(s) {', '.join(missing)}"
            )
        return functools.reduce(operator.or_, (getattr(flag_type, FLAG_NAMES[n]) for n in names))

    def delete_reservation(self, name: str) -> None:
        """Delete our reservation; a missing one is fine, one in use by jobs is refused, and a
        name without the agent's prefix is never touched (ValueError)."""
        check_ours(name, names.NAME, self.config.name_prefix)
        try:
            self._call(
                f"delete reservation {name}", lambda: self.pyslurm.Reservation(name).delete()
            )
        except BackendUnavailable:
            raise
        except BackendError as exc:
            msg = str(exc)
            if "Requested reservation is invalid" in msg or "doesn't exist" in msg:
                return
            if "in use" in msg:
                raise ReservationRefused(msg) from exc
            raise


def _fields(args: List[str]) -> Dict[str, str]:
    """``Key=Value`` words of an ``scontrol create reservation`` argument list."""
    return dict(a.split("=", 1) for a in args if "=" in a)


def _rpc_message(exc: BaseException) -> str:
    """The Slurm error text of a pyslurm.RPCError (its ``msg``, else its string)."""
    msg = getattr(exc, "msg", None)
    return str(msg) if msg else str(exc)
