"""The stand-in's commands against docs/pbs.md: formats, exit statuses, error messages.

A stand-in is only worth testing against if it is faithful, so these tests pin down what the
document records (section numbers refer to it), each against a running stand-in server.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Dict, List
from zoneinfo import ZoneInfo

from siteagent.backends.pbs.reservations import rstat_blocks
from siteagent.backends.pbs.values import parse_pbs_time
from testbed.standins.pbs.commands import RDEL_USAGE, RSUB_USAGE
from testbed.standins.pbs.harness import StandinServer, StartStandin

#: C ctime() without the newline: the day is padded with a space (§1).
CTIME_RE = re.compile(r"^[A-Z][a-z]{2} [A-Z][a-z]{2} [ 1-3]\d \d\d:\d\d:\d\d \d{4}$")


def qstat(server: StandinServer, *args: str, tz: str = "UTC") -> Dict[str, Any]:
    proc = server.run(["qstat", "-f", "-F", "json", *args], env={"TZ": tz})
    assert proc.returncode == 0, proc.stderr
    doc: Dict[str, Any] = json.loads(proc.stdout)
    return doc


def rsub(server: StandinServer, *args: str) -> str:
    proc = server.run(["pbs_rsub", *args])
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return proc.stdout.strip()


def stamp(epoch: int, fmt: str = "%Y%m%d%H%M.%S") -> str:
    """A Datetime for pbs_rsub in UTC (the tests run the commands with TZ=UTC)."""
    return time.strftime(fmt, time.gmtime(epoch))


def rstat_state(server: StandinServer, resv_id: str) -> Dict[str, str]:
    proc = server.run(["pbs_rstat", "-f", resv_id], env={"TZ": "UTC"})
    blocks = rstat_blocks(proc.stdout)
    return blocks[0][1] if blocks else {}


def wait_for(what: str, check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


# ----------------------------------------------------------------------------- qstat


def test_empty_queue_has_no_jobs_key(start_standin: StartStandin, done_trace: Path) -> None:
    server = start_standin(trace=done_trace, nodes=2)
    proc = server.run(["qstat", "-f", "-F", "json"])
    assert proc.returncode == 0
    assert set(json.loads(proc.stdout)) == {"timestamp", "pbs_version", "pbs_server"}
    # OpenPBS 23 prints with cJSON: tab indentation, a tab after the colon
    assert proc.stdout.splitlines()[1].startswith('\t"timestamp":\t')


def test_job_attributes_and_json_types(sdsc: StandinServer) -> None:
    jobs = qstat(sdsc)["Jobs"]
    running = [j for j in jobs.values() if j["job_state"] == "R"]
    queued = [j for j in jobs.values() if j["job_state"] == "Q"]
    assert running and queued
    for job in jobs.values():
        rl = job["Resource_List"]
        assert isinstance(rl["ncpus"], int) and isinstance(rl["nodect"], int)
        assert re.fullmatch(r"\d\d+:\d\d:\d\d", rl["walltime"])
        assert job["Priority"] == 0 and job["Rerunable"] == "True"
        assert isinstance(job["substate"], int) and CTIME_RE.match(job["ctime"])
    for job in running:
        assert job["substate"] == 42 and CTIME_RE.match(job["stime"])
        assert job["exec_vnode"].startswith("(node")
        assert job["resources_used"]["ncpus"] == job["Resource_List"]["ncpus"]
    # estimates only on the top job (backfill_depth 1), with topjob "True" (§2.1)
    top = [j for j in jobs.values() if "estimated" in j]
    assert len(top) == 1 and top[0]["topjob"] == "True" and top[0]["job_state"] == "Q"
    assert CTIME_RE.match(top[0]["estimated"]["start_time"])


def test_dates_are_printed_in_the_command_time_zone(sdsc: StandinServer) -> None:
    utc = qstat(sdsc, tz="UTC")["Jobs"]
    tokyo = qstat(sdsc, tz="Asia/Tokyo")["Jobs"]
    for job_id, job in utc.items():
        epoch = parse_pbs_time(job["ctime"])
        assert epoch is not None
        assert job["ctime"] == time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime(epoch))
        assert parse_pbs_time(tokyo[job_id]["ctime"], ZoneInfo("Asia/Tokyo")) == epoch


def test_unknown_job_id(sdsc: StandinServer) -> None:
    proc = sdsc.run(["qstat", "-f", "-F", "json", "999999"])
    assert proc.returncode == 153
    assert proc.stderr == "qstat: Unknown Job Id 999999.pbs-head\n"
    assert "Jobs" not in json.loads(proc.stdout)  # the header is printed all the same


def test_text_form_wraps_long_values(sdsc: StandinServer) -> None:
    proc = sdsc.run(["qstat", "-f"])
    assert proc.returncode == 0 and proc.stdout.startswith("Job Id: ")
    lines = proc.stdout.splitlines()
    assert all(len(line.expandtabs(8)) <= 80 for line in lines)
    assert any(line.startswith("\t") for line in lines)  # exec_vnode of a wide job
    assert "    Resource_List.ncpus = " in proc.stdout


# ----------------------------------------------------------------------------- pbsnodes


def test_idle_vnodes_leave_zero_values_out(start_standin: StartStandin, done_trace: Path) -> None:
    server = start_standin(trace=done_trace, nodes=2)
    nodes = json.loads(server.run(["pbsnodes", "-av", "-F", "json"]).stdout)["nodes"]
    assert list(nodes) == ["node01", "node02"]
    for node in nodes.values():
        assert node["state"] == "free" and node["resources_assigned"] == {}
        assert "jobs" not in node and "resv" not in node
        assert isinstance(node["last_state_change_time"], int)
        assert node["resources_available"]["ncpus"] == 16
    # the text form shows the zeros the JSON leaves out
    text = server.run(["pbsnodes", "-av"]).stdout
    assert "     resources_assigned.ncpus = 0\n" in text
    assert CTIME_RE.match(text.split("last_state_change_time = ")[1].splitlines()[0])


def test_busy_vnodes_list_their_jobs(sdsc: StandinServer) -> None:
    nodes = json.loads(sdsc.run(["pbsnodes", "-av", "-F", "json"]).stdout)["nodes"]
    jobs = qstat(sdsc)["Jobs"]
    for name, node in nodes.items():
        on = [j for j, rec in jobs.items() if f"({name}:" in rec.get("exec_vnode", "")]
        assert sorted(node.get("jobs", [])) == sorted(on)
        used = sum(
            int(c)
            for rec in jobs.values()
            for c in re.findall(rf"\({name}:ncpus=(\d+)\)", rec.get("exec_vnode", ""))
        )
        assert node["resources_assigned"].get("ncpus", 0) == used
        assert node["state"] == ("job-busy" if used == 16 else "free")


def test_unknown_vnode(sdsc: StandinServer) -> None:
    proc = sdsc.run(["pbsnodes", "-v", "nosuch", "-F", "json"])
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["nodes"] == {"nosuch": {"nosuch": "Unknown node "}}
    proc = sdsc.run(["pbsnodes", "-v", "nosuch"])
    assert proc.returncode == 1 and proc.stderr == "Node: nosuch,  Error: Unknown node \n"


# ----------------------------------------------------------------------------- pbs_rsub


def test_reservations_are_confirmed_asynchronously(start_standin: StartStandin) -> None:
    # a decision 3 s after the request: the first pbs_rstat sees it undecided, however busy
    # the machine (at 0.3 s, a CI machine at load 15 once saw it confirmed already)
    sdsc = start_standin(confirm_delay=3.0)
    start = int(time.time()) + 3 * 86400
    reply = rsub(sdsc, "-R", stamp(start), "-E", stamp(start + 3600), "-l", "select=4:ncpus=2")
    assert re.fullmatch(r"R\d+\.pbs-head UNCONFIRMED", reply)
    resv_id = reply.split()[0]
    first = rstat_state(sdsc, resv_id)
    assert first["reserve_state"] == "RESV_UNCONFIRMED" and "resv_nodes" not in first
    assert first["Reserve_Name"] == "NULL"
    wait_for(
        "confirmation", lambda: rstat_state(sdsc, resv_id)["reserve_state"] != "RESV_UNCONFIRMED"
    )
    later = rstat_state(sdsc, resv_id)
    assert later["reserve_state"] == "RESV_CONFIRMED" and later["reserve_substate"] == "2"
    assert later["resv_nodes"].count("ncpus=2") == 4
    assert later["reserve_start"] == time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(start))
    assert later["reserve_duration"] == "3600" and later["queue"] == resv_id.split(".")[0]


def test_a_denied_reservation_disappears(sdsc: StandinServer) -> None:
    start = int(time.time()) + 5
    reply = rsub(sdsc, "-R", stamp(start), "-D", "600", "-l", "select=128:ncpus=1")
    resv_id = reply.split()[0]
    assert reply.endswith(" UNCONFIRMED")  # the answer comes before the decision
    time.sleep(0.6)
    proc = sdsc.run(["pbs_rstat", "-f", resv_id])
    assert (proc.returncode, proc.stdout) == (0, "")
    assert proc.stderr == "pbs_rstat: Unknown Reservation Id\n"
    assert resv_id in sdsc.siminfo()["denied"]


def test_interactive_waits_for_the_decision(sdsc: StandinServer) -> None:
    start = int(time.time()) + 3 * 86400
    ok = rsub(sdsc, "-I", "10", "-R", stamp(start), "-D", "01:00:00", "-l", "select=2:ncpus=4")
    assert ok.endswith(" CONFIRMED")
    now = int(time.time()) + 5
    denied = rsub(sdsc, "-I", "10", "-R", stamp(now), "-D", "600", "-l", "select=128:ncpus=1")
    assert denied.endswith(" DENIED")


def test_interactive_without_a_decision(start_standin: StartStandin, done_trace: Path) -> None:
    server = start_standin(trace=done_trace, nodes=2, confirm_delay=30)
    start = stamp(int(time.time()) + 3600)
    waited = rsub(server, "-I", "1", "-R", start, "-D", "600", "-l", "select=1:ncpus=1")
    assert waited.endswith(" UNCONFIRMED")
    assert rstat_state(server, waited.split()[0])["reserve_state"] == "RESV_UNCONFIRMED"
    gone = rsub(server, "-I", "-1", "-R", start, "-D", "600", "-l", "select=1:ncpus=1")
    assert gone.endswith(" delete, wait period expired")
    assert rstat_state(server, gone.split()[0]) == {}


def test_rsub_errors(sdsc: StandinServer) -> None:
    soon = stamp(int(time.time()) + 3600)
    cases: List[Any] = [
        (["-R", stamp(int(time.time()) - 3600), "-D", "600"], 238, "Bad time specification(s)"),
        (["-R", soon, "-l", "select=1:ncpus=1"], 238, "Bad time specification(s)"),
        (["-R", soon, "-D", "600", "-l", "select=1:foo=2"], 187, "Unknown resource"),
        (["-R", soon, "-D", "600", "-l", "select=1:ncpus=0"], 166, "Illegal attribute or"),
        (["-R", soon, "-D", "600", "-l", "place=sideways"], 166, "Illegal attribute or"),
    ]
    for args, status, message in cases:
        proc = sdsc.run(["pbs_rsub", *args])
        assert proc.returncode == status, (args, proc.stderr)
        assert proc.stderr.startswith(f"pbs_rsub: {message}"), proc.stderr
    for args, line in (
        (["-R", "2599", "-D", "600"], "pbs_rsub: illegal -R time value\n"),
        (["-R", soon, "-D", "ten"], "pbs_rsub: illegal -D value\n"),
        (["-R", soon, "-l", "select="], "pbs_rsub: illegal -l value\n"),
        (["-R", soon, "-D", "600", "extra"], "pbs_rsub: directive error: "),
        ([], ""),
    ):
        proc = sdsc.run(["pbs_rsub", *args])
        assert proc.returncode == 2 and proc.stderr.startswith(line), proc.stderr
        assert proc.stderr.endswith(RSUB_USAGE)


# ----------------------------------------------------------------------------- pbs_rstat / rdel


def test_rstat_forms_and_errors(sdsc: StandinServer) -> None:
    start = int(time.time()) + 3 * 86400
    resv_id = rsub(sdsc, "-R", stamp(start), "-D", "3600", "-N", "sa-forms", "-l", "select=1")
    resv_id = resv_id.split()[0]
    brief = sdsc.run(["pbs_rstat", "-B"]).stdout
    assert f"Resv ID: {resv_id}\n" in brief
    short = sdsc.run(["pbs_rstat"]).stdout.splitlines()
    assert short[0].startswith("Resv ID    Queue    User     State ")
    assert short[1] == "-" * 69
    assert short[2].startswith(f"{resv_id[:10]:<10} ") and " / 3600 / " in short[2]
    full = rstat_blocks(sdsc.run(["pbs_rstat", "-f"]).stdout)
    assert [r for r, _ in full] == [resv_id]
    assert full[0][1]["Reserve_Name"] == "sa-forms"
    proc = sdsc.run(["pbs_rstat", "-f", "bogus"])
    assert proc.returncode == 1
    assert proc.stderr == "pbs_rstat: illegally formed reservation identifier: bogus\n"
    proc = sdsc.run(["pbs_rstat", "-x"])
    assert proc.returncode == 1 and proc.stderr.startswith("Usage:\n\tpbs_rstat [-fFBS]")


def test_rdel(sdsc: StandinServer) -> None:
    start = int(time.time()) + 3 * 86400
    resv_id = rsub(sdsc, "-R", stamp(start), "-D", "600", "-l", "select=1:ncpus=1").split()[0]
    # only the owner (root here) or a manager may delete it
    proc = sdsc.run(["pbs_rdel", resv_id], env={"PBS_STANDIN_USER": "bob"})
    assert proc.returncode == 159
    assert proc.stderr == f"pbs_rdel: Unauthorized Request  {resv_id}\n"
    proc = sdsc.run(["pbs_rdel", resv_id.split(".")[0]])  # the short form works too
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert rstat_state(sdsc, resv_id) == {}
    proc = sdsc.run(["pbs_rdel", resv_id])
    assert proc.returncode == 236
    assert proc.stderr == f"pbs_rdel: Unknown Reservation Id {resv_id}\n"
    proc = sdsc.run(["pbs_rdel", "bogus"])
    assert proc.returncode == 1
    assert proc.stderr == "pbs_rdel: illegally formed reservation identifier: bogus\n"
    proc = sdsc.run(["pbs_rdel"])
    assert (proc.returncode, proc.stderr) == (2, RDEL_USAGE)


# ----------------------------------------------------------------------------- server down


def test_every_command_reports_an_unreachable_server(
    start_standin: StartStandin, done_trace: Path
) -> None:
    server = start_standin(trace=done_trace, nodes=2)
    server.stop()
    refused = "Connection refused\n"
    proc = server.run(["qstat", "-f", "-F", "json"])
    # the header alone on stdout looks like an empty queue: only the status tells (§2)
    assert proc.returncode == 255 and "Jobs" not in json.loads(proc.stdout)
    assert proc.stderr == refused + "qstat: cannot connect to server pbs-head (errno=15010)\n"
    proc = server.run(["pbsnodes", "-av", "-F", "json"])
    assert proc.returncode == 1
    assert proc.stderr == refused + "pbsnodes: cannot connect to server pbs-head, error=15010\n"
    soon = stamp(int(time.time()) + 3600)
    proc = server.run(["pbs_rsub", "-R", soon, "-D", "600", "-l", "select=1:ncpus=1"])
    assert proc.returncode == 15010 & 255
    assert proc.stderr == refused + "pbs_rsub: cannot connect to server pbs-head (errno=15010)\n"
    proc = server.run(["pbs_rstat", "-f"])
    assert proc.returncode == 15010 & 255
    assert proc.stderr == refused + "pbs_rstat: cannot connect to server (errno=15010)\n"
    proc = server.run(["pbs_rdel", "R1"])
    assert proc.returncode == 15010 & 255
    assert proc.stderr == refused + "pbs_rdel: cannot connect to server pbs-head (errno=15010)\n"
