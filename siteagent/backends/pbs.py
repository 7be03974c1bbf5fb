"""OpenPBS / PBS Professional through its command-line clients.

What is read, and why these commands (section numbers refer to ``notes/pbs-cli.md``):

* ``qstat -f -F json -t`` (§2): every job with every attribute; ``-t`` lists the subjobs of
  arrays, so that running subjobs hold their cores in the snapshot. **No ``Jobs`` key** means
  an empty queue, but qstat prints the same header-only document when it cannot reach the
  server (and then exits non-zero): the exit status decides, never the JSON alone.
* ``pbsnodes -av -F json`` (§4): vnodes, their state words and resources.
  ``resources_assigned`` leaves zero values out, so a missing ``ncpus`` means 0; a vnode in
  ``job-exclusive``/``resv-exclusive`` is wholly used whatever its assigned ncpus say.
* ``pbs_rstat -f`` (§6): reservations. There is no JSON form; ``-f`` prints ``key = value``
  lines without wrapping.

Reservations are created with ``pbs_rsub -R start -E end -l select=... -N name`` (§5). PBS
answers ``R123.server UNCONFIRMED`` at once and its scheduler decides in its next cycle: the
reservation becomes CONFIRMED, or is denied and silently deleted (§5.1). So a reservation is
only returned once ``pbs_rstat`` shows it confirmed; a denial (the id disappears) or no
decision within ``confirm_timeout`` is a refusal, and whatever was made is deleted.

Dates in ``qstat``/``pbs_rstat`` output and in ``pbs_rsub -R/-E`` are local wall-clock times of
the command (§1), so every command runs with ``TZ=UTC`` and the text is unambiguous UTC.

PBS lets several reservations share a name (``Reserve_Name``) and identifies them by id
(``R123.server``). The agent identifies its reservations by name (its prefix marks them), so a
reservation carrying the agent's prefix is reported under its name and any other under its
id; see :func:`parse_reservations`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone, tzinfo
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

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

#: Reservation names: the strictest documented rule (§5, the reservation-attribute man page:
#: 15 characters, the first alphabetic), so that a name accepted here works on every release.
NAME_MAX = 15
NAME_RE = re.compile(rf"^[A-Za-z][A-Za-z0-9_.-]{{0,{NAME_MAX - 1}}}$")
#: POSIX-portable user and group names (useradd's default rule).
USER_RE = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}\$?$")
GROUP_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")
#: PBS queue names: up to 15 characters, alphanumeric plus ``_``, ``-`` and ``.``.
QUEUE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$")
#: Reservation ids: advance ``R``, standing ``S``, maintenance ``M``, then the server (§1).
RESV_ID_RE = re.compile(r"^([RSM]\d+)(?:\.([A-Za-z0-9_.-]+))?$")

#: Seconds added to a start of "now": pbs_rsub refuses a start in the past (§5.2, exit 238),
#: and the server compares with its own clock after the request travelled.
START_SLACK_S = 2

#: First and longest pause between ``pbs_rstat`` polls while waiting for the confirmation.
POLL_FIRST_S = 0.05
POLL_MAX_S = 1.0


@dataclass(frozen=True)
class PbsConfig:
    """How the agent reaches one PBS server and what it may do there.

    ``pbs_conf`` sets ``PBS_CONF_FILE`` for every command (else ``/etc/pbs.conf``); ``env``
    adds variables (e.g. ``PATH``). ``queue`` limits the snapshot to one execution queue: its
    jobs, jobs in reservation queues, and the vnodes associated with that queue or with none.
    ``unit`` NODE makes reservations of whole vnodes (``place=scatter:excl``) of
    ``cores_per_node`` CPUs (0: the largest usable vnode's ncpus, read from pbsnodes).
    ``users`` are authorised on reservations whose spec names none. ``timeout`` bounds every
    command; ``confirm_timeout`` how long PBS's scheduler may take to confirm a reservation.
    """

    pbs_conf: Optional[str] = None
    env: Mapping[str, str] = field(default_factory=dict)
    queue: str = ""
    unit: CapacityUnit = CapacityUnit.CORE
    cores_per_node: int = 0
    users: Tuple[str, ...] = ()
    timeout: float = 30.0
    name_prefix: str = "sa-"
    confirm_timeout: float = 60.0

    def __post_init__(self) -> None:
        for user in self.users:
            _check(USER_RE, user, "user name")
        if self.queue:
            _check(QUEUE_RE, self.queue, "queue name")
        if self.name_prefix and not NAME_RE.match(self.name_prefix):
            raise ValueError(f"invalid reservation name prefix {self.name_prefix!r}")
        if not self.timeout > 0:
            raise ValueError(f"command timeout must be positive, got {self.timeout}")
        if not self.confirm_timeout > 0:
            raise ValueError(f"confirm timeout must be positive, got {self.confirm_timeout}")
        if self.cores_per_node < 0:
            raise ValueError(f"cores per node must be >= 0, got {self.cores_per_node}")


def _check(pattern: re.Pattern[str], value: str, what: str) -> None:
    if not isinstance(value, str) or not pattern.match(value):
        raise ValueError(f"invalid {what} {value!r}: must match {pattern.pattern}")


# --------------------------------------------------------------------------- value helpers


def number(value: Any) -> Optional[int]:
    """An integer from a JSON number or a numeric string (both occur, §1), else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str) and re.match(r"^\s*-?\d+\s*$", value):
        return int(value)
    return None


