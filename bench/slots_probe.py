"""Child process of ``python -m bench slots``: builds the busy snapshot, or times slots and quotes.

Run as a script (``python bench/slots_probe.py ...``) from outside the tree, so that
``import siteagent`` finds whichever copy the parent chose: the installed, compiled one or the
pure sources. It imports nothing from ``bench``. Every algorithm is the package's own: the
simulator replays the trace, ``plan``/``advertise`` make the slots, ``Pricing.alternatives``
prices the starts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Dict, List

from siteagent.core.slots import advertise

try:  # the names since issue 28's moves; the reference (7fdf490) has the ones before them
    from siteagent.core.engines import Policy
    from siteagent.core.prediction import plan
    from siteagent.core.values import ClusterSnapshot, Job, Request
except ImportError:
    from siteagent.core.model import ClusterSnapshot, Job, Request
    from siteagent.core.scheduling import Policy, plan
from siteagent.pricing import ExternalityFee, FlatPrice, Pricing
from siteagent.sim import LoadScaling, Simulator, Workload
from siteagent.sim.snapshot import snapshot_of


def build(args: argparse.Namespace) -> int:
    """Replay the trace on ``cores`` cores, arrivals compressed, until the queue is long enough.

    The trace's machine is scaled up by speeding its arrivals up: ``cores / trace cores`` times
    as many jobs per second, further divided by ``overload`` so that the queue grows. The
    snapshot is taken at the first instant with at least ``pending`` jobs waiting.
    """
    probe = Workload(args.trace, skip_invalid=True)
    trace_cores = probe.cores
    probe.close()
    factor = trace_cores / args.cores / args.overload
    workload = Workload(
        args.trace,
        cores=args.cores,
        skip_invalid=True,
        scaling=LoadScaling(interarrival_factor=factor),
    )
    simulator = Simulator(workload.tasks(), args.cores, Policy.EASY)
    began = time.perf_counter()
    while True:
        t = simulator.next_event_time()
        if t is None:
            raise SystemExit("the trace ended before the queue reached the asked length")
        simulator.advance_to(t)
        if len(simulator.queued) >= args.pending:
            break
    snapshot = snapshot_of(simulator)
    workload.close()
    saved = {
        "trace": args.trace,
        "trace_cores": trace_cores,
        "interarrival_factor": factor,
        "now": snapshot.now,
        "capacity": snapshot.capacity,
        "running": [[*_row(job), job.start] for job in snapshot.running],
        "pending": [_row(job) for job in snapshot.pending],
        "replay_s": time.perf_counter() - began,
    }
    with open(args.out, "w") as handle:
        json.dump(saved, handle)
    print(json.dumps({k: v for k, v in saved.items() if k not in ("running", "pending")}))
    return 0


def _row(job: Job) -> List[Any]:
    """A job as the snapshot file stores it: id, cores, submit, limit (then start, if running)."""
    return [job.id, job.cores, job.submit, job.limit]


def load_snapshot(path: str) -> ClusterSnapshot:
    """The snapshot :func:`build` saved, read back."""
    with open(path) as handle:
        data = json.load(handle)
    running = tuple(
        Job(id=key, cores=size, submit=submit, limit=limit, start=start)
        for key, size, submit, limit, start in data["running"]
    )
    pending = tuple(
        Job(id=key, cores=size, submit=submit, limit=limit)
        for key, size, submit, limit in data["pending"]
    )
    return ClusterSnapshot(
        now=data["now"], capacity=data["capacity"], running=running, pending=pending
    )


def measure(args: argparse.Namespace) -> int:
    """Time each operation ``repeats`` times on the snapshot; one JSON object on stdout."""
    snapshot = load_snapshot(args.snapshot)
    request = Request(cores=args.cores, duration=args.duration)
    times: Dict[str, List[float]] = {"plan": [], "advertise": [], "slots": []}
    counts: Dict[str, Any] = {}
    for _ in range(args.repeats):
        began = time.perf_counter()
        base = plan(snapshot, Policy.CONSERVATIVE)
        planned = time.perf_counter()
        slots = advertise(base)
        done = time.perf_counter()
        times["plan"].append(planned - began)
        times["advertise"].append(done - planned)
        times["slots"].append(done - began)
        counts["slots"] = len(slots)
    for policy in args.policies:
        pricing = Pricing(FlatPrice(), ExternalityFee(), Policy(policy))
        key = f"alternatives_{policy}"
        times[key], times[f"context_{policy}"] = [], []
        for _ in range(args.quote_repeats):
            began = time.perf_counter()
            context = pricing.context(snapshot)
            ready = time.perf_counter()
            priced = pricing.alternatives(context, request, limit=args.limit)
            done = time.perf_counter()
            times[f"context_{policy}"].append(ready - began)
            times[key].append(done - ready)
        counts[key] = len(priced)
        fee_policy = pricing.fee
        assert isinstance(fee_policy, ExternalityFee)
        counts[f"delayed_jobs_first_{policy}"] = len(fee_policy.delays(context, priced[0].window))
        fees = [float(price.fee) for price in priced]
        counts[f"fees_{policy}"] = {
            "nonzero": sum(1 for fee in fees if fee > 0),
            "max": max(fees),
            "mean": sum(fees) / len(fees),
        }
        counts[f"fee_list_{policy}"] = [str(price.fee) for price in priced]
    import siteagent.core.engines as scheduling

    out = {
        "times_s": times,
        "counts": counts,
        "compiled": not scheduling.__file__.endswith(".py"),
        "running": len(snapshot.running),
        "pending": len(snapshot.pending),
    }
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("--trace", required=True)
    b.add_argument("--cores", type=int, default=10_000)
    b.add_argument("--pending", type=int, default=10_000)
    b.add_argument("--overload", type=float, default=1.3)
    b.add_argument("--out", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--snapshot", required=True)
    m.add_argument("--repeats", type=int, default=5)
    m.add_argument("--quote-repeats", type=int, default=3)
    m.add_argument("--policies", nargs="+", default=["conservative", "easy"])
    m.add_argument("--cores", type=int, default=64)
    m.add_argument("--duration", type=int, default=4 * 3600)
    m.add_argument("--limit", type=int, default=100)
    args = parser.parse_args()
    return build(args) if args.command == "build" else measure(args)


if __name__ == "__main__":
    sys.exit(main())
