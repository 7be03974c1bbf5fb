"""Request authentication: a state-changing request must be signed (RFC 9421, Ed25519) by an
authorized client, recently, once, over its method, target and body.

Everything here is framework-independent: the API hands in a request's method, URL, headers
and body and gets back the authenticated client, or a :class:`SecurityError`.
"""

from __future__ import annotations

import heapq
import threading
import time
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from siteagent.protocol import httpsig
from siteagent.security.clients import AuthorizedClient
from siteagent.security.errors import ReplayCacheFull, Unauthenticated

#: Components a state-changing request must sign: the method, the body (by its digest), and
#: where it goes (the whole target URI, or authority + path + query: a proxy that rewrites the
#: scheme or port may make the first impossible, so the second is accepted too).
REQUIRED_COMPONENTS = ("@method", "content-digest")
TARGET_COMPONENTS = (("@target-uri",), ("@authority", "@path", "@query"))

#: How far in the future a signature's ``created`` may be (clocks differ a little).
CLOCK_SKEW_S = 30


class NonceCache:
    """Nonces seen within the replay window, per key, forgotten once their window has passed.

    Only nonces of verified signatures are recorded, so an unauthenticated sender cannot fill
    it. When it is full of live nonces it refuses rather than forgets: forgetting a live
    nonce would let its request be replayed.
    """

    def __init__(self, capacity: int, clock: Callable[[], float] = time.time) -> None:
        self.capacity = capacity
        self._clock = clock
        self._until: Dict[Tuple[str, str], float] = {}
        self._expiry: List[Tuple[float, Tuple[str, str]]] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._until)

    def remember(self, key_id: str, nonce: str, until: float) -> bool:
        """Record a nonce as used until ``until``; False if it was already used."""
        with self._lock:
            now = self._clock()
            while self._expiry and self._expiry[0][0] <= now:
                _, old = heapq.heappop(self._expiry)
                if self._until.get(old, now + 1) <= now:
                    del self._until[old]
            entry = (key_id, nonce)
            if entry in self._until:
                return False
            if len(self._until) >= self.capacity:
                raise ReplayCacheFull(
                    "replay_cache_full",
                    "the agent is remembering too many recent signatures; retry in a minute",
                )
            self._until[entry] = until
            heapq.heappush(self._expiry, (until, entry))
            return True


class Authenticator:
    """Checks that a state-changing request is signed (RFC 9421, Ed25519) by an authorized
    client, recently, once, over its method, target and body."""

    def __init__(
        self,
        clients: Mapping[str, AuthorizedClient],
        max_age_s: int = 300,
        nonces: Optional[NonceCache] = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.clients = clients
        self.max_age_s = max_age_s
        self.nonces = NonceCache(100_000, clock) if nonces is None else nonces
        self._clock = clock

    def authenticate(
        self, method: str, url: str, headers: httpsig.Headers, body: bytes
    ) -> AuthorizedClient:
        """The client that signed this request, or Unauthenticated / ReplayCacheFull."""
        fields = httpsig.normalize_headers(headers)
        try:
            entries = httpsig.parse_signatures(fields)
        except httpsig.SignatureError as exc:
            raise Unauthenticated("malformed_signature", str(exc)) from None
        if not entries:
            raise Unauthenticated(
                "unsigned", "this request must be signed (HTTP Message Signatures, RFC 9421)"
            )
        known = [entry for entry in entries if entry.param("keyid") in self.clients]
        if not known:
            names = ", ".join(repr(entry.param("keyid")) for entry in entries)
            raise Unauthenticated("unknown_key", f"no authorized client has key id {names}")
        entry = known[0]
        client = self.clients[str(entry.param("keyid"))]
        self._check_params(entry)
        self._check_coverage(entry)
        try:
            httpsig.verify(method, url, fields, entry, client.public_key)
            httpsig.check_content_digest(fields["content-digest"], body)
        except httpsig.SignatureError as exc:
            raise Unauthenticated("bad_signature", str(exc)) from None
        created = entry.param("created")
        assert isinstance(created, int)  # checked by _check_params
        nonce = str(entry.param("nonce"))
        if not self.nonces.remember(client.key_id, nonce, created + self.max_age_s + CLOCK_SKEW_S):
            raise Unauthenticated(
                "replayed_signature",
                "this signature was already used; sign the request again with a new nonce",
            )
        return client

    def _check_params(self, entry: httpsig.SignatureEntry) -> None:
        alg = entry.param("alg")
        if alg is not None and alg != httpsig.ALGORITHM:
            raise Unauthenticated("unsupported_algorithm", f'use alg "ed25519", not {alg!r}')
        created, expires, nonce = (
            entry.param("created"),
            entry.param("expires"),
            entry.param("nonce"),
        )
        if not isinstance(created, int) or isinstance(created, bool):
            raise Unauthenticated("malformed_signature", "the signature needs a created time")
        if not isinstance(nonce, str) or not 1 <= len(nonce) <= 256:
            raise Unauthenticated("malformed_signature", "the signature needs a nonce")
        now = self._clock()
        if created > now + CLOCK_SKEW_S:
            raise Unauthenticated(
                "signature_expired", "the signature was created in the future: check the clock"
            )
        if created < now - self.max_age_s:
            raise Unauthenticated(
                "signature_expired",
                f"the signature is {int(now - created)} s old; at most {self.max_age_s} s",
            )
        if isinstance(expires, int) and expires < now:
            raise Unauthenticated("signature_expired", "the signature has expired")

    @staticmethod
    def _check_coverage(entry: httpsig.SignatureEntry) -> None:
        covered = set(entry.components)
        missing = [component for component in REQUIRED_COMPONENTS if component not in covered]
        if not any(covered.issuperset(target) for target in TARGET_COMPONENTS):
            missing.append("@target-uri")
        if missing:
            raise Unauthenticated(
                "insufficient_coverage", "the signature must cover " + ", ".join(missing)
            )

