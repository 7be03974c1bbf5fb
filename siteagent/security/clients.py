"""The authorized-clients file: which keys may change state, and the scheduler user (and
account) each key's reservations are made for.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from siteagent.config.reading import (
    ConfigError,
    Invalid,
    Reading,
    Section,
    name,
    read_yaml,
    scheduler_user,
)
from siteagent.protocol.keys import check_key_id, parse_public_key

log = logging.getLogger("siteagent.security")


@dataclass(frozen=True)
class AuthorizedClient:
    """A key that may change state, and the scheduler user and account its reservations are
    made for (the batch system enforces that only they can run jobs in them)."""

    key_id: str
    public_key: Ed25519PublicKey
    user: str
    account: str = ""


def read_authorized_clients(path: Path) -> Dict[str, AuthorizedClient]:
    """The authorized clients; no file (the default's first start) means none yet."""
    if not path.exists():
        log.warning("no authorized-clients file at %s: no client can reserve", path)
        return {}
    return load_authorized_clients(path)


def load_authorized_clients(path: Path) -> Dict[str, AuthorizedClient]:
    """Read an authorized-clients file; errors name the key path, like the configuration's.
    A file that others may write is refused: they could add a key mapped to any user.

    ::

        clients:
          alice@laptop:
            public_key: "<base64 of the 32-byte Ed25519 key, as `siteagent keys` prints it>"
            user: alice          # the scheduler (Unix) user reservations are made for
            account: proj42      # optional: the scheduler account charged
    """
    data = read_yaml(path, "authorized-clients file")
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
