"""Every error code an agent or a bank answers with, and its HTTP status: one table.

Errors are ``{"error": {"code", "message", "field"?, "problems"?}}``. The status says what kind
of failure it is; the code says which, and never changes meaning, so that a buyer written in
any language can act on it (docs/protocol.md lists the same table). Every code is a constant
here, in :data:`STATUS` or in :data:`CLIENT_ONLY` (tests/unit/test_error_codes.py checks every
class and every ``code=`` literal); an unregistered code is a bug, logged and answered 500.
"""

from __future__ import annotations

import logging
from typing import AbstractSet, Dict, Mapping, Tuple

log = logging.getLogger("siteagent.errors")

#: The codes an agent or a bank answers over HTTP (their statuses: :data:`STATUS`).
INSUFFICIENT_FUNDS = "insufficient_funds"
NOT_ACCOUNT_HOLDER = "not_account_holder"
NOT_A_SITE = "not_a_site"
UNKNOWN_ACCOUNT = "unknown_account"
UNKNOWN_RECEIPT = "unknown_receipt"
RESERVED_ACCOUNT = "reserved_account"
PARTICIPANT_CONFLICT = "participant_conflict"
RESERVATION_ALREADY_BOOKED = "reservation_already_booked"
ALREADY_REFUNDED = "already_refunded"
RECEIPT_VOIDED = "receipt_voided"
MALFORMED_RECEIPT = "malformed_receipt"
MALFORMED_CANCELLATION = "malformed_cancellation"
UNKNOWN_PARTICIPANT = "unknown_participant"
SIGNER_MISMATCH = "signer_mismatch"
BAD_USER_SIGNATURE = "bad_user_signature"
BAD_SITE_SIGNATURE = "bad_site_signature"
PENALTY_NOT_AGREED = "penalty_not_agreed"
UNAVAILABLE = "unavailable"
UNSIGNED = "unsigned"
MALFORMED_SIGNATURE = "malformed_signature"
WRONG_AUTHORITY = "wrong_authority"
UNKNOWN_KEY = "unknown_key"
UNSUPPORTED_ALGORITHM = "unsupported_algorithm"
INSUFFICIENT_COVERAGE = "insufficient_coverage"
BAD_SIGNATURE = "bad_signature"
SIGNATURE_EXPIRED = "signature_expired"
REPLAYED_SIGNATURE = "replayed_signature"
NOT_OWNER = "not_owner"
NOT_FOUND = "not_found"
UNKNOWN_OFFER = "unknown_offer"
UNKNOWN_RESERVATION = "unknown_reservation"
UNKNOWN_BID = "unknown_bid"
METRICS_DISABLED = "metrics_disabled"
METHOD_NOT_ALLOWED = "method_not_allowed"
IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
ILLEGAL_TRANSITION = "illegal_transition"
RESERVATION_FAILED = "reservation_failed"
OFFER_EXPIRED = "offer_expired"
OFFER_USED = "offer_used"
OFFER_WINDOW_PASSED = "offer_window_passed"
OFFER_CAPACITY_GONE = "offer_capacity_gone"
AUCTION_CONFLICT = "auction_conflict"
BODY_TOO_LARGE = "body_too_large"
INVALID_REQUEST = "invalid_request"
MALFORMED_CONFIRM = "malformed_confirm"
CONFIRM_KEY_MISMATCH = "confirm_key_mismatch"
DEAL_MISMATCH = "deal_mismatch"
BAD_CONFIRM_SIGNATURE = "bad_confirm_signature"
RATE_LIMITED = "rate_limited"
TOO_MANY_OFFERS = "too_many_offers"
TOO_MANY_BIDS = "too_many_bids"
HEADERS_TOO_LARGE = "headers_too_large"
INTERNAL_ERROR = "internal_error"
BACKEND_ERROR = "backend_error"
BACKEND_UNAVAILABLE = "backend_unavailable"
NO_SNAPSHOT = "no_snapshot"
SNAPSHOT_STALE = "snapshot_stale"
STORE_UNAVAILABLE = "store_unavailable"
BUSY = "busy"
REPLAY_CACHE_FULL = "replay_cache_full"
#: The bank's codes as the agent passes them on: ``ledger_`` + the bank's code (:func:`ledger`).
LEDGER_PREFIX = "ledger_"
LEDGER_UNAVAILABLE = LEDGER_PREFIX + UNAVAILABLE
#: Answered 500 on purpose: conditions the server resolves itself (a lost race retried, a
#: price that refuses, a database or a listener that failed); one reaching a buyer is a bug.
ERROR = "error"  # SiteagentError's own default: a subclass that names no code
STALE_STATE = "stale_state"
NO_OFFER = "no_offer"
CANNOT_START = "cannot_start"
LEDGER_DATABASE = LEDGER_PREFIX + "database"

#: Reported by a command (``siteagent``, ``siteagent-client``), never answered over HTTP.
UNREACHABLE = "unreachable"
INVALID_ANSWER = "invalid_answer"
JOURNAL_ERROR = "journal_error"
INVALID_SITES_FILE = "invalid_sites_file"
INVALID_JOBS_FILE = "invalid_jobs_file"
INVALID_CONFIGURATION = "invalid_configuration"
INVALID_VALUE = "invalid_value"
UNSAFE_FILE_MODE = "unsafe_file_mode"
BAD_INPUT = "bad_input"
INTERRUPTED = "interrupted"
NO_PLAN = "no_plan"
INVALID_WORKFLOW = "invalid_workflow"

