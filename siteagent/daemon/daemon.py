"""The running agent: the loop in a thread, the HTTPS API in the main thread, the signals
(SIGTERM/SIGINT stop, SIGHUP reloads) and what systemd is told (READY, RELOADING, STOPPING).

Invariant: every request the API accepted is committed before the process exits.
What runs where and why: docs/design.md §3.1.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from types import FrameType
from typing import Any, Callable, Dict, Optional

import uvicorn

from siteagent.agent.gc_freeze import Heap
from siteagent.agent.loop import Agent
from siteagent.agent.state import CycleState
from siteagent.api.app import create_app
from siteagent.config import loading
from siteagent.config.reading import ConfigError
from siteagent.config.schema import Config
from siteagent.daemon.assemble import assemble, notice_listener
from siteagent.daemon.reload import apply, changed_keys, keep_restart_settings
from siteagent.host import sdnotify
from siteagent.host.notices import NoticeListener
from siteagent.http.server import NotifyingServer, ServiceError, https_config, url_of
from siteagent.market.site import Site, open_site
from siteagent.security.clients import read_authorized_clients

log = logging.getLogger("siteagent.service")


def serve(
    config: Config,
    once: bool = False,
    show: Optional[Callable[[CycleState], None]] = None,
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


def https_for(app: Any, config: Config) -> uvicorn.Config:
    """The agent's server settings: the configured address and TLS (see https_config)."""
    return https_config(app, config.api.listen, config.api.port, config.api)


def listen_url(config: Config) -> str:
    return url_of(config.api.listen, config.api.port, config.api.tls.enabled)
