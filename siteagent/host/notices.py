"""The batch system's notices to the agent: a local Unix socket, and who may write to it.

Slurm's ResvProlog/ResvEpilog and PBS's hook say at once that a reservation started or ended;
the caller's uid (``SO_PEERCRED``) decides who is heard, checked as the connection is accepted,
and each connection is bounded (:data:`MAX_CONNECTIONS`, :data:`READ_TIMEOUT_S`) since any
local user may connect. A notice is only a hint: the polls reconcile what a lost one missed.
The one-line JSON exchange and the reasoning: docs/admin.md, "The notice socket".
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import socketserver
import stat
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, FrozenSet, Optional

from siteagent.core import names

log = logging.getLogger("siteagent.notices")

#: The events a notice may carry: a reservation's window started, or ended.
EVENTS = frozenset({"begin", "end"})

#: The longest notice read (bytes): a name is at most 64 characters, so anything longer is
#: not a notice.
MAX_NOTICE_BYTES = 512

#: Seconds a client has to send its whole line: the programs send at once or not at all.
READ_TIMEOUT_S = 2.0

#: Connections served at once: many reservations may start in the same second, each with its
#: program; past this, a connection is refused as it is accepted.
MAX_CONNECTIONS = 64

#: Seconds between two log lines about refused connections (a flood must not flood the log).
REFUSALS_LOGGED_EVERY_S = 60.0

#: ``struct ucred`` (pid, uid, gid) as ``SO_PEERCRED`` returns it.
_UCRED = struct.Struct("3i")


@dataclass(frozen=True)
class Notice:
    """A batch system's word that reservation ``reservation`` began or ended (``event``),
    sent by the process running as ``uid``."""

    event: str
    reservation: str
    uid: int


#: What the agent does with a notice; its answer is sent back as the reply line.
Handler = Callable[[Notice], Dict[str, Any]]


def parse_notice(line: bytes, uid: int) -> Notice:
    """A notice line, checked whole: an object with exactly ``event`` (begin, end) and
    ``reservation`` (a name as :data:`names.NAME` allows); ValueError says what is wrong."""
    try:
        data = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError("a notice is one line of JSON") from None
    if not isinstance(data, dict) or set(data) != {"event", "reservation"}:
        raise ValueError('a notice is {"event": ..., "reservation": ...} and nothing else')
    event, reservation = data["event"], data["reservation"]
    if event not in EVENTS:
        raise ValueError(f"event must be one of {', '.join(sorted(EVENTS))}, got {event!r}")
    if not names.is_valid(names.NAME, reservation):
        raise ValueError(f"reservation must be a reservation name, got {reservation!r}")
    return Notice(event, reservation, uid)


def peer_uid(connection: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket, as the kernel knows it."""
    _pid, uid, _gid = _UCRED.unpack(
        connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    )
    return int(uid)