def parse_duration(text: Any) -> Optional[int]:
    """``HH:MM:SS`` (hours may exceed 24), ``MM:SS``, or plain seconds → seconds (§1)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return int(text)
    if not isinstance(text, str):
        return None
    m = re.match(r"^\s*(?:(?:(\d+):)?(\d+):)?(\d+)\s*$", text)
    if not m:
        return None
    hours, minutes, seconds = (int(g or 0) for g in m.groups())
    return (hours * 60 + minutes) * 60 + seconds


_SIZE_SHIFT = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40, "p": 50}


def parse_size_kb(text: Any) -> Optional[int]:
    """A PBS size (``4gb``, ``527672488kb``, ``1024``, ``2mw``) in kilobytes (§1)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return int(text) // 1024
    if not isinstance(text, str):
        return None
    m = re.match(r"^\s*(\d+)([kmgtp]?)([bw]?)\s*$", text.lower())
    if not m:
        return None
    size = int(m.group(1)) << _SIZE_SHIFT[m.group(2)]
    if m.group(3) == "w":
        size *= 8  # words are 8 bytes
    return size // 1024


def parse_pbs_time(text: Any, tz: tzinfo = timezone.utc) -> Optional[int]:
    """A PBS date (``Wed Nov 15 14:00:00 2023``, ``Tue Oct  4 ...``) in ``tz`` → epoch.

    qstat prints C ``ctime()`` (space-padded day) and pbs_rstat ``strftime("%d")``
    (zero-padded); both are accepted. ``UNKNOWN`` (an estimate the scheduler stored as 0) and
    anything unparsable give None.
    """
    if not isinstance(text, str):
        return None
    words = text.split()
    if len(words) != 5:
        return None
    try:
        local = datetime.strptime(" ".join(words), "%a %b %d %H:%M:%S %Y")
    except ValueError:
        return None
    return int(local.replace(tzinfo=tz).timestamp())


def parse_select(text: str) -> List[Tuple[int, Dict[str, str]]]:
    """Chunks of a select statement: ``2:ncpus=8:mem=16gb+host=n1:ncpus=4`` →
    ``[(2, {ncpus: 8, mem: 16gb}), (1, {host: n1, ncpus: 4})]``. Raises ValueError."""
    chunks = []
    for part in text.split("+"):
        words = [w for w in part.split(":") if w]
        count = 1
        if words and "=" not in words[0]:
            if not words[0].isdigit():
                raise ValueError(f"bad chunk count in select {text!r}")
            count = int(words.pop(0))
        resources: Dict[str, str] = {}
        for word in words:
            key, sep, value = word.partition("=")
            if not sep or not key or not value:
                raise ValueError(f"bad resource {word!r} in select {text!r}")
            resources[key] = value
        chunks.append((count, resources))
    if not chunks:
        raise ValueError("empty select")
    return chunks


def select_totals(text: str) -> Tuple[int, int]:
    """(chunks, ncpus) asked for by a select statement; a chunk without ncpus has one CPU."""
    chunks = 0
    ncpus = 0
    for count, resources in parse_select(text):
        chunks += count
        ncpus += count * (number(resources.get("ncpus", "1")) or 0)
    return chunks, ncpus


