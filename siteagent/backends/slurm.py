"""Slurm through its command-line clients: ``squeue/sinfo --json`` and ``scontrol``.

Why the command line: the JSON of ``squeue``/``sinfo`` is the same object model slurmrestd
serves, needs no daemon or token, and costs a few milliseconds per call; reservations can only
be created, updated and deleted with ``scontrol`` in 22.05 (slurmrestd is read-only for them).
Every behaviour relied on here was observed on Slurm 22.05.8 and is written down with samples in
``notes/slurm-cli.md``; the section numbers below refer to it.

Two JSON layouts exist and are told apart by ``meta.plugin`` only (§3, §9):

* ``openapi/v0.0.3x`` (21.08, 22.05): flat scalars, ``null`` for unset/unlimited integers,
  ``job_state`` a word, node ``state`` a lower-case word plus a ``state_flags`` list;
* ``data_parser/v0.0.39+`` (23.02 and later): numbers wrapped as
  ``{"set", "infinite", "number"}``, ``job_state`` and node ``state`` lists, and ``sinfo --json``
  regrouped by partition/state (per-node data then comes from ``scontrol --json show nodes``).

The small normalising helpers (:func:`number`, :func:`is_infinite`, :func:`state_words`)
accept both shapes value by value, so one parser serves every version.

Times from ``scontrol`` are local wall-clock times of the scontrol process; every command runs
with ``TZ=UTC`` (and ``SLURM_TIME_FORMAT=standard``) so that the text is unambiguous UTC.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone, tzinfo
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from siteagent.backends.base import (
    Backend,
    BackendError,
    BackendUnavailable,
    ReservationRefused,
    run_command,
)
from siteagent.core.model import (
    UNLIMITED_S,
    BatchReservation,
    CapacityUnit,
    ClusterSnapshot,
    Job,
    NodeState,
    ReservationSpec,
)

# --------------------------------------------------------------------------- configuration

#: Reservation flags the agent may add to every reservation it creates. The others change the
#: meaning of a reservation in ways the planner does not model (§6.2): FLEX lets jobs leak
#: outside it, PURGE_COMP deletes it early even if never used, MAGNETIC pulls in foreign jobs,
#: TIME_FLOAT/DAILY/WEEKLY/... move or repeat it, FIRST_CORES/PART_NODES change its size.
ALLOWED_FLAGS = frozenset(
    {"IGNORE_JOBS", "OVERLAP", "MAINT", "STATIC_ALLOC", "NO_HOLD_JOBS_AFTER", "REPLACE_DOWN"}
)

#: Reservation names: what Slurm accepts without quoting, and what is safe in an argument.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: POSIX-portable user names (useradd's default rule), optionally ending in ``$``.
USER_RE = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}\$?$")
#: Slurm account names (sacctmgr lower-cases them; upper case is tolerated by scontrol).
ACCOUNT_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
PARTITION_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class SlurmConfig:
    """How the agent reaches one Slurm cluster and what it may do there.

    ``slurm_conf`` sets ``SLURM_CONF`` for every command (else the client default applies);
    ``env`` adds variables (e.g. ``PATH``). ``partition`` limits the snapshot and the
    reservations to one partition (the agent serves one homogeneous partition). ``users`` are
    put on reservations whose spec names none. ``flags`` go on every reservation created (only
    :data:`ALLOWED_FLAGS`). ``timeout`` bounds every command: a Slurm client needs ~9 s to give
    up on a dead controller (§2), so keep it well above that.
    """

    slurm_conf: Optional[str] = None
    env: Mapping[str, str] = field(default_factory=dict)
    partition: str = ""
    unit: CapacityUnit = CapacityUnit.CORE
    users: Tuple[str, ...] = ()
    flags: Tuple[str, ...] = ()
    timeout: float = 30.0
    name_prefix: str = "sa-"

    def __post_init__(self) -> None:
        bad = [f for f in self.flags if f not in ALLOWED_FLAGS]
        if bad:
            raise ValueError(
                f"reservation flags not allowed: {', '.join(bad)} "
                f"(allowed: {', '.join(sorted(ALLOWED_FLAGS))})"
            )
        for user in self.users:
            _check_user(user)
        if self.partition:
            _check(PARTITION_RE, self.partition, "partition name")
        if self.name_prefix and not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", self.name_prefix):
            raise ValueError(f"invalid reservation name prefix {self.name_prefix!r}")
        if not self.timeout > 0:
            raise ValueError(f"command timeout must be positive, got {self.timeout}")


# --------------------------------------------------------------------------- JSON helpers


def number(value: Any) -> Optional[int]:
    """An integer from either JSON shape, or None when unset or infinite.

    v0.0.38 uses plain integers and ``null``; data_parser uses
    ``{"set": bool, "infinite": bool, "number": int}``.
    """
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def is_infinite(value: Any) -> bool:
    """True only for data_parser's explicit ``"infinite": true`` (v0.0.38 has no such flag)."""
    return isinstance(value, dict) and bool(value.get("infinite", False))


