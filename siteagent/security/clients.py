"""The authorized-clients file: which keys may change state, and the scheduler user (and
account) each key's reservations are made for.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import ConfigDict, Field
from pydantic_core import InitErrorDetails
from typing_extensions import Annotated

from siteagent.config.fields import Section, check, entries, problem, validated
from siteagent.config.reading import Invalid, name, read_yaml, scheduler_user
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
    read = validated(ClientsFile, data, {}, str(path))
    return {
        key_id: AuthorizedClient(key_id, entry.public_key, entry.user, entry.account)
        for key_id, entry in read.clients.items()
    }


def ed25519_public_key(raw: Any) -> Ed25519PublicKey:
    if isinstance(raw, Ed25519PublicKey):
        return raw
    try:
        return parse_public_key(raw if isinstance(raw, str) else "")
    except ValueError:
        raise Invalid(
            "an Ed25519 public key (base64 of 32 bytes, as `siteagent keys` prints it)"
        ) from None


PublicKey = Annotated[Ed25519PublicKey, check(ed25519_public_key)]


class ClientEntry(Section):
    """One client of the file: its key, and who its reservations are made for."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    public_key: PublicKey
    user: Annotated[str, check(scheduler_user)]
    account: Annotated[str, check(name)] = ""

    @classmethod
    def missing(cls, keys: List[str], data: Any) -> List[InitErrorDetails]:
        return [problem((), "expected " + " and ".join(keys), data)]


#: A mapping of key ids to entries, each key id checked (:func:`check_key_id`).
by_key_id = entries("a mapping of key ids to clients", check_key_id)


class ClientsFile(Section):
    """The authorized-clients file."""

    clients: Annotated[Dict[str, ClientEntry], by_key_id] = Field(default_factory=dict)
