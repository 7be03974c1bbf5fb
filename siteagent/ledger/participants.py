"""Who holds an account at the bank: the participants file of ``siteagent ledger serve``.

Sites (with the key their ``/v1/info`` shows) and clients (in the authorized-clients format,
with an optional ``credit``: how far below zero the client's balance may go to pay for deals,
0 unless given) are listed by the administrator; a request cannot open an account. The file is
read at start and on SIGHUP (a changed credit applies then); an account is never closed by
leaving the file.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Mapping

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import ConfigDict, Field
from pydantic_core import InitErrorDetails
from typing_extensions import Annotated

from siteagent.config.fields import Section, check, problem, validated
from siteagent.config.reading import amount, read_yaml
from siteagent.ledger.bank import Ledger, LedgerConflict
from siteagent.security.clients import ClientEntry, PublicKey, by_key_id

log = logging.getLogger("siteagent.ledger")


@dataclass(frozen=True)
class Participant:
    """An account holder: a site or a client (``kind`` "site" or "user"), its key, and the
    credit its balance may use to pay for deals."""

    key_id: str
    kind: str
    public_key: Ed25519PublicKey
    credit: Decimal = Decimal(0)


def load_participants(path: Path) -> List[Participant]:
    """Read a participants file; errors name the key path, like the configuration's.

    ::

        sites:
          hpc1:
            public_key: "<base64 Ed25519 key: the agent's /v1/info public_key.value>"
        clients:            # the authorized-clients format; user and account are not used
          alice@laptop:
            public_key: "<base64 Ed25519 key, as `siteagent keys` prints it>"
            credit: "100.00"    # optional: alice may go down to -100.00 (default 0)
    """
    data = read_yaml(path, "participants file")
    read = validated(ParticipantsFile, data, {}, str(path))
    sites = [Participant(key_id, "site", site.public_key) for key_id, site in read.sites.items()]
    return sites + [
        Participant(key_id, "user", client.public_key, client.credit)
        for key_id, client in read.clients.items()
    ]


class SiteEntry(Section):
    """A site of the file: the key its ``/v1/info`` shows."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    public_key: PublicKey

    @classmethod
    def missing(cls, keys: List[str], data: Any) -> List[InitErrorDetails]:
        return ClientEntry.missing(keys, data)


class CreditedClient(SiteEntry):
    """A client of the file, in the authorized-clients format (its ``user`` and ``account``
    are for the agents, not read here) with the credit it may use."""

    user: Any = None
    account: Any = None
    credit: Annotated[Decimal, check(amount)] = Decimal(0)


class ParticipantsFile(Section):
    """The participants file: each key id listed once, as a site or a client."""

    sites: Annotated[Dict[str, SiteEntry], by_key_id] = Field(default_factory=dict)
    clients: Annotated[Dict[str, CreditedClient], by_key_id] = Field(default_factory=dict)

    @classmethod
    def relations(cls, data: Mapping[str, Any]) -> List[InitErrorDetails]:
        sites, clients = (data.get(key) for key in ("sites", "clients"))
        if not (isinstance(sites, Mapping) and isinstance(clients, Mapping)):
            return []
        twice = "expected a key id listed once, as a site or a client"
        return [problem(("clients", key), twice, key) for key in clients if key in sites]


def register_all(ledger: Ledger, participants: List[Participant]) -> None:
    """Open the accounts (a no-op for those that exist). A key that differs from the one
    booked is logged and left as it was: changing a key is the administrator's decision."""
    for participant in participants:
        try:
            ledger.register(
                participant.key_id, participant.kind, participant.public_key, participant.credit
            )
        except LedgerConflict as exc:
            log.error("%s; its receipts will be refused until an administrator resolves it", exc)
