"""The agent's side of a ledger service (``siteagent ledger serve``): books receipts and
refunds over HTTPS.

A federation's sites share one bank, so that a buyer's balance is one figure whatever site it
bought from. The agent still keeps every receipt in its own store before it asks the ledger
to book it, and booking is idempotent on the receipt id, so a ledger that is down costs no
receipt: the agent answers 502 and the buyer's retried confirm (or cancel) books it.

A confirm waits for its booking, so the connections to the service are kept alive between
bookings (a requests session, its pool shared by the API's threads): a new TLS handshake per
confirm was about a third of its time on loopback. A kept connection the service has closed
is seen closed before it is used again (urllib3 checks) and a new one opened.

The service's refusals come back as the same :class:`~siteagent.ledger.LedgerError` kinds the
embedded ledger raises (with the service's code), so the API treats both alike; a service
that cannot be reached, times out or answers something else is :class:`LedgerUnavailable`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type, TypeVar

import requests
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from requests.adapters import HTTPAdapter

from siteagent.ledger.bank import (
    InsufficientFunds,
    LedgerConflict,
    LedgerError,
    LedgerNotFound,
    LedgerRefused,
    LedgerUnavailable,
    Transaction,
)
from siteagent.protocol import signing
from siteagent.protocol.documents import Cancellation, Receipt
from siteagent.protocol.sessions import NoNetrc, proxies_for

T = TypeVar("T")

#: Seconds a booking may take: it is made while a buyer's confirm waits for its answer.
TIMEOUT_S = 10.0

#: Connections kept to the service: as many as the API has worker threads (anyio's default,
#: 40), so that concurrent confirms never open and drop connections beyond the pool.
KEPT_CONNECTIONS = 40

#: The service's refusals, by status: the same error kinds the embedded ledger raises.
REFUSALS: Dict[int, Type[LedgerError]] = {
    402: InsufficientFunds,
    404: LedgerNotFound,
    409: LedgerConflict,
    422: LedgerRefused,
}


class RemoteLedger:
    """A client of a ledger service at ``url``, trusting ``ca`` for its TLS certificate (the
    system's trusted CAs when None), signing each booking with ``signer`` (the site's key and
    key id: the service refuses an unsigned one)."""

    def __init__(
        self,
        url: str,
        ca: Optional[Path] = None,
        timeout: float = TIMEOUT_S,
        signer: Optional[Tuple[Ed25519PrivateKey, str]] = None,
    ) -> None:
        if not url.startswith("https://"):
            raise ValueError(f"a ledger service is reached over HTTPS only, not {url!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._session = requests.Session()
        self._session.auth = NoNetrc()
        self._session.mount("https://", HTTPAdapter(pool_maxsize=KEPT_CONNECTIONS))
        self._session.verify = True if ca is None else str(ca)
        self._session.headers.update({"Accept": "application/json"})
        self._proxies = proxies_for(self._session, self.url)
        #: The site's key and key id: the bank takes a booking signed by a site only.
        self.signer = signer

    def book(self, receipt: Receipt) -> Transaction:
        """Book a doubly signed receipt (the service checks both signatures)."""
        return self._post("/v1/receipts", receipt.to_json(), Transaction.from_json)

    def book_all(self, receipts: Sequence[Receipt]) -> List[Transaction]:
        """Book a batch confirm's receipts, each request to the service one transaction (all
        or none of its receipts): as many receipts per request as fit the service's default
        body limit, so a large batch takes a few. A service older than batches (404 on the
        route) books them one at a time."""
        booked: List[Transaction] = []
        for chunk in _chunks([receipt.to_json() for receipt in receipts], MAX_BATCH_BYTES):
            try:
                booked += self._post("/v1/receipts/batch", {"receipts": chunk}, transactions)
                continue
            except LedgerNotFound as exc:
                if exc.code != "not_found":  # the route exists; an account or receipt does not
                    raise
            booked += [self._post("/v1/receipts", one, Transaction.from_json) for one in chunk]
        return booked

    def refund(self, cancellation: Cancellation) -> Optional[Transaction]:
        """Book the refund of a cancelled deal (the service checks the site's signature);
        None for a void of a receipt the service never booked."""
        return self._post("/v1/refunds", cancellation.to_json(), refund_answer)

    def close(self) -> None:
        """Close the kept-alive connections."""
        self._session.close()

    def _post(self, path: str, document: Dict[str, Any], answer: Callable[[Any], T]) -> T:
        url = self.url + path
        body = json.dumps(document, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json"}
        if self.signer is not None:
            headers.update(signing.sign_request("POST", url, body, *self.signer))
        try:
            request = requests.Request("POST", url, data=body, headers=headers)
            reply = self._session.send(
                self._session.prepare_request(request),
                timeout=self.timeout,
                proxies=self._proxies,
                allow_redirects=False,  # a receipt goes to the bank named, or nowhere
            )
        except requests.RequestException as exc:  # refused, timed out, TLS failure
            raise LedgerUnavailable(
                f"the ledger service at {self.url} did not answer ({exc})", code="unavailable"
            ) from None
        if not reply.ok:
            raise refusal(self.url, reply.status_code, reply.reason, reply.content)
        try:
            return answer(reply.json())
        except ValueError as exc:  # not JSON, or not a transaction
            raise LedgerUnavailable(
                f"the ledger service at {self.url} answered what is not a transaction ({exc})",
                code="unavailable",
            ) from None


#: The largest batch booking sent in one request: under the 16 KiB a service reads by default
#: (``api.max_body_bytes``), with room for the JSON around the receipts.
MAX_BATCH_BYTES = 15_000


def _chunks(documents: List[Dict[str, Any]], limit: int) -> List[List[Dict[str, Any]]]:
    """``documents`` in order, cut into runs whose JSON fits ``limit`` bytes (at least one
    document per run)."""
    runs: List[List[Dict[str, Any]]] = [[]]
    size = 0
    for document in documents:
        length = len(json.dumps(document)) + 2
        if runs[-1] and size + length > limit:
            runs.append([])
            size = 0
        runs[-1].append(document)
        size += length
    return runs


def transactions(data: Any) -> List[Transaction]:
    """The service's answer to a batch booking: a transaction per receipt."""
    if not isinstance(data, dict) or not isinstance(data.get("transactions"), list):
        raise ValueError("not a list of transactions")
    return [Transaction.from_json(one) for one in data["transactions"]]


def refund_answer(data: Any) -> Optional[Transaction]:
    """The service's answer to a refund: its transaction, or None for a void it kept."""
    if isinstance(data, dict) and set(data) == {"voided"}:
        return None
    return Transaction.from_json(data)


def refusal(url: str, status: int, reason: str, body: bytes) -> LedgerError:
    """The service's JSON error answer as the ledger error it stands for."""
    try:
        detail = json.loads(body)["error"]
        code, message = str(detail["code"]), str(detail["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "unavailable", f"HTTP {status} {reason}"
    kind = REFUSALS.get(status)
    if kind is None:
        return LedgerUnavailable(f"the ledger service at {url} failed: {message}", code=code)
    return kind(message, code=code)
