"""The buyer's registry of sites: which agents it buys from, how it trusts their TLS
certificates, which key it signs with there, and how long it waits for each.

One YAML file (``sites.yaml``, read with ``yaml.safe_load``), so that every command of
``siteagent-client`` and every program on the library reaches the same sites the same way::

    buyer: {key_id: alice@laptop, private_key: ~/.config/siteagent/alice.key}
    ledger: {url: "https://bank.example.org:8444", ca: bank-ca.pem}     # optional
    timeouts: {connect: 3, read: 10, total: 60}
    sites:
      - {name: hpc1, url: "https://hpc1.example.org:8443", ca: hpc1-ca.pem}
      - {name: hpc2, url: "https://hpc2.example.org:8443", pin: "sha256//..."}

Every site names exactly one way to trust its certificate: ``ca``, a file of the certificates
(a CA's, or the site's own self-signed one) its certificate must chain to and whose host name
must match, or ``pin``, the SHA-256 of the site's certificate itself. The buyer's ``key_id``
and ``private_key`` are defaults a site may override. A mistake is refused when the file is
read, naming the file, the key at fault and the fix: unknown keys (a misspelt ``pin`` must not
silently mean "no pin"), a URL that is not HTTPS, two sites of one name.

A private key is read only when a request is signed with it, and only if its owner alone may
read it (mode 0600, as ssh wants ``id_ed25519``): anyone else who can read it can buy as its
owner.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import hashlib
import os
import re
import shlex
import stat
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from siteagent.core import names
from siteagent.core.errors import SiteagentError
from siteagent.core.files import UnsafeFile
from siteagent.protocol.errors import BAD_INPUT, INVALID_SITES_FILE
from siteagent.protocol.keys import check_key_id, load_private_key

#: The environment variable naming the registry when ``--sites`` does not.
SITES_ENV = "SITEAGENT_CLIENT_SITES"

#: The name the bank of the registry's ``ledger`` section goes by in results and errors.
LEDGER_NAME = "ledger"

#: How a pin is written: the hash, ``//``, then the certificate's digest in base64 or hex.
PIN_PREFIX = "sha256//"

#: The longest timeout a site may set: a request that has not answered in an hour will not.
MAX_TIMEOUT_S = 3600.0

_TOP_KEYS = ("buyer", "ledger", "timeouts", "sites")
_BUYER_KEYS = ("key_id", "private_key")
_ENDPOINT_KEYS = ("url", "ca", "pin", "key_id", "private_key", "timeouts")
_SITE_KEYS = ("name", *_ENDPOINT_KEYS)
_TIMEOUT_KEYS = ("connect", "read", "total")
_HEX_DIGEST = re.compile(r"[0-9A-Fa-f]{64}")


class RegistryError(SiteagentError, ValueError):
    """A sites file that cannot be used: the message names the file, the key and the fix."""

    code = INVALID_SITES_FILE


@dataclass(frozen=True)
class Timeouts:
    """Seconds to wait for a connection (TCP and TLS), then for each read of the answer, and
    for the whole exchange (an answer sent a byte at a time passes every read's timeout)."""

    connect: float = 3.0
    read: float = 10.0
    total: float = 60.0


@dataclass(frozen=True)
class Site:
    """One agent (or the bank) as the buyer reaches it.

    ``pin`` is the SHA-256 of the site's certificate (DER), as 64 lower-case hex digits, when
    the site is trusted by its pinned certificate; ``ca`` the file of trusted certificates
    otherwise (exactly one of the two is set).
    """

    name: str
    url: str
    ca: Optional[Path]
    pin: Optional[str]
    key_id: str
    private_key: Path
    timeouts: Timeouts

    def signing_key(self) -> Ed25519PrivateKey:
        """The buyer's key at this site (read now; see :func:`load_buyer_key`)."""
        return load_buyer_key(self.private_key)


@dataclass(frozen=True)
class Registry:
    """The sites of one file, in its order, and the federation's bank if it names one."""

    path: Path
    sites: Tuple[Site, ...]
    ledger: Optional[Site]

    def select(self, wanted: Sequence[str]) -> Tuple[Site, ...]:
        """The sites named in ``wanted`` (all of them when it is empty), in the file's order;
        RegistryError naming any that the file does not list."""
        if not wanted:
            return self.sites
        known = {site.name for site in self.sites}
        unknown = [name for name in wanted if name not in known]
        if unknown:
            raise RegistryError(
                f"{self.path}: no site named {', '.join(map(repr, unknown))}; "
                f"the file lists {', '.join(sorted(known))}"
            )
        return tuple(site for site in self.sites if site.name in wanted)

    def bank(self) -> Site:
        """The bank (the ``ledger`` section); RegistryError saying how to add it if absent."""
        if self.ledger is None:
            raise RegistryError(
                f"{self.path}: no ledger section: `siteagent-client sites add ledger "
                f"https://HOST:8444 --ca FILE` names the federation's bank (`siteagent ledger "
                f"serve`), or add `ledger: {{url: https://HOST:8444, ca: FILE}}`"
            )
        return self.ledger


def default_path(environ: Mapping[str, str] = os.environ) -> Path:
    """Where the registry is when ``--sites`` does not say: ``$SITEAGENT_CLIENT_SITES``, else
    ``sites.yaml`` in the user's configuration directory (``$XDG_CONFIG_HOME/siteagent``,
    ``~/.config/siteagent`` by default)."""
    if environ.get(SITES_ENV):
        return Path(environ[SITES_ENV]).expanduser()
    return config_dir(environ) / "sites.yaml"


def config_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """The client's configuration directory (XDG base directories)."""
    base = environ.get("XDG_CONFIG_HOME") or str(Path("~/.config").expanduser())
    return Path(base) / "siteagent"


def load_registry(path: Optional[Path] = None) -> Registry:
    """Read and check the registry at ``path`` (default: :func:`default_path`)."""
    path = default_path() if path is None else path
    return check_document(path, read_document(path))


def check_document(path: Path, document: Any, allow_empty: bool = False) -> Registry:
    """The registry a sites file's ``document`` (read from ``path``) stands for; RegistryError
    naming the file, the key and the fix. ``allow_empty``: a file listing no site yet (one
    being edited) is accepted."""
    return _Reader(path, allow_empty).registry(document)


def read_document(path: Path) -> Any:
    """The YAML document of the sites file at ``path``; RegistryError if it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RegistryError(
            f"{path}: no such sites file: `siteagent-client sites add NAME URL --ca FILE` "
            f"writes one (docs/client.md shows its format), or name yours with --sites FILE "
            f"or ${SITES_ENV}"
        ) from None
    except OSError as exc:
        raise RegistryError(f"{path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise RegistryError(f"{path}: not a sites file (YAML text in UTF-8): {exc}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RegistryError(f"{path}: not YAML: {exc}") from None
    return document


class KeyFileError(SiteagentError, ValueError):
    """The buyer's private key file is missing or not an Ed25519 key: input to fix."""

    code = BAD_INPUT


def load_buyer_key(path: Path) -> Ed25519PrivateKey:
    """The buyer's Ed25519 key in ``path``, refused (UnsafeFile) unless its owner alone may
    read and write it, and KeyFileError (naming the file) if it is missing or not such a key."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        raise KeyFileError(
            f"{path}: no such private key: make one with `siteagent-client keys`"
        ) from None
    if mode & 0o077:
        raise UnsafeFile(
            f"the buyer's private key is mode {mode:04o}, so others may read it and sign as "
            f"you; refusing it (fix: chmod 600 {shlex.quote(str(path))})",
            path=path,
        )
    try:
        return load_private_key(path)
    except ValueError as exc:
        raise KeyFileError(f"{path}: not an Ed25519 private key in PEM ({exc})") from None


def parse_pin(text: str) -> str:
    """A pin (``sha256//`` and the SHA-256 of the certificate in base64, or in hex with or
    without colons, as ``openssl x509 -fingerprint -sha256`` prints it) as 64 lower-case hex
    digits; ValueError saying what a pin is otherwise."""
    digest = text[len(PIN_PREFIX) :] if text.startswith(PIN_PREFIX) else None
    if digest is not None:
        hexadecimal = digest.replace(":", "")
        if _HEX_DIGEST.fullmatch(hexadecimal):
            return hexadecimal.lower()
        try:
            raw = base64.b64decode(digest, validate=True)
        except binascii.Error:
            raw = b""
        if len(raw) == hashlib.sha256().digest_size:
            return raw.hex()
    raise ValueError(
        f"{text!r} is not a pin: write sha256// and the SHA-256 of the site's certificate (DER) "
        "in base64 or hex; `openssl x509 -in CERT -outform der | openssl dgst -sha256` "
        "prints it"
    )


def certificate_pin(der: bytes) -> str:
    """The pin of a certificate (its DER bytes), as a registry writes it."""
    return PIN_PREFIX + base64.b64encode(hashlib.sha256(der).digest()).decode("ascii")


@dataclass(frozen=True)
class _Defaults:
    """What a site inherits from the file's top level."""

    key_id: Optional[str]
    private_key: Optional[Path]
    timeouts: Timeouts


class _Reader:
    """Checks one file's document, each problem raised with the file and the key path."""

    def __init__(self, path: Path, allow_empty: bool = False) -> None:
        self.path = path
        self.allow_empty = allow_empty

    def fail(self, where: str, message: str) -> RegistryError:
        return RegistryError(f"{self.path}: {where}: {message}")

    def registry(self, document: Any) -> Registry:
        top = self.mapping(document, "the file", _TOP_KEYS)
        buyer = self.mapping(top.get("buyer", {}), "buyer", _BUYER_KEYS)
        defaults = _Defaults(
            key_id=self.key_id(buyer["key_id"], "buyer.key_id") if "key_id" in buyer else None,
            private_key=(
                self.file(buyer["private_key"], "buyer.private_key")
                if "private_key" in buyer
                else None
            ),
            timeouts=self.timeouts(top.get("timeouts"), "timeouts", Timeouts()),
        )
        entries = top.get("sites", [] if self.allow_empty else None)
        if not isinstance(entries, list) or not (entries or self.allow_empty):
            raise self.fail(
                "sites",
                "give a list of sites, each `- {name: ..., url: ..., ca: ...}` (`siteagent-client "
                "sites add NAME URL --ca FILE` adds one)",
            )
        sites = tuple(
            self.site(entry, f"sites[{index}]", defaults) for index, entry in enumerate(entries)
        )
        self.unique(sites)
        ledger = None
        if top.get("ledger") is not None:
            fields = self.mapping(top["ledger"], "ledger", _ENDPOINT_KEYS)
            ledger = self.endpoint(LEDGER_NAME, fields, "ledger", defaults)
        return Registry(self.path, sites, ledger)

    def site(self, entry: Any, where: str, defaults: _Defaults) -> Site:
        fields = self.mapping(entry, where, _SITE_KEYS)
        name = fields.get("name")
        if not names.is_valid(names.NAME, name):
            raise self.fail(
                f"{where}.name",
                f"{name!r} is not a site name: 1-64 letters, digits and . _ - (first a letter "
                "or digit)",
            )
        assert isinstance(name, str)
        return self.endpoint(name, fields, f"{where} ({name})", defaults)

    def endpoint(self, name: str, fields: Dict[str, Any], where: str, defaults: _Defaults) -> Site:
        """A site (or the bank), its fields checked in the order they are written."""
        url = self.url(fields.get("url"), f"{where}.url")
        if ("ca" in fields) == ("pin" in fields):
            raise self.fail(
                where,
                "give exactly one of ca (the file of certificates the site's must chain to) "
                "and pin (sha256// and the SHA-256 of its certificate)",
            )
        ca = self.certificates(fields["ca"], f"{where}.ca") if "ca" in fields else None
        pin = self.pin(fields["pin"], f"{where}.pin") if "pin" in fields else None
        key_id = self.key_id(fields["key_id"], f"{where}.key_id") if "key_id" in fields else None
        private_key = (
            self.file(fields["private_key"], f"{where}.private_key")
            if "private_key" in fields
            else None
        )
        key_id = key_id or defaults.key_id
        private_key = private_key or defaults.private_key
        if key_id is None or private_key is None:
            raise self.fail(
                where,
                "no buyer key: set buyer.key_id and buyer.private_key (or the site's own "
                "key_id and private_key); `siteagent-client keys` makes a key pair",
            )
        timeouts = self.timeouts(fields.get("timeouts"), f"{where}.timeouts", defaults.timeouts)
        return Site(name, url, ca, pin, key_id, private_key, timeouts)

    def mapping(self, value: Any, where: str, allowed: Sequence[str]) -> Dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a mapping of {', '.join(allowed)}")
        for key in value:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(allowed)}"
                raise self.fail(where, f"unknown key {key!r} ({hint})")
        return value

    def url(self, value: Any, where: str) -> str:
        text = value if isinstance(value, str) else repr(value)
        parts = urllib.parse.urlsplit(text)
        if parts.scheme != "https" or not parts.hostname:
            raise self.fail(
                where,
                f"{text!r} is not a site's address: write https://HOST[:PORT] (sites are "
                "reached over HTTPS only)",
            )
        try:
            parts.port  # noqa: B018 -- the property raises on a port out of range
        except ValueError as exc:
            raise self.fail(where, f"{text!r}: {exc}") from None
        if parts.username or parts.password or parts.query or parts.fragment:
            raise self.fail(where, f"{text!r}: no user, query or fragment in a site's address")
        return text.rstrip("/")

    def file(self, value: Any, where: str) -> Path:
        """A path as written (``~`` expanded), relative to the registry's directory."""
        if not isinstance(value, str) or not value:
            raise self.fail(where, "expected a file's path")
        return self.path.parent / Path(value).expanduser()

    def certificates(self, value: Any, where: str) -> Path:
        """A CA file, which must exist now: without it no site of the file can be trusted."""
        path = self.file(value, where)
        if not path.is_file():
            raise self.fail(
                where,
                f"no such file {path}: copy the site's CA (or its self-signed server.crt) there",
            )
        return path

    def key_id(self, value: Any, where: str) -> str:
        try:
            return check_key_id(value if isinstance(value, str) else repr(value))
        except ValueError as exc:
            raise self.fail(where, str(exc)) from None

    def pin(self, value: Any, where: str) -> str:
        try:
            return parse_pin(value if isinstance(value, str) else repr(value))
        except ValueError as exc:
            raise self.fail(where, str(exc)) from None

    def timeouts(self, value: Any, where: str, default: Timeouts) -> Timeouts:
        if value is None:
            return default
        fields = self.mapping(value, where, _TIMEOUT_KEYS)
        seconds: Dict[str, float] = {}
        for key in _TIMEOUT_KEYS:
            given = fields.get(key, getattr(default, key))
            if isinstance(given, bool) or not isinstance(given, (int, float)):
                raise self.fail(f"{where}.{key}", f"expected seconds (a number), got {given!r}")
            if not 0 < given <= MAX_TIMEOUT_S:
                raise self.fail(
                    f"{where}.{key}", f"{given} s: give 0 < seconds <= {MAX_TIMEOUT_S:g}"
                )
            seconds[key] = float(given)
        return Timeouts(**seconds)

    def unique(self, sites: Tuple[Site, ...]) -> None:
        seen: List[str] = []
        for site in sites:
            if site.name in seen:
                raise self.fail("sites", f"two sites are named {site.name!r}: names must differ")
            seen.append(site.name)
