"""Reservations through pyslurm's two APIs, behind one small interface.

pyslurm 22.5 to 24.x have only the legacy ``pyslurm.reservation`` class: dicts in, dicts out,
Slurm's refusals as ``ValueError(message, errno)``. pyslurm 25.5 replaced it with
``pyslurm.Reservation``/``pyslurm.Reservations`` objects and ``pyslurm.RPCError``. Each API has
its adapter here; :mod:`siteagent.backends.pyslurm.versions` says which a release gets. Both
take the request as the ``Key=Value`` fields of the ``scontrol create reservation`` that
:func:`~siteagent.backends.slurm.arguments.reservation_args` validated, so both backends send
Slurm the same request, and both read back what ``scontrol show reservation`` would show.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Dict, List, Mapping, Protocol, Tuple, Type

from siteagent.backends.base import BackendError
from siteagent.backends.pyslurm.records import epoch
from siteagent.backends.pyslurm.versions import ReservationApi, series
from siteagent.backends.slurm.hostlist import expand_hostlist
from siteagent.backends.slurm.reservations import comma_list, core_count, tres_cpu
from siteagent.core.values import Allocation, BatchReservation


class PyslurmReservations(Protocol):
    """One pyslurm release's reservation calls (each one RPC, run on the backend's worker)."""

    #: What the calls raise for Slurm's refusals and outages besides ``pyslurm.RPCError``.
    errors: Tuple[Type[Exception], ...]

    def load(self, now: int) -> Dict[str, BatchReservation]:
        """Every reservation, by name (``now`` tells active from inactive)."""

    def request(self, fields: Mapping[str, str], start: int, end: int) -> Any:
        """The request for these ``scontrol create reservation`` fields (BackendError for one
        this pyslurm cannot make); no RPC yet."""

    def create(self, request: Any) -> None:
        """Create the reservation of a :meth:`request`."""

    def delete(self, name: str) -> None:
        """Delete the reservation ``name``."""


def reservations_for(pyslurm: Any, api: ReservationApi) -> PyslurmReservations:
    """The adapter of ``api`` for the loaded pyslurm module."""
    if api is ReservationApi.OBJECTS:
        return ObjectReservations(pyslurm)
    return LegacyReservations(pyslurm)


def state_at(start: int, end: int, now: int) -> str:
    """scontrol's ``State=``: a reservation is ACTIVE inside its window."""
    return "ACTIVE" if start <= now < end else "INACTIVE"


def _or_flags(names: List[str], flag_of: Mapping[str, str], holder: Any, version: str) -> Any:
    """The pyslurm flag values of scontrol flag ``names`` OR-ed, or BackendError naming the
    ones this pyslurm lacks."""
    missing = [n for n in names if not hasattr(holder, flag_of[n])]
    if missing:
        raise BackendError(
            f"this pyslurm ({version}) cannot set reservation flag(s) {', '.join(missing)}"
        )
    return functools.reduce(operator.or_, (getattr(holder, flag_of[n]) for n in names))


# --------------------------------------------------------------------------- 22.5 to 24.x


#: scontrol reservation flag names (what SlurmConfig accepts) to pyslurm's RESERVE_FLAG_*.
LEGACY_FLAGS: Dict[str, str] = {
    "IGNORE_JOBS": "RESERVE_FLAG_IGN_JOBS",
    "OVERLAP": "RESERVE_FLAG_OVERLAP",
    "MAINT": "RESERVE_FLAG_MAINT",
    "STATIC_ALLOC": "RESERVE_FLAG_STATIC",
    "NO_HOLD_JOBS_AFTER": "RESERVE_FLAG_NO_HOLD_JOBS",
    "REPLACE_DOWN": "RESERVE_FLAG_REPLACE_DOWN",
}


