"""The HTTPS server both services run in: the agent's API (`siteagent serve`) and the bank
(`siteagent ledger serve`).

One place decides how a siteagent service listens: uvicorn with the site's TLS policy (TLS 1.2
or newer, a self-signed certificate for localhost made on first start), our logging left
alone, requests in flight given :data:`GRACEFUL_SHUTDOWN_S` to finish on a stop while idle
connections are closed at once and dropped within :data:`CLOSE_GRACE_S`
(:func:`dropped_when_closed`), and systemd told ``STOPPING=1`` when the stop begins.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from types import FrameType
from typing import Any, Callable, Optional, Type

import uvicorn

from siteagent.config.schema import ApiConfig
from siteagent.core.errors import SiteagentError
from siteagent.host import sdnotify
from siteagent.http.connections import capped_per_address
from siteagent.http.limits import HeadMeter, guarded
from siteagent.protocol.errors import CANNOT_START
from siteagent.security import tls as tls_policy

log = logging.getLogger("siteagent.serving")


class ServiceError(SiteagentError):
    """A service could not start (the address is taken, a file it needs is missing); the
    message says what to change."""

    code = CANNOT_START


#: How long in-flight requests may take to finish once a stop is asked for.
GRACEFUL_SHUTDOWN_S = 30.0

#: How long a connection the server closed during a stop may take to finish its TLS close
#: (the peer's close_notify) before it is dropped.
CLOSE_GRACE_S = 1.0

#: How often a connection still serving a request during a stop is looked at again.
CLOSE_POLL_S = 0.1


class NotifyingServer(uvicorn.Server):
    """uvicorn's server, telling systemd when it starts stopping."""

    def handle_exit(self, sig: int, frame: Optional[FrameType]) -> None:
        if not self.should_exit:
            sdnotify.notify("STOPPING=1")
            log.info("signal %s: finishing in-flight requests, then stopping", sig)
        super().handle_exit(sig, frame)


def https_config(app: Any, listen: str, port: int, api: ApiConfig) -> uvicorn.Config:
    """uvicorn's settings for ``app`` (the agent's API, or the ledger service): the address,
    TLS with the configured certificate (a self-signed one for localhost made on first start),
    the request size and time limits enforced on the bytes as they arrive (see
    :mod:`siteagent.http.limits`), the connections one address may hold
    (:mod:`siteagent.http.connections`), and our logging left alone."""
    tls = api.tls
    if tls.enabled and tls.self_signed and tls_policy.ensure_self_signed(tls.cert, tls.key):
        log.info("made a self-signed TLS certificate for localhost: %s", tls.cert)
    server = uvicorn.Config(
        app,
        host=listen,
        port=port,
        log_config=None,
        access_log=False,
        lifespan="off",
        server_header=False,
        timeout_graceful_shutdown=int(GRACEFUL_SHUTDOWN_S),
        ssl_certfile=str(tls.cert) if tls.enabled else None,
        ssl_keyfile=str(tls.key) if tls.enabled else None,
    )
    server.load()
    server.http_protocol_class = dropped_when_closed(
        capped_per_address(
            guarded(
                server.http_protocol_class,
                lambda: HeadMeter(api.max_header_bytes, api.max_body_bytes),
                api.request_timeout_s,
            ),
            api.max_connections_per_address,
        )
    )
    if tls.enabled:
        # the site's TLS policy (security/tls.py), not uvicorn's defaults, which vary by version
        server.ssl = tls_policy.server_ssl_context(tls.cert, tls.key)
    return server


def dropped_when_closed(protocol: Type[asyncio.Protocol]) -> Type[Any]:
    """``protocol`` (uvicorn's HTTP protocol class) with each connection dropped soon after a
    stop has closed it.

    On a stop uvicorn closes idle connections at once, and the others once their response is
    sent, then waits for every connection to be gone (up to :data:`GRACEFUL_SHUTDOWN_S`). Over
    TLS a closed connection is not gone yet: asyncio sends close_notify and waits up to 30 s
    for the peer's, which a client keeping an idle keep-alive connection open does not send
    until it next reads. So each connection the stop closed gets :data:`CLOSE_GRACE_S` to
    finish that exchange and is then aborted; requests in flight are left to finish.
    """

    class DroppedWhenClosed(protocol):  # type: ignore[valid-type, misc]
        def shutdown(self) -> None:
            super().shutdown()
            self._drop_once_closed()

        def _drop_once_closed(self) -> None:
            transport: asyncio.Transport = self.transport
            loop = asyncio.get_running_loop()
            if transport.is_closing():
                loop.call_later(CLOSE_GRACE_S, transport.abort)
            else:
                loop.call_later(CLOSE_POLL_S, self._drop_once_closed)

    DroppedWhenClosed.__name__ = DroppedWhenClosed.__qualname__ = (
        f"DroppedWhenClosed{protocol.__name__}"
    )
    return DroppedWhenClosed


def url_of(host: str, port: int, tls: bool) -> str:
    """The URL a server listening on ``host``:``port`` answers at."""
    scheme = "https" if tls else "http"
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def run(server: uvicorn.Server, on_hangup: Callable[[], None]) -> None:
    """Run ``server`` until SIGTERM or SIGINT, calling ``on_hangup`` on SIGHUP.

    uvicorn handles SIGTERM and SIGINT while it serves and then raises them again with the
    handlers found at start: ours just ask it to exit, so that a stop is a clean exit (status
    0, as systemd expects), not death by the signal. SIGHUP's default would kill the process.
    """

    def stop(signum: int, frame: Optional[FrameType]) -> None:
        server.should_exit = True

    def hangup(signum: int, frame: Optional[FrameType]) -> None:
        on_hangup()

    handlers = {signal.SIGTERM: stop, signal.SIGINT: stop, signal.SIGHUP: hangup}
    previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}
    try:
        with contextlib.suppress(SystemExit):  # uvicorn's way out when it cannot listen
            server.run()
    finally:
        for signum, previous_handler in previous.items():
            signal.signal(signum, previous_handler)
