"""HTTP Message Signatures (RFC 9421) with Ed25519, and Content-Digest (RFC 9530): the subset
the agent needs, on top of ``cryptography``.

Why not the ``http-message-signatures`` package: its maintained releases (2.x, 3.x) need
Python >= 3.10 and the project supports 3.9; the 1.x line that still installs on 3.9 is frozen
and has a different API, so supporting both would mean two code paths. What the agent needs is
small: one algorithm (``ed25519``), request signatures only, derived components without
parameters, and the Structured Field Values (RFC 8941) that carry them. The tests check this
module against RFC 9421's own Ed25519 example (B.2.6), RFC 9530's digest example, and, where
it is installed, signatures made by the ``http-message-signatures`` package itself.

This module is mechanism only: it builds and checks signature bases. Which components must be
covered, how old a signature may be and whether a nonce was seen before is policy, decided by
:mod:`siteagent.security.authentication`.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
import urllib.parse
from dataclasses import dataclass
from decimal import Decimal
from typing import Callable, Dict, Iterable, List, Mapping, Sequence, Tuple, Union

import nacl.exceptions
import nacl.signing
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from siteagent.core.errors import SiteagentError
from siteagent.protocol.errors import BAD_SIGNATURE

#: The algorithm identifier RFC 9421 registers for EdDSA over Curve25519.
ALGORITHM = "ed25519"

#: Digest algorithms RFC 9530 registers as usable, by their field keys.
DIGESTS: Dict[str, Callable[[bytes], bytes]] = {
    "sha-256": lambda data: hashlib.sha256(data).digest(),
    "sha-512": lambda data: hashlib.sha512(data).digest(),
}

#: Header fields as a caller has them: a mapping, or (name, value) pairs when a name repeats.
Headers = Union[Mapping[str, str], Sequence[Tuple[str, str]]]


class SignatureError(SiteagentError, ValueError):
    """A signature, its parameters or a digest is missing, malformed or does not verify."""

    code = BAD_SIGNATURE


# --------------------------------------------------------------------------- RFC 8941 subset


class Token(str):
    """A Structured Field token (unquoted), kept apart from strings so it re-serialises as it
    came: the signature base depends on the exact serialisation of the parameters."""


BareItem = Union[int, Decimal, str, Token, bytes, bool]


@dataclass(frozen=True)
class Member:
    """A dictionary member: an item, or an inner list of items, each with parameters."""

    value: Union[BareItem, Tuple[Tuple[BareItem, Tuple[Tuple[str, BareItem], ...]], ...]]
    params: Tuple[Tuple[str, BareItem], ...]

    def inner_list(
        self, what: str
    ) -> Tuple[Tuple[BareItem, Tuple[Tuple[str, BareItem], ...]], ...]:
        """The (item, parameters) pairs of an inner-list member; ``what`` names it in errors."""
        if not isinstance(self.value, tuple):
            raise SignatureError(f"{what} is not an inner list")
        return self.value


_KEY_RE = re.compile(r"[a-z*][a-z0-9_\-.*]*")
_TOKEN_RE = re.compile(r"[A-Za-z*][A-Za-z0-9!#$%&'*+\-.^_`|~:/]*")
_NUMBER_RE = re.compile(r"-?[0-9]{1,15}(\.[0-9]{1,3})?")
_BYTES_RE = re.compile(r":([A-Za-z0-9+/=]*):")
#: A well-formed sf-string: printable ASCII, '"' and '\\' escaped (the common case, read in one
#: match; anything else is read character by character, which says what is wrong).
_STRING_RE = re.compile(r'"((?:[ !#-\[\]-~]|\\["\\])*)"')
_ESCAPE_RE = re.compile(r'\\(["\\])')
#: What ``_Parser.skip`` skips: spaces, or optional white space (spaces and tabs).
_SKIPS = {" ": re.compile(" *"), " \t": re.compile("[ \t]*")}


class _Parser:
    """RFC 8941 section 4.2 for Dictionaries (the only top-level type the headers here use)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, what: str) -> SignatureError:
        return SignatureError(f"malformed structured field at character {self.pos}: {what}")

    def peek(self) -> str:
        return self.text[self.pos : self.pos + 1]

    def skip(self, chars: str) -> None:
        match = _SKIPS[chars].match(self.text, self.pos)
        assert match is not None  # the patterns match the empty string
        self.pos = match.end()

    def dictionary(self) -> Dict[str, Member]:
        members: Dict[str, Member] = {}
        self.skip(" ")
        while self.pos < len(self.text):
            key = self.key()
            if self.peek() == "=":
                self.pos += 1
                member = self.item_or_inner_list()
            else:
                member = Member(True, self.parameters())
            members[key] = member
            self.skip(" \t")
            if self.pos >= len(self.text):
                break
            if self.peek() != ",":
                raise self.fail("expected ','")
            self.pos += 1
            self.skip(" \t")
            if self.pos >= len(self.text):
                raise self.fail("trailing ','")
        return members

    def key(self) -> str:
        match = _KEY_RE.match(self.text, self.pos)
        if not match:
            raise self.fail("expected a key")
        self.pos = match.end()
        return match.group()

    def item_or_inner_list(self) -> Member:
        if self.peek() != "(":
            return Member(self.bare_item(), self.parameters())
        self.pos += 1
        items: List[Tuple[BareItem, Tuple[Tuple[str, BareItem], ...]]] = []
        while True:
            self.skip(" ")
            if self.peek() == ")":
                self.pos += 1
                return Member(tuple(items), self.parameters())
            items.append((self.bare_item(), self.parameters()))
            if self.peek() not in (" ", ")"):
                raise self.fail("expected ' ' or ')' in an inner list")

    def parameters(self) -> Tuple[Tuple[str, BareItem], ...]:
        params: Dict[str, BareItem] = {}
        while self.text.startswith(";", self.pos):
            self.pos += 1
            self.skip(" ")
            key = self.key()
            value: BareItem = True
            if self.peek() == "=":
                self.pos += 1
                value = self.bare_item()
            params[key] = value
        return tuple(params.items())

    def bare_item(self) -> BareItem:
        char = self.peek()
        if char == '"':
            return self.string()
        if char == ":":
            match = _BYTES_RE.match(self.text, self.pos)
            if not match:
                raise self.fail("malformed byte sequence")
            self.pos = match.end()
            try:
                return base64.b64decode(match.group(1), validate=True)
            except ValueError:
                raise self.fail("malformed base64") from None
        if char == "?":
            value = self.text[self.pos + 1 : self.pos + 2]
            if value not in ("0", "1"):
                raise self.fail("malformed boolean")
            self.pos += 2
            return value == "1"
        if char == "-" or char.isdigit():
            match = _NUMBER_RE.match(self.text, self.pos)
            if not match:
                raise self.fail("malformed number")
            self.pos = match.end()
            return Decimal(match.group()) if match.group(1) else int(match.group())
        match = _TOKEN_RE.match(self.text, self.pos)
        if not match:
            raise self.fail("expected an item")
        self.pos = match.end()
        return Token(match.group())

    def string(self) -> str:
        match = _STRING_RE.match(self.text, self.pos)
        if match:
            self.pos = match.end()
            inside = match.group(1)
            return _ESCAPE_RE.sub(r"\1", inside) if "\\" in inside else inside
        return self.string_by_character()

    def string_by_character(self) -> str:
        """RFC 8941 4.2.5 as written: what :meth:`string` does, saying what is wrong."""
        self.pos += 1
        chars: List[str] = []
        while self.pos < len(self.text):
            char = self.text[self.pos]
            self.pos += 1
            if char == "\\":
                escaped = self.peek()
                if escaped not in ('"', "\\"):
                    raise self.fail("bad escape in a string")
                chars.append(escaped)
                self.pos += 1
            elif char == '"':
                return "".join(chars)
            elif not " " <= char <= "~":
                raise self.fail("non-printable character in a string")
            else:
                chars.append(char)
        raise self.fail("unterminated string")


