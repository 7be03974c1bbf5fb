"""contrib/pbs/siteagent_hook.py, event by event, against a stand-in of PBS's ``pbs`` hook
module written from the documented hook API (testbed/standins/pbshook): reservation events reach
the agent's socket, the prefix is the agent's alone, jobs submitted into its reservations are
clamped and tagged, and no malformed event, unreadable configuration or silent agent ever makes
the hook reject anything that is not the agent's or stop without deciding."""

from __future__ import annotations

import importlib
import json
import runpy
import socket
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from siteagent.host.notices import Notice, NoticeListener

REPO = Path(__file__).resolve().parents[2]
HOOK = REPO / "contrib" / "pbs" / "siteagent_hook.py"
STANDIN = REPO / "testbed" / "standins" / "pbshook"
NAME = "sa-0123456789ab"

#: The stand-in module, whose globals the tests set (EVENT, RESERVATIONS, hook_config_filename).
Pbs = Any


@pytest.fixture
def pbs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Pbs]:
    """The stand-in ``pbs`` module, fresh for each test."""
    monkeypatch.syspath_prepend(str(STANDIN))
    monkeypatch.delitem(sys.modules, "pbs", raising=False)
    standin = importlib.import_module("pbs")
    standin.reset()
    yield standin
    sys.modules.pop("pbs", None)


class Heard:
    def __init__(self) -> None:
        self.notices: List[Notice] = []
        self.answer: Dict[str, Any] = {"ok": True, "state": "ACTIVE"}

    def __call__(self, notice: Notice) -> Dict[str, Any]:
        self.notices.append(notice)
        return self.answer


@pytest.fixture
def heard() -> Heard:
    return Heard()


@pytest.fixture
def agent(tmp_path: Path, heard: Heard) -> Iterator[NoticeListener]:
    listening = NoticeListener(tmp_path / "notify.sock", frozenset(), heard)
    listening.start()
    try:
        yield listening
    finally:
        listening.close()


def configure(pbs: Pbs, tmp_path: Path, socket_path: Path, **given: str) -> None:
    """The hook's imported configuration file, as install-service writes it."""
    path = tmp_path / "siteagent_hook.json"
    config = {"socket": str(socket_path), "prefix": "sa-", "agent_user": "siteagent", **given}
    path.write_text(json.dumps(config))
    pbs.hook_config_filename = str(path)


def run(pbs: Pbs, event: Any) -> Tuple[str, Optional[str]]:
    """Run the hook for ``event``: it must end by accepting or rejecting it."""
    pbs.EVENT = event
    with pytest.raises(SystemExit):
        runpy.run_path(str(HOOK))
    assert pbs.DECISION is not None, "the hook ended without deciding"
    decision: Tuple[str, Optional[str]] = pbs.DECISION
    return decision


def warnings(pbs: Pbs) -> List[str]:
    return [message for level, message in pbs.LOG if level == pbs.LOG_WARNING]


def our_reservation(pbs: Pbs, start: Optional[int] = None, end: Optional[int] = None) -> Any:
    """The agent's reservation, by default from 10 minutes after this call for an hour (counted
    from the call, not the import: the suite may reach this test long after it started)."""
    now = int(time.time())
    start = now + 600 if start is None else start
    end = now + 4200 if end is None else end
    return pbs.resv(
        resvid="R12.server",
        Reserve_Name=NAME,
        queue="R12",
        reserve_start=start,
        reserve_end=end,
        reserve_duration=end - start,
    )


# --------------------------------------------------------------------------- resv_begin, resv_end


@pytest.mark.parametrize(("kind", "event"), [("RESV_BEGIN", "begin"), ("RESV_END", "end")])
def test_the_agent_hears_of_its_reservation_at_once(
    pbs: Pbs, tmp_path: Path, agent: NoticeListener, heard: Heard, kind: str, event: str
) -> None:
    configure(pbs, tmp_path, agent.path)
    decision = run(pbs, pbs.event_type(getattr(pbs, kind), resv=our_reservation(pbs)))
    assert decision == ("accept", None)
    assert heard.notices == [Notice(event, NAME, 0)]
    assert warnings(pbs) == []


def test_other_reservations_are_not_reported(
    pbs: Pbs, tmp_path: Path, agent: NoticeListener, heard: Heard
) -> None:
    configure(pbs, tmp_path, agent.path)
    maintenance = pbs.resv(Reserve_Name="maintenance", queue="R3")
    assert run(pbs, pbs.event_type(pbs.RESV_BEGIN, resv=maintenance)) == ("accept", None)
    assert heard.notices == []


def test_an_absent_agent_is_logged_and_the_event_accepted(pbs: Pbs, tmp_path: Path) -> None:
    configure(pbs, tmp_path, tmp_path / "nobody.sock")
    assert run(pbs, pbs.event_type(pbs.RESV_END, resv=our_reservation(pbs))) == ("accept", None)
    [warning] = warnings(pbs)
    assert f"reservation {NAME}: the agent was not told" in warning


