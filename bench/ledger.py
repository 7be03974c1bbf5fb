"""`python -m bench ledger`: the federation's bank on PostgreSQL against SQLite.

1. **Bookings through the HTTPS service.** 20 agents (threads, each a site with the agent's
   own client of the bank, :class:`~siteagent.ledger.client.RemoteLedger`) book receipts at
   once, for buyers drawn from 20, against: one ``siteagent ledger serve`` on SQLite (the
   default) and 1, 2 and 4 processes on one PostgreSQL (testbed/processes/postgres.py: a private
   server
   started here). Agent i talks to process i mod n, as a load balancer would spread them.
   Reported: bookings per second (all bookings over the wall time) and the median and p99
   latency of one booking; for PostgreSQL also the transactions it rolled back per booking
   (conflicts run again by the bank, from pg_stat_database). Every configuration runs once per
   round, the rounds interleaved, and the medians over rounds are reported.
2. **The funds check at 10⁵ entries per account.** A buyer with 10⁵ entries (bulk-written
   deposits): the read a booking's funds check made before balances were kept (the SUM of the
   account's entries) against the kept balance's one row, and a whole booking, on both
   databases; medians of repeated reads.

The machine is shared: the load average is recorded at the start and end of each part.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Tuple

from bench.common import machine, md_table, write_results
from siteagent.ledger.bank import BANK, Ledger
from siteagent.ledger.storage import Tx
from testbed.inprocess.parties import Party, receipt
from testbed.processes.banks import BankProcesses
from testbed.processes.postgres import PostgresTestServer

AGENTS = 20
BUYERS = 20
#: The configurations side by side: (database, processes).
CONFIGURATIONS: Tuple[Tuple[str, int], ...] = (
    ("sqlite", 1),
    ("postgresql", 1),
    ("postgresql", 2),
    ("postgresql", 4),
)
#: The SQL a funds check ran before balances were kept, and the one it runs now.
SUMMED = "SELECT COALESCE(SUM(amount_cents), 0) FROM entries WHERE account = ?"
KEPT = "SELECT balance_cents FROM balances WHERE account = ?"


def load() -> float:
    return round(os.getloadavg()[0], 2)


def percentile(values: List[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def rollbacks(server: PostgresTestServer, url: str) -> int:
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(server.url("postgres"), autocommit=True) as connection:
        row = connection.execute(
            "SELECT xact_rollback FROM pg_stat_database WHERE datname = %s", (name,)
        ).fetchone()
    return int(row[0]) if row else 0


def book_at_once(
    work: Path,
    server: PostgresTestServer,
    database: str,
    processes: int,
    per_agent: int,
    round_: int,
) -> Dict[str, Any]:
    """One configuration, once: 20 agents booking ``per_agent`` receipts each at once."""
    sites = [Party(f"site{index}") for index in range(AGENTS)]
    buyers = [Party(f"buyer{index}@lab") for index in range(BUYERS)]
    url = server.database() if database == "postgresql" else None
    banks = BankProcesses(
        work / f"{database}-{processes}-{round_}", url, sites, buyers, Decimal(10**6), processes
    )
    before = rollbacks(server, url) if url else 0
    latencies: List[float] = []
    failures: List[str] = []
    start = threading.Barrier(AGENTS + 1)

    def agent(index: int) -> None:
        client = banks.client(index % processes, sites[index], timeout=60)
        deals = [
            receipt(sites[index], buyers[(index * 7 + n) % BUYERS], f"r{round_}-{n}")
            for n in range(per_agent)
        ]
        start.wait()
        for deal in deals:
            began = time.perf_counter()
            try:
                client.book(deal)
            except Exception as exc:  # reported: a benchmark of failures is no benchmark
                failures.append(repr(exc))
                continue
            latencies.append(time.perf_counter() - began)
        client.close()

    threads = [threading.Thread(target=agent, args=(index,)) for index in range(AGENTS)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    conflicts = rollbacks(server, url) - before if url else 0
    banks.stop()
    if failures:
        raise RuntimeError(f"{len(failures)} booking(s) failed, e.g. {failures[0]}")
    return {
        "bookings": len(latencies),
        "per_s": len(latencies) / wall,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * percentile(latencies, 0.99),
        "rollbacks_per_booking": conflicts / len(latencies),
    }


def service_part(
    work: Path, server: PostgresTestServer, rounds: int, per_agent: int
) -> Dict[str, Any]:
    runs: Dict[str, List[Dict[str, Any]]] = {}
    started = load()
    for round_ in range(rounds):
        for database, processes in CONFIGURATIONS:
            name = f"{database} x{processes}"
            print(f"round {round_ + 1}/{rounds}: {name} (load {load()})", flush=True)
            runs.setdefault(name, []).append(
                book_at_once(work, server, database, processes, per_agent, round_)
            )
    table = []
    for name, found in runs.items():
        row: Dict[str, Any] = {"configuration": name}
        for figure in ("per_s", "p50_ms", "p99_ms", "rollbacks_per_booking"):
            row[figure] = statistics.median(run[figure] for run in found)
        table.append(row)
    reference = table[0]["per_s"]
    for row in table:
        row["vs_sqlite"] = row["per_s"] / reference
    return {
        "agents": AGENTS,
        "buyers": BUYERS,
        "bookings_per_agent": per_agent,
        "rounds": rounds,
        "load_at_start": started,
        "load_at_end": load(),
        "medians": table,
        "runs": runs,
    }


def fill(tx: Tx, buyer: str, entries: int) -> None:
    """``entries`` deposits to ``buyer`` written in bulk (test data, as the bank writes it)."""
    tx.many(
        "INSERT INTO transactions (id, kind, at, memo) VALUES (?, 'deposit', 0, 'bulk')",
        [(n + 1,) for n in range(entries)],
    )
    tx.many(
        "INSERT INTO entries (transaction_id, account, amount_cents) VALUES (?, ?, ?)",
        [row for n in range(entries) for row in ((n + 1, BANK, -100), (n + 1, buyer, 100))],
    )
    tx.run("DELETE FROM balances")
    tx.run("INSERT INTO balances SELECT account, SUM(amount_cents) FROM entries GROUP BY account")
    if tx.dialect == "postgresql":
        tx.run("SELECT setval(pg_get_serial_sequence('transactions', 'id'), ?)", (entries + 1,))


def timed(operation: Any, repeats: int) -> float:
    """Median milliseconds of ``operation()``."""
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        operation()
        times.append(time.perf_counter() - began)
    return 1000 * statistics.median(times)


def balance_row(database: str, location: str, entries: int, repeats: int) -> Dict[str, Any]:
    """The funds check's read before and after kept balances, and a booking, on one database."""
    site, buyer = Party("hpc1"), Party("buyer@lab")
    ledger = Ledger(location)
    ledger.register(site.key_id, "site", site.key.public_key())
    ledger.register(buyer.key_id, "user", buyer.key.public_key())
    ledger.database.run(lambda tx: fill(tx, buyer.key_id, entries))
    if database == "postgresql":
        ledger.database.run(lambda tx: tx.run("ANALYZE"))
    run = ledger.database.run
    summed = timed(lambda: run(lambda tx: tx.one(SUMMED, (buyer.key_id,))), repeats)
    kept = timed(lambda: run(lambda tx: tx.one(KEPT, (buyer.key_id,))), repeats)
    deals = iter(range(repeats))
    booking = timed(lambda: ledger.book(receipt(site, buyer, f"r-{next(deals)}")), repeats)
    assert ledger.balance(buyer.key_id) == Decimal(entries) - repeats * Decimal("43.40")
    ledger.close()
    return {
        "database": database,
        "entries": entries,
        "sum_of_entries_ms": summed,
        "kept_balance_ms": kept,
        "ratio": summed / kept,
        "booking_ms": booking,
    }


