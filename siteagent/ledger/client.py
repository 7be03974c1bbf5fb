"""The agent's side of a ledger service (``siteagent ledger serve``): books receipts and
refunds over HTTPS, with the standard library only.

A federation's sites share one bank, so that a buyer's balance is one figure whatever site it
bought from. The agent still keeps every receipt in its own store before it asks the ledger
to book it, and booking is idempotent on the receipt id, so a ledger that is down costs no
receipt: the agent answers 502 and the buyer's retried confirm (or cancel) books it.

The service's refusals come back as the same :class:`~siteagent.ledger.LedgerError` kinds the
embedded ledger raises (with the service's code), so the API treats both alike; a service
that cannot be reached, times out or answers something else is :class:`LedgerUnavailable`.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Type, TypeVar

from siteagent.ledger.bank import (
    InsufficientFunds,
    LedgerConflict,
    LedgerError,
    LedgerNotFound,
    LedgerRefused,
    LedgerUnavailable,
    Transaction,
)
from siteagent.protocol.documents import Cancellation, Receipt

T = TypeVar("T")

#: Seconds a booking may take: it is made while a buyer's confirm waits for its answer.
TIMEOUT_S = 10.0

#: The service's refusals, by status: the same error kinds the embedded ledger raises.
REFUSALS: Dict[int, Type[LedgerError]] = {
    402: InsufficientFunds,
    404: LedgerNotFound,
    409: LedgerConflict,
    422: LedgerRefused,
}


class RemoteLedger:
    """A client of a ledger service at ``url``, trusting ``ca`` for its TLS certificate (the
    system's trusted CAs when None)."""

    def __init__(self, url: str, ca: Optional[Path] = None, timeout: float = TIMEOUT_S) -> None:
        if not url.startswith("https://"):
            raise ValueError(f"a ledger service is reached over HTTPS only, not {url!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._tls = ssl.create_default_context(cafile=None if ca is None else str(ca))
        self._tls.minimum_version = ssl.TLSVersion.TLSv1_2

    def book(self, receipt: Receipt) -> Transaction:
        """Book a doubly signed receipt (the service checks both signatures)."""
        return self._post("/v1/receipts", receipt.to_json(), Transaction.from_json)

    def refund(self, cancellation: Cancellation) -> Optional[Transaction]:
        """Book the refund of a cancelled deal (the service checks the site's signature);
        None for a void of a receipt the service never booked."""
        return self._post("/v1/refunds", cancellation.to_json(), refund_answer)

    def close(self) -> None:
        """Nothing to close: every request opens its own connection."""

    def _post(self, path: str, document: Dict[str, Any], answer: Callable[[Any], T]) -> T:
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps(document).encode(),
            headers={"Content-Type": "application/json", "Accept": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._tls) as reply:
                return answer(json.load(reply))
        except urllib.error.HTTPError as error:
            raise refusal(self.url, error) from None
        except (OSError, ValueError) as exc:  # refused, timed out, TLS failure, not JSON
            raise LedgerUnavailable(
                "unavailable", f"the ledger service at {self.url} did not answer ({exc})"
            ) from None


def refund_answer(data: Any) -> Optional[Transaction]:
    """The service's answer to a refund: its transaction, or None for a void it kept."""
    if isinstance(data, dict) and set(data) == {"voided"}:
        return None
    return Transaction.from_json(data)


def refusal(url: str, error: urllib.error.HTTPError) -> LedgerError:
    """The service's JSON error answer as the ledger error it stands for."""
    try:
        detail = json.load(error)["error"]
        code, message = str(detail["code"]), str(detail["message"])
    except (OSError, ValueError, KeyError, TypeError):
        code, message = "unavailable", f"HTTP {error.code} {error.reason}"
    kind = REFUSALS.get(error.code)
    if kind is None:
        return LedgerUnavailable(code, f"the ledger service at {url} failed: {message}")
    return kind(code, message)
