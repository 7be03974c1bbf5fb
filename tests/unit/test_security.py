"""Request signatures (RFC 9421) and digests (RFC 9530) against the RFCs' own examples and an
independent implementation; authentication with replay protection and ownership; canonical
JSON (RFC 8785); signed confirms and receipts; TLS files; ``siteagent keys``."""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import datetime
import json
import os
import random
import socket
import ssl
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import load_der_private_key, load_der_public_key
from hypothesis import given
from hypothesis import strategies as st

from siteagent.cli.main import main
from siteagent.config.reading import ConfigError
from siteagent.core.values import Request
from siteagent.ledger.participants import load_participants
from siteagent.market.deals import countersign
from siteagent.protocol import documents, httpsig, signing
from siteagent.protocol.errors import status_of
from siteagent.protocol.keys import load_or_create_site_key, load_private_key, public_key_text
from siteagent.security import (
    errors,
)
from siteagent.security.authentication import (
    CLOCK_SKEW_S,
    Authenticator,
    NonceCache,
)
from siteagent.security.clients import AuthorizedClient, load_authorized_clients
from siteagent.security.errors import ConfirmRefused, ReplayCacheFull, Unauthenticated
from siteagent.security.replay import SavedNonces
from siteagent.security.tls import ensure_self_signed, server_ssl_context
from testbed.inprocess.parties import NOW, Party, deal

URL = "https://hpc1.example.org:8443/v1/reservations/r-1/confirm"
#: The authority the site of these tests answers to.
SITE = "hpc1.example.org:8443"
BODY = b'{"deal": {}}'

# RFC 9421 appendix B.1.4, test-key-ed25519 (PKCS#8 / SPKI, DER in base64)
RFC_PRIVATE = "MC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF"
RFC_PUBLIC = "MCowBQYDK2VwAyEAJrQLj5P/89iXES9+vFgrIy29clF9CC/oPPsw3c5D0bs="
# RFC 9421 appendix B.2, the test request, and B.2.6's signature
RFC_URL = "http://example.com/foo?param=Value&Pet=dog"
RFC_HEADERS = {
    "Host": "example.com",
    "Date": "Tue, 20 Apr 2021 02:07:55 GMT",
    "Content-Type": "application/json",
    "Content-Digest": "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNN"
    "yealdVLvRwEmTHWXvJwew==:",
    "Content-Length": "18",
}
RFC_B26_INPUT = (
    'sig-b26=("date" "@method" "@path" "@authority" "content-type" "content-length")'
    ';created=1618884473;keyid="test-key-ed25519"'
)
RFC_B26_SIGNATURE = (
    "sig-b26=:wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpB"
    "KRCw==:"
)


def rfc_keys() -> Tuple[Ed25519PrivateKey, Any]:
    return (
        load_der_private_key(base64.b64decode(RFC_PRIVATE), None),  # type: ignore[return-value]
        load_der_public_key(base64.b64decode(RFC_PUBLIC)),
    )


# --------------------------------------------------------------------------- the RFCs' examples


def test_rfc9421_b26_ed25519_signature_is_reproduced_exactly() -> None:
    private, _ = rfc_keys()
    components = ["date", "@method", "@path", "@authority", "content-type", "content-length"]
    params: List[Tuple[str, httpsig.BareItem]] = [
        ("created", 1618884473),
        ("keyid", "test-key-ed25519"),
    ]
    fields = httpsig.sign("POST", RFC_URL, RFC_HEADERS, private, components, params, "sig-b26")
    assert fields == {"Signature-Input": RFC_B26_INPUT, "Signature": RFC_B26_SIGNATURE}


def test_rfc9421_b26_signature_verifies_and_its_tampered_copies_do_not() -> None:
    _, public = rfc_keys()
    headers = httpsig.normalize_headers(
        {**RFC_HEADERS, "Signature-Input": RFC_B26_INPUT, "Signature": RFC_B26_SIGNATURE}
    )
    (entry,) = httpsig.parse_signatures(headers)
    assert entry.label == "sig-b26" and entry.param("keyid") == "test-key-ed25519"
    httpsig.verify("POST", RFC_URL, headers, entry, public)
    with pytest.raises(httpsig.SignatureError, match="does not verify"):
        httpsig.verify("PUT", RFC_URL, headers, entry, public)
    with pytest.raises(httpsig.SignatureError, match="does not verify"):
        httpsig.verify("POST", "http://example.com/bar", headers, entry, public)
    with pytest.raises(httpsig.SignatureError, match="does not verify"):
        httpsig.verify("POST", RFC_URL, {**headers, "content-length": "19"}, entry, public)