def parse_dictionary(text: str) -> Dict[str, Member]:
    """Parse a Structured Field Dictionary (RFC 8941 section 4.2.2)."""
    return _Parser(text.strip(" ")).dictionary()


def serialize_item(value: BareItem) -> str:
    """RFC 8941 section 4.1.3, for the bare item types the signature parameters use."""
    if isinstance(value, bool):
        return "?1" if value else "?0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        return format(value.quantize(Decimal("0.001")).normalize(), "f")
    if isinstance(value, bytes):
        return ":" + base64.b64encode(value).decode("ascii") + ":"
    if isinstance(value, Token):
        return str(value)
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def serialize_params(params: Iterable[Tuple[str, BareItem]]) -> str:
    return "".join(
        f";{key}" if value is True else f";{key}={serialize_item(value)}" for key, value in params
    )


def serialize_inner_list(items: Sequence[BareItem], params: Sequence[Tuple[str, BareItem]]) -> str:
    return "(" + " ".join(serialize_item(item) for item in items) + ")" + serialize_params(params)


# --------------------------------------------------------------------------- RFC 9530


def content_digest(body: bytes) -> str:
    """The ``Content-Digest`` field value for ``body`` (SHA-256)."""
    return "sha-256=" + serialize_item(hashlib.sha256(body).digest())