def test_a_hung_agent_is_given_up_on(pbs: Pbs, tmp_path: Path) -> None:
    path = tmp_path / "hung.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as hung:
        hung.bind(str(path))
        hung.listen(4)
        configure(pbs, tmp_path, path)
        decision = run(pbs, pbs.event_type(pbs.RESV_BEGIN, resv=our_reservation(pbs)))
    assert decision == ("accept", None)
    assert "timed out" in warnings(pbs)[0]


def test_a_refusal_by_the_agent_is_logged(
    pbs: Pbs, tmp_path: Path, agent: NoticeListener, heard: Heard
) -> None:
    heard.answer = {"ok": False, "error": "starts later"}
    configure(pbs, tmp_path, agent.path)
    assert run(pbs, pbs.event_type(pbs.RESV_BEGIN, resv=our_reservation(pbs)))[0] == "accept"
    assert "the agent answered" in warnings(pbs)[0] and "starts later" in warnings(pbs)[0]


# --------------------------------------------------------------------------- resvsub


@pytest.mark.parametrize(
    ("name", "requestor", "decision"),
    [
        (NAME, "siteagent", "accept"),
        (NAME, "siteagent@login1.example.org", "accept"),
        (NAME, "mallory", "reject"),
        ("maintenance", "mallory", "accept"),
        (None, "mallory", "accept"),
    ],
)
def test_the_prefix_is_the_agents_alone(
    pbs: Pbs, tmp_path: Path, name: Optional[str], requestor: str, decision: str
) -> None:
    configure(pbs, tmp_path, tmp_path / "unused.sock")
    submitted = pbs.resv(Reserve_Name=name)
    found = run(pbs, pbs.event_type(pbs.RESVSUB, requestor=requestor, resv=submitted))
    assert found[0] == decision
    if decision == "reject":
        assert (
            found[1]
            == "reservation names starting with 'sa-' are the site agent's (siteagent's) alone"
        )


@pytest.mark.parametrize(
    ("requestor", "host", "decision"),
    [
        ("siteagent@login1.example.org", None, "accept"),
        ("siteagent@login1", None, "accept"),
        ("siteagent", "login1.example.org", "accept"),
        ("siteagent@evil.example.org", None, "reject"),
        ("siteagent@evil", None, "reject"),
        ("siteagent", "evil.example.org", "reject"),
    ],
)
def test_the_prefix_is_the_agents_from_its_own_host(
    pbs: Pbs, tmp_path: Path, requestor: str, host: Optional[str], decision: str
) -> None:
    """A pbs_rsub by the service user's name from another host is not the agent's."""
    configure(pbs, tmp_path, tmp_path / "unused.sock", agent_host="login1.example.org")
    event = pbs.event_type(
        pbs.RESVSUB, requestor=requestor, resv=our_reservation(pbs), requestor_host=host
    )
    found = run(pbs, event)
    assert found[0] == decision
    if decision == "reject":
        assert found[1] == (
            "reservation names starting with 'sa-' are the site agent's "
            "(siteagent's on login1.example.org) alone"
        )


# --------------------------------------------------------------------------- queuejob


def submitted(pbs: Pbs, queue: Optional[str], walltime: Any = "10:00:00") -> Any:
    resources = {} if walltime is None else {"walltime": pbs.duration(walltime)}
    return pbs.job(
        queue=None if queue is None else pbs.queue(queue),
        Resource_List=resources,
        Variable_List={"PBS_O_HOME": "/home/alice"},
    )


@pytest.mark.parametrize("walltime", ["10:00:00", None])
def test_a_job_in_the_agents_reservation_is_clamped_and_tagged(
    pbs: Pbs, tmp_path: Path, walltime: Optional[str]
) -> None:
    configure(pbs, tmp_path, tmp_path / "unused.sock")
    pbs.RESERVATIONS.append(our_reservation(pbs))
    job = submitted(pbs, "R12", walltime)
    assert run(pbs, pbs.event_type(pbs.QUEUEJOB, job=job)) == ("accept", None)
    assert job.Resource_List["walltime"] == 3600
    assert str(job.Resource_List["walltime"]) == "01:00:00"
    assert job.Variable_List == {"PBS_O_HOME": "/home/alice", "SITEAGENT_RESERVATION": NAME}


def test_once_started_what_is_left_counts(pbs: Pbs, tmp_path: Path) -> None:
    configure(pbs, tmp_path, tmp_path / "unused.sock")
    now = int(time.time())
    pbs.RESERVATIONS.append(our_reservation(pbs, start=now - 3000, end=now + 600))
    job = submitted(pbs, "R12")
    run(pbs, pbs.event_type(pbs.QUEUEJOB, job=job))
    assert now + 600 - int(time.time()) <= job.Resource_List["walltime"] <= 600
    short = submitted(pbs, "R12", "00:05:00")
    pbs.reset()
    configure(pbs, tmp_path, tmp_path / "unused.sock")
    pbs.RESERVATIONS.append(our_reservation(pbs))
    run(pbs, pbs.event_type(pbs.QUEUEJOB, job=short))
    assert short.Resource_List["walltime"] == 300  # fits: kept
    assert short.Variable_List["SITEAGENT_RESERVATION"] == NAME


