"""Where the bank keeps its books: versioned schema migrations (an old SQLite bank migrated in
place), kept balances checked against their entries (`siteagent ledger check`), the books moved
from SQLite to PostgreSQL (`siteagent ledger migrate`), two banks deciding on one receipt at
once, and PostgreSQL's side: a database that cannot be reached, a connection cut under the bank."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from decimal import Decimal
from pathlib import Path
from typing import List, Tuple

import pytest

from siteagent.cli.main import main
from siteagent.ledger.audit import check
from siteagent.ledger.bank import BANK, Ledger, LedgerConflict, LedgerError, LedgerUnavailable
from siteagent.ledger.schema import LATEST, V1_SQLITE, SchemaError
from siteagent.protocol import documents, keys
from siteagent.protocol.documents import Cancellation, Receipt
from testbed.inprocess.parties import NOW, Party, deal, receipt
from testbed.processes.ports import free_port
from testbed.processes.postgres import PostgresTestServer
from testbed.processes.programs import require_postgres_driver

PRICE = Decimal("43.40")  # testbed.inprocess.parties.offer


def funded_bank(location: str) -> Tuple[Ledger, Party, Party]:
    """A bank with a deposit, two deals, a refund and a void: every kind of row."""
    site, alice = Party("hpc1"), Party("alice@laptop")
    ledger = Ledger(location)
    ledger.register(site.key_id, "site", site.key.public_key())
    ledger.register(alice.key_id, "user", alice.key.public_key(), Decimal("50.00"))
    ledger.deposit(alice.key_id, Decimal("100.00"), "allocation")
    first = receipt(site, alice, reservation_id="r-1")
    ledger.book(first)
    ledger.book(receipt(site, alice, reservation_id="r-2"))
    ledger.refund(documents.sign_cancellation(first, Decimal("0.34"), NOW + 9, site.key, "hpc1"))
    never = receipt(site, alice, reservation_id="r-3")
    ledger.refund(documents.sign_cancellation(never, Decimal(0), NOW + 9, site.key, "hpc1"))
    return ledger, site, alice


# --------------------------------------------------------------------------- schema versions


def old_bank_file(path: Path, alice: Party, site: Party) -> None:
    """A bank as siteagent wrote it before schema versions: version 1's tables, no balances,
    entries ordered by SQLite's rowid only (a deposit, then a deal of 43.40)."""
    db = sqlite3.connect(path)
    for statement in V1_SQLITE:
        db.execute(statement)
    db.execute(
        "INSERT INTO participants VALUES (?, 'user', ?), (?, 'site', ?)",
        (
            alice.key_id,
            keys.public_key_text(alice.key.public_key()),
            site.key_id,
            keys.public_key_text(site.key.public_key()),
        ),
    )
    db.execute("INSERT INTO transactions (kind, at, memo) VALUES ('deposit', 1, 'allocation')")
    db.execute("INSERT INTO transactions (kind, at, memo) VALUES ('deposit', 2, 'to the site')")
    # entries written credit first in the second transaction: their order must survive
    for entry in ((1, BANK, -10000), (1, alice.key_id, 10000), (2, site.key_id, 4340)):
        db.execute("INSERT INTO entries VALUES (?, ?, ?)", entry)
    db.execute("INSERT INTO entries VALUES (2, ?, -4340)", (BANK,))
    db.commit()
    db.close()


def test_an_old_sqlite_bank_is_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    alice, site = Party("alice@laptop"), Party("hpc1")
    old_bank_file(path, alice, site)
    ledger = Ledger(path)
    assert ledger.balances() == {
        BANK: Decimal("-143.40"),
        alice.key_id: Decimal("100.00"),
        site.key_id: Decimal("43.40"),
    }
    assert [line.amount for line in ledger.statement(BANK)] == [Decimal("-100.00"), -PRICE]
    assert ledger.database.run(
        lambda tx: tx.all("SELECT account FROM entries WHERE transaction_id = 2 ORDER BY id")
    ) == [(site.key_id,), (BANK,)]
    versions = ledger.database.run(lambda tx: tx.all("SELECT version FROM schema_migrations"))
    assert versions == [(1,), (2,)]
    ledger.deposit(alice.key_id, Decimal("1.00"))  # and it books on as before
    assert ledger.balance(alice.key_id) == Decimal("101.00")
    assert check(ledger.database).ok
    ledger.close()
    again = Ledger(path)  # opening again applies nothing
    assert again.database.run(lambda tx: tx.all("SELECT version FROM schema_migrations")) == [
        (1,),
        (2,),
    ]
    again.close()


