"""A stand-in for pyslurm 25.5's object API, backed by an in-memory cluster.

pyslurm is a Cython binding that needs a libslurm of its own version. The test machine has
Slurm 22.05, so the real pyslurm the tests run is 22.5.3 (tests/setup/build-pyslurm), which has
the legacy reservation class; pyslurm's Reservation classes start at 25.5, and this stand-in is
what shows them. The names below are pyslurm's, taken from its published sources
(PySlurm/pyslurm, ``pyslurm/core/job/job.pyx``, ``pyslurm/core/node.pyx``,
``pyslurm/core/reservation.pyx``, ``pyslurm/core/slurmctld/config.pyx``,
``pyslurm/core/error.pyx``); values follow the same
conventions: None for unset numbers and times (``_raw_time``/``u32_parse``), epoch ints for
times, minutes for time limits, states as Slurm's strings, ``RPCError.msg`` =
``slurm_strerror()`` text. Collections are dicts (pyslurm's MultiClusterMap behaves like one
for the local cluster: ``values()``, ``get(name)``).

Tests put this directory first on ``sys.path`` and drive :data:`CLUSTER`: nodes, jobs,
reservations, the controller's configuration, an outage (``CLUSTER.down``) or a hang
(``CLUSTER.hang``; unlike the real pyslurm, which holds the GIL through a call, the stand-in
lets the backend's timeout fire).
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

__version__ = "25.5.0"

CONNECT_FAILURE = "Unable to contact slurm controller (connect failure)"


class PyslurmError(Exception):
    pass


class RPCError(PyslurmError):
    """pyslurm.RPCError: ``errno`` and ``msg`` (Slurm's error string)."""

    def __init__(self, errno: int = -1, msg: Optional[str] = None) -> None:
        self.errno = errno
        self.msg = msg or f"Slurm error {errno}"
        super().__init__(self.msg)


class ReservationFlags(enum.Flag):
    """pyslurm.ReservationFlags (the member names; values are arbitrary bits here)."""

    MAINTENANCE = enum.auto()
    MAGNETIC = enum.auto()
    FLEX = enum.auto()
    IGNORE_RUNNING_JOBS = enum.auto()
    ANY_NODES = enum.auto()
    STATIC_NODES = enum.auto()
    PARTITION_NODES_ONLY = enum.auto()
    USER_DELETION = enum.auto()
    PURGE = enum.auto()
    SPECIFIC_NODES = enum.auto()
    NO_JOB_HOLD_AFTER_END = enum.auto()
    OVERLAP = enum.auto()
    ALL_NODES = enum.auto()
    REPLACE_DOWN = enum.auto()


# --------------------------------------------------------------------------- the cluster


@dataclass
class Cluster:
    """What slurmctld would hold. ``users`` are the names Slurm accepts (passwd); ``config``
    the ``slurmctld.Config`` attributes (the test cluster's scheduling, by default)."""

    nodes: Dict[str, Node] = field(default_factory=dict)
    jobs: Dict[int, Job] = field(default_factory=dict)
    reservations: Dict[str, Reservation] = field(default_factory=dict)
    users: List[str] = field(default_factory=lambda: ["root", "alice"])
    config: Dict[str, Any] = field(
        default_factory=lambda: {
            "select_type": "select/cons_tres",
            "scheduler_type": "sched/backfill",
            "scheduler_parameters": {"bf_interval": "5", "bf_continue": True},
            "kill_wait_time": 5,
        }
    )
    down: bool = False
    hang: Optional[threading.Event] = None
    calls: List[str] = field(default_factory=list)

    def rpc(self, name: str) -> None:
        """Every RPC passes here: recorded, then blocked or refused as the test set up."""
        self.calls.append(name)
        if self.hang is not None:
            self.hang.wait(30)
        if self.down:
            raise RPCError(msg=CONNECT_FAILURE)

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]

    def free_cpus(self, start: int, end: int, ignore_jobs: bool) -> int:
        usable = sum(n.total_cpus for n in self.nodes.values() if "DRAIN" not in n.state)
        held = sum(
            r.cpus or 0
            for r in self.reservations.values()
            if r.start_time < end and start < r.end_time
        )
        running = (
            0 if ignore_jobs else sum(j.cpus for j in self.jobs.values() if j.state == "RUNNING")
        )
        return usable - held - running


