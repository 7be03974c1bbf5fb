"""One site assembled from its configuration: batch-system backend, state store, reservation
manager and pricing.

`siteagent serve`, the API and the administrator's commands all open the site here, so they
see the same cluster, the same records and the same prices for the same configuration.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from siteagent.backends.base import Backend
from siteagent.backends.pbs import PbsBackend, PbsConfig
from siteagent.backends.replay import SwfReplayBackend
from siteagent.backends.slurm import SlurmBackend, SlurmConfig
from siteagent.config.schema import BackendType, Config, PricingConfig, PricingPolicy
from siteagent.market.reservations import ReservationManager
from siteagent.market.store import Store
from siteagent.pricing import ExternalityFee, FlatPrice, LoadBasedPrice, NoFee, Pricing
from siteagent.pricing.base import FeePolicy, UnitPricePolicy

#: Files in the state directory.
STORE_FILE = "siteagent.sqlite3"
REPLAY_STATE_FILE = "replay-state.json"


@dataclass
class Site:
    """What every entry point works on; ``close`` releases the database and the backend."""

    config: Config
    store: Store
    backend: Backend
    manager: ReservationManager
    pricing: Pricing

    def close(self) -> None:
        self.store.close()
        self.backend.close()


def open_site(config: Config, clock: Optional[Callable[[], float]] = None) -> Site:
    """Open the backend and the store of ``config`` and the manager joining them.

    The manager's clock is the backend's (a replayed cluster runs on trace time) unless given.
    """
    config.state_dir.mkdir(parents=True, exist_ok=True)
    store = Store(str(config.state_dir / STORE_FILE))
    try:
        backend = open_backend(config)
    except BaseException:
        store.close()
        raise
    pricing = pricing_of(config.pricing)
    manager = ReservationManager(
        store,
        backend,
        clock=clock or backend.now,
        confirm_timeout=config.reservations.confirm_timeout_s,
        name_prefix=config.reservations.name_prefix,
        penalty_factor=pricing.penalty_factor,
    )
    return Site(config, store, backend, manager, pricing)


def open_backend(config: Config) -> Backend:
    """The backend ``backend.type`` names, with its options and the reservation prefix."""
    kind, prefix = config.backend.type, config.reservations.name_prefix
    if kind is BackendType.SWF:
        return _replay_backend(config)
    if kind is BackendType.SLURM:
        return SlurmBackend(slurm_config(config))
    if kind is BackendType.PYSLURM:
        # imported here: the package works without pyslurm, which only this backend needs
        module: Any = importlib.import_module("siteagent.backends.pyslurm")
        backend: Backend = module.PyslurmBackend(slurm_config(config))
        return backend
    options = config.backend.pbs
    return PbsBackend(
        PbsConfig(
            pbs_conf=_text(options.pbs_conf),
            queue=options.queue,
            unit=options.unit,
            timeout=options.timeout,
            name_prefix=prefix,
        )
    )


def pricing_of(config: PricingConfig) -> Pricing:
    """The unit-price policy and the fee policy the configuration chooses, composed."""
    unit: UnitPricePolicy
    if config.policy is PricingPolicy.LOAD:
        unit = LoadBasedPrice(config.load.start_price, config.load.min_price, config.load.rounds)
    else:
        unit = FlatPrice(config.flat.price)
    externality = config.externality
    fee: FeePolicy = ExternalityFee(externality.rate) if externality.enabled else NoFee()
    return Pricing(unit, fee, externality.policy, config.cancellation_penalty)


def _replay_backend(config: Config) -> SwfReplayBackend:
    """The simulated cluster kept in the state directory.

    Options the file does not set are left to the saved cluster (or the defaults for a new
    one), so that a restarted agent with no configuration finds its cluster again.
    """
    options, explicit = config.backend.swf, config.explicit
    return SwfReplayBackend.open(
        str(config.state_dir / REPLAY_STATE_FILE),
        _text(options.trace) if "backend.swf.trace" in explicit else None,
        options.speed if "backend.swf.speed" in explicit else None,
        options.offset if "backend.swf.offset" in explicit else None,
    )


def slurm_config(config: Config) -> SlurmConfig:
    """The Slurm options of ``config``: the slurm and pyslurm backends and ``sacct`` share them."""
    options = config.backend.slurm
    return SlurmConfig(
        slurm_conf=_text(options.slurm_conf),
        partition=options.partition,
        unit=options.unit,
        flags=options.flags,
        users=options.users,
        timeout=options.timeout,
        name_prefix=config.reservations.name_prefix,
    )


def _text(path: Optional[Path]) -> Optional[str]:
    return None if path is None else str(path)
