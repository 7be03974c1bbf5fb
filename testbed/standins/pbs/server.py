"""The stand-in's server: pbs_server and its scheduler in one process, driven by the simulator.

It owns a :class:`siteagent.sim.Simulator` replaying an SWF trace against the wall clock (the
trace is shifted so that ``--offset`` seconds into it is "now" at start-up) on ``--nodes``
vnodes of ``--cores`` CPUs, and answers the stand-in's commands over a unix socket. State
lives here, between command invocations, as it lives in pbs_server.

Jobs are the simulator's tasks: numbered from the server's sequence as they arrive, placed on
vnodes when the simulator starts them. Reservations follow OpenPBS (docs/pbs.md §5.1):
``submit_resv`` stores them UNCONFIRMED and answers at once; ``--confirm-delay`` seconds later
the "scheduling cycle" asks the simulator to hold the window (running work and other
reservations block it, queued jobs do not); if it fits the reservation is CONFIRMED and gets
vnodes (``resv_nodes``), else it is denied and deleted. Confirmed reservations run at their
start and vanish at their end; the simulator keeps every job out of them meanwhile.

Times cross the wire as epoch seconds; the commands print them in their own local time, as
PBS's commands do.

With ``--exclusive`` every vnode has ``sharing=force_excl``: jobs and reservations take whole
vnodes and the simulator counts vnodes, not CPUs.

Run: ``python -m testbed.standins.pbs.server --socket PATH [options]`` (see ``--help``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import socketserver
import sys
import threading
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple, cast

from siteagent.backends.replay import bundled_trace
from siteagent.core.engines import Policy, ReservationConflict
from siteagent.core.machine import Task
from siteagent.sim.simulator import Simulator
from siteagent.sim.swf import SwfJob, parse_record
from siteagent.sim.workload import Workload
from testbed.standins.pbs.protocol import (
    PBSE_BADATVAL,
    PBSE_BADTSPEC,
    PBSE_INTERNAL,
    PBSE_PERM,
    PBSE_UNKJOBID,
    PBSE_UNKNODE,
    PBSE_UNKRESC,
    PBSE_UNKRESVID,
    ServerError,
)

PBS_VERSION = "23.06.06"

#: An attribute as PBS's batch_status carries it: name, resource (or None), value text.
Attr = Tuple[str, Optional[str], str]

# reservation states (enum resv_states, docs/pbs.md §6)
RESV_UNCONFIRMED = 1
RESV_CONFIRMED = 2
RESV_RUNNING = 5

#: Resources a select chunk may ask for here; anything else is an unknown resource.
CHUNK_RESOURCES = frozenset({"ncpus", "mem", "vmem", "mpiprocs", "ompthreads", "host", "vnode"})
PLACE_WORDS = frozenset({"free", "pack", "scatter", "vscatter", "excl", "shared", "exclhost"})
#: Memory of each vnode: 4 GB per CPU.
MEM_KB_PER_CPU = 4 * 1024 * 1024


def hms(seconds: int) -> str:
    """PBS durations: ``HH:MM:SS``, hours unbounded (§1)."""
    seconds = max(0, seconds)
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


@dataclass
class Reservation:
    """An advance reservation as the server keeps it (times in epoch seconds)."""

    id: str
    name: str
    owner: str
    start: int
    end: int
    chunks: List[int]
    select: str
    place: str
    users: List[str]
    groups: List[str]
    size: int
    whole: bool
    scatter: bool
    pack: bool
    feasible: bool
    ctime: int
    decide_at: float
    interactive: int = 0
    state: int = RESV_UNCONFIRMED
    mtime: int = 0
    nodes: List[Tuple[str, int]] = field(default_factory=list)

    @property
    def queue(self) -> str:
        return self.id.split(".", 1)[0]


class Standin:
    """The server's state and its answers to every request (thread-safe through one lock)."""

    def __init__(
        self,
        trace: str,
        nodes: int,
        cores: int,
        offset_s: int,
        server: str,
        confirm_delay: float,
        exclusive: bool,
        managers: Sequence[str],
        clock: Callable[[], float] = time.time,
    ) -> None:
        width = max(2, len(str(nodes)))
        self.vnodes = [f"node{i:0{width}d}" for i in range(1, nodes + 1)]
        self.cores = cores
        self.server = server
        self.confirm_delay = confirm_delay
        self.exclusive = exclusive
        self.managers = set(managers)
        self.clock = clock
        self.lock = threading.Lock()
        self.procs: Dict[object, int] = {}
        self.placed: Dict[object, List[Tuple[str, int]]] = {}
        self.running: Dict[object, Task] = {}
        self.ids: Dict[object, int] = {}
        self.resv: Dict[str, Reservation] = {}
        self.denied: Set[str] = set()
        self.seq = 0
        self.changed: Dict[str, int] = {}
        self.last_used: Dict[str, int] = {}
        workload = Workload(trace, cores=nodes * cores, skip_invalid=True)
        units = nodes if exclusive else nodes * cores
        self.sim = Simulator(
            self._tasks(workload.tasks()),
            units,
            Policy.EASY,
            on_start=self._started,
            on_finish=self._finished,
        )
        origin = self.sim.now + offset_s
        self.started_at = int(clock())
        self.shift = self.started_at - origin
        self.sim.advance_to(origin)
        for vnode in self.vnodes:
            self.changed.setdefault(vnode, self.started_at)

    # -- time and events ------------------------------------------------------------------------

    def now(self) -> int:
        return int(self.clock())

    def _tasks(self, tasks: Iterator[Task]) -> Iterator[Task]:
        """The trace's tasks, remembering each one's CPUs; whole vnodes when exclusive."""
        for task in tasks:
            self.procs[task.key] = task.size
            if self.exclusive:
                task.size = math.ceil(task.size / self.cores)
            yield task

    def sync(self) -> None:
        """Bring everything to now: the simulator, then the scheduling cycle's decisions."""
        now = self.now()
        self.sim.advance_to(now - self.shift)
        for task in sorted(self.sim.running + self.sim.queued, key=lambda t: cast(int, t.key)):
            self.job_seq(task)
        for r in list(self.resv.values()):
            if r.state == RESV_UNCONFIRMED and r.decide_at <= self.clock():
                self._decide(r, now)
            if r.state == RESV_UNCONFIRMED:
                continue
            if r.end <= now:
                del self.resv[r.id]  # the simulator forgot it at its end
            elif r.start <= now:
                r.state = RESV_RUNNING

    def job_seq(self, task: Task) -> int:
        if task.key not in self.ids:
            self.seq += 1
            self.ids[task.key] = self.seq
        return self.ids[task.key]

    def job_id(self, task: Task) -> str:
        return f"{self.job_seq(task)}.{self.server}"

    # -- placement --------------------------------------------------------------------------------

    def _fit(
        self,
        chunks: Sequence[int],
        free: Dict[str, int],
        whole: bool,
        scatter: bool,
        pack: bool = False,
    ) -> Optional[List[Tuple[str, int]]]:
        """Chunks onto vnodes, first fit in vnode order; None if they do not fit.

        ``whole`` vnodes must be entirely free before the first chunk lands on them (their
        remaining CPUs stay for the same owner); ``scatter`` puts each chunk on its own vnode;
        ``pack`` puts all on one.
        """
        if pack:
            for v in self.vnodes:
                if (not whole or free[v] >= self.cores) and free[v] >= sum(chunks):
                    return [(v, c) for c in chunks]
            return None
        left = dict(free)
        taken: Set[str] = set()
        out = []
        for c in chunks:
            for v in self.vnodes:
                if scatter and v in taken:
                    continue
                if whole and v not in taken and left[v] < self.cores:
                    continue
                if left[v] >= c:
                    left[v] -= c
                    taken.add(v)
                    out.append((v, c))
                    break
            else:
                return None
        return out

    def _used(self) -> Dict[str, int]:
        used: Dict[str, int] = defaultdict(int)
        for chunks in self.placed.values():
            for v, c in chunks:
                used[v] += c
        return used

    def _claims(self, start: int, end: int, exclude: str = "") -> Dict[str, int]:
        """CPUs that confirmed reservations overlapping [start, end) (epoch) hold per vnode."""
        claims: Dict[str, int] = defaultdict(int)
        for r in self.resv.values():
            if r.id == exclude or r.state == RESV_UNCONFIRMED:
                continue
            if r.start < end and r.end > start:
                for v, c in r.nodes:
                    claims[v] = self.cores if r.whole else claims[v] + c
        return claims

    def job_shape(self, task: Task) -> Tuple[List[int], bool]:
        """(CPUs per chunk, exclusive): one-CPU chunks placed freely, or whole vnodes."""
        procs = self.procs[task.key]
        if self.exclusive:
            return [math.ceil(procs / task.size)] * task.size, True
        return [1] * procs, False

    def _started(self, task: Task) -> None:
        """Place a task the simulator just started, keeping clear of reservations if it can."""
        assert task.start is not None
        start = task.start + self.shift
        chunks, whole = self.job_shape(task)
        used = self._used()
        claims = self._claims(start, start + max(1, task.estimate))
        around = {v: self.cores - used[v] - claims[v] for v in self.vnodes}
        anywhere = {v: self.cores - used[v] for v in self.vnodes}
        placed = self._fit(chunks, around, whole, whole) or self._fit(
            chunks, anywhere, whole, whole
        )
        # the simulator only starts what its capacity holds, so this cannot fail
        assert placed is not None, f"cannot place {task!r}"
        self.placed[task.key] = placed
        self.running[task.key] = task
        for v, _ in placed:
            self.changed[v] = start

    def _finished(self, task: Task) -> None:
        assert task.start is not None
        end = task.start + task.run + self.shift
        self.running.pop(task.key, None)
        for v, _ in self.placed.pop(task.key, []):
            self.changed[v] = end
            self.last_used[v] = end

    # -- reservations -----------------------------------------------------------------------------

    def _decide(self, r: Reservation, now: int) -> None:
        """The scheduling cycle's verdict: hold the window in the simulator, or deny."""
        try:
            if not r.feasible:
                raise ReservationConflict("chunks fit no vnode")
            self.sim.add_reservation(r.id, r.start - self.shift, r.end - self.shift, r.size)
        except (ReservationConflict, ValueError):
            del self.resv[r.id]
            self.denied.add(r.id)
            return
        used_after: Dict[str, int] = defaultdict(int)
        for key, chunks in self.placed.items():
            task = self.running[key]
            assert task.start is not None
            if task.start + task.estimate + self.shift > r.start:
                for v, c in chunks:
                    used_after[v] += c
        claims = self._claims(r.start, r.end, exclude=r.id)
        free = {v: self.cores - used_after[v] - claims[v] for v in self.vnodes}
        empty = {v: self.cores for v in self.vnodes}
        nodes = self._fit(r.chunks, free, r.whole, r.scatter, r.pack) or self._fit(
            r.chunks, empty, r.whole, r.scatter, r.pack
        )
        assert nodes is not None  # feasible on an empty machine, checked at submission
        r.nodes = nodes
        r.state = RESV_CONFIRMED
        r.mtime = now

    def submit_resv(self, req: Dict[str, Any]) -> Reservation:
        """Check a pbs_rsub request and store it unconfirmed (errors as PBS gives them)."""
        now = self.now()
        start, end = self._window(req.get("start"), req.get("end"), req.get("walltime"))
        if start < now or end <= start:
            raise ServerError(PBSE_BADTSPEC)
        select = req.get("select") or "1:ncpus=1"
        place = req.get("place") or "free"
        chunks = self._chunks(select)
        words = set(place.split(":"))
        if not words <= PLACE_WORDS:
            raise ServerError(PBSE_BADATVAL)
        whole = self.exclusive or bool(words & {"excl", "exclhost"})
        scatter = bool(words & {"scatter", "vscatter"})
        pack = "pack" in words
        empty = {v: self.cores for v in self.vnodes}
        fit = self._fit(chunks, empty, whole, scatter, pack)
        vnodes = len({v for v, _ in fit}) if fit else 0
        # what the simulator counts: vnodes when exclusive, else CPUs (whole vnodes if excl)
        size = vnodes if self.exclusive else vnodes * self.cores if whole else sum(chunks)
        user, host = req["user"], req["host"]
        owner = f"{user}@{host}"
        users = list(req.get("users") or [])
        if owner not in users:  # OpenPBS adds user@host even after a bare "user" (-U user)
            users.append(owner)
        self.seq += 1
        r = Reservation(
            id=f"R{self.seq}.{self.server}",
            name=req.get("name") or "",
            owner=owner,
            start=start,
            end=end,
            chunks=chunks,
            select=select,
            place=place,
            users=users,
            groups=list(req.get("groups") or []),
            size=size,
            whole=whole,
            scatter=scatter,
            pack=pack,
            feasible=fit is not None,
            ctime=now,
            decide_at=self.clock() + self.confirm_delay,
            interactive=int(req.get("interactive") or 0),
            mtime=now,
        )
        self.resv[r.id] = r
        return r

    @staticmethod
    def _window(
        start: Optional[int], end: Optional[int], walltime: Optional[int]
    ) -> Tuple[int, int]:
        """(start, end) from two or three of -R, -E, -D (walltime); else a bad time spec."""
        if start is not None and end is not None:
            if walltime is not None and end - start != walltime:
                raise ServerError(PBSE_BADTSPEC)
            return start, end
        if walltime is not None and start is not None:
            return start, start + walltime
        if walltime is not None and end is not None:
            return end - walltime, end
        raise ServerError(PBSE_BADTSPEC)

    @staticmethod
    def _chunks(select: str) -> List[int]:
        """CPUs per chunk of a select statement (``2:ncpus=8+1:ncpus=4`` → 8 8 4)."""
        out: List[int] = []
        for part in select.split("+"):
            words = part.split(":")
            count = 1
            if words and words[0].isdigit():
                count = int(words.pop(0))
            ncpus = 1
            for word in words:
                key, sep, value = word.partition("=")
                if not sep or not value:
                    raise ServerError(PBSE_BADATVAL)
                if key not in CHUNK_RESOURCES:
                    raise ServerError(PBSE_UNKRESC, f"Unknown resource {key}")
                if key == "ncpus":
                    if not value.isdigit() or int(value) < 1:
                        raise ServerError(PBSE_BADATVAL)
                    ncpus = int(value)
            if count < 1:
                raise ServerError(PBSE_BADATVAL)
            out.extend([ncpus] * count)
        return out

    def delete_resv(self, resv_id: str, user: str) -> None:
        r = self.resv.get(resv_id)
        if r is None:
            raise ServerError(PBSE_UNKRESVID)
        if user != r.owner.split("@", 1)[0] and user not in self.managers:
            raise ServerError(PBSE_PERM)
        if resv_id in self.sim.engine.reservations:
            self.sim.remove_reservation(resv_id)
        del self.resv[resv_id]

    # -- status -----------------------------------------------------------------------------------

    def full_id(self, text: str) -> str:
        """``123`` or ``R5`` → ``123.server``/``R5.server`` (commands accept the short form)."""
        return text if "." in text else f"{text}.{self.server}"

    def jobs(self) -> List[Task]:
        """Running and queued tasks in the server's (job id) order."""
        return sorted(self.sim.running + self.sim.queued, key=self.job_seq)

    def job_attrs(self, task: Task, now: int) -> List[Attr]:
        payload = task.payload
        assert isinstance(payload, SwfJob)
        record = parse_record(payload.text)
        seq = self.job_seq(task)
        user = f"user{record.user}" if record.user >= 0 else "nobody"
        name = f"swf{record.job}"
        chunks, whole = self.job_shape(task)
        place = "scatter" if whole else "free"
        select = f"{len(chunks)}:ncpus={chunks[0]}"
        walltime = hms(task.estimate)
        submit = task.submit + self.shift
        running = task.start is not None
        attrs: List[Attr] = [("Job_Name", None, name), ("Job_Owner", None, f"{user}@login1")]
        start = 0
        exec_vnode = ""
        if task.start is not None:
            start = task.start + self.shift
            placed = self.placed.get(task.key, [])
            exec_vnode = "+".join(f"({v}:ncpus={c})" for v, c in placed)
            attrs += [
                ("resources_used", "cpupercent", "0"),
                ("resources_used", "cput", "00:00:00"),
                ("resources_used", "mem", "0kb"),
                ("resources_used", "ncpus", str(sum(chunks))),
                ("resources_used", "vmem", "0kb"),
                ("resources_used", "walltime", hms(now - start)),
            ]
        attrs += [
            ("job_state", None, "R" if running else "Q"),
            ("queue", None, "workq"),
            ("server", None, self.server),
            ("Checkpoint", None, "u"),
            ("ctime", None, str(submit)),
            ("Error_Path", None, f"login1:/home/{user}/{name}.e{seq}"),
        ]
        if running:
            attrs += [
                ("exec_host", None, self._exec_host(task)),
                ("exec_vnode", None, exec_vnode),
            ]
        attrs += [
            ("Hold_Types", None, "n"),
            ("Join_Path", None, "n"),
            ("Keep_Files", None, "n"),
            ("Mail_Points", None, "a"),
            ("mtime", None, str(start if running else submit)),
            ("Output_Path", None, f"login1:/home/{user}/{name}.o{seq}"),
            ("Priority", None, "0"),
            ("qtime", None, str(submit)),
            ("Rerunable", None, "True"),
            ("Resource_List", "ncpus", str(sum(chunks))),
            ("Resource_List", "nodect", str(len(chunks))),
            ("Resource_List", "place", place),
            ("Resource_List", "select", select),
            ("Resource_List", "walltime", walltime),
        ]
        if running:
            attrs += [("stime", None, str(start)), ("session_id", None, str(10000 + seq))]
        attrs += [("substate", None, "42" if running else "10")]
        if running:
            when = time.strftime("%a %b %d at %H:%M", time.localtime(start))
            attrs += [("comment", None, f"Job run at {when} on {exec_vnode}")]
        else:
            attrs += [("comment", None, self._not_running(sum(chunks)))]
        attrs += [("etime", None, str(submit))]
        if running:
            attrs += [("run_count", None, "1")]
        head = self.sim.engine.queue[0] if self.sim.engine.queue else None
        top = head is task and task.planned is not None
        # OpenPBS 23.06's order (tests/integration/pbs/test_openpbs_formats.py checks it)
        attrs += [
            (
                "Submit_arguments",
                None,
                f"-l select={select} -l place={place} -l walltime={walltime} {name}.sh",
            ),
        ]
        if top:
            attrs += [("estimated", "start_time", str(task.planned + self.shift))]
        attrs += [("project", None, "_pbs_project_default")]
        if top:
            attrs += [("topjob", None, "True")]
        return attrs

    def _exec_host(self, task: Task) -> str:
        """``host/N[*C]`` per chunk, N counting the job's chunks on that host (§2.1)."""
        count: Dict[str, int] = defaultdict(int)
        parts = []
        for v, c in self.placed.get(task.key, []):
            parts.append(f"{v}/{count[v]}" + (f"*{c}" if c > 1 else ""))
            count[v] += 1
        return "+".join(parts)

    def _not_running(self, ncpus: int) -> str:
        """The scheduler's comment on a queued job (§2.1)."""
        total = len(self.vnodes) * self.cores
        busy = sum(self._used().values())
        now = self.now()
        held = sum(sum(c for _, c in r.nodes) for r in self.resv.values() if r.start <= now)
        if self.exclusive:
            taken = {v for chunks in self.placed.values() for v, _ in chunks}
            taken |= {v for r in self.resv.values() if r.start <= now for v, _ in r.nodes}
            available = (len(self.vnodes) - len(taken)) * self.cores
        else:
            available = total - busy - held
        if ncpus > available:
            return (
                "Not Running: Insufficient amount of resource: ncpus "
                f"(R: {ncpus} A: {max(0, available)} T: {total})"
            )
        return "Not Running: Job would conflict with reservation or top job"

    def node_attrs(self, vnode: str) -> List[Attr]:
        now = self.now()
        slots = []
        used = 0
        for key, chunks in self.placed.items():
            job = self.job_id(self.running[key])
            index = 0
            for v, c in chunks:
                if v != vnode:
                    continue
                used += c
                for _ in range(c):
                    slots.append(f"{job}/{index}")
                    index += 1
        here = [r for r in self.resv.values() if any(v == vnode for v, _ in r.nodes)]
        running_excl = any(r.state == RESV_RUNNING and r.whole for r in here)
        if self.exclusive and used:
            state = "job-exclusive"
        elif used >= self.cores:
            state = "job-busy"
        elif running_excl:
            state = "resv-exclusive"
        else:
            state = "free"
        attrs: List[Attr] = [
            ("Mom", None, vnode),
            ("Port", None, "15002"),
            ("pbs_version", None, PBS_VERSION),
            ("ntype", None, "PBS"),
            ("state", None, state),
            ("pcpus", None, str(self.cores)),
        ]
        if slots:
            attrs.append(("jobs", None, ", ".join(slots)))
        if here:
            attrs.append(("resv", None, ", ".join(r.id for r in here)))
        attrs += [
            ("resources_available", "arch", "linux"),
            ("resources_available", "host", vnode),
            ("resources_available", "mem", f"{self.cores * MEM_KB_PER_CPU}kb"),
            ("resources_available", "ncpus", str(self.cores)),
            ("resources_available", "vnode", vnode),
            ("resources_assigned", "accelerator_memory", "0kb"),
            ("resources_assigned", "hbmem", "0kb"),
            ("resources_assigned", "mem", "0kb"),
            ("resources_assigned", "naccelerators", "0"),
            ("resources_assigned", "ncpus", str(used)),
            ("resources_assigned", "vmem", "0kb"),
            ("resv_enable", None, "True"),
            ("sharing", None, "force_excl" if self.exclusive else "default_shared"),
            ("last_state_change_time", None, str(self.changed.get(vnode, now))),
        ]
        if vnode in self.last_used:
            attrs.append(("last_used_time", None, str(self.last_used[vnode])))
        return attrs

    def resv_attrs(self, r: Reservation) -> List[Attr]:
        user = r.owner.split("@", 1)[0]
        host = r.owner.split("@", 1)[-1]
        attrs: List[Attr] = [
            ("Reserve_Name", None, r.name or "NULL"),
            ("Reserve_Owner", None, r.owner),
            ("reserve_state", None, str(r.state)),
            ("reserve_substate", None, str(r.state)),
            ("reserve_start", None, str(r.start)),
            ("reserve_end", None, str(r.end)),
            ("reserve_duration", None, str(r.end - r.start)),
            ("queue", None, r.queue),
            ("Resource_List", "ncpus", str(sum(r.chunks))),
            ("Resource_List", "nodect", str(len(r.chunks))),
            ("Resource_List", "select", r.select),
            ("Resource_List", "place", r.place),
            ("Resource_List", "walltime", hms(r.end - r.start)),
            ("schedselect", None, r.select),
        ]
        if r.nodes:
            attrs.append(("resv_nodes", None, "+".join(f"({v}:ncpus={c})" for v, c in r.nodes)))
        attrs.append(("Authorized_Users", None, ",".join(r.users)))
        if r.groups:
            attrs.append(("Authorized_Groups", None, ",".join(r.groups)))
        # as OpenPBS 23.06 prints them (checked against it: tests/integration/pbs/
        # test_openpbs_formats.py); Mail_* only with -m/-M, which the stand-in ignores
        attrs += [("server", None, self.server), ("ctime", None, str(r.ctime))]
        attrs.append(("mtime", None, str(r.mtime)))
        if r.interactive:
            attrs.append(("interactive", None, str(r.interactive)))
        attrs += [
            ("Variable_List", None, f"PBS_O_HOST={host}"),
            ("euser", None, user),
            ("egroup", None, user),
            ("reserve_count", None, "1"),
            ("Submit_Host", None, host),
            ("partition", None, "pbs-default"),
        ]
        return attrs

    # -- requests ---------------------------------------------------------------------------------

    def handle(self, req: Dict[str, Any]) -> Dict[str, Any]:
        op = req.get("op")
        if op == "submit_resv" and req.get("interactive"):
            return self._submit_interactive(req)
        with self.lock:
            self.sync()
            return self._answer(op, req)

    def _answer(self, op: Any, req: Dict[str, Any]) -> Dict[str, Any]:
        now = self.now()
        if op == "ping":
            return {}
        if op == "statjob":
            tasks = self.jobs()
            if req.get("id"):
                wanted = self.full_id(str(req["id"]))
                tasks = [t for t in tasks if self.job_id(t) == wanted]
                if not tasks:
                    raise ServerError(PBSE_UNKJOBID)
            return {"objects": [[self.job_id(t), self.job_attrs(t, now)] for t in tasks]}
        if op == "statvnode":
            names = self.vnodes
            if req.get("name"):
                if req["name"] not in self.vnodes:
                    raise ServerError(PBSE_UNKNODE)
                names = [req["name"]]
            return {"objects": [[v, self.node_attrs(v)] for v in names]}
        if op == "statresv":
            rs = list(self.resv.values())
            if req.get("id"):
                rs = [r for r in rs if r.id == self.full_id(str(req["id"]))]
                if not rs:
                    raise ServerError(PBSE_UNKRESVID)
            return {"objects": [[r.id, self.resv_attrs(r)] for r in rs]}
        if op == "submit_resv":
            return {"reply": f"{self.submit_resv(req).id} UNCONFIRMED"}
        if op == "delresv":
            self.delete_resv(self.full_id(str(req["id"])), str(req["user"]))
            return {}
        if op == "siminfo":
            return self._siminfo()
        if op == "free":
            start, end = int(req["start"]) - self.shift, int(req["end"]) - self.shift
            return {"free": self.sim.engine.profile.min_free(start, end)}
        raise ServerError(PBSE_BADATVAL, f"unknown request {op!r}")

    def _submit_interactive(self, req: Dict[str, Any]) -> Dict[str, Any]:
        """``pbs_rsub -I N``: wait up to |N| s for the scheduler's decision (§5.1)."""
        block = int(req["interactive"])
        with self.lock:
            self.sync()
            resv_id = self.submit_resv(req).id
        deadline = self.clock() + abs(block)
        while True:
            with self.lock:
                self.sync()
                if resv_id in self.denied:
                    return {"reply": f"{resv_id} DENIED"}
                r = self.resv.get(resv_id)
                if r is not None and r.state != RESV_UNCONFIRMED:
                    return {"reply": f"{resv_id} CONFIRMED"}
                if self.clock() >= deadline:
                    if block > 0:
                        return {"reply": f"{resv_id} UNCONFIRMED"}
                    self.resv.pop(resv_id, None)
                    return {"reply": f"{resv_id} delete, wait period expired"}
            time.sleep(0.02)

    def _siminfo(self) -> Dict[str, Any]:
        """What the simulated scheduler holds, for the tests to compare with."""

        def task(t: Task) -> Dict[str, Any]:
            return {
                "id": self.job_id(t),
                "size": t.size,
                "procs": self.procs[t.key],
                "estimate": t.estimate,
                "submit": t.submit + self.shift,
                "start": None if t.start is None else t.start + self.shift,
                "planned": None if t.planned is None else t.planned + self.shift,
            }

        return {
            "now": self.now(),
            "capacity": self.sim.cores,
            "unit": "node" if self.exclusive else "core",
            "running": [task(t) for t in self.jobs() if t.start is not None],
            "queued": [task(t) for t in self.jobs() if t.start is None],
            "reservations": {
                str(k): [s + self.shift, e + self.shift, n]
                for k, (s, e, n) in self.sim.engine.reservations.items()
            },
            "states": {r.id: r.state for r in self.resv.values()},
            "denied": sorted(self.denied),
        }


