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
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional

from siteagent.cli import console
from siteagent.cli.buyer import common, holding
from siteagent.cli.buyer.common import interruptible
from siteagent.cli.console import EXIT_INTERRUPTED, EXIT_REFUSED
from siteagent.cli.options import local_time
from siteagent.client.batches import max_parts
from siteagent.client.commit import CommitOutcome
from siteagent.client.connection import SiteConnection
from siteagent.client.journal import AuctionState
from siteagent.client.plans import Network, ProvisioningPlan
from siteagent.core import tradeoff
from siteagent.core.errors import SiteagentError

if TYPE_CHECKING:
    from siteagent.client.greedy import SiteOffers
    from siteagent.client.tasks import TaskGraph


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
    common.add_alpha_option(provision, "1 cheapest ... 0 fastest (0.5)")
    common.add_network_options(provision)
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
    common.add_price_caps(provision)
    common.add_sites_options(provision)
    common.add_batches_option(provision)
    common.add_journal_option(provision)
    provision.set_defaults(command=_provision)


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
    journal = common.open_journal(args)
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

        outcome, plan = holding.reserve_plan(
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
    rows = holding.plan_rows(plan, outcome) if plan is not None and done else []
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
