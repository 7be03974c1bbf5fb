"""Request authentication: a request must be signed (RFC 9421, Ed25519) by an authorized
client, for this site, recently, once, over its method, target and body.

Everything here is framework-independent: the API hands in a request's method, URL, headers
and body and gets back the authenticated client, or a :class:`SecurityError`.
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from typing import Callable, Collection, Dict, List, Mapping, Optional, Tuple

from siteagent.core.defaults import DEFAULT_NONCES_PER_CLIENT
from siteagent.protocol import httpsig
from siteagent.security.clients import AuthorizedClient
from siteagent.security.errors import ReplayCacheFull, Unauthenticated
from siteagent.security.replay import SavedNonces

#: Components a state-changing request must sign: the method, the body (by its digest), and
#: where it goes (the whole target URI, or authority + path + query: a proxy that rewrites the
#: scheme or port may make the first impossible, so the second is accepted too).
REQUIRED_COMPONENTS = ("@method", "content-digest")
TARGET_COMPONENTS = (("@target-uri",), ("@authority", "@path", "@query"))

#: How far in the future a signature's ``created`` may be (clocks differ a little).
CLOCK_SKEW_S = 30


class NonceCache:
    """Nonces seen within the replay window, per client, forgotten once their window has
    passed.

    Only nonces of verified signatures are recorded, so an unauthenticated sender cannot fill
    it, and each client has a bound of its own (``per_client``): a client that signs faster
    than its nonces lapse is refused (503, until its oldest lapse) and cannot evict or block
    another client's. A full cache refuses rather than forgets: forgetting a live nonce would
    let its request be replayed.
    """

    def __init__(
        self,
        per_client: int,
        clock: Callable[[], float] = time.time,
        saved: Optional[SavedNonces] = None,
    ) -> None:
        self.per_client = per_client
        self._clock = clock
        self._clients: Dict[str, _ClientNonces] = {}
        self._lock = threading.Lock()
        #: Where the nonces a restart must not forget are kept (security/replay.py).
        self.saved = saved
        #: The last second a signature was accepted in, before this start (None: unknown).
        self.used_before = None if saved is None else saved.last_used()
        self._second = -1
        if saved is not None:
            for key_id, nonce, until in saved.live(clock()):
                nonces = self._clients.setdefault(key_id, _ClientNonces())
                nonces.until[nonce] = until
                heapq.heappush(nonces.expiry, (until, nonce))

    def __len__(self) -> int:
        """The nonces remembered now (a client's lapsed ones are dropped when it next signs)."""
        with self._lock:
            now = self._clock()
            live = (u for nonces in self._clients.values() for u in nonces.until.values())
            return sum(1 for until in live if until > now)

    def remember(self, key_id: str, nonce: str, until: float, durable: bool = False) -> bool:
        """Record ``key_id``'s nonce as used until ``until``; False if it was already used.
        Raises ReplayCacheFull when that client's nonces fill its bound. ``durable``: a
        restart must not forget it either (written to ``saved``, if there is one)."""
        with self._lock:
            nonces = self._clients.setdefault(key_id, _ClientNonces())
            now = self._clock()
            nonces.forget_until(now)
            if nonce in nonces.until:
                return False
            if len(nonces.until) >= self.per_client:
                retry = max(1, int(nonces.expiry[0][0] - now) + 1)
                raise ReplayCacheFull(
                    f"{key_id} signed more requests than the agent remembers within the replay "
                    f"window ({self.per_client}); retry in {retry} s",
                    code="replay_cache_full",
                    retry_after_s=retry,
                )
            nonces.until[nonce] = until
            heapq.heappush(nonces.expiry, (until, nonce))
            if self.saved is not None:
                if durable:
                    self.saved.add(key_id, nonce, until, now)
                if math.floor(now) != self._second:
                    self._second = math.floor(now)
                    self.saved.used_in(self._second)
            return True


class _ClientNonces:
    """One client's nonces: when each may be forgotten, and a heap of those times."""

    def __init__(self) -> None:
        self.until: Dict[str, float] = {}
        self.expiry: List[Tuple[float, str]] = []

    def forget_until(self, now: float) -> None:
        while self.expiry and self.expiry[0][0] <= now:
            _, nonce = heapq.heappop(self.expiry)
            if self.until.get(nonce, now + 1) <= now:
                del self.until[nonce]


class Authenticator:
    """Checks that a request is signed (RFC 9421, Ed25519) by an authorized client, for this
    site, recently, once, over its method, target and body.

    ``authorities`` are the ``host[:port]`` names the site answers to (as RFC 9421's
    ``@authority`` writes them): a signature made for another site is refused, even if a client
    sends it here with that site's name in ``Host``. No signature is accepted twice, across
    restarts and reloads too: signatures created before this authenticator started are refused
    (its nonces are in memory), those dated ahead of the clock have their nonces kept across
    restarts (the nonce cache's ``saved``), and widening ``max_age_s`` never reopens the window
    for signatures whose nonces were already forgotten.
    """

    def __init__(
        self,
        clients: Mapping[str, AuthorizedClient],
        authorities: Collection[str],
        max_age_s: int = 300,
        nonces: Optional[NonceCache] = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.clients = clients
        self.authorities = frozenset(authorities)
        self.nonces = NonceCache(DEFAULT_NONCES_PER_CLIENT, clock) if nonces is None else nonces
        self._clock = clock
        self._max_age_s = max_age_s
        #: nonces are kept this long after their signature was made: the widest window ever
        self._retention_s = max_age_s
        #: no signature created before this is accepted: its nonce may have been forgotten
        #: (nor one of the start second, if the last run accepted signatures in it)
        started = math.floor(clock())
        used = self.nonces.used_before
        self._valid_from = started + 1 if used is not None and used >= started else started

    @property
    def max_age_s(self) -> int:
        """How old a signature may be (seconds)."""
        return self._max_age_s

    @max_age_s.setter
    def max_age_s(self, seconds: int) -> None:
        if seconds > self._retention_s:
            # nonces of signatures older than the old window were forgotten already
            self._valid_from = max(self._valid_from, math.floor(self._clock()) - self._retention_s)
            self._retention_s = seconds
        self._max_age_s = seconds

    def authenticate(
        self, method: str, url: str, headers: httpsig.Headers, body: bytes
    ) -> AuthorizedClient:
        """The client that signed this request, or Unauthenticated / ReplayCacheFull."""
        fields = httpsig.normalize_headers(headers)
        try:
            entries = httpsig.parse_signatures(fields)
            target = httpsig.authority(url)
        except httpsig.SignatureError as exc:
            raise Unauthenticated(str(exc), code="malformed_signature") from None
        if not entries:
            raise Unauthenticated(
                "this request must be signed (HTTP Message Signatures, RFC 9421)", code="unsigned"
            )
        if target not in self.authorities:
            raise Unauthenticated(
                f"this site answers to {', '.join(sorted(self.authorities))}, not {target}: "
                "sign the request for the address it is sent to",
                code="wrong_authority",
            )
        known = [entry for entry in entries if entry.param("keyid") in self.clients]
        if not known:
            names = ", ".join(repr(entry.param("keyid")) for entry in entries)
            raise Unauthenticated(f"no authorized client has key id {names}", code="unknown_key")
        entry = known[0]
        client = self.clients[str(entry.param("keyid"))]
        self._check_params(entry)
        self._check_coverage(entry)
        try:
            httpsig.verify(method, url, fields, entry, client.public_key)
            httpsig.check_content_digest(fields["content-digest"], body)
        except httpsig.SignatureError as exc:
            raise Unauthenticated(str(exc), code="bad_signature") from None
        created = entry.param("created")
        assert isinstance(created, int)  # checked by _check_params
        nonce = str(entry.param("nonce"))
        until = created + self._retention_s + CLOCK_SKEW_S
        # dated past the second it is used in: a restart's "signed before start" rule does
        # not cover it, so its nonce must outlive the process (security/replay.py)
        ahead = created > math.floor(self._clock())
        if not self.nonces.remember(client.key_id, nonce, until, durable=ahead):
            raise Unauthenticated(
                "this signature was already used; sign the request again with a new nonce",
                code="replayed_signature",
            )
        return client

    def _check_params(self, entry: httpsig.SignatureEntry) -> None:
        alg = entry.param("alg")
        if alg != httpsig.ALGORITHM:
            got = "none" if alg is None else repr(alg)
            raise Unauthenticated(
                f'sign with alg "ed25519", not {got}', code="unsupported_algorithm"
            )
        created, expires, nonce = (
            entry.param("created"),
            entry.param("expires"),
            entry.param("nonce"),
        )
        if not isinstance(created, int) or isinstance(created, bool):
            raise Unauthenticated("the signature needs a created time", code="malformed_signature")
        if not isinstance(nonce, str) or not 1 <= len(nonce) <= 256:
            raise Unauthenticated("the signature needs a nonce", code="malformed_signature")
        now = self._clock()
        if created > now + CLOCK_SKEW_S:
            raise Unauthenticated(
                "the signature was created in the future: check the clock", code="signature_expired"
            )
        if created < now - self._max_age_s:
            raise Unauthenticated(
                f"the signature is {int(now - created)} s old; at most {self._max_age_s} s",
                code="signature_expired",
            )
        if created < self._valid_from:
            raise Unauthenticated(
                "the signature was made before the agent last started or widened its window "
                "and could be a replay; sign the request again",
                code="signature_expired",
            )
        if isinstance(expires, int) and expires < now:
            raise Unauthenticated("the signature has expired", code="signature_expired")

    @staticmethod
    def _check_coverage(entry: httpsig.SignatureEntry) -> None:
        covered = set(entry.components)
        missing = [component for component in REQUIRED_COMPONENTS if component not in covered]
        if not any(covered.issuperset(target) for target in TARGET_COMPONENTS):
            missing.append("@target-uri")
        if missing:
            raise Unauthenticated(
                "the signature must cover " + ", ".join(missing), code="insufficient_coverage"
            )
