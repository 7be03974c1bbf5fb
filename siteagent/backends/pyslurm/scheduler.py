"""How the controller places and plans jobs, read through pyslurm.

The settings the node-aware plan follows (:mod:`siteagent.backends.slurm.scheduler`) come from
libslurm's copy of the controller's configuration, by ``scontrol show config``'s names, so
that both Slurm backends decide the placement and the backfill parameters the same way. The
releases with the legacy reservation class (22.5 to 24.x) have the legacy ``pyslurm.config``
class too; those with the Reservation objects (25.5 on) have ``pyslurm.slurmctld.Config``.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping

from siteagent.backends.pyslurm.versions import ReservationApi


def scheduler_values(pyslurm: Any, api: ReservationApi) -> Dict[str, str]:
    """``SelectType``, ``SchedulerType``, ``SchedulerParameters``, ``KillWait`` and
    ``SLURM_VERSION`` (whose backfill rules the plan follows) as the controller has them
    (one RPC)."""
    if api is ReservationApi.OBJECTS:
        return _from_config_object(pyslurm.slurmctld.Config.load())
    return _from_legacy_config(pyslurm.config().get())


def _from_legacy_config(conf: Mapping[str, Any]) -> Dict[str, str]:
    """``pyslurm.config().get()``: scontrol's values under libslurm's field names."""
    return {
        "SelectType": conf.get("select_type") or "",
        "SchedulerType": conf.get("schedtype") or "",
        "SchedulerParameters": conf.get("sched_params") or "",
        "KillWait": _seconds(conf.get("kill_wait")),
        "SLURM_VERSION": conf.get("version") or "",
    }


def _from_config_object(conf: Any) -> Dict[str, str]:
    """``pyslurm.slurmctld.Config``: its scheduler parameters are a dict (a bare flag maps to
    True), written back as scontrol's comma-separated list."""
    parameters: Mapping[str, Any] = conf.scheduler_parameters or {}
    return {
        "SelectType": conf.select_type or "",
        "SchedulerType": conf.scheduler_type or "",
        "SchedulerParameters": ",".join(
            name if value is True else f"{name}={value}" for name, value in parameters.items()
        ),
        "KillWait": _seconds(conf.kill_wait_time),
        "SLURM_VERSION": getattr(conf, "version", None) or "",
    }


def _seconds(value: Any) -> str:
    """A count of seconds as scontrol writes it; "" (Slurm's default then) where unset."""
    return "" if value is None else str(value)