def state_words(value: Any, flags: Any = None) -> Tuple[str, Tuple[str, ...]]:
    """A (base state, flags) pair from ``"mixed"`` + ``["DRAIN"]`` or ``["MIXED", "DRAIN"]``.

    The base is lower-case, flags upper-case. Unknown words are kept, never rejected: later
    releases renamed some states (§9).
    """
    words: List[str]
    if isinstance(value, str):
        words = [w for w in re.split(r"[+,\s]+", value) if w]
    elif isinstance(value, list):
        words = [str(w) for w in value if w]
    else:
        words = []
    extra = [str(f) for f in flags] if isinstance(flags, list) else []
    if not words:
        return "unknown", tuple(f.upper() for f in extra)
    base = words[0].lower()
    seen: List[str] = []
    for f in words[1:] + extra:
        if f.upper() not in seen:
            seen.append(f.upper())
    return base, tuple(seen)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def detect_layout(doc: Mapping[str, Any]) -> str:
    """The JSON layout of a ``squeue``/``sinfo``/``scontrol --json`` document.

    Returns ``"data_parser/v0.0.NN"`` or ``"openapi/v0.0.NN"`` as read from ``meta.plugin``
    (``meta.plugins`` in some releases). Raises ValueError when neither is there: output
    without a plugin name is not something this parser has seen, so it is not trusted.
    """
    meta = doc.get("meta")
    if not isinstance(meta, dict):
        raise ValueError("no 'meta' object in the JSON output")
    for key in ("plugin", "plugins"):
        plugin = meta.get(key)
        if not isinstance(plugin, dict):
            continue
        parser = plugin.get("data_parser")
        if isinstance(parser, str) and parser:
            return parser if parser.startswith("data_parser/") else "data_parser/" + parser
        kind = plugin.get("type")
        if isinstance(kind, str) and kind.startswith("openapi/"):
            return kind
    raise ValueError(f"unrecognised JSON layout: meta={json.dumps(meta)[:200]}")


def check_errors(doc: Mapping[str, Any], what: str) -> None:
    """Raise BackendUnavailable if the document carries ``errors``.

    With the controller down ``squeue --json`` exits 0 with no jobs and one error entry
    (§3): an empty list there is not an empty queue.
    """
    errors = doc.get("errors") or []
    if errors:
        parts = []
        for err in errors:
            if isinstance(err, dict):
                msg = err.get("description") or err.get("error") or json.dumps(err)
                parts.append(str(msg))
            else:
                parts.append(str(err))
        raise BackendUnavailable(f"{what}: " + "; ".join(parts))


# --------------------------------------------------------------------------- hostlists, arrays


def _split_top(text: str) -> List[str]:
    """Split on commas that are not inside brackets."""
    parts: List[str] = []
    cur: List[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in (s.strip() for s in parts) if p]


def _range_items(spec: str) -> List[str]:
    """``1-3,07-08`` → ``1 2 3 07 08`` keeping zero padding."""
    out: List[str] = []
    for item in spec.split(","):
        if "-" in item:
            lo, hi = item.split("-", 1)
            width = len(lo) if lo.startswith("0") else 0
            out.extend(str(i).zfill(width) for i in range(int(lo), int(hi) + 1))
        elif item:
            out.append(item)
    return out


def expand_hostlist(text: str) -> List[str]:
    """Node names of a Slurm hostlist (``n[1-3,5]``, ``r[1-2]-n[01-02]``, ``a,b``).

    Needed to tell which reservations and jobs touch the configured partition's nodes.
    """
    if not text or text in ("(null)", "None"):
        return []
    names: List[str] = []
    for part in _split_top(text):
        m = re.search(r"\[([^\]]*)\]", part)
        if not m:
            names.append(part)
            continue
        head, tail = part[: m.start()], part[m.end() :]
        for item in _range_items(m.group(1)):
            names.extend(expand_hostlist(head + item + tail))
    return names