def exec_vnodes(text: Any) -> List[str]:
    """Distinct vnode names of ``exec_vnode``/``resv_nodes`` in order of appearance.

    ``(n1:ncpus=8)+(n2:ncpus=4+n3:ncpus=4)+(n4)`` → n1 n2 n3 n4 (§2.1: a chunk may span
    vnodes, and a vnode allocated but unused appears bare).
    """
    if not isinstance(text, str):
        return []
    names: List[str] = []
    for item in re.split(r"[()+]", text):
        name = item.split(":", 1)[0].strip()
        if name and name not in names:
            names.append(name)
    return names


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _owner(value: Any) -> str:
    """``alice@login1`` → ``alice``."""
    return _text(value).split("@", 1)[0]


def _words(value: Any) -> Tuple[str, ...]:
    """A comma-separated PBS list as a tuple, empty items dropped."""
    return tuple(w.strip() for w in _text(value).split(",") if w.strip())


# --------------------------------------------------------------------------- jobs

#: Job states that hold resources (§2.1): running, exiting, suspended (S, U). Suspended jobs
#: may release CPUs depending on the site; counting them keeps the plan conservative.
RUNNING_STATES = frozenset({"R", "E", "S", "U"})
#: Job states of work not started: queued, held, waiting (``-a``), in transit, array begun.
PENDING_STATES = frozenset({"Q", "H", "W", "T", "B"})
#: Placement words of jobs that take whole vnodes.
EXCLUSIVE_PLACE = frozenset({"excl", "exclhost"})


@dataclass
class PbsJobs:
    """Jobs read from ``qstat -f -F json -t``, normalised, in qstat's (submission) order.

    ``nodes_of`` holds running jobs' vnodes; ``exclusive`` the ids of jobs placed ``excl``
    (their cores are settled against the vnodes in :func:`build_snapshot`);
    ``arrays_expanded`` the arrays whose subjobs were not listed (qstat without ``-t``),
    whose queued indices were expanded from ``array_indices_remaining``.
    """

    running: List[Job] = field(default_factory=list)
    pending: List[Job] = field(default_factory=list)
    nodes_of: Dict[str, List[str]] = field(default_factory=dict)
    exclusive: Set[str] = field(default_factory=set)
    arrays_expanded: List[str] = field(default_factory=list)
    finished: int = 0


def check_header(doc: Any, what: str) -> Dict[str, Any]:
    """The document as a dict if it has the envelope every PBS JSON output has (§2)."""
    if not isinstance(doc, dict) or "timestamp" not in doc or "pbs_server" not in doc:
        raise ValueError(f"{what}: not a PBS JSON document (no timestamp/pbs_server header)")
    return doc


def array_indices(text: str) -> List[int]:
    """Indices of a PBS range list (``0-9``, ``2-9,12``, ``1-99:2``)."""
    out: List[int] = []
    for item in _words(text):
        step = 1
        if ":" in item:
            item, step_s = item.split(":", 1)
            step = max(1, int(step_s))
        lo, _, hi = item.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1, step))
    return out


def _resources(rec: Mapping[str, Any]) -> Tuple[int, int, bool]:
    """(cores, chunks, exclusive placement) of a job's ``Resource_List``."""
    rl = rec.get("Resource_List")
    rl = rl if isinstance(rl, dict) else {}
    chunks, ncpus = 0, 0
    select = rl.get("select")
    if isinstance(select, str):
        try:
            chunks, ncpus = select_totals(select)
        except ValueError:
            chunks, ncpus = 0, 0
    cores = number(rl.get("ncpus")) or ncpus or 1
    nodes = number(rl.get("nodect")) or chunks or 1
    place = set(re.split(r"[:,]", _text(rl.get("place"))))
    return cores, nodes, bool(place & EXCLUSIVE_PLACE)


