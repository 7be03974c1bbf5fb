"""Times and durations as Slurm's text output writes them.

Times from ``scontrol``/``squeue`` are local wall-clock times of the command; every command
runs with ``TZ=UTC`` (and ``SLURM_TIME_FORMAT=standard``) so that the text is unambiguous UTC.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, tzinfo
from typing import Optional

from siteagent.core.values import UNLIMITED_S

#: What Slurm prints for a field with no value.
EMPTY = ("", "(null)", "n/a", "N/A", "None")


def parse_slurm_time(text: str, tz: tzinfo = UTC) -> Optional[int]:
    """``2026-11-22T07:50:10`` in ``tz`` → epoch seconds; None for Unknown/empty."""
    if text in EMPTY or text.lower() in ("unknown", "none"):
        return None
    try:
        local = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    return int(local.replace(tzinfo=tz).timestamp())


def parse_duration(text: str) -> Optional[int]:
    """scontrol's ``[D-]HH:MM:SS`` → seconds; None for UNLIMITED, empty or anything else."""
    m = re.match(r"^(?:(\d+)-)?(\d+):(\d\d):(\d\d)$", text.strip())
    if not m:
        return None
    days, hours, minutes, seconds = (int(g or 0) for g in m.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def parse_time_limit(text: str) -> int:
    """squeue's ``%l``: ``[D-][HH:]MM:SS``, or UNLIMITED/NOT_SET/INVALID (``UNLIMITED_S``)."""
    m = re.match(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d\d)$", text.strip())
    if not m:
        return UNLIMITED_S
    days, hours, minutes, seconds = (int(g or 0) for g in m.groups())
    limit = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    return limit if limit > 0 else UNLIMITED_S