def array_indices(text: str) -> List[int]:
    """Indices of an array task string (``2-5%2``, ``49-97:3``, ``1,3,5-7``); throttle dropped."""
    body = text.split("%", 1)[0]
    out: List[int] = []
    for item in body.split(","):
        item = item.strip()
        if not item:
            continue
        step = 1
        if ":" in item:
            item, step_s = item.split(":", 1)
            step = max(1, int(step_s))
        if "-" in item:
            lo, hi = item.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1, step))
        else:
            out.append(int(item))
    return out


# --------------------------------------------------------------------------- jobs

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
    holds running jobs' node names; ``array_throttle`` an array id to its ``%N`` limit.
    """

    running: List[Job] = field(default_factory=list)
    pending: List[Job] = field(default_factory=list)
    nodes_of: Dict[str, List[str]] = field(default_factory=dict)
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


def _is_exclusive(rec: Mapping[str, Any]) -> bool:
    shared = rec.get("shared")
    if isinstance(shared, list):
        return any(str(s).lower() == "none" for s in shared)
    return isinstance(shared, str) and shared.lower() == "none"


def parse_jobs(doc: Mapping[str, Any], now: int, cores_per_node: int = 1) -> SlurmJobs:
    """Running and pending jobs of a ``squeue --json`` document (either layout).

    Finished jobs are dropped here because JSON ignores squeue's filters (§3). A pending array
    remainder becomes one Job per pending index (``A_I``), each with the per-task size, since
    Slurm starts them as separate jobs; Slurm's expected start goes on the first only. Pending
    ``--exclusive`` jobs report ``cpus`` 1, so they count whole nodes of ``cores_per_node``.
    """
    check_errors(doc, "squeue")
    out = SlurmJobs()
    keyed: List[Tuple[int, int, int, int, Job]] = []
    for seq, rec in enumerate(doc.get("jobs") or []):
        base, _flags = state_words(rec.get("job_state"))
        if base in RUNNING_STATES:
            job = _running_job(rec)
            out.running.append(job)
            out.nodes_of[job.id] = expand_hostlist(_text(rec.get("nodes")))
        elif base in PENDING_STATES:
            priority = number(rec.get("priority")) or 0
            for idx, job in enumerate(_pending_jobs(rec, now, cores_per_node, out)):
                keyed.append((-priority, job.submit, seq, idx, job))
        else:
            out.finished += 1
    keyed.sort(key=lambda k: k[:4])
    out.pending = [k[4] for k in keyed]
    out.running.sort(key=lambda j: (j.start or 0, j.id))
    return out


def _running_job(rec: Mapping[str, Any]) -> Job:
    cpus = number(rec.get("cpus")) or 0
    return Job(
        id=_job_id(rec),
        cores=cpus,
        submit=number(rec.get("submit_time")) or 0,
        limit=_limit_s(rec),
        start=number(rec.get("start_time")) or 0,
        nodes=number(rec.get("node_count")) or 0,
        user=_text(rec.get("user_name")),
        account=_text(rec.get("account")),
        partition=_text(rec.get("partition")),
        reservation=_text(rec.get("resv_name") or rec.get("reservation")),
    )


#: Text squeue columns for the running work (``-t`` filters only work in text form, §3):
#: id, cores, submit, start, time limit, node count, user, account, partition, reservation,
#: node list.
RUNNING_FORMAT = "%i|%C|%V|%S|%l|%D|%u|%a|%P|%v|%N"
#: The states squeue -t takes for ``RUNNING_STATES``.
RUNNING_STATE_FILTER = "RUNNING,COMPLETING,CONFIGURING,SUSPENDED,RESIZING"


def parse_time_limit(text: str) -> int:
    """squeue's ``%l``: ``[D-][HH:]MM:SS``, or UNLIMITED/NOT_SET/INVALID (``UNLIMITED_S``)."""
    m = re.match(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d\d)$", text.strip())
    if not m:
        return UNLIMITED_S
    days, hours, minutes, seconds = (int(g or 0) for g in m.groups())
    limit = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    return limit if limit > 0 else UNLIMITED_S


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
    rec: Mapping[str, Any], now: int, cores_per_node: int, out: SlurmJobs
) -> List[Job]:
    """One pending record as Jobs: one, or one per index for an array remainder."""
    priority = number(rec.get("priority"))
    reason = _text(rec.get("state_reason"))
    resv = _text(rec.get("resv_name") or rec.get("reservation"))
    eligible = not (priority == 0 or reason in BLOCKED_REASONS or reason.startswith("Dependency"))
    nodes = number(rec.get("node_count")) or 1
    cores = number(rec.get("cpus")) or 1
    if _is_exclusive(rec):
        cores = max(cores, nodes * max(1, cores_per_node))
    start = number(rec.get("start_time")) or 0
    expected = start if eligible and not resv and start > 0 else None
    eligible_time = number(rec.get("eligible_time")) or 0
    not_before = eligible_time if eligible and eligible_time > now else None
    array_id = number(rec.get("array_job_id")) or 0
    task_string = _text(rec.get("array_task_string"))
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
                user=_text(rec.get("user_name")),
                account=_text(rec.get("account")),
                partition=_text(rec.get("partition")),
                expected_start=expected if i == 0 else None,
                eligible=eligible,
                not_before=not_before,
                reservation=resv,
            )
        )
    return jobs


