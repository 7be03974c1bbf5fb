"""The argument list of ``pbs_rsub``, which carries the agent's reservations (docs/pbs.md §5),
and its reply.

PBS reads ``-R``/``-E`` as local wall-clock times of the command, so every command runs with
``TZ=UTC``. Every field is checked before it becomes an argument.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import List, Tuple

from siteagent.backends.checks import checked_start
from siteagent.backends.pbs.config import PbsConfig
from siteagent.core import names
from siteagent.core.values import BatchReservation, CapacityUnit, ReservationSpec

#: Seconds added to a start of "now": pbs_rsub refuses a start in the past (docs/pbs.md §5.2,
#: exit 238), and the server compares with its own clock after the request travelled.
START_SLACK_S = 2


def local_datetime(epoch: int) -> str:
    """``CCYYMMDDhhmm.SS`` in UTC, the commands' time zone: pbs_rsub's Datetime format (§5),
    which has no epoch form."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y%m%d%H%M.%S")


def rsub_args(
    spec: ReservationSpec, config: PbsConfig, now: int, cores_per_node: int = 0
) -> List[str]:
    """The ``pbs_rsub`` argument list for ``spec``, every field validated (ValueError).

    The window is ``-R``/``-E`` in UTC wall-clock time (commands run with ``TZ=UTC``); a start
    in the past or within :data:`START_SLACK_S` of now moves to now + slack, the end is kept.
    CORE unit asks for ``size`` one-CPU chunks placed freely (the scheduler may put them on any
    vnodes); NODE unit for ``size`` whole vnodes of ``cores_per_node`` CPUs, exclusively.
    Users go to ``-U`` (Authorized_Users); accounts, which PBS does not know, to ``-G``
    (Authorized_Groups): sites map projects to Unix groups.
    """
    rule, earliest = names.PBS_RESERVATION_NAME, now + START_SLACK_S
    start = checked_start(spec, rule, config.name_prefix, config.unit, earliest)
    users = tuple(spec.users) or config.users
    for user in users:
        names.check(names.USER, user, "user name")
    for group in spec.accounts:
        names.check(names.UNIX_GROUP, group, "account (group) name")
    if spec.partition and spec.partition != config.queue:
        raise ValueError(
            f"reservation partition {spec.partition!r} is not the backend's queue "
            f"{config.queue!r}: PBS reservations are not tied to a queue"
        )
    if config.unit is CapacityUnit.NODE:
        if cores_per_node <= 0:
            raise ValueError("node reservations need the vnodes' CPU count (cores_per_node)")
        resources = [f"select={spec.size}:ncpus={cores_per_node}", "place=scatter:excl"]
    else:
        resources = [f"select={spec.size}:ncpus=1", "place=free"]
    args = [
        "pbs_rsub",
        "-R",
        local_datetime(start),
        "-E",
        local_datetime(spec.end),
        "-N",
        spec.name,
    ]
    for resource in resources:
        args += ["-l", resource]
    if users:
        args += ["-U", ",".join(users)]
    if spec.accounts:
        args += ["-G", ",".join(spec.accounts)]
    return args


def same_window(res: BatchReservation, spec: ReservationSpec, now: int) -> bool:
    """Whether ``res`` is what creating ``spec`` now (or earlier) would have made: the same
    end, and the asked start or one moved later to "now" by :func:`rsub_args`."""
    return res.end == spec.end and spec.start <= res.start <= max(spec.start, now + START_SLACK_S)


def parse_rsub_reply(stdout: str) -> Tuple[str, str]:
    """(id, state word) of pbs_rsub's reply ``R123.server UNCONFIRMED`` (§5.2).

    The word may be several (``delete, wait period expired``). Raises ValueError when there
    is no such line: the id goes to pbs_rstat and pbs_rdel, so it must be an id by the rule.
    """
    for line in reversed(stdout.splitlines()):
        words = line.split(None, 1)
        if len(words) == 2 and names.is_valid(names.PBS_RESERVATION_ID, words[0]):
            return words[0], words[1].strip()
    raise ValueError(f"no reservation id in pbs_rsub's reply {stdout.strip()!r}")