def test_rfc9530_content_digest_example() -> None:
    body = b'{"hello": "world"}'
    assert httpsig.content_digest(body) == "sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:"
    httpsig.check_content_digest(RFC_HEADERS["Content-Digest"], body)  # sha-512, RFC 9421 B.2
    with pytest.raises(httpsig.SignatureError, match="does not match"):
        httpsig.check_content_digest(httpsig.content_digest(body), b'{"hello": "World"}')
    with pytest.raises(httpsig.SignatureError, match="no sha-256 or sha-512"):
        httpsig.check_content_digest("md5=:AAAA:", body)


def test_structured_fields_round_trip_the_signature_parameters() -> None:
    member = httpsig.parse_dictionary(
        'sig1=("@method" "content-digest");created=1;keyid="a\\"b";alg=x;flag, other=?0'
    )
    entry = member["sig1"]
    assert entry.params == (("created", 1), ("keyid", 'a"b'), ("alg", "x"), ("flag", True))
    assert isinstance(dict(entry.params)["alg"], httpsig.Token)
    items = [item for item, _ in entry.inner_list("sig1")]
    assert httpsig.serialize_inner_list(items, entry.params) == (
        '("@method" "content-digest");created=1;keyid="a\\"b";alg=x;flag'
    )
    assert member["other"].value is False


@pytest.mark.parametrize(
    "text",
    ['sig1=("a" "b"', "sig1=:not base64!:", 'sig1="\\x"', "Sig1=1", "sig1=1,", "sig1=?2", 'a="é"'],
)
def test_malformed_structured_fields_are_refused(text: str) -> None:
    with pytest.raises(httpsig.SignatureError, match="malformed structured field"):
        httpsig.parse_dictionary(text)


@given(st.text(alphabet=st.characters(max_codepoint=130), max_size=40))
def test_strings_read_in_one_match_are_what_reading_them_by_character_gives(text: str) -> None:
    """The parser reads a well-formed sf-string with one regular expression; it must agree
    with the character-by-character reading (kept for the errors) on every input."""
    quoted = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    for candidate in (quoted, '"' + text + '"', '"' + text):
        fast, slow = httpsig._Parser(candidate), httpsig._Parser(candidate)
        try:
            expected: object = slow.string_by_character()
        except httpsig.SignatureError:
            expected = httpsig.SignatureError
        try:
            got: object = fast.string()
        except httpsig.SignatureError:
            got = httpsig.SignatureError
        assert got == expected and (got is httpsig.SignatureError or fast.pos == slow.pos)


@given(st.text(max_size=60))
def test_any_signature_header_either_parses_or_raises_signature_error(text: str) -> None:
    with contextlib.suppress(httpsig.SignatureError):
        httpsig.parse_signatures({"signature-input": text, "signature": text})


# --------------------------------------------------------------------------- authentication


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def alice() -> Party:
    return Party("alice@laptop")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def auth(alice: Party, clock: Clock) -> Authenticator:
    bob = Party("bob@ci")
    clients = {alice.key_id: alice.client("alice"), bob.key_id: bob.client("bob", "proj7")}
    clock.now = NOW - 3600  # the agent started an hour before the tests' requests
    started = Authenticator(
        clients, [SITE], max_age_s=300, nonces=NonceCache(100, clock), clock=clock
    )
    clock.now = NOW
    return started


def signed(
    party: Party,
    method: str = "POST",
    url: str = URL,
    body: bytes = BODY,
    created: int = NOW,
    nonce: Optional[str] = None,
) -> Dict[str, str]:
    return signing.sign_request(method, url, body, party.key, party.key_id, created, nonce)


def refused(auth: Authenticator, code: str, *args: Any) -> errors.SecurityError:
    """Authentication fails with ``code``, and the replay cache learns nothing from it."""
    before = len(auth.nonces)
    with pytest.raises(errors.SecurityError) as caught:
        auth.authenticate(*args)
    assert caught.value.code == code, caught.value
    assert len(auth.nonces) == before
    return caught.value


def test_a_signed_request_authenticates_its_client(auth: Authenticator, alice: Party) -> None:
    client = auth.authenticate("POST", URL, signed(alice), BODY)
    assert (client.key_id, client.user) == ("alice@laptop", "alice")
    assert len(auth.nonces) == 1


def test_headers_may_come_as_pairs_in_any_case(auth: Authenticator, alice: Party) -> None:
    pairs = [(name.upper(), value) for name, value in signed(alice).items()]
    assert auth.authenticate("POST", URL, pairs, BODY).key_id == alice.key_id


def test_an_unsigned_request_is_401_and_says_what_to_send(auth: Authenticator) -> None:
    error = refused(auth, "unsigned", "POST", URL, {}, BODY)
    assert status_of(error.code) == 401
    accept = httpsig.parse_dictionary(error.headers["Accept-Signature"])["sig1"]
    assert [item for item, _ in accept.inner_list("sig1")] == list(signing.DEFAULT_COMPONENTS)


