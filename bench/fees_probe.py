"""Child process of ``python -m bench fees``: times fees, quotes and plans on a saved snapshot.

Run as a script from outside the tree, so that ``import siteagent`` finds whichever installed
copy the parent chose (this tree's or the reference's); it uses only the package's public
names that both have. One JSON object on stdout. Each timing is CPU time of this process
(``time.process_time``): the machine is shared, and wall time there measures the neighbours.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Dict, List

from slots_probe import load_snapshot  # the snapshot format of `python -m bench slots`

from siteagent.config.schema import PricingConfig
from siteagent.core.slots import advertise
from siteagent.market.site import pricing_of

try:  # the names since issue 28's moves; the reference (7fdf490) has the ones before them
    from siteagent.core.engines import Policy
    from siteagent.core.prediction import plan
    from siteagent.core.values import Request
except ImportError:
    from siteagent.core.model import Request
    from siteagent.core.scheduling import Policy, plan
from siteagent.pricing import ExternalityFee, FlatPrice, Pricing, Window

#: The bench's request: 64 cores for 4 hours, from now (as `bench slots` asks).
CORES, DURATION = 64, 4 * 3600


def quotes(args: argparse.Namespace) -> int:
    """A 20-offer quote with the default pricing, 100 priced alternatives, one EASY fee."""
    snapshot = load_snapshot(args.snapshot)
    request = Request(cores=CORES, duration=DURATION)
    times: Dict[str, List[float]] = {}
    fees: Dict[str, List[str]] = {}
    default = pricing_of(PricingConfig())
    hundred = Pricing(FlatPrice(), ExternalityFee(), Policy.CONSERVATIVE)
    for _ in range(args.repeats):
        # a fresh poll's context each time: nothing is remembered from the round before
        for name, pricing, limit in (("quote20", default, 20), ("alternatives100", hundred, 100)):
            context = pricing.context(snapshot)
            began = time.process_time()
            prices = pricing.alternatives(context, request, limit)
            times.setdefault(name, []).append(time.process_time() - began)
            fees[name] = [str(price.fee) for price in prices]
    if args.easy:
        easy = Pricing(FlatPrice(), ExternalityFee(), Policy.EASY)
        began = time.process_time()
        context = easy.context(snapshot)
        times["easy_context"] = [time.process_time() - began]
        start = context.hard.earliest_fit(CORES, DURATION, context.now + 60)
        assert start is not None
        window = Window(start, CORES, DURATION)
        for _ in range(args.easy):
            fresh = easy.context(snapshot, context.plan)  # a new context on the same plan
            began = time.process_time()
            fee = easy.fee.fee(fresh, window)
            times.setdefault("easy_fee", []).append(time.process_time() - began)
            fees["easy_fee"] = [str(fee)]
    sys.stdout.write(json.dumps({"times_s": times, "fees": fees}) + "\n")
    return 0


def plans(args: argparse.Namespace) -> int:
    """Plan + slots (conservative) on each snapshot."""
    out: Dict[str, Any] = {}
    for path in args.snapshots:
        snapshot = load_snapshot(path)
        rows = []
        for _ in range(args.repeats):
            began = time.process_time()
            made = plan(snapshot, Policy.CONSERVATIVE)
            planned = time.process_time()
            advertise(made)
            rows.append({"plan_s": planned - began, "advertise_s": time.process_time() - planned})
        out[path] = {
            "runs": rows,
            "pending": len(snapshot.pending),
            "running": len(snapshot.running),
            "capacity": snapshot.capacity,
        }
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    q = sub.add_parser("quotes")
    q.add_argument("--snapshot", required=True)
    q.add_argument("--repeats", type=int, default=3)
    q.add_argument("--easy", type=int, default=1, help="EASY fees to time (0: none)")
    p = sub.add_parser("plans")
    p.add_argument("--snapshots", nargs="+", required=True)
    p.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    return quotes(args) if args.command == "quotes" else plans(args)


if __name__ == "__main__":
    sys.exit(main())
