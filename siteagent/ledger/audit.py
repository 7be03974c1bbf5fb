"""``siteagent ledger check``: the bank's invariants, verified on its database as it is.

The bank keeps each account's balance beside its entries (bank.py); these checks say whether
the books still agree with themselves, whatever wrote them (a bug, a hand-made SQL change, a
restore gone wrong):

- the schema is at the version this siteagent writes;
- every kept balance is the sum of its account's entries (and no account with entries lacks
  one);
- every transaction's entries sum to zero, and it has at least two;
- all balances together sum to zero (the bank's issued money is what the others hold).

All are read in one transaction, so a bank that is booking meanwhile is seen at one instant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List

from siteagent.core.money import from_cents
from siteagent.ledger.schema import LATEST, version
from siteagent.ledger.storage import Database, Tx


@dataclass(frozen=True)
class Finding:
    """One check: what it verified, whether it held, and what was found if not."""

    check: str
    ok: bool
    detail: str

    def to_json(self) -> Dict[str, Any]:
        return {"check": self.check, "ok": self.ok, "detail": self.detail}


@dataclass
class Audit:
    """What ``ledger check`` found on one database."""

    database: str
    schema_version: int = 0
    accounts: int = 0
    transactions: int = 0
    entries: int = 0
    findings: List[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(finding.ok for finding in self.findings)

    def to_json(self) -> Dict[str, Any]:
        return {
            "database": self.database,
            "ok": self.ok,
            "schema_version": self.schema_version,
            "accounts": self.accounts,
            "transactions": self.transactions,
            "entries": self.entries,
            "findings": [finding.to_json() for finding in self.findings],
        }


#: How many disagreeing accounts or transactions a finding names (the rest are counted).
NAMED = 5


def listed(items: List[str]) -> str:
    more = f" and {len(items) - NAMED} more" if len(items) > NAMED else ""
    return ", ".join(items[:NAMED]) + more


def check(database: Database) -> Audit:
    """Run every check on ``database`` (migrated to the current schema by whoever opened it)."""
    return database.run(lambda tx: audit(tx, database.describe()), snapshot=True)


def audit(tx: Tx, where: str) -> Audit:
    found = Audit(where, schema_version=version(tx))
    found.findings.append(
        Finding(
            "schema version",
            found.schema_version == LATEST,
            f"version {found.schema_version}, this siteagent writes {LATEST}",
        )
    )
    kept = {
        str(account): int(cents)
        for account, cents in tx.all("SELECT account, balance_cents FROM balances")
    }
    summed = {
        str(account): int(cents)
        for account, cents in tx.all(
            "SELECT account, SUM(amount_cents) FROM entries GROUP BY account"
        )
    }
    found.accounts = len(set(kept) | set(summed))
    wrong = [
        f"{account}: kept {from_cents(kept.get(account, 0))}, entries "
        f"{from_cents(summed.get(account, 0))}"
        for account in sorted(set(kept) | set(summed))
        if account not in kept or kept[account] != summed.get(account, 0)
    ]
    found.findings.append(
        Finding(
            "balance = sum of entries",
            not wrong,
            listed(wrong) if wrong else f"{found.accounts} account(s) agree",
        )
    )
    unbalanced = tx.all(
        "SELECT t.id, COALESCE(SUM(e.amount_cents), 0), COUNT(e.id) FROM transactions t "
        "LEFT JOIN entries e ON e.transaction_id = t.id GROUP BY t.id "
        "HAVING COALESCE(SUM(e.amount_cents), 0) <> 0 OR COUNT(e.id) < 2 ORDER BY t.id"
    )
    counts = tx.one("SELECT (SELECT COUNT(*) FROM transactions), (SELECT COUNT(*) FROM entries)")
    assert counts is not None
    found.transactions, found.entries = int(counts[0]), int(counts[1])
    found.findings.append(
        Finding(
            "transactions sum to zero",
            not unbalanced,
            listed(
                [f"#{row[0]}: {from_cents(int(row[1]))} in {row[2]} entries" for row in unbalanced]
            )
            if unbalanced
            else f"{found.transactions} transaction(s), {found.entries} entries",
        )
    )
    total = sum(kept.values())
    found.findings.append(
        Finding("balances sum to zero", total == 0, f"the balances sum to {from_cents(total)}")
    )
    return found