@pytest.mark.parametrize(
    ("method", "url", "body"),
    [
        ("POST", URL, b'{"deal": {"price": "0.01"}}'),  # tampered body
        ("POST", URL.replace("r-1", "r-2"), BODY),  # tampered path
        ("DELETE", URL, BODY),  # tampered method
        ("POST", URL + "?force=1", BODY),  # added query
    ],
)
def test_a_tampered_request_is_401(
    auth: Authenticator, alice: Party, method: str, url: str, body: bytes
) -> None:
    error = refused(auth, "bad_signature", method, url, signed(alice), body)
    assert status_of(error.code) == 401


def test_a_request_signed_for_another_site_is_401(auth: Authenticator, alice: Party) -> None:
    """A signature made for another site (a bank, another agent) is refused, even when a
    client sends it here with that site's name in Host (which the URL is built from)."""
    bank = "https://bank.example.org/v1/reservations/r-1/confirm"
    headers = signing.sign_request("POST", bank, BODY, alice.key, alice.key_id, created=NOW)
    error = refused(auth, "wrong_authority", "POST", bank, headers, BODY)
    assert SITE in str(error) and status_of(error.code) == 401
    wrong_port = URL.replace("8443", "9443")
    refused(auth, "wrong_authority", "POST", wrong_port, signed(alice, url=wrong_port), BODY)
    default_port = URL.replace(":8443", ":443")  # the same authority as without a port
    assert httpsig.authority(default_port) == "hpc1.example.org"


def test_a_malformed_authority_is_401_not_a_crash(auth: Authenticator, alice: Party) -> None:
    """A Host the URL cannot hold (a port out of range) is the sender's problem: 401."""
    bad = "https://127.0.0.1:99999/v1/quotes"
    refused(auth, "malformed_signature", "POST", bad, signed(alice), BODY)


def test_a_signature_by_the_wrong_key_is_401(auth: Authenticator, alice: Party) -> None:
    mallory = Party(alice.key_id)  # claims alice's key id, signs with her own key
    refused(auth, "bad_signature", "POST", URL, signed(mallory), BODY)


def test_a_replaced_key_verifies_and_the_key_it_replaced_no_longer_does(
    auth: Authenticator, alice: Party
) -> None:
    """Verification keeps each public key in libsodium's form (httpsig._verify_key, cached by
    the key's bytes): a clients file reloaded with a new key for the same key id must be
    checked against the new key at once, and the old key's signatures refused."""
    assert auth.authenticate("POST", URL, signed(alice), BODY).key_id == alice.key_id
    rotated = Party(alice.key_id)
    auth.clients = {**auth.clients, alice.key_id: rotated.client("alice")}
    refused(auth, "bad_signature", "POST", URL, signed(alice), BODY)
    assert auth.authenticate("POST", URL, signed(rotated), BODY).key_id == alice.key_id
    auth.clients = {**auth.clients, alice.key_id: alice.client("alice")}  # and back again
    refused(auth, "bad_signature", "POST", URL, signed(rotated), BODY)
    assert auth.authenticate("POST", URL, signed(alice), BODY).key_id == alice.key_id


@pytest.mark.parametrize("length", [0, 63, 65])
def test_a_signature_of_the_wrong_length_is_401(
    auth: Authenticator, alice: Party, length: int
) -> None:
    headers = signed(alice)
    label, _, _ = headers["Signature"].partition("=")
    headers["Signature"] = f"{label}=:{base64.b64encode(bytes(length)).decode()}:"
    refused(auth, "bad_signature", "POST", URL, headers, BODY)


def test_an_unknown_key_is_401(auth: Authenticator) -> None:
    error = refused(auth, "unknown_key", "POST", URL, signed(Party("eve")), BODY)
    assert "'eve'" in str(error)


def test_an_expired_signature_is_401(auth: Authenticator, alice: Party, clock: Clock) -> None:
    headers = signed(alice, created=NOW - 301)
    error = refused(auth, "signature_expired", "POST", URL, headers, BODY)
    assert "at most 300 s" in str(error)
    clock.now = NOW - 300  # the same signature was fine when it was fresh
    auth.authenticate("POST", URL, headers, BODY)


def test_a_signature_from_the_future_is_401(auth: Authenticator, alice: Party) -> None:
    refused(auth, "signature_expired", "POST", URL, signed(alice, created=NOW + 31), BODY)
    auth.authenticate("POST", URL, signed(alice, created=NOW + 30), BODY)  # clock skew


def test_a_replayed_signature_is_401(auth: Authenticator, alice: Party, clock: Clock) -> None:
    headers = signed(alice, nonce="n-1")
    auth.authenticate("POST", URL, headers, BODY)
    clock.now += 10
    error = refused(auth, "replayed_signature", "POST", URL, headers, BODY)
    assert status_of(error.code) == 401 and "new nonce" in str(error)
    # the same nonce in a fresh signature is a replay too: nonces are once per key
    refused(
        auth, "replayed_signature", "POST", URL, signed(alice, created=NOW + 10, nonce="n-1"), BODY
    )
    auth.authenticate("POST", URL, signed(alice, created=NOW + 10, nonce="n-2"), BODY)


