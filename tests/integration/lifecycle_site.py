"""A site under test for the lifecycle's integration tests: how to start its agent and its
commands as real processes, and how to look at its batch system and store from the test.

The crash and concurrency tests only use what :class:`ReplaySite` offers, so running them on
another batch system is a matter of a fixture returning an object with the same attributes
(agent/command arguments for that backend, a Backend handle, the clock the manager uses).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable, List, Optional, Union

from siteagent.backends.base import Backend
from siteagent.backends.swf import SwfReplayBackend
from siteagent.reservations import ReservationManager
from siteagent.site import REPLAY_STATE_FILE, STORE_FILE
from siteagent.store import Store
from tests.system import free_port

REPO = Path(__file__).resolve().parents[2]

#: Beyond one poll interval, how long an agent's cycle may take to act (snapshot, plan,
#: housekeeping, each an fsync'ed write) on a busy two-core CI machine.
CYCLE_SLACK_S = 1.0


@dataclass
class ReplaySite:
    """A site on the SWF replay backend, its state in ``state_dir``.

    ``trace`` is replayed from ``offset_s`` at real-time speed. The agent polls every
    ``poll_interval`` seconds and tentative reservations wait ``confirm_timeout`` seconds.
    """

    state_dir: Path
    trace: str
    offset_s: int = 600
    poll_interval: float = 0.2
    confirm_timeout: float = 2.0
    prefix: str = "sa-"
    processes: List[subprocess.Popen[str]] = field(default_factory=list)
    _log: Optional[IO[str]] = None

    def __post_init__(self) -> None:
        # the first process creates the simulated cluster; every later one joins it
        SwfReplayBackend.open(self.state_file, self.trace, offset_s=self.offset_s).close()
        self._log = open(self.state_dir / "agent.log", "a", encoding="utf-8")  # noqa: SIM115

    @property
    def state_file(self) -> str:
        return str(self.state_dir / REPLAY_STATE_FILE)

    @property
    def grace_s(self) -> float:
        """How long a running agent may take to act on a deadline or a crash's leftovers."""
        return self.poll_interval + CYCLE_SLACK_S

    # ---- the site's own processes

    def lifecycle_args(self) -> List[str]:
        return [
            "--state-dir",
            str(self.state_dir),
            "--confirm-timeout",
            str(self.confirm_timeout),
            "--name-prefix",
            self.prefix,
        ]

    def argv(self, args: List[str], crash: Optional[str] = None) -> List[str]:
        launcher = [sys.executable, "-m", "tests.integration.crashrun"]
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
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.processes.append(process)
        return process

    # ---- looking at it from the test

    def open_backend(self) -> Backend:
        return SwfReplayBackend.open(self.state_file)

    def open_store(self) -> Store:
        return Store(str(self.state_dir / STORE_FILE))

    def clock(self, backend: Backend) -> Callable[[], float]:
        assert isinstance(backend, SwfReplayBackend)
        return backend.now

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
        if self._log is not None:
            self._log.close()
