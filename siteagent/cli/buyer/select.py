"""``siteagent-client select``: place a bag of independent tasks on the sites that should
finish them soonest (Ha et al.'s resource selection), and with ``--reserve`` reserve them.

Every site is asked at once for ``GET /v1/info`` (its attributes and cores) and ``GET
/v1/history/waits`` (the bounds it publishes on its queue waits);
:func:`siteagent.client.resource_selection.select` then gives each task, largest first, to
the viable site with the least predicted time to completion (the wait bound of the task's bin plus
its run time there) that still has room: of its cores (the most of the bag it can run at once,
the default), or with ``--capacity free`` of the cores free now (``GET /v1/slots``: only what
starts at once; a busy site then takes nothing). A site that fails is a row of the table;
tasks no site has room for are listed, left for a later round.

``--reserve`` holds each assigned task at its site (quotes from now, the earliest window it
offers accepted: a tentative reservation) and once every one is held confirms them all, or
releases them all, through the same two-phase commit and journal as ``provision``: Ctrl-C,
``recover`` and ``reservations`` work as for a workflow.

Exits 0 when tasks were assigned (and, with ``--reserve``, every one confirmed); 3 when no
task can be assigned or a reservation cannot be had (everything is then released); 75 when
no site answered; 130 when interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from siteagent.cli import console
from siteagent.cli.buyer import common, holding
from siteagent.cli.buyer.common import interruptible
from siteagent.cli.console import EXIT_INTERRUPTED, EXIT_REFUSED, EXIT_UNAVAILABLE
from siteagent.cli.exits import BadInput
from siteagent.cli.options import local_time
from siteagent.client.commit import CommitOutcome
from siteagent.client.connection import SiteConnection
from siteagent.client.fanout import SiteResult, ask_all
from siteagent.client.journal import AuctionState
from siteagent.client.plans import Network
from siteagent.protocol.models import Info, SlotList, WaitHistory

if TYPE_CHECKING:
    from siteagent.client.greedy import SiteOffers
    from siteagent.client.plans import ProvisioningPlan
    from siteagent.client.resource_selection import Candidate, Selection
    from siteagent.client.tasks import Task

#: What selection needs of a site: its info, its waits, and (for the free cores) its slots.
Answers = Tuple[Info, WaitHistory, Optional[SlotList]]

#: What a site's room for the bag is: all its cores, or the cores free now.
CAPACITIES = ("cores", "free")

TASK_COLUMNS = ["task", "cores", "site", "wait_bound", "start_by", "done_by"]
RESERVED_COLUMNS = ["reservation", "start", "finish", "cost"]
#: How many of the tasks left for later the table names (--json lists them all).
UNASSIGNED_SHOWN = 20
SITE_COLUMNS = ["site", "status", "tasks", "cores_assigned", "capacity", "done_by", "reason"]


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    select = commands.add_parser(
        "select",
        help="place a bag of tasks on the sites that should finish them soonest; --reserve",
        description=(
            "Read BAG (a YAML tasks: list; each task has an id, cores, runtime or work, "
            "optional requirements, and count for many equal tasks), ask every site for its "
            "info and its published queue-wait bounds, and give each task, largest first, to "
            "the site it can run on with the least predicted time to completion (the bound on "
            "the wait of jobs like it, at --probability, plus its run time there) that still "
            "has room (--capacity). --reserve then reserves every task "
            "assigned at its site, from now, all or nothing (as provision does; see "
            "`recover`). Exits 0 when tasks were assigned (and reserved), 3 when none can be "
            "or a reservation is refused, 75 when no site answered, 130 when interrupted."
        ),
    )
    select.add_argument("bag", type=Path, metavar="BAG")
    select.add_argument(
        "--probability",
        type=float,
        default=0.5,
        metavar="Q",
        help="the waits are bounded at, in (0, 1) (0.5: the median)",
    )
    select.add_argument(
        "--capacity",
        choices=CAPACITIES,
        default="cores",
        help="a site's room for the bag: its cores (the default), or the cores its advertised "
        "slots leave free now",
    )
    select.add_argument(
        "--reserve",
        action="store_true",
        help="reserve every task assigned at its site, all or nothing",
    )
    common.add_price_caps(select)  # with --reserve
    common.add_sites_options(select)
    common.add_batches_option(select)
    common.add_journal_option(select)
    select.set_defaults(command=_select)


def _select(args: argparse.Namespace) -> int:
    try:
        from siteagent.client.bag import load_bag
        from siteagent.client.resource_selection import select, site_candidate
    except ModuleNotFoundError as exc:
        raise common.planners_missing("select", exc) from exc
    if not 0.0 < args.probability < 1.0:
        raise BadInput(f"--probability must be in (0, 1), got {args.probability:g}")
    if not args.reserve and (args.max_price is not None or args.budget is not None):
        raise BadInput("--max-price and --budget cap what --reserve buys: add --reserve")
    tasks = load_bag(args.bag)
    sites = common.registry(args).select(args.site)
    # Ctrl-C while reserving releases what is held; before, it stops at once
    ctrl_c = interruptible() if args.reserve else contextlib.nullcontext(lambda: False)
    with common.connected(sites, not args.no_batches) as connections, ctrl_c as interrupted:
        if args.reserve:
            for connection in connections:
                connection.signing_key()  # a missing or unsafe key: say so before asking
        with common.progress("asking", len(connections), args.json) as answered:
            results = ask_all(connections, _asker(args.capacity == "free"), answered)
        now = int(time.time())
        candidates = [site_candidate(r.site, *r.value) for r in results if r.value is not None]
        chosen = select(tasks, candidates, args.probability)
        if not candidates or not chosen.assigned or not args.reserve:
            return _report(args, tasks, chosen, candidates, results, now)
        reserved = _reserve(args, tasks, chosen, candidates, connections, now, interrupted)
    return _report(args, tasks, chosen, candidates, results, now, reserved)


def _reserve(
    args: argparse.Namespace,
    tasks: Sequence[Task],
    chosen: Selection,
    candidates: Sequence[Candidate],
    connections: Sequence[SiteConnection],
    now: int,
    interrupted: Callable[[], bool],
) -> Tuple[CommitOutcome, Optional[ProvisioningPlan]]:
    """Hold every task assigned at its site from ``now``, then confirm all or release all."""
    from siteagent.client import plan_reservation
    from siteagent.client.liveoffers import PINNED_OFFERS
    from siteagent.client.resource_selection import as_plan

    graph, plan = as_plan(chosen, tasks, now)
    attributes = [candidate.attributes for candidate in candidates]
    network = Network(common.DEFAULT_BANDWIDTH)  # independent tasks move nothing
    used = {estimate.site for estimate in chosen.assigned.values()}

    def plan_with(offers: SiteOffers) -> ProvisioningPlan:
        return plan_reservation.reserve(plan, graph, attributes, offers, network)

    return holding.reserve_plan(
        common.open_journal(args),
        _described(args, tasks),
        {c.site.name: c for c in connections if c.site.name in used},
        len(chosen.assigned),
        plan_with,
        interrupted,
        quiet=args.json,
        offers_per_quote=PINNED_OFFERS,
        max_price=args.max_price,
        budget=args.budget,
    )


def _asker(free: bool) -> Callable[[SiteConnection], Answers]:
    """What to ask each site: its slots too when its room is its free cores."""

    def ask(connection: SiteConnection) -> Answers:
        return connection.info(), connection.waits(), connection.slots() if free else None

    return ask


def _described(args: argparse.Namespace, tasks: Sequence[Task]) -> Dict[str, Any]:
    """What the journal keeps of the command: enough to say later what was asked."""
    return {
        "select": str(args.bag),
        "tasks": len(tasks),
        "probability": args.probability,
        "max_price": None if args.max_price is None else str(args.max_price),
        "budget": None if args.budget is None else str(args.budget),
    }


def _report(
    args: argparse.Namespace,
    tasks: Sequence[Task],
    chosen: Selection,
    candidates: Sequence[Candidate],
    results: Sequence[SiteResult[Answers]],
    now: int,
    reserved: Optional[Tuple[CommitOutcome, Optional[ProvisioningPlan]]] = None,
) -> int:
    rows = _task_rows(tasks, chosen, now)
    if reserved is not None:
        _add_reservations(rows, *reserved)
    site_rows = _site_rows(rows, candidates, results)
    code, message = _outcome(chosen, candidates, reserved)
    if args.json:
        document: Dict[str, Any] = {
            "now": now,
            "probability": args.probability,
            "tasks": rows,
            "unassigned": list(chosen.unassigned),
            "sites": site_rows,
            "message": message,
        }
        if reserved is not None:
            document["state"] = reserved[0].state.value
            document["entries"] = [entry.to_json() for entry in reserved[0].entries]
        console.print_json(document)
    else:
        _print(rows, site_rows, chosen, args.probability, reserved is not None)
    if reserved is not None:
        for entry in reserved[0].unsettled:
            console.error(
                f"{entry.site} may hold task {entry.part + 1} ({entry.state.value}: "
                f"{entry.message}); `siteagent-client recover` settles it once the site answers"
            )
    if code:
        console.error(f"select: {message}")
    elif not args.json:
        console.stdout.print(f"select: {message}")
    return code


def _outcome(
    chosen: Selection,
    candidates: Sequence[Candidate],
    reserved: Optional[Tuple[CommitOutcome, Optional[ProvisioningPlan]]],
) -> Tuple[int, str]:
    """The exit code and what to say of it."""
    if not candidates:
        return EXIT_UNAVAILABLE, "no site answered"
    if not chosen.assigned:
        return EXIT_REFUSED, "no task can be assigned: no site can run them or has room for them"
    unassigned = len(chosen.unassigned)
    left = f"; {unassigned} left for later (no site can run them or has room)" if unassigned else ""
    if reserved is None:
        return 0, f"{len(chosen.assigned)} task(s) assigned{left}"
    outcome = reserved[0]
    if outcome.state is AuctionState.DONE:
        return 0, f"{outcome.message}{left}"
    if outcome.state is AuctionState.INTERRUPTED:
        return EXIT_INTERRUPTED, outcome.message
    return EXIT_REFUSED, outcome.message


def _task_rows(tasks: Sequence[Task], chosen: Selection, now: int) -> List[Dict[str, Any]]:
    """Each assigned task (in the bag's order): its site, the bound on its wait there, the
    time it starts by and is done by if submitted now (None when the site bounds nothing)."""
    rows = []
    for task in tasks:
        estimate = chosen.assigned.get(task.id)
        if estimate is None:
            continue
        wait = estimate.wait_s
        rows.append(
            {
                "task": task.id,
                "cores": task.cores,
                "site": estimate.site,
                "wait_bound_s": wait,
                "run_s": estimate.run_s,
                "start_by": None if wait is None else now + wait,
                "done_by": None if wait is None else now + wait + round(estimate.run_s),
            }
        )
    return rows


def _add_reservations(
    rows: List[Dict[str, Any]], outcome: CommitOutcome, plan: Optional[ProvisioningPlan]
) -> None:
    """Each task's reservation, window and cost, once every one is confirmed."""
    if plan is None or outcome.state is not AuctionState.DONE:
        return
    held = {row["task"]: row for row in holding.plan_rows(plan, outcome)}
    for row in rows:
        reserved = held[row["task"]]
        row.update({column: reserved[column] for column in RESERVED_COLUMNS})


def _site_rows(
    rows: Sequence[Dict[str, Any]],
    candidates: Sequence[Candidate],
    results: Sequence[SiteResult[Answers]],
) -> List[Dict[str, Any]]:
    """Each site: what it was given (tasks, cores, the last predicted completion) of the
    cores it has free; or why it did not answer."""
    capacity = {candidate.name: candidate.capacity for candidate in candidates}
    totals = []
    for result in results:
        mine = [row for row in rows if row["site"] == result.site]
        done = [row["done_by"] for row in mine if row["done_by"] is not None]
        totals.append(
            {
                "site": result.site,
                "status": result.outcome.value,
                "reason": result.reason,
                "tasks": len(mine),
                "cores_assigned": sum(row["cores"] for row in mine),
                "capacity": capacity.get(result.site),
                "done_by": max(done, default=None),
            }
        )
    return totals


def _print(
    rows: List[Dict[str, Any]],
    site_rows: List[Dict[str, Any]],
    chosen: Selection,
    probability: float,
    reserved: bool,
) -> None:
    if rows:
        shown = [
            {
                **row,
                "wait_bound": "no bound"
                if row["wait_bound_s"] is None
                else console.format_duration(row["wait_bound_s"]),
                "start_by": local_time(row["start_by"]),
                "done_by": local_time(row["done_by"]),
                "start": local_time(row.get("start")),
                "finish": local_time(row.get("finish")),
            }
            for row in rows
        ]
        columns = TASK_COLUMNS + (RESERVED_COLUMNS if reserved else [])
        console.print_table(
            shown,
            columns,
            title=f"Assignment (waits bounded at probability {probability:g}; start and done "
            "by if submitted now)",
            headers={"wait_bound": "wait <=", "start_by": "starts by", "done_by": "done by"},
        )
    console.print_table(
        [{**row, "done_by": local_time(row["done_by"])} for row in site_rows],
        SITE_COLUMNS,
        title="Sites",
        headers={"cores_assigned": "cores", "capacity": "room", "done_by": "all done by"},
    )
    if chosen.unassigned:
        named = ", ".join(chosen.unassigned[:UNASSIGNED_SHOWN])
        more = len(chosen.unassigned) - UNASSIGNED_SHOWN
        console.stdout.print(
            f"Left for later (no site can run them or has room): {named}"
            + (f" and {more} more" if more > 0 else "")
        )