# ------------------------------------------------------------------------------------ serving


def serve(standin: Standin, path: str) -> None:
    """Answer requests on the unix socket ``path`` until SIGTERM/SIGINT."""

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            try:
                answer = standin.handle(json.loads(self.rfile.readline()))
            except ServerError as exc:
                answer = {"errno": exc.errno, "errmsg": str(exc)}
            except Exception as exc:  # a stand-in bug: say so, keep serving
                traceback.print_exc()
                answer = {"errno": PBSE_INTERNAL, "errmsg": f"Internal Server Error ({exc})"}
            self.wfile.write(json.dumps(answer).encode())

    if os.path.exists(path):
        os.unlink(path)
    server = socketserver.ThreadingUnixStreamServer(path, Handler)
    server.daemon_threads = True

    def stop(_signum: int, _frame: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
        if os.path.exists(path):
            os.unlink(path)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--socket", required=True, help="unix socket to listen on")
    parser.add_argument("--trace", default=bundled_trace(), help="SWF trace (default: bundled)")
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--cores", type=int, default=16, help="CPUs per vnode")
    parser.add_argument("--offset", type=int, default=2 * 86400, help="seconds into the trace")
    parser.add_argument("--server", default="pbs-head", help="server name in ids")
    parser.add_argument("--confirm-delay", type=float, default=0.5, help="scheduling cycle, s")
    parser.add_argument("--exclusive", action="store_true", help="sharing=force_excl vnodes")
    parser.add_argument("--managers", default="root", help="comma-separated manager users")
    args = parser.parse_args(argv)
    standin = Standin(
        trace=args.trace,
        nodes=args.nodes,
        cores=args.cores,
        offset_s=args.offset,
        server=args.server,
        confirm_delay=args.confirm_delay,
        exclusive=args.exclusive,
        managers=[m for m in args.managers.split(",") if m],
    )
    print(f"pbs stand-in: {args.server} on {args.socket}", file=sys.stderr, flush=True)
    serve(standin, args.socket)
    return 0


if __name__ == "__main__":
    sys.exit(main())
