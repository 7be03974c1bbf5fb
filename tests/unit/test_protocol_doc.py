"""docs/protocol.md is what the code does, value for value: a buyer written
in another language from docs/protocol.md alone would interoperate.

Each worked example of docs/protocol.md (a signed request, a deal, its canonical form, the receipt
id and the signatures) is recomputed here from the keys it states, and the error-code
table is compared with the table the API answers from.
"""

from __future__ import annotations

import hashlib
import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Dict, List

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from siteagent.protocol import httpsig
from siteagent.protocol.documents import (
    Signed,
    cancellation_document,
    canonical_json,
    countersigned_document,
    sign_document,
)
from siteagent.protocol.errors import STATUS
from siteagent.protocol.keys import public_key_text
from siteagent.protocol.models import BidRequest, DealDocument
from siteagent.protocol.signing import sign_request

PAGE = (Path(__file__).resolve().parents[2] / "docs/protocol.md").read_text("utf-8")

#: The example keys: the 32 bytes 0x00..0x1f (the buyer) and 0x20..0x3f (the site).
BUYER = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
SITE = Ed25519PrivateKey.from_private_bytes(bytes(range(32, 64)))


def example(name: str) -> str:
    """The fenced block that follows ``<!-- example: NAME -->``."""
    match = re.search(rf"<!-- example: {name} -->\n```[a-z]*\n(.*?)\n```", PAGE, re.S)
    assert match, f"docs/protocol.md has no example {name!r}"
    return match.group(1)


def signatures() -> Dict[str, str]:
    """The example signatures table: what -> value."""
    start = PAGE.index("<!-- example: signatures -->")
    rows = re.findall(r"^\| ([^|]+?) \| `([^`]+)` \|$", PAGE[start : start + 2000], re.M)
    return dict(rows)


def test_the_readme_states_the_example_keys_public_halves() -> None:
    assert public_key_text(BUYER.public_key()) in PAGE
    assert public_key_text(SITE.public_key()) in PAGE


def test_the_signed_request_example_is_what_a_buyer_signs() -> None:
    body = b'{"cores":16,"walltime":7200}'
    url = "https://hpc1.example.org:8443/v1/quotes"
    stated = dict(line.split(": ", 1) for line in example("request").splitlines())
    nonce = re.search(r'nonce="([^"]+)"', stated["Signature-Input"])
    assert nonce
    made = sign_request("POST", url, body, BUYER, "alice@laptop", 1795000000, nonce.group(1))
    assert made == stated
    fields = httpsig.normalize_headers(made)
    [entry] = httpsig.parse_signatures(fields)
    base = httpsig.signature_base("POST", url, fields, entry.components, entry.signature_params)
    assert base.decode("ascii") == example("signature base")


def test_the_deal_example_its_canonical_form_id_and_signatures() -> None:
    deal = json.loads(example("deal"))
    DealDocument.model_validate(deal)  # the OpenAPI's model of a deal accepts it
    canonical = canonical_json(deal)
    assert canonical.decode() == example("canonical deal")
    stated = signatures()
    receipt_id = hashlib.sha256(canonical).hexdigest()
    assert stated["receipt id"] == receipt_id
    user = sign_document(deal, BUYER, "alice@laptop")
    assert stated["buyer's signature over the deal"] == user.to_json()["value"]
    site = sign_document(countersigned_document(deal, user, 1795000010), SITE, "hpc1")
    assert stated["site's signature, confirmed at 1795000010"] == site.to_json()["value"]
    refund = cancellation_document(receipt_id, Decimal("0.34"), 1795000030)
    assert set(refund) == {"receipt_id", "penalty", "cancelled_at"}
    signed = sign_document(refund, SITE, "hpc1")
    what = 'site\'s refund signature, penalty "0.34", cancelled at 1795000030'
    assert stated[what] == signed.to_json()["value"]
    assert Signed.from_json(signed.to_json()) == signed


def test_the_error_code_table_is_the_apis() -> None:
    start = PAGE.index("<!-- error codes -->")
    listed: Dict[str, int] = {}
    for status, codes in re.findall(r"^\| (\d{3}) \| ([^|]+) \|", PAGE[start : start + 4000], re.M):
        names: List[str] = re.findall(r"`([a-z_]+)`", codes)
        listed.update({name: int(status) for name in names})
    published = {code: status for code, status in STATUS.items() if not code.startswith("ledger_")}
    assert listed == published
    passed_on = [code for code in published if f"ledger_{code}" in STATUS]
    assert {code: STATUS[f"ledger_{code}"] for code in passed_on} == {
        code: 503 if code == "unavailable" else 502 for code in passed_on
    }


def test_the_bid_request_example_is_a_valid_call_for_bids() -> None:
    call = BidRequest.model_validate_json(example("bid request"))
    assert call.job.priority == 3 and call.to_beat == Decimal("5.2")
    assert call.job.input_site == "hpc2"