# --------------------------------------------------------------------------- nodes

#: Base states whose node takes no new work (§5 table).
UNUSABLE_STATES = frozenset({"down", "unknown", "future", "error", "fail", "drained"})
#: Flags that take a node out of service. RESERVED and MAINTENANCE are not among them: the
#: reservation holding the node is part of the snapshot and takes its capacity there.
UNUSABLE_FLAGS = frozenset(
    {
        "DRAIN",
        "DRAINING",
        "DRAINED",
        "FAIL",
        "FAILING",
        "NOT_RESPONDING",
        "NO_RESPOND",
        "INVALID",
        "INVALID_REG",
        "REBOOT_ISSUED",
        "POWERING_DOWN",
    }
)


def parse_nodes(doc: Mapping[str, Any]) -> List[NodeState]:
    """Nodes of a per-node document: ``sinfo --json`` (22.05) or ``scontrol --json show nodes``.

    Raises ValueError for the grouped ``sinfo`` layout of 23.02+, which has no per-node list.
    """
    check_errors(doc, "node list")
    recs = doc.get("nodes")
    if not isinstance(recs, list):
        raise ValueError("no per-node 'nodes' list in the document")
    nodes = []
    for rec in recs:
        base, flags = state_words(rec.get("state"), rec.get("state_flags"))
        usable = base not in UNUSABLE_STATES and not UNUSABLE_FLAGS.intersection(flags)
        parts = rec.get("partitions") or []
        if isinstance(parts, str):
            parts = [p for p in parts.split(",") if p]
        nodes.append(
            NodeState(
                name=_text(rec.get("name")),
                cores=number(rec.get("cpus")) or 0,
                alloc_cores=number(rec.get("alloc_cpus")) or 0,
                state="+".join([base, *(f.lower() for f in flags)]),
                usable=usable,
                memory_mb=number(rec.get("real_memory")) or 0,
                partitions=tuple(str(p) for p in parts),
                reason=_text(rec.get("reason")),
            )
        )
    return nodes


# --------------------------------------------------------------------------- reservations

_EMPTY = ("", "(null)", "n/a", "N/A", "None")


def parse_slurm_time(text: str, tz: tzinfo = timezone.utc) -> Optional[int]:
    """``2026-11-22T07:50:10`` in ``tz`` → epoch seconds; None for Unknown/empty."""
    if text in _EMPTY or text.lower() in ("unknown", "none"):
        return None
    try:
        local = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    return int(local.replace(tzinfo=tz).timestamp())


def parse_duration(text: str) -> Optional[int]:
    """scontrol's ``[D-]HH:MM:SS`` → seconds; None for UNLIMITED, empty or anything else."""
    m = re.match(r"^(?:(\d+)-)?(\d+):(\d\d):(\d\d)$", text.strip())
    if not m:
        return None
    days, hours, minutes, seconds = (int(g or 0) for g in m.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def _tokens(text: str) -> List[Tuple[str, str]]:
    """``Key=Value`` tokens of scontrol output, split on the first ``=`` only."""
    out = []
    for tok in text.split():
        if "=" in tok:
            key, value = tok.split("=", 1)
            out.append((key, value))
    return out


def _list(value: str) -> Tuple[str, ...]:
    if value in _EMPTY:
        return ()
    return tuple(v for v in value.split(",") if v)


def _tres_cpu(value: str) -> Optional[int]:
    m = re.search(r"(?:^|,)cpu=(\d+)", value)
    return int(m.group(1)) if m else None


def parse_reservations(text: str, tz: tzinfo = timezone.utc) -> List[BatchReservation]:
    """Reservations of ``scontrol show reservation`` output (``-o`` or the wrapped form).

    A record starts at each ``ReservationName=`` token. Cores come from ``TRES=cpu=N`` (CPUs,
    the unit jobs' ``cpus`` use) and else ``CoreCnt``. ``EndTime=Unknown`` (a zero-duration
    reservation) ends at start + Duration. Keys that repeat within a record (``NodeName=``/
    ``CoreIDs=`` of core reservations) keep their first value.
    """
    records: List[Dict[str, str]] = []
    for key, value in _tokens(text):
        if key == "ReservationName":
            records.append({})
        if records and key not in records[-1]:
            records[-1][key] = value
    out = []
    for rec in records:
        start = parse_slurm_time(rec.get("StartTime", ""), tz)
        if start is None:
            continue
        end = parse_slurm_time(rec.get("EndTime", ""), tz)
        if end is None:
            dur = parse_duration(rec.get("Duration", ""))
            end = start + (dur if dur is not None else UNLIMITED_S)
        cores = _tres_cpu(rec.get("TRES", ""))
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
                node_list="" if node_list in _EMPTY else node_list,
                users=_list(rec.get("Users", "")),
                accounts=_list(rec.get("Accounts", "")),
                partition="" if partition in _EMPTY else partition,
                flags=_list(rec.get("Flags", "")),
                state=rec.get("State", ""),
            )
        )
    return out