def _job(job_id: str, rec: Mapping[str, Any], tz: tzinfo, now: int, start: Optional[int]) -> Job:
    state = _text(rec.get("job_state"))
    cores, nodes, _ = _resources(rec)
    rl = rec.get("Resource_List")
    walltime = parse_duration(rl.get("walltime")) if isinstance(rl, dict) else None
    submit = parse_pbs_time(rec.get("ctime"), tz) or parse_pbs_time(rec.get("qtime"), tz) or 0
    queue = _text(rec.get("queue"))
    execution = parse_pbs_time(rec.get("Execution_Time"), tz)
    # held, or waiting with no start time to wait for: a failed stage-in (§2.1)
    held = (
        state == "H"
        or _text(rec.get("Hold_Types", "n")) not in ("", "n")
        or (state == "W" and execution is None)
    )
    expected = None
    estimated = rec.get("estimated")
    if isinstance(estimated, dict) and not held and not RESV_ID_RE.match(queue):
        expected = parse_pbs_time(estimated.get("start_time"), tz)
    if start is not None:
        nodes = len(exec_vnodes(rec.get("exec_vnode"))) or nodes
    return Job(
        id=job_id,
        cores=cores,
        submit=submit,
        limit=walltime if walltime and walltime > 0 else UNLIMITED_S,
        start=start,
        nodes=nodes,
        user=_owner(rec.get("Job_Owner") or rec.get("euser")),
        account=_text(rec.get("Account_Name")),
        partition=queue,
        expected_start=expected,
        eligible=not held,
        not_before=execution if execution is not None and execution > now else None,
        reservation=queue if RESV_ID_RE.match(queue) else "",
    )


def _array_parent(job_id: str) -> str:
    """``123[4].server`` → ``123[].server``; other ids unchanged."""
    return re.sub(r"\[\d+\]", "[]", job_id, count=1)


def parse_jobs(doc: Mapping[str, Any], now: int, tz: tzinfo = timezone.utc) -> PbsJobs:
    """Running and pending jobs of a ``qstat -f -F json [-t]`` document.

    A missing ``Jobs`` key is an empty queue (§2). Finished, moved and expired jobs (history
    with ``-x``) are counted and dropped. Held jobs (state H or a hold type) are not eligible;
    ``Execution_Time`` in the future becomes ``not_before``; ``estimated.start_time`` (top jobs
    only, §2.1) becomes ``expected_start``; a job in queue ``R123`` waits for or runs in that
    reservation. An array parent (``123[]``) is dropped when its subjobs are listed (``-t``),
    its estimate (PBS puts it on the parent) going to the first queued subjob; otherwise its
    queued indices become one pending Job each, the size of one subjob.
    """
    check_header(doc, "qstat")
    out = PbsJobs()
    jobs = doc.get("Jobs")
    if jobs is None:
        return out
    if not isinstance(jobs, dict):
        raise ValueError("qstat: 'Jobs' is not an object")
    listed_parents = {_array_parent(j) for j in jobs if re.search(r"\[\d+\]", j)}
    parent_estimates: Dict[str, Optional[int]] = {}
    for job_id, rec in jobs.items():
        if not isinstance(rec, dict):
            raise ValueError(f"qstat: job {job_id} is not an object")
        state = _text(rec.get("job_state"))
        if state in RUNNING_STATES:
            start = parse_pbs_time(rec.get("stime"), tz)
            job = _job(job_id, rec, tz, now, start if start is not None else now)
            out.running.append(job)
            out.nodes_of[job_id] = exec_vnodes(rec.get("exec_vnode"))
        elif "[]" in job_id:
            if job_id in listed_parents:
                parent_estimates[job_id] = _job(job_id, rec, tz, now, None).expected_start
            else:
                out.pending.extend(_expand_array(job_id, rec, tz, now))
                out.arrays_expanded.append(job_id)
            continue
        elif state in PENDING_STATES:
            out.pending.append(_job(job_id, rec, tz, now, None))
        else:
            out.finished += 1
            continue
        if _resources(rec)[2]:
            out.exclusive.add(job_id)
    for i, job in enumerate(out.pending):
        expected = parent_estimates.pop(_array_parent(job.id), None)
        if expected is not None and job.expected_start is None:
            out.pending[i] = replace(job, expected_start=expected)
    return out


def _expand_array(job_id: str, rec: Mapping[str, Any], tz: tzinfo, now: int) -> List[Job]:
    """One pending Job per queued index; PBS's estimate (on the parent) goes on the first."""
    template = _job(job_id, rec, tz, now, None)
    out: List[Job] = []
    for i in array_indices(_text(rec.get("array_indices_remaining"))):
        sub = replace(template, id=job_id.replace("[]", f"[{i}]"))
        out.append(sub if not out else replace(sub, expected_start=None))
    return out