def test_a_refused_request_does_not_burn_its_nonce(auth: Authenticator, alice: Party) -> None:
    headers = signed(alice, nonce="n-9")
    refused(auth, "bad_signature", "POST", URL, headers, b"tampered")
    assert auth.authenticate("POST", URL, headers, BODY).key_id == alice.key_id


@pytest.mark.parametrize(
    ("components", "params", "code"),
    [
        (("@method", "@target-uri"), (), "insufficient_coverage"),
        (("@target-uri", "content-digest"), (), "insufficient_coverage"),
        (("@method", "@path", "content-digest"), (), "insufficient_coverage"),
        (signing.DEFAULT_COMPONENTS, (("alg", "rsa-pss-sha512"),), "unsupported_algorithm"),
        (signing.DEFAULT_COMPONENTS, (("nonce", None),), "malformed_signature"),
        (signing.DEFAULT_COMPONENTS, (("created", None),), "malformed_signature"),
        (signing.DEFAULT_COMPONENTS, (("expires", NOW - 1),), "signature_expired"),
    ],
)
def test_signatures_that_do_not_meet_the_policy_are_401(
    auth: Authenticator,
    alice: Party,
    components: Tuple[str, ...],
    params: Tuple[Tuple[str, Any], ...],
    code: str,
) -> None:
    base: Dict[str, Any] = {"created": NOW, "keyid": alice.key_id, "nonce": "n", "alg": "ed25519"}
    base.update(params)
    headers = {"Content-Digest": httpsig.content_digest(BODY)}
    chosen = [(key, value) for key, value in base.items() if value is not None]
    headers.update(httpsig.sign("POST", URL, headers, alice.key, components, chosen))
    refused(auth, code, "POST", URL, headers, BODY)


def test_authority_path_and_query_may_stand_for_the_target_uri(
    auth: Authenticator, alice: Party
) -> None:
    headers = {"Content-Digest": httpsig.content_digest(BODY)}
    components = ("@method", "@authority", "@path", "@query", "content-digest")
    params: List[Tuple[str, httpsig.BareItem]] = [
        ("created", NOW),
        ("keyid", alice.key_id),
        ("nonce", "n"),
        ("alg", "ed25519"),
    ]
    headers.update(httpsig.sign("POST", URL, headers, alice.key, components, params))
    # behind a proxy the agent may see another scheme; authority, path and query still match
    seen = URL.replace("https://", "http://")
    assert auth.authenticate("POST", seen, headers, BODY).key_id == alice.key_id


def test_malformed_signature_fields_are_401(auth: Authenticator, alice: Party) -> None:
    headers = signed(alice)
    refused(auth, "malformed_signature", "POST", URL, {"Signature": headers["Signature"]}, BODY)
    bad = {**headers, "Signature-Input": "sig1=(@method)"}
    refused(auth, "malformed_signature", "POST", URL, bad, BODY)
    other_label = {**headers, "Signature": headers["Signature"].replace("sig1", "sig2")}
    refused(auth, "malformed_signature", "POST", URL, other_label, BODY)


def test_a_client_that_fills_its_nonces_is_refused_without_blocking_others(alice: Party) -> None:
    """Each client has its own bound: alice signing faster than her nonces lapse gets 503
    (with Retry-After) until they do; bob is not affected at all."""
    bob = Party("bob@ci")
    clock = Clock(NOW - 1)
    clients = {alice.key_id: alice.client(), bob.key_id: bob.client("bob")}
    auth = Authenticator(clients, [SITE], 300, NonceCache(2, clock), clock)
    clock.now = NOW
    auth.authenticate("POST", URL, signed(alice, nonce="a"), BODY)
    auth.authenticate("POST", URL, signed(alice, nonce="b"), BODY)
    with pytest.raises(ReplayCacheFull) as caught:
        auth.authenticate("POST", URL, signed(alice, nonce="c"), BODY)
    assert status_of(caught.value.code) == 503
    assert caught.value.retry_after_s == 300 + CLOCK_SKEW_S + 1
    for nonce in ("a", "b"):  # her full bound is hers alone
        auth.authenticate("POST", URL, signed(bob, nonce=nonce), BODY)
    clock.now = NOW + 300 + CLOCK_SKEW_S  # a and b can no longer be replayed: forgotten
    auth.authenticate("POST", URL, signed(alice, created=int(clock.now), nonce="c"), BODY)
    assert len(auth.nonces) == 1


