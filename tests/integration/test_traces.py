"""Every real trace under traces/ replays end to end under EASY and conservative backfilling.

Each record is either simulated or skipped with a counted reason, so simulated + skipped must
equal the number of jobs the archive's manifest lists. The two smallest traces always run;
the rest with --slow (they take from seconds to a few minutes each).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from siteagent.core.engines import Policy
from siteagent.sim import replay_trace

TRACES = Path(__file__).resolve().parent.parent.parent / "traces"

#: Jobs per file, from traces/MANIFEST.md (data lines counted there).
JOBS = {
    "NASA-iPSC-1993-3.1-cln.swf.gz": 18_239,
    "KTH-SP2-1996-2.1-cln.swf.gz": 28_476,
    "LLNL-Atlas-2006-2.1-cln.swf.gz": 43_778,
    "SDSC-SP2-1998-4.2-cln.swf.gz": 59_715,
    "CTC-SP2-1996-3.1-cln.swf.gz": 77_222,
    "LLNL-Thunder-2007-1.1-cln.swf.gz": 121_039,
    "LANL-CM5-1994-4.1-cln.swf.gz": 122_060,
    "HPC2N-2002-2.2-cln.swf.gz": 202_871,
    "SDSC-BLUE-2000-4.2-cln.swf.gz": 243_306,
    "CEA-Curie-2011-2.1-cln.swf.gz": 312_826,
    "RICC-2010-2.swf.gz": 447_794,
}
QUICK = {"NASA-iPSC-1993-3.1-cln.swf.gz", "KTH-SP2-1996-2.1-cln.swf.gz"}


def cases() -> list:  # type: ignore[type-arg]
    params = []
    for name in JOBS:
        marks = () if name in QUICK else (pytest.mark.slow,)
        for policy in (Policy.EASY, Policy.CONSERVATIVE):
            params.append(pytest.param(name, policy, marks=marks, id=f"{name}-{policy.value}"))
    return params


def test_manifest_lists_every_trace() -> None:
    assert sorted(JOBS) == sorted(p.name for p in TRACES.glob("*.swf.gz"))


@pytest.mark.parametrize(("name", "policy"), cases())
def test_trace_replays_end_to_end(name: str, policy: Policy) -> None:
    summary = replay_trace(str(TRACES / name), policy, skip_invalid=True)
    assert summary.jobs + summary.skipped == JOBS[name]
    assert summary.skipped == sum(summary.skipped_by_reason.values())
    assert summary.jobs > 0.8 * JOBS[name]
    assert 0 < summary.utilization <= 1
    assert summary.mean_wait_s >= 0 and math.isfinite(summary.mean_wait_s)
    assert summary.mean_bounded_slowdown >= 1