def test_a_database_newer_than_this_siteagent_is_refused(ledger_location: str) -> None:
    ledger = Ledger(ledger_location)
    ledger.database.run(
        lambda tx: tx.run(
            "INSERT INTO schema_migrations (version, applied_at, summary) VALUES (?, 0, 'x')",
            (LATEST + 1,),
        )
    )
    ledger.close()
    with pytest.raises(SchemaError, match=f"version {LATEST + 1}"):
        Ledger(ledger_location)


# --------------------------------------------------------------------------- ledger check


def test_check_finds_a_kept_balance_that_drifted_from_its_entries(
    ledger_location: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger, _, alice = funded_bank(ledger_location)
    audit = check(ledger.database)
    assert audit.ok and audit.schema_version == LATEST and audit.transactions == 4
    assert main(["ledger", "check", "--database", ledger_location]) == 0
    assert "balance = sum of entries" in capsys.readouterr().out
    ledger.database.run(
        lambda tx: tx.run(
            "UPDATE balances SET balance_cents = balance_cents + 1 WHERE account = ?",
            (alice.key_id,),
        )
    )
    ledger.close()
    assert main(["ledger", "check", "--database", ledger_location, "--json"]) == 1
    found = json.loads(capsys.readouterr().out)
    assert not found["ok"]
    failed = {f["check"]: f["detail"] for f in found["findings"] if not f["ok"]}
    assert set(failed) == {"balance = sum of entries", "balances sum to zero"}
    assert alice.key_id in failed["balance = sum of entries"]


def test_check_finds_an_unbalanced_transaction(ledger_location: str) -> None:
    ledger, site, _ = funded_bank(ledger_location)
    ledger.database.run(
        lambda tx: tx.run("UPDATE entries SET amount_cents = 1 WHERE account = ?", (site.key_id,))
    )
    findings = {finding.check: finding.ok for finding in check(ledger.database).findings}
    ledger.close()
    assert findings["transactions sum to zero"] is False
    assert findings["balance = sum of entries"] is False


# --------------------------------------------------------------------------- ledger migrate


@pytest.mark.postgres
def test_migrate_moves_sqlite_books_to_postgresql_equal(
    tmp_path: Path, postgres_server: PostgresTestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    source = f"sqlite:{tmp_path / 'ledger.sqlite3'}"
    ledger, site, alice = funded_bank(source)
    before = {account: ledger.statement(account) for account in ledger.balances()}
    ledger.close()
    target = postgres_server.database()
    assert main(["ledger", "migrate", "--from", source, "--to", target, "--json"]) == 0
    moved = json.loads(capsys.readouterr().out)
    assert moved["ok"] and moved["rows"]["transactions"] == 4 and moved["rows"]["voids"] == 1
    assert {a["account"] for a in moved["accounts"] if a["equal"]} == set(before)
    assert "***" not in moved["to"] and moved["check"]["ok"]
    bank = Ledger(target)
    assert {account: bank.statement(account) for account in bank.balances()} == before
    later = bank.book(receipt(site, alice, reservation_id="r-4"))  # ids go on after the copy
    assert later.id == 5
    refused = receipt(site, alice, reservation_id="r-3")  # the void came along
    with pytest.raises(Exception, match="voided"):
        bank.book(refused)
    bank.close()
    # a second migration into books that exist is refused, and changes nothing
    assert main(["ledger", "migrate", "--from", source, "--to", target]) != 0
    assert "empty database" in capsys.readouterr().err
    assert Ledger(target).balance(site.key_id) == 3 * PRICE - (PRICE - Decimal("0.34"))


def test_migrate_prints_a_table_of_both_sides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = tmp_path / "a.sqlite3", tmp_path / "b.sqlite3"
    funded_bank(f"sqlite:{source}")[0].close()
    assert main(["ledger", "migrate", "--from", f"sqlite:{source}", "--to", str(target)]) == 0
    out = capsys.readouterr().out
    assert "balance before" in out and "alice@laptop" in out and "yes" in out


# --------------------------------------------------------------------------- PostgreSQL


def test_a_void_racing_its_receipt_at_two_banks_leaves_the_buyer_whole(
    ledger_location: str,
) -> None:
    """Two processes' worth of banks: one books a receipt while the other books its void.
    Whichever comes first, the buyer ends whole (booked then refunded in full, or refused);
    were the two decided on apart, the receipt would be booked and its void kept unrefunded."""
    first, site, alice = funded_bank(ledger_location)
    second = Ledger(ledger_location)
    before = first.balance(alice.key_id)
    for number in range(12):
        deal = receipt(site, alice, reservation_id=f"race-{number}")
        void = documents.sign_cancellation(deal, Decimal(0), NOW + 9, site.key, site.key_id)
        start = threading.Barrier(2)

        def book(deal: Receipt = deal, start: threading.Barrier = start) -> None:
            start.wait()
            with contextlib.suppress(LedgerConflict):  # voided first: refused
                first.book(deal)

        def cancel(void: Cancellation = void, start: threading.Barrier = start) -> None:
            start.wait()
            second.refund(void)

        threads = [threading.Thread(target=book), threading.Thread(target=cancel)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert first.balance(alice.key_id) == before, number
    assert check(first.database).ok
    first.close()
    second.close()


def test_a_postgresql_that_cannot_be_reached_is_unavailable() -> None:
    require_postgres_driver()
    with pytest.raises(LedgerUnavailable) as caught:
        Ledger(f"postgresql://bank:secret@127.0.0.1:{free_port()}/bank")
    assert caught.value.code == "unavailable"
    assert "cannot be reached" in str(caught.value) and "secret" not in str(caught.value)


@pytest.mark.postgres
def test_banks_starting_at_once_migrate_once(postgres_server: PostgresTestServer) -> None:
    location = postgres_server.schema()
    opened: List[Ledger] = []
    failures: List[BaseException] = []
    start = threading.Barrier(4)

    def open_bank() -> None:
        start.wait()
        try:
            opened.append(Ledger(location))
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=open_bank) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures and len(opened) == 4
    versions = opened[0].database.run(lambda tx: tx.all("SELECT version FROM schema_migrations"))
    assert versions == [(1,), (2,)]
    for ledger in opened:
        ledger.close()


@pytest.mark.postgres
def test_a_connection_cut_under_the_bank_is_replaced(postgres_server: PostgresTestServer) -> None:
    """The administrator terminates the bank's sessions (or the server restarted): the next
    booking gets a fresh connection instead of failing."""
    import psycopg

    location = postgres_server.schema()
    ledger, site, alice = funded_bank(location)
    with psycopg.connect(postgres_server.url("postgres"), autocommit=True) as admin:
        cut = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'siteagent ledger'"
        ).fetchall()
    assert cut
    booked = ledger.book(receipt(site, alice, reservation_id="r-9"))
    assert booked.kind == "deal"
    ledger.close()


# --------------------------------------------------------------------------- batch bookings


def batch_receipts(site: Party, buyer: Party, reservations: List[str]) -> List[Receipt]:
    """A batch confirm's receipts (docs/batches.md): the buyer's one signature over their ids,
    each countersigned by the site."""
    made = [deal(site, buyer, reservation_id) for reservation_id in reservations]
    ids = tuple(documents.deal_id(one) for one in made)
    signed = documents.sign_document(documents.batch_document(ids), buyer.key, buyer.key_id)
    out = []
    for one in made:
        countersigned = documents.countersigned_document(one, signed, NOW + 60, ids)
        site_signature = documents.sign_document(countersigned, site.key, site.key_id)
        out.append(Receipt(one, signed, NOW + 60, site_signature, ids))
    return out


def test_a_batch_is_booked_whole_or_not_at_all(ledger_location: str) -> None:
    """On either database: a batch the buyer cannot pay for in all, or with one receipt that
    does not verify (named by its place), books nothing; one it can pay books every receipt
    in one go, and booked again answers the same transactions."""
    ledger, site, alice = funded_bank(ledger_location)
    before = ledger.balance(alice.key_id)  # 56.26 with 50.00 of credit: two deals, not three
    with pytest.raises(LedgerError) as refused:
        ledger.book_all(batch_receipts(site, alice, ["b-1", "b-2", "b-3"]))
    assert refused.value.code == "insufficient_funds"
    forged = receipt(Party("hpc1"), alice, reservation_id="b-9")  # another key as hpc1
    with pytest.raises(LedgerError) as refused:
        ledger.book_all([receipt(site, alice, reservation_id="b-8"), forged])
    assert (refused.value.code, refused.value.field) == (
        "bad_site_signature",
        "receipts[1].site_signature",
    )
    assert ledger.balance(alice.key_id) == before
    pair = batch_receipts(site, alice, ["b-1", "b-2"])
    booked = ledger.book_all(pair)
    assert ledger.balance(alice.key_id) == before - 2 * PRICE
    assert ledger.book_all(pair) == booked
    assert ledger.balance(alice.key_id) == before - 2 * PRICE
    assert check(ledger.database).ok
    ledger.close()
