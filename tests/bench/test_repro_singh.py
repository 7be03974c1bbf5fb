"""``python -m bench repro-singh PART --quick`` for each part of Singh's thesis, as a user runs
it: its report holds every result of paper 002, measures its own (the others point at the
part that does), draws its figures; and the pieces the parts rest on: reservations picked by
hashing the job (the same jobs at every α), the combined VAR/AR scheme's invariants."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict

import pytest

from bench.repro.paper_values import seed_ids
from bench.repro.singh import PARTS
from bench.repro.singh.fees import Reserver, _first
from bench.repro.singh.sites import DAY_S, NATIVE, SITES, fresh, tasks_of
from bench.repro.singh.var import PENALTY, combined
from siteagent.core.engines import Policy
from siteagent.pricing import ExternalityFee, FlatPrice, Pricing
from siteagent.sim.simulator import Simulator

#: What each part's --quick run leaves out of its own results (it runs one site, or one sweep).
QUICK_LEAVES_OUT = {
    "slots": {"002-3"},
    "fees": set(),
    "var": set(),
    "provision": {f"002-{k}" for k in (8, 9, 10, 11, 12, 29, 30, 31, 32)},
}


#: The report's shape, not its figures: 3 seeds show it (the CI budget). The whole run below
#: takes the same, so that it reads the parts' kept runs back.
SEEDS = ["--seeds", "3"]


@pytest.mark.parametrize("part", sorted(PARTS))
def test_a_quick_part_reports_every_result_and_measures_its_own(
    part: str, tmp_path: Path, quick_report: Callable[..., Dict[str, Any]]
) -> None:
    report = quick_report(["repro-singh", part, *SEEDS], tmp_path, f"repro-singh-{part}")
    assert report["problems"] == []
    rows = report["rows"]
    assert {row["id"] for row in rows} == set(seed_ids("002"))
    own = set(PARTS[part][1])
    for row in rows:
        if row["id"] in own and row["id"] not in QUICK_LEAVES_OUT[part]:
            assert row["verdict"] in ("match", "trend", "differs", "n/a"), row
        elif row["id"] not in own:  # points at the part that measures it, or cannot be measured
            assert row["verdict"] == "n/a" or (
                row["verdict"] == "not run" and "repro-singh" in row["why"]
            ), row
            assert row["why"], row
    assert report["figures"] and all((tmp_path / f).exists() for f in report["figures"])
    assert (tmp_path / f"repro-singh-{part}.md").read_text().count("| 002-") >= len(own)


def test_the_whole_quick_run_reports_every_result(
    tmp_path: Path, quick_run: Callable[..., None]
) -> None:
    """``repro-singh --quick`` (every part, one report), with the parts' ``SEEDS``: after
    them (pytest keeps a module's order, and one worker runs a module) it reads their kept
    runs back (bench/.work/repro-singh) and checks the report it assembles; alone, it runs
    them."""
    quick_run("repro-singh", tmp_path, SEEDS)


def test_reservations_are_the_same_jobs_at_every_alpha() -> None:
    """Two days of SDSC at α = 0 and α = 1: the jobs that become reservations are the same
    (drawn by hashing the job with the seed); another seed picks others."""

    def reserved(alpha: float, seed: int) -> set:  # type: ignore[type-arg]
        pricing = Pricing(FlatPrice(), ExternalityFee(), Policy.CONSERVATIVE)
        reserver = Reserver(pricing, alpha, 0.1, seed)
        picked = []

        def watch(task: object) -> bool:
            queued = reserver(task)  # type: ignore[arg-type]
            if not queued:
                picked.append(task.payload.job)  # type: ignore[attr-defined]
            return queued

        tasks = fresh(tasks_of("SDSC", NATIVE, True))
        sim = Simulator(
            _first(tasks, 2 * DAY_S),
            SITES["SDSC"].units,
            Policy.CONSERVATIVE,
            start_time=0,
            on_arrival=watch,
        )
        reserver.simulator = sim
        sim.run()
        assert reserver.conflicts == 0
        return set(picked)

    zero = reserved(0.0, 3)
    assert len(zero) > 10
    assert zero == reserved(1.0, 3)
    assert zero != reserved(0.0, 4)


@pytest.mark.parametrize(
    ("fee", "var_start", "expected"),
    [
        (None, None, (False, None)),  # both fail
        (None, 0, (True, 2.0)),  # AR refused: VAR's idle 2 h over 1 h
        (0.0, 0, (True, 0.0)),  # a free reservation needs no VAR
        (40.0, None, (True, 40.0 / 32)),  # VAR late: the reservation
        (40.0, 7000, (True, (32 * 200 / 3600 + PENALTY * 40.0) / 32)),  # VAR cheaper + penalty
        (1.0, 0, (True, 1.0 / 32)),  # VAR dearer than the fee: keep the reservation
    ],
)
def test_the_combined_scheme_never_costs_more_than_the_reservation(
    fee: object,
    var_start: object,
    expected: tuple,  # type: ignore[type-arg]
) -> None:
    """Figure 45 for 32 nodes, 1 h, start by 7,200 s (2 h from the VAR's submission at 0)."""
    success, cost = combined(fee, var_start, 7200, 32, 3600)  # type: ignore[arg-type]
    assert (success, cost if cost is None else pytest.approx(cost)) == (
        expected[0],
        None if expected[1] is None else pytest.approx(expected[1]),
    )
    if fee is not None and cost is not None:
        assert cost <= fee / 32 + 1e-12


def test_a_differing_change_says_on_which_side_of_0_its_interval_lies() -> None:
    """A change against the thesis' direction is no "does not exclude 0" (a var row once
    said so of an interval wholly below 0)."""
    from bench.repro.singh.sites import interval_why
    from bench.repro.stats import paired_change

    assert interval_why(paired_change([0, 0, 0], [1, -1, 0.5])) == (
        "the paired change does not exclude 0"
    )
    below = paired_change([1.0, 1.0, 1.0, 1.0], [0.5, 0.4, 0.6, 0.5])
    assert below.high < 0 and interval_why(below).endswith("goes the other way")
    assert below.text(3) in interval_why(below)
