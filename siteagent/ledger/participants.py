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
from typing import Any, Dict, List, Mapping, Optional

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from siteagent.config.reading import ConfigError, Reading, Section, amount, read_yaml
from siteagent.ledger.bank import Ledger, LedgerConflict
from siteagent.protocol.keys import check_key_id
from siteagent.security.clients import CLIENT_KEYS, ed25519_public_key, mapping

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
    reading = Reading()
    root = Section(data, "", ("sites", "clients"), reading)
    found: Dict[str, Participant] = {}
    groups = (("sites", "site", ("public_key",)), ("clients", "user", (*CLIENT_KEYS, "credit")))
    for group, kind, keys in groups:
        entries: Mapping[str, Any] = root.get(group, {}, mapping)
        for key_id, entry in entries.items():
            section = Section(entry, f"{group}.{key_id}", keys, reading)
            participant = read_participant(str(key_id), kind, section)
            if participant is None:
                continue
            if participant.key_id in found:
                reading.problem(
                    section.path, "expected a key id listed once, as a site or a client"
                )
                continue
            found[participant.key_id] = participant
    if reading.problems:
        raise ConfigError(str(path), reading.problems)
    return list(found.values())


def read_participant(key_id: str, kind: str, section: Section) -> Optional[Participant]:
    """One entry, or None (with the problem recorded) if it is unusable."""
    try:
        check_key_id(key_id)
    except ValueError as exc:
        section.reading.problem(section.path, str(exc))
        return None
    if not section.has("public_key"):
        section.reading.problem(section.path, "expected public_key")
        return None
    public_key = section.get("public_key", None, ed25519_public_key)
    credit = section.get("credit", Decimal(0), amount)
    return None if public_key is None else Participant(key_id, kind, public_key, credit)


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
