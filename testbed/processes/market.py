"""Use this when an integration test needs several agents, a bank and a buyer as processes.

A market on loopback for the client's integration tests: several ``siteagent serve`` agents
(replay backends on different traces and time offsets), the one bank they all book at
(``siteagent ledger serve``), and a buyer with its key, sites file and journal, who runs
``siteagent-client`` as a real process (through :mod:`testbed.processes.clientrun`, so that a
test can interrupt, kill or pause it at any journal write). A buyer whose key the test does not
hold (made by ``siteagent-client keys``) is admitted by its authorized-clients entry.

The test looks at each site through the agent's own state database (every reservation it
holds, whoever asked) and at the bank through the buyer's signed statement.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

import yaml

from siteagent.client.journal import JOURNAL_FILE, Journal
from siteagent.core.waits import QueueWait
from siteagent.market.lifecycle import ReservationRecord, ReservationState
from siteagent.market.reservations import BATCH_RELEASED
from siteagent.market.site import STORE_FILE
from siteagent.market.store import Store
from siteagent.protocol import keys
from testbed.inprocess.parties import Party
from testbed.inprocess.traces import busy_trace, write_trace
from testbed.processes.agents import SITEAGENT, Buyer
from testbed.processes.ports import free_port
from testbed.processes.programs import START_TIMEOUT_S, stop, wait_until
from testbed.slurm.cluster import SlurmTestCluster

REPO = Path(__file__).resolve().parents[2]

#: The site's states of a reservation the journal records in each state (a confirmed one
#: becomes active when its window starts).
SITE_STATE_OF = {
    "tentative": ("TENTATIVE",),
    "confirmed": ("CONFIRMED", "ACTIVE"),
    "cancelled": ("CANCELLED",),
    "expired": ("EXPIRED",),
}

#: Load-based prices that differ by site, so that rounds lower them and sites drop out.
LOAD_PRICES = (("2.00", "0.80"), ("1.80", "0.60"), ("2.20", "1.00"))


@dataclass(frozen=True)
class SiteSpec:
    """One agent of the market: its name, the seed of its replayed trace, how far into the
    trace it starts, and its ``pricing`` section; or another ``backend`` section, whose
    buyers' reservations are made for the scheduler ``user``. ``jobs`` (submit, run time,
    cores, walltime) replaces the seeded trace, and ``settings`` adds sections to its
    configuration (or keys to its ``api`` section)."""

    name: str
    seed: int
    offset: int
    pricing: Mapping[str, Any]
    backend: Optional[Mapping[str, Any]] = None
    user: str = "alice"
    jobs: Optional[Sequence[Tuple[int, int, int, int]]] = None
    settings: Mapping[str, Any] = field(default_factory=dict)


def on_slurm(spec: SiteSpec, cluster: SlurmTestCluster) -> SiteSpec:
    """``spec`` on the real Slurm test cluster (partition ``batch``; root its only user)."""
    slurm = {**cluster.backend_options(), "partition": "batch", "users": ["root"]}
    return dataclasses.replace(spec, backend={"type": "slurm", "slurm": slurm}, user="root")


def load_priced(count: int = 3) -> List[SiteSpec]:
    """``count`` sites pricing by load (each its own start and minimum price), fees off."""
    return [
        _site(i, {"policy": "load", "load": {"start_price": start, "min_price": low, "rounds": 3}})
        for i, (start, low) in enumerate(LOAD_PRICES[:count])
    ]


def flat_priced(count: int = 3, price: str = "1.00") -> List[SiteSpec]:
    """``count`` sites at one flat price, fees off: every deal's price is known."""
    return [_site(i, {"policy": "flat", "flat": {"price": price}}) for i in range(count)]


def _site(index: int, pricing: Mapping[str, Any]) -> SiteSpec:
    """The ``index``-th site: its own trace and offset, ``pricing`` without fees."""
    return SiteSpec(
        f"hpc{index + 1}",
        seed=11 * (index + 1),
        offset=600 + 900 * index,
        pricing={**pricing, "externality": {"enabled": False}},
    )


def with_fresh_journal(market: Market, directory: Path) -> Iterator[Market]:
    """``market`` with a journal of its own in ``directory`` for one test; what the test left
    of alice's confirmed is cancelled afterwards, so that every test finds the sites as free."""
    market.client_state = directory / "client"
    before = market.ids()
    yield market
    market.cancel_alices(before)


