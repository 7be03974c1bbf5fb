"""The PBS backend: the commands it runs, waiting for PBS to confirm a reservation, and what
the failures mean.

Reservations are created with ``pbs_rsub -R start -E end -l select=... -N name`` (docs/pbs.md
§5). PBS answers ``R123.server UNCONFIRMED`` at once and its scheduler decides in its next
cycle: the reservation becomes CONFIRMED, or is denied and silently deleted (§5.1). So a
reservation is only returned once ``pbs_rstat`` shows it confirmed; a denial (the id
disappears) or no decision within ``confirm_timeout`` is a refusal, and whatever was made is
deleted.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any, Dict, List, Optional, Sequence

from siteagent.backends.base import BackendError, BackendUnavailable, ReservationRefused
from siteagent.backends.checks import check_ours
from siteagent.backends.command import CommandBackend
from siteagent.backends.pbs.arguments import parse_rsub_reply, rsub_args, same_window
from siteagent.backends.pbs.config import PbsConfig
from siteagent.backends.pbs.errors import UNAVAILABLE_MARKERS, UNKNOWN_RESV
from siteagent.backends.pbs.jobs import parse_jobs
from siteagent.backends.pbs.nodes import PbsNode, parse_nodes
from siteagent.backends.pbs.reservations import (
    CONFIRMED_STATES,
    PbsReservation,
    parse_reservations,
)
from siteagent.backends.pbs.snapshot import build_snapshot, vnodes_in_queue
from siteagent.backends.pbs.values import as_text, check_header
from siteagent.core import names
from siteagent.core.values import BatchReservation, CapacityUnit, ClusterSnapshot, ReservationSpec

#: First and longest pause between ``pbs_rstat`` polls while waiting for the confirmation.
POLL_FIRST_S = 0.05
POLL_MAX_S = 1.0


class PbsBackend(CommandBackend):
    """An OpenPBS / PBS Professional server seen through its command-line clients."""

    name = "pbs"
    unavailable_markers = UNAVAILABLE_MARKERS

    def __init__(self, config: Optional[PbsConfig] = None) -> None:
        self.config = config or PbsConfig()
        super().__init__(self.config.client_env(), self.config.timeout)

    def check_document(self, doc: Dict[str, Any]) -> None:
        """qstat prints its JSON header even when it cannot reach the server (and then exits
        non-zero, which :meth:`_json` checks first); a document without it is not PBS's."""
        check_header(doc, "unreadable output")

    def _rstat(self, resv_id: Optional[str] = None) -> List[PbsReservation]:
        """Reservations from ``pbs_rstat -f`` (one, if ``resv_id``; none if it is unknown)."""
        args = ["pbs_rstat", "-f"]
        if resv_id:
            args.append(names.check(names.PBS_RESERVATION_ID, resv_id, "PBS reservation id"))
        # an unknown id is reported on stderr with exit status 0 (§6): no block, no record
        return parse_reservations(self._output(args), name_prefix=self.config.name_prefix)

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
        server = as_text(doc.get("pbs_server"))
        return build_snapshot(now, nodes, jobs, reservations, self.config, server)

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
        served = vnodes_in_queue(self.nodes(), self.config.queue)
        return max((n.node.cores for n in served if n.node.usable), default=0)

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
            if not same_window(existing.record, spec, now):
                raise ReservationRefused(
                    f"create reservation {spec.name}: {existing.id} carries this name "
                    f"with another window"
                )
            if existing.state in CONFIRMED_STATES:
                return existing.record
            return self._await_confirmation(spec.name, existing.id)
        proc = self._run(args)
        if proc.returncode != 0:
            what = f"create reservation {spec.name}"
            raise self._failure(what, self._message(proc), ReservationRefused)
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
        check_ours(name.partition("@")[0], names.PBS_RESERVATION_NAME, self.config.name_prefix)
        self._delete_ids([r.id for r in self.find(name)])

    def _delete_ids(self, ids: Sequence[str]) -> None:
        """``pbs_rdel`` of these ids, each checked first: they come from PBS's output."""
        for resv_id in ids:
            names.check(names.PBS_RESERVATION_ID, resv_id, "PBS reservation id")
        if ids:
            self._delete(["pbs_rdel", *ids], f"pbs_rdel {' '.join(ids)}", _all_unknown)


def _all_unknown(proc: subprocess.CompletedProcess[str], _message: str) -> bool:
    """Whether every id pbs_rdel failed on is unknown: gone already, or denied meanwhile."""
    failures = [ln for ln in (proc.stderr or "").splitlines() if ln.strip()]
    return bool(failures) and all(UNKNOWN_RESV in ln for ln in failures)
