"""Use this when a test or benchmark needs several `siteagent ledger serve` on one database.

Several ``siteagent ledger serve`` processes on one database: a federation's bank as the
tests and ``bench ledger`` run it.

:class:`BankProcesses` writes what docs/ledger.md tells an administrator to write (a TLS
certificate made by ``siteagent keys --tls``, a participants file of sites and buyers with
credits, one bank configuration naming the database) and starts one process per port from that
one configuration (``--port``), as several hosts behind one name would run it. Agents reach
the processes through the agent's own client (:class:`~siteagent.ledger.client.RemoteLedger`);
:meth:`client` gives one per process, as a load balancer would spread them.

Every command is an argument list; ports are picked at run time.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import requests
import yaml

from siteagent.ledger.client import RemoteLedger
from siteagent.protocol import keys
from testbed.inprocess.parties import Party
from testbed.processes.ports import free_port

SITEAGENT = Path(sys.executable).parent / "siteagent"
#: Seconds a bank process may take to answer /healthz on a busy machine.
START_TIMEOUT_S = 90.0


class BankError(Exception):
    """A bank process did not start; the message holds its log."""


class BankProcesses:
    """``count`` bank processes in ``directory`` on ``database`` (a PostgreSQL URL, or None
    for the SQLite file in the state directory), for ``sites`` and ``buyers`` (each buyer with
    ``credit``)."""

    def __init__(
        self,
        directory: Path,
        database: Optional[str],
        sites: Sequence[Party],
        buyers: Sequence[Party],
        credit: Decimal,
        count: int = 1,
    ) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.cert = directory / "bank-tls" / "server.crt"
        subprocess.run(
            [str(SITEAGENT), "keys", str(directory / "bank-tls"), "--tls", "--host", "127.0.0.1"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        participants = {
            "sites": {
                site.key_id: {"public_key": keys.public_key_text(site.key.public_key())}
                for site in sites
            },
            "clients": {
                buyer.key_id: {
                    "public_key": keys.public_key_text(buyer.key.public_key()),
                    "credit": str(credit),
                }
                for buyer in buyers
            },
        }
        (directory / "participants.yaml").write_text(yaml.safe_dump(participants))
        ledger: Dict[str, object] = {"participants": "participants.yaml", "listen": "127.0.0.1"}
        if database is not None:
            ledger["database"] = database
        self.config = directory / "bank.yaml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "state_dir": "bank-state",
                    "api": {"tls": {"cert": "bank-tls/server.crt", "key": "bank-tls/server.key"}},
                    "ledger": ledger,
                }
            )
        )
        self.ports: List[int] = []
        self.processes: List[subprocess.Popen[bytes]] = []
        for _ in range(count):
            self.start_one()

    @property
    def urls(self) -> List[str]:
        return [f"https://127.0.0.1:{port}" for port in self.ports]

    def start_one(self, index: Optional[int] = None) -> None:
        """Start a process (again, on its old port, if ``index`` names one) and wait for it."""
        if index is None:
            self.ports.append(free_port())
            index = len(self.ports) - 1
        log = open(self.log(index), "ab")  # noqa: SIM115 (the process writes to it)
        process = subprocess.Popen(
            [
                str(SITEAGENT),
                "ledger",
                "serve",
                "--config",
                str(self.config),
                "--port",
                str(self.ports[index]),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        if index < len(self.processes):
            self.processes[index] = process
        else:
            self.processes.append(process)
        self.wait_healthy(index)

    def log(self, index: int) -> Path:
        return self.directory / f"bank-{index}.log"

    def wait_healthy(self, index: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.healthy(index):
            if self.processes[index].poll() is not None or time.monotonic() > deadline:
                raise BankError(
                    f"bank process {index} did not answer /healthz: "
                    + self.log(index).read_text(errors="replace")[-3000:]
                )
            time.sleep(0.2)

    def healthy(self, index: int) -> bool:
        try:
            answer = requests.get(self.urls[index] + "/healthz", verify=str(self.cert), timeout=5)
        except requests.RequestException:
            return False
        return answer.status_code == 200

    def client(self, index: int, site: Party, timeout: float = 10.0) -> RemoteLedger:
        """Site ``site``'s client of process ``index`` (the bank books only what a site
        signs)."""
        return RemoteLedger(
            self.urls[index], self.cert, timeout=timeout, signer=(site.key, site.key_id)
        )

    def kill(self, index: int) -> None:
        """SIGKILL: the process dies mid-booking, as a crashed host's would."""
        self.processes[index].send_signal(signal.SIGKILL)
        self.processes[index].wait()

    def stop(self) -> None:
        """SIGTERM to each process that runs (requests in flight finish first)."""
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
