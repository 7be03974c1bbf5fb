"""The two JSON layouts of Slurm's clients, and reading one value from either.

Two layouts exist and are told apart by ``meta.plugin`` only (docs/slurm.md §3, §9):

* ``openapi/v0.0.3x`` (21.08, 22.05): flat scalars, ``null`` for unset/unlimited integers,
  ``job_state`` a word, node ``state`` a lower-case word plus a ``state_flags`` list;
* ``data_parser/v0.0.39+`` (23.02 and later): numbers wrapped as
  ``{"set", "infinite", "number"}``, ``job_state`` and node ``state`` lists, and ``sinfo --json``
  regrouped by partition/state (per-node data then comes from ``scontrol --json show nodes``).

The helpers here (:func:`number`, :func:`is_infinite`, :func:`state_words`) accept both shapes
value by value, so one parser serves every version.
"""

from __future__ import annotations

import json
import re
from typing import Any, List, Mapping, Optional, Tuple

from siteagent.backends.base import BackendUnavailable


def number(value: Any) -> Optional[int]:
    """An integer from either JSON shape, or None when unset or infinite.

    v0.0.38 uses plain integers and ``null``; data_parser uses
    ``{"set": bool, "infinite": bool, "number": int}``.
    """
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def is_infinite(value: Any) -> bool:
    """True only for data_parser's explicit ``"infinite": true`` (v0.0.38 has no such flag)."""
    return isinstance(value, dict) and bool(value.get("infinite", False))


def state_words(value: Any, flags: Any = None) -> Tuple[str, Tuple[str, ...]]:
    """A (base state, flags) pair from ``"mixed"`` + ``["DRAIN"]`` or ``["MIXED", "DRAIN"]``.

    The base is lower-case, flags upper-case. Unknown words are kept, never rejected: later
    releases renamed some states (docs/slurm.md §9).
    """
    words: List[str]
    if isinstance(value, str):
        words = [w for w in re.split(r"[+,\s]+", value) if w]
    elif isinstance(value, list):
        words = [str(w) for w in value if w]
    else:
        words = []
    extra = [str(f) for f in flags] if isinstance(flags, list) else []
    if not words:
        return "unknown", tuple(f.upper() for f in extra)
    base = words[0].lower()
    seen: List[str] = []
    for f in words[1:] + extra:
        if f.upper() not in seen:
            seen.append(f.upper())
    return base, tuple(seen)


def as_text(value: Any) -> str:
    """A field as text: "" for null, a list joined with commas (later layouts use lists)."""
    if value is None:
        return ""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def detect_layout(doc: Mapping[str, Any]) -> str:
    """The JSON layout of a ``squeue``/``sinfo``/``scontrol --json`` document.

    Returns ``"data_parser/v0.0.NN"`` or ``"openapi/v0.0.NN"`` as read from ``meta.plugin``
    (``meta.plugins`` in some releases). Raises ValueError when neither is there: output
    without a plugin name is not something this parser has seen, so it is not trusted.
    """
    meta = doc.get("meta")
    if not isinstance(meta, dict):
        raise ValueError("no 'meta' object in the JSON output")
    for key in ("plugin", "plugins"):
        plugin = meta.get(key)
        if not isinstance(plugin, dict):
            continue
        parser = plugin.get("data_parser")
        if isinstance(parser, str) and parser:
            return parser if parser.startswith("data_parser/") else "data_parser/" + parser
        kind = plugin.get("type")
        if isinstance(kind, str) and kind.startswith("openapi/"):
            return kind
    raise ValueError(f"unrecognised JSON layout: meta={json.dumps(meta)[:200]}")


def check_errors(doc: Mapping[str, Any], what: str) -> None:
    """Raise BackendUnavailable if the document carries ``errors``.

    With the controller down ``squeue --json`` exits 0 with no jobs and one error entry
    (docs/slurm.md §3): an empty list there is not an empty queue.
    """
    errors = doc.get("errors") or []
    if errors:
        parts = []
        for err in errors:
            if isinstance(err, dict):
                msg = err.get("description") or err.get("error") or json.dumps(err)
                parts.append(str(msg))
            else:
                parts.append(str(err))
        raise BackendUnavailable(f"{what}: " + "; ".join(parts))
