"""The papers' numbers (paper_values.yaml), one entry per headline result ID of issue 30's spec.

A report row names an entry by ID (and optionally one of its points); the verdict compares
ours with the entry's value under the entry's tolerance, or our paired change with its
direction. See docs/reproductions.md ("Paper values").
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple, Union

import yaml

FILE = Path(__file__).with_name("paper_values.yaml")

#: Absolute, "10%" relative, "x2" factor, or (below, above) absolute.
Tolerance = Union[float, str, Tuple[float, float]]

_ID = re.compile(r"00[0-4]-[0-9]+")
_FIELDS = {
    "result",
    "claim",
    "source",
    "unit",
    "units",
    "values",
    "tolerance",
    "direction",
    "unavailable",
    "note",
}


@dataclass(frozen=True)
class PaperValue:
    """One headline result: what the paper claims, its numbers and how close counts as a match."""

    id: str
    result: str
    claim: str
    source: str
    unit: str
    values: Mapping[str, float] = field(default_factory=dict)
    units: Mapping[str, str] = field(default_factory=dict)
    tolerances: Mapping[str, Tolerance] = field(default_factory=dict)
    direction: Optional[str] = None
    unavailable: Optional[str] = None
    note: Optional[str] = None

    @property
    def from_plot(self) -> bool:
        return self.source.startswith("plot:")

    def point(self, point: Optional[str] = None) -> str:
        """The point's name: ``point`` itself, or the entry's only point when None."""
        if point is None:
            if len(self.values) != 1:
                raise KeyError(
                    f"{self.id} has {len(self.values)} values ({', '.join(self.values) or 'none'}):"
                    " name the point"
                )
            return next(iter(self.values))
        if point not in self.values:
            raise KeyError(f"{self.id} has no point {point!r} (it has {', '.join(self.values)})")
        return point

    def value(self, point: Optional[str] = None) -> float:
        return self.values[self.point(point)]

    def band(self, point: Optional[str] = None) -> Tuple[float, float]:
        """[low, high] of values that match the paper's at ``point`` (its tolerance)."""
        name = self.point(point)
        value = self.values[name]
        tolerance = self.tolerances.get(name)
        if tolerance is None:
            return value, value
        if isinstance(tolerance, tuple):
            return value - tolerance[0], value + tolerance[1]
        if isinstance(tolerance, str) and tolerance.endswith("%"):
            half = abs(value) * float(tolerance[:-1]) / 100
            return value - half, value + half
        if isinstance(tolerance, str) and tolerance.startswith("x"):
            factor = float(tolerance[1:])
            return min(value / factor, value * factor), max(value / factor, value * factor)
        return value - float(tolerance), value + float(tolerance)

    def display(self, point: Optional[str] = None) -> str:
        """The paper's figure as a report shows it: "71.1 ± 10 % of request price (plot)"."""
        if not self.values or (point is None and len(self.values) != 1):
            return self.claim
        name = self.point(point)
        tolerance = self.tolerances.get(name)
        low, high = self.band(name)
        text = f"{self.values[name]:g}"
        if isinstance(tolerance, tuple):
            if math.isinf(low) or math.isinf(high):
                text = f"≤ {high:g}" if math.isinf(low) else f"≥ {low:g}"
            else:
                text += f" (match {low:g} to {high:g})"
        elif isinstance(tolerance, str) and tolerance.startswith("x"):
            text += f" (×/÷ {tolerance[1:]})"
        elif tolerance:
            text += f" ± {tolerance:g}" if isinstance(tolerance, float) else f" ± {tolerance}"
        return f"{text} {self.unit_of(name)}"

    def unit_of(self, point: str) -> str:
        return self.units.get(point, self.unit)


@functools.lru_cache(maxsize=1)
def paper_values() -> Dict[str, PaperValue]:
    """Every entry of paper_values.yaml by ID, checked (a malformed entry names its fault)."""
    raw = yaml.safe_load(FILE.read_text(encoding="utf-8"))
    return {str(key): _entry(str(key), body) for key, body in raw.items()}


def paper_value(result_id: str) -> PaperValue:
    """The entry for ``result_id`` (e.g. "002-14"); KeyError lists the seed's IDs."""
    values = paper_values()
    if result_id not in values:
        seed = result_id.split("-")[0]
        known = ", ".join(key for key in values if key.startswith(seed + "-"))
        raise KeyError(
            f"{result_id} is not in {FILE.name} (seed {seed} has: {known or 'no entries'})"
        )
    return values[result_id]


def seed_ids(seed: str) -> Tuple[str, ...]:
    """The IDs of one seed's results ("000" ... "004"), in file order."""
    return tuple(key for key in paper_values() if key.startswith(seed + "-"))


def _entry(key: str, body: Mapping[str, Any]) -> PaperValue:
    where = f"{FILE.name}: {key}"
    if not _ID.fullmatch(key):
        raise ValueError(f"{where}: an ID is SEED-N, as in issue 30's results table")
    unknown = set(body) - _FIELDS
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    source = str(body["source"])
    if not source.startswith(("exact:", "plot:")):
        raise ValueError(f"{where}: source must start with 'exact:' or 'plot:', got {source!r}")
    values = {str(name): float(v) for name, v in (body.get("values") or {}).items()}
    tolerances = _tolerances(where, values, body.get("tolerance"))
    if source.startswith("plot:"):
        missing = [name for name in values if name not in tolerances]
        if missing:
            raise ValueError(f"{where}: a value read off a plot needs a tolerance: {missing}")
    direction = body.get("direction")
    if direction not in (None, "increase", "decrease"):
        raise ValueError(f"{where}: direction must be increase or decrease, got {direction!r}")
    return PaperValue(
        id=key,
        result=str(body["result"]),
        claim=str(body["claim"]),
        source=source,
        unit=str(body["unit"]),
        values=values,
        tolerances=tolerances,
        units={str(name): str(unit) for name, unit in (body.get("units") or {}).items()},
        direction=direction,
        unavailable=body.get("unavailable"),
        note=body.get("note"),
    )


def _tolerances(where: str, values: Mapping[str, float], raw: Any) -> Dict[str, Tolerance]:
    if raw is None:
        return {}
    given = raw if isinstance(raw, dict) else {name: raw for name in values}
    out: Dict[str, Tolerance] = {}
    for name, tolerance in given.items():
        if str(name) not in values:
            raise ValueError(f"{where}: tolerance for {name!r}, which has no value")
        out[str(name)] = _tolerance(where, tolerance)
    return out


def _tolerance(where: str, raw: Any) -> Tolerance:
    if isinstance(raw, list) and len(raw) == 2:
        return float(raw[0]), float(raw[1])
    if isinstance(raw, (int, float)) and raw >= 0:
        return float(raw)
    if isinstance(raw, str) and re.fullmatch(r"[0-9.]+%|x[0-9.]+", raw):
        return raw
    raise ValueError(f"{where}: a tolerance is a number, 'N%', 'xN' or [below, above], got {raw!r}")
