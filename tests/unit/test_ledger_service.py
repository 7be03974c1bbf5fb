"""The ledger as a service: receipts and refunds booked over HTTP with both signatures checked,
balances and statements, refusals that book nothing, the participants file, the remote
client's view of a service that is not there, and the `siteagent ledger` commands."""

from __future__ import annotations

import json
import json as _json
import textwrap
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest
import yaml
from fastapi.testclient import TestClient

from siteagent.cli.main import main
from siteagent.config import loading
from siteagent.config.reading import ConfigError
from siteagent.ledger import client as ledger_client
from siteagent.ledger.bank import (
    Ledger,
    LedgerConflict,
    LedgerNotFound,
    LedgerRefused,
    LedgerUnavailable,
)
from siteagent.ledger.client import RemoteLedger
from siteagent.ledger.participants import load_participants
from siteagent.ledger.service import (
    create_app,
    ledger_authorities,
    open_ledger,
    participant_keys,
    reread_participants,
)
from siteagent.market import deals
from siteagent.protocol import documents, keys, signing
from siteagent.protocol.documents import Cancellation, Signed
from siteagent.security.authentication import Authenticator
from testbed.inprocess.parties import NOW, Party, deal, receipt
from testbed.processes.ports import free_port

PRICE = Decimal("43.40")  # testbed.inprocess.parties.offer: 16 cores x 2 h x 1.25 + fee 3.4
BASE = "http://testserver"


@pytest.fixture
def site() -> Party:
    return Party("hpc1")


@pytest.fixture
def alice() -> Party:
    return Party("alice@laptop")


def participants_file(path: Path, site: Party, alice: Party) -> Path:
    """The administrator's file: the site, and alice in the authorized-clients format with a
    credit of 100.00."""
    document = {
        "sites": {site.key_id: {"public_key": keys.public_key_text(site.key.public_key())}},
        "clients": {
            alice.key_id: {
                "public_key": keys.public_key_text(alice.key.public_key()),
                "user": "alice",
                "credit": "100.00",
            }
        },
    }
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


@pytest.fixture
def service_config(tmp_path: Path, site: Party, alice: Party, ledger_location: str) -> Path:
    """The bank's configuration, on each database (ledger.path, or ledger.database)."""
    participants = participants_file(tmp_path / "participants.yaml", site, alice)
    books = (
        {"path": ledger_location.removeprefix("sqlite:")}
        if ledger_location.startswith("sqlite:")
        else {"database": ledger_location}
    )
    document = {
        "state_dir": str(tmp_path / "state"),
        "ledger": {**books, "participants": str(participants)},
    }
    path = tmp_path / "ledger.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


@pytest.fixture
def ledger(service_config: Path) -> Iterator[Ledger]:
    opened = open_ledger(loading.load(service_config))
    yield opened
    opened.close()


class SiteClient(TestClient):
    """The bank as a site talks to it: every POST signed with the site's key (the bank takes
    bookings from its sites only)."""

    def __init__(self, app: Any, signer: Party) -> None:
        super().__init__(app)
        self.signer = signer

    def post(self, url: Any, json: Any = None, **kwargs: Any) -> Any:  # type: ignore[override]
        body = _json.dumps(json).encode()
        headers = signing.sign_request(
            "POST", BASE + url, body, self.signer.key, self.signer.key_id
        )
        headers["Content-Type"] = "application/json"
        return self.request("POST", url, content=body, headers=headers)


@pytest.fixture
def http(ledger: Ledger, site: Party) -> TestClient:
    readers = Authenticator(participant_keys(ledger), ["testserver"])
    return SiteClient(create_app(ledger, readers), site)


def test_a_booking_must_be_signed_by_a_site_before_its_body_is_read(
    http: TestClient, site: Party, alice: Party
) -> None:
    document = receipt(site, alice).to_json()
    unsigned = TestClient.post(http, "/v1/receipts", json=document)
    assert error(unsigned, 401)["code"] == "unsigned"
    malformed = TestClient.post(http, "/v1/refunds", content=b"{not json")
    assert error(malformed, 401)["code"] == "unsigned"  # refused before it is parsed
    body = _json.dumps(document).encode()
    by_buyer = signing.sign_request("POST", BASE + "/v1/receipts", body, alice.key, alice.key_id)
    answer = http.request("POST", "/v1/receipts", content=body, headers=by_buyer)
    assert error(answer, 403)["code"] == "not_a_site"
    assert balance(http, alice.key_id, site) == 0


