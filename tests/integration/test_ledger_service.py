"""A federation's bank: `siteagent ledger serve` as its own process over HTTPS, and an agent
(`siteagent serve`, replay backend) whose ledger.url names it.

quote -> accept -> confirm over HTTPS ends with the price moved between the buyer's and the
site's accounts in the separate ledger service, within the buyer's credit of the participants
file: a buyer without credit is refused (402) and nothing changes, until SIGHUP re-reads a
credit for it. With the ledger stopped, a confirm is refused (503) and changes nothing; once
the ledger is back, the same confirm books and confirms. A cancel books the refund less the
penalty there (the agent's loop books it if the ledger was down). Accounts are read with
signed GETs, by their holder or a site only. SIGHUP opens the accounts of participants added
to the file.
"""

from __future__ import annotations

import signal
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import psutil
import pytest
import yaml

from siteagent.protocol import documents, keys
from testbed.inprocess import raw_http
from testbed.inprocess.parties import Party
from testbed.inprocess.traces import write_trace
from testbed.processes.agents import BUSY_JOBS, Buyer, Service
from testbed.processes.ports import free_port
from testbed.processes.programs import wait_until

MB = 1024 * 1024

#: What alice may owe the bank (the participants file); carol has no credit.
CREDIT = Decimal("500.00")


class Federation:
    """The ledger service and one agent booking there; alice buys on credit, carol has none."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.alice = Party("alice@laptop")
        self.carol = Party("carol@lab")
        site_key = keys.load_or_create_site_key(tmp_path / "site.key")
        self.site_key = tmp_path / "site.key"
        self.site = Party("hpc1", site_key)
        alice_key = keys.public_key_text(self.alice.key.public_key())
        carol_key = keys.public_key_text(self.carol.key.public_key())
        site_public = keys.public_key_text(site_key.public_key())
        self.participants = participants = tmp_path / "participants.yaml"
        participants.write_text(
            yaml.safe_dump(
                {
                    "sites": {"hpc1": {"public_key": site_public}},
                    "clients": {
                        self.alice.key_id: {
                            "public_key": alice_key,
                            "user": "alice",
                            "credit": str(CREDIT),
                        },
                        self.carol.key_id: {"public_key": carol_key, "user": "carol"},
                    },
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
                "api": {"request_timeout_s": 2},
            },
        )
        bank_url = f"https://127.0.0.1:{self.ledger_port}"
        bank_cert = tmp_path / "bank" / "tls" / "server.crt"
        self.bank = Buyer(bank_url, bank_cert, self.site)  # the site reads any account
        self.alice_at_bank = Buyer(bank_url, bank_cert, self.alice)
        self.ledger = self.start_ledger()
        clients = tmp_path / "authorized_clients.yaml"
        authorized = {
            self.alice.key_id: {"public_key": alice_key, "user": "alice"},
            self.carol.key_id: {"public_key": carol_key, "user": "alice"},
        }
        clients.write_text(yaml.safe_dump({"clients": authorized}), encoding="utf-8")
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
        agent_url = f"https://127.0.0.1:{port}"
        agent_cert = tmp_path / "agent" / "tls" / "server.crt"
        self.buyer = Buyer(agent_url, agent_cert, self.alice)
        self.carol_buyer = Buyer(agent_url, agent_cert, self.carol)
        self.agent = Service(["serve", "--config", str(agent_config)], tmp_path / "agent.log")
        self.agent.wait_healthy("the agent", self.buyer)

    def _write(self, name: str, document: Dict[str, Any]) -> Path:
        path = self.tmp_path / name
        path.write_text(yaml.safe_dump(document), encoding="utf-8")
        return path

    def start_ledger(self) -> Service:
        process = Service(
            ["ledger", "serve", "--config", str(self.ledger_config)], self.tmp_path / "ledger.log"
        )
        process.wait_healthy("the ledger service", self.bank)
        return process

    def balance(self, account: str) -> Decimal:
        """An account's balance, read by the site (a signed GET)."""
        status, answer = self.bank.request("GET", f"/v1/accounts/{account}", signed=True)
        assert status == 200, answer
        return Decimal(answer["balance"])

    def reserve_later(self, buyer: Optional[Buyer] = None) -> Dict[str, Any]:
        """A TENTATIVE reservation starting in two hours (one can cancel until it starts)."""
        buyer = buyer or self.buyer
        status, quoted = buyer.request("POST", "/v1/quotes", {"cores": 8, "walltime": 3600})
        assert status == 200, quoted
        request = {"cores": 8, "walltime": 3600, "earliest_start": quoted["now"] + 7200}
        status, quoted = buyer.request("POST", "/v1/quotes", request)
        assert status == 200 and quoted["offers"], quoted
        offer = {"offer_id": quoted["offers"][0]["offer_id"]}
        status, reservation = buyer.request("POST", "/v1/reservations", offer)
        assert status == 201, reservation
        return reservation

    def confirm(self, reservation: Dict[str, Any], buyer: Optional[Buyer] = None) -> Any:
        buyer = buyer or self.buyer
        key, key_id = buyer.party.key, buyer.party.key_id
        body = documents.confirm_body(reservation["deal"], key, key_id)
        return buyer.request("POST", f"/v1/reservations/{reservation['id']}/confirm", body)

    def shown(self, reservation: Dict[str, Any]) -> Dict[str, Any]:
        """The reservation as its buyer (alice) sees it: a signed GET."""
        path = f"/v1/reservations/{reservation['id']}"
        status, answer = self.buyer.request("GET", path, signed=True)
        assert status == 200, answer
        return answer


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
    status, statement = federation.bank.request("GET", "/v1/accounts/hpc1/statement", signed=True)
    assert status == 200 and [line["kind"] for line in statement["lines"]] == ["deal"]