# --------------------------------------------------------------------------- create arguments


def _check(pattern: re.Pattern[str], value: str, what: str) -> None:
    if not isinstance(value, str) or not pattern.match(value):
        raise ValueError(f"invalid {what} {value!r}: must match {pattern.pattern}")


def _check_user(user: str) -> None:
    _check(USER_RE, user, "user name")


def _iso_utc(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch))


def reservation_args(spec: ReservationSpec, config: SlurmConfig, now: int) -> List[str]:
    """The ``scontrol create reservation`` argument list for ``spec``, validated.

    Every field is checked before it can reach scontrol (ValueError with the reason), because
    scontrol takes ``Key=Value`` words and a value with spaces or ``=`` would change the
    request. StartTime is UTC wall-clock time (the command runs with ``TZ=UTC``); a start in
    the past becomes now (Slurm rejects starts far in the past) and the end is kept. Duration is
    whole minutes rounded up and never 0 (``Duration=0`` means an endless reservation, §6.1).
    """
    _check(NAME_RE, spec.name, "reservation name")
    if config.name_prefix and not spec.name.startswith(config.name_prefix):
        raise ValueError(
            f"reservation name {spec.name!r} lacks the agent's prefix {config.name_prefix!r}"
        )
    for label, val in (("start", spec.start), ("duration", spec.duration), ("size", spec.size)):
        if isinstance(val, bool) or not isinstance(val, int):
            raise ValueError(f"reservation {label} must be an integer, got {val!r}")
    if spec.size <= 0:
        raise ValueError(f"reservation size must be positive, got {spec.size}")
    if spec.duration <= 0:
        raise ValueError(f"reservation duration must be positive, got {spec.duration} s")
    if spec.start <= 0:
        raise ValueError(f"reservation start must be an epoch time, got {spec.start}")
    start = max(spec.start, now)
    if spec.end <= start:
        raise ValueError(f"reservation window ends in the past ({_iso_utc(spec.end)}Z)")
    unit = CapacityUnit(spec.unit)
    if unit is not config.unit:
        raise ValueError(
            f"reservation unit {unit.value} differs from the backend's {config.unit.value}"
        )
    users = tuple(spec.users) or (config.users if not spec.accounts else ())
    for user in users:
        _check_user(user)
    for account in spec.accounts:
        _check(ACCOUNT_RE, account, "account name")
    if not users and not spec.accounts:
        raise ValueError("a reservation needs users or accounts (none given, none configured)")
    partition = spec.partition or config.partition
    if partition:
        _check(PARTITION_RE, partition, "partition name")
    minutes = max(1, math.ceil((spec.end - start) / 60))
    size_key = "NodeCnt" if unit is CapacityUnit.NODE else "CoreCnt"
    args = [
        "scontrol",
        "create",
        "reservation",
        f"ReservationName={spec.name}",
        f"StartTime={_iso_utc(start)}",
        f"Duration={minutes}",
        f"{size_key}={spec.size}",
    ]
    if users:
        args.append("Users=" + ",".join(users))
    if spec.accounts:
        args.append("Accounts=" + ",".join(spec.accounts))
    if partition:
        args.append(f"PartitionName={partition}")
    if config.flags:
        args.append("Flags=" + ",".join(config.flags))
    return args


#: ``sacct --state`` codes of jobs that got an allocation, so that they have a start: running,
#: completed, failed, timed out, cancelled, node failure, out of memory, preempted (jobs
#: cancelled while still pending also match CA; the history parser drops them).
SACCT_STARTED_STATES = ("R", "CD", "F", "TO", "CA", "NF", "OOM", "PR")