#: The bank's own codes (``siteagent ledger serve`` answers them; an agent whose booking the bank
#: refused answers ``ledger_`` + the code with 502, or 503 when the bank did not answer, see
#: :data:`STATUS`; a confirm the buyer cannot pay is ``insufficient_funds`` at both, 402).
LEDGER_CODES: Mapping[str, int] = {
    INSUFFICIENT_FUNDS: 402,
    NOT_ACCOUNT_HOLDER: 403,
    NOT_A_SITE: 403,
    UNKNOWN_ACCOUNT: 404,
    UNKNOWN_RECEIPT: 404,
    RESERVED_ACCOUNT: 409,
    PARTICIPANT_CONFLICT: 409,
    RESERVATION_ALREADY_BOOKED: 409,
    ALREADY_REFUNDED: 409,
    RECEIPT_VOIDED: 409,
    MALFORMED_RECEIPT: 422,
    MALFORMED_CANCELLATION: 422,
    UNKNOWN_PARTICIPANT: 422,
    SIGNER_MISMATCH: 422,
    BAD_USER_SIGNATURE: 422,
    BAD_SITE_SIGNATURE: 422,
    PENALTY_NOT_AGREED: 422,
    UNAVAILABLE: 503,
}

#: (status, codes) in the order docs/protocol.md shows them.
_BY_STATUS: Tuple[Tuple[int, Tuple[str, ...]], ...] = (
    (
        401,
        (
            UNSIGNED,
            MALFORMED_SIGNATURE,
            WRONG_AUTHORITY,
            UNKNOWN_KEY,
            UNSUPPORTED_ALGORITHM,
            INSUFFICIENT_COVERAGE,
            BAD_SIGNATURE,
            SIGNATURE_EXPIRED,
            REPLAYED_SIGNATURE,
        ),
    ),
    (403, (NOT_OWNER,)),
    (
        404,
        (NOT_FOUND, UNKNOWN_OFFER, UNKNOWN_RESERVATION, UNKNOWN_BID, METRICS_DISABLED),
    ),
    (405, (METHOD_NOT_ALLOWED,)),
    (
        409,
        (
            IDEMPOTENCY_KEY_REUSED,
            ILLEGAL_TRANSITION,
            RESERVATION_FAILED,
            OFFER_EXPIRED,
            OFFER_USED,
            OFFER_WINDOW_PASSED,
            OFFER_CAPACITY_GONE,
            AUCTION_CONFLICT,
        ),
    ),
    (413, (BODY_TOO_LARGE,)),
    (
        422,
        (
            INVALID_REQUEST,
            MALFORMED_CONFIRM,
            CONFIRM_KEY_MISMATCH,
            DEAL_MISMATCH,
            BAD_CONFIRM_SIGNATURE,
        ),
    ),
    (429, (RATE_LIMITED, TOO_MANY_OFFERS, TOO_MANY_BIDS)),
    (431, (HEADERS_TOO_LARGE,)),
    (500, (INTERNAL_ERROR, ERROR, STALE_STATE, NO_OFFER, CANNOT_START, LEDGER_DATABASE)),
    (502, (BACKEND_ERROR,)),
    (
        503,
        (
            BACKEND_UNAVAILABLE,
            NO_SNAPSHOT,
            SNAPSHOT_STALE,
            STORE_UNAVAILABLE,
            BUSY,
            REPLAY_CACHE_FULL,
        ),
    ),
)


def _table() -> Dict[str, int]:
    table = {code: status for status, codes in _BY_STATUS for code in codes}
    table.update(LEDGER_CODES)
    table.update({ledger(code): 502 for code in LEDGER_CODES})
    table[LEDGER_UNAVAILABLE] = 503  # passes by itself: the agent retries, so may the buyer
    return table


def ledger(code: str) -> str:
    """The agent's code for the bank's ``code``: ``ledger_`` + it."""
    return LEDGER_PREFIX + code


#: Error code -> HTTP status, for the agent's API and the bank's service alike.
STATUS: Mapping[str, int] = _table()

#: The codes only a command reports (no HTTP status: no server answers them).
CLIENT_ONLY: AbstractSet[str] = frozenset(
    {
        UNREACHABLE,
        INVALID_ANSWER,
        JOURNAL_ERROR,
        INVALID_SITES_FILE,
        INVALID_JOBS_FILE,
        INVALID_CONFIGURATION,
        INVALID_VALUE,
        UNSAFE_FILE_MODE,
        BAD_INPUT,
        INTERRUPTED,
        NO_PLAN,
        INVALID_WORKFLOW,
    }
)


def status_of(code: str) -> int:
    """The HTTP status of ``code``; 500 for a client-only code, and for a code nobody
    registered (a bug: logged at ERROR, and tests/unit/test_error_codes.py fails on it)."""
    if code not in STATUS and code not in CLIENT_ONLY:
        log.error("error code %r is in neither STATUS nor CLIENT_ONLY (a bug)", code)
    return STATUS.get(code, 500)
