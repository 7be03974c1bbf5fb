"""``siteagent ledger migrate --from sqlite:PATH --to postgresql://...``: move a bank's books.

Every table is copied row for row, ids kept (a statement's transaction numbers and a receipt's
transactions are the same afterwards), into a target that has no books yet, in one transaction
of the target: a copy that fails leaves the target empty. Then both banks are read through the
same rules (:class:`~siteagent.ledger.Ledger`) and compared account by account: the balance and
every statement line must be equal, and the target must pass ``ledger check``. Both databases
are at the current schema version first (opening them migrates them in place).

The source is only read; stop the bank that writes it before migrating (a booking made during
the copy would be missing from the target, and the comparison says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Sequence, Tuple

from siteagent.ledger.audit import Audit, check
from siteagent.ledger.bank import Ledger
from siteagent.ledger.storage import DatabaseError, Row, Tx

#: The tables in an order that satisfies their references, with their columns.
TABLES: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("participants", ("id", "kind", "public_key")),
    ("credit_limits", ("account", "credit_cents")),
    (
        "receipts",
        ("id", "site", "reservation_id", "buyer", "price_cents", "penalty_cents", "document"),
    ),
    ("transactions", ("id", "kind", "receipt_id", "at", "memo", "document")),
    ("entries", ("id", "transaction_id", "account", "amount_cents")),
    ("balances", ("account", "balance_cents")),
    ("voids", ("receipt_id", "site", "document")),
)

#: Tables whose ``id`` comes from a sequence that must continue after the copied ids.
IDENTITIES = ("transactions", "entries")


class MigrationError(DatabaseError):
    """The books cannot be moved (the target has books already)."""


@dataclass(frozen=True)
class AccountComparison:
    """One account on both sides."""

    account: str
    source_balance: str
    target_balance: str
    source_lines: int
    target_lines: int
    equal: bool

    def to_json(self) -> Dict[str, Any]:
        return {
            "account": self.account,
            "source_balance": self.source_balance,
            "target_balance": self.target_balance,
            "source_lines": self.source_lines,
            "target_lines": self.target_lines,
            "equal": self.equal,
        }


@dataclass(frozen=True)
class Moved:
    """What ``migrate`` copied and found."""

    rows: Dict[str, int]
    accounts: List[AccountComparison]
    audit: Audit

    @property
    def ok(self) -> bool:
        return all(account.equal for account in self.accounts) and self.audit.ok


def read_all(tx: Tx) -> Dict[str, List[Row]]:
    """Every row of every table, in key order (one transaction: one instant)."""
    return {
        table: tx.all(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {columns[0]}")
        for table, columns in TABLES
    }


def write_all(tx: Tx, rows: Dict[str, List[Row]]) -> None:
    """Insert the rows into an empty target, then move its id sequences past them."""
    books = tx.one(
        "SELECT (SELECT COUNT(*) FROM transactions), (SELECT COUNT(*) FROM participants)"
    )
    assert books is not None
    if books != (0, 0):
        raise MigrationError(
            f"the target already holds {books[0]} transaction(s) and {books[1]} participant(s): "
            "migrate into a new, empty database (createdb), before any bank serves on it"
        )
    for table, columns in TABLES:
        marks = ", ".join("?" for _ in columns)
        tx.many(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows[table])
    if tx.dialect == "postgresql":
        for table in IDENTITIES:
            tx.run(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                f"COALESCE(MAX(id), 0) + 1, false) FROM {table}"
            )


def compare(source: Ledger, target: Ledger) -> List[AccountComparison]:
    """Each account's balance and statement on both sides, read through the bank's rules."""
    before, after = source.balances(), target.balances()
    found = []
    for account in sorted(set(before) | set(after)):
        lines: Sequence[Any] = source.statement(account) if account in before else []
        moved: Sequence[Any] = target.statement(account) if account in after else []
        found.append(
            AccountComparison(
                account,
                str(before.get(account, "-")),
                str(after.get(account, "-")),
                len(lines),
                len(moved),
                account in before
                and account in after
                and before[account] == after[account]
                and list(lines) == list(moved),
            )
        )
    return found


def migrate_books(
    source: Ledger, target: Ledger, progress: Callable[[float], None] = lambda _: None
) -> Moved:
    """Copy ``source``'s books into the empty ``target`` and compare them; ``progress`` is
    told the fraction done after each step."""
    rows = source.database.run(read_all, snapshot=True)
    progress(0.3)
    target.database.run(lambda tx: write_all(tx, rows))
    progress(0.7)
    accounts = compare(source, target)
    progress(0.9)
    audit = check(target.database)
    progress(1.0)
    return Moved({table: len(found) for table, found in rows.items()}, accounts, audit)
