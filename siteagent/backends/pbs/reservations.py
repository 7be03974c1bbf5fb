"""Reservations as ``pbs_rstat -f`` prints them (docs/pbs.md §6): there is no JSON form; ``-f``
prints ``key = value`` lines without wrapping.

PBS lets several reservations share a name (``Reserve_Name``) and identifies them by id
(``R123.server``). The agent identifies its reservations by name (its prefix marks them), so a
reservation carrying the agent's prefix is reported under its name and any other under its
id; see :func:`parse_reservations`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, tzinfo
from typing import Dict, List, Set, Tuple

from siteagent.backends.pbs.values import (
    exec_allocation,
    exec_vnodes,
    number,
    owner,
    parse_pbs_time,
    select_totals,
    words,
)
from siteagent.core import names
from siteagent.core.defaults import DEFAULT_RESERVATION_PREFIX
from siteagent.core.values import BatchReservation

#: ``reserve_state`` words (without ``RESV_``) of reservations that hold their vnodes (§6).
HOLDING_STATES = frozenset(
    {"CONFIRMED", "WAIT", "TIME_TO_RUN", "RUNNING", "DEGRADED", "BEING_ALTERED", "IN_CONFLICT"}
)
#: States that prove the scheduler confirmed a reservation (degraded ones were confirmed and
#: then lost a vnode; the state says so to the caller).
CONFIRMED_STATES = frozenset({"CONFIRMED", "TIME_TO_RUN", "RUNNING", "DEGRADED"})


@dataclass(frozen=True)
class PbsReservation:
    """A reservation as ``pbs_rstat -f`` shows it: its id, queue, PBS name, state word, and
    the BatchReservation the agent sees (named as :func:`parse_reservations` explains)."""

    id: str
    queue: str
    reserve_name: str
    state: str
    record: BatchReservation


def rstat_blocks(text: str) -> List[Tuple[str, Dict[str, str]]]:
    """``pbs_rstat -f`` output as (id, {key: value}) per ``Resv ID:`` block.

    Values are split on the first `` = `` only (``Variable_List`` holds ``=`` signs); a key
    seen twice keeps its first value.
    """
    blocks: List[Tuple[str, Dict[str, str]]] = []
    for line in text.splitlines():
        if line.startswith("Resv ID:"):
            blocks.append((line.split(":", 1)[1].strip(), {}))
        elif blocks and " = " in line:
            key, value = line.split(" = ", 1)
            blocks[-1][1].setdefault(key.strip(), value.strip())
    return blocks


def parse_reservations(
    text: str, tz: tzinfo = UTC, name_prefix: str = DEFAULT_RESERVATION_PREFIX
) -> List[PbsReservation]:
    """Reservations of ``pbs_rstat -f`` output.

    The name the agent sees is ``Reserve_Name`` when it carries the agent's prefix, else the
    PBS id: foreign names may repeat (and be ``NULL``), ids never do. Should two reservations
    carry the same agent name (a retry after a lost answer), the later ones are named
    ``name@id``, so that reconciliation sees them as strays and deletes them. Cores are
    ``Resource_List.ncpus``; nodes the vnodes in ``resv_nodes`` once confirmed, else
    ``nodect``. The end is ``reserve_end``, else start + ``reserve_duration``; a block
    without them is skipped (not a reservation record).
    """
    out: List[PbsReservation] = []
    seen: Set[str] = set()
    for resv_id, rec in rstat_blocks(text):
        start = parse_pbs_time(rec.get("reserve_start"), tz)
        end = parse_pbs_time(rec.get("reserve_end"), tz)
        duration = number(rec.get("reserve_duration"))
        if start is not None and end is None and duration is not None:
            end = start + duration
        if start is None or end is None:
            continue
        reserve_name = rec.get("Reserve_Name", "")
        reserve_name = "" if reserve_name == "NULL" else reserve_name
        if name_prefix and reserve_name.startswith(name_prefix):
            name = reserve_name if reserve_name not in seen else f"{reserve_name}@{resv_id}"
        else:
            name = resv_id
        seen.add(name)
        state = rec.get("reserve_state", "")
        state = state[len("RESV_") :] if state.startswith("RESV_") else state
        node_list = rec.get("resv_nodes", "")
        chunks, ncpus = 0, 0
        if rec.get("Resource_List.select"):
            try:
                chunks, ncpus = select_totals(rec["Resource_List.select"])
            except ValueError:
                chunks, ncpus = 0, 0
        record = BatchReservation(
            name=name,
            start=start,
            end=end,
            cores=number(rec.get("Resource_List.ncpus")) or ncpus,
            nodes=len(exec_vnodes(node_list)) or number(rec.get("Resource_List.nodect")) or chunks,
            node_list=node_list,
            # PBS adds the creator as user@host, also after a bare "user" (-U user)
            users=tuple(dict.fromkeys(owner(u) for u in words(rec.get("Authorized_Users")))),
            accounts=words(rec.get("Authorized_Groups")),
            flags=tuple(w for w in re.split(r"[:,]", rec.get("Resource_List.place", "")) if w),
            state=state,
            node_names=tuple(exec_vnodes(node_list)),
            allocation=exec_allocation(node_list),
        )
        queue = rec.get("queue") or _queue_of(resv_id)
        out.append(PbsReservation(resv_id, queue, reserve_name, state, record))
    return out


def _queue_of(resv_id: str) -> str:
    """A reservation's queue when pbs_rstat does not print it: its id without the server."""
    match = names.PBS_RESERVATION_ID.fullmatch(resv_id)
    return match.group(1) if match else resv_id