@dataclass
class PausedClient:
    """A client stopped at a journal write (testbed/processes/clientrun.py's ``pause``)."""

    process: subprocess.Popen[str]
    directory: Path

    def resume(self) -> subprocess.CompletedProcess[str]:
        """Let it go on, and wait for it to end."""
        (self.directory / "resume").touch()
        out, err = self.process.communicate(timeout=300)
        return subprocess.CompletedProcess(self.process.args, self.process.returncode, out, err)


class Service:
    """A ``siteagent`` command in the background, its output in a log file."""

    def __init__(
        self,
        arguments: List[str],
        log: Path,
        health: Buyer,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        self.arguments = arguments
        self.start_timeout_s = start_timeout_s
        self.log = log
        self.health = health
        self.process = self._start()

    def _start(self, crash: Optional[str] = None) -> subprocess.Popen[bytes]:
        """Start it; with ``crash`` (testbed/processes/crashrun.py's TARGET:N:WHEN) it kills itself
        there."""
        argv = [str(SITEAGENT), *self.arguments]
        if crash is not None:
            launcher = [sys.executable, "-m", "testbed.processes.crashrun", "--crash", crash, "--"]
            argv = [*launcher, *self.arguments]
        with open(self.log, "ab") as out:
            process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)

        def up() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"{self.log.name}:\n{self.log.read_text(errors='replace')}")
            return self.health.cert.exists() and self.health.call("GET", "/healthz").status == 200

        try:
            wait_until(f"{self.log.stem}'s /healthz", up, self.start_timeout_s)
        except BaseException:
            process.kill()
            process.wait()
            raise
        return process

    def restart(self, crash: Optional[str] = None) -> None:
        self.process = self._start(crash)

    def kill(self) -> None:
        """SIGKILL: the site dies mid-conversation."""
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            assert stop(self.process) == 0, self.log.read_text(errors="replace")


@dataclass
class Agent:
    spec: SiteSpec
    url: str
    state_dir: Path
    service: Service

    def reservations(self, *states: ReservationState) -> List[ReservationRecord]:
        """What the site holds, as its own database says (every buyer's)."""
        store = Store(str(self.state_dir / STORE_FILE))
        try:
            return store.reservations(states or None)
        finally:
            store.close()

    def released_with_batches(self) -> Set[str]:
        """The reservations released because their batch accept could not be held whole."""
        store = Store(str(self.state_dir / STORE_FILE))
        try:
            return {
                record.id
                for record in store.reservations([ReservationState.CANCELLED])
                if any(step.reason.startswith(BATCH_RELEASED) for step in store.history(record.id))
            }
        finally:
            store.close()

    def record_waits(self, waits: Sequence[QueueWait]) -> None:
        """Queue waits as if the agent had seen these jobs start (its ``/v1/history/waits``
        and their bounds then count them): a history a test cannot wait for."""
        store = Store(str(self.state_dir / STORE_FILE))
        try:
            store.record_waits(waits)
        finally:
            store.close()


