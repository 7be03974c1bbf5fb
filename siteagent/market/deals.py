"""Deals: a confirm checked against the site's own records and countersigned into a receipt.
"""

from __future__ import annotations

from typing import Any, Mapping

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from siteagent.protocol.documents import (
    Receipt,
    Signed,
    countersigned_document,
    sign_document,
    signature_valid,
)
from siteagent.security.clients import AuthorizedClient
from siteagent.security.errors import ConfirmRefused


def accept_confirm(
    body: Any,
    expected: Mapping[str, Any],
    client: AuthorizedClient,
    site_key: Ed25519PrivateKey,
    site_id: str,
    now: int,
) -> Receipt:
    """The agent's side of a confirm: check the buyer signed exactly ``expected`` (the deal
    built from the agent's own records), then countersign it into a receipt.

    ``client`` is the authenticated sender; the deal must be signed with that same key, so a
    confirm cannot carry someone else's signature.
    """
    if not isinstance(body, Mapping) or not isinstance(body.get("deal"), Mapping):
        raise ConfirmRefused("malformed_confirm", 'a confirm is {"deal": ..., "signature": ...}')
    try:
        signature = Signed.from_json(body.get("signature"))
    except ValueError as exc:
        raise ConfirmRefused("malformed_confirm", str(exc)) from None
    if signature.key_id != client.key_id:
        raise ConfirmRefused(
            "confirm_key_mismatch",
            f"the deal is signed by {signature.key_id!r} but the request by {client.key_id!r}",
        )
    differing = sorted(
        key
        for key in set(expected) | set(body["deal"])
        if expected.get(key) != body["deal"].get(key)
    )
    if differing:
        raise ConfirmRefused(
            "deal_mismatch",
            "the signed deal differs from this reservation in: " + ", ".join(differing),
        )
    if not signature_valid(expected, signature, client.public_key):
        raise ConfirmRefused("bad_confirm_signature", "the deal's signature does not verify")
    document = countersigned_document(expected, signature, now)
    return Receipt(expected, signature, now, sign_document(document, site_key, site_id))