def test_no_signature_is_accepted_twice_across_a_restart_or_a_widened_window(
    alice: Party,
) -> None:
    """The nonces are in memory: an agent refuses signatures made before it started (a restart
    forgot their nonces), and widening the window by a reload does not reopen it for
    signatures older than the nonces it kept."""
    clock = Clock()
    before = signed(alice, created=NOW - 5, nonce="captured")
    restarted = Authenticator({alice.key_id: alice.client()}, [SITE], 300, clock=clock)
    refused(restarted, "signature_expired", "POST", URL, before, BODY)
    restarted.authenticate("POST", URL, signed(alice, nonce="fresh"), BODY)

    clock.now = NOW + 1000
    old = signed(alice, created=NOW + 600, nonce="old")  # 400 s old: outside the window
    refused(restarted, "signature_expired", "POST", URL, old, BODY)
    restarted.max_age_s = 3600  # a reload widens the window...
    refused(restarted, "signature_expired", "POST", URL, old, BODY)  # ...not for captured ones
    newer = signed(alice, created=NOW + 800, nonce="newer")  # within the old window: kept
    restarted.authenticate("POST", URL, newer, BODY)
    refused(restarted, "replayed_signature", "POST", URL, newer, BODY)
    clock.now = NOW + 2000  # past the old window; the newer nonce is still remembered
    refused(restarted, "replayed_signature", "POST", URL, newer, BODY)


def test_a_signature_without_its_algorithm_is_401(auth: Authenticator, alice: Party) -> None:
    headers = {"Content-Digest": httpsig.content_digest(BODY)}
    params: List[Tuple[str, httpsig.BareItem]] = [
        ("created", NOW),
        ("keyid", alice.key_id),
        ("nonce", "no-alg"),
    ]
    components = signing.DEFAULT_COMPONENTS
    headers.update(httpsig.sign("POST", URL, headers, alice.key, components, params))
    error = refused(auth, "unsupported_algorithm", "POST", URL, headers, BODY)
    assert 'alg "ed25519"' in str(error)


# --------------------------------------------------------------------------- interoperability


class _Message:
    """What http-message-signatures reads of a request."""

    def __init__(self, method: str, url: str, headers: Dict[str, str]) -> None:
        self.method, self.url, self.headers = method, url, headers


class _Keys:
    def __init__(self, party: Party) -> None:
        self.party = party

    def resolve_public_key(self, key_id: str) -> Any:
        assert key_id == self.party.key_id
        return self.party.key.public_key()

    def resolve_private_key(self, key_id: str) -> Any:
        assert key_id == self.party.key_id
        return self.party.key


def test_a_request_signed_by_http_message_signatures_authenticates(
    auth: Authenticator, alice: Party
) -> None:
    hms = pytest.importorskip("http_message_signatures")

    message = _Message("POST", URL, {"Content-Type": "application/json"})
    signer = hms.HTTPMessageSigner(
        signature_algorithm=hms.algorithms.ED25519, key_resolver=_Keys(alice)
    )
    signer.sign(
        message,
        key_id=alice.key_id,
        created=datetime.datetime.fromtimestamp(NOW, datetime.UTC),
        nonce="interop-1",
        covered_component_ids=("@method", "@target-uri"),
        body=BODY,
    )
    assert "content-digest" in message.headers["Signature-Input"]
    assert auth.authenticate("POST", URL, message.headers, BODY).key_id == alice.key_id


def test_our_signature_verifies_with_http_message_signatures(alice: Party) -> None:
    hms = pytest.importorskip("http_message_signatures")

    message = _Message("POST", URL, signed(alice, created=int(time.time())))  # it checks age
    verifier = hms.HTTPMessageVerifier(
        signature_algorithm=hms.algorithms.ED25519, key_resolver=_Keys(alice)
    )
    (result,) = verifier.verify(message, body=BODY)
    assert result.parameters["keyid"] == alice.key_id
    assert set(result.covered_components) == {
        '"@method"',
        '"@target-uri"',
        '"content-digest"',
        '"@signature-params"',
    }


# --------------------------------------------------------------------------- canonical JSON


def test_rfc8785_sample_is_canonicalised_exactly() -> None:
    # RFC 8785 section 3.2.2: input and output, character for character
    sample = (
        r'{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        r'"string": "\u20ac$\u000F\u000aA'
        "'"
        r'\u0042\u0022\u005c\\\"\/", "literals": [null, true, false]}'
    )
    canonical = (
        r'{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        r'"string":"€$\u000f\nA'
        "'"
        r'B\"\\\\\"/"}'
    )
    assert documents.canonical_json(json.loads(sample)) == canonical.encode()


def test_rfc8785_sorts_keys_by_utf16_code_units() -> None:
    # RFC 8785 section 3.2.3
    document = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    values = list(json.loads(documents.canonical_json(document)).values())
    assert values == [
        "Carriage Return",
        "One",
        "Control",
        "Latin Small Letter O With Diaeresis",
        "Euro Sign",
        "Emoji: Grinning Face",
        "Hebrew Letter Dalet With Dagesh",
    ]


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (0.0, "0"),
        (-0.0, "0"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (5e-324, "5e-324"),
        (1e-7, "1e-7"),
        (0.000001, "0.000001"),
        (9007199254740991, "9007199254740991"),
    ],
)
def test_rfc8785_number_formatting(number: float, text: str) -> None:
    assert documents.canonical_json(number) == text.encode()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=6), json_values, max_size=6), st.randoms())