# --------------------------------------------------------------------------- nodes

#: State words of a vnode that is up and schedulable (§4): free, or in use by jobs or a
#: running reservation. Every other word (down, offline, state-unknown, stale, busy,
#: provisioning, maintenance, sleep, unresolvable, initializing, ...) takes it out.
USABLE_WORDS = frozenset({"free", "job-busy", "job-exclusive", "resv-exclusive"})
#: State words that make the whole vnode used, whatever its assigned ncpus say (§4).
EXCLUSIVE_WORDS = frozenset({"job-exclusive", "resv-exclusive"})
#: ``sharing`` values under which every job gets whole vnodes.
FORCED_EXCLUSIVE = frozenset({"force_excl", "force_exclhost"})


@dataclass(frozen=True)
class PbsNode:
    """A vnode: the planner's NodeState, and its ``sharing`` (whether jobs get it whole)."""

    node: NodeState
    sharing: str = "default_shared"


def parse_nodes(doc: Mapping[str, Any]) -> List[PbsNode]:
    """Vnodes of a ``pbsnodes -av -F json`` document.

    Cores are ``resources_available.ncpus``; allocated cores ``resources_assigned.ncpus``
    (absent means 0, §4) or all of them when the state says exclusive. The vnode's ``queue``
    (if associated with one) goes in ``partitions``; its ``comment`` in ``reason``.
    """
    check_header(doc, "pbsnodes")
    nodes = doc.get("nodes")
    if not isinstance(nodes, dict):
        raise ValueError("pbsnodes: no 'nodes' object")
    out = []
    for name, rec in nodes.items():
        if not isinstance(rec, dict):
            raise ValueError(f"pbsnodes: vnode {name} is not an object")
        if "Error" in rec:
            raise ValueError(f"pbsnodes: {name}: {rec['Error']}")
        avail = rec.get("resources_available")
        avail = avail if isinstance(avail, dict) else {}
        assigned = rec.get("resources_assigned")
        assigned = assigned if isinstance(assigned, dict) else {}
        state = _text(rec.get("state"))
        words = set(_words(state))
        cores = number(avail.get("ncpus")) or number(rec.get("pcpus")) or 0
        alloc = number(assigned.get("ncpus")) or 0
        if words & EXCLUSIVE_WORDS:
            alloc = cores
        queue = _text(rec.get("queue"))
        node = NodeState(
            name=str(name),
            cores=cores,
            alloc_cores=min(alloc, cores),
            state=state,
            usable=bool(words) and words <= USABLE_WORDS,
            memory_mb=(parse_size_kb(avail.get("mem")) or 0) // 1024,
            partitions=(queue,) if queue else (),
            reason=_text(rec.get("comment")),
        )
        out.append(PbsNode(node=node, sharing=_text(rec.get("sharing")) or "default_shared"))
    return out


# --------------------------------------------------------------------------- reservations

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
    text: str, tz: tzinfo = timezone.utc, name_prefix: str = "sa-"
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
            users=tuple(_owner(u) for u in _words(rec.get("Authorized_Users"))),
            accounts=_words(rec.get("Authorized_Groups")),
            flags=tuple(w for w in re.split(r"[:,]", rec.get("Resource_List.place", "")) if w),
            state=state,
        )
        queue = rec.get("queue") or RESV_ID_RE.sub(r"\1", resv_id)
        out.append(PbsReservation(resv_id, queue, reserve_name, state, record))
    return out


# --------------------------------------------------------------------------- create arguments


def local_datetime(epoch: int) -> str:
    """``CCYYMMDDhhmm.SS`` in UTC, the commands' time zone: pbs_rsub's Datetime format (§5),
    which has no epoch form."""
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y%m%d%H%M.%S")


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
    start = max(spec.start, now + START_SLACK_S)
    if spec.end <= start:
        raise ValueError(f"reservation window ends in the past ({local_datetime(spec.end)} UTC)")
    unit = CapacityUnit(spec.unit)
    if unit is not config.unit:
        raise ValueError(
            f"reservation unit {unit.value} differs from the backend's {config.unit.value}"
        )
    users = tuple(spec.users) or config.users
    for user in users:
        _check(USER_RE, user, "user name")
    for group in spec.accounts:
        _check(GROUP_RE, group, "account (group) name")
    if spec.partition and spec.partition != config.queue:
        raise ValueError(
            f"reservation partition {spec.partition!r} is not the backend's queue "
            f"{config.queue!r}: PBS reservations are not tied to a queue"
        )
    if unit is CapacityUnit.NODE:
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