def sacct_args(since: int, until: int) -> List[str]:
    """``sacct`` arguments for the jobs of every user (``-a``), allocations only (``-X``), in
    the window; times are UTC wall-clock text (commands run with ``TZ=UTC``)."""
    if since >= until:
        raise ValueError(
            f"empty accounting window: {_iso_utc(since)}Z is not before {_iso_utc(until)}Z"
        )
    return [
        "sacct",
        "--json",
        "-a",
        "-X",
        "-S",
        _iso_utc(since),
        "-E",
        _iso_utc(until),
        "--state=" + ",".join(SACCT_STARTED_STATES),
    ]


# --------------------------------------------------------------------------- error mapping

#: Messages meaning "the controller did not answer" rather than "it said no" (§2, §6).
UNAVAILABLE_MARKERS = (
    "Unable to contact slurm controller",
    "Unexpected message received",  # scontrol create with slurmctld down
    "Socket timed out",
    "Zero Bytes were transmitted",
    "Connection refused",
    "Communication connection failure",
    "Slurm backup controller in standby mode",
    "Transport endpoint is not connected",
)


def is_unavailable(message: str) -> bool:
    return any(marker in message for marker in UNAVAILABLE_MARKERS)


#: Slurm refuses with "Invalid user id" both a reservation for a user it does not know and any
#: reservation command from a user without AdminLevel=Operator (seen on 22.05 with slurmdbd).
INVALID_USER_HINT = (
    " (Slurm says this for a user it does not know, and also when the agent's own user lacks "
    "AdminLevel=Operator: sacctmgr -i modify user <agent user> set adminlevel=operator)"
)


#: What a parser raises on a document in a known layout but not of the shape Slurm writes
#: (a field of another type, a record that is not an object).
MALFORMED = (AttributeError, KeyError, TypeError, ValueError)


def malformed(command: str, error: Exception) -> BackendUnavailable:
    """An answer the agent cannot read is no answer: the poll fails and is retried."""
    return BackendUnavailable(
        f"{command}: output is not what Slurm writes ({type(error).__name__}: {error})"
    )


def _message(proc: subprocess.CompletedProcess[str]) -> str:
    """The Slurm error of a failed command: stderr lines, without scontrol's trailer noise,
    with a hint where Slurm's words are ambiguous."""
    lines = [ln.strip() for ln in (proc.stderr or "").splitlines() if ln.strip()]
    lines = [ln for ln in lines if ln != "slurm_update error: No error"]
    text = " / ".join(lines) or (proc.stdout or "").strip() or f"exit status {proc.returncode}"
    return text + INVALID_USER_HINT if "Invalid user id" in text else text


# --------------------------------------------------------------------------- the backend