def test_canonical_json_ignores_key_order(document: Dict[str, Any], rng: random.Random) -> None:
    items = list(document.items())
    rng.shuffle(items)
    assert documents.canonical_json(dict(items)) == documents.canonical_json(document)


def test_a_deal_is_canonical_whatever_its_json_spelling(alice: Party) -> None:
    site = Party("hpc1")
    document = deal(site, alice)
    respelled = json.loads(json.dumps(document, indent=3, sort_keys=True, ensure_ascii=True))
    assert documents.canonical_json(respelled) == documents.canonical_json(document)
    assert documents.deal_id(respelled) == documents.deal_id(document)


# --------------------------------------------------------------------------- deals and receipts


def test_a_deal_carries_the_request_offer_reservation_and_price(alice: Party) -> None:
    document = deal(Party("hpc1"), alice)
    assert document["reservation_id"] == "r-1" and document["buyer"] == alice.key_id
    assert document["price"] == "43.40"  # 16 cores x 2 h x 1.25 + 3.4
    assert document["cancellation_penalty"] == "0.34"
    assert document["offer"]["unit_price"] == "1.25" and document["offer"]["fee"] == "3.4"
    assert document["request"] == {
        "cores": 16,
        "duration": 7200,
        "deadline": NOW + 86400,
        "max_price": "1.5",
        "architecture": "x86_64",
        "round": 1,
    }  # absent RFQL fields are left out: "don't care"


def test_money_is_whole_cents_and_figures_are_exact() -> None:
    assert documents.money_text(Decimal("12.3")) == "12.30"
    with pytest.raises(ValueError, match="cents"):
        documents.money_text(Decimal("0.005"))
    assert documents.decimal_text(Decimal("100")) == "100"
    assert documents.decimal_text(Decimal("0.01250")) == "0.0125"
    assert documents.request_document(Request(cores=1, duration=60)) == {
        "cores": 1,
        "duration": 60,
        "round": 1,
    }


def accept(
    body: Any, expected: Dict[str, Any], client: AuthorizedClient, site: Party
) -> documents.Receipt:
    return countersign(body, expected, client, site.key, site.key_id, NOW + 60)


def test_a_confirm_is_countersigned_into_a_verifiable_receipt(alice: Party) -> None:
    site = Party("hpc1")
    document = deal(site, alice)
    receipt = accept(
        documents.confirm_body(document, alice.key, alice.key_id), document, alice.client(), site
    )
    assert receipt.user_signature.key_id == alice.key_id
    assert receipt.site_signature.key_id == "hpc1" and receipt.confirmed_at == NOW + 60
    assert documents.signature_valid(receipt.deal, receipt.user_signature, alice.key.public_key())
    assert documents.signature_valid(
        receipt.countersigned(), receipt.site_signature, site.key.public_key()
    )
    again = documents.Receipt.from_json(json.loads(json.dumps(receipt.to_json())))
    assert again == receipt and again.id == receipt.id == documents.deal_id(document)


def test_a_confirm_for_another_price_is_422(alice: Party) -> None:
    site = Party("hpc1")
    expected = deal(site, alice)
    cheaper = {**expected, "price": "1.00"}
    with pytest.raises(ConfirmRefused) as caught:
        accept(
            documents.confirm_body(cheaper, alice.key, alice.key_id), expected, alice.client(), site
        )
    assert status_of(caught.value.code) == 422 and caught.value.code == "deal_mismatch"
    assert "price" in str(caught.value)


def test_a_confirm_with_a_bad_signature_is_422(alice: Party) -> None:
    site = Party("hpc1")
    document = deal(site, alice)
    body = documents.confirm_body(document, alice.key, alice.key_id)
    body["signature"]["value"] = base64.b64encode(bytes(64)).decode()
    with pytest.raises(ConfirmRefused, match="does not verify") as caught:
        accept(body, document, alice.client(), site)
    assert caught.value.code == "bad_confirm_signature"


def test_a_confirm_signed_by_another_key_than_the_request_is_422(alice: Party) -> None:
    site, bob = Party("hpc1"), Party("bob@ci")
    document = deal(site, alice)
    with pytest.raises(ConfirmRefused) as caught:
        body = documents.confirm_body(document, bob.key, bob.key_id)
        accept(body, document, alice.client(), site)
    assert caught.value.code == "confirm_key_mismatch"


@pytest.mark.parametrize(
    "body",
    [
        None,
        {"deal": {}},
        {"signature": {}},
        {"deal": {}, "signature": {"keyid": "a", "value": "!"}},
    ],
)
def test_a_malformed_confirm_is_422(alice: Party, body: Any) -> None:
    site = Party("hpc1")
    with pytest.raises(ConfirmRefused) as caught:
        accept(body, deal(site, alice), alice.client(), site)
    assert caught.value.code == "malformed_confirm"


