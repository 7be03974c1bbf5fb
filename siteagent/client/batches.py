"""Batch calls to a site that takes them (docs/batches.md), single calls to one that does not.

A site says in ``GET /v1/info`` whether it takes batches and how many parts one may hold
(``batches.max_parts``); an agent older than batches says nothing, and is sent one request per
part as before. What a caller gets is the same either way: a quote per request, a tentative
reservation per offer (all or nothing: a refused part raises its SiteError, and a batch
releases the parts it held itself, where single calls leave that to the caller, who holds
them), a receipt per reservation.

Batches larger than the site's ``max_parts``, or whose body would pass the 16 KiB a site reads
by default, go in several requests.
"""

from __future__ import annotations

import json
import weakref
from typing import Any, Dict, List, Mapping, MutableMapping, Sequence, TypeVar

from siteagent.client.connection import SiteConnection, SiteQuote, Tentative
from siteagent.protocol import documents
from siteagent.protocol.documents import Receipt
from siteagent.protocol.models import (
    BatchQuoteAnswer,
    BatchReservations,
    QuoteRequest,
    ReservationView,
)

#: The most JSON bytes sent in one batch: under a site's default body limit (16 KiB).
MAX_BODY_BYTES = 15_000


#: What each connection's site said of batches (0: it takes none), asked once.
_PARTS: MutableMapping[SiteConnection, int] = weakref.WeakKeyDictionary()

_T = TypeVar("_T")


def max_parts(connection: SiteConnection) -> int:
    """How many parts one batch to this site may hold; 0 if it takes no batches."""
    if connection not in _PARTS:
        terms = connection.info().batches
        _PARTS[connection] = 0 if terms is None else max(terms.max_parts, 0)
    return _PARTS[connection]


def single_calls(connection: SiteConnection) -> None:
    """Send this connection's site single calls only, whatever it takes."""
    _PARTS[connection] = 0


def quote_all(
    connection: SiteConnection, requests: Sequence[QuoteRequest], withdraw: Sequence[str] = ()
) -> List[SiteQuote]:
    """Each request's quote, in order; ``withdraw`` (offers of this buyer's it gave up) lapse
    first where the site takes batches, and are left to lapse by themselves where not."""
    parts = max_parts(connection)
    if not parts:
        return [connection.quote(request) for request in requests]
    bodies = [r.model_dump(mode="json", exclude_unset=True, exclude_none=True) for r in requests]
    quotes: List[SiteQuote] = []
    given = list(withdraw)
    for chunk in _chunks(list(zip(requests, bodies)), parts, lambda pair: pair[1]):
        payload: Dict[str, Any] = {"requests": [body for _, body in chunk]}
        if given:
            payload["withdraw"] = given[:2000]
            given = given[2000:]
        raw = connection.request("POST", "/v1/quotes/batch", payload)
        answer = connection.parsed(BatchQuoteAnswer, raw)
        if len(answer.answers) != len(chunk):
            raise connection.bad(f"{len(chunk)} requests were answered {len(answer.answers)} times")
        quotes += [
            SiteQuote(connection.site.name, r, a) for (r, _), a in zip(chunk, answer.answers)
        ]
    return quotes


def accept_all(
    connection: SiteConnection, offer_ids: Sequence[str], idempotency_key: str
) -> List[Tentative]:
    """Every offer held, in order, or the SiteError of the first that could not be, none
    held: one batch accept, to a site that takes them (ValueError otherwise: single accepts
    are the caller's, which journals each). ``idempotency_key`` makes a retry of the same
    offers one effect; the site keys part i ``idempotency_key#i``, which a single accept of
    that offer may send to learn what the batch did."""
    parts = max_parts(connection)
    if not 0 < len(offer_ids) <= parts:
        raise ValueError(f"{connection.site.name} takes batches of 1 to {parts} offers")
    raw = connection.request(
        "POST",
        "/v1/reservations/batch",
        {"offer_ids": list(offer_ids)},
        idempotency_key=idempotency_key,
    )
    views = _views(connection, raw, len(offer_ids))
    held = []
    for offer_id, view, data in zip(offer_ids, views, raw["reservations"]):
        if view.deal.offer.id != offer_id:
            raise connection.bad(f"the deal is for offer {view.deal.offer.id}, not {offer_id}")
        deal = dict(data["deal"])
        held.append(Tentative(connection.site.name, view.id, deal, view.deadline, view))
    return held


def confirm_all(connection: SiteConnection, tentatives: Sequence[Tentative]) -> List[Receipt]:
    """A receipt for each reservation, each verified as a single confirm's is; one request
    with one signature over them all where the site takes batches."""
    parts = max_parts(connection)
    if not parts:
        return [connection.confirm(tentative) for tentative in tentatives]
    connection.site_public_key()  # known before anything is confirmed, to check receipts
    receipts: List[Receipt] = []
    for chunk in _chunks(list(tentatives), parts, _confirm_part):
        deals = [tentative.deal for tentative in chunk]
        body = documents.batch_confirm_body(deals, connection.signing_key(), connection.site.key_id)
        raw = connection.request("POST", "/v1/reservations/confirm", body)
        views = _views(connection, raw, len(chunk))
        for tentative, view, data in zip(chunk, views, raw["reservations"]):
            if data.get("receipt") is None:
                raise connection.bad(
                    f"the confirm of {tentative.reservation_id} answered no receipt "
                    f"(state {view.state})"
                )
            receipts.append(connection.verified_receipt(data["receipt"], tentative.deal))
    return receipts


def _views(connection: SiteConnection, raw: Mapping[str, Any], count: int) -> List[ReservationView]:
    answer = connection.parsed(BatchReservations, raw)
    if len(answer.reservations) != count:
        raise connection.bad(f"{count} parts were answered {len(answer.reservations)} times")
    return answer.reservations


def _confirm_part(tentative: Tentative) -> Mapping[str, Any]:
    return {"reservation_id": tentative.reservation_id, "receipt_id": "0" * 64}


def _chunks(items: List[_T], most: int, body: Any) -> List[List[_T]]:
    """``items`` in order, in runs of at most ``most`` whose JSON bodies (``body(item)``)
    fit :data:`MAX_BODY_BYTES`."""
    runs: List[List[_T]] = [[]]
    size = 0
    for item in items:
        length = len(json.dumps(body(item))) + 1
        if runs[-1] and (len(runs[-1]) >= most or size + length > MAX_BODY_BYTES):
            runs.append([])
            size = 0
        runs[-1].append(item)
        size += length
    return [run for run in runs if run]
