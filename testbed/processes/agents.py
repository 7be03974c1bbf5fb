"""Use this when an end-to-end or outage test needs `siteagent serve` running over HTTPS.

A running `siteagent serve` over real HTTPS, for the end-to-end and outage tests: the
batch system it runs on, the buyer that talks to it, and the process itself.

A site under test differs only in its ``backend`` configuration, the scheduler user its
buyer's reservations are made for, and how the test opens its batch system to look at it:
:class:`ReplayBatch` (the SWF replay, a simulated cluster in the state directory) and
:class:`SlurmBatch` (the real Slurm test cluster, where root is the only user).
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import pytest
import yaml

from siteagent.backends.base import Backend
from siteagent.backends.replay import REPLAY_STATE_FILE, SwfReplayBackend
from siteagent.backends.slurm import SlurmBackend
from siteagent.protocol import keys, signing
from testbed.inprocess.parties import Party
from testbed.inprocess.traces import write_trace
from testbed.processes.ports import free_port
from testbed.processes.programs import stop, wait_until
from testbed.slurm.cluster import SlurmTestCluster

SITEAGENT = Path(sys.executable).parent / "siteagent"
#: A replayed 64-core cluster: 48 cores busy for two hours and a 48-core job queued behind
#: them (as in testbed/inprocess/api_harness.py), so that offers start now and fees can arise.
BUSY_JOBS = [(0, 7200, 32, 7200), (10, 7200, 16, 7200), (20, 3600, 48, 3600)]


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: status, headers (names in lower case), body."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Dict[str, Any]:
        document: Dict[str, Any] = json.loads(self.body)
        return document


class Buyer:
    """A client of the running agent: signs requests with its key, trusts the agent's cert."""

    def __init__(self, url: str, cert: Path, party: Party) -> None:
        self.url = url
        self.cert = cert
        self.party = party

    def call(
        self,
        method: str,
        path: str,
        payload: Optional[Dict[str, Any]] = None,
        signed: Optional[bool] = None,
    ) -> Answer:
        """Send one request, signed unless it is a GET (or as ``signed`` says), and return the
        answer, whatever it is."""
        body = b"" if payload is None else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"}
        if method != "GET" if signed is None else signed:
            headers.update(
                signing.sign_request(
                    method, self.url + path, body, self.party.key, self.party.key_id
                )
            )
        request = urllib.request.Request(
            self.url + path, data=body or None, headers=headers, method=method
        )
        context = ssl.create_default_context(cafile=str(self.cert))
        try:
            with urllib.request.urlopen(request, context=context, timeout=10) as answer:
                return Answer(answer.status, lower_keys(answer.headers), answer.read())
        except urllib.error.HTTPError as refused:
            return Answer(refused.code, lower_keys(refused.headers), refused.read())

    def request(
        self,
        method: str,
        path: str,
        payload: Optional[Dict[str, Any]] = None,
        signed: Optional[bool] = None,
    ) -> Tuple[int, Dict[str, Any]]:
        """A JSON request: its status and JSON body."""
        answer = self.call(method, path, payload, signed)
        return answer.status, answer.json()

    def reserve(self) -> Dict[str, Any]:
        """Quote 8 cores for an hour and accept the first offer: a TENTATIVE reservation."""
        status, quoted = self.request("POST", "/v1/quotes", {"cores": 8, "walltime": 3600})
        assert status == 200 and quoted["offers"], quoted
        offer_id = quoted["offers"][0]["offer_id"]
        status, reservation = self.request("POST", "/v1/reservations", {"offer_id": offer_id})
        assert status == 201, reservation
        assert reservation["state"] == "TENTATIVE"
        return reservation


class Service:
    """A `siteagent` command run in the background, its output in a log file."""

    def __init__(self, arguments: List[str], log: Path) -> None:
        self.arguments = arguments
        self.log = log
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                [str(SITEAGENT), *arguments], stdout=out, stderr=subprocess.STDOUT
            )

    def wait_healthy(self, what: str, client: Buyer) -> None:
        def up() -> bool:
            if self.process.poll() is not None:
                pytest.fail(f"{what} exited:\n{self.log.read_text(errors='replace')}")
            return client.cert.exists() and client.request("GET", "/healthz")[0] == 200

        wait_until(f"{what}'s /healthz over HTTPS", up)

    def stop(self) -> None:
        assert stop(self.process) == 0, self.log.read_text(errors="replace")


def lower_keys(headers: Message) -> Dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