def connections_to_ledger(federation: Federation) -> List[int]:
    """The local ports of the agent's open TCP connections to the ledger service."""
    agent = psutil.Process(federation.agent.process.pid)
    return sorted(
        c.laddr.port
        for c in agent.net_connections(kind="tcp")
        if c.raddr and c.raddr.port == federation.ledger_port and c.status == "ESTABLISHED"
    )


def test_the_agent_keeps_its_connection_to_the_ledger_between_bookings(
    federation: Federation,
) -> None:
    """A confirm waits for its booking: the second booking goes over the connection the first
    opened (no TLS handshake per confirm), and once the service restarts, a new one."""
    first = federation.buyer.reserve()
    assert federation.confirm(first)[0] == 200
    kept = connections_to_ledger(federation)
    assert len(kept) == 1, kept
    second = federation.buyer.reserve()
    assert federation.confirm(second)[0] == 200
    assert connections_to_ledger(federation) == kept
    federation.ledger.stop()
    federation.ledger = federation.start_ledger()
    third = federation.buyer.reserve()
    status, confirmed = federation.confirm(third)
    assert status == 200 and confirmed["state"] == "CONFIRMED", confirmed
    price = sum(Decimal(r["deal"]["price"]) for r in (first, second, third))
    assert federation.balance("alice@laptop") == -price


def test_a_confirm_while_the_ledger_is_down_changes_nothing_until_it_is_back(
    federation: Federation,
) -> None:
    """The bank books before the reservation moves: while it is down a confirm is refused
    (503, Retry-After) and the reservation stays tentative; once it is back, the same confirm
    books the price once and confirms."""
    reservation = federation.buyer.reserve()
    federation.ledger.stop()
    answer = federation.buyer.call(
        "POST",
        f"/v1/reservations/{reservation['id']}/confirm",
        documents.confirm_body(reservation["deal"], federation.alice.key, "alice@laptop"),
    )
    assert answer.status == 503 and answer.json()["error"]["code"] == "ledger_unavailable"
    assert int(answer.headers["retry-after"]) > 0
    shown = federation.shown(reservation)
    assert shown["state"] == "TENTATIVE" and shown["receipt"] is None

    federation.ledger = federation.start_ledger()
    assert federation.balance("alice@laptop") == 0  # the loop books no unconfirmed receipt
    status, confirmed = federation.confirm(reservation)
    assert status == 200 and confirmed["state"] == "CONFIRMED", confirmed
    price = Decimal(reservation["deal"]["price"])
    assert federation.balance("alice@laptop") == -price


def test_a_refund_outlives_a_ledger_outage_and_is_booked_when_it_is_back(
    federation: Federation,
) -> None:
    """A cancel while the ledger is down is done (the refund owed, 503 to say it is not
    booked yet); nobody retries, and the agent's loop books the refund once the ledger is
    back."""
    later = federation.reserve_later()
    status, confirmed = federation.confirm(later)
    assert status == 200, confirmed
    federation.ledger.stop()
    status, answer = federation.buyer.request("DELETE", f"/v1/reservations/{later['id']}")
    assert status == 503 and answer["error"]["code"] == "ledger_unavailable", answer
    shown = federation.shown(later)
    assert shown["state"] == "CANCELLED" and shown["cancellation"] is not None

    federation.ledger = federation.start_ledger()
    penalty = Decimal(shown["cancellation"]["penalty"])
    wait_until(
        "the agent to book the owed refund",
        lambda: federation.balance("alice@laptop") == -penalty,
    )


