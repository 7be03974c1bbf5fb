"""A federation's bank as two `siteagent ledger serve` processes on one real PostgreSQL.

Four agents (sites) confirm and cancel deals for three buyers at once, through the agent's own
client of the bank, each agent talking to one of the two processes (as a load balancer would
spread them). A booking that meets no answer is kept owed and sent again, to the other process
(as the agent's loop books what it owes). Whatever happens meanwhile (nothing; one process
SIGKILLed mid-booking; PostgreSQL restarted under the load) the books must come out whole: every
receipt booked once or refused for funds, never twice; every refund once; no buyer below minus
its credit; every balance the sum of its entries; all balances summing to zero (money is
conserved); and each site's and buyer's balance what its own record of deals says.
"""

from __future__ import annotations

import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import pytest

from siteagent.ledger.audit import check
from siteagent.ledger.bank import InsufficientFunds, Ledger, LedgerUnavailable
from siteagent.ledger.client import RemoteLedger
from siteagent.protocol import documents
from siteagent.protocol.documents import Cancellation, Receipt
from testbed.inprocess.parties import NOW, Party, receipt
from testbed.processes.banks import BankProcesses
from testbed.processes.postgres import PostgresTestServer

PRICE = Decimal("43.40")  # testbed.inprocess.parties.offer
PENALTY = Decimal("0.34")
#: Each buyer may owe 12 deals: with 4 agents x 24 deals over 3 buyers, some are refused.
CREDIT = 12 * PRICE
DEALS_PER_AGENT = 24
#: How long an agent keeps sending what it owes before the test gives up (seconds).
CATCH_UP_S = 120.0

pytestmark = pytest.mark.postgres


class Agent:
    """A site booking its deals: confirms (receipts), and a cancel of every third booked one
    (a refund less the penalty). What the bank does not answer stays owed, in order, and is
    sent again to the next process."""

    def __init__(self, site: Party, banks: List[RemoteLedger], first: int) -> None:
        self.site = site
        self.banks = banks
        self.bank = first
        self.owed: List[Tuple[str, object]] = []
        self.booked: Dict[str, Receipt] = {}
        self.refused: List[str] = []
        self.refunded: List[str] = []
        self.unavailable = 0
        self.calls: List[Tuple[float, float]] = []  # when each call to a bank began and ended

    def run(self, buyers: List[Party], start: threading.Barrier) -> None:
        start.wait()
        for number in range(DEALS_PER_AGENT):
            deal = receipt(self.site, buyers[number % len(buyers)], f"{self.site.key_id}-{number}")
            self.send(("receipt", deal))
            if number % 3 == 2:
                earlier = receipt(
                    self.site,
                    buyers[(number - 2) % len(buyers)],
                    f"{self.site.key_id}-{number - 2}",
                )
                owed = [getattr(document, "id", None) for _, document in self.owed]
                if earlier.id in self.booked or earlier.id in owed:
                    self.send(("refund", self.cancel(earlier)))

    def cancel(self, booked: Receipt) -> Cancellation:
        return documents.sign_cancellation(
            booked, PENALTY, NOW + 300, self.site.key, self.site.key_id
        )

    def send(self, booking: Tuple[str, object]) -> None:
        """Send it now unless earlier ones are still owed (order: a refund after its receipt)."""
        self.owed.append(booking)
        if len(self.owed) == 1:
            self.book_owed()

    def book_owed(self) -> None:
        while self.owed:
            kind, document = self.owed[0]
            began = time.monotonic()
            try:
                self.book(kind, document)
            except LedgerUnavailable:
                self.unavailable += 1
                self.bank = (self.bank + 1) % len(self.banks)  # the next process
                return
            finally:
                self.calls.append((began, time.monotonic()))
            self.owed.pop(0)

    def book(self, kind: str, document: object) -> None:
        bank = self.banks[self.bank]
        if kind == "receipt":
            assert isinstance(document, Receipt)
            try:
                bank.book(document)
                self.booked[document.id] = document
            except InsufficientFunds:
                self.refused.append(document.id)
        else:
            assert isinstance(document, Cancellation)
            if document.receipt_id in self.booked:
                bank.refund(document)
                self.refunded.append(document.receipt_id)

    def catch_up(self) -> None:
        deadline = time.monotonic() + CATCH_UP_S
        while self.owed and time.monotonic() < deadline:
            self.book_owed()
            if self.owed:
                time.sleep(0.5)
        assert not self.owed, f"{self.site.key_id} still owes {len(self.owed)} booking(s)"


