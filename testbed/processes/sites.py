"""Use this when a lifecycle integration test needs a site whose agent runs as a process.

A site under test for the lifecycle's integration tests: how to start its agent and its
commands as real processes, and how to look at its batch system and store from the test.

The crash and concurrency tests only use what :class:`LifecycleSite` offers, and run on the
SWF replay (:class:`ReplaySite`), on the real Slurm test cluster (:class:`SlurmSite`) and on
the real OpenPBS (:class:`PbsSite`): a site differs only in the options (and environment) that
point a command at its batch system and in how the test opens that batch system itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Callable, Dict, List, Optional, Tuple, Union

import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from siteagent.backends.base import Backend
from siteagent.backends.pbs import PbsBackend, PbsConfig
from siteagent.backends.replay import REPLAY_STATE_FILE, SwfReplayBackend
from siteagent.backends.slurm import SlurmBackend
from siteagent.core.values import CapacityUnit
from siteagent.market.reservations import ReservationManager
from siteagent.market.site import STORE_FILE
from siteagent.market.store import Store
from siteagent.protocol.keys import private_key_pem, public_key_text, write_private
from testbed.pbs.cluster import PbsTestCluster
from testbed.processes.ports import free_port
from testbed.slurm.cluster import SlurmTestCluster

REPO = Path(__file__).resolve().parents[2]

#: Beyond one poll interval, how long an agent's cycle may take to act (snapshot, plan,
#: housekeeping, each an fsync'ed write) on a busy two-core CI machine.
CYCLE_SLACK_S = 1.0


class LifecycleSite:
    """What the crash and concurrency tests run against: a batch system, the agent's state in
    ``state_dir``, and the agent and its commands as real processes.

    The agent polls every ``poll_interval`` seconds and tentative reservations wait
    ``confirm_timeout`` seconds. Subclasses say how to reach their batch system.
    """

    def __init__(
        self,
        state_dir: Path,
        poll_interval: float = 0.2,
        confirm_timeout: float = 2.0,
        prefix: str = "sa-",
    ) -> None:
        self.state_dir = state_dir
        self.poll_interval = poll_interval
        self.confirm_timeout = confirm_timeout
        self.prefix = prefix
        self.processes: List[subprocess.Popen[str]] = []
        #: variables the site's processes need besides the test's (e.g. PATH)
        self.env: Dict[str, str] = {}
        self._log: IO[str] = open(self.state_dir / "agent.log", "a", encoding="utf-8")  # noqa: SIM115
        self.buyer, self.buyer_key = authorize_buyer(state_dir, "tester@ci")

    def backend_args(self) -> List[str]:
        """Options that point a command at this site's batch system."""
        raise NotImplementedError

    def open_backend(self) -> Backend:
        raise NotImplementedError

    def clock(self, backend: Backend) -> Callable[[], float]:
        """The clock the manager and the promises use: the batch system's."""
        return lambda: float(backend.now())

    @property
    def grace_s(self) -> float:
        """How long a running agent may take to act on a deadline or a crash's leftovers."""
        return self.poll_interval + CYCLE_SLACK_S

    # ---- the site's own processes

    def lifecycle_args(self) -> List[str]:
        return [
            *self.backend_args(),
            "--state-dir",
            str(self.state_dir),
            "--confirm-timeout",
            str(self.confirm_timeout),
            "--name-prefix",
            self.prefix,
        ]

    def buyer_args(self, signs: bool = False) -> List[str]:
        """Who a command acts for: the site's authorized buyer (and its key, to sign a
        confirm)."""
        key = ["--signing-key", str(self.buyer_key)] if signs else []
        return ["--client", self.buyer, *key]

    def argv(self, args: List[str], crash: Optional[str] = None) -> List[str]:
        launcher = [sys.executable, "-m", "testbed.processes.crashrun"]
        return launcher + (["--crash", crash] if crash else []) + ["--", *args]

    def start_agent(self, crash: Optional[str] = None) -> subprocess.Popen[str]:
        """``siteagent serve`` on this site, logging to ``state_dir/agent.log``; its API on a
        free port, so that agents of several sites (and other tests) never collide."""
        args = ["serve", "--poll-interval", str(self.poll_interval), "--port", str(free_port())]
        args += self.lifecycle_args()
        return self._spawn(self.argv(args, crash), stdout=self._log)

    def spawn(self, args: List[str], crash: Optional[str] = None) -> subprocess.Popen[str]:
        """An admin command (``reservations accept ...``), its output piped."""
        return self._spawn(self.argv(args, crash), stdout=subprocess.PIPE)

    def run(self, args: List[str], crash: Optional[str] = None) -> subprocess.CompletedProcess[str]:
        process = self.spawn(args, crash)
        out, err = process.communicate(timeout=60)
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)

    def _spawn(self, argv: List[str], stdout: Union[int, IO[str], None]) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            argv,
            cwd=REPO,
            stdout=stdout,
            stderr=subprocess.STDOUT if stdout is self._log else subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
        )
        self.processes.append(process)
        return process

    # ---- looking at it from the test

    def open_store(self) -> Store:
        return Store(str(self.state_dir / STORE_FILE))

    def manager(self, store: Store, backend: Backend) -> ReservationManager:
        return ReservationManager(
            store,
            backend,
            clock=self.clock(backend),
            confirm_timeout=self.confirm_timeout,
            name_prefix=self.prefix,
        )

    def agent_log(self, offset: int = 0) -> str:
        """The agent's log (from byte ``offset``): every agent started on this site."""
        with open(self.state_dir / "agent.log", encoding="utf-8") as handle:
            handle.seek(offset)
            return handle.read()

    def agent_log_size(self) -> int:
        return (self.state_dir / "agent.log").stat().st_size

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        self._log.close()


