"""Checks every backend makes before a reservation request reaches the batch system.

A request is checked whole before any of it is turned into command arguments: a value that is
not what it claims to be (a name with a space, a size that is not a number) would change the
request rather than fail it. And the agent only ever deletes reservations it made, which carry
its name prefix.
"""

from __future__ import annotations

import time
from typing import Pattern

from siteagent.core import names
from siteagent.core.values import CapacityUnit, ReservationSpec


def utc_text(epoch: int) -> str:
    """``2026-11-22T07:50:10``: an epoch as UTC wall-clock text (commands run with TZ=UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch))


def checked_start(
    spec: ReservationSpec,
    name_rule: Pattern[str],
    name_prefix: str,
    unit: CapacityUnit,
    earliest: int,
) -> int:
    """The start to ask for ``spec`` (its own, or ``earliest`` if that is later), once every
    field has been checked (ValueError with the reason).

    The name must follow the batch system's ``name_rule`` and carry the agent's prefix; start,
    duration and size must be positive integers; the window must end after the start asked
    for; the unit must be the backend's.
    """
    names.check(name_rule, spec.name, "reservation name")
    if name_prefix and not spec.name.startswith(name_prefix):
        raise ValueError(f"reservation name {spec.name!r} lacks the agent's prefix {name_prefix!r}")
    for label, val in (("start", spec.start), ("duration", spec.duration), ("size", spec.size)):
        if isinstance(val, bool) or not isinstance(val, int):
            raise ValueError(f"reservation {label} must be an integer, got {val!r}")
    if spec.size <= 0:
        raise ValueError(f"reservation size must be positive, got {spec.size}")
    if spec.duration <= 0:
        raise ValueError(f"reservation duration must be positive, got {spec.duration} s")
    if spec.start <= 0:
        raise ValueError(f"reservation start must be an epoch time, got {spec.start}")
    start = max(spec.start, earliest)
    if spec.end <= start:
        raise ValueError(f"reservation window ends in the past ({utc_text(spec.end)}Z)")
    asked = CapacityUnit(spec.unit)
    if asked is not unit:
        raise ValueError(f"reservation unit {asked.value} differs from the backend's {unit.value}")
    return start


def check_ours(name: str, name_rule: Pattern[str], name_prefix: str) -> None:
    """Refuse (ValueError) to touch a reservation whose name lacks the agent's prefix: the
    agent never deletes a reservation it did not make."""
    names.check(name_rule, name, "reservation name")
    if name_prefix and not name.startswith(name_prefix):
        raise ValueError(
            f"refusing to delete {name!r}: not an agent reservation (prefix {name_prefix!r})"
        )