def read(http: TestClient, path: str, reader: Party) -> Any:
    """A signed GET, as a participant reads an account."""
    headers = signing.sign_request("GET", BASE + path, b"", reader.key, reader.key_id)
    return http.get(path, headers=headers)


def balance(http: TestClient, account: str, reader: Party) -> Decimal:
    answer = read(http, f"/v1/accounts/{account}", reader)
    assert answer.status_code == 200, answer.text
    return Decimal(answer.json()["balance"])


def error(answer: Any, status: int) -> Dict[str, Any]:
    assert answer.status_code == status, answer.text
    detail: Dict[str, Any] = answer.json()["error"]
    return detail


# --------------------------------------------------------------------------- the HTTP API


def test_a_receipt_posted_moves_the_price(http: TestClient, site: Party, alice: Party) -> None:
    booked = receipt(site, alice)
    answer = http.post("/v1/receipts", json=booked.to_json())
    assert answer.status_code == 200, answer.text
    transaction = answer.json()
    assert transaction["kind"] == "deal" and transaction["receipt_id"] == booked.id
    assert balance(http, alice.key_id, site) == -PRICE
    assert balance(http, site.key_id, site) == PRICE
    assert balance(http, "bank", site) == 0
    statement = read(http, f"/v1/accounts/{alice.key_id}/statement", alice).json()
    assert statement["balance"] == "-43.40"
    assert [(line["kind"], line["amount"]) for line in statement["lines"]] == [("deal", "-43.40")]


def test_booking_the_same_receipt_again_has_one_effect(
    http: TestClient, site: Party, alice: Party
) -> None:
    document = receipt(site, alice).to_json()
    first = http.post("/v1/receipts", json=document)
    again = http.post("/v1/receipts", json=document)
    assert again.status_code == 200 and again.json() == first.json()
    assert balance(http, alice.key_id, site) == -PRICE
    statement = read(http, f"/v1/accounts/{alice.key_id}/statement", alice).json()
    assert len(statement["lines"]) == 1


@pytest.mark.parametrize("signature", ["user_signature", "site_signature"])
def test_a_bad_signature_is_refused_and_nothing_booked(
    http: TestClient, site: Party, alice: Party, signature: str
) -> None:
    booked = receipt(site, alice)
    key_id = alice.key_id if signature == "user_signature" else site.key_id
    forged = replace(booked, **{signature: Signed(key_id, bytes(64))})
    detail = error(http.post("/v1/receipts", json=forged.to_json()), 422)
    assert detail["code"] == f"bad_{signature}"
    assert balance(http, alice.key_id, site) == 0 and balance(http, site.key_id, site) == 0
    assert read(http, f"/v1/accounts/{alice.key_id}/statement", site).json()["lines"] == []


def test_a_receipt_from_a_stranger_is_refused(http: TestClient, site: Party) -> None:
    detail = error(http.post("/v1/receipts", json=receipt(site, Party("eve")).to_json()), 422)
    assert detail["code"] == "unknown_participant"


@pytest.mark.parametrize("body", [{"deal": {}}, {"not": "a receipt"}, [1, 2]])
def test_a_malformed_receipt_is_a_422(http: TestClient, body: Any) -> None:
    detail = error(http.post("/v1/receipts", json=body), 422)
    assert detail["code"] in ("malformed_receipt", "invalid_request") and detail["message"]


@pytest.mark.parametrize("field", ["price", "cancellation_penalty"])
@pytest.mark.parametrize("amount", ["43.40\n", "1e999999999", "43.4", "1234567890123.00"])
def test_a_deal_whose_amounts_are_not_written_money_is_refused(
    http: TestClient, site: Party, alice: Party, field: str, amount: str
) -> None:
    """Signed properly, but its price (or penalty) is not written as the protocol says."""
    document = deal(site, alice)
    document[field] = amount
    body = documents.confirm_body(document, alice.key, alice.key_id)
    signed = deals.countersign(body, document, alice.client(), site.key, site.key_id, NOW)
    detail = error(http.post("/v1/receipts", json=signed.to_json()), 422)
    assert (detail["code"], detail["field"]) == ("malformed_receipt", f"deal.{field}")
    assert balance(http, alice.key_id, site) == 0


