"""The pyslurm backend: a Slurm cluster through libslurm's calls instead of its commands.

libslurm calls cannot be interrupted, so each runs on one worker thread and the agent stops
waiting after ``SlurmConfig.timeout`` (BackendUnavailable); a call still hanging then delays
the next ones, which time out in turn until the controller answers again. That holds for a
binding that lets other threads run during its calls; pyslurm 22.5.3 does not (it holds the
GIL through each RPC), so with it a controller that accepts and never answers stalls the
whole process until libslurm's own ``MessageTimeout`` (slurm.conf; 10 s by default) ends the
call with "Socket timed out", which is then BackendUnavailable. A controller that is down
refuses the connection at once.
"""

from __future__ import annotations

import importlib
import os
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, TypeVar

import siteagent.backends.pyslurm.versions as versions
from siteagent.backends.base import Backend, BackendError, BackendUnavailable, ReservationRefused
from siteagent.backends.checks import check_ours
from siteagent.backends.pyslurm.records import job_record, node_record
from siteagent.backends.pyslurm.reservations import PyslurmReservations, reservations_for
from siteagent.backends.pyslurm.scheduler import scheduler_values
from siteagent.backends.slurm.arguments import reservation_args, whole_minutes
from siteagent.backends.slurm.config import SlurmConfig
from siteagent.backends.slurm.errors import is_unavailable
from siteagent.backends.slurm.jobs import RUNNING_STATES, SlurmJobs, parse_jobs
from siteagent.backends.slurm.layout import state_words
from siteagent.backends.slurm.nodes import parse_nodes
from siteagent.backends.slurm.running import RunningJobs
from siteagent.backends.slurm.scheduler import SchedulerSettings, scheduler_settings
from siteagent.backends.slurm.snapshot import build_snapshot, node_cores
from siteagent.backends.slurm.times import parse_slurm_time
from siteagent.core import names
from siteagent.core.values import BatchReservation, ClusterSnapshot, NodeState, ReservationSpec

T = TypeVar("T")

#: What the backend uses of a release, by its reservation API: a module lacking one of them is
#: not the pyslurm its version says (a stand-in, a partial build) and is refused at start.
NEEDED: Dict[versions.ReservationApi, Tuple[str, ...]] = {
    versions.ReservationApi.LEGACY: ("Jobs", "Nodes", "RPCError", "reservation", "config"),
    versions.ReservationApi.OBJECTS: (
        "Jobs",
        "Nodes",
        "RPCError",
        "Reservation",
        "Reservations",
        "slurmctld",
    ),
}


def import_pyslurm(slurm_conf: Optional[str] = None) -> Tuple[Any, versions.ReservationApi]:
    """The pyslurm module and its reservation API, or BackendError saying what is supported
    and how to install it.

    ``SLURM_CONF`` is set first: libslurm reads it once, when pyslurm initialises on import.
    """
    if slurm_conf:
        os.environ["SLURM_CONF"] = slurm_conf
    local = versions.local_slurm()
    try:
        module = importlib.import_module("pyslurm")
    except ImportError as exc:
        raise BackendError(
            f"the pyslurm backend needs pyslurm: {exc}; {versions.SUPPORTED}. "
            + versions.install_hint(local)
        ) from exc
    version = str(getattr(module, "__version__", "?"))
    refused = versions.refusal(version, local)
    if refused:
        raise BackendError(refused)
    found = versions.series(version)
    assert found is not None  # versions.refusal() refuses versions it cannot read
    api = versions.reservation_api(found)
    missing = [name for name in NEEDED[api] if not hasattr(module, name)]
    if missing:
        raise BackendError(
            f"pyslurm {version} lacks {', '.join(missing)}, which a release of its version has; "
            f"{versions.SUPPORTED}. {versions.install_hint(local)}"
        )
    return module, api