def balance_part(
    work: Path, server: PostgresTestServer, entries: int, repeats: int
) -> Dict[str, Any]:
    started = load()
    rows = [
        balance_row("sqlite", f"sqlite:{work / 'balance.sqlite3'}", entries, repeats),
        balance_row("postgresql", server.database(), entries, repeats),
    ]
    return {"load_at_start": started, "load_at_end": load(), "repeats": repeats, "rows": rows}


def markdown(results: Dict[str, Any]) -> str:
    service, balance = results["service"], results["balance"]
    where = results["machine"]
    return (
        "# bench ledger: the bank on PostgreSQL against SQLite\n\n"
        f"Measured {where['date']} on {where['cpus']} cores, Python {where['python']}; the "
        "machine is shared with other engineers' work. `python -m bench ledger` (bench/ledger.py "
        "says how).\n\n"
        f"## Bookings through the HTTPS service: {service['agents']} agents at once\n\n"
        f"{service['agents']} agents booked {service['bookings_per_agent']} receipts each at "
        f"once for {service['buyers']} buyers; medians of {service['rounds']} interleaved "
        f"rounds. Load average {service['load_at_start']} at the start, "
        f"{service['load_at_end']} at the end.\n\n"
        + md_table(
            service["medians"],
            ["configuration", "per_s", "vs_sqlite", "p50_ms", "p99_ms", "rollbacks_per_booking"],
        )
        + "\n`per_s`: bookings per second; `vs_sqlite`: that over SQLite's; latencies of one "
        "booking as an agent waits for it; `rollbacks_per_booking`: transactions PostgreSQL "
        "rolled back per booking (a conflict with a concurrent booking, run again by the bank, or "
        "a refusal). All processes, the PostgreSQL server and the agents share this machine's "
        "cores, so more processes add no CPU here: what the figures show is that processes on "
        "one database do not conflict (no rollbacks), not how hosts of their own would scale.\n\n"
        f"## The funds check at {balance['rows'][0]['entries']:,} entries per account\n\n"
        f"Medians of {balance['repeats']} reads; load average {balance['load_at_start']} at "
        f"the start, {balance['load_at_end']} at the end.\n\n"
        + md_table(
            balance["rows"],
            ["database", "entries", "sum_of_entries_ms", "kept_balance_ms", "ratio", "booking_ms"],
        )
        + "\n`sum_of_entries_ms`: the read a booking's funds check made before balances were "
        "kept; `kept_balance_ms`: the one it makes now; each a whole transaction (on "
        "PostgreSQL BEGIN, SELECT and COMMIT, three round trips to the server's process); "
        "`booking_ms`: a whole booking now (signatures, funds check, writes, commit), with the "
        "buyer's entries.\n"
    )


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench ledger", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every configuration (3)")
    parser.add_argument("--per-agent", type=int, default=25, help="bookings per agent (25)")
    parser.add_argument("--entries", type=int, default=100_000, help="entries per account (10^5)")
    parser.add_argument("--repeats", type=int, default=30, help="reads per figure (30)")
    parser.add_argument("--quick", action="store_true", help="1 round, 5 bookings, 10^3 entries")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.per_agent, args.entries, args.repeats = 1, 5, 1000, 5
    server = PostgresTestServer()
    server.start()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-ledger-") as work:
            results: Dict[str, Any] = {"machine": machine()}
            results["service"] = service_part(Path(work), server, args.rounds, args.per_agent)
            results["balance"] = balance_part(Path(work), server, args.entries, args.repeats)
    finally:
        server.remove()
    write_results("ledger", results, markdown(results))
    return 0