class LegacyReservations:
    """``pyslurm.reservation()``: ``get()`` gives name → dict (times as epochs, ``flags`` as
    scontrol's comma-separated names, ``tres_str`` as a list); ``create`` takes a dict like
    scontrol's words (``duration`` in minutes, ``core_cnt`` a list: one count, or one per
    node of ``node_list``)."""

    errors: Tuple[Type[Exception], ...] = (ValueError,)

    def __init__(self, pyslurm: Any) -> None:
        self.pyslurm = pyslurm
        # releases for Slurm 23.11 and later, whose reservations take one core total
        self.count_is_length = (series(str(pyslurm.__version__)) or (0, 0)) >= (23, 11)

    def load(self, now: int) -> Dict[str, BatchReservation]:
        found = self.pyslurm.reservation().get()
        return {name: legacy_reservation(name, rec, now) for name, rec in found.items()}

    def request(self, fields: Mapping[str, str], start: int, end: int) -> Dict[str, Any]:
        """The ``create`` dict of the scontrol fields: the same Duration, so the same end."""
        request: Dict[str, Any] = {
            "name": fields["ReservationName"],
            "start_time": start,
            "duration": int(fields["Duration"]),
        }
        if fields.get("Nodes"):
            request["node_list"] = NodeList(fields["Nodes"])
        if "NodeCnt" in fields:
            request["node_cnt"] = int(fields["NodeCnt"])
        if "CoreCnt" in fields:
            counts = [int(count) for count in fields["CoreCnt"].split(",")]
            if fields.get("Nodes") and self.count_is_length:
                # pyslurm 24.11.0 sends the *number* of counts as the core count (deprecated.pyx:
                # ``resv_msg.core_cnt = len(core_cnt)``, after checking it equals the nodes'):
                # the node list names a node again per further core; Slurm reads the set
                nodes = expand_hostlist(fields["Nodes"])
                total = sum(counts)
                request["node_list"] = NodeList(",".join(nodes + [nodes[0]] * (total - len(nodes))))
                counts = [1] * total
            request["core_cnt"] = counts
        for key, word in (("users", "Users"), ("accounts", "Accounts")):
            if fields.get(word):
                request[key] = fields[word]
        if fields.get("PartitionName"):
            request["partition"] = fields["PartitionName"]
        if fields.get("Flags"):
            request["flags"] = _or_flags(
                fields["Flags"].split(","), LEGACY_FLAGS, self.pyslurm, self.pyslurm.__version__
            )
        return request

    def create(self, request: Any) -> None:
        self.pyslurm.reservation().create(request)

    def delete(self, name: str) -> None:
        self.pyslurm.reservation().delete(name)


class NodeList(str):
    """A node list for the legacy ``create``, which encodes it and, given core counts too,
    encodes the encoded bytes again to count the nodes (``hostlist.create``; a bytes object has
    no ``encode``, so pyslurm 22.5.3 cannot otherwise reserve cores on named nodes): its
    encoding is bytes that encode as themselves."""

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return _EncodedNodeList(str.encode(self, encoding, errors))


class _EncodedNodeList(bytes):
    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return bytes(self)


def legacy_reservation(name: str, rec: Mapping[str, Any], now: int) -> BatchReservation:
    """One ``pyslurm.reservation().get()`` entry as the agent's record. Cores come from TRES
    ``cpu`` (CPUs, the unit jobs use), else the core count, as for ``scontrol show
    reservation``.

    The legacy API leaves out the cores a core reservation holds on each node (scontrol's
    ``NodeName=... CoreIDs=...``), so the record has its nodes but no ``allocation``; the
    snapshot tells it from the nodes and the total, as it does for the reservations scontrol
    lists without one (exact on one node or whole nodes, never less than the truth else).
    """
    start, end = epoch(rec.get("start_time")), epoch(rec.get("end_time"))
    cpus = tres_cpu(",".join(rec.get("tres_str") or ()))
    node_list = rec.get("node_list") or ""
    return BatchReservation(
        name=name,
        start=start,
        end=end,
        cores=cpus if cpus is not None else int(rec.get("core_cnt") or 0),
        nodes=int(rec.get("node_cnt") or 0),
        node_list=node_list,
        users=tuple(rec.get("users") or ()),
        accounts=tuple(rec.get("accounts") or ()),
        partition=rec.get("partition") or "",
        flags=comma_list(rec.get("flags") or ""),
        state=state_at(start, end, now),
        node_names=tuple(expand_hostlist(node_list)),
    )


