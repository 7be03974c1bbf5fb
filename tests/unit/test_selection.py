"""Resource selection for a bag of tasks (Ha et al.) and virtual advance reservations (thesis
ch. 6), from the wait bounds sites publish."""

from __future__ import annotations

from typing import Any, List, Optional

import pytest

from siteagent.client.resource_selection import Candidate, estimate, ranking, select
from siteagent.client.tasks import Requirements, Task
from siteagent.client.var import Submission, latest_submission
from testbed.inprocess.provisioning import attributes, wait_bin, wait_history

H = 3600


def candidate(name: str, mhz: int, wait_s: Optional[int], capacity: int, **more: Any) -> Candidate:
    """A site whose one bin (1-64 cores, any walltime) bounds the median wait at ``wait_s``."""
    history = wait_history(wait_bin([1, 64], [0, None], q50=wait_s))
    return Candidate(attributes(name, mhz, **more), 128, history, capacity)


def bag(count: int, cores: int = 4) -> List[Task]:
    return [Task(f"t{k}", cores, work_mcycles=3.6e6) for k in range(count)]


def test_time_to_completion_is_the_wait_bound_plus_the_run_time() -> None:
    """3.6e6 Mcycles: 1,000 s at 3.6 GHz behind a 600 s wait, 2,000 s at 1.8 GHz behind 60 s;
    the fast clock wins 1,600 s to 2,060 s."""
    fast, slow = candidate("fast", 3600, 600, 64), candidate("slow", 1800, 60, 64)
    task = bag(1)[0]
    assert [(e.site, e.wait_s, e.run_s) for e in ranking(task, [slow, fast], 0.5)] == [
        ("fast", 600, 1000.0),
        ("slow", 60, 2000.0),
    ]


def test_capacity_is_respected_where_the_papers_method_overloads_a_site() -> None:
    """Three 4-core tasks, one best site that can start 8 cores: the paper sends all three
    there (12 cores); selection sends two, and the third to the next best site."""
    best, other = candidate("best", 3600, 60, capacity=8), candidate("other", 1800, 60, 100)
    tasks = bag(3)
    papers = [ranking(t, [best, other], 0.5)[0].site for t in tasks]
    assert papers == ["best"] * 3  # 12 cores on a site that can start 8
    chosen = select(tasks, [best, other])
    assert sorted(e.site for e in chosen.assigned.values()) == ["best", "best", "other"]
    assert chosen.unassigned == ()
    full = select(bag(30), [best, other])
    used = {
        site: 4 * sum(e.site == site for e in full.assigned.values()) for site in ("best", "other")
    }
    assert used == {"best": 8, "other": 100} and len(full.unassigned) == 3


def test_viability_comes_first() -> None:
    """A task that needs aarch64 goes to the only aarch64 site, however slow; one larger than
    every machine goes nowhere."""
    arm = candidate("arm", 1000, 10_000, 64, architecture="aarch64")
    x86 = candidate("x86", 3600, 0, 64)
    task = Task("t", 4, work_mcycles=3.6e6, requirements=Requirements(architecture="aarch64"))
    assert [e.site for e in ranking(task, [x86, arm], 0.5)] == ["arm"]
    assert estimate(Task("huge", 512, runtime_s=60), x86, 0.5) is None
    assert select([Task("huge", 512, runtime_s=60)], [x86, arm]).unassigned == ("huge",)


def wait_of(task: Task, site: Candidate, probability: float) -> Optional[int]:
    found = estimate(task, site, probability)
    assert found is not None
    return found.wait_s


def test_a_bin_without_a_bound_takes_the_sites_largest_and_unknown_waits_rank_last() -> None:
    """Small jobs wait at most 30 s (median), 5-64-core ones 900 s; nothing is bounded at
    0.95. A 2-hour job has no bin: it is taken to wait the largest median bound, 900 s."""
    history = wait_history(
        wait_bin([1, 4], [0, H], q50=30), wait_bin([5, 64], [0, H], q50=900, q95=None)
    )
    some = Candidate(attributes("some", 3600), 128, history, 64)
    assert wait_of(Task("small", 2, runtime_s=600), some, 0.5) == 30
    assert wait_of(Task("big", 8, runtime_s=600), some, 0.5) == 900
    assert wait_of(Task("long", 2, runtime_s=2 * H), some, 0.5) == 900
    assert wait_of(Task("small", 2, runtime_s=600), some, 0.95) is None
    none = candidate("none", 3600, None, 64)
    quick = Task("t", 2, runtime_s=60)
    assert [e.site for e in ranking(quick, [none, some], 0.5)] == ["some", "none"]


# --------------------------------------------------------------------------- VAR

VAR_WAITS = wait_history(
    wait_bin([1, 4], [0, H], q50=600, q75=None, q95=1800),
    wait_bin([1, 4], [H, 4 * H], q50=2000, q95=5000),
    wait_bin([5, 64], [0, None], q50=10),
)
T = 1_795_000_000


@pytest.mark.parametrize(
    ("walltime", "probability", "expected"),
    [
        # 0.9: the 0.95 bound, 1,800 s; 1,800 + 1,800 = 3,600 s stays in the <= 1 h bin
        (1800, 0.9, Submission(T - 1800, 3600)),
        # 0.5: 600 s of lead, a 2,400 s job
        (1800, 0.5, Submission(T - 600, 2400)),
        # 3,500 s + 1,800 s of lead leaves the 1 h bin; in the next the bound is 5,000 s
        (3500, 0.95, Submission(T - 5000, 8500)),
        # 0.75 has no bound in the 1 h bin: the 0.95 one holds too
        (1800, 0.75, Submission(T - 1800, 3600)),
    ],
)
def test_the_latest_submission_by_hand(
    walltime: int, probability: float, expected: Submission
) -> None:
    assert latest_submission(VAR_WAITS, 2, walltime, T, probability, now=T - 6000) == expected


def test_no_submission_when_it_is_too_late_or_nothing_is_bounded() -> None:
    assert latest_submission(VAR_WAITS, 2, 1800, T, 0.9, now=T - 1000) is None  # needs 1,800 s
    assert latest_submission(VAR_WAITS, 2, 5 * H, T, 0.5, now=T - 10**6) is None  # no such bin
    assert latest_submission(wait_history(), 2, 60, T, 0.5, now=0) is None
    with pytest.raises(ValueError, match="probability"):
        latest_submission(VAR_WAITS, 2, 60, T, 1.0, now=0)
