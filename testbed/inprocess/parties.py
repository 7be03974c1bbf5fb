"""Use this when a security or ledger test needs parties, offers and signed receipts.

Parties, offers and signed receipts for the security and ledger tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Dict

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from siteagent.core.values import Offer, Request
from siteagent.market import deals
from siteagent.protocol import documents
from siteagent.protocol.documents import Receipt
from siteagent.security.clients import AuthorizedClient

NOW = 1_700_000_000


@dataclass
class Party:
    """A key id and its Ed25519 key pair."""

    key_id: str
    key: Ed25519PrivateKey = field(default_factory=Ed25519PrivateKey.generate)

    def client(self, user: str = "alice", account: str = "") -> AuthorizedClient:
        return AuthorizedClient(self.key_id, self.key.public_key(), user, account)


def offer(offer_id: str = "o-1", cores: int = 16, hours: int = 2) -> Offer:
    request = Request(
        cores=cores,
        duration=hours * 3600,
        deadline=NOW + 86400,
        max_price=Decimal("1.50"),
        architecture="x86_64",
    )
    return Offer(
        id=offer_id,
        request=request,
        start=NOW + 600,
        duration=hours * 3600,
        size=cores,
        unit_price=Decimal("1.25"),
        fee=Decimal("3.4"),
        expires=NOW + 120,
        site="hpc1",
    )


def deal(
    site: Party, buyer: Party, reservation_id: str = "r-1", penalty: str = "0.34", **kw: Any
) -> Dict[str, Any]:
    made = offer(**kw)
    return documents.deal_document(
        site.key_id, buyer.key_id, reservation_id, made, made.total, Decimal(penalty)
    )


def receipt(site: Party, buyer: Party, reservation_id: str = "r-1", **kw: Any) -> Receipt:
    """What an agent produces from a valid confirm."""
    document = deal(site, buyer, reservation_id, **kw)
    body = documents.confirm_body(document, buyer.key, buyer.key_id)
    return deals.countersign(body, document, buyer.client(), site.key, site.key_id, NOW + 60)
