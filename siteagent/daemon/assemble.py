"""Wiring: the objects one running agent is made of, built from its site (metrics, agent,
authenticator, deals, the API's context), and what a batch system's notice does.

The site itself (backend, store, manager, pricing) is opened by market/site.py's ``open_site``,
which the administrator's commands share; see docs/design.md §3.1.
"""

from __future__ import annotations

import logging
import pwd
import time
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Optional, Tuple

from siteagent.agent.loop import Agent
from siteagent.agent.metrics import Metrics
from siteagent.api.context import ApiContext
from siteagent.config.schema import Config
from siteagent.host import sdnotify
from siteagent.host.notices import Handler, Notice, NoticeListener
from siteagent.http.server import ServiceError
from siteagent.market.deals import Deals, open_deals
from siteagent.market.reservations import LifecycleError, ReservationManager
from siteagent.market.site import Site
from siteagent.market.usage import UsageRecorder
from siteagent.security import authentication
from siteagent.security.clients import read_authorized_clients
from siteagent.security.replay import NONCES_FILE, SavedNonces

log = logging.getLogger("siteagent.service")


@dataclass
class Parts:
    """What the daemon opened besides the site (the deals' bank is closed on the way out)."""

    metrics: Metrics
    agent: Agent
    authenticator: authentication.Authenticator
    deals: Deals
    context: ApiContext


def assemble(site: Site) -> Parts:
    """The agent (metered, with the watchdog), the deals (site key, bank), who may sign, and
    the API's context."""
    config = site.config
    metrics = Metrics(
        site=config.site,
        reference_requests=config.metrics.reference_requests,
        reference_interval_s=config.metrics.reference_interval_s,
        store=site.store,
        poll_interval_s=config.planner.poll_interval_s,
        clock=time.monotonic,
    )
    site.backend = metrics.instrument(site.backend)
    site.manager.backend = site.backend
    authenticator = authentication.Authenticator(
        read_authorized_clients(config.security.authorized_clients),
        config.api.public_names,
        max_age_s=config.security.signature_max_age_s,
        nonces=authentication.NonceCache(
            config.security.nonces_per_client, saved=SavedNonces(config.state_dir / NONCES_FILE)
        ),
    )
    deals = open_deals(config, site.manager, authenticator.clients.values())
    agent = Agent(
        site.backend,
        site.pricing,
        config.planner.policy,
        poll_interval_s=config.planner.poll_interval_s,
        clock=time.monotonic,
        manager=site.manager,
        store=site.store,
        metrics=metrics,
        watchdog=sdnotify.Watchdog.from_environment(time.monotonic),
        deals=deals,
        preemption=config.planner.preemption,
        usage=UsageRecorder(
            site.store, site.backend, config.reservations.name_prefix, site.manager.clock
        ),
    )
    context = ApiContext(site, agent, authenticator, deals, metrics)
    return Parts(metrics, agent, authenticator, deals, context)


def notice_listener(
    config: Config, manager: ReservationManager, agent: Agent
) -> Optional[NoticeListener]:
    """The listener of ``notifications.socket`` (None when not configured), heeding root and
    ``notifications.users``; ServiceError names a user this host does not know."""
    path = config.notifications.socket
    if path is None:
        return None
    return NoticeListener(
        path, user_ids(config.notifications.users), notice_handler(manager, agent)
    )


def user_ids(users: Tuple[str, ...]) -> FrozenSet[int]:
    uids = set()
    for user in users:
        try:
            uids.add(pwd.getpwnam(user).pw_uid)
        except KeyError:
            raise ServiceError(
                f"notifications.users: there is no user {user!r} on this host"
            ) from None
    return frozenset(uids)


def notice_handler(manager: ReservationManager, agent: Agent) -> Handler:
    """What a notice does: the reservation moves now (as far as its window allows), and the
    loop is woken to record what its jobs used. The answer says where it stands, or why
    nothing moved."""

    def handle(notice: Notice) -> Dict[str, Any]:
        moved = manager.started if notice.event == "begin" else manager.ended
        try:
            record = moved(notice.reservation)
        except LifecycleError as exc:
            log.warning(
                "notice that %s %s: %s", notice.reservation, _EVENT_WORDS[notice.event], exc
            )
            return {"ok": False, "error": str(exc)}
        log.info(
            "notice that %s %s (uid %d): it is %s",
            notice.reservation,
            _EVENT_WORDS[notice.event],
            notice.uid,
            record.state.value,
        )
        agent.wake()
        return {"ok": True, "state": record.state.value}

    return handle


_EVENT_WORDS = {"begin": "began", "end": "ended"}