class BatchSystem:
    """The batch system an agent under test runs on. ``user`` is the scheduler user its
    buyer maps to (reservations are made for that user)."""

    user = ""

    def backend_config(self, tmp_path: Path) -> Dict[str, Any]:
        """The ``backend`` section of the agent's configuration."""
        raise NotImplementedError

    def open_backend(self, state_dir: Path) -> Backend:
        """The batch system as the test sees it, beside the running agent."""
        raise NotImplementedError


@dataclass
class ReplayBatch(BatchSystem):
    """The SWF replay of ``jobs`` (submit, runtime, cores, walltime) on ``cores`` cores,
    from 600 s into the trace; the simulated cluster lives in the agent's state directory."""

    jobs: List[Tuple[int, int, int, int]]
    cores: int = 64
    user = "alice"

    def backend_config(self, tmp_path: Path) -> Dict[str, Any]:
        trace = write_trace(tmp_path / "t.swf", self.jobs, self.cores)
        return {"type": "swf", "swf": {"trace": trace, "offset": 600}}

    def open_backend(self, state_dir: Path) -> Backend:
        return SwfReplayBackend.open(str(state_dir / REPLAY_STATE_FILE))


class BundledReplay(BatchSystem):
    """The agent's embedded default: the bundled SDSC-SP2 slice (128 cores) replayed."""

    user = "alice"

    def backend_config(self, tmp_path: Path) -> Dict[str, Any]:
        return {"type": "swf"}

    def open_backend(self, state_dir: Path) -> Backend:
        return SwfReplayBackend.open(str(state_dir / REPLAY_STATE_FILE))


@dataclass
class SlurmBatch(BatchSystem):
    """The real Slurm test cluster, partition ``batch``; root is the only user it knows.
    ``timeout`` bounds each Slurm command the agent runs."""

    cluster: SlurmTestCluster
    timeout: float = 30.0
    user = "root"

    def backend_config(self, tmp_path: Path) -> Dict[str, Any]:
        options = {
            **self.cluster.backend_options(),
            "partition": "batch",
            "users": ["root"],
            "timeout": self.timeout,
        }
        return {"type": "slurm", "slurm": options}

    def open_backend(self, state_dir: Path) -> Backend:
        return SlurmBackend(self.cluster.slurm_config(partition="batch", users=("root",)))


@dataclass
class RunningAgent:
    """An agent process, its buyer (alice, authorized), its state directory and log."""

    buyer: Buyer
    state_dir: Path
    log: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None


def spawn_agent(
    config_file: Path, log: Path, env: Optional[Mapping[str, str]] = None
) -> subprocess.Popen[bytes]:
    """`siteagent serve --config config_file`, its output appended to ``log``; ``env`` is its
    whole environment (default: the test's)."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [str(SITEAGENT), "serve", "--config", str(config_file)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
        )


def run_agent(
    tmp_path: Path,
    batch: BatchSystem,
    settings: Optional[Dict[str, Any]] = None,
    env: Optional[Mapping[str, str]] = None,
) -> Iterator[RunningAgent]:
    """Start `siteagent serve` on ``batch`` (polling every 0.5 s), wait until its /healthz
    answers 200 over HTTPS, yield it, and stop it with SIGTERM (it must exit 0).

    ``settings`` adds or replaces top-level configuration sections (keys of its ``api`` are
    added to the listen address and port); ``env`` is the agent process's whole environment
    (default: the test's).
    """
    state = tmp_path / "state"
    alice = Party("alice@laptop")
    clients = tmp_path / "authorized_clients.yaml"
    entry = {"public_key": keys.public_key_text(alice.key.public_key()), "user": batch.user}
    clients.write_text(yaml.safe_dump({"clients": {alice.key_id: entry}}), encoding="utf-8")
    port = free_port()
    config = {
        "state_dir": str(state),
        "site": {"name": "hpc1", "cores_per_node": 16},
        "backend": batch.backend_config(tmp_path),
        "planner": {"poll_interval_s": 0.5},
        "security": {"authorized_clients": str(clients)},
        **(settings or {}),
        "api": {"listen": "127.0.0.1", "port": port, **(settings or {}).get("api", {})},
    }
    config_file = tmp_path / "siteagent.yaml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    log = tmp_path / "agent.log"
    process = spawn_agent(config_file, log, env)
    buyer = Buyer(f"https://127.0.0.1:{port}", state / "tls" / "server.crt", alice)
    agent = RunningAgent(buyer, state, log, process)

    def up() -> bool:
        if not agent.alive():
            pytest.fail(f"the agent exited:\n{agent.log_text()}", pytrace=False)
        return buyer.cert.exists() and buyer.call("GET", "/healthz").status == 200

    try:
        wait_until("the agent's /healthz over HTTPS", up)
        yield agent
    finally:
        assert stop(agent.process) == 0, agent.log_text()  # a test may have restarted it