class NoticeListener:
    """Listens on the Unix socket ``path`` for notices from root or ``allowed_uids``, and
    answers each with ``handle``'s reply (in a thread of its own per connection)."""

    def __init__(self, path: Path, allowed_uids: FrozenSet[int], handle: Handler) -> None:
        self.path = path
        self.allowed_uids = frozenset({0, *allowed_uids})
        self.handle = handle
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        """Bind the socket (replacing one a previous run left) and serve in a thread; OSError
        if the path cannot be bound."""
        _clear_stale_socket(self.path)
        if not self.path.parent.exists():  # made here: open to the batch system's user
            self.path.parent.mkdir(parents=True)
            os.chmod(self.path.parent, 0o755)
        server = _Server(str(self.path), _Connection)
        server.listener = self
        os.chmod(self.path, 0o666)
        self._server = server
        # close() waits for serve_forever's next poll: 0.1 s, not its 0.5 s default, per stop
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.1,), name="notices", daemon=True
        )
        self._thread.start()
        log.info(
            "listening for the batch system's notices on %s (uids %s)",
            self.path,
            ", ".join(str(uid) for uid in sorted(self.allowed_uids)),
        )

    def close(self) -> None:
        """Stop listening and remove the socket."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = None
        _clear_stale_socket(self.path)

    def answer(self, line: bytes, uid: int) -> Dict[str, Any]:
        """The reply to one line from ``uid``: refused unless the uid may notify and the line
        is a notice, else what the handler says (an error in it is an error reply, logged)."""
        if uid not in self.allowed_uids:
            log.warning(
                "refused a notice from uid %d: only uids %s may notify",
                uid,
                ", ".join(str(allowed) for allowed in sorted(self.allowed_uids)),
            )
            return {"ok": False, "error": f"uid {uid} may not notify this agent"}
        if len(line) > MAX_NOTICE_BYTES or not line.endswith(b"\n"):
            return {
                "ok": False,
                "error": f"a notice is one line of {MAX_NOTICE_BYTES} bytes at most",
            }
        try:
            notice = parse_notice(line, uid)
        except ValueError as exc:
            log.warning("refused a malformed notice from uid %d: %s", uid, exc)
            return {"ok": False, "error": str(exc)}
        try:
            return self.handle(notice)
        except Exception:  # a bug must cost one notice, never the listener
            log.exception("handling %s failed", notice)
            return {"ok": False, "error": "the agent failed to handle the notice; see its log"}


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    # Many reservations may start at the same second, each with its own program; socketserver's
    # backlog of 5 made the sixth program's connect fail at once (EAGAIN), losing its notice.
    request_queue_size = 128
    listener: NoticeListener

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._serving = 0
        self._lock = threading.Lock()
        self._logged_at = -REFUSALS_LOGGED_EVERY_S
        self._unlogged = 0

    def verify_request(self, request: Any, client_address: Any) -> bool:
        """At accept, before a thread or a read: a peer that may not notify is answered and
        hung up on, and so is any connection past :data:`MAX_CONNECTIONS`."""
        uid = peer_uid(request)
        allowed = self.listener.allowed_uids
        if uid not in allowed:
            who = ", ".join(str(a) for a in sorted(allowed))
            self._refuse(request, f"uid {uid} may not notify this agent", f"only uids {who} may")
            return False
        with self._lock:
            if self._serving >= MAX_CONNECTIONS:
                busy = True
            else:
                busy = False
                self._serving += 1
        if busy:
            self._refuse(request, "the agent is busy with other notices", "too many at once")
        return not busy

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._serving -= 1

    def _refuse(self, request: socket.socket, error: str, why: str) -> None:
        """Answer ``error`` without waiting (the reply fits the socket's buffer, or is lost),
        and log it, at most once a minute with how many more there were."""
        with contextlib.suppress(OSError):
            request.setblocking(False)
            request.send(json.dumps({"ok": False, "error": error}).encode("utf-8") + b"\n")
        now = time.monotonic()
        if now - self._logged_at < REFUSALS_LOGGED_EVERY_S:
            self._unlogged += 1
            return
        more = (
            f" (and {self._unlogged} more refused since the last such line)"
            if self._unlogged
            else ""
        )
        log.warning("refused a connection to the notice socket: %s: %s%s", error, why, more)
        self._logged_at, self._unlogged = now, 0


class _Connection(socketserver.BaseRequestHandler):
    """One client: read its line (all of it within the deadline), answer it, hang up."""

    server: _Server

    def handle(self) -> None:
        line = read_line(self.request, READ_TIMEOUT_S)
        if line is None:  # the deadline passed, or the client went away
            return
        reply = self.server.listener.answer(line, peer_uid(self.request))
        with contextlib.suppress(OSError):  # the client gave up: the polls carry on without it
            self.request.sendall(json.dumps(reply).encode("utf-8") + b"\n")


def read_line(connection: socket.socket, deadline_s: float) -> Optional[bytes]:
    """The bytes up to and including the first newline (at most MAX_NOTICE_BYTES + 1: a longer
    one is answered as too long), all within ``deadline_s`` of now; None if the deadline
    passes or the peer hangs up first with nothing."""
    until = time.monotonic() + deadline_s
    line = b""
    while b"\n" not in line and len(line) <= MAX_NOTICE_BYTES:
        left = until - time.monotonic()
        if left <= 0:
            return None
        try:
            connection.settimeout(left)
            piece = connection.recv(MAX_NOTICE_BYTES + 1 - len(line))
        except OSError:
            return None
        if not piece:
            break
        line += piece
    end = line.find(b"\n")
    return (line[: end + 1] if end >= 0 else line) or None


def _clear_stale_socket(path: Path) -> None:
    """Remove a socket left at ``path``; anything else there is an error (never deleted)."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OSError(f"{path} exists and is not a socket; remove it or choose another path")
    path.unlink()
