"""The same question to every site at once: one thread per site, each answer (or failure)
a row of its own, so that one slow or broken site costs the others nothing.

A buyer asks several independent sites; waiting for them in turn would make the slowest
site's timeout everybody's, and one failure must not hide the other sites' offers. So
:func:`ask_all` runs the call on every connection in parallel and never raises for a site:
each :class:`SiteResult` says whether the site answered (``ok``), refused the request itself
(``refused``: an error the API answers 4xx, e.g. an unknown key), failed (its 5xx, an answer
that is not the protocol, no connection, TLS) or timed out, with how long it took.
"""

from __future__ import annotations

import enum
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Callable, Generic, List, Optional, Sequence, TypeVar

from siteagent.client.connection import BadAnswer, SiteConnection, SiteError, SiteUnreachable
from siteagent.core.errors import SiteagentError

T = TypeVar("T")


class Answered(enum.Enum):
    OK = "ok"
    REFUSED = "refused"
    FAILED = "failed"
    TIMED_OUT = "timed out"


@dataclass(frozen=True)
class SiteResult(Generic[T]):
    """One site's part of a fan-out: its answer (``value``) when ``outcome`` is ok, else the
    error; ``latency_s`` from sending to the answer or the failure."""

    site: str
    outcome: Answered
    value: Optional[T]
    error: Optional[Exception]
    latency_s: float

    @property
    def reason(self) -> str:
        """Why there is no answer, for a person ("" when there is one)."""
        if self.error is None:
            return ""
        if isinstance(self.error, SiteError):
            return f"{self.error.message} ({self.error.code})"
        if isinstance(self.error, SiteUnreachable):
            return self.error.reason
        return str(self.error)


def ask_all(
    connections: Sequence[SiteConnection],
    call: Callable[[SiteConnection], T],
    answered: Optional[Callable[[SiteResult[T]], None]] = None,
) -> List[SiteResult[T]]:
    """``call`` on every connection in parallel; the results in the connections' order.
    ``answered`` (a progress bar) is told of each result as it comes."""
    if not connections:
        return []
    results: List[Optional[SiteResult[T]]] = [None] * len(connections)
    with ThreadPoolExecutor(max_workers=len(connections), thread_name_prefix="site") as pool:
        futures = {
            pool.submit(_ask, connection, call): index
            for index, connection in enumerate(connections)
        }
        for future in as_completed(futures):
            result = future.result()
            results[futures[future]] = result
            if answered is not None:
                answered(result)
    return [result for result in results if result is not None]


def _ask(connection: SiteConnection, call: Callable[[SiteConnection], T]) -> SiteResult[T]:
    """One site's result; a failure of the site (or of its key file) is a result, a bug of
    ours is raised."""
    site, start = connection.site.name, time.monotonic()
    try:
        value = call(connection)
    except (SiteagentError, ValueError, OSError) as exc:
        return SiteResult(site, outcome_of(exc), None, exc, time.monotonic() - start)
    return SiteResult(site, Answered.OK, value, None, time.monotonic() - start)


def any_answered(results: Sequence[SiteResult[T]]) -> bool:
    """Whether a site answered: with what was asked, or with a refusal of its own (a 4xx: an
    unknown key, a rate limit). A command whose sites all refused failed because they said
    no (exit 3), not because none could be reached (exit 75)."""
    return any(result.outcome in (Answered.OK, Answered.REFUSED) for result in results)


def outcome_of(error: Exception) -> Answered:
    """What a failure means for the row: the site refused (4xx), timed out, or failed."""
    if isinstance(error, SiteUnreachable):
        return Answered.TIMED_OUT if error.timed_out else Answered.FAILED
    if isinstance(error, SiteError) and not isinstance(error, BadAnswer):
        return Answered.REFUSED if 400 <= (error.status or 0) < 500 else Answered.FAILED
    return Answered.FAILED