@pytest.mark.parametrize("penalty", ["1e999999999", "0.34\n", "-0.34", 0.34, "1234567890123.00"])
def test_a_refund_whose_penalty_is_not_written_money_is_a_422_naming_it(
    http: TestClient, site: Party, alice: Party, penalty: Any
) -> None:
    booked = receipt(site, alice)
    http.post("/v1/receipts", json=booked.to_json())
    cancellation = documents.sign_cancellation(booked, Decimal(0), NOW, site.key, site.key_id)
    forged = {**cancellation.to_json(), "penalty": penalty}
    detail = error(http.post("/v1/refunds", json=forged), 422)
    assert (detail["code"], detail["field"]) == ("malformed_cancellation", "penalty")
    assert balance(http, alice.key_id, site) == -PRICE


def test_a_deal_without_canonical_json_is_refused_not_a_500(
    http: TestClient, site: Party, alice: Party
) -> None:
    document = receipt(site, alice).to_json()
    document["deal"]["extra"] = 2**60  # beyond the integers RFC 8785 (I-JSON) allows
    detail = error(http.post("/v1/receipts", json=document), 422)
    assert detail["code"] == "malformed_receipt" and "canonical" in detail["message"]


def test_a_receipt_conflicting_with_a_booked_one_is_a_409(
    http: TestClient, site: Party, alice: Party
) -> None:
    http.post("/v1/receipts", json=receipt(site, alice).to_json())
    other = receipt(site, alice, offer_id="o-2")  # the same reservation, another deal
    assert error(http.post("/v1/receipts", json=other.to_json()), 409)["code"] == (
        "reservation_already_booked"
    )


def test_a_refund_returns_the_price_less_the_penalty(
    http: TestClient, site: Party, alice: Party
) -> None:
    booked = receipt(site, alice)
    http.post("/v1/receipts", json=booked.to_json())
    cancellation = documents.sign_cancellation(
        booked, Decimal("0.34"), NOW + 200, site.key, site.key_id
    )
    answer = http.post("/v1/refunds", json=cancellation.to_json())
    assert answer.status_code == 200 and answer.json()["kind"] == "refund", answer.text
    assert balance(http, alice.key_id, site) == Decimal("-0.34")
    assert balance(http, site.key_id, site) == Decimal("0.34")
    again = http.post("/v1/refunds", json=cancellation.to_json())
    assert again.json() == answer.json() and balance(http, alice.key_id, site) == Decimal("-0.34")


def test_a_refund_signed_by_another_key_is_refused(
    http: TestClient, site: Party, alice: Party
) -> None:
    booked = receipt(site, alice)
    http.post("/v1/receipts", json=booked.to_json())
    impostor = Party(site.key_id)
    forged = documents.sign_cancellation(booked, Decimal(0), NOW, impostor.key, site.key_id)
    assert error(http.post("/v1/refunds", json=forged.to_json()), 422)["code"] == (
        "bad_site_signature"
    )
    assert balance(http, alice.key_id, site) == -PRICE


def test_a_receipt_the_buyer_cannot_pay_is_a_402_and_books_nothing(
    http: TestClient, site: Party, alice: Party
) -> None:
    http.post("/v1/receipts", json=receipt(site, alice).to_json())
    http.post("/v1/receipts", json=receipt(site, alice, "r-2").to_json())  # -86.80 of 100.00
    detail = error(http.post("/v1/receipts", json=receipt(site, alice, "r-3").to_json()), 402)
    assert detail["code"] == "insufficient_funds"
    assert "balance is -86.80 and its credit 100.00" in detail["message"]
    assert balance(http, alice.key_id, site) == -2 * PRICE


def test_a_void_of_an_unbooked_receipt_is_kept_and_refuses_it(
    http: TestClient, site: Party, alice: Party
) -> None:
    late = receipt(site, alice)
    void = documents.sign_void(late, site.key, site.key_id).to_json()
    answer = http.post("/v1/refunds", json=void)
    assert answer.status_code == 200 and answer.json() == {"voided": late.id}
    assert ledger_client.refund_answer(answer.json()) is None  # what the agent makes of it
    assert error(http.post("/v1/receipts", json=late.to_json()), 409)["code"] == "receipt_voided"
    assert balance(http, alice.key_id, site) == 0


