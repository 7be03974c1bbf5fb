"""Slurm's compressed lists: hostlists (``n[1-3,5]``) and job-array index strings (``2-5%2``)."""

from __future__ import annotations

import re
from typing import List


def _split_top(text: str) -> List[str]:
    """Split on commas that are not inside brackets."""
    parts: List[str] = []
    cur: List[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in (s.strip() for s in parts) if p]


def _range_items(spec: str) -> List[str]:
    """``1-3,07-08`` → ``1 2 3 07 08`` keeping zero padding."""
    out: List[str] = []
    for item in spec.split(","):
        if "-" in item:
            lo, hi = item.split("-", 1)
            width = len(lo) if lo.startswith("0") else 0
            out.extend(str(i).zfill(width) for i in range(int(lo), int(hi) + 1))
        elif item:
            out.append(item)
    return out


def expand_hostlist(text: str) -> List[str]:
    """Node names of a Slurm hostlist (``n[1-3,5]``, ``r[1-2]-n[01-02]``, ``a,b``).

    Needed to tell which reservations and jobs touch the configured partition's nodes.
    """
    if not text or text in ("(null)", "None"):
        return []
    names: List[str] = []
    for part in _split_top(text):
        m = re.search(r"\[([^\]]*)\]", part)
        if not m:
            names.append(part)
            continue
        head, tail = part[: m.start()], part[m.end() :]
        for item in _range_items(m.group(1)):
            names.extend(expand_hostlist(head + item + tail))
    return names


def array_indices(text: str) -> List[int]:
    """Indices of an array task string (``2-5%2``, ``49-97:3``, ``1,3,5-7``); throttle dropped."""
    body = text.split("%", 1)[0]
    out: List[int] = []
    for item in body.split(","):
        item = item.strip()
        if not item:
            continue
        step = 1
        if ":" in item:
            item, step_s = item.split(":", 1)
            step = max(1, int(step_s))
        if "-" in item:
            lo, hi = item.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1, step))
        else:
            out.append(int(item))
    return out
