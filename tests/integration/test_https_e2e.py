"""End to end over real HTTPS against a running `siteagent serve`, on the replay backend and
on the real Slurm test cluster.

A buyer with an authorized Ed25519 key signs every request (RFC 9421) and trusts only the
agent's self-signed certificate. quote -> accept -> confirm ends in a doubly signed receipt
booked in the agent's ledger (within the embedded bank's default credit; without credit the
confirm is refused, 402, and nothing changes), which only the buyer's signed GET shows;
quote -> accept -> no confirm ends with the reservation expired and gone from the batch
system. The test reads the ledger from the state directory and the batch system through a
backend of its own, as another process would, while the agent runs.
"""

from __future__ import annotations

import base64
from decimal import Decimal
from pathlib import Path
from typing import Iterator

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from siteagent.ledger.bank import Ledger
from siteagent.protocol import documents
from siteagent.protocol.documents import Receipt
from testbed.inprocess.parties import Party
from testbed.processes.agents import (
    BUSY_JOBS,
    BatchSystem,
    Buyer,
    ReplayBatch,
    RunningAgent,
    SlurmBatch,
    run_agent,
)
from testbed.processes.programs import wait_until
from testbed.slurm.install import SlurmInstall

CONFIRM_TIMEOUT_S = 3
#: How long after its deadline an unconfirmed reservation may take to be gone: a few polls of
#: a busy two-core machine, each running several Slurm commands.
EXPIRY_SLACK_S = 20


@pytest.fixture(params=["replay", pytest.param("slurm", marks=pytest.mark.slurm)])
def batch(request: pytest.FixtureRequest, slurm_version: SlurmInstall) -> BatchSystem:
    """replay: the busy 64-core trace (BUSY_JOBS); slurm: the 64-core test cluster, emptied
    before and after (reservations are made for root)."""
    if request.param == "slurm":
        return SlurmBatch(request.getfixturevalue("slurm"))
    return ReplayBatch(BUSY_JOBS)


@pytest.fixture
def site(tmp_path: Path, batch: BatchSystem) -> Iterator[RunningAgent]:
    """A running agent with one authorized client, alice."""
    settings = {"reservations": {"confirm_timeout_s": CONFIRM_TIMEOUT_S}}
    yield from run_agent(tmp_path, batch, settings)


def site_key(buyer: Buyer) -> Ed25519PublicKey:
    status, info = buyer.request("GET", "/v1/info")
    assert status == 200 and info["public_key"]["alg"] == "ed25519"
    return Ed25519PublicKey.from_public_bytes(base64.b64decode(info["public_key"]["value"]))


def test_quote_accept_confirm_ends_in_the_ledger(site: RunningAgent) -> None:
    buyer = site.buyer
    reservation = buyer.reserve()
    deal = reservation["deal"]
    assert (deal["site"], deal["buyer"]) == ("hpc1", "alice@laptop")
    body = documents.confirm_body(deal, buyer.party.key, buyer.party.key_id)
    status, confirmed = buyer.request("POST", f"/v1/reservations/{reservation['id']}/confirm", body)
    assert status == 200, confirmed
    assert confirmed["state"] == "CONFIRMED"
    receipt = Receipt.from_json(confirmed["receipt"])
    assert receipt.deal == deal
    assert documents.signature_valid(deal, receipt.user_signature, buyer.party.key.public_key())
    assert documents.signature_valid(
        receipt.countersigned(), receipt.site_signature, site_key(buyer)
    )

    ledger = Ledger(site.state_dir / "ledger.sqlite3")  # the agent's own file, read while it runs
    try:
        price = Decimal(deal["price"])
        assert price > 0
        assert ledger.balance("alice@laptop") == -price
        assert ledger.balance("hpc1") == price
        assert ledger.receipt(receipt.id).to_json() == confirmed["receipt"]
    finally:
        ledger.close()
    status, shown = buyer.request("GET", f"/v1/reservations/{reservation['id']}", signed=True)
    assert status == 200 and shown["state"] == "CONFIRMED"
    assert shown["receipt"] == confirmed["receipt"]
    status, public = buyer.request("GET", f"/v1/reservations/{reservation['id']}")
    assert status == 200
    assert public == {key: shown[key] for key in ("id", "state", "start", "end", "size", "unit")}


@pytest.fixture
def no_credit(tmp_path: Path) -> Iterator[RunningAgent]:
    """An agent on the replay whose embedded bank grants its clients no credit."""
    settings = {"ledger": {"default_credit": "0.00"}}
    yield from run_agent(tmp_path, ReplayBatch(BUSY_JOBS), settings)


def test_a_confirm_the_buyer_cannot_pay_is_refused_and_changes_nothing(
    no_credit: RunningAgent,
) -> None:
    buyer = no_credit.buyer
    reservation = buyer.reserve()
    path = f"/v1/reservations/{reservation['id']}"
    body = documents.confirm_body(reservation["deal"], buyer.party.key, buyer.party.key_id)
    status, refused = buyer.request("POST", f"{path}/confirm", body)
    assert status == 402 and refused["error"]["code"] == "insufficient_funds", refused
    assert f"cannot pay {reservation['deal']['price']}" in refused["error"]["message"]
    status, shown = buyer.request("GET", path, signed=True)
    assert shown["state"] == "TENTATIVE" and shown["receipt"] is None
    ledger = Ledger(no_credit.state_dir / "ledger.sqlite3")
    try:
        assert ledger.balance("alice@laptop") == 0 and ledger.statement("alice@laptop") == []
    finally:
        ledger.close()


def test_an_unconfirmed_reservation_expires_and_leaves_the_batch_system(
    site: RunningAgent, batch: BatchSystem
) -> None:
    buyer = site.buyer
    reservation = buyer.reserve()
    name = f"sa-{reservation['id']}"
    cluster = batch.open_backend(site.state_dir)
    try:
        assert name in {r.name for r in cluster.list_reservations()}

        def gone() -> bool:
            status, shown = buyer.request("GET", f"/v1/reservations/{reservation['id']}")
            assert status == 200, shown
            held = {r.name for r in cluster.list_reservations()}
            return shown["state"] == "EXPIRED" and name not in held

        wait_until(
            "the reservation to expire and leave the batch system",
            gone,
            timeout=CONFIRM_TIMEOUT_S + EXPIRY_SLACK_S,
        )
    finally:
        cluster.close()
    body = documents.confirm_body(reservation["deal"], buyer.party.key, buyer.party.key_id)
    status, late = buyer.request("POST", f"/v1/reservations/{reservation['id']}/confirm", body)
    assert status == 409, late


def test_an_unknown_key_changes_nothing(site: RunningAgent) -> None:
    buyer = site.buyer
    stranger = Buyer(buyer.url, buyer.cert, Party("mallory@elsewhere"))
    status, refused = stranger.request("POST", "/v1/quotes", {"cores": 8, "walltime": 3600})
    assert status == 401 and refused["error"]["code"] == "unknown_key"