def parse_rsub_reply(stdout: str) -> Tuple[str, str]:
    """(id, state word) of pbs_rsub's reply ``R123.server UNCONFIRMED`` (§5.2).

    The word may be several (``delete, wait period expired``). Raises ValueError when there
    is no such line.
    """
    for line in reversed(stdout.splitlines()):
        m = re.match(r"^\s*([RSM]\d+\.\S+)\s+(.+?)\s*$", line)
        if m:
            return m.group(1), m.group(2)
    raise ValueError(f"no reservation id in pbs_rsub's reply {stdout.strip()!r}")


# --------------------------------------------------------------------------- error mapping

#: Messages meaning "the server did not answer" rather than "it said no" (§4, §5.2, §6).
UNAVAILABLE_MARKERS = (
    "cannot connect to server",
    "Connection refused",
    "No route to host",
    "Connection timed out",
    "Communication failure",
)
UNKNOWN_RESV = "Unknown Reservation Id"


def is_unavailable(message: str) -> bool:
    return any(marker in message for marker in UNAVAILABLE_MARKERS)


def _message(proc: subprocess.CompletedProcess[str]) -> str:
    """A failed command's error: its stderr lines, else stdout, else the exit status."""
    lines = [ln.strip() for ln in (proc.stderr or "").splitlines() if ln.strip()]
    return " / ".join(lines) or (proc.stdout or "").strip() or f"exit status {proc.returncode}"


# --------------------------------------------------------------------------- snapshot assembly


