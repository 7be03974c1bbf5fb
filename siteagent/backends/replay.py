"""A simulated cluster replaying an SWF trace in real time (or N times faster): the "fake qstat".

The agent's embedded default, scheduled by the simulator with the agent's own engines. Its
invariant: every process rebuilds the same cluster from the trace and the state file's log of
reservation changes (appended under an ``flock``, one line each), so the cluster outlives its
processes and a killed one leaves its change whole or absent. The clock, the state file and why
it logs changes rather than the reservation table: docs/simulation.md, "The replay backend".
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import json
import logging
import os
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from siteagent.backends.base import Backend, BackendError, BackendUnavailable, ReservationRefused
from siteagent.core.defaults import DEFAULT_REPLAY_OFFSET_S, DEFAULT_REPLAY_SPEED
from siteagent.core.engines import Policy, ReservationConflict
from siteagent.core.errors import SiteagentError
from siteagent.core.files import make_private
from siteagent.core.machine import Task
from siteagent.core.values import BatchReservation, ClusterSnapshot, ReservationSpec
from siteagent.sim.partitions import MachineSpec
from siteagent.sim.simulator import Simulator
from siteagent.sim.snapshot import snapshot_of
from siteagent.sim.workload import Workload

log = logging.getLogger("siteagent.backends.replay")

#: Gap between the end of one pass over the trace and the start of the next.
LOOP_GAP_S = 3600

#: Version of the state file's layout.
STATE_FORMAT = 2

#: The state file's name in the agent's state directory.
REPLAY_STATE_FILE = "replay-state.json"


def bundled_trace() -> str:
    """Path of the trace shipped with the package (3,000 jobs of SDSC-SP2, 128 cores)."""
    return str(resources.files("siteagent") / "data" / "sdsc-sp2-slice.swf.gz")


class ReplayError(SiteagentError, ValueError):
    """The replay cannot open: its trace, its options or its state file are input to fix
    (the registry's opener converts what :meth:`SwfReplayBackend.open` raises)."""

    code = "bad_input"  # the backends are below the registry: test_error_codes checks it


@dataclass(frozen=True)
class ReplayOptions:
    """What a configuration says about the replayed cluster. An option left None is the saved
    cluster's (or the default, for a new one), so that a restarted agent with no configuration
    finds its cluster again."""

    trace: Optional[str] = None
    speed: Optional[float] = None
    offset_s: Optional[int] = None
    cores: Optional[int] = None
    origin: Optional[float] = None


@dataclass(frozen=True)
class Anchor:
    """What makes a simulated cluster itself: its workload, speed, offset, and its origin.

    ``trace`` is None for the bundled trace (so that reinstalling the package elsewhere does
    not orphan the state); ``wall_origin`` is the wall-clock time the cluster started at.
    """

    trace: Optional[str]
    cores: Optional[int]
    policy: str
    speed: float
    offset_s: int
    wall_origin: float
    #: the topology machine (MachineSpec as JSON), None for pooled cores
    machine: Optional[str] = None

    def same_cluster(self, other: Anchor) -> bool:
        return asdict(self) == {**asdict(other), "wall_origin": self.wall_origin}


class SwfReplayBackend(Backend):
    """A cluster whose queue is an SWF trace replayed against the clock."""

    name = "swf"

    def __init__(
        self,
        trace: Optional[str] = None,
        speed: float = DEFAULT_REPLAY_SPEED,
        offset_s: int = DEFAULT_REPLAY_OFFSET_S,
        cores: Optional[int] = None,
        policy: Policy = Policy.EASY,
        clock: Callable[[], float] = time.time,
        state_file: Optional[str] = None,
        machine: Optional[MachineSpec] = None,
        origin: Optional[float] = None,
    ) -> None:
        """``machine``: replay on a topology machine (docs/topology.md) of midplanes instead
        of ``cores`` pooled cores (then jobs of more than its midplanes, after its size
        divisor, are skipped)."""
        if machine is not None and cores is not None:
            raise ValueError("a topology machine has its own size: leave the cluster size out")
        if speed <= 0:
            raise ValueError(f"replay speed must be > 0, got {speed}")
        if offset_s < 0:
            raise ValueError(f"replay offset must be >= 0, got {offset_s}")
        self.trace = trace or bundled_trace()
        self.speed = speed
        self._clock = clock
        self._lock = threading.Lock()
        self._placer = machine.build() if machine is not None else None
        if machine is not None and self._placer is not None:
            cores = self._placer.topology.midplanes * machine.divide
        workload = Workload(self.trace, cores, skip_invalid=True)
        self.cores, first_submit = _read_through(workload)
        if self._placer is not None:
            self.cores = self._placer.topology.midplanes
        if first_submit is None:
            raise ValueError(
                f"{self.trace}: no job in the trace can be simulated on {self.cores} cores"
            )
        anchor = Anchor(
            trace=None if self.trace == bundled_trace() else os.path.abspath(self.trace),
            # the header's size is stored as "not given", so that naming it is the same cluster
            cores=None
            if machine is not None or self.cores == workload.header.max_procs
            else self.cores,
            policy=Policy(policy).value,
            speed=float(speed),
            offset_s=offset_s,
            wall_origin=clock() if origin is None else origin,
            machine=None if machine is None else json.dumps(asdict(machine), sort_keys=True),
        )
        self._journal = None if state_file is None else _Journal(state_file, anchor)
        if self._journal is not None:
            anchor = self._journal.anchor
        self._trace_start = first_submit
        self._reservations: Dict[str, BatchReservation] = {}
        tasks = self._looped_tasks(cores)
        if self._placer is not None:
            tasks = self._placer.admitted(tasks)
        self._simulator = Simulator(tasks, self.cores, policy, machine=self._placer)
        self._sim_origin = self._trace_start + offset_s
        self._simulator.advance_to(self._sim_origin)
        self._wall_origin = anchor.wall_origin
        self._shift = int(self._wall_origin) - self._sim_origin
        self._applied = 0  # changes of the journal applied to this process's simulator
        if self._journal is not None:
            with self._journal.locked():
                self._catch_up()

    @classmethod
    def open(
        cls,
        state_file: str,
        trace: Optional[str] = None,
        speed: Optional[float] = None,
        offset_s: Optional[int] = None,
        clock: Callable[[], float] = time.time,
        cores: Optional[int] = None,
        machine: Optional[MachineSpec] = None,
        origin: Optional[float] = None,
    ) -> SwfReplayBackend:
        """The simulated cluster kept in ``state_file``, or a new one there if there is none.

        Options left None take the saved cluster's values (or the defaults for a new one);
        options given must agree with a saved cluster (ValueError says how to resolve it).
        ``origin`` (epoch seconds) is the wall-clock time at which a new cluster is at its
        offset, so that sites given the same origin and speed show the same time (a saved
        cluster keeps its own).
        """
        saved = _Journal.read_anchor(state_file)
        if saved is None:
            return cls(
                trace,
                DEFAULT_REPLAY_SPEED if speed is None else speed,
                DEFAULT_REPLAY_OFFSET_S if offset_s is None else offset_s,
                cores=cores,
                clock=clock,
                state_file=state_file,
                machine=machine,
                origin=origin,
            )
        if machine is None and saved.machine is not None:
            machine = MachineSpec(**json.loads(saved.machine))
        return cls(
            trace if trace is not None else saved.trace,
            saved.speed if speed is None else speed,
            saved.offset_s if offset_s is None else offset_s,
            cores=None if machine is not None else saved.cores if cores is None else cores,
            policy=Policy(saved.policy),
            clock=clock,
            state_file=state_file,
            machine=machine,
        )

    # -- time -----------------------------------------------------------------------------------

    def _sim_now(self) -> int:
        elapsed = (self._clock() - self._wall_origin) * self.speed
        return self._sim_origin + int(elapsed)

    def now(self) -> int:
        """The simulated cluster's current time, as the snapshots show it (epoch seconds)."""
        return self._sim_now() + self._shift

    # -- the Backend interface ---------------------------------------------------------------

    def snapshot(self) -> ClusterSnapshot:
        with self._exclusive():
            self._advance()
            return snapshot_of(
                self._simulator, self._shift, self._reservations.values(), backend=self.name
            )

    def create_reservation(self, spec: ReservationSpec) -> BatchReservation:
        with self._exclusive():
            self._simulator.advance_to(self._sim_now())
            change = {
                "at": self._simulator.now + self._shift,
                "op": "create",
                "name": spec.name,
                "start": spec.start,
                "end": spec.end,
                "size": spec.size,
                "users": list(spec.users),
                "accounts": list(spec.accounts),
                "partition": spec.partition,
            }
            made = self._apply_create(change)
            self._log(change)
            return made

    def delete_reservation(self, name: str) -> None:
        with self._exclusive():
            self._simulator.advance_to(self._sim_now())
            if name in self._simulator.engine.reservations:
                change = {"at": self._simulator.now + self._shift, "op": "delete", "name": name}
                self._apply_delete(change)
                self._log(change)
            self._reservations.pop(name, None)

    def list_reservations(self) -> List[BatchReservation]:
        """The reservations now, without the jobs (a snapshot of a 10,000-job queue takes
        tens of milliseconds, and the agent lists reservations every cycle)."""
        with self._exclusive():
            self._advance()
            return list(self._reservations.values())

    def _advance(self) -> None:
        """Run the simulated cluster up to the present; forget reservations that ended."""
        self._simulator.advance_to(self._sim_now())
        held = self._simulator.engine.reservations
        for name in [n for n in self._reservations if n not in held]:
            del self._reservations[name]

    def close(self) -> None:
        """Let go of the state file's lock file (the simulated cluster lives on in the file)."""
        if self._journal is not None:
            self._journal.close()

    # -- reservation changes, shared through the journal -----------------------------------------

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """This process's threads, and with a state file every process, one at a time; with
        the changes other processes made since the last call applied first."""
        with self._lock:
            if self._journal is None:
                yield
                return
            with self._journal.locked():
                self._catch_up()
                yield

    def _catch_up(self) -> None:
        """Apply the changes logged since this process last looked (journal lock held)."""
        assert self._journal is not None
        changes = self._journal.changes()
        for change in changes[self._applied :]:
            self._replay(change)
        self._applied = len(changes)

    def _replay(self, change: Dict[str, Any]) -> None:
        """Apply a logged change at the simulated instant it was made."""
        self._simulator.advance_to(int(change["at"]) - self._shift)
        if change["op"] == "delete":
            self._apply_delete(change)
            return
        try:
            self._apply_create(change)
        except ReservationRefused as exc:
            log.warning(
                "reservation %s could not be re-created in the simulated cluster (%s); it is "
                "gone, as if the batch system had lost it",
                change["name"],
                exc,
            )

    def _apply_create(self, change: Dict[str, Any]) -> BatchReservation:
        name = str(change["name"])
        if name in self._reservations:
            raise ReservationRefused(f"duplicate reservation name {name!r}")
        try:
            self._simulator.add_reservation(
                name,
                int(change["start"]) - self._shift,
                int(change["end"]) - self._shift,
                int(change["size"]),
            )
        except ReservationConflict as exc:
            raise ReservationRefused(f"requested capacity is busy: {exc}") from None
        start, end, size = self._simulator.engine.reservations[name]
        made = BatchReservation(
            name=name,
            start=start + self._shift,
            end=end + self._shift,
            cores=size,
            users=tuple(change["users"]),
            accounts=tuple(change["accounts"]),
            partition=str(change["partition"]),
        )
        self._reservations[name] = made
        return made

    def _apply_delete(self, change: Dict[str, Any]) -> None:
        name = change["name"]
        if name in self._simulator.engine.reservations:
            self._simulator.remove_reservation(name)
        self._reservations.pop(name, None)

    def _log(self, change: Dict[str, Any]) -> None:
        if self._journal is not None:
            self._journal.append(change)
            self._applied += 1

    # -- helpers ---------------------------------------------------------------------------------

    def _looped_tasks(self, cores: Optional[int]) -> Iterator[Task]:
        """The trace over and over, each pass shifted past the previous one; keys unique."""
        key = itertools.count(1)
        shift = 0
        while True:
            workload = Workload(self.trace, cores=cores, skip_invalid=True)
            last_submit = self._trace_start
            for task in workload.tasks():
                task.key = next(key)
                task.submit += shift
                last_submit = task.submit
                yield task
            workload.close()
            shift = last_submit - self._trace_start + LOOP_GAP_S


def _read_through(workload: Workload) -> Tuple[int, Optional[int]]:
    """The cluster's size and the first job's submit time (None: no job can be simulated).

    The whole trace is read, not just its first job, so that the lines it skips are reported
    when the agent starts rather than once the first pass has run out, days later.
    """
    first_submit: Optional[int] = None
    try:
        for task in workload.tasks():
            if first_submit is None:
                first_submit = task.submit
    finally:
        workload.close()
    return workload.cores, first_submit


class _Journal:
    """The state file, in JSON Lines: a header (format, cluster id, anchor), then one line per
    reservation change.

    A change is appended with one write and one fsync, so it costs the same however long the
    cluster has run, and a process that read the file before reads only what was appended
    since. A last line without its newline is an append a crash cut short, never acknowledged
    to anyone: readers ignore it and the next appender cuts it off.

    Creating a journal for a file that exists checks that it describes the cluster asked for
    (same trace, speed, offset, size, policy) and adopts its wall-clock origin; a file of
    format 1 (one JSON document, rewritten whole on every change) is converted first. The file
    and its lock are private (0600): they are part of the agent's state.
    """

    def __init__(self, path: str, anchor: Anchor) -> None:
        self.path = path
        make_private(os.path.dirname(os.path.abspath(path)), directory=True)
        make_private(path + ".lock")
        self._lock_fd = os.open(path + ".lock", os.O_RDWR)
        self._broken = ""
        with self.locked():
            contents = self._read()
            if contents is None:
                header = {
                    "format": STATE_FORMAT,
                    "cluster": uuid.uuid4().hex,
                    "anchor": asdict(anchor),
                }
                contents = self._create(header, [])
            else:
                make_private(path)  # one an older siteagent wrote has the umask's mode
            saved = Anchor(**contents.header["anchor"])
            if not saved.same_cluster(anchor):
                raise ValueError(
                    f"{path} holds another simulated cluster ({_anchor_text(saved)}) than the "
                    f"one asked for ({_anchor_text(anchor)}): run with the same options, or "
                    "remove the file (and its reservations) to start a new one"
                )
            self._cluster: str = contents.header["cluster"]
            self._adopt(contents)
            self.anchor = saved

    @staticmethod
    def read_anchor(path: str) -> Optional[Anchor]:
        """The anchor saved in ``path`` (of either format), None if there is no such file."""
        try:
            with open(path, "rb") as handle:
                first = handle.readline()
                header = _header(first, path)
                doc = header if header is not None else _format_1(first + handle.read(), path)
        except FileNotFoundError:
            return None
        return Anchor(**doc["anchor"])

    def close(self) -> None:
        os.close(self._lock_fd)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def changes(self) -> List[Dict[str, Any]]:
        """Every change logged so far (call with the lock held); reads only the lines appended
        since the last call, or the whole file if it was replaced or cut short."""
        if self._broken:
            raise BackendUnavailable(self._broken)
        try:
            stat: Optional[os.stat_result] = os.stat(self.path)
        except FileNotFoundError:
            stat = None
        if stat is not None and stat.st_ino == self._inode and stat.st_size >= self._read_to:
            if stat.st_size > self._read_to:
                self._read_appended()
            return self._changes
        contents = self._read()
        if contents is None or contents.header["cluster"] != self._cluster:
            raise BackendError(
                f"{self.path} was removed or replaced by another simulated cluster while "
                "this process used it; restart the process"
            )
        self._adopt(contents)
        return self._changes

    def append(self, change: Dict[str, Any]) -> None:
        """Log a change (call with the lock held, after :meth:`changes`).

        If the file cannot be written, the change stays out of it, but this process has
        applied it already: from then on every call fails rather than show a cluster that
        other processes do not see.
        """
        line = _line(change)
        try:
            self._append_line(line)
        except OSError as exc:
            self._broken = (
                f"{self.path} could not be written ({exc}); this process's simulated cluster "
                "no longer matches it: fix the cause and restart the process"
            )
            raise BackendUnavailable(self._broken) from exc
        self._changes.append(change)
        self._read_to += len(line)

    def _append_line(self, line: bytes) -> None:
        """Append ``line`` after the last complete one, durably; on failure, leave the file as
        it was (a short write would otherwise leave a torn line, a failed fsync a line this
        process reports as not made)."""
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            if os.fstat(fd).st_size > self._read_to:
                os.ftruncate(fd, self._read_to)  # a line a crashed appender left unfinished
            try:
                written = os.write(fd, line)
                if written != len(line):
                    raise OSError(errno.ENOSPC, f"wrote {written} of {len(line)} bytes")
                os.fsync(fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, self._read_to)
                raise
        finally:
            os.close(fd)

    def _read_appended(self) -> None:
        """Take in the complete lines appended since the last read, and only those."""
        with open(self.path, "rb") as handle:
            handle.seek(self._read_to)
            data = handle.read()
        changes, length = _complete_lines(data, 2 + len(self._changes), self.path)
        self._changes.extend(changes)
        self._read_to += length

    def _read(self) -> Optional[_Contents]:
        """The whole file, None if there is none; one of format 1 is converted first."""
        try:
            with open(self.path, "rb") as handle:
                data = handle.read()
                inode = os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            return None
        header = _header(data, self.path)
        if header is None:
            return self._convert(_format_1(data, self.path))
        header_length = data.index(b"\n") + 1
        changes, length = _complete_lines(data[header_length:], 2, self.path)
        return _Contents(header, changes, inode, header_length + length)

    def _convert(self, doc: Dict[str, Any]) -> _Contents:
        header = {"format": STATE_FORMAT, "cluster": doc["cluster"], "anchor": doc["anchor"]}
        contents = self._create(header, doc["changes"])
        log.info(
            "%s: converted the replay state file from format 1 (one document, rewritten on "
            "every change) to format %d (one line appended per change)",
            self.path,
            STATE_FORMAT,
        )
        return contents

    def _create(self, header: Dict[str, Any], changes: List[Dict[str, Any]]) -> _Contents:
        """Write a whole file atomically: a crash leaves the old or the new one, never half."""
        data = b"".join(_line(record) for record in [header, *changes])
        tmp = self.path + ".tmp"
        make_private(tmp)  # before the first byte: the file replaces the state file
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)
        directory = os.open(os.path.dirname(os.path.abspath(self.path)), os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        return _Contents(header, changes, os.stat(self.path).st_ino, len(data))

    def _adopt(self, contents: _Contents) -> None:
        self._changes = contents.changes
        self._inode = contents.inode
        self._read_to = contents.length


@dataclass
class _Contents:
    """A state file as read: its header, its changes, and where its last complete line ends."""

    header: Dict[str, Any]
    changes: List[Dict[str, Any]]
    inode: int
    length: int


def _line(record: Dict[str, Any]) -> bytes:
    """One line of the file (JSON escapes every newline inside a string)."""
    return (json.dumps(record, separators=(",", ":")) + "\n").encode()


def _header(data: bytes, path: str) -> Optional[Dict[str, Any]]:
    """The header on the first line of ``data``; None if the file may be of format 1, whose
    indented document does not fit on one line."""
    first, newline, _ = data.partition(b"\n")
    try:
        header = json.loads(first)
    except ValueError:
        return None
    if not isinstance(header, dict) or header.get("format") == 1:
        return None
    if header.get("format") != STATE_FORMAT or not newline:
        raise ValueError(
            f"{path}: not a replay state file of format 1 or {STATE_FORMAT}; remove it to "
            "start a new simulated cluster"
        )
    return header


def _complete_lines(data: bytes, first_line: int, path: str) -> Tuple[List[Dict[str, Any]], int]:
    """The changes on the complete lines of ``data`` (line ``first_line`` of the file on), and
    how many bytes those lines take. Bytes after the last newline are ignored: an append that
    a crash cut short, never acknowledged to anyone."""
    length = data.rfind(b"\n") + 1
    changes = []
    for number, line in enumerate(data[:length].split(b"\n")[:-1], first_line):
        try:
            change = json.loads(line)
        except ValueError:
            change = None
        if not isinstance(change, dict):
            raise ValueError(
                f"{path}: line {number} is not a reservation change, the replay state file is "
                "damaged; remove it (and its reservations) to start a new simulated cluster"
            )
        changes.append(change)
    return changes, length


def _format_1(data: bytes, path: str) -> Dict[str, Any]:
    """A state file of format 1: one JSON document holding the anchor and every change."""
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise ValueError(f"{path}: not a replay state file ({exc}); remove it") from None
    if not isinstance(doc, dict) or doc.get("format") != 1:
        raise ValueError(
            f"{path}: not a replay state file of format 1 or {STATE_FORMAT}; remove it to "
            "start a new simulated cluster"
        )
    return doc


def _anchor_text(anchor: Anchor) -> str:
    return (
        f"trace {anchor.trace or 'bundled'}, speed {anchor.speed:g}, offset {anchor.offset_s} s"
        + (f", {anchor.cores} cores" if anchor.cores else "")
        + f", policy {anchor.policy}"
        + (f", machine {anchor.machine}" if anchor.machine else "")
    )