class Federation:
    """Two bank processes on one database, four agents, three buyers."""

    def __init__(self, directory: Path, database: str) -> None:
        self.database = database
        self.sites = [Party(f"hpc{index}") for index in range(1, 5)]
        self.buyers = [Party(f"buyer{index}@lab") for index in range(3)]
        self.banks = BankProcesses(directory, database, self.sites, self.buyers, CREDIT, count=2)
        self.agents = [
            Agent(site, [self.banks.client(0, site), self.banks.client(1, site)], index % 2)
            for index, site in enumerate(self.sites)
        ]

    def run(self, disturb: Optional[Callable[[], None]] = None) -> None:
        start = threading.Barrier(len(self.agents) + 1)
        threads = [
            threading.Thread(target=agent.run, args=(self.buyers, start)) for agent in self.agents
        ]
        for thread in threads:
            thread.start()
        start.wait()
        if disturb is not None:  # once a quarter of the deals are decided: mid-load
            quarter = len(self.agents) * DEALS_PER_AGENT // 4
            while sum(len(a.booked) + len(a.refused) for a in self.agents) < quarter:
                assert any(thread.is_alive() for thread in threads), "the agents stopped early"
                time.sleep(0.01)  # a poll of progress, not a timed wait
            disturb()
        for thread in threads:
            thread.join()
        for agent in self.agents:
            agent.catch_up()

    def assert_books_whole(self) -> None:
        ledger = Ledger(self.database)
        try:
            audit = check(ledger.database)
            assert audit.ok, audit.to_json()
            balances = ledger.balances()
            assert sum(balances.values()) == 0  # money conserved
            expected: Dict[str, Decimal] = {party.key_id: Decimal(0) for party in self.buyers}
            deals = 0
            for agent in self.agents:
                site = Decimal(0)
                for receipt_id, booked in agent.booked.items():
                    kinds = [t.kind for t in ledger.movements(receipt_id)]
                    refunded = receipt_id in agent.refunded
                    assert kinds == (["deal", "refund"] if refunded else ["deal"]), receipt_id
                    moved = PRICE - (PRICE - PENALTY if refunded else 0)
                    site += moved
                    expected[booked.deal["buyer"]] -= moved
                    deals += 1
                for receipt_id in agent.refused:
                    assert ledger.movements(receipt_id) == []
                assert balances[agent.site.key_id] == site
                assert len(agent.booked) + len(agent.refused) == DEALS_PER_AGENT
            for buyer, balance in expected.items():
                assert balances[buyer] == balance
                assert balance >= -CREDIT  # no overdraft
            assert (
                deals
                == ledger.database.run(
                    lambda tx: tx.one("SELECT COUNT(*) FROM transactions WHERE kind = 'deal'")
                )[0]
            )
            assert any(agent.refused for agent in self.agents)  # the credit did bind
        finally:
            ledger.close()
        for index in range(len(self.banks.processes)):  # no 500s: every failure was a 503
            assert "unexpected error" not in self.banks.log(index).read_text(errors="replace")

    def stop(self) -> None:
        for agent in self.agents:
            for bank in agent.banks:
                bank.close()
        self.banks.stop()


@pytest.fixture
def federation(tmp_path: Path, postgres_server: PostgresTestServer) -> Iterator[Federation]:
    made = Federation(tmp_path, postgres_server.database())
    yield made
    made.stop()


def test_two_bank_processes_book_concurrent_confirms_and_cancels(federation: Federation) -> None:
    federation.run()
    federation.assert_books_whole()
    assert not any(agent.unavailable for agent in federation.agents)


def test_a_bank_process_killed_mid_booking_loses_nothing(federation: Federation) -> None:
    federation.run(lambda: federation.banks.kill(0))
    assert federation.banks.processes[0].returncode == -9
    federation.assert_books_whole()
    assert any(agent.unavailable for agent in federation.agents)


def test_the_database_restarted_under_load_loses_nothing(
    federation: Federation, postgres_server: PostgresTestServer
) -> None:
    down: List[float] = []

    def restart() -> None:
        down.append(time.monotonic())
        postgres_server.restart()

    federation.run(restart)
    federation.assert_books_whole()
    # The restart met a booking in flight (the bank ran it again on a new connection, or
    # answered 503 and the agent sent it again): agents book back to back, so one always is.
    in_flight = [c for a in federation.agents for c in a.calls if c[0] < down[0] < c[1]]
    assert in_flight
    for index in (0, 1):  # both processes serve again without a restart of their own
        assert federation.banks.healthy(index)