def _in_scope(nodes: Iterable[PbsNode], queue: str) -> List[PbsNode]:
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

    Capacity counts usable vnodes only. A job placed ``excl``, or any job where every vnode
    forces exclusive use, takes whole vnodes: a running one the cores of its vnodes, a pending
    one at least ``nodect`` x cores per node. Running jobs whose vnodes are all out of service
    are left out, as their cores are not in the capacity. Reservations count while they hold
    vnodes (confirmed or running; not unconfirmed or being deleted), and jobs in a reservation
    queue name the reservation as the snapshot names it.
    """
    scope = _in_scope(nodes, config.queue)
    by_name = {n.node.name: n.node for n in scope}
    usable = [n.node for n in scope if n.node.usable]
    usable_names = {n.name for n in usable}
    cores_per_node = max((n.cores for n in usable), default=1) or 1
    forced = bool(usable) and all(n.sharing in FORCED_EXCLUSIVE for n in scope if n.node.usable)
    capacity = len(usable) if config.unit is CapacityUnit.NODE else sum(n.cores for n in usable)

    held = [
        r
        for r in reservations
        if r.state in HOLDING_STATES
        and r.record.end > now
        and (not config.queue or set(exec_vnodes(r.record.node_list)) & set(by_name))
    ]
    names = {r.queue: r.record.name for r in reservations}

    def settle(job: Job) -> Job:
        if job.reservation:
            job = replace(job, reservation=names.get(job.reservation, job.reservation))
        if job.id in jobs.exclusive or forced:
            on = [by_name[v] for v in jobs.nodes_of.get(job.id, []) if v in by_name]
            whole = sum(n.cores for n in on) if on else job.nodes * cores_per_node
            job = replace(job, cores=max(job.cores, whole))
        return job

    def in_queue(job: Job) -> bool:
        return not config.queue or job.partition == config.queue or job.reservation in names

    running = []
    dropped = []
    for job in jobs.running:
        on = set(jobs.nodes_of.get(job.id, ()))
        if not (in_queue(job) or on & set(by_name)):
            continue
        if on and not on & usable_names:
            dropped.append(job.id)
            continue
        running.append(settle(job))
    pending = [settle(j) for j in jobs.pending if in_queue(j)]
    extra: Dict[str, Any] = {
        "pbs_server": server,
        "reservation_ids": {r.record.name: r.id for r in reservations},
        "running_on_unusable_nodes": dropped,
        "arrays_expanded": list(jobs.arrays_expanded),
        "finished_jobs_ignored": jobs.finished,
    }
    return ClusterSnapshot(
        now=now,
        capacity=capacity,
        running=tuple(running),
        pending=tuple(pending),
        reservations=tuple(r.record for r in held),
        nodes=tuple(n.node for n in scope),
        unit=config.unit,
        cores_per_node=cores_per_node,
        backend="pbs",
        extra=extra,
    )


# --------------------------------------------------------------------------- the backend


class PbsBackend(Backend):
    """An OpenPBS / PBS Professional server seen through its command-line clients."""

    name = "pbs"

    def __init__(self, config: Optional[PbsConfig] = None) -> None:
        self.config = config or PbsConfig()

    # ---- commands

    def _env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env.update(self.config.env)
        if self.config.pbs_conf:
            env["PBS_CONF_FILE"] = self.config.pbs_conf
        # dates are local time of the command (§1): pin them to UTC; untranslated messages
        env["TZ"] = "UTC"
        env["LC_ALL"] = "C"
        return env

    def _run(self, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """Run a PBS client in this backend's environment, with its timeout."""
        return run_command(args, self._env(), self.config.timeout)

    def _json(self, args: Sequence[str]) -> Dict[str, Any]:
        """A JSON document from a command that must succeed.

        qstat prints its JSON header even when it cannot reach the server, so the exit status
        is checked first: that header alone would read as an empty queue.
        """
        proc = self._run(args)
        if proc.returncode != 0:
            raise BackendUnavailable(f"{' '.join(args)}: {_message(proc)}")
        try:
            return check_header(json.loads(proc.stdout), args[0])
        except ValueError as exc:
            raise BackendUnavailable(f"{' '.join(args)}: unreadable output: {exc}") from exc

    def _rstat(self, resv_id: Optional[str] = None) -> List[PbsReservation]:
        """Reservations from ``pbs_rstat -f`` (one, if ``resv_id``; none if it is unknown)."""
        args = ["pbs_rstat", "-f"] + ([resv_id] if resv_id else [])
        proc = self._run(args)
        if proc.returncode != 0:
            raise BackendUnavailable(f"{' '.join(args)}: {_message(proc)}")
        # an unknown id is reported on stderr with exit status 0 (§6): no block, no record
        return parse_reservations(proc.stdout, name_prefix=self.config.name_prefix)

    # ---- reading

    def nodes(self) -> List[PbsNode]:
        try:
            return parse_nodes(self._json(["pbsnodes", "-av", "-F", "json"]))
        except ValueError as exc:
            raise BackendUnavailable(f"pbsnodes: {exc}") from exc

    def snapshot(self) -> ClusterSnapshot:
        now = int(time.time())
        nodes = self.nodes()
        doc = self._json(["qstat", "-f", "-F", "json", "-t"])
        try:
            jobs = parse_jobs(doc, now)
        except ValueError as exc:
            raise BackendUnavailable(str(exc)) from exc
        reservations = self._rstat()
        return build_snapshot(
            now, nodes, jobs, reservations, self.config, _text(doc.get("pbs_server"))
        )

    def list_reservations(self) -> List[BatchReservation]:
        return [r.record for r in self._rstat()]

    def find(self, name: str) -> List[PbsReservation]:
        """The PBS reservations behind an agent name (``name`` or ``name@id``)."""
        base, _, resv_id = name.partition("@")
        return [
            r for r in self._rstat() if r.reserve_name == base and (not resv_id or r.id == resv_id)
        ]

    # ---- writing

    def _cores_per_node(self) -> int:
        if self.config.unit is not CapacityUnit.NODE or self.config.cores_per_node:
            return self.config.cores_per_node
        scope = _in_scope(self.nodes(), self.config.queue)
        return max((n.node.cores for n in scope if n.node.usable), default=0)

    def create_reservation(self, spec: ReservationSpec) -> BatchReservation:
        """Create the reservation and return it once PBS's scheduler has confirmed it.

        A reservation of this name that exists already (a retry after a lost answer) is
        returned if it has the same window, else refused; one still unconfirmed is waited
        for. A denial, a failure, or no decision within ``confirm_timeout`` raises
        ReservationRefused with PBS's words, after deleting whatever was made. If the server
        stops answering meanwhile, BackendUnavailable names the id: the caller reconciles.
        """
        now = int(time.time())
        args = rsub_args(spec, self.config, now, self._cores_per_node())
        for existing in self.find(spec.name):
            if not _same_window(existing.record, spec, now):
                raise ReservationRefused(
                    f"create reservation {spec.name}: {existing.id} carries this name "
                    f"with another window"
                )
            if existing.state in CONFIRMED_STATES:
                return existing.record
            return self._await_confirmation(spec.name, existing.id)
        proc = self._run(args)
        if proc.returncode != 0:
            msg = _message(proc)
            if is_unavailable(msg):
                raise BackendUnavailable(f"create reservation {spec.name}: {msg}")
            raise ReservationRefused(f"create reservation {spec.name}: {msg}")
        try:
            resv_id, word = parse_rsub_reply(proc.stdout)
        except ValueError as exc:
            raise BackendError(f"create reservation {spec.name}: {exc}") from exc
        if word not in ("UNCONFIRMED", "CONFIRMED"):
            self._delete_ids([resv_id])
            raise ReservationRefused(f"create reservation {spec.name}: pbs_rsub: {resv_id} {word}")
        return self._await_confirmation(spec.name, resv_id)

    def _await_confirmation(self, name: str, resv_id: str) -> BatchReservation:
        """Poll ``pbs_rstat -f <id>`` until PBS confirms, denies or the deadline passes."""
        deadline = time.monotonic() + self.config.confirm_timeout
        pause = POLL_FIRST_S
        while True:
            found = self._rstat(resv_id)
            if not found:
                raise ReservationRefused(
                    f"create reservation {name}: PBS denied {resv_id} "
                    f"(pbs_rstat: {UNKNOWN_RESV} {resv_id})"
                )
            resv = found[0]
            if resv.state in CONFIRMED_STATES:
                return resv.record
            if resv.state != "UNCONFIRMED":
                self._delete_ids([resv_id])
                raise ReservationRefused(
                    f"create reservation {name}: {resv_id} is {resv.state}, not confirmed"
                )
            if time.monotonic() + pause > deadline:
                self._delete_ids([resv_id])
                raise ReservationRefused(
                    f"create reservation {name}: PBS did not confirm {resv_id} within "
                    f"{self.config.confirm_timeout:g} s (deleted)"
                )
            time.sleep(pause)
            pause = min(pause * 2, POLL_MAX_S)

    def delete_reservation(self, name: str) -> None:
        """Delete every PBS reservation behind an agent name; a missing one is fine.

        Names without the configured prefix are refused (ValueError): the agent never deletes
        a reservation it did not make. PBS deletes a reservation together with its jobs,
        running or queued (§7).
        """
        base = name.partition("@")[0]
        _check(NAME_RE, base, "reservation name")
        if self.config.name_prefix and not base.startswith(self.config.name_prefix):
            raise ValueError(
                f"refusing to delete {name!r}: not an agent reservation "
                f"(prefix {self.config.name_prefix!r})"
            )
        self._delete_ids([r.id for r in self.find(name)])

    def _delete_ids(self, ids: Sequence[str]) -> None:
        if not ids:
            return
        proc = self._run(["pbs_rdel", *ids])
        if proc.returncode == 0:
            return
        msg = _message(proc)
        if is_unavailable(msg):
            raise BackendUnavailable(f"pbs_rdel {' '.join(ids)}: {msg}")
        failures = [ln for ln in (proc.stderr or "").splitlines() if ln.strip()]
        if failures and all(UNKNOWN_RESV in ln for ln in failures):
            return  # gone already (or denied meanwhile): what was asked is true
        raise BackendError(f"pbs_rdel {' '.join(ids)}: {msg}")


def _same_window(res: BatchReservation, spec: ReservationSpec, now: int) -> bool:
    """Whether ``res`` is what creating ``spec`` now (or earlier) would have made: the same
    end, and the asked start or one moved later to "now" by :func:`rsub_args`."""
    return res.end == spec.end and spec.start <= res.start <= max(spec.start, now + START_SLACK_S)
