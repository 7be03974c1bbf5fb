"""A federation's bank: `siteagent ledger serve` as its own process over HTTPS, and an agent
(`siteagent serve`, replay backend) whose ledger.url names it.

quote -> accept -> confirm over HTTPS ends with the price moved between the buyer's and the
site's accounts in the separate ledger service. With the ledger stopped, a confirm still
confirms and keeps the receipt but answers 502; once the ledger is back, the same confirm
retried books it. A cancel books the refund less the penalty there. SIGHUP opens the accounts
of participants added to the file.
"""

from __future__ import annotations

import signal
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import yaml

from siteagent.protocol import documents, keys
from testbed.agents import BUSY_JOBS, SITEAGENT, Buyer
from testbed.parties import Party
from testbed.processes import free_port, stop, wait_until
from testbed.traces import write_trace


class Process:
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


class Federation:
    """The ledger service and one agent booking there; alice buys."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.alice = Party("alice@laptop")
        site_key = keys.load_or_create_site_key(tmp_path / "site.key")
        self.site_key = tmp_path / "site.key"
        alice_key = keys.public_key_text(self.alice.key.public_key())
        site_public = keys.public_key_text(site_key.public_key())
        self.participants = participants = tmp_path / "participants.yaml"
        participants.write_text(
            yaml.safe_dump(
                {
                    "sites": {"hpc1": {"public_key": site_public}},
                    "clients": {self.alice.key_id: {"public_key": alice_key, "user": "alice"}},
                }
            ),
            encoding="utf-8",
        )
        self.ledger_port = free_port()
        self.ledger_config = self._write(
            "ledger.yaml",
            {
                "state_dir": str(tmp_path / "bank"),
                "ledger": {"participants": str(participants), "port": self.ledger_port},
            },
        )
        self.bank = Buyer(
            f"https://127.0.0.1:{self.ledger_port}",
            tmp_path / "bank" / "tls" / "server.crt",
            self.alice,
        )
        self.ledger = self.start_ledger()
        clients = tmp_path / "authorized_clients.yaml"
        clients.write_text(
            yaml.safe_dump(
                {"clients": {self.alice.key_id: {"public_key": alice_key, "user": "alice"}}}
            ),
            encoding="utf-8",
        )
        port = free_port()
        agent_config = self._write(
            "siteagent.yaml",
            {
                "state_dir": str(tmp_path / "agent"),
                "site": {"name": "hpc1", "cores_per_node": 16},
                "backend": {
                    "type": "swf",
                    "swf": {"trace": write_trace(tmp_path / "t.swf", BUSY_JOBS, 64), "offset": 600},
                },
                "planner": {"poll_interval_s": 0.5},
                "security": {"authorized_clients": str(clients), "site_key": str(self.site_key)},
                "api": {"listen": "127.0.0.1", "port": port},
                "ledger": {"url": self.bank.url, "ca": str(self.bank.cert)},
            },
        )
        self.buyer = Buyer(
            f"https://127.0.0.1:{port}", tmp_path / "agent" / "tls" / "server.crt", self.alice
        )
        self.agent = Process(["serve", "--config", str(agent_config)], tmp_path / "agent.log")
        self.agent.wait_healthy("the agent", self.buyer)

    def _write(self, name: str, document: Dict[str, Any]) -> Path:
        path = self.tmp_path / name
        path.write_text(yaml.safe_dump(document), encoding="utf-8")
        return path

    def start_ledger(self) -> Process:
        process = Process(
            ["ledger", "serve", "--config", str(self.ledger_config)], self.tmp_path / "ledger.log"
        )
        process.wait_healthy("the ledger service", self.bank)
        return process

    def balance(self, account: str) -> Decimal:
        status, answer = self.bank.request("GET", f"/v1/accounts/{account}")
        assert status == 200, answer
        return Decimal(answer["balance"])

    def reserve_later(self) -> Dict[str, Any]:
        """A TENTATIVE reservation starting in two hours (one can cancel until it starts)."""
        status, quoted = self.buyer.request("POST", "/v1/quotes", {"cores": 8, "walltime": 3600})
        assert status == 200, quoted
        request = {"cores": 8, "walltime": 3600, "earliest_start": quoted["now"] + 7200}
        status, quoted = self.buyer.request("POST", "/v1/quotes", request)
        assert status == 200 and quoted["offers"], quoted
        offer = {"offer_id": quoted["offers"][0]["offer_id"]}
        status, reservation = self.buyer.request("POST", "/v1/reservations", offer)
        assert status == 201, reservation
        return reservation

    def confirm(self, reservation: Dict[str, Any]) -> Any:
        body = documents.confirm_body(reservation["deal"], self.alice.key, self.alice.key_id)
        return self.buyer.request("POST", f"/v1/reservations/{reservation['id']}/confirm", body)


@pytest.fixture
def federation(tmp_path: Path) -> Iterator[Federation]:
    made = Federation(tmp_path)
    try:
        yield made
    finally:
        made.agent.stop()
        if made.ledger.process.poll() is None:
            made.ledger.stop()


def test_a_confirmed_deal_moves_balances_in_the_ledger_service(federation: Federation) -> None:
    reservation = federation.buyer.reserve()
    status, confirmed = federation.confirm(reservation)
    assert status == 200, confirmed
    assert confirmed["state"] == "CONFIRMED"
    assert confirmed["ledger_transaction"]["receipt_id"] == confirmed["receipt"]["id"]
    price = Decimal(reservation["deal"]["price"])
    assert price > 0
    assert federation.balance("alice@laptop") == -price
    assert federation.balance("hpc1") == price
    assert not (federation.tmp_path / "agent" / "ledger.sqlite3").exists()  # nothing embedded
    status, statement = federation.bank.request("GET", "/v1/accounts/hpc1/statement")
    assert status == 200 and [line["kind"] for line in statement["lines"]] == ["deal"]


def test_a_receipt_outlives_a_ledger_outage_and_is_booked_when_it_is_back(
    federation: Federation,
) -> None:
    """The confirm answers 502 while the ledger is down; nobody retries, and the agent's loop
    books the receipt once the ledger answers again. A late retry books nothing twice."""
    reservation = federation.buyer.reserve()
    federation.ledger.stop()
    status, answer = federation.confirm(reservation)
    assert status == 502 and answer["error"]["code"] == "ledger_unavailable", answer
    status, shown = federation.buyer.request("GET", f"/v1/reservations/{reservation['id']}")
    assert shown["state"] == "CONFIRMED" and shown["receipt"] is not None  # kept by the agent

    federation.ledger = federation.start_ledger()
    price = Decimal(reservation["deal"]["price"])
    wait_until("the agent to book the owed receipt",
               lambda: federation.balance("alice@laptop") == -price)
    status, confirmed = federation.confirm(reservation)
    assert status == 200, confirmed
    assert confirmed["receipt"] == shown["receipt"]  # the receipt signed first is the one booked
    assert federation.balance("alice@laptop") == -price


def test_a_cancelled_deal_is_refunded_in_the_ledger_service(federation: Federation) -> None:
    later = federation.reserve_later()
    status, confirmed = federation.confirm(later)
    assert status == 200, confirmed
    status, cancelled = federation.buyer.request("DELETE", f"/v1/reservations/{later['id']}")
    assert status == 200 and cancelled["ledger_transaction"]["kind"] == "refund", cancelled
    penalty, price = Decimal(cancelled["penalty"]), Decimal(later["deal"]["price"])
    assert 0 <= penalty < price
    assert federation.balance("alice@laptop") == -penalty
    assert federation.balance("hpc1") == penalty
    status, statement = federation.bank.request("GET", "/v1/accounts/alice@laptop/statement")
    moves = [(line["kind"], Decimal(line["amount"])) for line in statement["lines"]]
    assert moves == [("deal", -price), ("refund", price - penalty)]


def test_sighup_opens_the_accounts_of_new_participants(federation: Federation) -> None:
    document = yaml.safe_load(federation.participants.read_text(encoding="utf-8"))
    joining = keys.public_key_text(Party("hpc2").key.public_key())
    document["sites"]["hpc2"] = {"public_key": joining}
    federation.participants.write_text(yaml.safe_dump(document), encoding="utf-8")
    assert federation.bank.request("GET", "/v1/accounts/hpc2")[0] == 404
    federation.ledger.process.send_signal(signal.SIGHUP)
    wait_until(
        "the new site's account",
        lambda: federation.bank.request("GET", "/v1/accounts/hpc2")[0] == 200,
    )
    assert federation.ledger.process.poll() is None
