"""Use this when a test needs a private, real OpenPBS.

A private, real OpenPBS on this host for the integration tests.

``PbsTestCluster`` runs OpenPBS as built by tests/setup/build-openpbs (from the vendored
source, cached outside the clone): pbs_comm, pbs_server with its PostgreSQL data service,
pbs_sched, and one pbs_mom per host ``n1``... (4 of 16 CPUs by default), every daemon in a
namespace of its own made with ``unshare``:

* **network**: PBS's TPP layer ignores loopback addresses (127/8) and pbs_server stops with
  "Could not find any usable IP address for host" when its host name resolves to nothing else
  (docs/pbs.md §11). The namespace's loopback interface carries documentation addresses
  (198.51.100.0/24, RFC 5737) instead, one per host, and nothing outside can reach them. PBS's
  default ports are then private to the cluster, so several clusters may run at once; the moms
  share the namespace, so each has its own pair of ports.
* **UTS and mount**: the host name is the server's (``pbshead``), and a private ``/etc/hosts``
  and ``/run/postgresql`` (where PostgreSQL puts its socket) are bind-mounted over the host's.

Client commands run in the namespace too: :attr:`PbsTestCluster.bin` holds one wrapper per
OpenPBS command (``exec nsenter --target PID ... qstat "$@"``), and :attr:`env` puts it first
on ``PATH`` with ``PBS_CONF_FILE``, so the agent's PBS backend runs them as it would on a site.

PBS refuses a PBS_HOME whose path has a directory that is group- or world-writable or not
root's (``chk_file_sec``), and its data service runs as ``postgres``, which must reach the
datastore: the homes live in a fresh directory under ``/var/lib/siteagent-tests``, not /tmp.
Every command is an argument list. Needs root, ``unshare``/``nsenter``/``ip`` (util-linux,
iproute2) and the packages tests/setup/install-system-deps installs.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Dict, List, Optional, Sequence, Type

from testbed.slurm.cluster import _pid_alive, _tail

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "tests" / "setup" / "build-openpbs"
#: Written by the build script once the installed tree is complete.
BUILT_STAMP = ".siteagent-built"
#: Root-owned and not writable by others, as PBS requires of every directory above PBS_HOME.
BASE_DIR = Path("/var/lib/siteagent-tests")
SERVER = "pbshead"
ADDRESS_PREFIX = "198.51.100."
#: The first mom's service port; mom i gets BASE + 2i and BASE + 2i + 1 (its manager port).
MOM_PORT_BASE = 15010
#: Attempts at a start. pbs_habitat's datastore creation runs ``createdb`` once the data
#: service's PostgreSQL answers ``pg_ctl status``, which it does before it accepts
#: connections; on a loaded machine createdb then fails ("the database system is starting
#: up") and the start is tried again from scratch.
STARTS = 3
#: What the data service runs as (OpenPBS's default database user, Debian's postgres account).
DB_USER = "postgres"

#: Sets the namespace up and keeps it alive; PBS daemons join it with nsenter. Arguments: the
#: host name, the hosts file, the private PostgreSQL run directory, then addresses.
_HOLDER = """
set -e
name=$1 hosts=$2 pgrun=$3
shift 3
ip link set lo up
for address in "$@"; do ip addr add "$address/32" dev lo; done
hostname "$name"
mount --bind "$hosts" /etc/hosts
mkdir -p /run/postgresql
mount --bind "$pgrun" /run/postgresql
echo "$$"
exec sleep infinity
"""


class PbsClusterError(RuntimeError):
    """The PBS test cluster could not be started or a client command failed."""


def openpbs_prefix() -> Path:
    """Where tests/setup/build-openpbs installs OpenPBS (built or not), or the tree
    ``SITEAGENT_OPENPBS_PREFIX`` names (an OpenPBS installed elsewhere, e.g. /opt/pbs)."""
    given = os.environ.get("SITEAGENT_OPENPBS_PREFIX")
    if given:
        return Path(given)
    proc = subprocess.run(
        [str(BUILD_SCRIPT), "--print-prefix"], capture_output=True, text=True, check=True
    )
    return Path(proc.stdout.strip())


def unavailable_reason() -> str:
    """Why a PBS test cluster cannot start here ("" when it can)."""
    if os.geteuid() != 0:
        return "the PBS test cluster needs root (namespaces, and pbs_mom runs jobs as users)"
    missing = [p for p in ("unshare", "nsenter", "ip", "su") if shutil.which(p) is None]
    if missing:
        return f"missing {', '.join(missing)} (util-linux, iproute2)"
    try:
        pwd.getpwnam(DB_USER)
    except KeyError:
        return f"no {DB_USER} account; run tests/setup/install-system-deps (postgresql)"
    prefix = openpbs_prefix()
    if not (prefix / BUILT_STAMP).is_file() and not os.environ.get("SITEAGENT_OPENPBS_PREFIX"):
        return "OpenPBS is not built; run tests/setup/build-openpbs"
    if not (prefix / "sbin" / "pbs_server").is_file():
        return f"no OpenPBS in {prefix} (sbin/pbs_server is missing)"
    return ""


def text_blocks(text: str) -> Dict[str, Dict[str, str]]:
    """PBS's plain text listings as {id: {attribute: value}}: ``qstat -f`` (``Job Id: X``
    blocks of indented lines, long values wrapped onto tab-indented lines), ``pbs_rstat -f``
    (``Resv ID: X`` blocks) and ``pbsnodes -a`` (a vnode's name, then its lines). The tests
    read expectations with it, never with the backend's parsers of the JSON forms."""
    blocks: Dict[str, Dict[str, str]] = {}
    current: Dict[str, str] = {}
    key = ""
    for line in text.splitlines():
        if line.startswith(("Job Id:", "Resv ID:")):
            current = blocks.setdefault(line.split(":", 1)[1].strip(), {})
        elif line.startswith("\t") and key:
            current[key] += line.strip()
        elif " = " in line:
            key, value = (part.strip() for part in line.split(" = ", 1))
            current[key] = value
        elif line.strip() and not line[0].isspace():
            current = blocks.setdefault(line.strip(), {})
    return blocks


class PbsTestCluster:
    """A throw-away OpenPBS of ``nodes`` hosts ``n1``... with ``cpus_per_node`` CPUs each.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. Client commands run
    through :meth:`run` (or with :attr:`env` from anywhere on the host).
    """

    def __init__(
        self,
        nodes: int = 4,
        cpus_per_node: int = 16,
        mem_gb: int = 32,
        startup_timeout: float = 180.0,
        base_dir: Path = BASE_DIR,
    ) -> None:
        self.node_names = [f"n{i}" for i in range(1, nodes + 1)]
        self.cpus_per_node = cpus_per_node
        self.mem_gb = mem_gb
        self.startup_timeout = startup_timeout
        self.base_dir = base_dir
        self.prefix = Path()
        self.dir = Path()
        self.bin = Path()
        self.env: Dict[str, str] = {}
        self.holder: Optional[subprocess.Popen[str]] = None
        self.ns_pid = 0
        self.startup_seconds = 0.0

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> PbsTestCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.stop()

    @property
    def home(self) -> Path:
        """The server's PBS_HOME (pbs_server, its data service, pbs_sched, pbs_comm)."""
        return self.dir / "home"

    @property
    def conf(self) -> Path:
        return self.dir / "pbs.conf"

    def mom_home(self, node: str) -> Path:
        return self.dir / f"mom-{node}"

    def start(self) -> PbsTestCluster:
        """Make the namespace and PBS_HOME, start every daemon, create the vnodes and wait
        until each is free. Raises PbsClusterError with the reason and the daemons' logs."""
        reason = unavailable_reason()
        if reason:
            raise PbsClusterError(reason)
        t0 = time.monotonic()
        self.prefix = openpbs_prefix()
        self.base_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        for attempt in range(1, STARTS + 1):
            try:
                self._start_once()
                break
            except PbsClusterError:
                self.stop(remove=attempt < STARTS)  # the last one's logs stay for the reader
                if attempt == STARTS:
                    raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _start_once(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="pbs-", dir=self.base_dir))
        self.dir.chmod(0o755)
        try:
            self._start_namespace()
            self._write_configuration()
            self._initialise_home()
            self._start_daemons()
            self._configure()
            self._wait_free()
        except BaseException:
            self.stop(remove=False)
            raise

    def _addresses(self) -> Dict[str, str]:
        names = [SERVER, *self.node_names]
        return {name: f"{ADDRESS_PREFIX}{index}" for index, name in enumerate(names, start=1)}

    def _start_namespace(self) -> None:
        hosts = self.dir / "hosts"
        lines = ["127.0.0.1 localhost"]
        lines += [f"{address} {name}" for name, address in self._addresses().items()]
        hosts.write_text("\n".join(lines) + "\n")
        pgrun = self.dir / "pgrun"
        pgrun.mkdir()
        shutil.chown(pgrun, DB_USER, DB_USER)
        pgrun.chmod(0o2775)
        self.holder = subprocess.Popen(
            [
                "unshare",
                "--net",
                "--uts",
                "--mount",
                "--fork",
                "--kill-child",
                "--",
                "sh",
                "-c",
                _HOLDER,
                "holder",
                SERVER,
                str(hosts),
                str(pgrun),
                *self._addresses().values(),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.holder.stdout is not None
        line = self.holder.stdout.readline().strip()
        if not line.isdigit():
            self.holder.kill()
            _out, err = self.holder.communicate(timeout=10)
            raise PbsClusterError(f"the namespace could not be made: {err.strip() or line}")
        self.ns_pid = int(line)
        self.bin = self.dir / "bin"
        self.bin.mkdir()
        enter = self._enter()
        for program in sorted((self.prefix / "bin").iterdir()):
            wrapper = self.bin / program.name
            command = " ".join(shlex.quote(a) for a in [*enter, str(program)])
            wrapper.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
            wrapper.chmod(0o755)
        self.env = {
            "PATH": os.pathsep.join([str(self.bin), os.environ.get("PATH", "/usr/bin:/bin")]),
            "PBS_CONF_FILE": str(self.conf),
            "TZ": "UTC",  # the dates the commands print, as the agent runs them
        }

    def _enter(self) -> List[str]:
        """The command prefix that runs a program in the cluster's namespaces."""
        return ["nsenter", f"--target={self.ns_pid}", "--net", "--uts", "--mount", "--"]

    def _conf_text(self, home: Path, start: Sequence[str], extra: Dict[str, str]) -> str:
        values = {
            "PBS_EXEC": str(self.prefix),
            "PBS_HOME": str(home),
            "PBS_SERVER": SERVER,
            "PBS_START_SERVER": "1" if "server" in start else "0",
            "PBS_START_SCHED": "1" if "sched" in start else "0",
            "PBS_START_COMM": "1" if "comm" in start else "0",
            "PBS_START_MOM": "1" if "mom" in start else "0",
            "PBS_CORE_LIMIT": "unlimited",
            "PBS_SCP": "/usr/bin/scp",
            **extra,
        }
        return "".join(f"{key}={value}\n" for key, value in values.items())

    def _write_configuration(self) -> None:
        self.conf.write_text(self._conf_text(self.home, ("server", "sched", "comm"), {}))
        for index, node in enumerate(self.node_names):
            port = MOM_PORT_BASE + 2 * index
            extra = {
                "PBS_MOM_NODE_NAME": node,
                "PBS_LEAF_NAME": node,
                "PBS_MOM_SERVICE_PORT": str(port),
                "PBS_MANAGER_SERVICE_PORT": str(port + 1),
            }
            text = self._conf_text(self.mom_home(node), ("mom",), extra)
            (self.dir / f"pbs.conf.{node}").write_text(text)

    def _in_namespace(
        self, args: Sequence[str], conf: Path, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PBS_CONF_FILE": str(conf), "TZ": "UTC"}
        return subprocess.run(
            [*self._enter(), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def _initialise_home(self) -> None:
        """pbs_habitat makes the server's PBS_HOME as an installation does: the directories,
        the data service (initdb as postgres), ``pbs_server -t create`` and the queue
        ``workq``. The moms' homes are made as pbs_postinstall makes an execution host's."""
        proc = self._in_namespace([str(self.prefix / "libexec" / "pbs_habitat")], self.conf)
        (self.dir / "habitat.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise PbsClusterError(
                f"pbs_habitat exited {proc.returncode}:\n{_tail(self.dir / 'habitat.log', 30)}"
            )
        for node in self.node_names:
            self._make_mom_home(self.mom_home(node))
        # jobs start in submission order and the top jobs get PBS's start estimate
        # (estimated.start_time), as on a site that publishes them (contrib/pbs/README.md §4)
        sched_config = self.home / "sched_priv" / "sched_config"
        text = sched_config.read_text()
        sched_config.write_text(text.replace("strict_ordering: false", "strict_ordering: true"))

    def _make_mom_home(self, home: Path) -> None:
        modes = {
            "": 0o755,
            "aux": 0o755,
            "checkpoint": 0o700,
            "mom_logs": 0o755,
            "mom_priv": 0o751,
            "mom_priv/jobs": 0o751,
            "mom_priv/hooks": 0o750,
            "mom_priv/hooks/tmp": 0o750,
            "spool": 0o1777,
            "undelivered": 0o1777,
        }
        for sub, mode in modes.items():
            path = home / sub
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(mode)
        # job files are copied, never sent with rcp/scp: every host shares this filesystem
        (home / "mom_priv" / "config").write_text("$logevent 0x1ff\n$usecp *:/ /\n")
        (home / "pbs_environment").write_text("TZ=UTC\nPATH=/bin:/usr/bin\n")

    def _daemon(self, program: str, conf: Path) -> None:
        """Start a PBS daemon in the namespace; it forks, so a non-zero exit means it failed."""
        proc = self._in_namespace([str(self.prefix / "sbin" / program)], conf)
        if proc.returncode != 0:
            raise PbsClusterError(
                f"{program} exited {proc.returncode}: {(proc.stderr + proc.stdout).strip()}\n"
                + self.log_tails()
            )

    def _start_daemons(self) -> None:
        self._daemon("pbs_comm", self.conf)
        self._daemon("pbs_server", self.conf)
        self._daemon("pbs_sched", self.conf)
        for node in self.node_names:
            self._daemon("pbs_mom", self.dir / f"pbs.conf.{node}")

    def _configure(self) -> None:
        """Root may run jobs (every test job is root's), the scheduler cycles often enough
        for the tests, and the vnodes are created with their CPUs and memory."""
        self._wait_for_server()
        self.qmgr("set server acl_roots = root")
        self.qmgr("set server scheduler_iteration = 10")
        self.qmgr("set server job_history_enable = True")
        self.qmgr("set server backfill_depth = 10")
        for index, node in enumerate(self.node_names):
            self.qmgr(f"create node {node} Mom={node},Port={MOM_PORT_BASE + 2 * index}")
            self.qmgr(f"set node {node} resources_available.ncpus = {self.cpus_per_node}")
            self.qmgr(f"set node {node} resources_available.mem = {self.mem_gb}gb")

    def _wait_for_server(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        last = ""
        while time.monotonic() < deadline:
            proc = self.run(["qstat", "-B"], check=False)
            if proc.returncode == 0:
                return
            last = (proc.stderr or proc.stdout).strip()
            time.sleep(0.5)
        raise PbsClusterError(f"pbs_server does not answer: {last}\n" + self.log_tails())

    def _wait_free(self, accept: Sequence[str] = ("free",)) -> None:
        deadline = time.monotonic() + self.startup_timeout
        states: Dict[str, str] = {}
        while time.monotonic() < deadline:
            states = self.node_states()
            if all(states.get(n) in accept for n in self.node_names):
                return
            time.sleep(0.5)
        raise PbsClusterError(
            f"PBS vnodes did not come up within {self.startup_timeout:.0f} s: {states}\n"
            + self.log_tails()
        )

    def daemon_pid(self, program: str, node: str = "") -> int:
        """The PID of a running daemon (``pbs_server``, ``pbs_sched``, ``pbs_comm``, or the
        ``pbs_mom`` of ``node``), from the lock file it writes."""
        locks = {
            "pbs_server": self.home / "server_priv" / "server.lock",
            "pbs_sched": self.home / "sched_priv" / "sched.lock",
            "pbs_comm": self.home / "server_priv" / "comm.lock",
            "pbs_mom": self.mom_home(node) / "mom_priv" / "mom.lock",
        }
        try:
            pid = int(locks[program].read_text().split()[0])
        except (OSError, ValueError, IndexError) as exc:
            raise PbsClusterError(f"no {program} running ({exc})") from exc
        if not _pid_alive(pid):
            raise PbsClusterError(f"{program} (PID {pid}) is not running")
        return pid

    def stop_server(self) -> None:
        """Stop pbs_server (``qterm -t quick``: the jobs and the other daemons keep running,
        as during a server's restart) and wait until it is gone."""
        pid = self.daemon_pid("pbs_server")
        self.run(["qterm", "-t", "quick"])
        deadline = time.monotonic() + 60
        while _pid_alive(pid):
            if time.monotonic() > deadline:
                raise PbsClusterError("pbs_server did not stop after qterm")
            time.sleep(0.2)

    def start_server(self) -> None:
        """Start pbs_server again (after :meth:`stop_server`) and wait for every vnode."""
        self._daemon("pbs_server", self.conf)
        self._wait_for_server()
        self._wait_free(("free", "job-busy"))

    def node_states(self) -> Dict[str, str]:
        """Each vnode's ``state`` as pbsnodes reports it."""
        proc = self.run(["pbsnodes", "-av", "-F", "json"], check=False)
        if proc.returncode != 0:
            return {}
        nodes = json.loads(proc.stdout).get("nodes", {})
        return {name: str(rec.get("state", "")) for name, rec in nodes.items()}

    def log_tails(self, lines: int = 15) -> str:
        """The end of today's log of every daemon, for error messages."""
        if self.dir == Path():
            return "(no logs)"
        logs = [*self.dir.glob("home/*_logs/*"), *self.dir.glob("mom-*/mom_logs/*")]
        logs += [self.dir / "home" / "spool" / "db_start.log"]
        logs = [p for p in logs if p.is_file()]
        return "\n".join(f"--- {p.relative_to(self.dir)}:\n{_tail(p, lines)}" for p in logs)

    def _namespace_pids(self) -> List[int]:
        """Every process in the cluster's network namespace (daemons, PostgreSQL, jobs)."""
        try:
            ns = os.readlink(f"/proc/{self.ns_pid}/ns/net")
        except OSError:
            return []
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != self.ns_pid:
                with contextlib.suppress(OSError):
                    if os.readlink(entry / "ns" / "net") == ns:
                        pids.append(int(entry.name))
        return pids

    def stop(self, remove: bool = True) -> None:
        """Kill every process in the namespace by PID (the daemons, PostgreSQL, jobs: the
        cluster is thrown away, so nothing needs a clean shutdown), then the namespace;
        remove the directory."""
        if self.ns_pid:
            for _round in range(20):
                pids = self._namespace_pids()
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.1)
        if self.holder is not None:
            if self.holder.poll() is None:
                self.holder.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.holder.wait(timeout=10)
            if self.holder.poll() is None:
                self.holder.kill()
                self.holder.wait()
            self.holder = None
        self.ns_pid = 0
        if remove and self.dir != Path():
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ clients

    def run(
        self, args: Sequence[str], check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run a PBS client command against this cluster; with ``check``, raise on rc != 0."""
        proc = subprocess.run(
            list(args),
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise PbsClusterError(
                f"{' '.join(args)} exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()}"
            )
        return proc

    def qmgr(self, command: str) -> str:
        """One ``qmgr -c`` directive (a fixed string of the tests, never user input)."""
        return self.run(["qmgr", "-c", command]).stdout

    def submit(self, *qsub_args: str, seconds: int = 3600) -> str:
        """Submit ``sleep seconds`` as root with these qsub options; the job id."""
        proc = self.run(
            ["qsub", "-j", "oe", "-o", "/dev/null", *qsub_args, "--", "/bin/sleep", str(seconds)]
        )
        return proc.stdout.strip()

    def job_ids(self) -> List[str]:
        proc = self.run(["qstat", "-f", "-F", "json"])
        return list(json.loads(proc.stdout).get("Jobs", {}))

    def reservation_ids(self) -> List[str]:
        proc = self.run(["pbs_rstat", "-B"])
        return [ln.split(":", 1)[1].strip() for ln in proc.stdout.splitlines() if ":" in ln]

    def reset(self, timeout: float = 60.0) -> None:
        """Back to an empty cluster: no jobs, no reservations, every vnode free."""
        deadline = time.monotonic() + timeout
        while True:
            jobs, resvs = self.job_ids(), self.reservation_ids()
            if not jobs and not resvs:
                break
            if jobs:
                self.run(["qdel", "-W", "force", *jobs], check=False)
            if resvs:
                self.run(["pbs_rdel", *resvs], check=False)
            if time.monotonic() > deadline:
                raise PbsClusterError(f"still there after qdel/pbs_rdel: {jobs + resvs}")
            time.sleep(0.3)
        self._wait_free()
