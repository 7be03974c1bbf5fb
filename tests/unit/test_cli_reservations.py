"""``siteagent reservations`` on offers from ``siteagent quote``, and the agent cycle that
serves them.

The commands run in-process on a temporary state directory holding a small simulated cluster
(16 cores, 8 of them busy for ten hours), as an administrator would run them next to
``siteagent serve``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from siteagent.agent.loop import Agent, WaitObserver
from siteagent.backends.replay import SwfReplayBackend
from siteagent.cli.console import EXIT_REFUSED
from siteagent.cli.main import main
from siteagent.config.schema import PricingConfig
from siteagent.core.values import ClusterSnapshot, Job
from siteagent.core.waits import QueueWait
from siteagent.market.lifecycle import ReservationState
from siteagent.market.quoting import ACCEPT_LEAD_S
from siteagent.market.reconcile import OFFER_RETENTION_S
from siteagent.market.reservations import ReservationManager
from siteagent.market.site import pricing_of
from siteagent.market.store import Store
from testbed.inprocess.fakes import FakeClock
from testbed.inprocess.offers import record_offer
from testbed.inprocess.traces import write_trace

PRICING = pricing_of(PricingConfig())

S = ReservationState


@pytest.fixture
def state_dir(tmp_path: Path) -> str:
    trace = write_trace(tmp_path / "t.swf", [(0, 36000, 8, 36000), (500000, 10, 1, 10)], 16)
    directory = str(tmp_path / "state")
    assert (
        main(["serve", "--once", "--trace", trace, "--offset", "0", "--state-dir", directory]) == 0
    )
    return directory


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> Dict[str, Any]:
    assert main([*argv]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def quote(capsys: pytest.CaptureFixture[str], *argv: str) -> Dict[str, Any]:
    """The earliest alternative ``siteagent quote`` offers (alpha 0), with the quote's now."""
    answer = run(capsys, "quote", "--alpha", "0", "--json", *argv)
    return {**answer["offers"][answer["chosen"]], "now": answer["now"]}


def authorized_buyer(state_dir: str, capsys: pytest.CaptureFixture[str]) -> Tuple[str, str]:
    """A buyer key made with ``siteagent keys`` and admitted in the site's authorized-clients
    file (its default place in the state directory): (key id, private key file)."""
    made = run(
        capsys,
        "keys",
        str(Path(state_dir) / "buyer"),
        "--key-id",
        "alice@laptop",
        "--user",
        "alice",
        "--json",
    )
    clients = Path(state_dir) / "authorized_clients.yaml"
    clients.write_text(made["authorized_clients"], encoding="utf-8")
    return made["client"]["key_id"], made["files"]["client.key"]


