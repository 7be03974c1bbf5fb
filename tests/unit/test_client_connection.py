"""A site connection against a scripted HTTPS server: TLS trusted by CA file or by pin (and
refused otherwise, before the request is sent), requests signed as the protocol says,
answers read into the published models, and each kind of failure its own error."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

from siteagent.client.connection import (
    BadAnswer,
    SiteConnection,
    SiteError,
    SiteUnreachable,
    Tentative,
)
from siteagent.client.sites import Site, Timeouts
from siteagent.protocol import documents, httpsig, keys
from siteagent.protocol.models import QuoteRequest
from siteagent.security.tls import write_self_signed
from testbed.inprocess.https_stub import Canned, HttpsStub, https_stub, site_info
from testbed.inprocess.parties import Party, deal, offer

BUYER = Party("alice@laptop")
SITE_KEY = Party("hpc1")


@pytest.fixture
def stub(tmp_path: Path) -> Iterator[HttpsStub]:
    with https_stub(tmp_path) as running:
        running.answer("GET", "/v1/info", Canned(body=site_info(SITE_KEY)))
        yield running


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "alice.key"
    keys.write_private(path, keys.private_key_pem(BUYER.key))
    return path


def site_of(stub: HttpsStub, key_file: Path, **changes: Any) -> Site:
    fields: Dict[str, Any] = {
        "name": "hpc1",
        "url": stub.url,
        "ca": stub.cert,
        "pin": None,
        "key_id": BUYER.key_id,
        "private_key": key_file,
        "timeouts": Timeouts(connect=2, read=5),
    }
    fields.update(changes)
    return Site(**fields)


def signed_by_buyer(method: str, url: str, headers: Dict[str, str]) -> bool:
    """Whether the request carries one signature, the buyer's, valid for ``url``."""
    (entry,) = httpsig.parse_signatures(headers)
    httpsig.verify(method, url, headers, entry, BUYER.key.public_key())
    return entry.param("keyid") == BUYER.key_id


def reservation_answer(document: Dict[str, Any], **extra: Any) -> Dict[str, Any]:
    return {
        "id": document["reservation_id"],
        "state": "TENTATIVE",
        "start": 1,
        "end": 2,
        "size": 16,
        "unit": "core",
        "name": "sa-r-1",
        "offer_id": "o-1",
        "client": BUYER.key_id,
        "users": ["alice"],
        "accounts": [],
        "unit_price": "1.25",
        "fee": "3.4",
        "total": "43.40",
        "penalty_factor": "0.1",
        "created": 1.0,
        "updated": 1.0,
        "deadline": 1_700_000_120.0,
        "penalty": None,
        "message": "",
        "deal": document,
        "receipt": None,
        **extra,
    }


def test_trusted_by_its_ca_file_the_site_answers_its_info(stub: HttpsStub, key_file: Path) -> None:
    with SiteConnection(site_of(stub, key_file)) as connection:
        info = connection.info()
    assert (info.site.name, info.public_key.keyid) == ("hpc1", "hpc1")
    # reads are not signed: they need no key
    assert "signature" not in stub.received[0].headers


