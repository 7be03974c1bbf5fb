"""Start and stop the stand-in server for the tests, and run its commands.

``StandinServer`` writes a ``pbs.conf`` naming the server and its socket into a fresh
directory, starts ``python -m testbed.standins.pbs.server`` there (stopped again by its PID), and
gives the environment under which the commands in ``testbed/standins/pbs/bin`` reach it:
``PATH`` with that directory first and ``PBS_CONF_FILE``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from testbed.standins.pbs import protocol

REPO = Path(__file__).resolve().parents[3]
BIN = Path(__file__).resolve().parent / "bin"


class StandinError(RuntimeError):
    """The stand-in server did not come up."""


class StandinServer:
    """One stand-in PBS server (``pbs-head``) on ``nodes`` x ``cores``, replaying ``trace``."""

    def __init__(
        self,
        workdir: Path,
        trace: Optional[Path] = None,
        nodes: int = 8,
        cores: int = 16,
        offset_s: int = 2 * 86400,
        confirm_delay: float = 0.3,
        exclusive: bool = False,
        managers: Sequence[str] = ("root",),
        server: str = "pbs-head",
    ) -> None:
        self.workdir = Path(workdir)
        self.socket = self.workdir / "server.sock"
        self.conf = self.workdir / "pbs.conf"
        self.log = self.workdir / "server.log"
        self.server = server
        self.args = [
            "--socket",
            str(self.socket),
            "--nodes",
            str(nodes),
            "--cores",
            str(cores),
            "--offset",
            str(offset_s),
            "--server",
            server,
            "--confirm-delay",
            str(confirm_delay),
            "--managers",
            ",".join(managers),
        ]
        if trace is not None:
            self.args += ["--trace", str(trace)]
        if exclusive:
            self.args.append("--exclusive")
        self.proc: Optional[subprocess.Popen[bytes]] = None

    @property
    def env(self) -> Dict[str, str]:
        """Variables under which the stand-in's commands reach this server."""
        path = os.pathsep.join([str(BIN), os.path.dirname(sys.executable), os.environ["PATH"]])
        return {"PATH": path, "PBS_CONF_FILE": str(self.conf)}

    def start(self, timeout: float = 30.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.conf.write_text(f"PBS_SERVER={self.server}\nPBS_STANDIN_SOCKET={self.socket}\n")
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "testbed.standins.pbs.server", *self.args],
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.request({"op": "ping"})
                return
            except protocol.NoConnection:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise StandinError(
                        "stand-in server did not come up:\n" + self.log.read_text()[-2000:]
                    ) from None
                time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server by its PID (SIGTERM, then SIGKILL after 5 s)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): it accepts connections and answers nothing."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def request(self, payload: Dict[str, Any]) -> Dict[str, Any]:
        """Ask the server directly (``siminfo``, ``free``): what the simulator holds."""
        return protocol.request(payload, timeout=10, path=str(self.socket))

    def siminfo(self) -> Dict[str, Any]:
        return self.request({"op": "siminfo"})

    def run(
        self, args: List[str], env: Optional[Dict[str, str]] = None
    ) -> subprocess.CompletedProcess[str]:
        """Run one of the stand-in's commands (an argument list) against this server."""
        return subprocess.run(
            args,
            env={**os.environ, **self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


#: What the ``start_standin`` fixture gives a test: starts one more server with these options.
StartStandin = Callable[..., StandinServer]
