"""Reservations as ``scontrol show reservation`` prints them (``-o`` or the wrapped form)."""

from __future__ import annotations

import re
from datetime import UTC, tzinfo
from typing import Dict, List, Optional, Tuple

from siteagent.backends.slurm.hostlist import expand_hostlist
from siteagent.backends.slurm.layout import number
from siteagent.backends.slurm.times import EMPTY, parse_duration, parse_slurm_time
from siteagent.core.values import UNLIMITED_S, Allocation, BatchReservation


def _tokens(text: str) -> List[Tuple[str, str]]:
    """``Key=Value`` tokens of scontrol output, split on the first ``=`` only."""
    out = []
    for tok in text.split():
        if "=" in tok:
            key, value = tok.split("=", 1)
            out.append((key, value))
    return out


def comma_list(value: str) -> Tuple[str, ...]:
    """Slurm's comma-separated list (``Users=a,b``, ``Flags=MAINT,SPEC_NODES``) as a tuple."""
    if value in EMPTY:
        return ()
    return tuple(v for v in value.split(",") if v)


def _allocation(pairs: List[Tuple[str, int]]) -> Allocation:
    return tuple((name, cores) for name, cores in pairs if name and cores > 0)


def tres_cpu(value: str) -> Optional[int]:
    """The ``cpu=N`` count of a TRES string (``cpu=8,mem=1G``), None without one."""
    m = re.search(r"(?:^|,)cpu=(\d+)", value)
    return int(m.group(1)) if m else None


def core_count(ids: str) -> int:
    """How many cores a ``CoreIDs=`` list (``0-5``, ``0-3,8``) names."""
    count = 0
    for item in ids.split(","):
        low, _, high = item.partition("-")
        if low.isdigit():
            count += int(high) - int(low) + 1 if high.isdigit() else 1
    return count


def parse_reservations(text: str, tz: tzinfo = UTC) -> List[BatchReservation]:
    """Reservations of ``scontrol show reservation`` output (``-o`` or the wrapped form).

    A record starts at each ``ReservationName=`` token. Cores come from ``TRES=cpu=N`` (CPUs,
    the unit jobs' ``cpus`` use) and else ``CoreCnt``. ``EndTime=Unknown`` (a zero-duration
    reservation) ends at start + Duration. Keys that repeat within a record keep their first
    value, except the ``NodeName=``/``CoreIDs=`` pairs some core reservations list: those give
    the reservation's cores on each node (its ``allocation``).
    """
    records: List[Dict[str, str]] = []
    per_node: List[List[Tuple[str, int]]] = []
    for key, value in _tokens(text):
        if key == "ReservationName":
            records.append({})
            per_node.append([])
        if not records:
            continue
        if key == "CoreIDs" and "NodeName" in records[-1]:
            per_node[-1].append((records[-1].pop("NodeName"), core_count(value)))
            continue
        if key not in records[-1]:
            records[-1][key] = value
    out = []
    for rec, allocation in zip(records, per_node):
        start = parse_slurm_time(rec.get("StartTime", ""), tz)
        if start is None:
            continue
        end = parse_slurm_time(rec.get("EndTime", ""), tz)
        if end is None:
            dur = parse_duration(rec.get("Duration", ""))
            end = start + (dur if dur is not None else UNLIMITED_S)
        cores = tres_cpu(rec.get("TRES", ""))
        if cores is None:
            cores = number(rec.get("CoreCnt", "")) or 0
        partition = rec.get("PartitionName", "")
        node_list = rec.get("Nodes", "")
        out.append(
            BatchReservation(
                name=rec["ReservationName"],
                start=start,
                end=end,
                cores=cores,
                nodes=number(rec.get("NodeCnt", "")) or 0,
                node_list="" if node_list in EMPTY else node_list,
                users=comma_list(rec.get("Users", "")),
                accounts=comma_list(rec.get("Accounts", "")),
                partition="" if partition in EMPTY else partition,
                flags=comma_list(rec.get("Flags", "")),
                state=rec.get("State", ""),
                node_names=tuple(expand_hostlist(node_list)),
                allocation=_allocation(allocation),
            )
        )
    return out