@dataclass
class Market:
    """The bank, the agents, and the buyer (alice) with her sites file and journal; bob is
    another buyer every site authorizes (a competitor)."""

    root: Path
    specs: Sequence[SiteSpec]
    credit: str = "1000.00"
    alice: Party = field(default_factory=lambda: Party("alice@laptop"))
    bob: Party = field(default_factory=lambda: Party("bob@lab"))
    #: More buyers every site and the bank admit (a benchmark's concurrent buyers).
    buyers: Sequence[Party] = ()
    #: Authorized-clients entries (key id -> public_key, user) every site and the bank admit
    #: too: a buyer whose key the test does not hold (the one `siteagent-client keys` made).
    authorized: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: How often the agents poll their batch system (a test's 0.5 s sees changes at once).
    poll_interval_s: float = 0.5
    #: How long an agent may take to answer /healthz (replaying far into a long trace).
    start_timeout_s: float = START_TIMEOUT_S
    #: The agents' ``api.rate_limits`` (none: the defaults, 2 reservation requests a second).
    rate_limits: Mapping[str, Any] = field(default_factory=dict)
    #: How many agents start at once (none: all; a benchmark's 20 agents replaying long
    #: traces may ask for fewer).
    start_together: Optional[int] = None
    agents: Dict[str, Agent] = field(default_factory=dict)
    #: The buyer's $XDG_STATE_HOME (where the journal is): a test may give itself its own.
    client_state: Path = field(init=False)

    def __post_init__(self) -> None:
        self.client_state = self.root / "client-state"

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        site_keys = {spec.name: self._site_key(spec) for spec in self.specs}
        self.bank = self._start_bank(site_keys)
        launches = []
        for spec in self.specs:
            clients = self._write(
                f"{spec.name}-clients.yaml", {"clients": self._clients(spec.user)}
            )
            launches.append(self._agent_launch(spec, clients))
        # all at once: an agent replaying months of a trace to its offset waits on the CPU,
        # not on the agents before it
        failed: List[BaseException] = []
        with ThreadPoolExecutor(max(self.start_together or len(launches), 1)) as pool:
            for future in [pool.submit(launch) for launch in launches]:
                try:
                    agent = future.result()
                except BaseException as exc:  # the others started: stop() stops them
                    failed.append(exc)
                else:
                    self.agents[agent.spec.name] = agent
        if failed:
            raise failed[0]
        self.sites_file = self.write_sites_file(self.alice, "alice")

    def stop(self) -> None:
        for agent in self.agents.values():
            agent.service.stop()
        self.bank.stop()

    # ---- the buyer's side

    def env(self) -> Dict[str, str]:
        return {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "XDG_STATE_HOME": str(self.client_state),
            "XDG_CONFIG_HOME": str(self.root / "client-config"),
            "SITEAGENT_CLIENT_SITES": str(self.sites_file),
        }

    def spawn_client(
        self, args: Sequence[str], at: Optional[str] = None, then: Optional[str] = None
    ) -> subprocess.Popen[str]:
        """``siteagent-client ARGS`` as its own process, with a break point if given."""
        launcher = [sys.executable, "-m", "testbed.processes.clientrun"]
        if at is not None:
            launcher += ["--at", at, "--then", then or "INT"]
        return subprocess.Popen(
            [*launcher, "--", *args],
            cwd=REPO,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def paused_client(self, args: Sequence[str], at: str) -> PausedClient:
        """``siteagent-client ARGS`` run until the journal write ``at``, and paused there."""
        directory = Path(tempfile.mkdtemp(prefix="pause-", dir=self.root))
        process = self.spawn_client(args, at, f"pause={directory}")
        wait_until(f"the client at {at}", lambda: (directory / "paused").exists())
        return PausedClient(process, directory)

    def client(
        self, args: Sequence[str], at: Optional[str] = None, then: Optional[str] = None
    ) -> subprocess.CompletedProcess[str]:
        process = self.spawn_client(args, at, then)
        out, err = process.communicate(timeout=300)
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)

    def client_json(self, args: Sequence[str]) -> Any:
        done = self.client([*args, "--json"])
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def journal(self) -> Journal:
        return Journal(self.client_state / "siteagent" / JOURNAL_FILE)

    def statement(self) -> List[Dict[str, Any]]:
        """Alice's movements at the bank (a signed GET of her statement)."""
        status, answer = self.alice_at_bank.request(
            "GET", f"/v1/accounts/{self.alice.key_id}/statement", signed=True
        )
        assert status == 200, answer
        lines: List[Dict[str, Any]] = answer["lines"]
        return lines

    # ---- what the sites hold, and whether the journal agrees

    def held(self, *states: ReservationState) -> Dict[str, List[ReservationRecord]]:
        """Each site's reservations (in ``states``, else all), whoever holds them."""
        return {name: agent.reservations(*states) for name, agent in self.agents.items()}

    def tentative_anywhere(self) -> List[str]:
        """``SITE:ID`` of every tentative reservation of alice's at any site."""
        held = self.held(ReservationState.TENTATIVE)
        return [
            f"{site}:{record.id}"
            for site, records in held.items()
            for record in records
            if record.client == self.alice.key_id
        ]

    def alices(self, since: Mapping[str, Sequence[str]]) -> Dict[str, List[ReservationRecord]]:
        """Alice's reservations made at each site since the ids ``since`` were there, but the
        parts of her batch accepts that a site released when it could not hold the batch
        whole (a window taken between its check and the part: she was never handed them)."""
        found: Dict[str, List[ReservationRecord]] = {}
        for site, records in self.held().items():
            mine = [r for r in records if r.client == self.alice.key_id and r.id not in since[site]]
            released = self.agents[site].released_with_batches()
            found[site] = [r for r in mine if r.id not in released]
        return found

    def ids(self) -> Dict[str, List[str]]:
        """Every reservation id at each site now (the ``since`` of :meth:`alices`)."""
        return {site: [r.id for r in records] for site, records in self.held().items()}

    def disagreements(self, since: Mapping[str, Sequence[str]]) -> List[str]:
        """Where the journal and the sites differ: an entry whose reservation is in another
        state at its site, or a reservation of alice's made since ``since`` that the journal
        does not know. Empty when they agree."""
        journal = self.journal()
        try:
            entries = {(e.site, e.reservation_id): e for e in journal.entries()}
        finally:
            journal.close()
        problems = []
        for site, records in self.alices(since).items():
            for record in records:
                entry = entries.get((site, record.id))
                if entry is None:
                    problems.append(f"{site}:{record.id} ({record.state.value}) not journaled")
                elif record.state.value not in SITE_STATE_OF.get(entry.state.value, ()):
                    problems.append(
                        f"{site}:{record.id} is {record.state.value}, journaled {entry.state.value}"
                    )
        return problems

    def cancel_alices(self, since: Mapping[str, Sequence[str]]) -> None:
        """Cancel alice's reservations made since ``since`` that are still live (a test's
        leftovers, so that the next test finds the sites as free as this one did)."""
        live = (ReservationState.TENTATIVE, ReservationState.CONFIRMED)
        for site, records in self.alices(since).items():
            for record in records:
                if record.state in live:
                    self._cancel(site, record.id)

    def _cancel(self, site: str, reservation_id: str) -> None:
        """Cancel one reservation, waiting out the site's rate limit as it asks (a test that
        just sent twenty requests leaves alice without tokens for its clean-up)."""
        for _ in range(30):
            answer = self.buyer_at(site).call("DELETE", f"/v1/reservations/{reservation_id}")
            if answer.status != 429:
                break
            time.sleep(float(answer.headers.get("retry-after", "1")))
        assert answer.status == 200, answer.json()

    def deals_booked(self, receipt_ids: Sequence[str], kind: str = "deal") -> Dict[str, int]:
        """How many times the bank booked each receipt (as ``kind``: deal or refund)."""
        lines = self.statement()
        return {
            receipt: sum(
                1 for line in lines if line["receipt_id"] == receipt and line["kind"] == kind
            )
            for receipt in receipt_ids
        }

    def buyer_at(self, site: str, party: Optional[Party] = None) -> Buyer:
        """A buyer (alice, or ``party``) talking to ``site`` directly."""
        agent = self.agents[site]
        return Buyer(agent.url, agent.state_dir / "tls" / "server.crt", party or self.alice)

    # ---- building it

    def _site_key(self, spec: SiteSpec) -> str:
        state = self.root / spec.name
        state.mkdir(mode=0o700)
        key = keys.load_or_create_site_key(state / "site.key")
        return keys.public_key_text(key.public_key())

    def _clients(self, user: str = "") -> Dict[str, Dict[str, str]]:
        """Alice, bob and the other buyers as authorized clients, their reservations made for
        ``user`` (else for their own names); then the ``authorized`` entries as given."""
        parties = {
            party.key_id: {
                "public_key": keys.public_key_text(party.key.public_key()),
                "user": user or name,
            }
            for party, name in self._parties()
        }
        return {**parties, **{key: dict(entry) for key, entry in self.authorized.items()}}

    def _parties(self) -> List[Tuple[Party, str]]:
        """Every buyer admitted, with the name its reservations are made for by default."""
        named = [(self.alice, "alice"), (self.bob, "bob")]
        return named + [(party, f"buyer{i + 1}") for i, party in enumerate(self.buyers)]

    def _start_bank(self, site_keys: Mapping[str, str]) -> Service:
        clients = {k: {**v, "credit": self.credit} for k, v in self._clients().items()}
        sites = {name: {"public_key": key} for name, key in site_keys.items()}
        participants = self._write("participants.yaml", {"sites": sites, "clients": clients})
        port = free_port()
        config = self._write(
            "bank.yaml",
            {
                "state_dir": str(self.root / "bank"),
                "ledger": {"participants": str(participants), "port": port},
            },
        )
        self.bank_url = f"https://127.0.0.1:{port}"
        self.bank_cert = self.root / "bank" / "tls" / "server.crt"
        self.alice_at_bank = Buyer(self.bank_url, self.bank_cert, self.alice)
        health = Buyer(self.bank_url, self.bank_cert, self.alice)
        log = self.root / "bank.log"
        arguments = ["ledger", "serve", "--config", str(config)]
        return Service(arguments, log, health, self.start_timeout_s)

    def _agent_launch(self, spec: SiteSpec, clients: Path) -> Callable[[], Agent]:
        """Write the agent's configuration (its port picked now, or the one its ``api``
        settings name) and return what starts it and waits for its /healthz."""
        state = self.root / spec.name
        settings = dict(spec.settings)
        api = dict(settings.pop("api", {}))
        attributes = dict(settings.pop("site", {}))
        port = api.pop("port", None) or free_port()
        backend = spec.backend or self._replay(spec)
        config = self._write(
            f"{spec.name}.yaml",
            {
                "state_dir": str(state),
                "site": {"name": spec.name, "cores_per_node": 16, **attributes},
                "backend": dict(backend),
                "planner": {"poll_interval_s": self.poll_interval_s},
                "security": {"authorized_clients": str(clients)},
                # a test runs a dozen auctions in minutes, each leaving (parts x rounds x 20)
                # offers live for 5 minutes: more than a buyer's default share
                "api": {
                    "listen": "127.0.0.1",
                    "port": port,
                    "max_live_offers_per_client": 20000,
                    **({"rate_limits": dict(self.rate_limits)} if self.rate_limits else {}),
                    **api,
                },
                "ledger": {"url": self.bank_url, "ca": str(self.bank_cert)},
                "pricing": dict(spec.pricing),
                **settings,
            },
        )
        url = f"https://127.0.0.1:{port}"
        health = Buyer(url, state / "tls" / "server.crt", self.alice)
        log = self.root / f"{spec.name}.log"
        arguments = ["serve", "--config", str(config)]

        def launch() -> Agent:
            return Agent(spec, url, state, Service(arguments, log, health, self.start_timeout_s))

        return launch

    def _replay(self, spec: SiteSpec) -> Dict[str, Any]:
        """The replay backend on a trace of its own (the spec's jobs, or seed), from its
        offset."""
        path = self.root / f"{spec.name}.swf"
        if spec.jobs is None:
            trace = busy_trace(path, seed=spec.seed)
        else:
            trace = write_trace(path, list(spec.jobs), 64)
        return {"type": "swf", "swf": {"trace": trace, "offset": spec.offset}}

    def write_sites_file(self, party: Party, name: str) -> Path:
        """A sites file naming every agent and the bank, for ``party`` with its key in
        ``name``.key (alice's is sites.yaml, another buyer's ``name``-sites.yaml)."""
        key = self.root / f"{name}.key"
        keys.write_private(key, keys.private_key_pem(party.key))
        file = "sites.yaml" if party is self.alice else f"{name}-sites.yaml"
        return self.sites_file_for(party.key_id, key, file)

    def sites_file_for(
        self, key_id: str, private_key: Path, file: str, names: Sequence[str] = ()
    ) -> Path:
        """A sites file ``file`` naming the bank and every agent (or those of ``names``), for
        the buyer ``key_id`` whose private key is the file ``private_key``."""
        chosen = names or list(self.agents)
        sites = [
            {
                "name": name,
                "url": self.agents[name].url,
                "ca": str(self.agents[name].state_dir / "tls" / "server.crt"),
            }
            for name in chosen
        ]
        return self._write(
            file,
            {
                "buyer": {"key_id": key_id, "private_key": str(private_key)},
                "ledger": {"url": self.bank_url, "ca": str(self.bank_cert)},
                "timeouts": {"connect": 2, "read": 15},
                "sites": sites,
            },
        )

    def deposit(self, account: str, amount: Decimal) -> None:
        """Fund ``account`` at the bank, as its administrator does (`siteagent ledger
        deposit`)."""
        config = str(self.root / "bank.yaml")
        subprocess.run(
            [str(SITEAGENT), "ledger", "deposit", account, str(amount), "--config", config],
            check=True,
            capture_output=True,
            timeout=60,
        )

    def _write(self, name: str, document: Mapping[str, Any]) -> Path:
        path = self.root / name
        path.write_text(yaml.safe_dump(dict(document)), encoding="utf-8")
        return path
