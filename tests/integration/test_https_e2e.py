"""End to end over real HTTPS against a running `siteagent serve` on the replay backend.

A buyer with an authorized Ed25519 key signs every request (RFC 9421) and trusts only the
agent's self-signed certificate. quote -> accept -> confirm ends in a doubly signed receipt
booked in the agent's ledger; quote -> accept -> no confirm ends with the reservation expired
and gone from the (simulated) batch system. The test reads the ledger and the simulated
cluster from the state directory, as another process would, while the agent runs.
"""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from siteagent import security
from siteagent.backends.swf import SwfReplayBackend
from siteagent.ledger import Ledger
from siteagent.security import Receipt
from siteagent.site import REPLAY_STATE_FILE
from tests.lifecycle import write_trace
from tests.system import free_port, stop, wait_until
from tests.unit.deals import Party

SITEAGENT = Path(sys.executable).parent / "siteagent"
CONFIRM_TIMEOUT_S = 3
#: 64 cores, 48 busy for two hours and a 48-core job queued behind them (tests/api/harness).
JOBS = [(0, 7200, 32, 7200), (10, 7200, 16, 7200), (20, 3600, 48, 3600)]


class Buyer:
    """A client of the running agent: signs requests with its key, trusts the agent's cert."""

    def __init__(self, url: str, cert: Path, party: Party) -> None:
        self.url = url
        self.cert = cert
        self.party = party

    def request(
        self, method: str, path: str, payload: Optional[Dict[str, Any]] = None
    ) -> Tuple[int, Dict[str, Any]]:
        body = b"" if payload is None else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"}
        if method != "GET":
            headers.update(
                security.sign_request(
                    method, self.url + path, body, self.party.key, self.party.key_id
                )
            )
        request = urllib.request.Request(
            self.url + path, data=body or None, headers=headers, method=method
        )
        context = ssl.create_default_context(cafile=str(self.cert))
        try:
            with urllib.request.urlopen(request, context=context, timeout=10) as answer:
                return answer.status, json.load(answer)
        except urllib.error.HTTPError as refused:
            return refused.code, json.load(refused)

    def reserve(self) -> Dict[str, Any]:
        """Quote 8 cores for an hour and accept the first offer: a TENTATIVE reservation."""
        status, quoted = self.request("POST", "/v1/quotes", {"cores": 8, "walltime": 3600})
        assert status == 200 and quoted["offers"], quoted
        offer_id = quoted["offers"][0]["offer_id"]
        status, reservation = self.request("POST", "/v1/reservations", {"offer_id": offer_id})
        assert status == 201, reservation
        assert reservation["state"] == "TENTATIVE"
        return reservation


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Tuple[Buyer, Path, Party]]:
    """A running agent with one authorized client, alice; yields her, the state dir, and an
    unauthorized party."""
    state = tmp_path / "state"
    alice, mallory = Party("alice@laptop"), Party("mallory@elsewhere")
    clients = tmp_path / "authorized_clients.yaml"
    entry = {"public_key": security.public_key_text(alice.key.public_key()), "user": "alice"}
    clients.write_text(yaml.safe_dump({"clients": {alice.key_id: entry}}), encoding="utf-8")
    port = free_port()
    config = {
        "state_dir": str(state),
        "site": {"name": "hpc1", "cores_per_node": 16},
        "backend": {
            "type": "swf",
            "swf": {"trace": write_trace(tmp_path / "t.swf", JOBS, 64), "offset": 600},
        },
        "planner": {"poll_interval_s": 0.5},
        "reservations": {"confirm_timeout_s": CONFIRM_TIMEOUT_S},
        "security": {"authorized_clients": str(clients)},
        "api": {"listen": "127.0.0.1", "port": port},
    }
    config_file = tmp_path / "siteagent.yaml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    log = tmp_path / "agent.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(SITEAGENT), "serve", "--config", str(config_file)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    buyer = Buyer(f"https://127.0.0.1:{port}", state / "tls" / "server.crt", alice)

    def up() -> bool:
        if process.poll() is not None:
            pytest.fail(f"the agent exited:\n{log.read_text(errors='replace')}", pytrace=False)
        return buyer.cert.exists() and buyer.request("GET", "/healthz")[0] == 200

    try:
        wait_until("the agent's /healthz over HTTPS", up)
        yield buyer, state, mallory
    finally:
        assert stop(process) == 0, log.read_text(errors="replace")


def site_key(buyer: Buyer) -> Ed25519PublicKey:
    status, info = buyer.request("GET", "/v1/info")
    assert status == 200 and info["public_key"]["alg"] == "ed25519"
    return Ed25519PublicKey.from_public_bytes(base64.b64decode(info["public_key"]["value"]))


def test_quote_accept_confirm_ends_in_the_ledger(site: Tuple[Buyer, Path, Party]) -> None:
    buyer, state, _ = site
    reservation = buyer.reserve()
    deal = reservation["deal"]
    assert (deal["site"], deal["buyer"]) == ("hpc1", "alice@laptop")
    body = security.confirm_body(deal, buyer.party.key, buyer.party.key_id)
    status, confirmed = buyer.request("POST", f"/v1/reservations/{reservation['id']}/confirm", body)
    assert status == 200, confirmed
    assert confirmed["state"] == "CONFIRMED"
    receipt = Receipt.from_json(confirmed["receipt"])
    assert receipt.deal == deal
    assert security.signature_valid(deal, receipt.user_signature, buyer.party.key.public_key())
    assert security.signature_valid(
        receipt.countersigned(), receipt.site_signature, site_key(buyer)
    )

    ledger = Ledger(state / "ledger.sqlite3")  # the agent's own file, read while it runs
    try:
        price = Decimal(deal["price"])
        assert price > 0
        assert ledger.balance("alice@laptop") == -price
        assert ledger.balance("hpc1") == price
        assert ledger.receipt(receipt.id).to_json() == confirmed["receipt"]
    finally:
        ledger.close()
    status, shown = buyer.request("GET", f"/v1/reservations/{reservation['id']}")
    assert status == 200 and shown["state"] == "CONFIRMED"


def test_an_unconfirmed_reservation_expires_and_leaves_the_batch_system(
    site: Tuple[Buyer, Path, Party],
) -> None:
    buyer, state, _ = site
    reservation = buyer.reserve()
    name = f"sa-{reservation['id']}"
    cluster = SwfReplayBackend.open(str(state / REPLAY_STATE_FILE))
    try:
        assert name in {r.name for r in cluster.list_reservations()}

        def expired() -> bool:
            status, shown = buyer.request("GET", f"/v1/reservations/{reservation['id']}")
            return status == 200 and shown["state"] == "EXPIRED"

        wait_until("the reservation to expire", expired, timeout=CONFIRM_TIMEOUT_S + 10)
        assert name not in {r.name for r in cluster.list_reservations()}
    finally:
        cluster.close()
    body = security.confirm_body(reservation["deal"], buyer.party.key, buyer.party.key_id)
    status, late = buyer.request("POST", f"/v1/reservations/{reservation['id']}/confirm", body)
    assert status == 409, late


def test_an_unknown_key_changes_nothing(site: Tuple[Buyer, Path, Party]) -> None:
    buyer, _, mallory = site
    stranger = Buyer(buyer.url, buyer.cert, mallory)
    status, refused = stranger.request("POST", "/v1/quotes", {"cores": 8, "walltime": 3600})
    assert status == 401 and refused["error"]["code"] == "unknown_key"
