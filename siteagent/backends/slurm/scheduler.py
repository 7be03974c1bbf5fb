"""How the controller places and plans jobs, from ``scontrol show config``.

The node-aware plan follows Slurm's select/cons_tres (or cons_res) placement with the
backfill scheduler's resolution and window; any other select or scheduler plugin gets the
pooled plan. Read once per backend: changing these needs a controller restart. The pyslurm
backend reads the same settings through libslurm and gives them here by the same names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, Mapping, Tuple

from siteagent.core.values import Backfill, Placement

#: Select plugins whose placement the node-aware plan follows.
NODE_AWARE_SELECT = frozenset({"select/cons_tres", "select/cons_res"})


@dataclass(frozen=True)
class SchedulerSettings:
    """Whether the plan follows Slurm's placement, its backfill parameters, and the
    controller's release (``SLURM_VERSION``, e.g. ``24.11.5``; "" when not said)."""

    placement: Placement = Placement.POOLED
    backfill: Backfill = field(default_factory=Backfill)
    version: str = ""

    @property
    def cores_per_node(self) -> bool:
        """Whether ``scontrol create reservation`` takes a core count for each node
        (``CoreCnt=4,8``): up to 23.02; 23.11 and later take one total and place it on the
        named nodes themselves (docs/slurm.md §11)."""
        return self.release < (23, 11)

    @property
    def release(self) -> Tuple[int, int]:
        """(major, minor) of the controller's release (22.05 when not said)."""
        return release_of(self.version)


def release_of(version: str) -> Tuple[int, int]:
    """(major, minor) of ``SLURM_VERSION``; 22.05 (the oldest followed) when not said."""
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else (22, 5)


def _settings(text: str) -> Dict[str, str]:
    """``Key = Value`` lines of ``scontrol show config``."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _parameter(parameters: str, name: str) -> int:
    """An integer ``name=N`` of a comma-separated parameter list; 0 if absent."""
    found = re.search(rf"(?:^|,){name}=(\d+)(?:,|$)", parameters)
    return int(found.group(1)) if found else 0


def parse_scheduler_config(text: str) -> SchedulerSettings:
    """The settings of ``scontrol show config`` output."""
    return scheduler_settings(_settings(text))


def scheduler_settings(settings: Mapping[str, str]) -> SchedulerSettings:
    """The settings of the controller's configuration by ``scontrol show config``'s names
    (``SelectType``, ``SchedulerType``, ``SchedulerParameters``, ``KillWait``,
    ``SLURM_VERSION``), whoever read
    it; Slurm's defaults where unset: bf_resolution 60 s, bf_window 1 day, KillWait 30 s."""
    default = Backfill()
    node_aware = (
        settings.get("SelectType", "") in NODE_AWARE_SELECT
        and settings.get("SchedulerType", "") == "sched/backfill"
    )
    parameters = settings.get("SchedulerParameters", "")
    kill_wait = re.match(r"(\d+)", settings.get("KillWait", ""))
    backfill = Backfill.of_release(
        release_of(settings.get("SLURM_VERSION", "")),
        resolution=_parameter(parameters, "bf_resolution") or default.resolution,
        window=(_parameter(parameters, "bf_window") * 60) or default.window,
        kill_wait=int(kill_wait.group(1)) if kill_wait else default.kill_wait,
    )
    return SchedulerSettings(
        Placement.SLURM if node_aware else Placement.POOLED,
        backfill,
        settings.get("SLURM_VERSION", ""),
    )