# --------------------------------------------------------------------------- authorized clients


def test_the_authorized_clients_file_maps_keys_to_scheduler_users(
    tmp_path: Path, alice: Party
) -> None:
    public = public_key_text(alice.key.public_key())
    path = tmp_path / "clients.yaml"
    path.write_text(
        f"clients:\n  alice@laptop: {{public_key: '{public}', user: alice, account: proj1}}\n"
        f"  alice@ci: {{public_key: '{public}', user: alice}}\n"
    )
    clients = load_authorized_clients(path)
    assert set(clients) == {"alice@laptop", "alice@ci"}
    assert (clients["alice@laptop"].user, clients["alice@laptop"].account) == ("alice", "proj1")
    assert clients["alice@ci"].account == ""


def test_authorized_clients_errors_name_the_entry(tmp_path: Path) -> None:
    path = tmp_path / "clients.yaml"
    path.write_text(
        "clients:\n"
        "  a: {public_key: 'AAAA', user: alice}\n"
        "  b: {public_key: '" + base64.b64encode(bytes(32)).decode() + "', user: Root!}\n"
        "  c: {user: carol}\n"
        "  d: {public_key: x, user: dave, acount: p}\n"
        "  'has space': {}\n"
        "client: {}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_authorized_clients(path)
    messages = [str(problem) for problem in caught.value.problems]
    assert any(
        m.startswith("clients.a.public_key: expected an Ed25519 public key") for m in messages
    )
    assert any(
        m.startswith("clients.b.user: expected a scheduler (Unix) user name") for m in messages
    )
    assert "clients.c: expected public_key" in messages
    assert 'clients.d.acount: unknown key; did you mean "account"?' in messages
    assert any(m.startswith("clients.has space: invalid key id") for m in messages)
    assert 'client: unknown key; did you mean "clients"?' in messages


# --------------------------------------------------------------------------- keys and TLS


def mode(path: Path) -> int:
    return os.stat(path).st_mode & 0o777


def test_the_site_key_is_made_once_and_kept_private(tmp_path: Path) -> None:
    path = tmp_path / "state" / "site.key"
    key = load_or_create_site_key(path)
    assert mode(path) == 0o600
    again = load_or_create_site_key(path)
    assert public_key_text(again.public_key()) == public_key_text(key.public_key())


def handshake(cert: Path, key: Path, host: str) -> str:
    """A TLS handshake on loopback with strict verification; returns the protocol version."""
    server_context = server_ssl_context(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        connection, _ = listener.accept()
        try:
            with server_context.wrap_socket(connection, server_side=True) as tls:
                tls.sendall(b"ok")
        except ssl.SSLError:
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client_context = ssl.create_default_context(cafile=str(cert))
    client_context.verify_flags |= ssl.VERIFY_X509_STRICT
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            client_context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            assert tls.recv(2) == b"ok"
            return str(tls.version())
    finally:
        thread.join(10)
        listener.close()


def test_the_self_signed_certificate_is_trusted_for_its_hosts(tmp_path: Path) -> None:
    cert, key = tmp_path / "tls" / "server.crt", tmp_path / "tls" / "server.key"
    assert ensure_self_signed(cert, key)
    assert not ensure_self_signed(cert, key)  # kept from then on
    assert mode(key) == 0o600
    assert handshake(cert, key, "localhost") in ("TLSv1.2", "TLSv1.3")
    assert handshake(cert, key, "127.0.0.1")
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(cert, key, "elsewhere.example.org")


def test_keys_command_writes_a_certificate_and_a_client_key_pair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "keys"
    args = ["keys", str(out), "--host", "agent.example.org", "--host", "10.0.0.5"]
    assert (
        main([*args, "--user", "alice", "--account", "proj1", "--key-id", "alice@x", "--json"]) == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["client"] == {
        "key_id": "alice@x",
        "public_key": (out / "client.pub").read_text().strip(),
        "user": "alice",
        "account": "proj1",
    }
    assert mode(out / "server.key") == 0o600 and mode(out / "client.key") == 0o600
    client_key = load_private_key(out / "client.key")
    assert public_key_text(client_key.public_key()) == report["client"]["public_key"]
    assert handshake(out / "server.crt", out / "server.key", "agent.example.org")
    # the printed entry is a working authorized-clients file
    (tmp_path / "clients.yaml").write_text(report["authorized_clients"])
    clients = load_authorized_clients(tmp_path / "clients.yaml")
    assert clients["alice@x"].account == "proj1"


def test_keys_command_does_not_overwrite_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keys", str(tmp_path), "--user", "alice"]) == 0
    before = (tmp_path / "client.pub").read_text()
    assert "authorized-clients" in " ".join(capsys.readouterr().out.split())
    assert main(["keys", str(tmp_path), "--user", "alice"]) == 1
    assert "--force" in capsys.readouterr().err
    assert (tmp_path / "client.pub").read_text() == before
    assert main(["keys", str(tmp_path), "--user", "alice", "--force"]) == 0
    assert (tmp_path / "client.pub").read_text() != before
    assert mode(tmp_path / "client.key") == 0o600


def test_keys_command_refuses_a_user_name_the_clients_file_would_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keys", str(tmp_path), "--user", "Not A User"]) == 1
    assert "--user" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_keys_command_writes_only_the_certificate_or_only_the_client_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bank's certificate made before its first start (its agents name it as ledger.ca),
    and a buyer's key pair, each alone."""
    bank = tmp_path / "bank-tls"
    assert main(["keys", str(bank), "--tls", "--host", "bank.example.org", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(path.name for path in bank.iterdir()) == ["server.crt", "server.key"]
    assert "client" not in report and report["hosts"] == ["bank.example.org"]
    assert handshake(bank / "server.crt", bank / "server.key", "bank.example.org")
    buyer = tmp_path / "alice"
    assert main(["keys", str(buyer), "--client", "--user", "alice", "--key-id", "alice@x"]) == 0
    assert sorted(path.name for path in buyer.iterdir()) == ["client.key", "client.pub"]
    assert "alice@x" in capsys.readouterr().out


def test_keys_command_makes_the_site_key_serve_would_and_prints_its_participants_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "siteagent.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\nsite: {{name: hpc1}}\n")
    assert main(["keys", "--site", "--config", str(config), "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    key_file = tmp_path / "state" / "site.key"  # security.site_key's default
    assert made["made"] is True and made["file"] == str(key_file) and mode(key_file) == 0o600
    site_key = load_or_create_site_key(key_file)  # what serve signs with
    assert made["public_key"] == public_key_text(site_key.public_key())
    # the printed entry is a working participants file
    (tmp_path / "participants.yaml").write_text(made["participants"])
    [site] = load_participants(tmp_path / "participants.yaml")
    assert (site.key_id, site.kind) == ("hpc1", "site")
    assert public_key_text(site.public_key) == made["public_key"]
    # again: the key is kept, never replaced
    assert main(["keys", "--site", "--config", str(config)]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "kept" in shown and made["public_key"] in shown and "participants" in shown
    assert public_key_text(load_private_key(key_file).public_key()) == made["public_key"]


def test_keys_command_site_takes_no_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keys", str(tmp_path), "--site"]) == 1
    assert "--site" in capsys.readouterr().err
    assert main(["keys"]) == 1
    assert "DIR" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_processes_starting_at_once_share_one_site_key(tmp_path: Path) -> None:
    """``serve`` and the administrator's commands may make the site key at the same moment:
    every one of them ends up with the same key, and the file is whole."""
    path = tmp_path / "site.key"
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        keys = list(pool.map(lambda _: load_or_create_site_key(path), range(16)))
    texts = {public_key_text(key.public_key()) for key in keys}
    assert texts == {public_key_text(load_private_key(path).public_key())}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site.key"]


# --------------------------------------------------------------------------- across restarts


ALICE = Party("alice@laptop")


def restarted(path: Path, now: float) -> Authenticator:
    """An authenticator as a service starting at ``now`` makes it, on the saved nonces."""

    def clock() -> float:
        return now

    nonces = NonceCache(100, clock, saved=SavedNonces(path))
    clients = {ALICE.key_id: ALICE.client("alice")}
    return Authenticator(clients, ["hpc1.example.org"], 300, nonces, clock)


def test_a_signature_dated_ahead_survives_a_restart_as_used(tmp_path: Path) -> None:
    path = tmp_path / "nonces.sqlite3"
    body, url = b"{}", "https://hpc1.example.org/v1/quotes"
    signed = signing.sign_request("POST", url, body, ALICE.key, ALICE.key_id, created=NOW + 20)
    first = restarted(path, NOW)
    first.authenticate("POST", url, list(signed.items()), body)
    again = restarted(path, NOW + 2)
    with pytest.raises(Unauthenticated, match="already used"):
        again.authenticate("POST", url, list(signed.items()), body)


def test_a_restart_within_a_second_of_a_use_refuses_that_seconds_signatures(
    tmp_path: Path,
) -> None:
    """Signed in the second it was used, by a service that restarts within that second."""
    path = tmp_path / "nonces.sqlite3"
    body, url = b"{}", "https://hpc1.example.org/v1/quotes"
    signed = signing.sign_request("POST", url, body, ALICE.key, ALICE.key_id, created=NOW)
    restarted(path, NOW + 0.2).authenticate("POST", url, list(signed.items()), body)
    with pytest.raises(Unauthenticated, match="before the agent last started"):
        restarted(path, NOW + 0.7).authenticate("POST", url, list(signed.items()), body)
    later = signing.sign_request("POST", url, body, ALICE.key, ALICE.key_id, created=NOW + 1)
    restarted(path, NOW + 1.1).authenticate("POST", url, list(later.items()), body)
