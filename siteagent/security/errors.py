"""What the security checks refuse, each with the HTTP status it is answered with and why.

- **401** for anything that leaves the sender unauthenticated: no signature, a malformed one,
  an unknown key, a signature that does not verify (tampered method, path or body), one that is
  too old, and a **replayed** one. A replay is refused as 401, not 409, because what is wrong is
  the credential, not the resource: a captured signature is no proof of who sends it now, and
  409 is kept for conflicts in the resource's state (a reservation already confirmed, an
  idempotency key reused) that a client resolves differently. Nothing in RFC 9421 asks for
  another status; its section 5 lets a server name the signature it wants, which the 401 does
  with ``Accept-Signature``. A client that must retry signs again with a fresh nonce.
- **403** for an authenticated client acting on another client's reservation (that is the
  lifecycle's ``NotOwner``: ownership is a reservation's, not a signature's, business).
- **422** for a confirm whose signed deal does not verify or does not match the reservation.
- **503** when the nonce cache is full of live nonces: refusing is the only way to stay safe
  against replays, and the condition passes as the window slides (the API adds Retry-After).
"""

from __future__ import annotations

from typing import Dict, Optional

from siteagent.core.errors import SiteagentError
from siteagent.protocol.signing import DEFAULT_COMPONENTS


class SecurityError(SiteagentError):
    """A refused request: ``code`` a stable name a program can test (its HTTP status is in
    :data:`siteagent.protocol.errors.STATUS`), the message a sentence a person can act on."""

    def __init__(self, message: str, *, code: str, retry_after_s: Optional[int] = None) -> None:
        super().__init__(message, code=code, retry_after_s=retry_after_s)


class Unauthenticated(SecurityError):
    """401: the request does not prove who sent it."""

    @property
    def headers(self) -> Dict[str, str]:
        # RFC 9421 section 5.1: tell the client which signature would be accepted
        components = " ".join(f'"{component}"' for component in DEFAULT_COMPONENTS)
        return {"Accept-Signature": f'sig1=({components});created;keyid;nonce;alg="ed25519"'}


class ConfirmRefused(SecurityError):
    """422: a confirm whose signed deal does not verify or is not this reservation's;
    ``field`` names the part of a batch confirm at fault."""

    def __init__(self, message: str, *, code: str, field: Optional[str] = None) -> None:
        super().__init__(message, code=code)
        self.field = field


class ReplayCacheFull(SecurityError):
    """503: too many live nonces to remember another one safely; retry shortly."""
