"""systemd's service notification protocol (sd_notify), for ``Type=notify`` and the watchdog.

The protocol is one datagram of ``KEY=value`` lines to the Unix socket named by
``$NOTIFY_SOCKET`` (a leading ``@`` means Linux's abstract namespace). That is a few lines of
socket code; the PyPI wrappers are either unmaintained or need libsystemd at build time, so
the agent speaks it directly. Outside systemd (no ``$NOTIFY_SOCKET``) every call does nothing.

What the agent sends: ``READY=1`` once the API listens, ``STATUS=`` with each cycle's summary
(shown by ``systemctl status``), ``WATCHDOG=1`` while the agent loop makes progress (see
:class:`Watchdog`), ``RELOADING=1``/``READY=1`` around a reload and ``STOPPING=1`` on the way out.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Callable, Mapping, Optional

log = logging.getLogger("siteagent.sdnotify")


def notify(message: str, environ: Optional[Mapping[str, str]] = None) -> bool:
    """Send ``message`` (``KEY=value`` lines) to systemd; False when not run by systemd or
    when the socket cannot be reached (logged: a notification must never stop the agent)."""
    env = os.environ if environ is None else environ
    address = env.get("NOTIFY_SOCKET", "")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message.encode("utf-8"))
    except OSError as exc:
        log.warning("cannot notify systemd at %s: %s", env.get("NOTIFY_SOCKET"), exc)
        return False
    return True


def watchdog_interval_s(environ: Optional[Mapping[str, str]] = None) -> Optional[float]:
    """The watchdog period systemd expects pings within (``WatchdogSec=``), or None when no
    watchdog is set for this process (``$WATCHDOG_PID``, when set, must be ours)."""
    env = os.environ if environ is None else environ
    pid = env.get("WATCHDOG_PID", "")
    if pid and pid != str(os.getpid()):
        return None
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    return usec / 1e6 if usec > 0 else None


class Watchdog:
    """Feeds systemd's watchdog only while the agent loop shows progress.

    "Healthy", for the watchdog, means the agent loop is not stuck: it calls :meth:`beat`
    when a cycle step returns (a snapshot, good or failed; the reservation housekeeping) and
    while it waits between cycles. A batch system that is down or answers garbage is *not*
    a reason to restart: the agent reports it (``/healthz``, ``siteagent_backend_up``, 503 on
    quotes) and recovers by itself; backend commands have their own timeout, after which a
    failed cycle is progress too. What stops the beats is a loop that no longer returns (a
    batch-system call hung past every timeout, a deadlock), and then systemd kills and
    restarts the agent after ``WatchdogSec=``. Beats are sent at most every half period.
    """

    def __init__(
        self,
        interval_s: Optional[float],
        clock: Callable[[], float],
        send: Callable[[str], bool] = notify,
    ) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._send = send
        self._last: Optional[float] = None

    @classmethod
    def from_environment(cls, clock: Callable[[], float]) -> Watchdog:
        return cls(watchdog_interval_s(), clock)

    @property
    def beat_every_s(self) -> Optional[float]:
        """How often the loop must beat, at the latest: half the watchdog period."""
        return None if self.interval_s is None else self.interval_s / 2

    def beat(self) -> None:
        """The loop made progress: ping systemd unless it was pinged very recently."""
        if self.interval_s is None:
            return
        now = self._clock()
        if self._last is not None and now - self._last < self.interval_s / 4:
            return
        self._last = now
        self._send("WATCHDOG=1")
