"""contrib/slurm/job_submit.lua, call by call, in Lua 5.1 against a stand-in of what the
job_submit/lua plugin gives it (testbed/standins/slurm_lua.py): jobs going into the agent's
reservations are clamped to the window and tagged, every other job is left alone, and no error
in the script ever rejects a job or changes it. The real slurmctld runs the same script in
tests/integration/test_slurm_notices.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

import pytest

from testbed.processes.programs import require_programs
from testbed.standins.slurm_lua import INFINITE, NO_VAL, Outcome, run_job_submit

SCRIPT = Path(__file__).resolve().parents[2] / "contrib" / "slurm" / "job_submit.lua"
START = 1_800_000_000
#: The agent's reservation (30 minutes from START) and somebody else's.
RESERVATIONS = {
    "sa-0123456789ab": {"start_time": START, "end_time": START + 1800},
    "maintenance": {"start_time": START, "end_time": START + 1800},
}
TAG = "siteagent:reservation=sa-0123456789ab"


@pytest.fixture(scope="module", autouse=True)
def lua() -> None:
    require_programs("lua5.1")


def submit(
    job: Dict[str, Any],
    now: int = START - 600,
    reservations: Optional[Dict[str, Any]] = RESERVATIONS,
    record: Optional[Dict[str, Any]] = None,
) -> Outcome:
    return run_job_submit(SCRIPT, job, reservations, now, record)


@pytest.mark.parametrize("limit", [120, NO_VAL, INFINITE, 31])
def test_a_longer_limit_is_clamped_to_the_window(limit: int) -> None:
    done = submit({"reservation": "sa-0123456789ab", "time_limit": limit})
    assert done.job["time_limit"] == 30
    assert done.job["admin_comment"] == TAG
    assert (done.rc, done.errors) == (0, [])


def test_once_started_the_time_left_counts_rounded_down() -> None:
    done = submit({"reservation": "sa-0123456789ab", "time_limit": 120}, now=START + 630)
    assert done.job["time_limit"] == 19
    late = submit({"reservation": "sa-0123456789ab", "time_limit": 120}, now=START + 1790)
    assert late.job["time_limit"] == 1  # never 0, which Slurm reads as "no limit"


def test_a_shorter_limit_stays_and_the_job_is_tagged() -> None:
    done = submit({"reservation": "sa-0123456789ab", "time_limit": 10, "admin_comment": "ops"})
    assert done.job == {
        "time_limit": 10,
        "admin_comment": f"ops {TAG}",
        "reservation": "sa-0123456789ab",
    }


@pytest.mark.parametrize(
    "job",
    [
        {"time_limit": 120},
        {"reservation": "maintenance", "time_limit": 120},
        {"reservation": "sa-0123456789ab,maintenance", "time_limit": 120},
        {"reservation": "sa-gone", "time_limit": 120},  # Slurm refuses it itself
    ],
)
def test_other_jobs_are_left_alone(job: Dict[str, Any]) -> None:
    done = submit(job)
    assert done.job == {"admin_comment": None, "reservation": job.get("reservation"), **job}
    assert (done.rc, done.errors) == (0, [])


@pytest.mark.parametrize(
    "reservations",
    [
        None,  # no slurm.reservations at all
        {"sa-0123456789ab": {"start_time": START}},  # no end_time
        {"sa-0123456789ab": "not a record"},
    ],
)
def test_an_error_leaves_the_job_as_submitted_and_is_logged(
    reservations: Optional[Dict[str, Any]],
) -> None:
    done = submit({"reservation": "sa-0123456789ab", "time_limit": 120}, reservations=reservations)
    assert done.rc == 0
    assert (done.job["time_limit"], done.job["admin_comment"]) == (120, None)
    [error] = done.errors
    assert error.startswith("siteagent job_submit:") and "left as submitted" in error


def test_a_job_moved_into_the_reservation_is_clamped_from_its_current_limit() -> None:
    record = {"time_limit": 120, "admin_comment": "ops"}
    done = submit({"reservation": "sa-0123456789ab", "time_limit": NO_VAL}, record=record)
    assert (done.job["time_limit"], done.job["admin_comment"]) == (30, f"ops {TAG}")
    kept = submit(
        {"reservation": "sa-0123456789ab", "time_limit": NO_VAL}, record={"time_limit": 5}
    )
    assert kept.job["time_limit"] == NO_VAL  # 5 minutes fit: the limit is not touched


def test_a_modify_that_names_no_reservation_changes_nothing() -> None:
    done = submit({"time_limit": 600}, record={"time_limit": 120})
    assert (done.job["time_limit"], done.job["admin_comment"], done.errors) == (600, None, [])


def test_the_tag_is_added_once() -> None:
    done = submit({"reservation": "sa-0123456789ab", "time_limit": 10, "admin_comment": TAG})
    assert done.job["admin_comment"] == TAG


OTHER = "siteagent:reservation=sa-ffffffffffff"
#: Two reservations of the agent's, and somebody else's.
MOVES = {
    **RESERVATIONS,
    "sa-ffffffffffff": {"start_time": START, "end_time": START + 3600},
}


def test_a_job_moved_between_the_agents_reservations_carries_only_the_new_tag() -> None:
    record = {"time_limit": 120, "admin_comment": f"ops {OTHER}"}
    done = submit(
        {"reservation": "sa-0123456789ab", "time_limit": NO_VAL}, reservations=MOVES, record=record
    )
    assert (done.job["time_limit"], done.job["admin_comment"]) == (30, f"ops {TAG}")


@pytest.mark.parametrize("elsewhere", ["maintenance", ""])
def test_a_job_moved_out_of_the_agents_reservations_loses_its_tag(elsewhere: str) -> None:
    record = {"time_limit": 120, "admin_comment": f"ops {TAG}"}
    done = submit(
        {"reservation": elsewhere, "time_limit": NO_VAL}, reservations=MOVES, record=record
    )
    assert (done.job["time_limit"], done.job["admin_comment"]) == (NO_VAL, "ops")
    assert done.errors == []


@pytest.mark.parametrize(
    "named", ["sa-0123456789ab,sa-0123456789ab", "sa-0123456789ab, sa-0123456789ab"]
)
def test_a_reservation_named_twice_is_that_reservation(named: str) -> None:
    done = submit({"reservation": named, "time_limit": 120})
    assert (done.job["time_limit"], done.job["admin_comment"]) == (30, TAG)