def test_a_certificate_the_ca_file_does_not_vouch_for_is_unreachable(
    stub: HttpsStub, key_file: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    write_self_signed(other / "server.crt", other / "server.key", ("127.0.0.1",))
    connection = SiteConnection(site_of(stub, key_file, ca=other / "server.crt"))
    with pytest.raises(SiteUnreachable, match=r"hpc1: TLS failed \(.*certificate verify failed"):
        connection.quote(QuoteRequest(walltime=3600, cores=8))
    assert stub.received == []  # refused in the handshake: the signed request never left


def test_a_pinned_certificate_is_trusted_without_any_ca(stub: HttpsStub, key_file: Path) -> None:
    pin = hashlib.sha256(stub.der).hexdigest()
    with SiteConnection(site_of(stub, key_file, ca=None, pin=pin)) as connection:
        assert connection.info().site.name == "hpc1"


def test_a_certificate_other_than_the_pinned_one_is_refused_before_the_request(
    stub: HttpsStub, key_file: Path
) -> None:
    pin = hashlib.sha256(b"another certificate").hexdigest()
    connection = SiteConnection(site_of(stub, key_file, ca=None, pin=pin))
    with pytest.raises(SiteUnreachable, match=r"TLS failed .*[Ff]ingerprints did not match"):
        connection.quote(QuoteRequest(walltime=3600, cores=8))
    assert stub.received == []


def test_a_quote_is_signed_over_the_url_sent_and_holds_only_the_fields_set(
    stub: HttpsStub, key_file: Path
) -> None:
    answer = {
        "status": "offered",
        "now": 100,
        "offers": [
            {
                "offer_id": "o-1",
                "start": 160,
                "end": 3760,
                "cores": 8,
                "unit_price": "1.25",
                "fee": "0",
                "total": "10.00",
                "expires": 400,
            }
        ],
        "chosen": 0,
    }
    stub.answer("POST", "/v1/quotes", Canned(body=answer))
    request = QuoteRequest(walltime=3600, cores=8, max_price=Decimal("1.5"))
    quote = SiteConnection(site_of(stub, key_file)).quote(request)
    assert [offer.offer_id for offer in quote.offers] == ["o-1"] and quote.refusal is None
    sent = stub.received[-1]
    assert json.loads(sent.body) == {"walltime": 3600, "cores": 8, "max_price": "1.5"}
    assert signed_by_buyer("POST", stub.url + "/v1/quotes", sent.headers)
    httpsig.check_content_digest(sent.headers["content-digest"], sent.body)


def test_a_refusal_is_an_answer_with_its_reason(stub: HttpsStub, key_file: Path) -> None:
    refusal = {"code": "unsatisfiable", "reason": "no such architecture", "field": "architecture"}
    stub.answer(
        "POST",
        "/v1/quotes",
        Canned(body={"status": "refused", "now": 1, "offers": [], "refusal": refusal}),
    )
    quote = SiteConnection(site_of(stub, key_file)).quote(
        QuoteRequest(walltime=60, cores=1, architecture="sparc")
    )
    assert quote.refusal is not None
    assert (quote.refusal.field, quote.refusal.reason) == ("architecture", "no such architecture")


def test_an_error_body_is_a_site_error_with_its_code_status_field_and_retry(
    stub: HttpsStub, key_file: Path
) -> None:
    error = {"error": {"code": "busy", "message": "too much to price", "field": None}}
    stub.answer("POST", "/v1/quotes", Canned(503, error, headers={"Retry-After": "7"}))
    with pytest.raises(SiteError) as raised:
        SiteConnection(site_of(stub, key_file)).quote(QuoteRequest(walltime=60, cores=1))
    failure = raised.value
    assert (failure.site, failure.code, failure.status, failure.retry_after_s) == (
        "hpc1",
        "busy",
        503,
        7,
    )
    assert str(failure) == "hpc1: too much to price" and not isinstance(failure, BadAnswer)


@pytest.mark.parametrize(
    ("canned", "message"),
    [
        (Canned(502, raw=b"<html>bad gateway</html>"), "HTTP 502 .* without the API's error body"),
        (Canned(200, raw=b"not json"), "not a JSON object"),
        (Canned(200, body={"status": "maybe"}), "not a QuoteAnswer of the API: status"),
    ],
)
def test_an_answer_that_is_not_the_protocol_is_a_bad_answer(
    stub: HttpsStub, key_file: Path, canned: Canned, message: str
) -> None:
    stub.answer("POST", "/v1/quotes", canned)
    with pytest.raises(BadAnswer, match=message):
        SiteConnection(site_of(stub, key_file)).quote(QuoteRequest(walltime=60, cores=1))


def test_a_site_that_does_not_answer_in_time_is_unreachable(
    stub: HttpsStub, key_file: Path
) -> None:
    stub.answer("GET", "/v1/info", Canned(body=site_info(SITE_KEY), delay_s=2))
    connection = SiteConnection(site_of(stub, key_file, timeouts=Timeouts(connect=2, read=0.3)))
    with pytest.raises(SiteUnreachable, match=r"hpc1: no answer within 0.3 s") as raised:
        connection.info()
    assert raised.value.timed_out


def test_a_closed_port_is_unreachable(key_file: Path, tmp_path: Path) -> None:
    write_self_signed(tmp_path / "c.crt", tmp_path / "c.key", ("127.0.0.1",))
    site = Site("hpc9", "https://127.0.0.1:1", tmp_path / "c.crt", None, "a", key_file, Timeouts())
    with pytest.raises(
        SiteUnreachable, match=r"hpc9: cannot connect to https://127.0.0.1:1"
    ) as raised:
        SiteConnection(site).info()
    assert not raised.value.timed_out


def test_accept_sends_the_idempotency_key_and_keeps_the_deal_as_sent(
    stub: HttpsStub, key_file: Path
) -> None:
    document = deal(SITE_KEY, BUYER, "r-1")
    stub.answer("POST", "/v1/reservations", Canned(201, reservation_answer(document)))
    tentative = SiteConnection(site_of(stub, key_file)).accept("o-1", "auction-7-hpc1")
    assert (tentative.reservation_id, tentative.deal, tentative.deadline) == (
        "r-1",
        document,
        1_700_000_120.0,
    )
    assert stub.received[-1].headers["idempotency-key"] == "auction-7-hpc1"
    assert "signature" in stub.received[-1].headers


def confirmed(document: Dict[str, Any], site_key: Party) -> Dict[str, Any]:
    """What an honest site answers to a confirm of ``document`` (countersigned by
    ``site_key``)."""
    signature = documents.sign_document(document, BUYER.key, BUYER.key_id)
    countersigned = documents.countersigned_document(document, signature, 1_700_000_010)
    receipt = documents.Receipt(
        document,
        signature,
        1_700_000_010,
        documents.sign_document(countersigned, site_key.key, site_key.key_id),
    )
    return reservation_answer(document, state="CONFIRMED", receipt=receipt.to_json())


def tentative_of(document: Dict[str, Any], stub: HttpsStub, key_file: Path) -> Tentative:
    stub.answer("POST", "/v1/reservations", Canned(201, reservation_answer(document)))
    return SiteConnection(site_of(stub, key_file)).accept("o-1", "k")


def test_confirm_signs_the_deal_and_verifies_the_sites_receipt(
    stub: HttpsStub, key_file: Path
) -> None:
    document = deal(SITE_KEY, BUYER, "r-1")
    tentative = tentative_of(document, stub, key_file)
    stub.answer("POST", "/v1/reservations/r-1/confirm", Canned(body=confirmed(document, SITE_KEY)))
    receipt = SiteConnection(site_of(stub, key_file)).confirm(tentative)
    assert receipt.id == documents.deal_id(document)
    (confirm,) = [one for one in stub.received if one.path == "/v1/reservations/r-1/confirm"]
    sent = json.loads(confirm.body)
    assert sent["deal"] == document
    signed = documents.Signed.from_json(sent["signature"])
    assert documents.signature_valid(document, signed, BUYER.key.public_key())


def test_a_receipt_signed_by_another_key_than_the_published_one_is_refused(
    stub: HttpsStub, key_file: Path
) -> None:
    document = deal(SITE_KEY, BUYER, "r-1")
    tentative = tentative_of(document, stub, key_file)
    forger = Party("hpc1")  # the site's key id, another key
    stub.answer("POST", "/v1/reservations/r-1/confirm", Canned(body=confirmed(document, forger)))
    with pytest.raises(BadAnswer, match=r"the site's signature of the receipt does not verify"):
        SiteConnection(site_of(stub, key_file)).confirm(tentative)


def test_a_receipt_of_another_deal_is_refused(stub: HttpsStub, key_file: Path) -> None:
    document = deal(SITE_KEY, BUYER, "r-1")
    tentative = tentative_of(document, stub, key_file)
    other = deal(SITE_KEY, BUYER, "r-1", penalty="0.00")
    stub.answer("POST", "/v1/reservations/r-1/confirm", Canned(body=confirmed(other, SITE_KEY)))
    with pytest.raises(BadAnswer, match=r"the receipt's deal is not the deal the buyer signed"):
        SiteConnection(site_of(stub, key_file)).confirm(tentative)


def test_cancel_answers_the_verified_refund_or_none_when_tentative(
    stub: HttpsStub, key_file: Path
) -> None:
    document = deal(SITE_KEY, BUYER, "r-1")
    receipt = documents.Receipt.from_json(confirmed(document, SITE_KEY)["receipt"])
    refund = documents.sign_cancellation(
        receipt, Decimal("0.34"), 1_700_000_030, SITE_KEY.key, SITE_KEY.key_id
    )
    answer = reservation_answer(document, state="CANCELLED", cancellation=refund.to_json())
    stub.answer("DELETE", "/v1/reservations/r-1", Canned(body=answer))
    connection = SiteConnection(site_of(stub, key_file))
    assert connection.cancel("r-1") == refund
    stub.answer("DELETE", "/v1/reservations/r-1", Canned(body=reservation_answer(document)))
    assert connection.cancel("r-1") is None
    forged = documents.sign_cancellation(
        receipt, Decimal("0.00"), 1_700_000_030, Party("hpc1").key, "hpc1"
    )
    answer = reservation_answer(document, state="CANCELLED", cancellation=forged.to_json())
    stub.answer("DELETE", "/v1/reservations/r-1", Canned(body=answer))
    with pytest.raises(BadAnswer, match=r"signature of the cancellation does not verify"):
        connection.cancel("r-1")


def test_the_buyers_own_reservation_is_read_with_a_signed_get(
    stub: HttpsStub, key_file: Path
) -> None:
    document = deal(SITE_KEY, BUYER, "r-1")
    stub.answer("GET", "/v1/reservations/r-1", Canned(body=reservation_answer(document)))
    view = SiteConnection(site_of(stub, key_file)).reservation("r-1")
    assert (view.id, view.state, view.client) == ("r-1", "TENTATIVE", BUYER.key_id)
    sent = stub.received[-1]
    assert signed_by_buyer("GET", stub.url + "/v1/reservations/r-1", sent.headers)


def test_a_key_readable_by_others_is_refused_before_anything_is_signed(
    stub: HttpsStub, key_file: Path
) -> None:
    key_file.chmod(0o644)
    with pytest.raises(ValueError, match=r"chmod 600"):
        SiteConnection(site_of(stub, key_file)).accept(offer().id, "k")
    assert stub.received == []