CLUSTER = Cluster()


# --------------------------------------------------------------------------- jobs and nodes


class Job:
    """pyslurm.Job: read-only attributes of a loaded job (the ones the agent reads), and
    ``resource_layout``, what ``get_resource_layout_per_node()`` answers (node name -> its
    ``cpus``, the CPU ids as ``0-3,8``)."""

    def __init__(self, job_id: int, **attrs: Any) -> None:
        self.id = job_id
        self.name = attrs.pop("name", f"job{job_id}")
        self.state = attrs.pop("state", "PENDING")
        self.state_reason = attrs.pop("state_reason", "None")
        self.priority = attrs.pop("priority", 4294901759)
        self.user_name = attrs.pop("user_name", "alice")
        self.account = attrs.pop("account", None)
        self.partition = attrs.pop("partition", "batch")
        self.reservation = attrs.pop("reservation", None)
        self.allocated_nodes = attrs.pop("allocated_nodes", None)
        self.num_nodes = attrs.pop("num_nodes", 1)
        self.max_nodes = attrs.pop("max_nodes", None)
        self.cpus = attrs.pop("cpus", 1)
        self.resource_sharing = attrs.pop("resource_sharing", "OK")
        self.time_limit = attrs.pop("time_limit", 60)
        self.submit_time = attrs.pop("submit_time", None)
        self.eligible_time = attrs.pop("eligible_time", None)
        self.start_time = attrs.pop("start_time", None)
        self.end_time = attrs.pop("end_time", None)
        self.array_id = attrs.pop("array_id", None)
        self.array_task_id = attrs.pop("array_task_id", None)
        self.array_tasks_waiting = attrs.pop("array_tasks_waiting", None)
        self.array_tasks_parallel = attrs.pop("array_tasks_parallel", None)
        self._layout: Dict[str, Dict[str, Any]] = attrs.pop("resource_layout", {})
        self.cluster = "linux"
        if attrs:
            raise TypeError(f"not a pyslurm.Job attribute: {sorted(attrs)}")

    def __repr__(self) -> str:
        return f"pyslurm.Job({self.id})"

    def get_resource_layout_per_node(self) -> Dict[str, Dict[str, Any]]:
        return self._layout


class Jobs(dict):  # type: ignore[type-arg]
    @staticmethod
    def load(preload_passwd_info: bool = False, frozen: bool = False) -> Jobs:
        CLUSTER.rpc("slurm_load_jobs")
        return Jobs(CLUSTER.jobs)


class Node:
    """pyslurm.Node: name, CPUs, complete state string (``IDLE+DRAIN``), partitions (the
    allocated CPUs are ``allocated_cpus``, as in pyslurm 22.5.3 and its releases since)."""

    def __init__(self, name: str, **attrs: Any) -> None:
        self.name = name
        self.total_cpus = attrs.pop("total_cpus", 16)
        self.allocated_cpus = attrs.pop("allocated_cpus", 0)
        self.state = attrs.pop("state", "IDLE")
        self.partitions = attrs.pop("partitions", ["batch"])
        self.real_memory = attrs.pop("real_memory", 64000)
        self.reason = attrs.pop("reason", None)
        self.weight = attrs.pop("weight", 1)
        self.cluster = "linux"
        if attrs:
            raise TypeError(f"not a pyslurm.Node attribute: {sorted(attrs)}")


class Nodes(dict):  # type: ignore[type-arg]
    @staticmethod
    def load(preload_passwd_info: bool = False) -> Nodes:
        CLUSTER.rpc("slurm_load_node")
        return Nodes(CLUSTER.nodes)


# --------------------------------------------------------------------------- configuration


class Config(SimpleNamespace):
    """pyslurm.slurmctld.Config: the controller's configuration, as attributes."""

    @staticmethod
    def load() -> Config:
        CLUSTER.rpc("slurm_load_ctl_conf")
        return Config(**CLUSTER.config)


slurmctld = SimpleNamespace(Config=Config)


# --------------------------------------------------------------------------- reservations