# --------------------------------------------------------------------------- 25.5 and later


#: scontrol reservation flag names (what SlurmConfig accepts) to pyslurm's ReservationFlags.
OBJECT_FLAGS: Dict[str, str] = {
    "IGNORE_JOBS": "IGNORE_RUNNING_JOBS",
    "OVERLAP": "OVERLAP",
    "MAINT": "MAINTENANCE",
    "STATIC_ALLOC": "STATIC_NODES",
    "NO_HOLD_JOBS_AFTER": "NO_JOB_HOLD_AFTER_END",
    "REPLACE_DOWN": "REPLACE_DOWN",
}
_SCONTROL_FLAG = {v: k for k, v in OBJECT_FLAGS.items()}


class ObjectReservations:
    """``pyslurm.Reservations.load()``, ``pyslurm.Reservation(...).create()`` and
    ``.delete()``; refusals are ``pyslurm.RPCError``."""

    errors: Tuple[Type[Exception], ...] = ()

    def __init__(self, pyslurm: Any) -> None:
        self.pyslurm = pyslurm

    def load(self, now: int) -> Dict[str, BatchReservation]:
        found = self.pyslurm.Reservations.load()
        return {r.name: object_reservation(r, now) for r in found.values()}

    def request(self, fields: Mapping[str, str], start: int, end: int) -> Any:
        """A ``pyslurm.Reservation`` for the scontrol fields (start before end: pyslurm's
        end_time setter compares with the start already set). Its ``cpus`` is one count: cores
        asked per node (``CoreCnt=4,8``) are asked as their total on those nodes."""
        resv = self.pyslurm.Reservation(fields["ReservationName"])
        resv.start_time = start
        resv.end_time = end
        if fields.get("Nodes"):
            resv.nodes = fields["Nodes"]
        if "NodeCnt" in fields:
            resv.node_count = int(fields["NodeCnt"])
        if "CoreCnt" in fields:
            resv.cpus = sum(int(count) for count in fields["CoreCnt"].split(","))
        if fields.get("Users"):
            resv.users = fields["Users"].split(",")
        if fields.get("Accounts"):
            resv.accounts = fields["Accounts"].split(",")
        if fields.get("PartitionName"):
            resv.partition = fields["PartitionName"]
        if fields.get("Flags"):
            resv.flags = _or_flags(
                fields["Flags"].split(","),
                OBJECT_FLAGS,
                self.pyslurm.ReservationFlags,
                self.pyslurm.__version__,
            )
        return resv

    def create(self, request: Any) -> None:
        request.create()

    def delete(self, name: str) -> None:
        self.pyslurm.Reservation(name).delete()


def object_reservation(resv: Any, now: int) -> BatchReservation:
    """A ``pyslurm.Reservation`` as the agent's record. Cores come from TRES ``cpu`` (CPUs,
    the unit jobs use), else the core count, and the cores on each node from
    ``cpu_ids_by_node``, as for ``scontrol show reservation``."""
    tres = resv.tres if isinstance(resv.tres, Mapping) else {}
    cpus = tres.get("cpu")
    start, end = epoch(resv.start_time), epoch(resv.end_time)
    by_node: Mapping[str, str] = resv.cpu_ids_by_node or {}
    allocation: Allocation = tuple((node, core_count(ids)) for node, ids in by_node.items())
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
        state=state_at(start, end, now),
        node_names=tuple(expand_hostlist(resv.nodes or "")),
        allocation=allocation,
    )


def flag_names(flags: Any) -> Tuple[str, ...]:
    """scontrol names of a ReservationFlags value (pyslurm's own name where none maps)."""
    members = [m for m in type(flags) if m.value and m in flags] if flags else []
    return tuple(_SCONTROL_FLAG.get(m.name, m.name) for m in members)
