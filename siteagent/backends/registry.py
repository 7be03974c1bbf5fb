"""The backend types by name, each with the function that opens it.

Adding a backend is adding an entry. An opener takes the backend's own options (the object its
constructor takes) and the settings every backend shares; the configuration layer maps its
file onto both, so that no backend reads the configuration.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict

from siteagent.backends.base import Backend
from siteagent.backends.pbs import PbsBackend, PbsConfig
from siteagent.backends.replay import (
    REPLAY_STATE_FILE,
    ReplayError,
    ReplayOptions,
    SwfReplayBackend,
)
from siteagent.backends.slurm import SlurmBackend, SlurmConfig


@dataclass(frozen=True)
class Shared:
    """What every backend is opened with besides its own options: the prefix that marks the
    agent's reservations, and the directory where the agent keeps its state."""

    name_prefix: str
    state_dir: Path


#: Opens one backend type from its own options and the shared settings.
Opener = Callable[[Any, Shared], Backend]


def _replay(options: ReplayOptions, shared: Shared) -> Backend:
    """The simulated cluster kept in the state directory. What cannot open it (sim/'s
    errors, which stay outside the root, a missing trace, a state file of another cluster)
    is input to fix: a ReplayError with the same message."""
    state_file = str(shared.state_dir / REPLAY_STATE_FILE)
    try:
        return SwfReplayBackend.open(
            state_file,
            options.trace,
            options.speed,
            options.offset_s,
            cores=options.cores,
            origin=options.origin,
        )
    except (OSError, ValueError) as exc:
        raise ReplayError(str(exc)) from exc


def _slurm(options: SlurmConfig, shared: Shared) -> Backend:
    return SlurmBackend(replace(options, name_prefix=shared.name_prefix))


def _pyslurm(options: SlurmConfig, shared: Shared) -> Backend:
    # imported here: the package works without pyslurm, which only this backend needs
    module: Any = importlib.import_module("siteagent.backends.pyslurm")
    backend: Backend = module.PyslurmBackend(replace(options, name_prefix=shared.name_prefix))
    return backend


def _pbs(options: PbsConfig, shared: Shared) -> Backend:
    return PbsBackend(replace(options, name_prefix=shared.name_prefix))


#: Every backend type, by the name ``backend.type`` gives it.
BACKEND_TYPES: Dict[str, Opener] = {
    "swf": _replay,
    "slurm": _slurm,
    "pyslurm": _pyslurm,
    "pbs": _pbs,
}


def open_backend(kind: str, options: Any, shared: Shared) -> Backend:
    """The backend of type ``kind`` (ValueError for a type nobody registered)."""
    opener = BACKEND_TYPES.get(kind)
    if opener is None:
        known = ", ".join(sorted(BACKEND_TYPES))
        raise ValueError(f"unknown backend type {kind!r} (known: {known})")
    return opener(options, shared)