def test_unknown_accounts_and_receipts_are_404(http: TestClient, site: Party, alice: Party) -> None:
    assert error(read(http, "/v1/accounts/nobody", site), 404)["code"] == "unknown_account"
    nobody = read(http, "/v1/accounts/nobody/statement", site)
    assert error(nobody, 404)["code"] == "unknown_account"
    unbooked = documents.sign_cancellation(
        receipt(site, alice), Decimal("0.34"), NOW, site.key, site.key_id
    )
    assert error(http.post("/v1/refunds", json=unbooked.to_json()), 404)["code"] == (
        "unknown_receipt"
    )


def test_an_account_is_read_by_its_holder_or_a_site_only(
    http: TestClient, site: Party, alice: Party
) -> None:
    booked = receipt(site, alice)
    http.post("/v1/receipts", json=booked.to_json())
    path = f"/v1/accounts/{alice.key_id}/statement"
    unsigned = http.get(path)
    assert error(unsigned, 401)["code"] == "unsigned" and "Accept-Signature" in unsigned.headers
    assert error(http.get(f"/v1/accounts/{alice.key_id}"), 401)["code"] == "unsigned"
    assert error(read(http, path, Party("eve@nowhere")), 401)["code"] == "unknown_key"
    assert error(read(http, path, Party(alice.key_id)), 401)["code"] == "bad_signature"
    for reader in (alice, site):
        lines = read(http, path, reader).json()["lines"]
        assert [line["receipt_id"] for line in lines] == [booked.id]
    assert read(http, f"/v1/accounts/{alice.key_id}", alice).json() == {
        "account": alice.key_id,
        "balance": "-43.40",
        "credit": "100.00",
    }


def test_a_participant_cannot_read_another_s_account(
    ledger: Ledger, site: Party, alice: Party
) -> None:
    bob = Party("bob@desk")
    ledger.register(bob.key_id, "user", bob.key.public_key())
    http = TestClient(create_app(ledger, Authenticator(participant_keys(ledger), ["testserver"])))
    for path in (f"/v1/accounts/{alice.key_id}", f"/v1/accounts/{alice.key_id}/statement"):
        detail = error(read(http, path, bob), 403)
        assert detail["code"] == "not_account_holder" and alice.key_id in detail["message"]
    assert error(read(http, "/v1/accounts/nobody", bob), 403)["code"] == "not_account_holder"
    assert balance(http, bob.key_id, bob) == 0


def test_participants_added_on_sighup_may_read_their_accounts(
    ledger: Ledger, tmp_path: Path, site: Party, alice: Party
) -> None:
    readers = Authenticator(participant_keys(ledger), ["testserver"])
    http = TestClient(create_app(ledger, readers))
    bob = Party("bob@desk")
    assert error(read(http, f"/v1/accounts/{bob.key_id}", bob), 401)["code"] == "unknown_key"
    path = participants_file(tmp_path / "participants.yaml", site, alice)
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    document["clients"][bob.key_id] = {"public_key": keys.public_key_text(bob.key.public_key())}
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    reread_participants(ledger, path, readers)
    assert balance(http, bob.key_id, bob) == 0


def test_a_read_signed_for_another_authority_is_refused(http: TestClient, alice: Party) -> None:
    """A read signed for another bank (or an agent) cannot be replayed here."""
    path = f"/v1/accounts/{alice.key_id}"
    headers = signing.sign_request(
        "GET", "http://bank.elsewhere.org" + path, b"", alice.key, alice.key_id
    )
    replayed = http.get(path, headers={**headers, "Host": "bank.elsewhere.org"})
    assert error(replayed, 401)["code"] == "wrong_authority"
    assert error(http.get(path, headers=headers), 401)["code"] == "bad_signature"
    assert balance(http, alice.key_id, alice) == 0


def test_the_ledger_answers_to_its_listen_address_and_the_url_agents_reach_it_by(
    tmp_path: Path,
) -> None:
    settings = loading.parse(
        {"state_dir": str(tmp_path), "ledger": {"listen": "127.0.0.1", "port": 8444}}
    ).ledger
    assert "127.0.0.1:8444" in ledger_authorities(settings)
    named = settings.model_copy(update={"url": "https://Bank.Example.org:8444/"})
    assert ledger_authorities(named)[-1] == "bank.example.org:8444"
    assert "127.0.0.1:8444" in ledger_authorities(named)


