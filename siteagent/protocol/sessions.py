"""What the buyer's connections and the agent's ledger client share about their HTTPS
sessions (requests).

Both send many small requests to one host over kept-alive connections. requests would resolve
the environment's proxies again for every request sent, scanning the whole environment each
time (about a fifth of the client's own time per request on loopback): the proxies for the one
host are resolved once, by requests' own rules, and given with each request.

Neither wants the credentials of the user's ``~/.netrc``: requests would look the host up there
before every request (files read each time) and send what it finds as Basic authentication,
a password for the host handed to the agent or bank listening there. Requests are signed
(RFC 9421) or need no credentials.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping

import requests
import requests.auth
import requests.utils

#: The largest answer read (bytes, once decoded): the API's largest, a thousand slots, is
#: about 200 KB; past this the answer is refused, unread.
MAX_ANSWER_BYTES = 16 * 1024 * 1024

#: How much of an answer is read at a time (the deadline is checked between reads).
_CHUNK_BYTES = 64 * 1024


def proxies_for(session: requests.Session, url: str) -> Dict[str, str]:
    """The proxies ``session`` would use for ``url`` (its own and the environment's)."""
    probe = requests.Request("GET", url).prepare()
    return requests.utils.resolve_proxies(probe, dict(session.proxies), session.trust_env)


class NoNetrc(requests.auth.AuthBase):
    """A session's authentication that adds nothing: set, it keeps requests from adding the
    ``~/.netrc`` credentials for the host (see the module's docstring)."""

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        return request


class AnswerTooLarge(Exception):
    """The answer was longer than the bound; the rest was not read."""


class DeadlinePassed(Exception):
    """The whole exchange took longer than its deadline (an answer sent a byte at a time
    passes every per-read timeout)."""


@dataclass(frozen=True)
class Reply:
    """An answer read whole, within its bounds."""

    status: int
    reason: str
    headers: Mapping[str, str]
    body: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def bounded_send(
    session: requests.Session,
    prepared: requests.PreparedRequest,
    timeouts: Any,
    total_s: float,
    proxies: Dict[str, str],
    max_bytes: int = MAX_ANSWER_BYTES,
) -> Reply:
    """Send ``prepared`` and read its answer whole: no redirect followed (a 3xx is the
    answer), at most ``max_bytes`` read (AnswerTooLarge past them), and the whole exchange,
    connection and every byte of the answer, within ``total_s`` (DeadlinePassed).
    ``timeouts`` are requests' (connect, read) for each step; requests' own exceptions are
    raised as they are.

    The exchange runs on a daemon thread that the caller stops waiting for at the deadline:
    requests' timeouts bound each read of the socket, not a head sent a byte at a time, and
    nothing but a thread the process may leave behind stops that (the thread ends with the
    connection, or with the process)."""
    deadline = time.monotonic() + total_s
    outcome: List[Any] = []
    done = threading.Event()

    def exchange() -> None:
        try:
            response = session.send(
                prepared, timeout=timeouts, proxies=proxies, allow_redirects=False, stream=True
            )
            try:
                outcome.append(_read_whole(response, max_bytes, deadline, total_s))
            finally:
                response.close()
        except BaseException as exc:  # handed to the caller's thread
            outcome.append(exc)
        finally:
            done.set()

    threading.Thread(target=exchange, name="request", daemon=True).start()
    if not done.wait(max(0.0, deadline - time.monotonic())):
        raise DeadlinePassed(f"no whole answer within {total_s:g} s")
    (result,) = outcome
    if isinstance(result, BaseException):
        raise result
    assert isinstance(result, Reply)
    return result


def _read_whole(
    response: requests.Response, max_bytes: int, deadline: float, total_s: float
) -> Reply:
    """The answer's body, read a chunk at a time within the bounds."""
    chunks: List[bytes] = []
    size = 0
    for chunk in response.iter_content(_CHUNK_BYTES):
        size += len(chunk)
        if size > max_bytes:
            raise AnswerTooLarge(f"the answer is larger than {max_bytes} bytes")
        if time.monotonic() > deadline:
            raise DeadlinePassed(f"no whole answer within {total_s:g} s")
        chunks.append(chunk)
    return Reply(response.status_code, response.reason or "", response.headers, b"".join(chunks))