def test_a_buyer_without_credit_is_refused_until_the_bank_grants_it(
    federation: Federation,
) -> None:
    carol = federation.carol_buyer
    reservation = federation.reserve_later(carol)
    status, refused = federation.confirm(reservation, carol)
    assert status == 402 and refused["error"]["code"] == "insufficient_funds", refused
    price = reservation["deal"]["price"]
    assert f"cannot pay {price}" in refused["error"]["message"]
    assert "its credit 0.00" in refused["error"]["message"]
    path = f"/v1/reservations/{reservation['id']}"
    assert carol.request("GET", path, signed=True)[1]["state"] == "TENTATIVE"
    assert federation.balance("carol@lab") == 0

    document = yaml.safe_load(federation.participants.read_text(encoding="utf-8"))
    document["clients"]["carol@lab"]["credit"] = price
    federation.participants.write_text(yaml.safe_dump(document), encoding="utf-8")
    federation.ledger.process.send_signal(signal.SIGHUP)
    wait_until(
        "the bank to grant carol's credit",
        lambda: (
            federation.bank.request("GET", "/v1/accounts/carol@lab", signed=True)[1].get("credit")
            == price
        ),
    )
    status, confirmed = federation.confirm(reservation, carol)
    assert status == 200 and confirmed["state"] == "CONFIRMED", confirmed
    assert federation.balance("carol@lab") == -Decimal(price)


def test_accounts_are_read_by_their_holder_and_the_sites_only(federation: Federation) -> None:
    reservation = federation.buyer.reserve()
    status, confirmed = federation.confirm(reservation)
    assert status == 200, confirmed
    statement = "/v1/accounts/alice@laptop/statement"
    unsigned = federation.bank.call("GET", statement)
    assert unsigned.status == 401 and unsigned.json()["error"]["code"] == "unsigned"
    assert b"reservation" not in unsigned.body
    for reader in (federation.alice_at_bank, federation.bank):
        status, lines = reader.request("GET", statement, signed=True)
        assert status == 200, lines
        assert [line["receipt_id"] for line in lines["lines"]] == [confirmed["receipt"]["id"]]
    status, refused = federation.alice_at_bank.request("GET", "/v1/accounts/hpc1", signed=True)
    assert status == 403 and refused["error"]["code"] == "not_account_holder", refused
    status, own = federation.alice_at_bank.request("GET", "/v1/accounts/alice@laptop", signed=True)
    assert status == 200 and own["credit"] == str(CREDIT), own


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
    status, statement = federation.bank.request(
        "GET", "/v1/accounts/alice@laptop/statement", signed=True
    )
    moves = [(line["kind"], Decimal(line["amount"])) for line in statement["lines"]]
    assert moves == [("deal", -price), ("refund", price - penalty)]


def test_sighup_opens_the_accounts_of_new_participants(federation: Federation) -> None:
    document = yaml.safe_load(federation.participants.read_text(encoding="utf-8"))
    joining = keys.public_key_text(Party("hpc2").key.public_key())
    document["sites"]["hpc2"] = {"public_key": joining}
    federation.participants.write_text(yaml.safe_dump(document), encoding="utf-8")
    assert federation.bank.request("GET", "/v1/accounts/hpc2", signed=True)[0] == 404
    federation.ledger.process.send_signal(signal.SIGHUP)
    wait_until(
        "the new site's account",
        lambda: federation.bank.request("GET", "/v1/accounts/hpc2", signed=True)[0] == 200,
    )
    assert federation.ledger.process.poll() is None


def test_the_bank_refuses_oversized_and_unsigned_bookings_unread(federation: Federation) -> None:
    """What the agent's gate does, the bank does too: a 64 MB body sent chunked (announced by
    nothing) is 413 once it passes api.max_body_bytes, an unsigned booking 401 before its
    body is parsed, and the bank's memory stays where it was."""
    bank = federation.bank
    process = psutil.Process(federation.ledger.process.pid)
    idle_mb = process.memory_info().rss / MB
    head = b"POST /v1/receipts HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"1000\r\n" + b"[{}," * 1024 + b"\r\n"
    statuses = [
        raw_http.status_after_sending(bank.url, bank.cert, head, raw_http.repeated(chunk, 64 * MB))
        for _ in range(2)
    ]
    assert statuses == [413, 413]
    junk = b"POST /v1/refunds HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 9\r\n\r\n"
    assert raw_http.status_after_sending(bank.url, bank.cert, junk, iter([b"{not json"])) == 401
    assert process.memory_info().rss / MB <= idle_mb + 20
    with raw_http.connect(bank.url, bank.cert, timeout=30) as slow:  # a head never ended
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        assert slow.recv(1) == b""  # dropped once api.request_timeout_s (2 s) is up
    assert federation.confirm(federation.buyer.reserve())[0] == 200  # the agent signs its own
