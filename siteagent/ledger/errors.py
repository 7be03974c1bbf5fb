"""The bank's refusals, each with a code that has its HTTP status
(:data:`siteagent.protocol.errors.LEDGER_CODES`): raised by the bank's rules, by its databases
and by the agent's client of a ledger service alike (all are importable from ``bank``)."""

from __future__ import annotations

from typing import Optional

from siteagent.core.errors import SiteagentError


class LedgerError(SiteagentError):
    """A refused operation: ``code`` stable for programs (the bank's codes and their HTTP
    statuses are :data:`siteagent.protocol.errors.LEDGER_CODES`), ``field`` the document's
    field at fault, if one is."""

    def __init__(self, message: str, *, code: str, field: Optional[str] = None) -> None:
        super().__init__(message, code=code, field=field)


class LedgerRefused(LedgerError):
    """422: the receipt or cancellation cannot be booked (bad signature, unknown signer,
    malformed deal) — the paper's Banking Agent answers such a message with Refuse."""


class LedgerConflict(LedgerError):
    """409: it contradicts what is booked (another receipt for the same reservation, a
    participant registered with another key, a second cancellation with another penalty)."""


class LedgerNotFound(LedgerError):
    """404: no such account or receipt."""


class LedgerForbidden(LedgerError):
    """403: the account is another participant's (its holder and the sites may read it)."""


class InsufficientFunds(LedgerError):
    """402: the buyer cannot pay the price: its balance less the price would fall below minus
    its credit. Nothing was booked; a deposit (or a larger credit) makes the same receipt
    bookable."""


class LedgerUnavailable(LedgerError):
    """503: a ledger service did not answer (or answered nonsense); nothing is known to be
    booked, and booking the same receipt again later is safe (booking is idempotent)."""
