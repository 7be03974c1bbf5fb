"""The Slurm backend: the commands it runs, and how it reads their answers.

Reading is ``squeue --json`` and ``sinfo --json`` (or ``scontrol --json show nodes`` from 23.02
on) and ``scontrol show reservation``; writing is ``scontrol create/delete reservation``, the
only way in 22.05 (slurmrestd is read-only for reservations).
"""

from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple

from siteagent.backends.base import BackendError, BackendUnavailable, ReservationRefused
from siteagent.backends.checks import check_ours
from siteagent.backends.command import PINNED_ENV, CommandBackend, json_object, run_command
from siteagent.backends.slurm.arguments import (
    reservation_args,
    reservation_ids_args,
    sacct_args,
    sacct_usage_args,
    same_window,
    whole_minutes,
)
from siteagent.backends.slurm.config import SlurmConfig
from siteagent.backends.slurm.errors import (
    MALFORMED,
    UNAVAILABLE_MARKERS,
    malformed,
    with_hint,
)
from siteagent.backends.slurm.jobs import (
    EXCLUSIVE_FORMAT,
    RUNNING_FORMAT,
    RUNNING_STATE_FILTER,
    SlurmJobs,
    parse_exclusive_text,
    parse_jobs,
    parse_running_text,
    with_levels,
)
from siteagent.backends.slurm.layout import check_errors, detect_layout
from siteagent.backends.slurm.nodes import parse_nodes
from siteagent.backends.slurm.reservations import parse_reservations
from siteagent.backends.slurm.running import RunningJobs
from siteagent.backends.slurm.sacct import reservation_jobs_from_sacct, unnamed_reservation_ids
from siteagent.backends.slurm.scheduler import SchedulerSettings, parse_scheduler_config
from siteagent.backends.slurm.snapshot import build_snapshot, node_cores
from siteagent.core import names
from siteagent.core.usage import JobUsage
from siteagent.core.values import BatchReservation, ClusterSnapshot, NodeState, ReservationSpec

#: What sacct says on a cluster without slurmdbd (``accounting_storage/none``).
ACCOUNTING_DISABLED = "accounting storage is disabled"
#: The pending jobs' exclusivity, read beside ``squeue --json`` from 26.05 (jobs.py).
WHOLE_NODE_JOBS = ["squeue", "-h", "-r", "-t", "PD", "-O", EXCLUSIVE_FORMAT]


