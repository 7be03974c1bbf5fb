"""The value formats of PBS's output: numbers, durations, sizes, dates, select statements,
vnode lists, index ranges, and the JSON envelope (docs/pbs.md §1, §2).

Dates in ``qstat``/``pbs_rstat`` output are local wall-clock times of the command, so every
command runs with ``TZ=UTC`` and the text is unambiguous UTC.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, tzinfo
from typing import Any, Dict, List, Optional, Tuple


def number(value: Any) -> Optional[int]:
    """An integer from a JSON number or a numeric string (both occur, §1), else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str) and re.match(r"^\s*-?\d+\s*$", value):
        return int(value)
    return None


def parse_duration(text: Any) -> Optional[int]:
    """``HH:MM:SS`` (hours may exceed 24), ``MM:SS``, or plain seconds → seconds (§1)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return int(text)
    if not isinstance(text, str):
        return None
    m = re.match(r"^\s*(?:(?:(\d+):)?(\d+):)?(\d+)\s*$", text)
    if not m:
        return None
    hours, minutes, seconds = (int(g or 0) for g in m.groups())
    return (hours * 60 + minutes) * 60 + seconds


_SIZE_SHIFT = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40, "p": 50}


def parse_size_kb(text: Any) -> Optional[int]:
    """A PBS size (``4gb``, ``527672488kb``, ``1024``, ``2mw``) in kilobytes (§1)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return int(text) // 1024
    if not isinstance(text, str):
        return None
    m = re.match(r"^\s*(\d+)([kmgtp]?)([bw]?)\s*$", text.lower())
    if not m:
        return None
    size = int(m.group(1)) << _SIZE_SHIFT[m.group(2)]
    if m.group(3) == "w":
        size *= 8  # words are 8 bytes
    return size // 1024


def parse_pbs_time(text: Any, tz: tzinfo = UTC) -> Optional[int]:
    """A PBS date (``Wed Nov 15 14:00:00 2023``, ``Tue Oct  4 ...``) in ``tz`` → epoch.

    qstat prints C ``ctime()`` (space-padded day) and pbs_rstat ``strftime("%d")``
    (zero-padded); both are accepted. ``UNKNOWN`` (an estimate the scheduler stored as 0) and
    anything unparsable give None.
    """
    if not isinstance(text, str):
        return None
    words = text.split()
    if len(words) != 5:
        return None
    try:
        local = datetime.strptime(" ".join(words), "%a %b %d %H:%M:%S %Y")
    except ValueError:
        return None
    return int(local.replace(tzinfo=tz).timestamp())


def parse_select(text: str) -> List[Tuple[int, Dict[str, str]]]:
    """Chunks of a select statement: ``2:ncpus=8:mem=16gb+host=n1:ncpus=4`` →
    ``[(2, {ncpus: 8, mem: 16gb}), (1, {host: n1, ncpus: 4})]``. Raises ValueError."""
    chunks = []
    for part in text.split("+"):
        words = [w for w in part.split(":") if w]
        count = 1
        if words and "=" not in words[0]:
            if not words[0].isdigit():
                raise ValueError(f"bad chunk count in select {text!r}")
            count = int(words.pop(0))
        resources: Dict[str, str] = {}
        for word in words:
            key, sep, value = word.partition("=")
            if not sep or not key or not value:
                raise ValueError(f"bad resource {word!r} in select {text!r}")
            resources[key] = value
        chunks.append((count, resources))
    if not chunks:
        raise ValueError("empty select")
    return chunks


def select_totals(text: str) -> Tuple[int, int]:
    """(chunks, ncpus) asked for by a select statement; a chunk without ncpus has one CPU."""
    chunks = 0
    ncpus = 0
    for count, resources in parse_select(text):
        chunks += count
        ncpus += count * (number(resources.get("ncpus", "1")) or 0)
    return chunks, ncpus


def exec_vnodes(text: Any) -> List[str]:
    """Distinct vnode names of ``exec_vnode``/``resv_nodes`` in order of appearance.

    ``(n1:ncpus=8)+(n2:ncpus=4+n3:ncpus=4)+(n4)`` → n1 n2 n3 n4 (§2.1: a chunk may span
    vnodes, and a vnode allocated but unused appears bare).
    """
    if not isinstance(text, str):
        return []
    names: List[str] = []
    for item in re.split(r"[()+]", text):
        name = item.split(":", 1)[0].strip()
        if name and name not in names:
            names.append(name)
    return names


def exec_allocation(text: Any) -> Tuple[Tuple[str, int], ...]:
    """The CPUs held on each vnode of ``exec_vnode``/``resv_nodes``, in order of appearance.

    ``(n1:ncpus=8)+(n2:ncpus=4+n3:ncpus=4)+(n1:ncpus=2)`` → (n1, 10), (n2, 4), (n3, 4); a bare
    vnode (allocated, unused) holds none and is left out.
    """
    held: Dict[str, int] = {}
    if not isinstance(text, str):
        return ()
    for item in re.split(r"[()+]", text):
        name, _, resources = item.strip().partition(":")
        if not name:
            continue
        cpus = 0
        for resource in resources.split(":"):
            key, _, value = resource.partition("=")
            if key.strip() == "ncpus":
                cpus += number(value) or 0
        if cpus > 0:
            held[name] = held.get(name, 0) + cpus
    return tuple(held.items())


def as_text(value: Any) -> str:
    return "" if value is None else str(value)


def owner(value: Any) -> str:
    """``alice@login1`` → ``alice``."""
    return as_text(value).split("@", 1)[0]


def words(value: Any) -> Tuple[str, ...]:
    """A comma-separated PBS list as a tuple, empty items dropped."""
    return tuple(w.strip() for w in as_text(value).split(",") if w.strip())


def check_header(doc: Any, what: str) -> Dict[str, Any]:
    """The document as a dict if it has the envelope every PBS JSON output has (§2)."""
    if not isinstance(doc, dict) or "timestamp" not in doc or "pbs_server" not in doc:
        raise ValueError(f"{what}: not a PBS JSON document (no timestamp/pbs_server header)")
    return doc


def array_indices(text: str) -> List[int]:
    """Indices of a PBS range list (``0-9``, ``2-9,12``, ``1-99:2``)."""
    out: List[int] = []
    for item in words(text):
        step = 1
        if ":" in item:
            item, step_s = item.split(":", 1)
            step = max(1, int(step_s))
        lo, _, hi = item.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1, step))
    return out
