"""One site assembled from its configuration: batch-system backend, state store, reservation
manager and pricing.

`siteagent serve`, the API and the administrator's commands all open the site here, so they
see the same cluster, the same records and the same prices for the same configuration.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional

from siteagent.backends import registry
from siteagent.backends.base import Backend
from siteagent.backends.pbs import PbsConfig
from siteagent.backends.replay import ReplayOptions
from siteagent.backends.slurm import SlurmConfig
from siteagent.config.schema import BackendType, BidMode, Config, PricingConfig, PricingPolicy
from siteagent.core.files import make_private
from siteagent.market.reservations import ReservationManager
from siteagent.market.store import Store
from siteagent.pricing import ExternalityFee, FlatPrice, LoadBasedPrice, NoFee, Pricing
from siteagent.pricing.base import FeePolicy, UnitPricePolicy

#: The state store's file in the state directory.
STORE_FILE = "siteagent.sqlite3"


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
    A state directory made here is the agent's alone (0700), like every file put in it.
    """
    make_private(config.state_dir, directory=True)
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
        suspends=config.auctions.mode is BidMode.NOW,
    )
    return Site(config, store, backend, manager, pricing)


def open_backend(config: Config) -> Backend:
    """The backend ``backend.type`` names, with its options, the reservation prefix and the
    state directory."""
    kind = config.backend.type
    shared = registry.Shared(config.reservations.name_prefix, config.state_dir)
    return registry.open_backend(kind.value, _OPTIONS[kind](config), shared)


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


def replay_options(config: Config) -> ReplayOptions:
    """The replay options the file sets; those it does not set are left to the saved cluster."""
    options, explicit = config.backend.swf, config.explicit
    return ReplayOptions(
        _text(options.trace) if "backend.swf.trace" in explicit else None,
        options.speed if "backend.swf.speed" in explicit else None,
        options.offset if "backend.swf.offset" in explicit else None,
        options.cores if "backend.swf.cores" in explicit else None,
        options.origin,
    )


def slurm_config(config: Config) -> SlurmConfig:
    """The Slurm options of ``config``: the slurm and pyslurm backends and ``sacct`` share them
    (the reservation prefix is one of the settings every backend is opened with)."""
    options = config.backend.slurm
    return SlurmConfig(
        slurm_conf=_text(options.slurm_conf),
        partition=options.partition,
        unit=options.unit,
        flags=options.flags,
        users=options.users,
        timeout=options.timeout,
        qos_levels=options.qos_levels,
        command_prefix=options.command_prefix,
    )


def pbs_config(config: Config) -> PbsConfig:
    """The PBS options of ``config``."""
    options = config.backend.pbs
    return PbsConfig(
        pbs_conf=_text(options.pbs_conf),
        queue=options.queue,
        unit=options.unit,
        timeout=options.timeout,
    )


#: Each backend type's options, as the configuration gives them.
_OPTIONS: Dict[BackendType, Callable[[Config], object]] = {
    BackendType.SWF: replay_options,
    BackendType.SLURM: slurm_config,
    BackendType.PYSLURM: slurm_config,
    BackendType.PBS: pbs_config,
}


def _text(path: Optional[Path]) -> Optional[str]:
    return None if path is None else str(path)
