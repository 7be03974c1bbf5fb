"""The signed documents of a deal: what a buyer and a site sign, byte for byte.

A confirm carries the buyer's Ed25519 signature over the RFC 8785 (JCS) canonical JSON of the
**deal** (request, offer, reservation id, price, cancellation penalty); the site countersigns
it into a **receipt**, whose id is the SHA-256 of the canonical deal; a cancellation of a
confirmed deal is the site's signed **refund** (receipt id, penalty, time). The bank books
receipts and refunds after checking both signatures. These functions are the one definition of
those documents, shared by the agent, the ledger and the client.
"""

from __future__ import annotations

import base64
import hashlib
import math
from dataclasses import dataclass, fields
from decimal import Decimal
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from siteagent.core.errors import SiteagentError
from siteagent.core.money import CENT, BadMoney, written_amount
from siteagent.core.values import Offer, Request
from siteagent.protocol import httpsig
from siteagent.protocol.errors import INVALID_REQUEST
from siteagent.protocol.keys import check_key_id

#: The fields of a request, the names its document uses.
_REQUEST_FIELDS = frozenset(item.name for item in fields(Request))


class MalformedDocument(SiteagentError, ValueError):
    """A document that is not one of these; ``field`` names the part at fault, if one does
    (a ValueError too: callers that parse numbers catch both at once)."""

    code = INVALID_REQUEST


def canonical_json(document: Any) -> bytes:
    """RFC 8785 (JCS) bytes of a JSON document: what both sides sign and verify."""
    return rfc8785.dumps(document)


def money_text(amount: Decimal) -> str:
    """An amount the ledger books: whole cents, written with two decimals ("12.30")."""
    if not amount.is_finite() or amount != amount.quantize(CENT):
        raise ValueError(f"{amount} is not a whole number of cents")
    return str(amount.quantize(CENT))


def decimal_text(value: Decimal) -> str:
    """A quoted figure (rate, fee) exactly, without exponent or trailing zeros ("0.0125")."""
    if not value.is_finite():
        raise ValueError(f"{value} is not a finite amount")
    return format(value.normalize(), "f")


def request_document(request: Request) -> Dict[str, Any]:
    """A request for quotes as JSON (:class:`~siteagent.protocol.models.RequestDocument`):
    absent (None) fields are left out ("don't care"), money written exactly."""
    document: Dict[str, Any] = {}
    for key, value in vars(request).items():
        if value is not None:
            document[key] = decimal_text(value) if isinstance(value, Decimal) else value
    return document


#: The request's fields that are money: decimal strings in JSON, Decimal in the core.
_REQUEST_MONEY = ("max_price", "best_price")


def request_from_document(data: Mapping[str, Any]) -> Request:
    """The request a :func:`request_document` (or a key of None, as stores of before wrote it)
    stands for; keys the core does not know are ignored."""
    known = {key: value for key, value in data.items() if key in _REQUEST_FIELDS}
    for key in _REQUEST_MONEY:
        if known.get(key) is not None:
            known[key] = Decimal(known[key])
    return Request(**known)


def offer_document(offer: Offer) -> Dict[str, Any]:
    """An offer as JSON, without its request (which the deal carries once)."""
    return {
        "id": offer.id,
        "site": offer.site,
        "start": offer.start,
        "duration": offer.duration,
        "size": offer.size,
        "unit_price": decimal_text(offer.unit_price),
        "fee": decimal_text(offer.fee),
        "expires": offer.expires,
    }


def deal_document(
    site: str,
    buyer: str,
    reservation_id: str,
    offer: Offer,
    price: Decimal,
    cancellation_penalty: Decimal,
) -> Dict[str, Any]:
    """What a buyer signs to confirm: the request, the offer, the reservation and the price.

    ``site`` and ``buyer`` (key ids) bind the parties, so a receipt cannot be booked to other
    accounts; ``cancellation_penalty`` is what a later cancellation may keep, agreed now.
    """
    return {
        "version": 1,
        "site": site,
        "buyer": buyer,
        "reservation_id": reservation_id,
        "request": request_document(offer.request),
        "offer": offer_document(offer),
        "price": money_text(price),
        "cancellation_penalty": money_text(cancellation_penalty),
    }


def deal_id(deal: Mapping[str, Any]) -> str:
    """A deal's identity: SHA-256 of its canonical JSON (the same deal, the same id)."""
    return hashlib.sha256(canonical_json(deal)).hexdigest()


