"""Durations and times as people write them, on the command line and in the API's queries alike.

One syntax everywhere, so that what ``siteagent history --since 30d`` takes,
``GET /v1/history/waits?since=30d`` takes too:

- a duration is whole seconds, or a whole number with a unit: ``90``, ``90s``, ``15m``,
  ``2h``, ``1d``;
- a time is ``+DURATION`` from now, epoch seconds, or an ISO 8601 date-time (local time
  unless it gives its offset);
- the start of a window (``since``) is also an age back from now: a number with a unit
  (digits alone stay epoch seconds).

Numbers are ASCII digits, at most :data:`MAX_DIGITS` of them. Every parser raises ValueError
saying what it expects.
"""

from __future__ import annotations

import contextlib
import re
from datetime import datetime

#: Seconds per unit; no unit means seconds.
UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}

#: The most digits a number may have: 12 keeps any time within a database's integers.
MAX_DIGITS = 12

_DURATION = re.compile(rf"([0-9]{{1,{MAX_DIGITS}}})([smhd]?)")
_DIGITS = re.compile(r"[0-9]+")

#: The forms :func:`parse_since` accepts, for help texts and the OpenAPI description.
SINCE_FORMS = (
    "an age back from now (30d, 12h, 90m, 45s), epoch seconds (1795000000), or an ISO 8601 "
    "date-time (2026-11-01T00:00:00+00:00; without an offset, the agent's local time)"
)


def parse_duration(text: str) -> int:
    """Seconds from ``90``, ``90s``, ``15m``, ``2h``, ``1d``."""
    match = _DURATION.fullmatch(text.strip())
    if not match:
        raise ValueError(
            f"invalid duration {text!r}: give seconds, or a number with s, m, h or d (90m)"
        )
    return int(match.group(1)) * UNIT_S[match.group(2)]


def parse_time(text: str, now: int) -> int:
    """Epoch seconds of ``+DURATION`` from ``now``, epoch seconds, or an ISO 8601 date-time."""
    text = text.strip()
    if text.startswith("+"):
        return now + parse_duration(text[1:])
    if _DIGITS.fullmatch(text):  # epoch seconds, never an ISO date in its basic form (20261122)
        if len(text) <= MAX_DIGITS:
            return int(text)
    else:
        with contextlib.suppress(ValueError, OverflowError, OSError):
            return int(datetime.fromisoformat(text).timestamp())
    raise ValueError(
        f"invalid time {text!r}: give +DURATION (+10m), epoch seconds, or an ISO date-time "
        "(2026-11-22T10:00)"
    )


def parse_since(text: str, now: int) -> int:
    """The start of a window ending ``now``: an age back from now (a number with a unit), or a
    time as :func:`parse_time` reads it (digits alone are epoch seconds)."""
    text = text.strip()
    match = _DURATION.fullmatch(text)
    if match and match.group(2):
        return now - parse_duration(text)
    try:
        return parse_time(text, now)
    except ValueError:
        raise ValueError(f"invalid since {text!r}: give {SINCE_FORMS}") from None