class SlurmBackend(Backend):
    """A Slurm cluster seen through its command-line clients (22.05 and later)."""

    name = "slurm"

    def __init__(self, config: Optional[SlurmConfig] = None) -> None:
        self.config = config or SlurmConfig()
        self._node_source: Optional[List[str]] = None  # learnt on first snapshot

    # ---- commands

    def _env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env.update(self.config.env)
        if self.config.slurm_conf:
            env["SLURM_CONF"] = self.config.slurm_conf
        # unambiguous times and untranslated messages, whatever the agent's environment says
        env["TZ"] = "UTC"
        env["SLURM_TIME_FORMAT"] = "standard"
        env["LC_ALL"] = "C"
        return env

    def _run(self, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client in this backend's environment, with its timeout."""
        return run_command(args, self._env(), self.config.timeout)

    def _json(self, args: Sequence[str]) -> Dict[str, Any]:
        proc = self._run(args)
        if proc.returncode != 0:
            raise BackendUnavailable(f"{' '.join(args)}: {_message(proc)}")
        try:
            doc = json.loads(proc.stdout)
        except ValueError as exc:
            raise BackendUnavailable(f"{' '.join(args)}: output is not JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise BackendUnavailable(f"{' '.join(args)}: output is not a JSON object")
        try:
            detect_layout(doc)
        except ValueError as exc:
            raise BackendUnavailable(f"{' '.join(args)}: {exc}") from exc
        return doc

    # ---- reading

    def nodes(self) -> List[NodeState]:
        """Every node.

        22.05's ``sinfo --json`` lists nodes; from 23.02 it groups them, and the per-node list
        comes from ``scontrol --json show nodes`` (the choice is remembered after the first call).
        """
        if self._node_source is None:
            doc = self._json(["sinfo", "--json"])
            if isinstance(doc.get("nodes"), list):
                self._node_source = ["sinfo", "--json"]
                return self._parse_nodes(doc)
            check_errors(doc, "sinfo")
            self._node_source = ["scontrol", "--json", "show", "nodes"]
        return self._parse_nodes(self._json(self._node_source))

    def _parse_nodes(self, doc: Dict[str, Any]) -> List[NodeState]:
        try:
            return parse_nodes(doc)
        except MALFORMED as exc:
            raise malformed(" ".join(self._node_source or ["sinfo"]), exc) from exc

    def snapshot(self) -> ClusterSnapshot:
        """Nodes, queue and reservations, the three commands run at once: an accept re-checks
        against a fresh snapshot, so its latency is the slowest command's, not their sum."""
        now = int(time.time())
        with ThreadPoolExecutor(max_workers=3, thread_name_prefix="slurm-snapshot") as pool:
            asked_nodes = pool.submit(self.nodes)
            asked_queue = pool.submit(self._json, ["squeue", "--json"])
            asked_reservations = pool.submit(self.list_reservations)
            nodes, doc = asked_nodes.result(), asked_queue.result()
            reservations = asked_reservations.result()
        scope = _in_scope(nodes, self.config.partition)
        usable = [n for n in scope if n.usable]
        cores_per_node = max((n.cores for n in usable or scope), default=1)
        layout = detect_layout(doc)
        try:
            jobs = parse_jobs(doc, now, cores_per_node)
        except MALFORMED as exc:
            raise malformed("squeue --json", exc) from exc
        return build_snapshot(now, nodes, jobs, reservations, self.config, layout)

    def occupancy(self) -> ClusterSnapshot:
        """Nodes, running jobs and reservations; the queue is left out by text squeue's state
        filter, so an accept's re-check costs the same with 10 or 10,000 jobs queued."""
        now = int(time.time())
        args = ["squeue", "-h", "-r", "-t", RUNNING_STATE_FILTER, "-o", RUNNING_FORMAT]
        with ThreadPoolExecutor(max_workers=3, thread_name_prefix="slurm-occupancy") as pool:
            asked_nodes = pool.submit(self.nodes)
            asked_running = pool.submit(self._run, args)
            asked_reservations = pool.submit(self.list_reservations)
            nodes, proc = asked_nodes.result(), asked_running.result()
            reservations = asked_reservations.result()
        if proc.returncode != 0:
            raise BackendUnavailable(f"squeue: {_message(proc)}")
        try:
            jobs = parse_running_text(proc.stdout)
        except ValueError as exc:
            raise BackendUnavailable(str(exc)) from exc
        return build_snapshot(now, nodes, jobs, reservations, self.config, "text")

    def list_reservations(self) -> List[BatchReservation]:
        proc = self._run(["scontrol", "show", "reservation", "-o"])
        if proc.returncode != 0:
            raise BackendUnavailable(f"scontrol show reservation: {_message(proc)}")
        return parse_reservations(proc.stdout)

    def get_reservation(self, name: str) -> Optional[BatchReservation]:
        """One reservation as Slurm holds it now, or None if there is no such reservation."""
        _check(NAME_RE, name, "reservation name")
        proc = self._run(["scontrol", "show", "reservation", "-o", name])
        if proc.returncode != 0:
            msg = _message(proc)
            if "not found" in msg:
                return None
            raise BackendUnavailable(f"scontrol show reservation {name}: {msg}")
        found = [r for r in parse_reservations(proc.stdout) if r.name == name]
        return found[0] if found else None

    def accounting(self, since: int, until: int) -> Dict[str, Any]:
        """``sacct --json`` for the jobs that started between ``since`` and ``until``.

        Needs slurmdbd: without accounting sacct fails, which is a BackendError carrying
        sacct's own message (not BackendUnavailable, since retrying will not help).
        """
        args = sacct_args(since, until)
        proc = self._run(args)
        if proc.returncode != 0:
            msg = _message(proc)
            if is_unavailable(msg):
                raise BackendUnavailable(f"sacct: {msg}")
            raise BackendError(f"sacct: {msg}")
        try:
            doc = json.loads(proc.stdout)
        except ValueError as exc:
            raise BackendUnavailable(f"sacct --json: output is not JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise BackendUnavailable("sacct --json: output is not a JSON object")
        return doc

    # ---- writing

    def create_reservation(self, spec: ReservationSpec) -> BatchReservation:
        """Create the reservation, then read it back: Slurm silently shrinks NodeCnt (§6.1).

        A retry after a lost answer finds "Duplicate reservation name"; if the existing
        reservation has the same window it is returned (idempotent), else refused. A timeout
        raises BackendUnavailable and leaves it unknown whether the reservation exists: the
        caller reconciles by name.
        """
        now = int(time.time())
        args = reservation_args(spec, self.config, now)
        proc = self._run(args)
        if proc.returncode != 0:
            msg = _message(proc)
            if is_unavailable(msg):
                raise BackendUnavailable(f"create reservation {spec.name}: {msg}")
            if "Duplicate reservation name" in msg:
                existing = self.get_reservation(spec.name)
                if existing is not None and _same_window(existing, args):
                    return existing
            raise ReservationRefused(f"create reservation {spec.name}: {msg}")
        made = self.get_reservation(spec.name)
        if made is None:
            raise BackendError(
                f"reservation {spec.name} was created ({proc.stdout.strip()})"
                " but cannot be read back"
            )
        return made

    def delete_reservation(self, name: str) -> None:
        """Delete our reservation; a missing one is fine, one in use by jobs is refused.

        Names without the configured prefix are refused (ValueError): the agent never deletes a
        reservation it did not make.
        """
        _check(NAME_RE, name, "reservation name")
        if self.config.name_prefix and not name.startswith(self.config.name_prefix):
            raise ValueError(
                f"refusing to delete {name!r}: not an agent reservation "
                f"(prefix {self.config.name_prefix!r})"
            )
        proc = self._run(["scontrol", "delete", f"ReservationName={name}"])
        if proc.returncode == 0:
            return
        msg = _message(proc)
        if is_unavailable(msg):
            raise BackendUnavailable(f"delete reservation {name}: {msg}")
        if "Requested reservation is invalid" in msg or "not found" in msg:
            return
        if "in use" in msg:
            raise ReservationRefused(f"delete reservation {name}: {msg}")
        raise BackendError(f"delete reservation {name}: {msg}")


def _same_window(res: BatchReservation, args: Sequence[str]) -> bool:
    """Whether an existing reservation has the start and duration these create args ask for."""
    values = dict(a.split("=", 1) for a in args if "=" in a)
    start = parse_slurm_time(values.get("StartTime", ""))
    minutes = number(values.get("Duration", ""))
    return start == res.start and minutes is not None and res.end - res.start == minutes * 60


# --------------------------------------------------------------------------- snapshot assembly


def _in_scope(nodes: Iterable[NodeState], partition: str) -> List[NodeState]:
    return [n for n in nodes if not partition or partition in n.partitions]


def build_snapshot(
    now: int,
    nodes: Sequence[NodeState],
    jobs: SlurmJobs,
    reservations: Sequence[BatchReservation],
    config: SlurmConfig,
    layout: str = "",
) -> ClusterSnapshot:
    """Assemble the planner's view, limited to the configured partition.

    Capacity counts usable nodes only (not down, drained, failed or not responding). Running
    jobs whose nodes are all out of service are left out, as their cores are not in the
    capacity either; a job on both kinds of node stays (the planner then sees slightly less
    free capacity, never more). Reservations count when they touch a node of the partition.
    """
    scope = _in_scope(nodes, config.partition)
    scope_names = {n.name for n in scope}
    usable_names = {n.name for n in scope if n.usable}
    unit = config.unit
    if unit is CapacityUnit.NODE:
        capacity = len(usable_names)
    else:
        capacity = sum(n.cores for n in scope if n.usable)
    cores_per_node = max((n.cores for n in scope if n.usable), default=1) or 1

    def in_partition(job: Job) -> bool:
        return not config.partition or config.partition in job.partition.split(",")

    running = []
    dropped = []
    for job in jobs.running:
        on = set(jobs.nodes_of.get(job.id, ()))
        if not (in_partition(job) or on & scope_names):
            continue
        if on and not on & usable_names:
            dropped.append(job.id)
            continue
        running.append(job)
    pending = [j for j in jobs.pending if in_partition(j)]
    held = [
        r
        for r in reservations
        if r.end > now
        and (
            not config.partition
            or r.partition == config.partition
            or set(expand_hostlist(r.node_list)) & scope_names
        )
    ]
    extra: Dict[str, Any] = {
        "layout": layout,
        "array_throttle": dict(jobs.array_throttle),
        "running_on_unusable_nodes": dropped,
        "finished_jobs_ignored": jobs.finished,
    }
    return ClusterSnapshot(
        now=now,
        capacity=capacity,
        running=tuple(running),
        pending=tuple(pending),
        reservations=tuple(held),
        nodes=tuple(scope),
        unit=unit,
        cores_per_node=cores_per_node,
        backend="slurm",
        extra=extra,
    )