def check_content_digest(field: str, body: bytes) -> None:
    """Raise unless every digest in ``field`` that we know matches ``body`` (and one does).

    Unknown algorithms are ignored, as RFC 9530 lets a recipient do; a field with none we know
    proves nothing and is refused.
    """
    members = parse_dictionary(field)
    known = [name for name in members if name in DIGESTS]
    if not known:
        raise SignatureError("Content-Digest has no sha-256 or sha-512 digest")
    for name in known:
        expected = members[name].value
        if not isinstance(expected, bytes) or expected != DIGESTS[name](body):
            raise SignatureError(f"Content-Digest {name} does not match the body")


# --------------------------------------------------------------------------- RFC 9421


def normalize_headers(headers: Headers) -> Dict[str, str]:
    """Lower-cased names; values stripped, repeated fields joined with ", " (RFC 9421 2.1)."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    joined: Dict[str, List[str]] = {}
    for name, value in pairs:
        joined.setdefault(name.lower(), []).append(value.strip(" \t"))
    return {name: ", ".join(values) for name, values in joined.items()}


@functools.lru_cache(maxsize=256)
def authority(url: str) -> str:
    """The ``@authority`` of a URL (RFC 9421 section 2.2.3): the host in lower case and the
    port unless it is the scheme's default. SignatureError for a URL with no host or a port
    that is not one."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise SignatureError(f"the authority {parts.netloc!r} has no valid port") from None
    host = (parts.hostname or "").lower()
    if not host:
        raise SignatureError(f"{url!r} names no host")
    if ":" in host:
        host = f"[{host}]"
    default_port = {"http": 80, "https": 443}.get(parts.scheme.lower())
    return host if port in (None, default_port) else f"{host}:{port}"


def derived_component(name: str, method: str, url: str) -> str:
    """The value of a derived component (RFC 9421 section 2.2) of a request."""
    parts = _split(url)
    values: Dict[str, Callable[[], str]] = {
        "@method": lambda: method.upper(),
        "@target-uri": lambda: url,
        "@authority": lambda: authority(url),
        "@scheme": lambda: parts.scheme.lower(),
        "@path": lambda: parts.path or "/",
        "@query": lambda: "?" + parts.query,
    }
    if name not in values:
        raise SignatureError(f"derived component {name} is not supported")
    return values[name]()


@functools.lru_cache(maxsize=256)
def _split(url: str) -> urllib.parse.SplitResult:
    """``url`` split, once per URL: a client sends its requests to the same few."""
    return urllib.parse.urlsplit(url)


@dataclass(frozen=True)
class SignatureEntry:
    """One labelled signature of a message: what it covers, its parameters, its bytes."""

    label: str
    components: Tuple[str, ...]
    params: Tuple[Tuple[str, BareItem], ...]
    signature: bytes

    def param(self, name: str) -> object:
        return self._params.get(name)

    @functools.cached_property
    def _params(self) -> Dict[str, BareItem]:
        return dict(self.params)

    @property
    def signature_params(self) -> str:
        """The ``@signature-params`` value: the inner list as RFC 8941 serialises it."""
        return serialize_inner_list(self.components, self.params)


