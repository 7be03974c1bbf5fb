"""Every error code an agent or a bank answers with, and its HTTP status: one table.

Errors are ``{"error": {"code", "message", "field"?, "problems"?}}``. The status says what kind
of failure it is; the code says which, and never changes meaning, so that a buyer written in
any language can act on it (docs/protocol.md lists the same table). A code that is not here is a bug
of the server, answered 500 ``internal_error``.
"""

from __future__ import annotations

from typing import Dict, Mapping, Tuple

#: The bank's own codes (``siteagent ledger serve`` answers them; an agent whose booking the bank
#: refused answers ``ledger_`` + the code with 502, or 503 when the bank did not answer, see
#: :data:`STATUS`; a confirm the buyer cannot pay is ``insufficient_funds`` at both, 402).
LEDGER_CODES: Mapping[str, int] = {
    "insufficient_funds": 402,
    "not_account_holder": 403,
    "not_a_site": 403,
    "unknown_account": 404,
    "unknown_receipt": 404,
    "reserved_account": 409,
    "participant_conflict": 409,
    "reservation_already_booked": 409,
    "already_refunded": 409,
    "receipt_voided": 409,
    "malformed_receipt": 422,
    "malformed_cancellation": 422,
    "unknown_participant": 422,
    "signer_mismatch": 422,
    "bad_user_signature": 422,
    "bad_site_signature": 422,
    "penalty_not_agreed": 422,
    "unavailable": 503,
}

#: (status, codes) in the order docs/protocol.md shows them.
_BY_STATUS: Tuple[Tuple[int, Tuple[str, ...]], ...] = (
    (
        401,
        (
            "unsigned",
            "malformed_signature",
            "wrong_authority",
            "unknown_key",
            "unsupported_algorithm",
            "insufficient_coverage",
            "bad_signature",
            "signature_expired",
            "replayed_signature",
        ),
    ),
    (403, ("not_owner",)),
    (
        404,
        ("not_found", "unknown_offer", "unknown_reservation", "unknown_bid", "metrics_disabled"),
    ),
    (405, ("method_not_allowed",)),
    (
        409,
        (
            "idempotency_key_reused",
            "illegal_transition",
            "reservation_failed",
            "offer_expired",
            "offer_used",
            "offer_window_passed",
            "offer_capacity_gone",
            "auction_conflict",
        ),
    ),
    (413, ("body_too_large",)),
    (
        422,
        (
            "invalid_request",
            "malformed_confirm",
            "confirm_key_mismatch",
            "deal_mismatch",
            "bad_confirm_signature",
        ),
    ),
    (429, ("rate_limited", "too_many_offers", "too_many_bids")),
    (431, ("headers_too_large",)),
    (500, ("internal_error",)),
    (502, ("backend_error",)),
    (
        503,
        (
            "backend_unavailable",
            "no_snapshot",
            "snapshot_stale",
            "store_unavailable",
            "busy",
            "replay_cache_full",
        ),
    ),
)


def _table() -> Dict[str, int]:
    table = {code: status for status, codes in _BY_STATUS for code in codes}
    table.update(LEDGER_CODES)
    table.update({f"ledger_{code}": 502 for code in LEDGER_CODES})
    table["ledger_unavailable"] = 503  # passes by itself: the agent retries, so may the buyer
    return table


#: Error code -> HTTP status, for the agent's API and the bank's service alike.
STATUS: Mapping[str, int] = _table()


def status_of(code: str) -> int:
    """The HTTP status of ``code``; 500 for a code nobody registered (a server bug)."""
    return STATUS.get(code, 500)
