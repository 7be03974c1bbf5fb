"""Crash tests: SIGKILL at random points of accept, confirm, cancel and expiry; nothing lost,
nothing left behind.

The agent runs as a real process (``siteagent serve`` on the replay backend, polling every
0.2 s, confirm deadline 2 s) and the admin commands drive the lifecycle as real processes
too. A campaign picks flows at random; each flow kills a process at one of three kinds of
point:

* a **crash point**: the process kills itself right before or after a chosen call (intent
  written, reservation created, transition recorded, deletion done), see
  ``testbed/processes/crashrun.py``;
* a **timer**: an external SIGKILL after a random delay;
* the **agent**: ``siteagent serve`` is killed while a command runs, or armed with a crash
  point in its own housekeeping (expiry, reconciliation).

After every kill the dead is restarted (the agent) or sometimes retried with the same
idempotency key (a command), and the lifecycle's promises are checked within one poll
interval and a cycle's time once the agent is up (``testbed/inprocess/promises.py: violations``; a
restarted agent must run its first cycle within a minute): no reservation with the agent's
prefix exists in the batch system without a TENTATIVE/CONFIRMED/ACTIVE record; no reservation
ever confirmed is lost; every unconfirmed one is gone within its deadline plus that grace; in
the agent's bank, every confirmed reservation's deal is booked and no buyer paid for one that
was never confirmed (a confirm killed between the bank's booking and the move to CONFIRMED is
voided once the reservation expires). In this setting nobody deletes reservations behind the
agent's back, so nothing may be LOST.

The seed is printed and in every failure message; set ``SITEAGENT_CRASH_SEED`` to replay a
campaign's choices (process timing still varies from run to run).
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import time
import uuid
from typing import Callable, Counter, Dict, List, Optional, Set, Tuple

import pytest

from siteagent.ledger.bank import Ledger
from siteagent.market.lifecycle import ReservationRecord, ReservationState
from testbed.inprocess.offers import earliest_start, record_offer
from testbed.inprocess.promises import violations
from testbed.processes.sites import LifecycleSite

S = ReservationState

#: Kills in the normal run and in the full (``--slow``) run. A campaign first visits every
#: crash point once (in random order), which takes about 20 kills, then chooses at random.
NORMAL_KILLS = 22
FULL_KILLS = 200

ACCEPT_POINTS = (
    "store.add_reservation:1:after",  # intent written, batch system not asked yet
    "backend.create_reservation:1:before",
    "backend.create_reservation:1:after",  # created, neither verified nor recorded
    "store.transition:1:before",  # verified, TENTATIVE not written
    "store.transition:1:after",  # TENTATIVE written, the answer never sent
)
CONFIRM_POINTS = (
    "backend.list_reservations:1:after",
    "store.owe:1:after",  # the receipt kept, the bank not asked yet
    "store.mark_booked:1:before",  # booked at the bank, the reservation not moved
    "store.transition:1:before",
    "store.transition:1:after",  # confirmed, the answer never sent
)
CANCEL_POINTS = (
    "store.transition:1:before",
    "store.transition:1:after",  # CANCELLED written, still in the batch system
    "backend.delete_reservation:1:before",
    "backend.delete_reservation:1:after",
)
AGENT_POINTS = (
    "store.transition:1:before",
    "store.transition:1:after",  # e.g. EXPIRED written, not deleted yet
    "backend.delete_reservation:1:after",
    "backend.list_reservations:2:after",  # a reconciliation's listing
)


#: An agent that has not run a cycle this long after starting is broken, not slow.
AGENT_START_LIMIT_S = 60.0


def campaign_seed() -> int:
    return int(os.environ.get("SITEAGENT_CRASH_SEED", "0")) or random.randrange(1, 2**31)


class Campaign:
    """Random flows against one site, counting kills and checking promises after each."""

    def __init__(self, site: LifecycleSite, seed: int) -> None:
        self.site = site
        self.seed = seed
        self.rng = random.Random(seed)
        self.store = site.open_store()
        self.backend = site.open_backend()
        self.manager = site.manager(self.store, self.backend)  # only to record offers
        self.ledger = Ledger(site.state_dir / "ledger.sqlite3")  # the agent's embedded bank
        self.clock = site.clock(self.backend)
        self.start_agent()
        self.kills: Counter[str] = collections.Counter()
        self.confirmed: Set[str] = set()
        self.cancelled: Set[str] = set()
        self.journal: List[str] = []

    # ---- processes

    def args(self, *args: str, signs: bool = False) -> List[str]:
        return [*args, *self.site.buyer_args(signs), "--json", *self.site.lifecycle_args()]

    def start_agent(self, crash: Optional[str] = None) -> None:
        """Start ``siteagent serve``; it is up once its log shows a first cycle's line."""
        self.agent_log_at = self.site.agent_log_size()
        self.agent_started = time.monotonic()
        self.agent_up_since: Optional[float] = None  # batch-system clock
        self.agent_up_at = 0.0  # monotonic
        self.agent = self.site.start_agent(crash)

    def agent_is_up(self) -> bool:
        if self.agent_up_since is None and " tentative, " in self.site.agent_log(self.agent_log_at):
            self.agent_up_since = self.clock()
            self.agent_up_at = time.monotonic()
        return self.agent_up_since is not None

    def ensure_agent(self) -> None:
        """Restart the agent if it died (its own crash point fired)."""
        if self.agent.poll() is not None:
            if self.agent.returncode == -signal.SIGKILL:
                self.kills["agent crash point"] += 1
            else:
                self.fail(f"the agent exited with {self.agent.returncode}")
            self.start_agent()

    def kill_agent(self, why: str, crash: Optional[str] = None) -> None:
        self.ensure_agent()
        self.agent.send_signal(signal.SIGKILL)
        self.agent.wait()
        self.kills[why] += 1
        self.note(f"killed the agent ({why}), restarting it" + (f" armed {crash}" if crash else ""))
        self.start_agent(crash)

    def drive(
        self, args: List[str], points: Tuple[str, ...], point: Optional[str]
    ) -> Optional[subprocess.CompletedProcess[str]]:
        """Run a command and kill something on the way (at ``point`` if given); maybe retry
        it with the same key. Returns the last completed run (None if killed, not retried)."""
        mode = "point" if point else self.rng.choice(("point", "point", "timer", "agent"))
        result: Optional[subprocess.CompletedProcess[str]] = None
        if mode == "point":
            crash = point or self.rng.choice(points)
            result = self.site.run(args, crash=crash)
            if result.returncode == -signal.SIGKILL:
                self.kills[f"{args[1]} at {crash}"] += 1
                self.note(f"{args[1]} killed itself at {crash}")
                result = None
        else:
            process = self.site.spawn(args)
            time.sleep(self.rng.uniform(0.1, 1.5))
            if mode == "agent":
                self.kill_agent(f"agent during {args[1]}")
                out, err = process.communicate(timeout=60)
                result = subprocess.CompletedProcess(args, process.returncode, out, err)
            elif process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.communicate()
                self.kills[f"{args[1]} by timer"] += 1
                self.note(f"{args[1]} killed by timer")
            else:
                out, err = process.communicate()
                result = subprocess.CompletedProcess(args, process.returncode, out, err)
        if result is None and self.rng.random() < 0.6:
            result = self.site.run(args)
            self.note(f"{args[1]} retried with the same key: exit {result.returncode}")
        if result is not None and result.returncode not in (0, 3):
            self.fail(f"{' '.join(args[:3])} exited {result.returncode}: {result.stderr}")
        return result

    # ---- flows

    def accept(self, point: Optional[str] = None, crash: bool = True) -> Optional[str]:
        """A new offer, accepted (with a kill on the way if ``crash``); the id if granted."""
        now = int(self.clock())
        size = self.rng.randint(1, 6)
        duration = self.rng.randint(5, 20)
        start = earliest_start(self.backend, size, duration, now + self.rng.randint(3, 10))
        assert start is not None
        offer = record_offer(self.manager, size, start, duration, valid_s=30)
        args = self.args("reservations", "accept", offer.id, "--key", uuid.uuid4().hex)
        result = self.drive(args, ACCEPT_POINTS, point) if crash else self.site.run(args)
        if result is not None and result.returncode == 0:
            return str(json.loads(result.stdout)["reservation"]["id"])
        return None

    def confirm(self, point: Optional[str] = None) -> None:
        now = self.clock()
        mine = [r for r in self.records(S.TENTATIVE) if (r.deadline or 0) > now + 1]
        rid = mine[0].id if mine else self.accept(crash=False)
        if rid is None:
            return
        result = self.drive(
            self.args("reservations", "confirm", rid, "--key", uuid.uuid4().hex, signs=True),
            CONFIRM_POINTS,
            point,
        )
        if result is not None and result.returncode == 0:
            self.confirmed.add(rid)

    def cancel(self, point: Optional[str] = None) -> None:
        live = self.records(S.TENTATIVE, S.CONFIRMED)
        if not live:
            self.accept(crash=False)
            return
        target = self.rng.choice(live)
        self.drive(
            self.args("reservations", "cancel", target.id, "--key", uuid.uuid4().hex),
            CANCEL_POINTS,
            point,
        )

    def expire(self, point: Optional[str] = None) -> None:
        """An unconfirmed reservation, and the agent armed to die in its housekeeping."""
        self.accept(crash=False)
        self.kill_agent("agent re-armed", crash=point or self.rng.choice(AGENT_POINTS))
        deadline = time.monotonic() + self.site.confirm_timeout + self.site.grace_s
        while self.agent.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)

    def agent_kill(self, point: Optional[str] = None) -> None:
        time.sleep(self.rng.uniform(0, 1.0))
        self.kill_agent("agent at a random moment")

    # ---- promises

    def records(self, *states: ReservationState) -> List[ReservationRecord]:
        return self.store.reservations(states)

    def problems(self) -> List[str]:
        for record in self.store.reservations():
            if record.state in (S.CONFIRMED, S.ACTIVE, S.COMPLETED):
                self.confirmed.add(record.id)
            if record.state is S.CANCELLED:
                self.cancelled.add(record.id)  # only this test cancels
        found = violations(
            self.backend,
            self.store,
            self.site.prefix,
            self.site.grace_s,
            self.clock,
            self.confirmed,
            self.cancelled,
            self.agent_up_since or 0.0,
            self.ledger,
        )
        lost = [r.id for r in self.records(S.LOST)]
        return found + ([f"reservations LOST: {lost}"] if lost else [])

    def check(self) -> None:
        """Every promise kept within the grace, counted from now or from when the agent came
        up again, whichever is later (it cannot act while it is down)."""
        began = time.monotonic()
        while True:
            self.ensure_agent()
            if not self.agent_is_up():
                if time.monotonic() > self.agent_started + AGENT_START_LIMIT_S:
                    self.fail(f"the agent ran no cycle within {AGENT_START_LIMIT_S} s of starting")
            else:
                problems = self.problems()
                if not problems:
                    return
                if time.monotonic() > max(began, self.agent_up_at) + self.site.grace_s:
                    self.fail("; ".join(problems))
            time.sleep(0.05)

    def note(self, line: str) -> None:
        self.journal.append(f"{time.strftime('%H:%M:%S')} {line}")

    def fail(self, why: str) -> None:
        pytest.fail(
            f"{why}\nseed {self.seed} (rerun with SITEAGENT_CRASH_SEED={self.seed}); "
            f"kills so far: {dict(self.kills)}\nlast steps:\n  "
            + "\n  ".join(self.journal[-12:])
            + "\nagent log (end):\n"
            + self.site.agent_log()[-3000:],
            pytrace=False,
        )

    # ---- the whole campaign

    def run(self, kills: int) -> None:
        flows: Dict[str, Callable[[Optional[str]], object]] = {
            "accept": self.accept,
            "confirm": self.confirm,
            "cancel": self.cancel,
            "expire": self.expire,
            "agent_kill": self.agent_kill,
        }
        points = {"accept": ACCEPT_POINTS, "confirm": CONFIRM_POINTS, "cancel": CANCEL_POINTS}
        points["expire"] = AGENT_POINTS
        every_point = [(flow, point) for flow, some in points.items() for point in some]
        self.rng.shuffle(every_point)
        weighted = ["accept", "accept", "confirm", "confirm", "cancel", "expire", "agent_kill"]
        while sum(self.kills.values()) < kills:
            name, point = every_point.pop() if every_point else (self.rng.choice(weighted), None)
            self.note(f"flow {name}" + (f" at {point}" if point else ""))
            flows[name](point)
            self.check()
        self.settle()

    def settle(self) -> None:
        """Stop, let every deadline pass, and check the end state. An accept killed after
        writing its intent (REQUESTED) is the agent's to resolve at its next cycle, into
        FAILED or into TENTATIVE with a fresh deadline, which is then waited for in turn."""
        while True:
            unsettled = self.records(S.TENTATIVE, S.REQUESTED)
            due = [
                (r.deadline if r.state is S.TENTATIVE and r.deadline else r.created)
                + self.site.grace_s
                for r in unsettled
            ]
            if self.clock() >= max(due, default=0):
                break
            time.sleep(0.1)
        self.check()
        left = self.records(S.TENTATIVE, S.REQUESTED)
        if left:
            self.fail(f"unconfirmed reservations left at the end: {[r.id for r in left]}")


def run_campaign(site: LifecycleSite, kills: int) -> None:
    seed = campaign_seed()
    print(f"crash campaign: seed {seed}, {kills} kills wanted")
    began = time.monotonic()
    campaign = Campaign(site, seed)
    campaign.run(kills)
    by_state = campaign.store.count_by_state()
    print(
        f"crash campaign: seed {seed}: {sum(campaign.kills.values())} kills in "
        f"{time.monotonic() - began:.0f} s; {len(campaign.confirmed)} confirmed kept; "
        f"records by state {dict((s.value, n) for s, n in by_state.items())}"
    )
    for what, count in sorted(campaign.kills.items()):
        print(f"  {count:4d}  {what}")
    assert sum(campaign.kills.values()) >= kills


def test_crashes_lose_and_leak_nothing(lifecycle_site: LifecycleSite) -> None:
    run_campaign(lifecycle_site, NORMAL_KILLS)


@pytest.mark.slow
def test_crashes_lose_and_leak_nothing_full(lifecycle_site: LifecycleSite) -> None:
    run_campaign(lifecycle_site, FULL_KILLS)
