"""Each wire object is defined once, by its model in siteagent/protocol/models.py; where JSON is
built by hand (the signed documents, whose bytes matter, and the quote route's offers), it is
exactly what the model describes: the same keys, and values the model accepts unchanged.
Where the core keeps a value type of its own (``Request``, the ledger's ``Transaction``), the
conversion both ways is one function, and a round trip gives back what went in.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any, Dict, Type

import pytest
from pydantic import BaseModel

from siteagent.core.values import Request, Slot
from siteagent.ledger.bank import Posting, StatementRow, Transaction
from siteagent.protocol import documents
from siteagent.protocol.models import (
    CancellationDocument,
    DealDocument,
    LedgerTransaction,
    OfferDocument,
    OfferView,
    ReceiptDocument,
    RequestDocument,
    Signature,
    SlotView,
    StatementLine,
    offer_json,
    slot_json,
)
from testbed.inprocess.parties import NOW, Party, offer, receipt


def described(model: Type[BaseModel], document: Dict[str, Any]) -> None:
    """``document`` has only the model's keys, and the model takes and gives it back as is."""
    assert set(document) <= set(model.model_fields), set(document) - set(model.model_fields)
    parsed = model.model_validate(document)
    assert parsed.model_dump(exclude_unset=True) == document


FULL = Request(
    cores=32,
    duration=7200,
    earliest=NOW,
    deadline=NOW + 86400,
    max_price=Decimal("1.50"),
    nodes=2,
    cores_per_node=16,
    memory_per_core_mb=2048,
    architecture="x86_64",
    os="linux",
    cpu_speed_mhz=2400,
    disk_gb=10,
    round=3,
    best_price=Decimal("0.0125"),
)


def test_the_request_model_has_the_core_requests_fields_in_order() -> None:
    names = [item.name for item in dataclasses.fields(Request)]
    assert list(RequestDocument.model_fields) == names


@pytest.mark.parametrize("request_", [FULL, Request(cores=1, duration=60)], ids=["full", "bare"])
def test_a_request_document_is_the_model_and_gives_the_request_back(request_: Request) -> None:
    document = documents.request_document(request_)
    described(RequestDocument, document)
    assert RequestDocument.model_validate(document).model_dump() == document
    assert documents.request_from_document(document) == request_


def test_a_request_stored_by_an_older_agent_reads_as_it_was() -> None:
    """Before one conversion, the store wrote every field (None too) and money with str()."""
    older = {item.name: getattr(FULL, item.name) for item in dataclasses.fields(Request)}
    older.update(max_price="1.50", best_price="0.0125", nodes=None, os=None)
    read = documents.request_from_document(older)
    assert read == dataclasses.replace(FULL, nodes=None, os=None)


def test_the_signed_documents_are_their_models() -> None:
    site, alice = Party("hpc1"), Party("alice@laptop")
    made = offer()
    described(OfferDocument, documents.offer_document(made))
    booked = receipt(site, alice)
    described(DealDocument, dict(booked.deal))
    described(ReceiptDocument, booked.to_json())
    described(Signature, booked.user_signature.to_json())
    cancelled = documents.sign_cancellation(booked, Decimal("0.34"), NOW + 90, site.key, "hpc1")
    described(CancellationDocument, cancelled.to_json())


def test_the_hand_built_answers_are_their_models() -> None:
    described(OfferView, offer_json(offer()))
    slot = Slot(NOW, 3600, 16, Decimal("1.25"), Decimal("0"), True, False)
    described(SlotView, slot_json(slot))


def test_a_ledger_transaction_is_its_model_both_ways() -> None:
    entries = (Posting("alice@laptop", Decimal("-43.40")), Posting("hpc1", Decimal("43.40")))
    booked = Transaction(7, "deal", NOW, "r-1", entries, receipt_id="ab" * 32)
    document = booked.to_json()
    described(LedgerTransaction, document)
    assert Transaction.from_json(document) == booked
    assert document["entries"][0] == {"account": "alice@laptop", "amount": "-43.40"}


def test_what_is_not_a_ledger_transaction_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not a ledger transaction"):
        Transaction.from_json({"id": 7, "kind": "deal"})
    document = Transaction(7, "deal", NOW, "", (Posting("a", Decimal(1)),)).to_json()
    document["entries"][0]["amount"] = "lots"
    with pytest.raises(ValueError, match="not a ledger transaction"):
        Transaction.from_json(document)


def test_a_statement_row_is_its_model() -> None:
    row = StatementRow(7, NOW, "deal", "r-1", Decimal("-43.40"), Decimal("56.60"), "ab" * 32)
    described(StatementLine, row.to_json())
