"""SIGHUP's policy: which changed settings apply to the running objects at once, and which
(opened once at start) are logged as needing a restart and kept as they were running.

Invariant: a reload never reopens what was opened at start. The argument: docs/design.md §3.1.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

from siteagent.config import loading
from siteagent.config.schema import BidMode, Config
from siteagent.daemon.assemble import Parts
from siteagent.market.site import Site, pricing_of
from siteagent.security.clients import AuthorizedClient

#: Settings opened once at start: a reload that changes them is logged, not applied.
RESTART_KEYS = (
    "state_dir",
    "site.name",
    "backend.",
    "api.",
    "ledger.",
    "security.site_key",
    "security.nonces_per_client",
    "reservations.name_prefix",
    "notifications.",
)


def changed_keys(old: Config, new: Config) -> Tuple[List[str], List[str]]:
    """The settings that differ: (applied now, needing a restart)."""
    before = dict(loading.flatten(old))
    changed = [key for key, value in loading.flatten(new) if before.get(key) != value]
    pending = [key for key in changed if needs_restart(key)]
    return [key for key in changed if key not in pending], pending


def needs_restart(key: str) -> bool:
    return any(key == prefix or key.startswith(prefix) for prefix in RESTART_KEYS)


def keep_restart_settings(old: Config, new: Config) -> Config:
    """``new`` with the settings opened at start kept as they were running."""
    return new.model_copy(
        update=dict(
            state_dir=old.state_dir,
            backend=old.backend,
            api=old.api,
            ledger=old.ledger,
            security=new.security.model_copy(
                update=dict(
                    site_key=old.security.site_key,
                    nonces_per_client=old.security.nonces_per_client,
                )
            ),
            reservations=new.reservations.model_copy(
                update=dict(name_prefix=old.reservations.name_prefix)
            ),
            notifications=old.notifications,
            explicit=new.explicit,
        )
    )


def apply(site: Site, parts: Parts, config: Config, clients: Dict[str, AuthorizedClient]) -> None:
    """Hand the reloaded settings to the running objects (each reads them at its next use),
    and price the latest market view again with them."""
    pricing = pricing_of(config.pricing)
    site.config = config
    site.pricing = pricing
    site.manager.confirm_timeout = config.reservations.confirm_timeout_s
    site.manager.penalty_factor = pricing.penalty_factor
    site.manager.suspends = config.auctions.mode is BidMode.NOW
    parts.agent.pricing = pricing
    parts.agent.policy = config.planner.policy
    parts.agent.preemption = config.planner.preemption
    parts.agent.poll_interval_s = config.planner.poll_interval_s
    parts.metrics.poll_interval_s = config.planner.poll_interval_s
    parts.metrics.follow(config.metrics.reference_requests, config.metrics.reference_interval_s)
    parts.metrics.site = config.site
    parts.authenticator.clients = clients
    parts.authenticator.max_age_s = config.security.signature_max_age_s
    parts.deals.open_accounts(clients.values())
    parts.agent.reprice()  # the next quote and slots are priced anew, not the next poll's