@dataclass(frozen=True)
class Signed:
    """A detached Ed25519 signature and the key id that made it."""

    key_id: str
    value: bytes

    def to_json(self) -> Dict[str, str]:
        return {
            "keyid": self.key_id,
            "alg": httpsig.ALGORITHM,
            "value": base64.b64encode(self.value).decode("ascii"),
        }

    @classmethod
    def from_json(cls, data: Any) -> Signed:
        if not isinstance(data, Mapping) or data.get("alg", httpsig.ALGORITHM) != "ed25519":
            raise ValueError('a signature is {"keyid": ..., "alg": "ed25519", "value": base64}')
        try:
            value = base64.b64decode(str(data["value"]), validate=True)
            return cls(check_key_id(str(data["keyid"])), value)
        except (KeyError, ValueError) as exc:
            raise ValueError(f"malformed signature: {exc}") from None


def sign_document(document: Any, key: Ed25519PrivateKey, key_id: str) -> Signed:
    return Signed(key_id, key.sign(canonical_json(document)))


def signature_valid(document: Any, signature: Signed, key: Ed25519PublicKey) -> bool:
    try:
        key.verify(signature.value, canonical_json(document))
    except InvalidSignature:
        return False
    return True


def batch_document(receipt_ids: Sequence[str]) -> Dict[str, Any]:
    """What a buyer signs to confirm several deals at once (docs/batches.md): the receipt id
    of each, in order."""
    return {"receipt_ids": list(receipt_ids)}


@dataclass(frozen=True)
class Receipt:
    """A confirmed deal, signed by its buyer and countersigned by the site (the paper's signed
    RFQ + reservation id, which the bank books). The site's signature covers the buyer's and
    the confirmation time, so neither can be swapped afterwards.

    A deal confirmed in a batch (docs/batches.md) carries ``receipt_ids``, the list the buyer
    signed (its own id among them): ``user_signature`` is over that list, not the deal alone.
    """

    deal: Mapping[str, Any]
    user_signature: Signed
    confirmed_at: int
    site_signature: Signed
    receipt_ids: Optional[Tuple[str, ...]] = None

    @property
    def id(self) -> str:
        return deal_id(self.deal)

    def user_signed(self) -> Dict[str, Any]:
        """The document the buyer signed: the deal, or the batch it was confirmed in."""
        if self.receipt_ids is None:
            return dict(self.deal)
        return batch_document(self.receipt_ids)

    def signed_by_user(self, key: Ed25519PublicKey) -> bool:
        """Whether the buyer's signature verifies, and covers this deal."""
        if self.receipt_ids is not None and self.id not in self.receipt_ids:
            return False
        return signature_valid(self.user_signed(), self.user_signature, key)

    def countersigned(self) -> Dict[str, Any]:
        """The document the site signs."""
        return countersigned_document(
            self.deal, self.user_signature, self.confirmed_at, self.receipt_ids
        )

    def to_json(self) -> Dict[str, Any]:
        document = {
            "id": self.id,
            "deal": dict(self.deal),
            "user_signature": self.user_signature.to_json(),
            "confirmed_at": self.confirmed_at,
            "site_signature": self.site_signature.to_json(),
        }
        if self.receipt_ids is not None:
            document["receipt_ids"] = list(self.receipt_ids)
        return document

    @classmethod
    def from_json(cls, data: Any) -> Receipt:
        """Parse a receipt; MalformedDocument (a ValueError) names the field at fault (the id
        is derived)."""
        if not isinstance(data, Mapping):
            raise MalformedDocument("a receipt is a JSON object with a deal")
        if not isinstance(data.get("deal"), Mapping):
            raise MalformedDocument("a receipt's deal is a JSON object", field="deal")
        confirmed_at = data.get("confirmed_at")
        if not isinstance(confirmed_at, int) or isinstance(confirmed_at, bool):
            raise MalformedDocument(
                "a receipt needs confirmed_at (epoch seconds)", field="confirmed_at"
            )
        bad = not_a_json_number(data["deal"], "deal")
        if bad is not None:
            raise MalformedDocument(f"{bad}: not a number JSON can write", field=bad)
        ids = data.get("receipt_ids")
        if ids is not None and (
            not isinstance(ids, list)
            or not ids
            or not all(isinstance(one, str) and len(one) == 64 for one in ids)
        ):
            raise MalformedDocument(
                "receipt_ids must be a list of receipt ids (64 hex digits)", field="receipt_ids"
            )
        return cls(
            deal=dict(data["deal"]),
            user_signature=signature_at(data, "user_signature"),
            confirmed_at=confirmed_at,
            site_signature=signature_at(data, "site_signature"),
            receipt_ids=None if ids is None else tuple(ids),
        )