class Reservation:
    """pyslurm.Reservation: attributes set in order (end_time checks the start already set),
    ``create()`` with pyslurm's own precondition, ``delete()`` by name. A created one is on
    the nodes asked for, else on the first nodes; a core reservation fills them in turn and
    lists its cores on each (``cpu_ids_by_node``)."""

    def __init__(self, name: Optional[str] = None, **kwargs: Any) -> None:
        self.name = name
        self.start_time: Optional[int] = None
        self._end_time: Optional[int] = None
        self.cpus: Optional[int] = None
        self.node_count: Optional[int] = None
        self.nodes: Optional[str] = None
        self.partition: Optional[str] = None
        self.users: List[str] = []
        self.accounts: List[str] = []
        self.flags = ReservationFlags(0)
        self.tres: Dict[str, Any] = {}
        self.cpu_ids_by_node: Dict[str, str] = {}
        self.cluster = "linux"
        for key, value in kwargs.items():
            setattr(self, key, value)

    @property
    def end_time(self) -> Optional[int]:
        return self._end_time

    @end_time.setter
    def end_time(self, val: int) -> None:
        if self.start_time and val < self.start_time:
            raise ValueError("end_time cannot be earlier then start_time.")
        self._end_time = val

    @property
    def duration(self) -> int:
        if self.start_time and self._end_time and self._end_time >= self.start_time:
            return int((self._end_time - self.start_time) / 60)
        return 0

    def create(self) -> Reservation:
        if not self.start_time or not (self.duration and self.end_time):
            raise RPCError(
                msg="You must at least specify a start_time,  combined with an end_time or a "
                "duration."
            )
        CLUSTER.rpc("slurm_create_reservation")
        assert self.name is not None
        if self.name in CLUSTER.reservations:
            raise RPCError(msg="Duplicate reservation name")
        if self.partition and not any(
            self.partition in n.partitions for n in CLUSTER.nodes.values()
        ):
            raise RPCError(msg="Invalid partition name specified")
        if any(u not in CLUSTER.users for u in self.users):
            raise RPCError(msg="Invalid user id")
        end = self.end_time or 0
        free = CLUSTER.free_cpus(
            self.start_time, end, ReservationFlags.IGNORE_RUNNING_JOBS in self.flags
        )
        names = self.nodes.split(",") if self.nodes else list(CLUSTER.nodes)
        if self.node_count:
            names = names[: self.node_count]
        wanted = self.cpus or sum(CLUSTER.nodes[name].total_cpus for name in names)
        if wanted > free:
            raise RPCError(msg="Requested nodes are busy")
        held = _spread(names, wanted) if self.cpus else {}
        stored = Reservation(self.name)
        stored.start_time, stored.end_time = self.start_time, end
        stored.nodes = ",".join(held or names)
        stored.cpus, stored.node_count = wanted, len(held or names)
        stored.cpu_ids_by_node = held
        stored.partition = self.partition or "batch"
        stored.users, stored.accounts = list(self.users), list(self.accounts)
        stored.flags = self.flags | ReservationFlags.SPECIFIC_NODES
        stored.tres = {"cpu": wanted}
        CLUSTER.reservations[self.name] = stored
        return self

    def delete(self) -> None:
        if not self.name:
            raise RPCError(msg="No Reservation name was specified.")
        CLUSTER.rpc("slurm_delete_reservation")
        if self.name not in CLUSTER.reservations:
            raise RPCError(errno=2053, msg="Requested reservation is invalid")
        if any(j.reservation == self.name and j.state == "RUNNING" for j in CLUSTER.jobs.values()):
            raise RPCError(msg="Requested reservation is in use")
        del CLUSTER.reservations[self.name]


def _spread(nodes: List[str], cpus: int) -> Dict[str, str]:
    """The CPU ids a core reservation holds on each of ``nodes``: each node filled in turn."""
    out = {}
    for name in nodes:
        take = min(cpus, CLUSTER.nodes[name].total_cpus)
        if take:
            out[name] = f"0-{take - 1}" if take > 1 else "0"
        cpus -= take
    return out


class Reservations(dict):  # type: ignore[type-arg]
    @staticmethod
    def load() -> Reservations:
        CLUSTER.rpc("slurm_load_reservations")
        return Reservations(CLUSTER.reservations)
