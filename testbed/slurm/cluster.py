"""Use this when a test needs a private, real Slurm cluster on localhost.

A private, real Slurm cluster on localhost for the integration tests.

``SlurmTestCluster`` builds everything in a fresh temporary directory: a slurm.conf with free
ports picked at run time, one slurmctld and one ``slurmd -N nX`` per node (4 nodes by default,
16 cores each through ``SlurmdParameters=config_overrides``; ``shape`` gives another one, such
as :data:`MIXED_NODES` in :data:`MIXED_PARTITIONS`), and waits until ``sinfo`` shows every node
idle. Nothing outside the directory is touched except munged, which is started only when no
munged runs on the host (it is shared and left running: another cluster may use it).

The recipe and the reasons behind each setting are in ``docs/slurm.md`` §1:
``%n`` in the slurmd paths lets several slurmd share one host, private ports keep it apart from
any other cluster on the machine, ``bf_interval=5`` makes backfill estimates appear within
seconds, and no accounting keeps slurmdbd out of the picture (``accounting=True`` adds a private
slurmdbd for the tests that need ``sacct``: testbed/slurm/accounting.py). ``extra_config`` adds
slurm.conf lines and ``files`` puts files beside slurm.conf before slurmctld starts (a
``job_submit.lua``, which slurmctld reads from there).

``install`` says which Slurm release runs it: the host's (the default) or a newer one in a
chroot (testbed/slurm/install.py); the cluster's files are then under the chroot, the daemons
and clients run in it (:meth:`SlurmTestCluster.run`), and :meth:`SlurmTestCluster.slurm_config`
gives the backend the chroot as its ``command_prefix``.

Every command is an argument list, never a shell string. Needs root (slurmd runs jobs as their
owners) and Debian's ``munge slurmctld slurmd slurm-client`` (tests/setup/install-system-deps).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple, Type

from siteagent.backends.slurm.config import SlurmConfig
from testbed.processes.ports import free_ports
from testbed.slurm.install import SlurmInstall, host_series

if TYPE_CHECKING:
    from testbed.slurm.accounting import SlurmAccounting

#: Binaries the cluster needs; missing ones are reported by name.
REQUIRED_BINARIES = (
    "munged",
    "munge",
    "unmunge",
    "slurmctld",
    "slurmd",
    "sbatch",
    "squeue",
    "sinfo",
    "scontrol",
    "scancel",
)

#: Job states in which a job still exists in the scheduler's eyes (not finished).
_LIVE_STATES = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "RESIZING")


@dataclass(frozen=True)
class TestNode:
    """One node of a test cluster: its name, CPUs (one core each) and Slurm scheduling weight."""

    name: str
    cpus: int = 16
    weight: int = 1


@dataclass(frozen=True)
class TestPartition:
    """A partition of a test cluster: its name and node names (the first one is the default)."""

    name: str
    nodes: Tuple[str, ...]


#: The second shape the node-aware planner is measured on: nodes of different sizes and
#: weights, listed out of weight order, and two partitions sharing two of them.
MIXED_NODES = (
    TestNode("m1", cpus=8, weight=10),
    TestNode("m2", cpus=24, weight=1),
    TestNode("m3", cpus=16, weight=5),
    TestNode("m4", cpus=8, weight=1),
    TestNode("m5", cpus=32, weight=20),
)
MIXED_PARTITIONS = (
    TestPartition("batch", ("m1", "m2", "m3", "m4")),
    TestPartition("wide", ("m3", "m4", "m5")),
)


class ClusterError(RuntimeError):
    """The test cluster could not be started or a client command failed."""


def missing_binaries(install: Optional[SlurmInstall] = None) -> List[str]:
    """Names of required programs ``install`` (the host's by default) lacks."""
    return (install or SlurmInstall(host_series())).missing(REQUIRED_BINARIES)


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"  ({path}: {exc})"
    return "\n".join("  " + line for line in text[-lines:])


def _pid_alive(pid: int) -> bool:
    """True while ``pid`` runs; zombies count as dead (the daemons are not our children)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # state is the field after the parenthesised command name
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


class SlurmTestCluster:
    """A throw-away Slurm 22.05+ cluster of ``nodes`` nodes on this host.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. Client commands run with
    :attr:`env` (which carries ``SLURM_CONF``) through :meth:`run`.
    """

    def __init__(
        self,
        nodes: int = 4,
        cpus_per_node: int = 16,
        real_memory_mb: int = 32000,
        partition: str = "batch",
        min_job_age: int = 30,
        startup_timeout: float = 90.0,
        base_dir: Optional[str] = None,
        accounting: bool = False,
        shape: Optional[Tuple[Sequence[TestNode], Sequence[TestPartition]]] = None,
        extra_config: Sequence[str] = (),
        files: Optional[Mapping[str, bytes]] = None,
        install: Optional[SlurmInstall] = None,
    ) -> None:
        self.install = install or SlurmInstall(host_series())
        if shape is None:
            shape = (
                [TestNode(f"n{i}", cpus_per_node) for i in range(1, nodes + 1)],
                [TestPartition(partition, tuple(f"n{i}" for i in range(1, nodes + 1)))],
            )
        self.nodes: Tuple[TestNode, ...] = tuple(shape[0])
        self.partitions: Tuple[TestPartition, ...] = tuple(shape[1])
        self.node_names = [n.name for n in self.nodes]
        self.real_memory_mb = real_memory_mb
        self.partition = self.partitions[0].name
        self.min_job_age = min_job_age
        self.startup_timeout = startup_timeout
        self.base_dir = base_dir
        self.cluster_name = "sa" + uuid.uuid4().hex[:8]
        self.dir = Path()
        self.conf = Path()
        #: slurm.conf as the Slurm programs see it (in the chroot, if any)
        self.inner_conf = ""
        self.env: Dict[str, str] = {}
        self.ctld_port = 0
        self.node_ports: Dict[str, int] = {}
        self.startup_seconds = 0.0
        self._started = False
        #: with ``accounting``, a private mariadbd + slurmdbd (testbed/slurm/accounting.py)
        self.accounting: Optional[SlurmAccounting] = None
        self._with_accounting = accounting
        self.extra_config = tuple(extra_config)
        self.files = dict(files or {})

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> SlurmTestCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.stop()

    def start(self) -> SlurmTestCluster:
        """Start munged (if needed), slurmctld and every slurmd; wait until all nodes are idle.

        Raises ClusterError with the reason and the tail of the daemon logs. One retry with new
        ports covers the rare case that another program took a port between choice and bind.
        """
        if os.geteuid() != 0:
            raise ClusterError("the Slurm test cluster needs root (slurmd runs jobs as users)")
        missing = missing_binaries(self.install)
        if missing:
            raise ClusterError(
                "missing programs: " + ", ".join(missing) + " (run tests/setup/install-system-deps)"
            )
        t0 = time.monotonic()
        try:
            self.install.ensure_munged()
        except RuntimeError as exc:
            raise ClusterError(str(exc)) from exc
        last: Optional[ClusterError] = None
        for _attempt in range(2):
            try:
                self._start_once()
                self.startup_seconds = time.monotonic() - t0
                return self
            except ClusterError as exc:
                last = exc
                self._kill_daemons()
        assert last is not None
        raise last

    def _start_once(self) -> None:
        where = self.base_dir or self.install.tmp_dir()
        self.dir = Path(tempfile.mkdtemp(prefix="siteagent-slurm-", dir=where))
        # jobs run as their owners (tests submit as nobody too) and chdir/write here
        self.dir.chmod(0o755)
        for sub in ("state", "log", "jobs", *(f"spool/{n}" for n in self.node_names)):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        (self.dir / "jobs").chmod(0o1777)
        ports = free_ports(1 + len(self.node_names))
        self.ctld_port = ports[0]
        self.node_ports = dict(zip(self.node_names, ports[1:]))
        self.conf = self.dir / "slurm.conf"
        self.inner_conf = self.install.inside(self.conf)
        self.env = dict(os.environ)
        self.env["SLURM_CONF"] = self.inner_conf
        # a user's SQUEUE_FORMAT/SBATCH_* settings must not change what the tests see
        for key in list(self.env):
            if key.startswith(("SQUEUE_", "SINFO_", "SBATCH_", "SLURM_")) and key != "SLURM_CONF":
                del self.env[key]
        self._started = True
        if self._with_accounting:
            from testbed.slurm.accounting import SlurmAccounting

            self.accounting = SlurmAccounting(self.dir, self.env, self.install)
            self.accounting.start()
        self.conf.write_text(self._config_text())
        if self.install.series >= "23.11":
            # slurmd 23.11+ starts a cgroup plugin whatever the task and proctrack plugins;
            # a chroot has no cgroup filesystem, and these plugins need none (docs/slurm.md §11)
            (self.dir / "cgroup.conf").write_text("CgroupPlugin=disabled\n")
        for name, content in self.files.items():
            (self.dir / name).write_bytes(content)
        if self.accounting is not None:
            self.accounting.add_cluster(self.cluster_name)
        self._daemon(["slurmctld", "-f", self.inner_conf])
        for node in self.node_names:
            self._daemon(["slurmd", "-f", self.inner_conf, "-N", node])
        self._wait_idle()

    def _config_text(self) -> str:
        d = self.install.inside(self.dir)
        host = socket.gethostname().split(".")[0]
        lines = [
            f"ClusterName={self.cluster_name}",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            f"SlurmdPort={next(iter(self.node_ports.values()))}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={d}/state",
            f"SlurmdSpoolDir={d}/spool/%n",
            f"SlurmctldPidFile={d}/slurmctld.pid",
            f"SlurmdPidFile={d}/slurmd-%n.pid",
            f"SlurmctldLogFile={d}/log/slurmctld.log",
            f"SlurmdLogFile={d}/log/slurmd-%n.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            *(
                self.accounting.conf_lines()
                if self.accounting is not None
                else ["AccountingStorageType=accounting_storage/none"]
            ),
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=bf_interval=5",
            f"MinJobAge={self.min_job_age}",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            "SlurmdTimeout=300",
            "InactiveLimit=0",
            "KillWait=5",
            "Waittime=0",
            "MailProg=/bin/true",
            *self.extra_config,
        ]
        for node in self.nodes:
            lines.append(
                f"NodeName={node.name} NodeHostname=localhost NodeAddr=127.0.0.1"
                f" Port={self.node_ports[node.name]} CPUs={node.cpus} Sockets={node.cpus}"
                f" CoresPerSocket=1 ThreadsPerCore=1 RealMemory={self.real_memory_mb}"
                f" Weight={node.weight} State=UNKNOWN"
            )
        for index, part in enumerate(self.partitions):
            lines.append(
                f"PartitionName={part.name} Nodes={','.join(part.nodes)}"
                f" Default={'YES' if index == 0 else 'NO'} MaxTime=INFINITE State=UP"
            )
        return "\n".join(lines) + "\n"

    def _daemon(self, args: Sequence[str]) -> None:
        """Start a daemonising Slurm program; it forks, so a non-zero exit means it failed."""
        proc = subprocess.run(
            self.install.daemon(args),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if proc.returncode != 0:
            raise ClusterError(
                f"{' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}\n"
                + self.log_tails()
            )

    def _wait_idle(self, accept: Sequence[str] = ("idle",)) -> None:
        deadline = time.monotonic() + self.startup_timeout
        last = ""
        while time.monotonic() < deadline:
            proc = self.run(["sinfo", "-h", "-N", "-o", "%N %T"], check=False, timeout=20)
            last = (proc.stdout + proc.stderr).strip()
            states = dict(
                line.split(None, 1) for line in proc.stdout.splitlines() if len(line.split()) == 2
            )
            if proc.returncode == 0 and all(states.get(n) in accept for n in self.node_names):
                return
            if not self._pid_from("slurmctld.pid"):
                break
            time.sleep(0.5)
        raise ClusterError(
            f"Slurm test cluster in {self.dir} did not come up within {self.startup_timeout:.0f}"
            f" s; last sinfo: {last or '(nothing)'}\n" + self.log_tails()
        )

    def log_tails(self, lines: int = 25) -> str:
        """The end of every daemon log, for error messages."""
        logs = sorted((self.dir / "log").glob("*.log")) if self.dir != Path() else []
        if not logs:
            return "(no daemon logs written)"
        return "\n".join(f"--- {p.name}:\n{_tail(p, lines)}" for p in logs)

    def _pid_from(self, filename: str) -> Optional[int]:
        try:
            pid = int((self.dir / filename).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if _pid_alive(pid) else None

    def stop(self, remove: bool = True) -> None:
        """Cancel every job, then stop the daemons by PID and wait for them; remove the dir."""
        if not self._started:
            return
        # the controller may already be gone; the daemons are killed below anyway
        with contextlib.suppress(ClusterError, subprocess.TimeoutExpired):
            self.cancel_all(wait=20.0)
        self._kill_daemons()
        self._started = False
        if remove:
            shutil.rmtree(self.dir, ignore_errors=True)

    def stop_controller(self) -> None:
        """Stop slurmctld only (jobs and reservations survive in StateSaveLocation)."""
        pid = self._pid_from("slurmctld.pid")
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _pid_alive(pid):
            os.kill(pid, signal.SIGKILL)

    def pause_controller(self) -> None:
        """Freeze slurmctld (SIGSTOP): connections are accepted and never answered, as by a
        controller that hangs. :meth:`resume_controller` thaws it."""
        pid = self._pid_from("slurmctld.pid")
        if pid is None:
            raise ClusterError("no slurmctld to pause")
        os.kill(pid, signal.SIGSTOP)

    def resume_controller(self) -> None:
        """Thaw a slurmctld :meth:`pause_controller` froze."""
        pid = self._pid_from("slurmctld.pid")
        if pid is not None:
            os.kill(pid, signal.SIGCONT)

    def start_controller(self) -> None:
        """Start slurmctld again and wait until every node is idle or busy (not ``unk``)."""
        self._daemon(["slurmctld", "-f", self.inner_conf])
        self._wait_idle(accept=("idle", "mixed", "allocated", "reserved", "planned"))

    def _kill_daemons(self) -> None:
        files = [f"slurmd-{n}.pid" for n in self.node_names] + ["slurmctld.pid"]
        pids = [p for p in (self._pid_from(f) for f in files) if p is not None]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while any(_pid_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in pids:
            if _pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if self.accounting is not None:
            self.accounting.stop()
            self.accounting = None

    # ------------------------------------------------------------------ clients

    def run(
        self,
        args: Sequence[str],
        check: bool = True,
        timeout: float = 30.0,
        env: Optional[Mapping[str, str]] = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command against this cluster (with ``env`` added to its
        variables); with ``check``, raise on rc != 0."""
        proc = subprocess.run(
            self.install.command(args),
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise ClusterError(
                f"{' '.join(args)} exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()}"
            )
        return proc

    def slurm_config(self, **options: Any) -> SlurmConfig:
        """The backend's configuration for this cluster (its slurm.conf, and the chroot as the
        command prefix), with ``options`` (partition, users, unit, ...)."""
        return SlurmConfig(
            slurm_conf=self.inner_conf, command_prefix=self.install.prefix, **options
        )

    def impatient_conf(self, message_timeout_s: int = 2) -> str:
        """A copy of slurm.conf for clients only, with a short ``MessageTimeout``; its path as
        the commands see it. A client retries a stopped controller's closed port once a second
        for MessageTimeout - 1 s (9 s by default, for every command), which a test of the
        outage need not wait out; the daemons keep the default."""
        path = self.dir / "slurm-impatient.conf"
        path.write_text(self.conf.read_text() + f"MessageTimeout={message_timeout_s}\n")
        return self.install.inside(path)

    def backend_options(self) -> Dict[str, Any]:
        """The ``backend.slurm`` keys that reach this cluster (its slurm.conf, and the chroot as
        the command prefix), for a configuration file."""
        options: Dict[str, Any] = {"slurm_conf": self.inner_conf}
        if self.install.prefix:
            options["command_prefix"] = list(self.install.prefix)
        return options

    def submit(self, *sbatch_args: str, wrap: str = "sleep 3600") -> str:
        """Submit ``wrap`` with sbatch and return the job id (the array id for arrays)."""
        proc = self.run(
            [
                "sbatch",
                "--parsable",
                f"--chdir={self.inner_dir}/jobs",
                f"--output={self.inner_dir}/jobs/%j.out",
                *sbatch_args,
                f"--wrap={wrap}",
            ]
        )
        return proc.stdout.strip().split(";")[0]

    @property
    def inner_dir(self) -> str:
        """The cluster's directory as the Slurm programs see it."""
        return self.install.inside(self.dir)

    def live_job_ids(self) -> List[str]:
        """Ids of jobs not yet finished (array ids once per array), as squeue lists them."""
        proc = self.run(["squeue", "-h", "-t", ",".join(_LIVE_STATES), "-o", "%A"])
        return sorted(set(proc.stdout.split()), key=lambda s: int(s) if s.isdigit() else 0)

    def cancel_all(self, wait: float = 20.0) -> None:
        """Cancel every job and wait until none is left running, pending or completing."""
        deadline = time.monotonic() + wait
        while True:
            ids = self.live_job_ids()
            if not ids:
                return
            self.run(["scancel", *ids], check=False)
            if time.monotonic() > deadline:
                raise ClusterError(f"jobs still alive after scancel: {' '.join(ids)}")
            time.sleep(0.3)

    def delete_all_reservations(self) -> None:
        """Delete every reservation (jobs referencing one must be cancelled first)."""
        proc = self.run(["scontrol", "show", "reservation", "-o"])
        for line in proc.stdout.splitlines():
            if line.startswith("ReservationName="):
                name = line.split()[0].split("=", 1)[1]
                self.run(["scontrol", "delete", f"ReservationName={name}"], check=False)

    def reset(self) -> None:
        """Back to an empty cluster: no jobs, no reservations, every node idle and in service.

        Waits for the nodes too: a node just resumed is NOT_RESPONDING (``idle*``) for a moment,
        and one whose job just ended may still be completing; a reservation asked for then is
        refused as "busy".
        """
        self.cancel_all()
        self.delete_all_reservations()
        out_of_service = ("drain", "drng", "down", "fail", "failg")
        for line in self.run(["sinfo", "-h", "-N", "-o", "%N %t"]).stdout.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].rstrip("*~#!%$@^-") in out_of_service:
                resume = ["scontrol", "update", f"NodeName={parts[0]}", "State=RESUME"]
                self.run(resume, check=False)
        self._wait_idle()


def ensure_munged(timeout: float = 15.0) -> None:
    """Start the host's munged unless one answers ``munge -n | unmunge`` already; wait until it
    does. A running munged is left alone (it may serve another cluster or the host's own Slurm),
    and the one we start is left running for the same reason. (A chroot's munged is not the
    host's: :meth:`SlurmInstall.ensure_munged` asks the socket, not the process list.)"""
    try:
        SlurmInstall(host_series()).ensure_munged(timeout)
    except RuntimeError as exc:
        raise ClusterError(str(exc)) from exc
