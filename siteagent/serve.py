"""`siteagent serve`: the agent loop and the HTTPS API in one process, run as a service.

What runs where, and why:

- **The agent loop runs in a thread**, the API (uvicorn) in the main thread. The loop's
  batch-system calls block for seconds; the API must answer meanwhile from the last state.
  Signals are delivered to the main thread, where uvicorn's loop runs.
- **systemd is told** ``READY=1`` once the listener is up and the first cycle has read the
  cluster (or failed to: an unreachable batch system at start-up is an outage the agent
  reports on ``/healthz`` and in its metrics, not a reason to fail the start), ``STOPPING=1``
  on SIGTERM or SIGINT, and ``RELOADING=1``/``READY=1`` around a SIGHUP reload.
- **SIGTERM and SIGINT** stop uvicorn from accepting connections and let in-flight requests
  finish (up to :data:`GRACEFUL_SHUTDOWN_S`), then the loop finishes its cycle, and the ledger,
  the store and the backend are closed: every accepted request is committed before exit.
- **SIGHUP re-reads the configuration file.** An invalid file is logged and the running
  configuration kept. What the running objects read at each use is applied at once (prices,
  the confirm timeout, authorized clients, the signature window, the poll interval, the
  policy and preemption, the reference requests, the site's description); what was opened at
  start (the backend, the listener, the state and ledger files, the site key, reservation
  names, the notices' socket) is logged as needing a restart and kept as it was.
- **The batch system's notices** (``notifications.socket``) are heard in a thread of their own:
  a reservation's start or end moves it at once and wakes the loop, which records what its jobs
  used; the polls still reconcile whatever a lost notice missed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import pwd
import signal
import threading
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Tuple

import uvicorn

from siteagent.agent.heap import Heap
from siteagent.agent.loop import Agent
from siteagent.agent.metrics import Metrics
from siteagent.agent.state import State
from siteagent.api.app import create_app
from siteagent.api.context import ApiContext
from siteagent.config import loading
from siteagent.config.reading import ConfigError
from siteagent.config.schema import BidMode, Config
from siteagent.market.deals import Deals, open_deals
from siteagent.market.lifecycle import LifecycleError
from siteagent.market.reservations import ReservationManager
from siteagent.market.site import Site, open_site, pricing_of
from siteagent.market.usage import UsageRecorder
from siteagent.security import authentication
from siteagent.security.clients import AuthorizedClient, read_authorized_clients
from siteagent.security.replay import NONCES_FILE, SavedNonces
from siteagent.serving import sdnotify
from siteagent.serving.notices import Handler, Notice, NoticeListener
from siteagent.serving.server import NotifyingServer, ServiceError, https_config, url_of

log = logging.getLogger("siteagent.service")

#: Settings opened once at start: a reload that changes them is logged, not applied.
RESTART_KEYS = (
    "state_dir",
    "site.name",
    "backend.",
    "api.",
    "ledger.",
    "security.site_key",
    "security.nonces_per_client",
    "reservations.name_prefix",
    "notifications.",
)


def serve(
    config: Config,
    once: bool = False,
    show: Optional[Callable[[State], None]] = None,
    reload_config: Optional[Callable[[], Config]] = None,
) -> None:
    """Run the agent and its API until SIGTERM or SIGINT.

    With ``once``, take one snapshot, hand it to ``show`` and return (no API, no loop).
    ``reload_config`` re-reads the configuration on SIGHUP (default: the file ``config`` was
    read from, with no command-line overrides).
    """
    for deprecation in config.deprecations:
        log.warning("configuration: %s", deprecation)
    site = open_site(config)
    try:
        if once:
            state = Agent(
                site.backend,
                site.pricing,
                config.planner.policy,
                preemption=config.planner.preemption,
            ).refresh()
            if show is not None:
                show(state)
            return
        Daemon(site, reload_config or _file_loader(config)).run()
    finally:
        site.close()


def _file_loader(config: Config) -> Callable[[], Config]:
    source = config.source
    return lambda: loading.load(source)


@dataclass
class Parts:
    """What the daemon opened besides the site (the deals' bank is closed on the way out)."""

    metrics: Metrics
    agent: Agent
    authenticator: authentication.Authenticator
    deals: Deals
    context: ApiContext


class Daemon:
    """One running agent: the loop's thread, the API server, the signal handlers."""

    def __init__(self, site: Site, reload_config: Callable[[], Config]) -> None:
        self.site = site
        self.config = site.config
        self._reload_config = reload_config
        self._stop = threading.Event()
        self._hangup = threading.Event()
        self._ready = threading.Event()
        self.parts = assemble(site)
        self.app = create_app(self.parts.context)
        heap = Heap()
        self.parts.agent.listeners.append(lambda _: heap.settle())
        try:
            self.server = NotifyingServer(https_for(self.app, site.config))
            self.notices = notice_listener(site.config, site.manager, self.parts.agent)
        except BaseException:
            self.parts.deals.close()
            raise

    def run(self) -> None:
        """Serve until asked to stop; then finish requests, the cycle, and close."""
        loop = threading.Thread(target=self.parts.agent.run, args=(self._stop,), name="agent")
        previous = self._install_signals()
        if self.notices is not None:
            self._start_notices(self.notices)
        loop.start()
        for target, name in ((self._notify_ready, "ready"), (self._reloader, "reload")):
            threading.Thread(target=target, name=name, daemon=True).start()
        try:
            self._run_server()
        finally:
            self._stop.set()
            self._hangup.set()  # wakes the reloader, which sees the stop
            sdnotify.notify("STOPPING=1")
            if self.notices is not None:
                self.notices.close()
            log.info("waiting for the agent loop to finish its cycle")
            self.parts.agent.wake()
            loop.join()
            self.app.state.quotes.close()
            self.parts.deals.close()
            saved = self.parts.authenticator.nonces.saved
            if saved is not None:
                saved.close()
            _restore_signals(previous)
            log.info("stopped; the store and the backend are closed next")

    def _start_notices(self, notices: NoticeListener) -> None:
        try:
            notices.start()
        except OSError as exc:
            raise ServiceError(
                f"cannot listen for the batch system's notices on {notices.path}: {exc}; set "
                "notifications.socket to a path in a directory the agent may write"
            ) from exc

    def _run_server(self) -> None:
        with contextlib.suppress(SystemExit):  # uvicorn's way out when it cannot listen
            self.server.run()
        if not self.server.started and not self._stop.is_set():
            api = self.config.api
            raise ServiceError(
                f"the API could not listen on {api.listen}:{api.port} (see the log above); "
                "set api.listen and api.port to a free address"
            )

    def _notify_ready(self) -> None:
        """READY=1 once the listener is up and the first cycle is done."""
        agent = self.parts.agent
        while not self._stop.is_set():
            first_cycle_done = agent.state is not None or agent.last_error is not None
            if self.server.started and first_cycle_done:
                status = "serving" if agent.last_error is None else "batch system unreachable"
                sdnotify.notify(f"READY=1\nSTATUS={status}")
                self._ready.set()
                log.info("ready: API on %s, %s", listen_url(self.config), status)
                return
            self._stop.wait(0.05)

    # ---- signals

    def _install_signals(self) -> Dict[int, object]:
        """Our handlers for SIGTERM, SIGINT and SIGHUP. uvicorn replaces the first two with
        its own while it serves, and calls ours again once it has shut down."""
        handlers = {
            signal.SIGTERM: self._on_stop,
            signal.SIGINT: self._on_stop,
            signal.SIGHUP: self._on_hangup,
        }
        return {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}

    def _on_stop(self, signum: int, frame: Optional[FrameType]) -> None:
        self._stop.set()
        self.parts.agent.wake()
        self.server.should_exit = True

    def _on_hangup(self, signum: int, frame: Optional[FrameType]) -> None:
        """Only a flag: the reload runs in its own thread, so that a SIGHUP arriving during
        a reload is a second reload afterwards, never one nested inside the first."""
        self._hangup.set()

    def _reloader(self) -> None:
        while True:
            self._hangup.wait()
            if self._stop.is_set():
                return
            self._hangup.clear()
            try:
                self.reload()
            except Exception:  # a bug in one reload must not stop the next ones
                log.exception("reload failed, the running configuration is kept")

    # ---- reload

    def reload(self) -> None:
        """Re-read the configuration and apply what can change while running."""
        if not self._ready.is_set():  # still starting: systemd waits for the first READY=1
            self._reload()
            return
        sdnotify.notify("RELOADING=1")
        try:
            self._reload()
        finally:
            sdnotify.notify("READY=1")

    def _reload(self) -> None:
        try:
            fresh = self._reload_config()
            clients = read_authorized_clients(fresh.security.authorized_clients)
        except (ConfigError, ValueError, OSError) as exc:
            log.error("reload failed, the running configuration is kept: %s", exc)
            return
        for deprecation in fresh.deprecations:
            log.warning("configuration: %s", deprecation)
        applied, pending = changed_keys(self.config, fresh)
        effective = keep_restart_settings(self.config, fresh)
        apply(self.site, self.parts, effective, clients)
        self.config = effective
        log.info(
            "configuration reloaded from %s; %d authorized client(s); applied: %s",
            fresh.source or "the defaults",
            len(clients),
            ", ".join(applied) or "no changed setting",
        )
        if pending:
            log.warning(
                "changed settings that take effect only after a restart: %s", ", ".join(pending)
            )


def _restore_signals(previous: Dict[int, object]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)  # type: ignore[arg-type]


def assemble(site: Site) -> Parts:
    """The agent (metered, with the watchdog), the deals (site key, bank), who may sign, and
    the API's context."""
    config = site.config
    metrics = Metrics(
        site=config.site,
        reference_requests=config.metrics.reference_requests,
        reference_interval_s=config.metrics.reference_interval_s,
        store=site.store,
        poll_interval_s=config.planner.poll_interval_s,
        clock=time.monotonic,
    )
    site.backend = metrics.instrument(site.backend)
    site.manager.backend = site.backend
    authenticator = authentication.Authenticator(
        read_authorized_clients(config.security.authorized_clients),
        config.api.public_names,
        max_age_s=config.security.signature_max_age_s,
        nonces=authentication.NonceCache(
            config.security.nonces_per_client, saved=SavedNonces(config.state_dir / NONCES_FILE)
        ),
    )
    deals = open_deals(config, site.manager, authenticator.clients.values())
    agent = Agent(
        site.backend,
        site.pricing,
        config.planner.policy,
        poll_interval_s=config.planner.poll_interval_s,
        clock=time.monotonic,
        manager=site.manager,
        store=site.store,
        metrics=metrics,
        watchdog=sdnotify.Watchdog.from_environment(time.monotonic),
        deals=deals,
        preemption=config.planner.preemption,
        usage=UsageRecorder(
            site.store, site.backend, config.reservations.name_prefix, site.manager.clock
        ),
    )
    context = ApiContext(site, agent, authenticator, deals, metrics)
    return Parts(metrics, agent, authenticator, deals, context)


def notice_listener(
    config: Config, manager: ReservationManager, agent: Agent
) -> Optional[NoticeListener]:
    """The listener of ``notifications.socket`` (None when not configured), heeding root and
    ``notifications.users``; ServiceError names a user this host does not know."""
    path = config.notifications.socket
    if path is None:
        return None
    return NoticeListener(
        path, user_ids(config.notifications.users), notice_handler(manager, agent)
    )


def user_ids(users: Tuple[str, ...]) -> FrozenSet[int]:
    uids = set()
    for user in users:
        try:
            uids.add(pwd.getpwnam(user).pw_uid)
        except KeyError:
            raise ServiceError(
                f"notifications.users: there is no user {user!r} on this host"
            ) from None
    return frozenset(uids)


def notice_handler(manager: ReservationManager, agent: Agent) -> Handler:
    """What a notice does: the reservation moves now (as far as its window allows), and the
    loop is woken to record what its jobs used. The answer says where it stands, or why
    nothing moved."""

    def handle(notice: Notice) -> Dict[str, Any]:
        moved = manager.started if notice.event == "begin" else manager.ended
        try:
            record = moved(notice.reservation)
        except LifecycleError as exc:
            log.warning(
                "notice that %s %s: %s", notice.reservation, _EVENT_WORDS[notice.event], exc
            )
            return {"ok": False, "error": str(exc)}
        log.info(
            "notice that %s %s (uid %d): it is %s",
            notice.reservation,
            _EVENT_WORDS[notice.event],
            notice.uid,
            record.state.value,
        )
        agent.wake()
        return {"ok": True, "state": record.state.value}

    return handle


_EVENT_WORDS = {"begin": "began", "end": "ended"}


def https_for(app: Any, config: Config) -> uvicorn.Config:
    """The agent's server settings: the configured address and TLS (see https_config)."""
    return https_config(app, config.api.listen, config.api.port, config.api)


def listen_url(config: Config) -> str:
    return url_of(config.api.listen, config.api.port, config.api.tls.enabled)


def changed_keys(old: Config, new: Config) -> Tuple[List[str], List[str]]:
    """The settings that differ: (applied now, needing a restart)."""
    before = dict(loading.flatten(old))
    changed = [key for key, value in loading.flatten(new) if before.get(key) != value]
    pending = [key for key in changed if needs_restart(key)]
    return [key for key in changed if key not in pending], pending


def needs_restart(key: str) -> bool:
    return any(key == prefix or key.startswith(prefix) for prefix in RESTART_KEYS)


def keep_restart_settings(old: Config, new: Config) -> Config:
    """``new`` with the settings opened at start kept as they were running."""
    return dataclasses.replace(
        new,
        state_dir=old.state_dir,
        backend=old.backend,
        api=old.api,
        ledger=old.ledger,
        security=dataclasses.replace(
            new.security,
            site_key=old.security.site_key,
            nonces_per_client=old.security.nonces_per_client,
        ),
        reservations=dataclasses.replace(
            new.reservations, name_prefix=old.reservations.name_prefix
        ),
        notifications=old.notifications,
        explicit=new.explicit,
    )


def apply(site: Site, parts: Parts, config: Config, clients: Dict[str, AuthorizedClient]) -> None:
    """Hand the reloaded settings to the running objects (each reads them at its next use),
    and price the latest market view again with them."""
    pricing = pricing_of(config.pricing)
    site.config = config
    site.pricing = pricing
    site.manager.confirm_timeout = config.reservations.confirm_timeout_s
    site.manager.penalty_factor = pricing.penalty_factor
    site.manager.suspends = config.auctions.mode is BidMode.NOW
    parts.agent.pricing = pricing
    parts.agent.policy = config.planner.policy
    parts.agent.preemption = config.planner.preemption
    parts.agent.poll_interval_s = config.planner.poll_interval_s
    parts.metrics.poll_interval_s = config.planner.poll_interval_s
    parts.metrics.follow(config.metrics.reference_requests, config.metrics.reference_interval_s)
    parts.metrics.site = config.site
    parts.authenticator.clients = clients
    parts.authenticator.max_age_s = config.security.signature_max_age_s
    parts.deals.open_accounts(clients.values())
    parts.agent.reprice()  # the next quote and slots are priced anew, not the next poll's