def parse_signatures(headers: Mapping[str, str]) -> List[SignatureEntry]:
    """Every signature in ``Signature-Input``/``Signature`` (normalised headers), by label.

    An empty list means the request is not signed at all; anything inconsistent raises.
    """
    if "signature-input" not in headers and "signature" not in headers:
        return []
    if "signature-input" not in headers or "signature" not in headers:
        raise SignatureError("Signature-Input and Signature must come together")
    inputs = parse_dictionary(headers["signature-input"])
    signatures = parse_dictionary(headers["signature"])
    if set(inputs) != set(signatures):
        raise SignatureError("Signature-Input and Signature name different labels")
    entries = []
    for label, member in inputs.items():
        value, signature = member.inner_list(f"Signature-Input {label}"), signatures[label].value
        if not isinstance(signature, bytes):
            raise SignatureError(f"Signature {label} is not a byte sequence")
        components = []
        for item, item_params in value:
            if not isinstance(item, str) or isinstance(item, Token) or item_params:
                raise SignatureError(
                    f"Signature-Input {label}: components must be plain strings (no parameters)"
                )
            components.append(item)
        if len(set(components)) != len(components):
            raise SignatureError(f"Signature-Input {label} names a component twice")
        entries.append(SignatureEntry(label, tuple(components), member.params, signature))
    return entries


def signature_base(
    method: str,
    url: str,
    headers: Mapping[str, str],
    components: Sequence[str],
    signature_params: str,
) -> bytes:
    """The bytes that are signed (RFC 9421 section 2.5), from normalised headers."""
    lines = []
    for component in components:
        if component.startswith("@"):
            value = derived_component(component, method, url)
        elif component in headers:
            value = headers[component]
        else:
            raise SignatureError(f"covered header field {component} is not in the request")
        if "\n" in value or "\r" in value:
            raise SignatureError(f"component {component} contains a line break")
        lines.append(f'"{component}": {value}')
    lines.append(f'"@signature-params": {signature_params}')
    base = "\n".join(lines)
    if not base.isascii():
        raise SignatureError("the signature base is not ASCII")
    return base.encode("ascii")


def sign(
    method: str,
    url: str,
    headers: Headers,
    key: Ed25519PrivateKey,
    components: Sequence[str],
    params: Sequence[Tuple[str, BareItem]],
    label: str = "sig1",
) -> Dict[str, str]:
    """Sign a request; returns the ``Signature-Input`` and ``Signature`` fields to add.

    ``params`` are written in the given order (e.g. created, keyid, nonce, alg); a
    ``Content-Digest`` that is covered must already be in ``headers``.
    """
    signature_params = serialize_inner_list(components, params)
    base = signature_base(method, url, normalize_headers(headers), components, signature_params)
    return {
        "Signature-Input": f"{label}={signature_params}",
        "Signature": f"{label}={serialize_item(key.sign(base))}",
    }


def verify(
    method: str, url: str, headers: Mapping[str, str], entry: SignatureEntry, key: Ed25519PublicKey
) -> None:
    """Raise SignatureError unless ``entry`` is a valid Ed25519 signature of this request.

    Checked by libsodium (PyNaCl), which verifies an Ed25519 signature in less than half the
    CPU OpenSSL takes here (bench/results/quotes.md), and accepts a subset of what OpenSSL
    accepts: it also refuses small-order keys and points, which no honest signer makes."""
    base = signature_base(method, url, headers, entry.components, entry.signature_params)
    try:
        _verify_key(key.public_bytes_raw()).verify(base, entry.signature)
    except (nacl.exceptions.BadSignatureError, ValueError):
        raise SignatureError(f"signature {entry.label} does not verify") from None


@functools.lru_cache(maxsize=1024)
def _verify_key(raw: bytes) -> nacl.signing.VerifyKey:
    """libsodium's form of a public key, made once per key (the authorized clients' few)."""
    return nacl.signing.VerifyKey(raw)