def signature_at(data: Mapping[str, Any], field: str) -> Signed:
    """The signature in ``data[field]``; MalformedDocument naming the field otherwise."""
    try:
        return Signed.from_json(data.get(field))
    except ValueError as exc:
        raise MalformedDocument(f"{field}: {exc}", field=field) from None


def not_a_json_number(document: Any, where: str) -> Optional[str]:
    """The path of the first number in ``document`` that JSON cannot write (infinite, not a
    number: what ``1e999999`` or ``NaN`` parse to), None if there is none; walked without
    recursion."""
    stack = [(document, where)]
    while stack:
        value, path = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return path
        if isinstance(value, Mapping):
            stack.extend((item, f"{path}.{key}") for key, item in value.items())
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{index}]") for index, item in enumerate(value))
    return None


def countersigned_document(
    deal: Mapping[str, Any],
    user_signature: Signed,
    confirmed_at: int,
    receipt_ids: Optional[Sequence[str]] = None,
) -> Dict[str, Any]:
    document = {
        "deal": dict(deal),
        "user_signature": user_signature.to_json(),
        "confirmed_at": confirmed_at,
    }
    if receipt_ids is not None:
        document["receipt_ids"] = list(receipt_ids)
    return document


def confirm_body(deal: Mapping[str, Any], key: Ed25519PrivateKey, key_id: str) -> Dict[str, Any]:
    """The body of a confirm, as a client sends it: the deal and the buyer's signature."""
    return {"deal": dict(deal), "signature": sign_document(deal, key, key_id).to_json()}


def batch_confirm_body(
    deals: Sequence[Mapping[str, Any]], key: Ed25519PrivateKey, key_id: str
) -> Dict[str, Any]:
    """The body of a batch confirm (docs/batches.md): each deal's reservation and receipt
    id, and the buyer's one signature over the receipt ids."""
    ids: List[str] = [deal_id(deal) for deal in deals]
    parts = [
        {"reservation_id": str(deal["reservation_id"]), "receipt_id": receipt_id}
        for deal, receipt_id in zip(deals, ids)
    ]
    return {"parts": parts, "signature": sign_document(batch_document(ids), key, key_id).to_json()}


@dataclass(frozen=True)
class Cancellation:
    """The site's signed word that a confirmed deal was cancelled and what it keeps."""

    receipt_id: str
    penalty: Decimal
    cancelled_at: int
    site_signature: Signed

    def signed_document(self) -> Dict[str, Any]:
        return cancellation_document(self.receipt_id, self.penalty, self.cancelled_at)

    def to_json(self) -> Dict[str, Any]:
        return {**self.signed_document(), "site_signature": self.site_signature.to_json()}

    @classmethod
    def from_json(cls, data: Any) -> Cancellation:
        """Parse a cancellation; MalformedDocument (a ValueError) names the field at fault."""
        if not isinstance(data, Mapping):
            raise MalformedDocument("a cancellation is a JSON object")
        missing = [key for key in ("receipt_id", "penalty", "cancelled_at") if key not in data]
        if missing:
            raise MalformedDocument(f"the cancellation has no {missing[0]}", field=missing[0])
        try:
            penalty = written_amount(data["penalty"])
        except BadMoney as exc:
            raise MalformedDocument(f"penalty: {exc}", field="penalty") from None
        cancelled_at = data["cancelled_at"]
        if not isinstance(cancelled_at, int) or isinstance(cancelled_at, bool):
            raise MalformedDocument("cancelled_at must be epoch seconds", field="cancelled_at")
        return cls(
            str(data["receipt_id"]),
            penalty,
            cancelled_at,
            signature_at(data, "site_signature"),
        )


def cancellation_document(receipt_id: str, penalty: Decimal, cancelled_at: int) -> Dict[str, Any]:
    return {
        "receipt_id": receipt_id,
        "penalty": money_text(penalty),
        "cancelled_at": cancelled_at,
    }


def sign_cancellation(
    receipt: Receipt, penalty: Decimal, at: int, site_key: Ed25519PrivateKey, site_id: str
) -> Cancellation:
    document = cancellation_document(receipt.id, penalty, at)
    return Cancellation(receipt.id, penalty, at, sign_document(document, site_key, site_id))


def sign_void(receipt: Receipt, site_key: Ed25519PrivateKey, site_id: str) -> Cancellation:
    """The void of a receipt whose reservation was never confirmed: its full refund (penalty
    0), dated at the receipt's own ``confirmed_at`` so that whoever makes it (the confirm
    that failed, a cancel, the agent's loop after a crash) makes the very same document, and
    the bank books it once (Ed25519 signatures are deterministic)."""
    return sign_cancellation(receipt, Decimal(0), receipt.confirmed_at, site_key, site_id)