@pytest.mark.parametrize("queue", [None, "workq", "R3"])
def test_other_jobs_are_left_as_submitted(pbs: Pbs, tmp_path: Path, queue: Optional[str]) -> None:
    configure(pbs, tmp_path, tmp_path / "unused.sock")
    maintenance = pbs.resv(Reserve_Name="maintenance", queue="R3", reserve_end=int(time.time()))
    pbs.RESERVATIONS.extend([our_reservation(pbs), maintenance])
    job = submitted(pbs, queue)
    assert run(pbs, pbs.event_type(pbs.QUEUEJOB, job=job)) == ("accept", None)
    assert (job.Resource_List["walltime"], job.Variable_List) == (
        36000,
        {"PBS_O_HOME": "/home/alice"},
    )


@pytest.mark.parametrize("queue", [None, "workq", "R3"])
def test_a_tag_its_owner_set_is_taken_off_a_job_outside_the_agents_reservations(
    pbs: Pbs, tmp_path: Path, queue: Optional[str]
) -> None:
    """qsub -v SITEAGENT_RESERVATION=sa-... must not count a job's usage in the sale."""
    configure(pbs, tmp_path, tmp_path / "unused.sock")
    pbs.RESERVATIONS.append(our_reservation(pbs))
    job = submitted(pbs, queue)
    job.Variable_List["SITEAGENT_RESERVATION"] = NAME
    assert run(pbs, pbs.event_type(pbs.QUEUEJOB, job=job)) == ("accept", None)
    assert job.Variable_List == {"PBS_O_HOME": "/home/alice"}
    assert job.Resource_List["walltime"] == 36000


# --------------------------------------------------------------------------- malformed events


@pytest.mark.parametrize(
    ("reservation", "job"),
    [
        ({"reserve_end": None}, {}),
        ({"reserve_start": "tomorrow"}, {}),
        ({}, {"walltime": "a while"}),
        ({}, {"variables": None}),
    ],
)
def test_a_malformed_job_event_leaves_the_job_as_submitted(
    pbs: Pbs, tmp_path: Path, reservation: Dict[str, Any], job: Dict[str, Any]
) -> None:
    configure(pbs, tmp_path, tmp_path / "unused.sock")
    resv = our_reservation(pbs)
    resv.__dict__.update(reservation)
    pbs.RESERVATIONS.append(resv)
    submission = submitted(pbs, "R12")
    if "walltime" in job:
        submission.Resource_List["walltime"] = job["walltime"]
    if "variables" in job:
        submission.Variable_List = job["variables"]
    before = (dict(submission.Resource_List), submission.Variable_List)
    assert run(pbs, pbs.event_type(pbs.QUEUEJOB, job=submission)) == ("accept", None)
    assert (dict(submission.Resource_List), submission.Variable_List) == before
    assert "left as it came" in warnings(pbs)[0]


@pytest.mark.parametrize("kind", ["RESV_BEGIN", "RESV_END", "RESVSUB"])
def test_a_reservation_event_without_a_reservation_is_accepted(
    pbs: Pbs, tmp_path: Path, kind: str
) -> None:
    configure(pbs, tmp_path, tmp_path / "unused.sock")
    assert run(pbs, pbs.event_type(getattr(pbs, kind), requestor="mallory")) == ("accept", None)


def test_a_job_event_without_a_job_is_accepted(pbs: Pbs, tmp_path: Path) -> None:
    configure(pbs, tmp_path, tmp_path / "unused.sock")
    pbs.RESERVATIONS.append(our_reservation(pbs))
    assert run(pbs, pbs.event_type(pbs.QUEUEJOB)) == ("accept", None)
    assert "left as it came" in warnings(pbs)[0]


def test_an_event_it_does_not_handle_is_accepted(pbs: Pbs) -> None:
    assert run(pbs, pbs.event_type(0x40)) == ("accept", None)


def test_an_unreadable_configuration_falls_back_to_the_defaults(pbs: Pbs, tmp_path: Path) -> None:
    broken = tmp_path / "siteagent_hook.json"
    broken.write_text("{not json")
    pbs.hook_config_filename = str(broken)
    found = run(pbs, pbs.event_type(pbs.RESVSUB, requestor="mallory", resv=our_reservation(pbs)))
    assert found[0] == "reject"  # the default prefix sa- and agent user siteagent
    assert "cannot read the configuration" in warnings(pbs)[0]


def test_the_configured_prefix_and_user_are_the_ones_used(pbs: Pbs, tmp_path: Path) -> None:
    configure(pbs, tmp_path, tmp_path / "unused.sock", prefix="hpc-", agent_user="broker")
    ours = pbs.resv(Reserve_Name="hpc-0123456789")
    assert run(pbs, pbs.event_type(pbs.RESVSUB, requestor="siteagent", resv=ours))[0] == "reject"
    pbs.reset()
    configure(pbs, tmp_path, tmp_path / "unused.sock", prefix="hpc-", agent_user="broker")
    assert run(pbs, pbs.event_type(pbs.RESVSUB, requestor="broker", resv=ours))[0] == "accept"
