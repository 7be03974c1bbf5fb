"""Holding a plan at the sites, all or nothing: what ``provision`` and ``select --reserve``
share (the plan journaled as one auction whose parts are its tasks; docs/client.md)."""

from __future__ import annotations

import contextlib
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from siteagent.cli import console
from siteagent.client.batchcommit import BatchCommit
from siteagent.client.commit import CommitOutcome, Held
from siteagent.client.connection import SiteConnection
from siteagent.client.journal import Journal
from siteagent.client.plans import PlanningError, ProvisioningPlan
from siteagent.client.recovery import Patient

if TYPE_CHECKING:
    from siteagent.client.greedy import SiteOffers


def reserve_plan(
    journal: Journal,
    described: Mapping[str, Any],
    connections: Mapping[str, SiteConnection],
    tasks: int,
    plan_with: Callable[[SiteOffers], ProvisioningPlan],
    interrupted: Callable[[], bool],
    dry_run: bool = False,
    quiet: bool = False,
    offers_per_quote: Optional[int] = None,
    max_price: Optional[Decimal] = None,
    budget: Optional[Decimal] = None,
) -> Tuple[CommitOutcome, Optional[ProvisioningPlan]]:
    """Plan ``tasks`` through ``plan_with``, which holds each task at its site as it places
    it (through the offers it is given), then confirm them all, or release them all: the
    plan journaled as one auction ``described`` of ``tasks`` parts, each task held one part
    (``recover`` closes it done only when that many were confirmed). ``quiet``: no progress
    bar. ``offers_per_quote``: how many offers each site is asked for per task (the
    greedy planner's default; see siteagent/client/liveoffers.py); ``max_price`` caps every
    quote per core-hour and ``budget`` what the tasks held cost together. The outcome, and
    the plan as held (None if planning failed)."""
    from siteagent.client.livebatches import LiveBatchOffers  # the planners' libraries: above
    from siteagent.client.liveoffers import GREEDY_OFFERS

    record = journal.open_auction({**described, "parts": tasks})
    sellers = {name: Patient(connection) for name, connection in connections.items()}
    planned: Dict[str, ProvisioningPlan] = {}
    with journal.running(record.id), _progress(tasks, quiet) as one_held:
        commit = BatchCommit(
            journal, record.id, sellers, tasks, None, interrupted, connections=connections
        )
        offers = LiveBatchOffers(
            connections,
            commit,
            dry_run,
            one_held,
            offers_per_quote or GREEDY_OFFERS,
            max_price=max_price,
            budget=budget,
        )

        def hold() -> Mapping[int, Held]:
            try:
                planned["plan"] = plan_with(offers)
            except PlanningError as exc:  # with what the sites said: a refusal is not "none"
                raise PlanningError(offers.explain(str(exc))) from None
            return offers.held

        outcome = commit.run_plan(hold, confirm=not dry_run)
    return outcome, planned.get("plan")


def plan_rows(plan: ProvisioningPlan, outcome: CommitOutcome) -> List[Dict[str, Any]]:
    """Each task's placement with its reservation (none in a dry run): the parts were held in
    the plan's order, structural tasks (which hold nothing) left out."""
    confirmed = {entry.part: entry for entry in outcome.confirmed}
    real = [p for p in plan.placements if p.site is not None]
    rows = []
    for part, placement in enumerate(real):
        entry = confirmed.get(part)
        reservation = entry.reservation_id if entry is not None else None
        rows.append(
            {
                "task": placement.task,
                "site": placement.site,
                "reservation": reservation,
                "start": placement.start,
                "finish": placement.finish,
                "cost": str(placement.cost),
            }
        )
    return rows


@contextlib.contextmanager
def _progress(total: int, quiet: bool) -> Iterator[Callable[[], None]]:
    """A progress bar on stderr of the tasks held out of the workflow's ``total`` that run."""
    with console.progress_bar(f"planning {total} tasks", enabled=not quiet) as update:
        held = 0

        def one_held() -> None:
            nonlocal held
            held += 1
            update(held / total)

        yield one_held
