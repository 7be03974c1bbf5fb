"""Who may talk to the agent and how deals are signed: TLS, keys, request authentication,
replay protection, ownership, and the doubly signed receipts of confirmed reservations.

Everything here is framework-independent: the API hands in a request's method, URL, headers
and body and gets back the authenticated client, or a :class:`SecurityError` that carries the
HTTP status and a stable error code to answer with. So the checks are tested here without a
server, and the server cannot forget one of them.

Statuses, and why:

- **401** for anything that leaves the sender unauthenticated: no signature, a malformed one,
  an unknown key, a signature that does not verify (tampered method, path or body), one that is
  too old, and a **replayed** one. A replay is refused as 401, not 409, because what is wrong is
  the credential, not the resource: a captured signature is no proof of who sends it now, and
  409 is kept for conflicts in the resource's state (a reservation already confirmed, an
  idempotency key reused) that a client resolves differently. Nothing in RFC 9421 asks for
  another status; its section 5 lets a server name the signature it wants, which the 401 does
  with ``Accept-Signature``. A client that must retry signs again with a fresh nonce.
- **403** for an authenticated client acting on another client's reservation.
- **422** for a confirm whose signed deal does not verify or does not match the reservation.
- **503** when the nonce cache is full of live nonces: refusing is the only way to stay safe
  against replays, and the condition passes as the window slides (the API adds Retry-After).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import heapq
import ipaddress
import os
import re
import secrets
import ssl
import threading
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import rfc8785
import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from siteagent import httpsig
from siteagent.config import ConfigError, Invalid, Problem, Reading, Section, name
from siteagent.model import CENT, Offer, Request

#: Components a state-changing request must sign: the method, the body (by its digest), and
#: where it goes (the whole target URI, or authority + path + query: a proxy that rewrites the
#: scheme or port may make the first impossible, so the second is accepted too).
REQUIRED_COMPONENTS = ("@method", "content-digest")
TARGET_COMPONENTS = (("@target-uri",), ("@authority", "@path", "@query"))
#: What a client signs by default (see :func:`sign_request`).
DEFAULT_COMPONENTS = ("@method", "@target-uri", "content-digest")

#: How far in the future a signature's ``created`` may be (clocks differ a little).
CLOCK_SKEW_S = 30

#: Key ids: printable, no quotes or spaces, short (they are Structured Field strings).
KEY_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._@:+-")

#: Scheduler (POSIX-portable) user names, as useradd accepts them by default.
USER_RE = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}\$?$")

#: Host names a self-signed certificate is made for when none are given.
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


# --------------------------------------------------------------------------- errors


class SecurityError(Exception):
    """A refused request: ``status`` is the HTTP status to answer, ``code`` a stable name a
    program can test, the message a sentence a person can act on."""

    status = 401

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code

    @property
    def headers(self) -> Dict[str, str]:
        """Response header fields that go with the status."""
        return {}


class Unauthenticated(SecurityError):
    """401: the request does not prove who sent it."""

    status = 401

    @property
    def headers(self) -> Dict[str, str]:
        # RFC 9421 section 5.1: tell the client which signature would be accepted
        components = " ".join(f'"{component}"' for component in DEFAULT_COMPONENTS)
        return {"Accept-Signature": f'sig1=({components});created;keyid;nonce;alg="ed25519"'}


class Forbidden(SecurityError):
    """403: the client is known but may not do this (another user's reservation)."""

    status = 403


class ConfirmRefused(SecurityError):
    """422: a confirm whose signed deal does not verify or is not this reservation's."""

    status = 422


class ReplayCacheFull(SecurityError):
    """503: too many live nonces to remember another one safely; retry shortly."""

    status = 503


# --------------------------------------------------------------------------- keys and files


def write_private(path: Path, data: bytes, overwrite: bool = False) -> None:
    """Write a secret readable by its owner only (0600 from the first byte, not chmod after)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL)
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "wb") as stream:
        stream.write(data)
    os.chmod(path, 0o600)  # an overwritten file keeps its old mode otherwise


def write_public(path: Path, data: bytes, overwrite: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb" if overwrite else "xb") as stream:
        stream.write(data)


def private_key_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def public_key_text(key: Ed25519PublicKey) -> str:
    """A public key as it is written in authorized-clients files: base64 of its 32 bytes."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode("ascii")


def parse_public_key(text: str) -> Ed25519PublicKey:
    """The inverse of :func:`public_key_text`; raises ValueError on anything else."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except ValueError:
        raise ValueError("not base64") from None
    if len(raw) != 32:
        raise ValueError(f"an Ed25519 public key has 32 bytes, this has {len(raw)}")
    return Ed25519PublicKey.from_public_bytes(raw)


def load_private_key(path: Path) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path}: not an Ed25519 private key")
    return key


def load_or_create_site_key(path: Path) -> Ed25519PrivateKey:
    """The agent's own signing key, made on first start so that no setup step is needed."""
    if path.exists():
        return load_private_key(path)
    key = Ed25519PrivateKey.generate()
    write_private(path, private_key_pem(key))
    return key


def check_key_id(key_id: str) -> str:
    if not key_id or len(key_id) > 128 or not set(key_id) <= KEY_ID_CHARS:
        raise ValueError(f"invalid key id {key_id!r}: use 1-128 letters, digits and . _ @ : + -")
    return key_id


# --------------------------------------------------------------------------- TLS


def self_signed_certificate(hosts: Sequence[str], days: int = 365) -> Tuple[bytes, bytes]:
    """A self-signed server certificate and its key (PEM), valid for ``hosts``.

    ECDSA P-256 because every TLS client accepts it; the certificate is its own CA (so a
    client can trust exactly it with ``cafile=``) and carries the extensions that strict
    X.509 verification (Python 3.13's default) insists on.
    """
    if not hosts:
        raise ValueError("a certificate needs at least one host name")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    now = datetime.datetime.now(datetime.timezone.utc)
    names: List[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    public = key.public_key()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem


def write_self_signed(
    cert: Path, key: Path, hosts: Sequence[str] = LOCAL_HOSTS, overwrite: bool = False
) -> None:
    """Write a self-signed certificate (0644) and its key (0600)."""
    cert_pem, key_pem = self_signed_certificate(hosts)
    write_private(key, key_pem, overwrite)
    write_public(cert, cert_pem, overwrite)


def ensure_self_signed(cert: Path, key: Path) -> bool:
    """Make the default localhost certificate on first start; True if it was made now."""
    if cert.exists() and key.exists():
        return False
    write_self_signed(cert, key, overwrite=True)
    return True


def server_ssl_context(cert: Path, key: Path) -> ssl.SSLContext:
    """The TLS settings of the API: TLS 1.2 or newer, the library's default ciphers."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert), str(key))
    return context


# --------------------------------------------------------------------------- clients


@dataclass(frozen=True)
class AuthorizedClient:
    """A key that may change state, and the scheduler user and account its reservations are
    made for (the batch system enforces that only they can run jobs in them)."""

    key_id: str
    public_key: Ed25519PublicKey
    user: str
    account: str = ""


def load_authorized_clients(path: Path) -> Dict[str, AuthorizedClient]:
    """Read an authorized-clients file; errors name the key path, like the configuration's.

    ::

        clients:
          alice@laptop:
            public_key: "<base64 of the 32-byte Ed25519 key, as `siteagent keys` prints it>"
            user: alice          # the scheduler (Unix) user reservations are made for
            account: proj42      # optional: the scheduler account charged
    """
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(str(path), [Problem("", f"cannot read it ({exc})")]) from None
    reading = Reading()
    root = Section(data, "", ("clients",), reading)
    clients: Dict[str, AuthorizedClient] = {}
    entries: Mapping[str, Any] = root.get("clients", {}, mapping)
    for key_id, entry in entries.items():
        client = read_client(str(key_id), Section(entry, f"clients.{key_id}", CLIENT_KEYS, reading))
        if client is not None:
            clients[client.key_id] = client
    if reading.problems:
        raise ConfigError(str(path), reading.problems)
    return clients


CLIENT_KEYS = ("public_key", "user", "account")


def read_client(key_id: str, section: Section) -> Optional[AuthorizedClient]:
    """One entry of the file, or None (with the problems recorded) if it is unusable."""
    try:
        check_key_id(key_id)
    except ValueError as exc:
        section.reading.problem(section.path, str(exc))
        return None
    missing = [key for key in ("public_key", "user") if not section.has(key)]
    if missing:
        section.reading.problem(section.path, "expected " + " and ".join(missing))
        return None
    public_key = section.get("public_key", None, ed25519_public_key)
    user = section.get("user", "", scheduler_user)
    account = section.get("account", "", name)
    if public_key is None or not user:
        return None
    return AuthorizedClient(key_id, public_key, user, account)


def mapping(raw: Any) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise Invalid("a mapping of key ids to clients")
    return raw


def ed25519_public_key(raw: Any) -> Ed25519PublicKey:
    try:
        return parse_public_key(raw if isinstance(raw, str) else "")
    except ValueError:
        raise Invalid(
            "an Ed25519 public key (base64 of 32 bytes, as `siteagent keys` prints it)"
        ) from None


def scheduler_user(raw: Any) -> str:
    if not isinstance(raw, str) or not USER_RE.match(raw):
        raise Invalid("a scheduler (Unix) user name")
    return raw


# --------------------------------------------------------------------------- replay cache


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


# --------------------------------------------------------------------------- authentication


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


def sign_request(
    method: str,
    url: str,
    body: bytes,
    key: Ed25519PrivateKey,
    key_id: str,
    created: Optional[int] = None,
    nonce: Optional[str] = None,
) -> Dict[str, str]:
    """The header fields that sign a request the way the agent requires (a client's side)."""
    digest = {"Content-Digest": httpsig.content_digest(body)}
    params: List[Tuple[str, httpsig.BareItem]] = [
        ("created", int(time.time()) if created is None else created),
        ("keyid", key_id),
        ("nonce", nonce or secrets.token_urlsafe(18)),
        ("alg", httpsig.ALGORITHM),
    ]
    signature = httpsig.sign(method, url, digest, key, DEFAULT_COMPONENTS, params)
    return {**digest, **signature}


def authorize_owner(client: AuthorizedClient, owner: str, what: str) -> None:
    """Only the client that accepted a reservation (``owner``, its key id) may confirm or
    cancel it.

    Ownership is the key, the same identity the reservation manager records, the confirm
    must be signed with and the ledger debits; so a user's second key is a second buyer, and
    no check here can disagree with another.
    """
    if client.key_id != owner:
        raise Forbidden("not_owner", f"{what} belongs to another client; only its owner may act")


# --------------------------------------------------------------------------- deals


def canonical_json(document: Any) -> bytes:
    """RFC 8785 (JCS) bytes of a JSON document: what both sides sign and verify."""
    return rfc8785.dumps(document)


def money_text(amount: Decimal) -> str:
    """An amount the ledger books: whole cents, written with two decimals ("12.30")."""
    if not amount.is_finite() or amount != amount.quantize(CENT):
        raise ValueError(f"{amount} is not a whole number of cents")
    return str(amount.quantize(CENT))


def decimal_text(value: Decimal) -> str:
    """A quoted figure (rate, fee) exactly, without exponent or trailing zeros ("0.0125")."""
    if not value.is_finite():
        raise ValueError(f"{value} is not a finite amount")
    return format(value.normalize(), "f")


def request_document(request: Request) -> Dict[str, Any]:
    """A request for quotes as JSON: absent (None) fields are left out ("don't care")."""
    document: Dict[str, Any] = {}
    for key, value in vars(request).items():
        if value is not None:
            document[key] = decimal_text(value) if isinstance(value, Decimal) else value
    return document


def offer_document(offer: Offer) -> Dict[str, Any]:
    """An offer as JSON, without its request (which the deal carries once)."""
    return {
        "id": offer.id,
        "site": offer.site,
        "start": offer.start,
        "duration": offer.duration,
        "size": offer.size,
        "unit_price": decimal_text(offer.unit_price),
        "fee": decimal_text(offer.fee),
        "expires": offer.expires,
    }


def deal_document(
    site: str,
    buyer: str,
    reservation_id: str,
    offer: Offer,
    price: Decimal,
    cancellation_penalty: Decimal,
) -> Dict[str, Any]:
    """What a buyer signs to confirm: the request, the offer, the reservation and the price.

    ``site`` and ``buyer`` (key ids) bind the parties, so a receipt cannot be booked to other
    accounts; ``cancellation_penalty`` is what a later cancellation may keep, agreed now.
    """
    return {
        "version": 1,
        "site": site,
        "buyer": buyer,
        "reservation_id": reservation_id,
        "request": request_document(offer.request),
        "offer": offer_document(offer),
        "price": money_text(price),
        "cancellation_penalty": money_text(cancellation_penalty),
    }


def deal_id(deal: Mapping[str, Any]) -> str:
    """A deal's identity: SHA-256 of its canonical JSON (the same deal, the same id)."""
    return hashlib.sha256(canonical_json(deal)).hexdigest()


@dataclass(frozen=True)
class Signed:
    """A detached Ed25519 signature and the key id that made it."""

    key_id: str
    value: bytes

    def to_json(self) -> Dict[str, str]:
        return {
            "keyid": self.key_id,
            "alg": httpsig.ALGORITHM,
            "value": base64.b64encode(self.value).decode("ascii"),
        }

    @classmethod
    def from_json(cls, data: Any) -> Signed:
        if not isinstance(data, Mapping) or data.get("alg", httpsig.ALGORITHM) != "ed25519":
            raise ValueError('a signature is {"keyid": ..., "alg": "ed25519", "value": base64}')
        try:
            value = base64.b64decode(str(data["value"]), validate=True)
            return cls(check_key_id(str(data["keyid"])), value)
        except (KeyError, ValueError) as exc:
            raise ValueError(f"malformed signature: {exc}") from None


def sign_document(document: Any, key: Ed25519PrivateKey, key_id: str) -> Signed:
    return Signed(key_id, key.sign(canonical_json(document)))


def signature_valid(document: Any, signature: Signed, key: Ed25519PublicKey) -> bool:
    try:
        key.verify(signature.value, canonical_json(document))
    except InvalidSignature:
        return False
    return True


@dataclass(frozen=True)
class Receipt:
    """A confirmed deal, signed by its buyer and countersigned by the site (the paper's signed
    RFQ + reservation id, which the bank books). The site's signature covers the buyer's and
    the confirmation time, so neither can be swapped afterwards."""

    deal: Mapping[str, Any]
    user_signature: Signed
    confirmed_at: int
    site_signature: Signed

    @property
    def id(self) -> str:
        return deal_id(self.deal)

    def countersigned(self) -> Dict[str, Any]:
        """The document the site signs."""
        return countersigned_document(self.deal, self.user_signature, self.confirmed_at)

    def to_json(self) -> Dict[str, Any]:
        return {
            "id": self.id,
            "deal": dict(self.deal),
            "user_signature": self.user_signature.to_json(),
            "confirmed_at": self.confirmed_at,
            "site_signature": self.site_signature.to_json(),
        }

    @classmethod
    def from_json(cls, data: Any) -> Receipt:
        """Parse a receipt; raises ValueError naming what is malformed (the id is derived)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("deal"), Mapping):
            raise ValueError("a receipt is a JSON object with a deal")
        confirmed_at = data.get("confirmed_at")
        if not isinstance(confirmed_at, int) or isinstance(confirmed_at, bool):
            raise ValueError("a receipt needs confirmed_at (epoch seconds)")
        return cls(
            deal=dict(data["deal"]),
            user_signature=Signed.from_json(data.get("user_signature")),
            confirmed_at=confirmed_at,
            site_signature=Signed.from_json(data.get("site_signature")),
        )


def countersigned_document(
    deal: Mapping[str, Any], user_signature: Signed, confirmed_at: int
) -> Dict[str, Any]:
    return {
        "deal": dict(deal),
        "user_signature": user_signature.to_json(),
        "confirmed_at": confirmed_at,
    }


def confirm_body(deal: Mapping[str, Any], key: Ed25519PrivateKey, key_id: str) -> Dict[str, Any]:
    """The body of a confirm, as a client sends it: the deal and the buyer's signature."""
    return {"deal": dict(deal), "signature": sign_document(deal, key, key_id).to_json()}


def accept_confirm(
    body: Any,
    expected: Mapping[str, Any],
    client: AuthorizedClient,
    site_key: Ed25519PrivateKey,
    site_id: str,
    now: int,
) -> Receipt:
    """The agent's side of a confirm: check the buyer signed exactly ``expected`` (the deal
    built from the agent's own records), then countersign it into a receipt.

    ``client`` is the authenticated sender; the deal must be signed with that same key, so a
    confirm cannot carry someone else's signature.
    """
    if not isinstance(body, Mapping) or not isinstance(body.get("deal"), Mapping):
        raise ConfirmRefused("malformed_confirm", 'a confirm is {"deal": ..., "signature": ...}')
    try:
        signature = Signed.from_json(body.get("signature"))
    except ValueError as exc:
        raise ConfirmRefused("malformed_confirm", str(exc)) from None
    if signature.key_id != client.key_id:
        raise ConfirmRefused(
            "confirm_key_mismatch",
            f"the deal is signed by {signature.key_id!r} but the request by {client.key_id!r}",
        )
    differing = sorted(
        key
        for key in set(expected) | set(body["deal"])
        if expected.get(key) != body["deal"].get(key)
    )
    if differing:
        raise ConfirmRefused(
            "deal_mismatch",
            "the signed deal differs from this reservation in: " + ", ".join(differing),
        )
    if not signature_valid(expected, signature, client.public_key):
        raise ConfirmRefused("bad_confirm_signature", "the deal's signature does not verify")
    document = countersigned_document(expected, signature, now)
    return Receipt(expected, signature, now, sign_document(document, site_key, site_id))


@dataclass(frozen=True)
class Cancellation:
    """The site's signed word that a confirmed deal was cancelled and what it keeps."""

    receipt_id: str
    penalty: Decimal
    cancelled_at: int
    site_signature: Signed

    def signed_document(self) -> Dict[str, Any]:
        return cancellation_document(self.receipt_id, self.penalty, self.cancelled_at)

    def to_json(self) -> Dict[str, Any]:
        return {**self.signed_document(), "site_signature": self.site_signature.to_json()}

    @classmethod
    def from_json(cls, data: Any) -> Cancellation:
        if not isinstance(data, Mapping):
            raise ValueError("a cancellation is a JSON object")
        try:
            penalty = Decimal(str(data["penalty"]))
            cancelled_at = data["cancelled_at"]
            if not isinstance(cancelled_at, int) or isinstance(cancelled_at, bool):
                raise ValueError("cancelled_at must be epoch seconds")
            return cls(
                str(data["receipt_id"]),
                penalty,
                cancelled_at,
                Signed.from_json(data.get("site_signature")),
            )
        except (KeyError, ArithmeticError) as exc:
            raise ValueError(f"malformed cancellation: {exc}") from None


def cancellation_document(receipt_id: str, penalty: Decimal, cancelled_at: int) -> Dict[str, Any]:
    return {
        "receipt_id": receipt_id,
        "penalty": money_text(penalty),
        "cancelled_at": cancelled_at,
    }


def sign_cancellation(
    receipt: Receipt, penalty: Decimal, at: int, site_key: Ed25519PrivateKey, site_id: str
) -> Cancellation:
    document = cancellation_document(receipt.id, penalty, at)
    return Cancellation(receipt.id, penalty, at, sign_document(document, site_key, site_id))
