"""docs/batches.md is what the code does: each worked example is a valid request or answer of
the OpenAPI's models, and the example signature is the buyer's signature over the document
the page says is signed."""

from __future__ import annotations

import json
import re
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from siteagent.protocol.documents import Signed, batch_document, canonical_json, signature_valid
from siteagent.protocol.models import (
    BatchAcceptRequest,
    BatchConfirmRequest,
    BatchQuoteRequest,
    BatchTerms,
)

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs/batches.md").read_text(encoding="utf-8")

#: The buyer key of docs/protocol.md's worked example: the 32 bytes 0x00..0x1f.
BUYER = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))


def example(name: str) -> str:
    match = re.search(rf"<!-- example: {name} -->\n```[a-z]*\n(.*?)\n```", PAGE, re.S)
    assert match, f"docs/batches.md has no example {name!r}"
    return match.group(1)


def test_the_request_examples_are_valid_calls() -> None:
    quote = BatchQuoteRequest.model_validate_json(example("batch quote"))
    assert [r.cores for r in quote.requests] == [16, 64] and quote.requests[1].limit == 5
    accept = BatchAcceptRequest.model_validate_json(example("batch accept"))
    assert len(accept.offer_ids) == 2
    BatchTerms.model_validate(json.loads(example("batches info"))["batches"])


def test_the_confirm_example_is_signed_over_its_receipt_ids() -> None:
    confirm = BatchConfirmRequest.model_validate_json(example("batch confirm"))
    ids = [part.receipt_id for part in confirm.parts]
    document = batch_document(ids)
    assert canonical_json(document).decode() == example("batch signed document")
    signed = Signed.from_json(confirm.signature)
    assert signed.key_id == "alice@laptop"
    assert signature_valid(document, signed, BUYER.public_key())
    assert signed.value == BUYER.sign(canonical_json(document))
    # the receipt id is that of the worked deal in docs/protocol.md
    protocol = (ROOT / "docs/protocol.md").read_text(encoding="utf-8")
    assert ids[0] in protocol
