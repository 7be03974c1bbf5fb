"""``siteagent-client provision``: plan a workflow across the sites and reserve the plan.

The greedy planner (:mod:`siteagent.client.greedy`) takes the tasks in HEFT order, asks every
site for quotes from when the task's inputs can be there, and holds the best by the trade-off
``--alpha`` (a tentative reservation); once every task is held, every reservation is confirmed
through the auction's two-phase commit, or all are released. Every accept, confirm and cancel
is journaled before it is sent, so ``recover`` and ``reservations`` see a plan as an auction
whose parts are its tasks.

Exits 0 when every task is confirmed (or, with ``--dry-run``, planned); 3 when a task finds no
site and window, or a confirm is refused (everything is then released); 130 when interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from siteagent.cli import console
from siteagent.cli.buyer import common, reservations
from siteagent.cli.buyer.common import interruptible
from siteagent.cli.console import EXIT_INTERRUPTED, EXIT_REFUSED
from siteagent.cli.options import amount, local_time, price
from siteagent.client.batchcommit import BatchCommit
from siteagent.client.batches import max_parts
from siteagent.client.commit import CommitOutcome, Held
from siteagent.client.connection import SiteConnection
from siteagent.client.journal import AuctionState, Journal
from siteagent.client.plans import Network, PlanningError, ProvisioningPlan
from siteagent.client.recovery import Patient
from siteagent.core import tradeoff
from siteagent.core.errors import SiteagentError

if TYPE_CHECKING:
    from siteagent.client.greedy import SiteOffers
    from siteagent.client.tasks import TaskGraph

#: Bytes per second between sites when not told: the thesis' 10 Gbps (ch. 4.9).
DEFAULT_BANDWIDTH = 1.25e9

PLANNERS = ("greedy", "genetic")

COLUMNS = ["task", "site", "reservation", "start", "finish", "cost"]


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    provision = commands.add_parser(
        "provision",
        help="plan a workflow across sites and reserve every task (all or nothing)",
        description=(
            "Plan WORKFLOW (a YAML DAG or ensemble, or a WfFormat JSON instance) across the "
            "sites: tasks in HEFT order, each placed at the quote minimising alpha x cost + "
            "(1 - alpha) x finish among the sites' quotes from when its inputs can be there, "
            "and held there (a tentative reservation); then every task is confirmed, signed, "
            "or, if one cannot be, everything is released. --dry-run quotes and plans but "
            "holds nothing. Every step is journaled before it is sent (see `recover`). Exits 0 "
            "when every task is confirmed, 3 when a task finds no window or a confirm is "
            "refused, 130 when interrupted."
        ),
    )
    provision.add_argument("workflow", type=Path, metavar="WORKFLOW")
    provision.add_argument(
        "--alpha",
        type=float,
        default=0.5,
        metavar="A",
        help="1 cheapest ... 0 fastest (0.5)",
    )
    provision.add_argument(
        "--bandwidth",
        type=float,
        default=DEFAULT_BANDWIDTH,
        metavar="BYTES_PER_S",
        help=f"between sites, for a parent's output to reach a child ({DEFAULT_BANDWIDTH:g})",
    )
    provision.add_argument(
        "--latency", type=float, default=0.0, metavar="S", help="of a transfer between sites (0)"
    )
    provision.add_argument(
        "--planner",
        choices=PLANNERS,
        default="greedy",
        help="greedy: task by task over the sites' quotes (the default); genetic: NSGA-II "
        "over the slots the sites advertise, its plan then held task by task at the sites it "
        "names, as near its windows as they now offer",
    )
    provision.add_argument(
        "--seed", type=int, metavar="N", help="of the genetic planner's search (random)"
    )
    provision.add_argument(
        "--dry-run", action="store_true", help="quote and plan, hold and confirm nothing"
    )
    add_price_caps(provision)
    common.add_sites_options(provision)
    common.add_batches_option(provision)
    reservations.add_journal_option(provision)
    provision.set_defaults(command=_provision)


def add_price_caps(parser: argparse.ArgumentParser) -> None:
    """``--max-price`` and ``--budget``, as ``auction`` has them."""
    parser.add_argument(
        "--max-price",
        type=price,
        metavar="P",
        help="most per core-hour of any task's reservation (sites offer nothing dearer)",
    )
    parser.add_argument(
        "--budget",
        type=amount,
        metavar="AMOUNT",
        help="most the reservations may cost together: a window that would pass it is not "
        "held (the task takes another, or the whole is released)",
    )


def _provision(args: argparse.Namespace) -> int:
    try:
        from siteagent.client import greedy, plan_reservation
        from siteagent.client.livebatches import LiveBatchOffers
        from siteagent.client.liveoffers import PINNED_OFFERS
        from siteagent.client.tasks import task_of
        from siteagent.client.workflow import load_workflow

        if args.planner == "genetic":
            from siteagent.client import genetic
    except ModuleNotFoundError as exc:
        raise common.planners_missing("provision", exc) from exc
    graph = load_workflow(args.workflow)
    network = Network(args.bandwidth, args.latency)
    tradeoff.check_alpha(args.alpha)
    sites = common.registry(args).select(args.site)
    journal = reservations.open_journal(args)
    batches = not args.no_batches
    with common.connected(sites, batches) as connections, interruptible() as interrupted:
        by_name = {connection.site.name: connection for connection in connections}
        attributes = [
            connection.info().site.model_copy(update={"name": name})
            for name, connection in by_name.items()
        ]
        if not args.dry_run:
            for connection in connections:
                connection.signing_key()  # a missing or unsafe key: say so before holding
        slot_lists = (
            {name: connection.slots() for name, connection in by_name.items()}
            if args.planner == "genetic"
            else {}
        )
        tasks = max(1, sum(1 for node in graph if not task_of(graph, node).structural))
        batched = any(_takes_batches(connection) for connection in connections)

        def plan_with(offers: SiteOffers) -> ProvisioningPlan:
            now = int(time.time())
            if args.planner == "greedy" and isinstance(offers, LiveBatchOffers) and batched:
                return greedy.provision_in_batches(
                    graph, attributes, offers, network, args.alpha, now
                )
            if args.planner == "greedy":
                return greedy.provision(graph, attributes, offers, network, args.alpha, now)
            pareto = genetic.pareto_plans(
                graph, attributes, slot_lists, network, now, seed=args.seed
            )
            chosen = pareto.choose(args.alpha).plan
            return plan_reservation.reserve(chosen, graph, attributes, offers, network)

        outcome, plan = reserve_plan(
            journal,
            _described(args, graph),
            by_name,
            tasks,
            plan_with,
            interrupted,
            dry_run=args.dry_run,
            quiet=args.json,
            offers_per_quote=None if args.planner == "greedy" else PINNED_OFFERS,
            max_price=args.max_price,
            budget=args.budget,
        )
    return _report(args, outcome, plan)


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


def _takes_batches(connection: SiteConnection) -> bool:
    """Whether the site takes batches (docs/batches.md); one that does not answer is asked
    nothing in batches (the planner finds it silent soon enough)."""
    try:
        return max_parts(connection) > 0
    except SiteagentError:
        return False


def _described(args: argparse.Namespace, graph: TaskGraph) -> Dict[str, Any]:
    """What the journal keeps of the command: enough to say later what was asked."""
    return {
        "provision": str(args.workflow),
        "tasks": graph.number_of_nodes(),
        "alpha": args.alpha,
        "planner": args.planner,
        "bandwidth": args.bandwidth,
        "latency": args.latency,
        "dry_run": args.dry_run,
        "max_price": None if args.max_price is None else str(args.max_price),
        "budget": None if args.budget is None else str(args.budget),
    }


def _report(
    args: argparse.Namespace, outcome: CommitOutcome, plan: Optional[ProvisioningPlan]
) -> int:
    done = outcome.state is AuctionState.DONE or (args.dry_run and plan is not None)
    rows = plan_rows(plan, outcome) if plan is not None and done else []
    if args.json:
        console.print_json(
            {
                "state": "planned" if args.dry_run and done else outcome.state.value,
                "message": outcome.message,
                "tasks": rows,
                "cost": None if plan is None else str(plan.cost),
                "makespan": None if plan is None else plan.makespan,
                "entries": [entry.to_json() for entry in outcome.entries],
            }
        )
    elif rows and plan is not None:
        shown = [
            {**row, "start": local_time(row["start"]), "finish": local_time(row["finish"])}
            for row in rows
        ]
        console.print_table(shown, COLUMNS, title="Plan")
        console.print_pairs([("cost", plan.cost), ("makespan", f"{plan.makespan} s")])
    for entry in outcome.unsettled:
        console.error(
            f"{entry.site} may hold task {entry.part + 1} ({entry.state.value}: "
            f"{entry.message}); `siteagent-client recover` settles it once the site answers"
        )
    if done:
        if not args.json and not args.dry_run:
            console.stdout.print(f"provision: {outcome.message}")
        return 0
    console.error(f"provision: {outcome.message}")
    return EXIT_INTERRUPTED if outcome.state is AuctionState.INTERRUPTED else EXIT_REFUSED


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
