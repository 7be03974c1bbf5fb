"""`python -m bench repro-singh [PART] [options]`: Singh's thesis (paper 002) reproduced.

PART is one of slots (ch. 3), fees (ch. 5), var (ch. 6), provision (ch. 4 and 7), or all
(the default). Each part replays the thesis' traces on the project's simulator and runs the
project's own code on them (slots, pricing, the client's planners, VAR), with paired seeds
and the thesis' loads calibrated; its report (one per part, as
bench/results/repro-singh-slots.md) puts every result of the thesis beside ours with a verdict. The
setup and every choice the thesis leaves open are in docs/reproductions-singh.md and in each
report's sections.
"""

from __future__ import annotations

import argparse
from typing import Callable, Dict, List, Tuple

from bench.repro.options import Options, add_options, options_from
from bench.repro.paper_values import paper_value, seed_ids
from bench.repro.report import Report
from bench.repro.singh import beyond, fees, provision, slots, var
from bench.repro.singh.sites import kept_runs_note

Part = Callable[[Report, Options, argparse.Namespace], None]

#: Each part, and the results of the thesis it measures.
PARTS: Dict[str, Tuple[Part, List[str]]] = {
    "slots": (slots.part, [f"002-{k}" for k in range(1, 7)]),
    "fees": (fees.part, [f"002-{k}" for k in range(13, 23)]),
    "var": (var.part, [f"002-{k}" for k in range(23, 28)]),
    "provision": (
        provision.part,
        [f"002-{k}" for k in (*range(7, 13), *range(28, 33))],
    ),
}
#: Beyond the thesis (the spec's part 5): measures none of its results; not part of "all".
EXTRA: Dict[str, Part] = {"beyond": beyond.part}
TITLES = {
    "all": "Singh's thesis (2008), reproduced",
    "slots": "Singh's thesis, ch. 3: advertised slots, reproduced",
    "fees": "Singh's thesis, ch. 5: adaptive (externality) pricing, reproduced",
    "var": "Singh's thesis, ch. 6: virtual against advance reservations, reproduced",
    "provision": "Singh's thesis, ch. 4 and 7: provisioning against best effort, reproduced",
    "beyond": "Singh's thesis: provisioning beyond the thesis' setup",
}


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench repro-singh",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "part",
        nargs="?",
        default="all",
        choices=[*PARTS, "all", *EXTRA],
        help="which chapter's experiments (default: all); beyond: what the thesis did not "
        "measure (stronger baselines, requested estimates, WfCommons workflows)",
    )
    parser.add_argument(
        "--reuse-runs",
        action="store_true",
        help="rebuild the report from the runs a previous run with the same configurations "
        "kept (bench/.work/repro-singh) instead of running them again",
    )
    provision.add_arguments(parser)
    add_options(parser)
    args = parser.parse_args(argv)
    options = options_from(args)
    parts = list(PARTS) if args.part == "all" else [args.part]
    name = "singh" if args.part == "all" else f"singh-{args.part}"
    report = Report(
        name, TITLES[args.part], options, seed="002", command=f"repro-singh {args.part}"
    )
    if args.part in EXTRA:
        EXTRA[args.part](report, options, args)
        report.section("Code that made the runs", kept_runs_note())
        return report.finish()
    for part in parts:
        PARTS[part][0](report, options, args)
    report.section("Code that made the runs", kept_runs_note())
    for other, (_, ids) in PARTS.items():
        if other not in parts:
            report.not_run(
                [i for i in ids if i in seed_ids("002")],
                f"measured by `python -m bench repro-singh {other}` "
                f"(bench/results/repro-singh-{other}.md)",
            )
    for row in report.rows:
        entry = paper_value(row.id)
        if row.point is None and not row.paper.startswith(entry.claim[:20]):
            row.paper = entry.claim  # a point-less row judges the claim, not one number of it
    return report.finish()