class PyslurmBackend(Backend):
    """A Slurm cluster through pyslurm 22.5 or later (see
    :mod:`siteagent.backends.pyslurm.versions`)."""

    name = "pyslurm"

    def __init__(self, config: Optional[SlurmConfig] = None) -> None:
        self.config = config or SlurmConfig()
        if self.config.command_prefix:
            raise BackendError(
                "backend.slurm.command_prefix runs Slurm's commands through another program; "
                "pyslurm calls libslurm inside the agent, so it cannot: use the slurm backend"
            )
        self.pyslurm, self.api = import_pyslurm(self.config.slurm_conf)
        self.reservations: PyslurmReservations = reservations_for(self.pyslurm, self.api)
        self._errors: Tuple[Type[Exception], ...] = (
            self.pyslurm.RPCError,
            *self.reservations.errors,
        )
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pyslurm")
        self._settings: Optional[SchedulerSettings] = None  # read on first snapshot
        self.running = RunningJobs()

    def close(self) -> None:
        self._worker.shutdown(wait=False)

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run one pyslurm call on the worker with the configured timeout; Slurm's errors
        become BackendError (BackendUnavailable when the controller did not answer)."""
        future = self._worker.submit(fn)
        try:
            return future.result(timeout=self.config.timeout)
        except FutureTimeout as exc:
            raise BackendUnavailable(
                f"{what} did not answer within {self.config.timeout:g} s"
            ) from exc
        except self._errors as exc:
            msg = _slurm_message(exc)
            if is_unavailable(msg):
                raise BackendUnavailable(f"{what}: {msg}") from exc
            raise BackendError(f"{what}: {msg}") from exc

    # ---- reading

    def scheduler_settings(self) -> SchedulerSettings:
        """How the controller places and plans jobs (its configuration, read once), as the
        command backend reads them from ``scontrol show config``."""
        if self._settings is None:
            values = self._call("load config", lambda: scheduler_values(self.pyslurm, self.api))
            self._settings = scheduler_settings(values)
        return self._settings

    def snapshot(self) -> ClusterSnapshot:
        settings = self.scheduler_settings()
        now = int(time.time())
        nodes = self._nodes()
        jobs_doc = {"jobs": [job_record(j) for j in self._load("Jobs.load", self.pyslurm.Jobs)]}
        reservations = self.list_reservations()
        jobs = parse_jobs(jobs_doc, now, node_cores(nodes, self.config.partition))
        return self._snapshot(now, nodes, jobs, reservations, settings)

    def occupancy(self) -> ClusterSnapshot:
        """Nodes, running jobs and reservations, for an accept's re-check: the running jobs of
        an accept a few seconds ago are reused while the nodes' allocated cores show that none
        started or ended, as the command backend does (:mod:`siteagent.backends.slurm.running`);
        libslurm sends every job, so a read converts only the running ones."""
        settings = self.scheduler_settings()
        now = int(time.time())
        began = time.monotonic()
        nodes = self._nodes()

        def read() -> SlurmJobs:
            loaded = self._load("Jobs.load", self.pyslurm.Jobs)
            running = [job_record(j) for j in loaded if state_words(j.state)[0] in RUNNING_STATES]
            return parse_jobs({"jobs": running}, now, node_cores(nodes, self.config.partition))

        jobs = self.running.current(nodes, read, began)
        return self._snapshot(now, nodes, jobs, self.list_reservations(), settings)

    def _nodes(self) -> List[NodeState]:
        return parse_nodes(
            {"nodes": [node_record(n) for n in self._load("Nodes.load", self.pyslurm.Nodes)]}
        )

    def _snapshot(
        self,
        now: int,
        nodes: List[NodeState],
        jobs: SlurmJobs,
        reservations: List[BatchReservation],
        settings: SchedulerSettings,
    ) -> ClusterSnapshot:
        layout = f"pyslurm/{self.pyslurm.__version__}"
        snapshot = build_snapshot(now, nodes, jobs, reservations, self.config, layout, settings)
        return replace(snapshot, backend=self.name)

    def _load(self, what: str, collection: Any) -> List[Any]:
        return self._call(f"pyslurm.{what}", lambda: list(collection.load().values()))

    def _reservations(self) -> Dict[str, BatchReservation]:
        now = int(time.time())
        return self._call("load reservations", lambda: self.reservations.load(now))

    def held_window(self, start: int, end: int) -> Tuple[int, int]:
        return start, start + whole_minutes(end - start) * 60

    def list_reservations(self) -> List[BatchReservation]:
        return list(self._reservations().values())

    def get_reservation(self, name: str) -> Optional[BatchReservation]:
        """One reservation as Slurm holds it now, or None if there is none of that name."""
        names.check(names.NAME, name, "reservation name")
        return self._reservations().get(name)

    # ---- writing

    def create_reservation(self, spec: ReservationSpec) -> BatchReservation:
        """Create the reservation, then read it back (Slurm may shrink it).

        The request is validated and shaped by the Slurm backend's ``reservation_args`` (start
        not in the past, whole minutes, users or accounts required, allowed flags only), and
        its ``Key=Value`` words are what pyslurm is given. A retry that finds its own
        reservation ("Duplicate reservation name", same window) returns it.
        """
        # pyslurm X.Y is for Slurm X.Y: 23.11 and later take one core total (docs/slurm.md §11)
        per_node = (versions.series(str(self.pyslurm.__version__)) or (0, 0)) < (23, 11)
        fields = _fields(reservation_args(spec, self.config, int(time.time()), per_node))
        start = parse_slurm_time(fields["StartTime"])
        if start is None:  # reservation_args always writes a valid StartTime
            raise ValueError(f"unparsable start time {fields['StartTime']!r}")
        end = start + int(fields["Duration"]) * 60
        request = self.reservations.request(fields, start, end)
        try:
            self._call(f"create reservation {spec.name}", lambda: self.reservations.create(request))
        except BackendUnavailable:
            raise
        except BackendError as exc:
            if "Duplicate reservation name" in str(exc):
                existing = self.get_reservation(spec.name)
                if existing is not None and (existing.start, existing.end) == (start, end):
                    return existing
            self.running.forget()  # Slurm disagreed with what the kept jobs implied
            raise ReservationRefused(str(exc)) from exc
        made = self.get_reservation(spec.name)
        if made is None:
            raise BackendError(f"reservation {spec.name} was created but cannot be read back")
        if made.demand(spec.unit) < spec.size:
            self.running.forget()
        return made

    def delete_reservation(self, name: str) -> None:
        """Delete our reservation; a missing one is fine, one in use by jobs is refused, and a
        name without the agent's prefix is never touched (ValueError)."""
        check_ours(name, names.NAME, self.config.name_prefix)
        try:
            self._call(f"delete reservation {name}", lambda: self.reservations.delete(name))
        except BackendUnavailable:
            raise
        except BackendError as exc:
            msg = str(exc)
            if "Requested reservation is invalid" in msg or "doesn't exist" in msg:
                return
            if "in use" in msg:
                raise ReservationRefused(msg) from exc
            raise


def _fields(args: List[str]) -> Dict[str, str]:
    """``Key=Value`` words of an ``scontrol create reservation`` argument list."""
    return dict(a.split("=", 1) for a in args if "=" in a)


def _slurm_message(exc: BaseException) -> str:
    """Slurm's error text: a pyslurm.RPCError's ``msg``, the first argument of the legacy
    API's ``ValueError(message, errno)``, else the exception's string."""
    msg = getattr(exc, "msg", None)
    if msg:
        return str(msg)
    if exc.args and isinstance(exc.args[0], str) and exc.args[0]:
        return exc.args[0]
    return str(exc)
