"""Use this when a test calls the agent's API in process, signed, without a server.

An in-process agent API on a small replayed cluster, and signed requests to it.

Each test gets its own site (state directory, store, simulated cluster), an agent that has
polled it once, two authorized clients (alice, bob), an embedded ledger (each client with the
embedded bank's default credit) and the metrics: the whole ApiContext the service builds,
without a server, so a test sees every effect directly.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

from fastapi import FastAPI

from siteagent.agent.loop import Agent
from siteagent.agent.metrics import Metrics
from siteagent.api.app import create_app
from siteagent.api.context import ApiContext
from siteagent.config import loading
from siteagent.ledger.bank import Ledger
from siteagent.market.deals import Deals
from siteagent.market.site import Site, open_site
from siteagent.protocol import signing
from siteagent.security import authentication
from testbed.inprocess.fakes import FaultyBackend
from testbed.inprocess.parties import Party
from testbed.inprocess.traces import write_trace

with warnings.catch_warnings():  # Starlette now prefers httpx2; httpx still works
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

BASE = "http://testserver"

#: 64 cores: 48 busy for two hours, and a 48-core job queued behind them, so that a
#: reservation soon delays it (a fee) and one after it does not.
JOBS = [(0, 7200, 32, 7200), (10, 7200, 16, 7200), (20, 3600, 48, 3600)]

SITE = {
    "name": "hpc1",
    "description": "a test cluster",
    "architecture": "x86_64",
    "os": "Linux",
    "cpu_speed_mhz": 2400,
    "memory_per_core_mb": 4096,
    "cores_per_node": 16,
}


class AgentClock:
    """The agent's monotonic clock, which a test can move ahead (a poll that never returns)."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.ahead


@dataclass
class World:
    """The API under test and everything behind it."""

    app: FastAPI
    http: TestClient
    context: ApiContext
    backend: FaultyBackend
    clock: AgentClock
    alice: Party
    bob: Party

    @property
    def site(self) -> Site:
        return self.context.site

    @property
    def ledger(self) -> Ledger:
        ledger = self.context.deals.ledger
        assert isinstance(ledger, Ledger)
        return ledger

    def signed(
        self,
        party: Party,
        method: str,
        path: str,
        payload: Optional[Dict[str, Any]] = None,
        created: Optional[int] = None,
        extra: Optional[Dict[str, str]] = None,
    ) -> Any:
        """Send a request signed by ``party`` (RFC 9421), as a client library would."""
        body = b"" if payload is None else json.dumps(payload).encode()
        headers = signing.sign_request(
            method, BASE + path, body, party.key, party.key_id, created=created
        )
        headers["Content-Type"] = "application/json"
        headers.update(extra or {})
        return self.http.request(method, path, content=body, headers=headers)

    def counts(self) -> Dict[str, int]:
        """Rows in each table a state-changing request could touch (offers to receipts)."""
        tables = (
            "offers",
            "reservations",
            "transitions",
            "idempotency",
            "receipts",
            "ledger_bookings",
        )
        with sqlite3.connect(self.site.store.path) as db:
            return {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables}


def make_world(
    tmp_path: Path,
    api: Optional[Dict[str, Any]] = None,
    pricing: Optional[Dict[str, Any]] = None,
    auctions: Optional[Dict[str, Any]] = None,
) -> World:
    """The world of the API tests; ``api`` adds keys of the configuration's ``api`` section
    (limits, rates), ``pricing`` replaces its ``pricing`` section, ``auctions`` is its
    ``auctions`` section."""
    trace = write_trace(tmp_path / "trace.swf", JOBS, max_procs=64)
    settings = loading.parse(
        {
            "state_dir": str(tmp_path / "state"),
            "site": SITE,
            "backend": {"type": "swf", "swf": {"trace": trace, "offset": 600}},
            "planner": {"poll_interval_s": 2},
            "api": {"public_names": ["testserver"], **(api or {})},
            "auctions": auctions or {},
            **({"pricing": pricing} if pricing is not None else {}),
        }
    )
    site = open_site(settings)
    faulty = FaultyBackend(site.backend)
    site.backend = faulty
    site.manager.backend = faulty
    metrics = Metrics(settings.site, store=site.store)
    clock = AgentClock()
    agent = Agent(
        faulty,
        site.pricing,
        poll_interval_s=2,
        clock=clock,
        manager=site.manager,
        store=site.store,
        metrics=metrics,
    )
    agent.cycle()
    alice, bob = Party("alice@laptop"), Party("bob@desk")
    clients = {alice.key_id: alice.client("alice", "proj1"), bob.key_id: bob.client("bob")}
    credit = settings.ledger.default_credit
    deals = Deals(site.manager, Party("hpc1").key, "hpc1", Ledger(":memory:"), credit)
    deals.open_accounts(clients.values())
    authenticator = authentication.Authenticator(clients, settings.api.public_names, max_age_s=300)
    context = ApiContext(site, agent, authenticator, deals, metrics)
    app = create_app(context)
    return World(app, TestClient(app), context, faulty, clock, alice, bob)


@contextlib.contextmanager
def running_world(tmp_path: Path, pricing: Optional[Dict[str, Any]] = None) -> Iterator[World]:
    """:func:`make_world`, closed afterwards (the quote desk, the bank, the site)."""
    made = make_world(tmp_path, pricing=pricing)
    ledger = made.ledger
    try:
        yield made
    finally:
        made.http.close()
        made.app.state.quotes.close()
        ledger.close()
        made.site.close()
