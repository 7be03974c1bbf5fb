"""The buyer's own account at the federation's bank (``siteagent ledger serve``): its balance
and credit, and its statement, each deal with the receipt it books.

A bank shows an account only to its holder (and the sites), so both reads are GETs signed
with the buyer's key, as docs/protocol.md's bank routes say; the bank is reached like a site
(:class:`~siteagent.client.connection.SiteConnection` to the registry's ``ledger`` section:
the same TLS trust, timeouts and errors).
"""

from __future__ import annotations

import urllib.parse

from siteagent.client.connection import SiteConnection
from siteagent.protocol.models import AccountBalance, AccountStatement


class Account:
    """The buyer's account at the bank of ``connection`` (its key id is the account)."""

    def __init__(self, connection: SiteConnection) -> None:
        self.connection = connection
        self.account = connection.site.key_id

    def balance(self) -> AccountBalance:
        """``GET /v1/accounts/{id}``, signed: the balance and the credit."""
        raw = self.connection.request("GET", self.path(), signed=True)
        return self.connection.parsed(AccountBalance, raw)

    def statement(self) -> AccountStatement:
        """``GET /v1/accounts/{id}/statement``, signed: every movement in booking order."""
        raw = self.connection.request("GET", self.path("/statement"), signed=True)
        return self.connection.parsed(AccountStatement, raw)

    def path(self, part: str = "") -> str:
        """The account's route. A key id's characters are all valid in a path (``@``, ``:``
        and ``+`` included) and are sent as they are: the signature covers the URL as the
        bank reads it back."""
        return f"/v1/accounts/{urllib.parse.quote(self.account, safe='@:+')}{part}"