class SlurmBackend(CommandBackend):
    """A Slurm cluster seen through its command-line clients (22.05 and later)."""

    name = "slurm"
    #: Besides UTC and untranslated messages: ISO times whatever the site's default format.
    pinned_env: ClassVar[Mapping[str, str]] = {**PINNED_ENV, "SLURM_TIME_FORMAT": "standard"}
    unavailable_markers = UNAVAILABLE_MARKERS
    #: scontrol's trailer after a refusal.
    noise_lines = frozenset({"slurm_update error: No error"})

    def __init__(self, config: Optional[SlurmConfig] = None) -> None:
        self.config = config or SlurmConfig()
        super().__init__(self.config.client_env(), self.config.timeout)
        self._node_source: Optional[List[str]] = None  # learnt on first snapshot
        self._settings: Optional[SchedulerSettings] = None  # read on first snapshot
        self.running = RunningJobs()

    def _run(self, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """Run a client, through the configured ``command_prefix`` if there is one."""
        if not self.config.command_prefix:
            return super()._run(args)
        command = self.config.command(args, {**self.client_env, **self.pinned_env})
        return run_command(command, os.environ, self.timeout)

    def _message(self, proc: subprocess.CompletedProcess[str]) -> str:
        return with_hint(super()._message(proc))

    def check_document(self, doc: Dict[str, Any]) -> None:
        """Only documents in a layout this parser knows are read (:func:`detect_layout`)."""
        detect_layout(doc)

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

    def scheduler_settings(self) -> SchedulerSettings:
        """How the controller places and plans jobs (``scontrol show config``, read once)."""
        if self._settings is None:
            text = self._output(["scontrol", "show", "config"], "scontrol show config")
            self._settings = parse_scheduler_config(text)
        return self._settings

    def snapshot(self) -> ClusterSnapshot:
        """Nodes, queue and reservations, the three commands run at once: an accept re-checks
        against a fresh snapshot, so its latency is the slowest command's, not their sum."""
        settings = self.scheduler_settings()
        now = int(time.time())
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="slurm-snapshot") as pool:
            asked_nodes = pool.submit(self.nodes)
            asked_queue = pool.submit(self._json, ["squeue", "--json"])
            asked_reservations = pool.submit(self.list_reservations)
            asked_whole = (
                pool.submit(self._output, WHOLE_NODE_JOBS, "squeue")
                if settings.release >= (26, 5)
                else None
            )
            nodes, doc = asked_nodes.result(), asked_queue.result()
            reservations = asked_reservations.result()
            whole = parse_exclusive_text(asked_whole.result()) if asked_whole else None
        layout = detect_layout(doc)
        try:
            jobs = parse_jobs(doc, now, node_cores(nodes, self.config.partition), whole)
            jobs = with_levels(jobs, dict(self.config.qos_levels))
        except MALFORMED as exc:
            raise malformed("squeue --json", exc) from exc
        return build_snapshot(now, nodes, jobs, reservations, self.config, layout, settings)

    def occupancy(self) -> ClusterSnapshot:
        """Nodes, running jobs and reservations; the queue is left out by text squeue's state
        filter, and the running jobs of an accept a few seconds ago are reused while the
        nodes' allocated cores show that none started or ended (:mod:`.running`), so an
        accept's re-check costs the same with 10 or 10,000 jobs queued."""
        settings = self.scheduler_settings()
        now = int(time.time())
        began = time.monotonic()
        with ThreadPoolExecutor(max_workers=3, thread_name_prefix="slurm-occupancy") as pool:
            asked_nodes = pool.submit(self.nodes)
            asked_reservations = pool.submit(self.list_reservations)
            # nothing recent to reuse: read the running jobs alongside, not after the nodes
            asked_running = None if self.running.recent() else pool.submit(self._read_running)
            nodes = asked_nodes.result()
            jobs = self.running.current(
                nodes, lambda: (asked_running or pool.submit(self._read_running)).result(), began
            )
            reservations = asked_reservations.result()
        return build_snapshot(now, nodes, jobs, reservations, self.config, "text", settings)

    def _read_running(self) -> SlurmJobs:
        args = ["squeue", "-h", "-r", "-t", RUNNING_STATE_FILTER, "-o", RUNNING_FORMAT]
        try:
            return parse_running_text(self._output(args, "squeue"))
        except ValueError as exc:
            raise BackendUnavailable(str(exc)) from exc

    def held_window(self, start: int, end: int) -> Tuple[int, int]:
        return start, start + whole_minutes(end - start) * 60

    def list_reservations(self) -> List[BatchReservation]:
        args = ["scontrol", "show", "reservation", "-o"]
        return parse_reservations(self._output(args, "scontrol show reservation"))

    def get_reservation(self, name: str) -> Optional[BatchReservation]:
        """One reservation as Slurm holds it now, or None if there is no such reservation."""
        names.check(names.NAME, name, "reservation name")
        proc = self._run(["scontrol", "show", "reservation", "-o", name])
        if proc.returncode != 0:
            msg = self._message(proc)
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
        proc = self._run(sacct_args(since, until))
        if proc.returncode != 0:
            raise self._failure("sacct", self._message(proc), BackendError)
        return json_object("sacct --json", proc.stdout)

    def reservation_jobs(self, name: str, start: int, end: int) -> Optional[List[JobUsage]]:
        """The jobs accounting saw in reservation ``name``; None on a cluster without
        accounting (sacct's own error says so; any other failure is raised). Jobs accounting
        files under no reservation name are matched by the reservation's ids (sacctmgr),
        asked only when there are such jobs (docs/slurm.md §6.8)."""
        end = max(end, start + 1)
        proc = self._run(sacct_usage_args(start, end))
        if proc.returncode != 0:
            message = self._message(proc)
            if ACCOUNTING_DISABLED in message:
                return None
            raise self._failure("sacct", message, BackendError)
        ids: List[str] = []
        if unnamed_reservation_ids(proc.stdout):
            found = self._run(reservation_ids_args(name, start, end))
            if found.returncode != 0:
                raise self._failure("sacctmgr", self._message(found), BackendError)
            ids = found.stdout.split()
        return reservation_jobs_from_sacct(proc.stdout, name, ids)

    # ---- writing

    def create_reservation(self, spec: ReservationSpec) -> BatchReservation:
        """Create the reservation, then read it back: Slurm silently shrinks NodeCnt
        (docs/slurm.md §6.1).

        A retry after a lost answer finds "Duplicate reservation name"; if the existing
        reservation has the same window it is returned (idempotent), else refused. A timeout
        raises BackendUnavailable and leaves it unknown whether the reservation exists: the
        caller reconciles by name.
        """
        now = int(time.time())
        per_node = self.scheduler_settings().cores_per_node
        proc = self._run(reservation_args(spec, self.config, now, per_node))
        if proc.returncode != 0:
            msg = self._message(proc)
            if not self.is_unavailable(msg) and "Duplicate reservation name" in msg:
                existing = self.get_reservation(spec.name)
                if existing is not None and same_window(existing, spec, now):
                    return existing
            self.running.forget()
            raise self._failure(f"create reservation {spec.name}", msg, ReservationRefused)
        made = self.get_reservation(spec.name)
        if made is None:
            raise BackendError(
                f"reservation {spec.name} was created ({proc.stdout.strip()})"
                " but cannot be read back"
            )
        if made.demand(spec.unit) < spec.size:
            self.running.forget()
        return made

    def delete_reservation(self, name: str) -> None:
        """Delete our reservation; a missing one is fine, one in use by jobs is refused.

        Names without the configured prefix are refused (ValueError): the agent never deletes a
        reservation it did not make.
        """
        check_ours(name, names.NAME, self.config.name_prefix)
        args = ["scontrol", "delete", f"ReservationName={name}"]
        self._delete(args, f"delete reservation {name}", _no_such_reservation, ("in use",))


def _no_such_reservation(_proc: subprocess.CompletedProcess[str], message: str) -> bool:
    return "Requested reservation is invalid" in message or "not found" in message