def authorize_buyer(state_dir: Path, key_id: str) -> Tuple[str, Path]:
    """A buyer's key pair, admitted in the site's authorized-clients file (its default place
    in the state directory) for the scheduler user root, the one every test cluster knows."""
    key = Ed25519PrivateKey.generate()
    key_file = state_dir / "buyer.key"
    write_private(key_file, private_key_pem(key), overwrite=True)
    entry = {"public_key": public_key_text(key.public_key()), "user": "root"}
    clients = yaml.safe_dump({"clients": {key_id: entry}})
    (state_dir / "authorized_clients.yaml").write_text(clients, encoding="utf-8")
    return key_id, key_file


class ReplaySite(LifecycleSite):
    """A site on the SWF replay backend: ``trace`` replayed from ``offset_s`` in real time."""

    def __init__(self, state_dir: Path, trace: str, offset_s: int = 600) -> None:
        super().__init__(state_dir)
        self.trace = trace
        # the first process creates the simulated cluster; every later one joins it
        SwfReplayBackend.open(self.state_file, trace, offset_s=offset_s).close()

    @property
    def state_file(self) -> str:
        return str(self.state_dir / REPLAY_STATE_FILE)

    def backend_args(self) -> List[str]:
        return []

    def open_backend(self) -> Backend:
        return SwfReplayBackend.open(self.state_file)


class SlurmSite(LifecycleSite):
    """A site on the real Slurm test cluster (partition ``batch``), configured by a file as an
    administrator would: reservations are made for root, the only user the cluster knows.

    Slurm's clients take a few milliseconds each and a cycle runs several, so the agent polls
    less often than on the replay. ``unit`` is what reservations count: cores, or whole nodes
    as on a node-exclusive partition.
    """

    def __init__(
        self, state_dir: Path, cluster: SlurmTestCluster, unit: CapacityUnit = CapacityUnit.CORE
    ) -> None:
        super().__init__(state_dir, poll_interval=0.5, confirm_timeout=3.0)
        self.cluster = cluster
        self.unit = unit
        self.config_file = state_dir / "siteagent.yaml"
        self.config_file.write_text(
            json.dumps(
                {
                    "backend": {
                        "type": "slurm",
                        "slurm": {
                            **cluster.backend_options(),
                            "partition": "batch",
                            "unit": unit.value,
                            "users": ["root"],
                        },
                    }
                }
            )
        )

    def backend_args(self) -> List[str]:
        return ["--config", str(self.config_file)]

    def open_backend(self) -> Backend:
        return SlurmBackend(
            self.cluster.slurm_config(
                partition="batch",
                unit=self.unit,
                users=("root",),
                name_prefix=self.prefix,
            )
        )


class PbsSite(LifecycleSite):
    """A site on the real OpenPBS test cluster (queue ``workq``), configured by a file as an
    administrator would; its commands reach the cluster's namespace through the wrappers on
    ``PATH`` (testbed/pbs/cluster.py). ``unit``: cores, or whole vnodes."""

    def __init__(
        self, state_dir: Path, cluster: PbsTestCluster, unit: CapacityUnit = CapacityUnit.CORE
    ) -> None:
        super().__init__(state_dir, poll_interval=0.5, confirm_timeout=3.0)
        self.cluster = cluster
        self.unit = unit
        self.env = {"PATH": cluster.env["PATH"]}
        self.config_file = state_dir / "siteagent.yaml"
        pbs = {"pbs_conf": str(cluster.conf), "queue": "workq", "unit": unit.value}
        self.config_file.write_text(json.dumps({"backend": {"type": "pbs", "pbs": pbs}}))

    def backend_args(self) -> List[str]:
        return ["--config", str(self.config_file)]

    def open_backend(self) -> Backend:
        return PbsBackend(
            PbsConfig(
                pbs_conf=str(self.cluster.conf),
                env=self.env,
                queue="workq",
                unit=self.unit,
                users=("root",),
                name_prefix=self.prefix,
            )
        )