def test_health(http: TestClient) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}


# --------------------------------------------------------------------------- participants


def test_participants_file_errors_name_the_key_path(tmp_path: Path, site: Party) -> None:
    key = keys.public_key_text(site.key.public_key())
    path = tmp_path / "participants.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            sites:
              hpc1: {{public_key: "{key}"}}
              hpc2: {{public_key: "not a key"}}
              hpc3: {{}}
            clients:
              hpc1: {{public_key: "{key}", user: alice}}
            banks: {{}}
            """
        ),
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as caught:
        load_participants(path)
    found = sorted(str(problem) for problem in caught.value.problems)
    assert found[0].startswith("banks: unknown key")
    assert found[1] == "clients.hpc1: expected a key id listed once, as a site or a client"
    assert found[2].startswith("sites.hpc2.public_key: expected an Ed25519 public key")
    assert found[3] == "sites.hpc3: expected public_key"


def test_a_client_s_credit_is_read_from_the_participants_file(
    ledger: Ledger, tmp_path: Path, site: Party, alice: Party
) -> None:
    assert ledger.credit(alice.key_id) == Decimal("100.00")
    assert ledger.credit(site.key_id) == 0
    path = tmp_path / "bad.yaml"
    entry = {"public_key": keys.public_key_text(alice.key.public_key()), "credit": "1e99"}
    path.write_text(yaml.safe_dump({"clients": {alice.key_id: entry}}), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"clients\.alice@laptop\.credit: expected an amount"):
        load_participants(path)


def test_serving_needs_a_participants_file(tmp_path: Path) -> None:
    from siteagent.http.server import ServiceError

    with pytest.raises(ServiceError, match=r"ledger\.participants"):
        open_ledger(loading.parse({"state_dir": str(tmp_path)}))


# --------------------------------------------------------------------------- the client


def test_a_ledger_service_that_does_not_answer_is_unavailable(site: Party, alice: Party) -> None:
    remote = RemoteLedger(f"https://127.0.0.1:{free_port()}", timeout=2)
    with pytest.raises(LedgerUnavailable, match="did not answer"):
        remote.book(receipt(site, alice))


def test_a_ledger_service_is_reached_over_https_only() -> None:
    with pytest.raises(ValueError, match="HTTPS only"):
        RemoteLedger("http://bank.example.org:8444")


# --------------------------------------------------------------------------- the commands


def test_deposit_balance_and_statement_commands(
    service_config: Path, alice: Party, capsys: pytest.CaptureFixture[str]
) -> None:
    options = ["--config", str(service_config)]
    assert main(["ledger", "deposit", alice.key_id, "100.00", "--memo", "grant", *options]) == 0
    assert "balance 100.00" in capsys.readouterr().out
    assert main(["ledger", "balance", alice.key_id, "--json", *options]) == 0
    assert json.loads(capsys.readouterr().out) == {"account": alice.key_id, "balance": "100.00"}
    assert main(["ledger", "statement", alice.key_id, "--json", *options]) == 0
    lines = json.loads(capsys.readouterr().out)["lines"]
    assert [(line["kind"], line["memo"], line["amount"]) for line in lines] == [
        ("deposit", "grant", "100.00")
    ]
    assert main(["ledger", "statement", alice.key_id, *options]) == 0
    assert "grant" in capsys.readouterr().out
    assert main(["ledger", "balance", "bank", *options]) == 0
    assert "bank: -100.00" in capsys.readouterr().out


def test_commands_refuse_unknown_accounts_and_bad_amounts(
    service_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options = ["--config", str(service_config)]
    assert main(["ledger", "balance", "nobody", *options]) == 1
    assert "no account 'nobody'" in capsys.readouterr().err
    assert main(["ledger", "deposit", "nobody", "5.00", *options]) == 1
    assert "no account 'nobody'" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # refused as the argument is read (see test_money)
        main(["ledger", "deposit", "hpc1", "0.001", *options])
    assert "at most 12 digits before the point and 2 after" in capsys.readouterr().err


def refused_with(status: int, body: bytes) -> Exception:
    """What RemoteLedger makes of an HTTP error answer from the service."""
    return ledger_client.refusal("https://bank", status, "x", body)


def test_the_services_refusals_become_the_ledgers_errors() -> None:
    body = json.dumps({"error": {"code": "bad_site_signature", "message": "no"}}).encode()
    refused = refused_with(422, body)
    assert isinstance(refused, LedgerRefused) and refused.code == "bad_site_signature"
    assert isinstance(refused_with(409, body), LedgerConflict)
    assert isinstance(refused_with(404, body), LedgerNotFound)
    failed = refused_with(500, b"<html>oops</html>")
    assert isinstance(failed, LedgerUnavailable) and "HTTP 500" in str(failed)


def test_an_agent_with_a_ledger_url_books_at_the_service(tmp_path: Path) -> None:
    from siteagent.market.deals import open_ledger as agent_ledger

    url = "https://bank.example.org:8444/"
    site = Party("hpc1")
    config = loading.parse({"state_dir": str(tmp_path), "ledger": {"url": url}})
    opened = agent_ledger(config, site.key)
    assert isinstance(opened, RemoteLedger) and opened.url == url.rstrip("/")
    assert opened.signer == (site.key, config.site.name)  # the bank takes signed bookings
    assert not (tmp_path / "ledger.sqlite3").exists()


def _raw(http: TestClient, path: str, text: str, signer: Party) -> Any:
    """A booking of ``text`` exactly as written (JSON Python would not write: 1e999999)."""
    body = text.encode()
    headers = signing.sign_request("POST", BASE + path, body, signer.key, signer.key_id)
    headers["Content-Type"] = "application/json"
    return http.request("POST", path, content=body, headers=headers)


def test_every_refusal_of_a_document_names_its_field(
    http: TestClient, site: Party, alice: Party
) -> None:
    """What a site sends wrong, the bank says where: each 422 (and each conflict of a
    document with the books) carries the field at fault."""
    good = receipt(site, alice).to_json()
    text = json.dumps(good)
    cases = [
        (text.replace(f'"confirmed_at": {good["confirmed_at"]}', '"confirmed_at": 1e999999'),
         "confirmed_at"),
        (text.replace('"size": 16', '"size": 1e999999'), "deal.offer.size"),
        (text.replace('"size": 16', '"size": NaN'), "deal.offer.size"),
        (json.dumps({**good, "user_signature": {"keyid": "x"}}), "user_signature"),
        (json.dumps({**good, "site_signature": 7}), "site_signature"),
        (json.dumps({**good, "deal": {**good["deal"], "version": 2}}), "deal.version"),
        (json.dumps({**good, "deal": {**good["deal"], "buyer": ""}}), "deal.buyer"),
        (json.dumps({**good, "deal": "no"}), "deal"),
    ]  # fmt: skip
    for body, field in cases:
        detail = error(_raw(http, "/v1/receipts", body, site), 422)
        assert detail.get("field") == field, (field, detail)
    forged = receipt(site, alice).to_json()
    forged["user_signature"] = receipt(site, Party("alice@laptop")).to_json()["user_signature"]
    assert error(http.post("/v1/receipts", json=forged), 422)["field"] == "user_signature"
    stranger = Party("mallory")
    unknown = receipt(site, stranger).to_json()
    detail = error(http.post("/v1/receipts", json=unknown), 422)
    assert (detail["code"], detail["field"]) == ("unknown_participant", "deal.buyer")
    booked = receipt(site, alice)
    http.post("/v1/receipts", json=booked.to_json())
    clash = receipt(site, alice, offer_id="o-2").to_json()  # the same reservation again
    detail = error(http.post("/v1/receipts", json=clash), 409)
    assert detail["field"] == "deal.reservation_id"
    penalty = Cancellation(booked.id, Decimal("999.00"), NOW, site_signature(site, booked.id))
    detail = error(http.post("/v1/refunds", json=penalty.to_json()), 422)
    assert (detail["code"], detail["field"]) == ("penalty_not_agreed", "penalty")


def site_signature(site: Party, receipt_id: str) -> Signed:
    signed = documents.cancellation_document(receipt_id, Decimal("999.00"), NOW)
    return documents.sign_document(signed, site.key, site.key_id)