def test_offer_accept_confirm_cancel(state_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    where = ["--state-dir", state_dir]
    buyer, signing_key = authorized_buyer(state_dir, capsys)
    offer = quote(capsys, "--cores", "4", "--duration", "1h", "--client", buyer, *where)
    assert offer["cores"] == 4 and offer["end"] - offer["start"] == 3600
    assert offer["total"] == "4.00"
    accept = ["reservations", "accept", offer["offer_id"], "--key", "k1", "--client", buyer]
    accept.append("--json")
    record = run(capsys, *accept, *where)["reservation"]
    assert record["state"] == "TENTATIVE" and record["start"] == offer["start"]
    assert record["deal"]["buyer"] == buyer and record["receipt"] is None
    assert run(capsys, *accept, *where)["reservation"] == record  # a retry: the same answer
    rid = record["id"]
    confirm = ["reservations", "confirm", rid, "--client", buyer, "--json", *where]
    confirmed = run(capsys, *confirm, "--signing-key", signing_key)["reservation"]
    assert confirmed["state"] == "CONFIRMED" and confirmed["receipt"]["deal"] == record["deal"]
    entries = {e["account"]: e["amount"] for e in confirmed["ledger_transaction"]["entries"]}
    assert entries[buyer] == "-4.00"  # booked in the site's (embedded) ledger
    balance = run(capsys, "ledger", "balance", buyer, "--json", *where)
    assert balance["balance"] == "-4.00"
    cancel = ["reservations", "cancel", rid, "--client", buyer, "--json", *where]
    cancelled = run(capsys, *cancel)["reservation"]
    assert cancelled["penalty"] == "0.00" and cancelled["cancellation"] is not None
    assert run(capsys, "ledger", "balance", buyer, "--json", *where)["balance"] == "0.00"
    listed = run(capsys, "reservations", "list", "--json", *where)["reservations"]
    assert [(r["id"], r["state"]) for r in listed] == [(rid, "CANCELLED")]
    shown = run(capsys, "reservations", "show", rid, "--json", *where)
    assert [step["to"] for step in shown["history"]] == [
        "REQUESTED",
        "TENTATIVE",
        "CONFIRMED",
        "CANCELLED",
    ]
    assert main(["reservations", "list", "--state", "TENTATIVE", *where]) == 0
    assert "Reservations (0)" in capsys.readouterr().out


def test_refusals_are_one_line_and_exit_3(
    state_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["--state-dir", state_dir]
    assert main(["reservations", "accept", "nope", *where]) == EXIT_REFUSED
    assert "never quoted it to you" in capsys.readouterr().err
    capsys.readouterr()
    big = quote(capsys, "--cores", "9", "--duration", "60", *where)
    assert big["start"] - big["now"] > 36000 - 60  # only once the 10-hour job has ended
    buyer, signing_key = authorized_buyer(state_dir, capsys)
    confirm = ["reservations", "confirm", "nope", "--client", buyer, "--signing-key", signing_key]
    assert main([*confirm, *where]) == EXIT_REFUSED
    assert "no reservation 'nope'" in capsys.readouterr().err


def test_bad_input_names_the_problem(state_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["quote", "--cores", "2", "--duration", "ten", "--state-dir", state_dir])
    assert "invalid duration 'ten'" in capsys.readouterr().err
    huge = ["quote", "--cores", "99", "--duration", "60", "--state-dir", state_dir]
    assert main(huge) == EXIT_REFUSED
    assert "99 cores asked, the site has 16" in capsys.readouterr().err
    assert main(["reservations", "show", "nope", "--state-dir", state_dir]) == 1


def test_quote_honours_the_earliest_start(
    state_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    where = ["--state-dir", state_dir]
    soon = quote(capsys, "--cores", "8", "--duration", "60", *where)
    later = quote(capsys, "--cores", "8", "--duration", "60", "--earliest", "+2h", *where)
    # 8 of the 16 cores are free now: the soonest offer is the buyer's minute to accept away
    assert soon["start"] == soon["now"] + ACCEPT_LEAD_S
    assert later["start"] == later["now"] + 2 * 3600


# --------------------------------------------------------------------------- the agent cycle


def test_each_cycle_expires_and_reports(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    trace = write_trace(tmp_path / "t.swf", [(0, 36000, 8, 36000), (500000, 10, 1, 10)], 16)
    backend = SwfReplayBackend(trace, offset_s=0, clock=clock)
    store = Store(":memory:")
    manager = ReservationManager(store, backend, clock=backend.now, confirm_timeout=60)
    agent = Agent(backend, PRICING, poll_interval_s=1, manager=manager, store=store)
    bid = record_offer(manager, 2, start=backend.now() + 600, duration=600)
    record = manager.accept(bid.id, "alice", "k")
    caplog.set_level(logging.INFO)
    agent.cycle()
    assert "reservations: 1 tentative, 0 confirmed, 0 active" in caplog.text
    clock.advance(60)
    agent.cycle()
    assert "this cycle: 1 expired" in caplog.text
    assert store.get_reservation(record.id).state is S.EXPIRED  # type: ignore[union-attr]
    assert backend.list_reservations() == []
    unused = record_offer(manager, 2, start=backend.now() + 600, duration=600, valid_s=30)
    clock.advance(31 + OFFER_RETENTION_S)  # a day and a second after it expired
    agent.cycle()
    assert "1 expired offers forgotten" in caplog.text
    assert store.get_offer(unused.id) is None
    assert store.get_offer(bid.id) is not None  # its reservation still refers to it


def test_every_job_that_starts_between_two_snapshots_counts_with_its_wait() -> None:
    """Seen pending first or not: a job submitted and started between two polls counts too
    (with zero wait if it started at once); jobs running at the first snapshot do not."""
    observer = WaitObserver()
    before = Job("6", cores=2, submit=0, limit=600, start=10)
    pending = Job("7", cores=4, submit=100, limit=3600)
    started = Job("7", cores=4, submit=100, limit=3600, start=250)
    at_once = Job("8", cores=1, submit=220, limit=60, start=220)
    between = Job("9", cores=8, submit=210, limit=7200, start=280)
    first = ClusterSnapshot(now=200, capacity=16, running=(before,), pending=(pending,))
    assert observer.observe(first) == []
    second = ClusterSnapshot(now=300, capacity=16, running=(before, started, at_once, between))
    assert observer.observe(second) == [
        QueueWait("7", 4, 3600, 100, 250),
        QueueWait("8", 1, 60, 220, 220),
        QueueWait("9", 8, 7200, 210, 280),
    ]
    assert observer.observe(second) == []  # counted once
    later = Job("10", cores=1, submit=350, limit=60, start=350)
    third = ClusterSnapshot(now=400, capacity=16, running=(started, later))
    assert observer.observe(third) == [QueueWait("10", 1, 60, 350, 350)]


def test_jobs_running_at_the_first_snapshot_after_a_restart_are_not_counted() -> None:
    """They started before the agent watched: their start is known, but not that it was
    not counted by the agent that ran before (the store keeps each job once anyway)."""
    running = Job("7", cores=4, submit=100, limit=3600, start=250)
    restarted = WaitObserver()
    assert restarted.observe(ClusterSnapshot(now=300, capacity=8, running=(running,))) == []
    assert restarted.observe(ClusterSnapshot(now=400, capacity=8, running=(running,))) == []


def test_the_agent_records_observed_waits(tmp_path: Path) -> None:
    clock = FakeClock()
    jobs = [(0, 100, 4, 100), (10, 50, 4, 50), (500000, 10, 1, 10)]
    backend = SwfReplayBackend(write_trace(tmp_path / "t.swf", jobs, 4), offset_s=0, clock=clock)
    store = Store(":memory:")
    agent = Agent(backend, PRICING, poll_interval_s=1, store=store)
    waits: List[QueueWait] = []
    for _ in range(4):
        agent.cycle()
        clock.advance(40)
        waits = store.queue_waits()
    assert [(w.job_id, w.wait) for w in waits] == [("2", 90)]


def test_the_agent_records_jobs_that_started_without_waiting(tmp_path: Path) -> None:
    """On the replay: job 2 is submitted and starts between two polls (2 cores free), job 3
    is seen waiting for the whole machine; job 1 runs at the first poll and is not counted."""
    clock = FakeClock()
    jobs = [(0, 100, 2, 100), (50, 60, 1, 60), (60, 200, 4, 200), (500000, 10, 1, 10)]
    backend = SwfReplayBackend(write_trace(tmp_path / "t.swf", jobs, 4), offset_s=0, clock=clock)
    store = Store(":memory:")
    agent = Agent(backend, PRICING, poll_interval_s=1, store=store)
    for _ in range(4):  # polls at 0, 40, 80 and 120 s into the trace
        agent.cycle()
        clock.advance(40)
    assert [(w.job_id, w.wait) for w in store.queue_waits()] == [("2", 0), ("3", 50)]
