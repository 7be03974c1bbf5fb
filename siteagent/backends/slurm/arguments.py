"""The argument lists of the Slurm commands that carry the agent's requests: ``scontrol create
reservation`` and ``sacct``.

scontrol takes ``Key=Value`` words, and a value with a space or ``=`` in it would change the
request: every field is checked before it becomes an argument.
"""

from __future__ import annotations

import math
from typing import List

from siteagent.backends.checks import checked_start, utc_text
from siteagent.backends.slurm.config import SlurmConfig
from siteagent.core import names
from siteagent.core.values import BatchReservation, CapacityUnit, ReservationSpec


def whole_minutes(seconds: int) -> int:
    """A reservation's Duration: whole minutes rounded up, never 0 (``Duration=0`` means an
    endless reservation, docs/slurm.md §6.1)."""
    return max(1, math.ceil(seconds / 60))


def reservation_args(
    spec: ReservationSpec, config: SlurmConfig, now: int, cores_per_node: bool = True
) -> List[str]:
    """The ``scontrol create reservation`` argument list for ``spec``, validated (ValueError
    with the reason).

    StartTime is UTC wall-clock time (the command runs with ``TZ=UTC``); a start in the past
    becomes now (Slurm rejects starts far in the past) and the end is kept. Users come from the
    spec, else from the configuration unless the spec names accounts; one of them is needed.
    The size is the spec's nodes where it names them (:func:`size_args`, with the cores on
    each where the controller takes them: ``cores_per_node``), else a count.
    """
    start = checked_start(spec, names.NAME, config.name_prefix, config.unit, now)
    users = tuple(spec.users) or (config.users if not spec.accounts else ())
    for user in users:
        names.check(names.USER, user, "user name")
    for account in spec.accounts:
        names.check(names.NAME, account, "account name")
    if not users and not spec.accounts:
        raise ValueError("a reservation needs users or accounts (none given, none configured)")
    partition = spec.partition or config.partition
    if partition:
        names.check(names.NAME, partition, "partition name")
    args = [
        "scontrol",
        "create",
        "reservation",
        f"ReservationName={spec.name}",
        f"StartTime={utc_text(start)}",
        f"Duration={whole_minutes(spec.end - start)}",
        *size_args(spec, config.unit, cores_per_node),
    ]
    if users:
        args.append("Users=" + ",".join(users))
    if spec.accounts:
        args.append("Accounts=" + ",".join(spec.accounts))
    if partition:
        args.append(f"PartitionName={partition}")
    flags = list(config.flags)
    if spec.over_running and "IGNORE_JOBS" not in flags:
        flags.append("IGNORE_JOBS")
    if flags:
        args.append("Flags=" + ",".join(flags))
    return args


def size_args(spec: ReservationSpec, unit: CapacityUnit, cores_per_node: bool = True) -> List[str]:
    """What to reserve: a count Slurm places (``CoreCnt=``/``NodeCnt=``), or the nodes the
    spec's allocation names, whole (``Nodes=a,b``) or with the cores on each (``Nodes=a,b
    CoreCnt=4,8``: Slurm gives each node its count, taking the nodes in its own order, which
    is the allocation's). Without ``cores_per_node`` (Slurm 23.11 and later) the cores go as
    one total that Slurm spreads over the named nodes itself (``CoreCnt=12``). The allocation
    must add up to the size (ValueError)."""
    if not spec.allocation:
        key = "NodeCnt" if unit is CapacityUnit.NODE else "CoreCnt"
        return [f"{key}={spec.size}"]
    for name, cores in spec.allocation:
        names.check(names.NAME, name, "node name")
        if isinstance(cores, bool) or not isinstance(cores, int) or cores <= 0:
            raise ValueError(f"cores on node {name}: expected a positive count, got {cores!r}")
    nodes = "Nodes=" + ",".join(name for name, _ in spec.allocation)
    if unit is CapacityUnit.NODE:
        if len(spec.allocation) != spec.size:
            raise ValueError(f"{len(spec.allocation)} nodes named for {spec.size} nodes")
        return [nodes]
    total = sum(cores for _, cores in spec.allocation)
    if total != spec.size:
        raise ValueError(f"{total} cores named for {spec.size} cores")
    if not cores_per_node:
        return [nodes, f"CoreCnt={total}"]
    return [nodes, "CoreCnt=" + ",".join(str(cores) for _, cores in spec.allocation)]


def same_window(res: BatchReservation, spec: ReservationSpec, now: int) -> bool:
    """Whether ``res`` has the start and duration that creating ``spec`` now asks for: a retry
    after a lost answer finds its own reservation."""
    start = max(spec.start, now)
    return res.start == start and res.end - res.start == whole_minutes(spec.end - start) * 60


#: ``sacct --state`` codes of jobs that got an allocation, so that they have a start: running,
#: completed, failed, timed out, cancelled, node failure, out of memory, preempted (jobs
#: cancelled while still pending also match CA; the history parser drops them).
SACCT_STARTED_STATES = ("R", "CD", "F", "TO", "CA", "NF", "OOM", "PR")


def sacct_args(since: int, until: int) -> List[str]:
    """``sacct`` arguments for the jobs of every user (``-a``), allocations only (``-X``), in
    the window; times are UTC wall-clock text (commands run with ``TZ=UTC``)."""
    return ["sacct", "--json", *_sacct_selection(since, until)]


#: The fields of ``sacct_usage_args``' lines, in order: the admin comment last, since it is
#: free text that may hold the separator.
SACCT_USAGE_FIELDS = (
    "JobID",
    "User",
    "AllocCPUS",
    "NNodes",
    "Start",
    "End",
    "Reservation",
    "ReservationId",
)


def sacct_usage_args(since: int, until: int) -> List[str]:
    """``sacct`` arguments for the jobs of the window with their reservation, as text
    (``-P``: ``|`` between fields). Text, because 22.05's ``--json`` prints a garbage number as
    ``reservation.name`` (docs/slurm.md §6.7)."""
    fields = ",".join((*SACCT_USAGE_FIELDS, "AdminComment"))
    return ["sacct", "-n", "-P", "-o", fields, *_sacct_selection(since, until)]


def reservation_ids_args(name: str, since: int, until: int) -> List[str]:
    """``sacctmgr`` arguments for the accounting ids of reservation ``name`` in the window:
    what a job that started in the reservation's first second is matched by, since sacct
    leaves its reservation name empty (docs/slurm.md §6.8)."""
    return [
        "sacctmgr",
        "-n",
        "-P",
        "show",
        "reservation",
        "where",
        f"names={name}",
        f"start={utc_text(since)}",
        f"end={utc_text(until)}",
        "format=ID",
    ]


def _sacct_selection(since: int, until: int) -> List[str]:
    if since >= until:
        raise ValueError(
            f"empty accounting window: {utc_text(since)}Z is not before {utc_text(until)}Z"
        )
    return [
        "-a",
        "-X",
        "-S",
        utc_text(since),
        "-E",
        utc_text(until),
        "--state=" + ",".join(SACCT_STARTED_STATES),
    ]
