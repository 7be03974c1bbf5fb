"""The Slurm side, on a real test cluster: ResvProlog/ResvEpilog tell the agent at once, the
job_submit/lua plugin clamps and tags the jobs of the agent's reservations, and the agent records
what those jobs used.

The cluster of this module runs slurmctld with the programs ``siteagent install-service`` writes
(:func:`siteagent.host.installation.plan`, installed under a temporary root): the two copies
of contrib/slurm/resv-notify as ResvProlog and ResvEpilog, and contrib/slurm/job_submit.lua with
``JobSubmitPlugins=lua``. Expectations are read with Slurm's own text commands and the agent's
store, never with the code that wrote them. Each reservation lasts Slurm's shortest whole minute,
so the tests that wait for one take a minute or two.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List

import pytest
import yaml

from siteagent.backends.slurm import SlurmBackend
from siteagent.config import loading
from siteagent.host import installation
from siteagent.market.lifecycle import ReservationState
from siteagent.market.reservations import ReservationManager
from siteagent.market.site import STORE_FILE
from siteagent.market.store import Store
from testbed.inprocess.commands import siteagent_json
from testbed.inprocess.offers import record_offer
from testbed.processes.agents import SITEAGENT, spawn_agent
from testbed.processes.ports import free_port
from testbed.processes.programs import running_slurm, stop, wait_until
from testbed.processes.sites import authorize_buyer
from testbed.slurm.cluster import SlurmTestCluster
from testbed.slurm.install import SlurmInstall
from testbed.slurm.queue import wait_for

#: apart: three tests wait out a one-minute reservation each, on three releases
pytestmark = [pytest.mark.slurm, pytest.mark.apart]

S = ReservationState

PREFIX = "sa-"
#: How long before its start a test's reservation is made: time for the accept and the
#: confirm (run in this process: a second or two on a busy machine, checked below).
LEAD_S = 8
#: The reasons the history gives for a move by a notice and by a poll.
BY_NOTICE = "the batch system: its window"
BY_POLL = "its window"


@dataclass
class Site:
    """The cluster, where the programs were installed, and the socket they notify."""

    cluster: SlurmTestCluster
    root: Path
    socket: Path

    @property
    def prolog(self) -> Path:
        return installation.staged(installation.LIBEXEC / "slurm-resv-prolog", self.root)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, slurm_version: SlurmInstall) -> Iterator[Site]:
    """A 4-node cluster with the agent's ResvProlog, ResvEpilog and job_submit.lua, installed
    as `siteagent install-service` installs them for a configuration with a notices' socket.
    For a Slurm in a chroot they are installed in it, where its slurmctld finds them, and the
    programs reach the agent's socket by its path in the chroot."""
    where = slurm_version.tmp_dir()
    root = Path(tempfile.mkdtemp(dir=where)) if where else tmp_path_factory.mktemp("root")
    socket_path = root / "run" / "siteagent" / "notify.sock"
    config = loading.parse(
        {
            "backend": {"type": "slurm"},
            "notifications": {"socket": slurm_version.inside(socket_path)},
        }
    )
    files = installation.plan(
        config, Path("/etc/siteagent/siteagent.yaml"), SITEAGENT, Path("/etc/slurm")
    )
    installation.install(files, root, force=False)
    libexec = installation.staged(installation.LIBEXEC, root)
    lua = installation.staged(Path("/etc/slurm/job_submit.lua"), root).read_bytes()
    try:
        for cluster in running_slurm(
            install=slurm_version,
            extra_config=[
                f"ResvProlog={slurm_version.inside(libexec / 'slurm-resv-prolog')}",
                f"ResvEpilog={slurm_version.inside(libexec / 'slurm-resv-epilog')}",
                "JobSubmitPlugins=lua",
            ],
            files={"job_submit.lua": lua},
        ):
            cluster.reset()
            yield Site(cluster, root, socket_path)
            cluster.reset()
    finally:
        if where:
            shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------- job_submit.lua


def show_job(cluster: SlurmTestCluster, job_id: str) -> Dict[str, str]:
    """``scontrol show job -o`` as key/value pairs (AdminComment runs to the next key)."""
    line = cluster.run(["scontrol", "show", "job", "-o", job_id]).stdout
    return dict(token.split("=", 1) for token in line.split() if "=" in token)


def test_jobs_in_the_agents_reservations_are_clamped_and_tagged(site: Site) -> None:
    cluster = site.cluster
    for name in ("sa-clamp", "other-resv"):
        cluster.run(
            [
                "scontrol",
                "create",
                "reservation",
                f"ReservationName={name}",
                "StartTime=now+10minutes",
                "Duration=30",
                "CoreCnt=2",
                "Users=root",
            ]
        )
    try:
        long_in = cluster.submit("--reservation=sa-clamp", "-n1", "-t", "120")
        unlimited_in = cluster.submit("--reservation=sa-clamp", "-n1")
        short_in = cluster.submit("--reservation=sa-clamp", "-n1", "-t", "10")
        outside = cluster.submit("-n1", "-t", "120", "-H")
        foreign = cluster.submit("--reservation=other-resv", "-n1", "-t", "120")
        moved = cluster.submit("-n1", "-t", "120", "-H")
        cluster.run(["scontrol", "update", f"JobId={moved}", "Reservation=sa-clamp"])

        tag = "siteagent:reservation=sa-clamp"
        for job in (long_in, unlimited_in, moved):
            assert show_job(cluster, job)["TimeLimit"] == "00:30:00", job
            assert show_job(cluster, job)["AdminComment"] == tag, job
        assert show_job(cluster, short_in)["TimeLimit"] == "00:10:00"
        assert show_job(cluster, short_in)["AdminComment"] == tag
        for job in (outside, foreign):
            fields = show_job(cluster, job)
            assert fields["TimeLimit"] == "02:00:00", job
            assert "AdminComment" not in fields, job
    finally:
        cluster.reset()


# --------------------------------------------------------------------------- the agent


@dataclass
class Agent:
    """`siteagent serve` on the site's cluster, its configuration file and its store."""

    config_file: Path
    state_dir: Path
    port: int
    log: Path
    process: subprocess.Popen[bytes]

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def write_config(tmp_path: Path, site: Site, poll_interval_s: float) -> Path:
    state_dir = tmp_path / "state"
    state_dir.mkdir(exist_ok=True)
    authorize_buyer(state_dir, "tester@ci")
    config = {
        "state_dir": str(state_dir),
        "site": {"name": "hpc1"},
        "backend": {
            "type": "slurm",
            "slurm": {
                **site.cluster.backend_options(),
                "partition": "batch",
                "users": ["root"],
            },
        },
        "planner": {"poll_interval_s": poll_interval_s},
        "reservations": {"name_prefix": PREFIX},
        "notifications": {"socket": str(site.socket)},
        "api": {"listen": "127.0.0.1", "port": free_port(), "tls": {"enabled": False}},
    }
    config_file = tmp_path / "siteagent.yaml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    return config_file


def start_agent(config_file: Path) -> Agent:
    config = yaml.safe_load(config_file.read_text(encoding="utf-8"))
    state_dir = Path(config["state_dir"])
    log = state_dir / "agent.log"
    agent = Agent(config_file, state_dir, config["api"]["port"], log, spawn_agent(config_file, log))
    wait_until("the agent to listen for notices and serve", lambda: _ready(agent))
    return agent


def _ready(agent: Agent) -> bool:
    if agent.process.poll() is not None:
        pytest.fail(f"the agent exited:\n{agent.log_text()}", pytrace=False)
    return "ready: API on" in agent.log_text()


def stop_agent(agent: Agent) -> None:
    assert stop(agent.process) == 0, agent.log_text()


def confirmed_reservation(config_file: Path, site: Site, cores: int, start: int) -> str:
    """A CONFIRMED one-minute reservation of ``cores`` from ``start``, made through the
    administrator's commands as a buyer's accept and confirm; its id."""
    made = time.time()
    state_dir = config_file.parent / "state"
    store = Store(str(state_dir / STORE_FILE))
    backend = SlurmBackend(site.cluster.slurm_config(partition="batch"))
    try:
        manager = ReservationManager(store, backend, name_prefix=PREFIX)
        offer = record_offer(manager, cores, start, 60, offer_id=uuid.uuid4().hex[:16])
    finally:
        store.close()
    common = ["--config", str(config_file), "--client", "tester@ci"]
    accepted = siteagent_json("reservations", "accept", offer.id, "--user", "root", *common)
    rid = str(accepted["reservation"]["id"])
    key = str(state_dir / "buyer.key")
    siteagent_json("reservations", "confirm", rid, "--signing-key", key, *common)
    assert time.time() < start, (
        f"the accept and confirm took {time.time() - made:.1f} s, more than LEAD_S ({LEAD_S} s)"
    )
    return rid


def shown(config_file: Path, rid: str) -> Dict[str, Any]:
    """``siteagent reservations show ID --json``: the record, its history and its jobs."""
    return siteagent_json("reservations", "show", rid, "--config", str(config_file))


def state_of(config_file: Path, rid: str) -> ReservationState:
    """The reservation's state, read from the agent's store as another process would."""
    store = Store(str(config_file.parent / "state" / STORE_FILE))
    try:
        record = store.get_reservation(rid)
    finally:
        store.close()
    assert record is not None
    return record.state


def the_move(steps: List[Dict[str, Any]], to: str) -> Dict[str, Any]:
    found = [step for step in steps if step["to"] == to]
    assert len(found) == 1, steps
    return found[0]


def test_start_and_end_reach_the_agent_at_once(site: Site, tmp_path: Path) -> None:
    """The agent polls every ten minutes, so only the notices can move the reservation."""
    config_file = write_config(tmp_path, site, poll_interval_s=600)
    agent = start_agent(config_file)
    try:
        start = int(time.time()) + LEAD_S
        rid = confirmed_reservation(config_file, site, 2, start)
        wait_for("ACTIVE", lambda: state_of(config_file, rid) is S.ACTIVE, timeout=LEAD_S + 60)
        wait_for("COMPLETED", lambda: state_of(config_file, rid) is S.COMPLETED, timeout=120)
    finally:
        stop_agent(agent)
    steps = shown(config_file, rid)["history"]
    began, ended = the_move(steps, "ACTIVE"), the_move(steps, "COMPLETED")
    assert began["reason"] == f"{BY_NOTICE} started"
    assert ended["reason"] == f"{BY_NOTICE} ended"
    end = start + 60
    print(
        f"moved ACTIVE {began['at'] - start:.1f} s after the start, COMPLETED "
        f"{ended['at'] - end:.1f} s after the end"
    )
    assert "notice that" in agent.log_text()


def slurm_times(cluster: SlurmTestCluster, job_id: str) -> Dict[str, int]:
    """A job's StartTime and EndTime as Slurm holds them, in epoch seconds."""
    line = cluster.run(
        ["scontrol", "show", "job", "-o", job_id], env={"SLURM_TIME_FORMAT": "%s"}
    ).stdout
    fields = dict(token.split("=", 1) for token in line.split() if "=" in token)
    return {"start": int(fields["StartTime"]), "end": int(fields["EndTime"])}


def metrics(agent: Agent) -> Dict[str, float]:
    """The agent's unlabelled samples, by name."""
    with urllib.request.urlopen(f"http://127.0.0.1:{agent.port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    samples = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if line and not line.startswith("#") and "{" not in name:
            samples[name] = float(value)
    return samples


def test_the_jobs_of_a_reservation_are_recorded_and_shown(site: Site, tmp_path: Path) -> None:
    """Two reservations from the same start: a job runs in one, the other is left empty.
    The agent (polling every second) records the one job and no other, and once both are
    over shows their figures as final, in `reservations show` and in its metrics."""
    cluster = site.cluster
    config_file = write_config(tmp_path, site, poll_interval_s=1)
    agent = start_agent(config_file)
    try:
        start = int(time.time()) + LEAD_S
        used = confirmed_reservation(config_file, site, 4, start)
        empty = confirmed_reservation(config_file, site, 2, start)
        inside = cluster.submit(
            f"--reservation={PREFIX}{used}", "-n2", "-t", "120", wrap="sleep 30"
        )
        cluster.submit("-n1", "-t", "5", wrap="sleep 30")  # outside, running meanwhile
        wait_for("the job in the reservation to end", lambda: job_done(cluster, inside), 120)
        ran = slurm_times(cluster, inside)
        for rid in (used, empty):
            wait_for("final figures", final(config_file, rid), 90)
        figures = metrics(agent)
    finally:
        stop_agent(agent)
    usage = shown(config_file, used)["usage"]
    assert [job["id"] for job in usage["jobs"]] == [inside]
    job = usage["jobs"][0]
    assert (job["user"], job["cores"], job["nodes"], job["start"]) == ("root", 2, 1, ran["start"])
    assert ran["end"] <= job["end"] <= ran["end"] + 3  # first poll that no longer saw it
    assert usage["core_hours"] == pytest.approx(2 * (job["end"] - job["start"]) / 3600, abs=1e-4)
    assert usage["sold_unit_hours"] == pytest.approx(4 * 60 / 3600, abs=1e-4)
    assert usage["utilization"] == pytest.approx(
        usage["used_unit_hours"] / (4 * 60 / 3600), abs=1e-3
    )
    assert (usage["source"], usage["final"]) == ("poll", True)
    left = shown(config_file, empty)["usage"]
    assert (left["jobs"], left["utilization"], left["final"]) == ([], 0.0, True)
    assert figures["siteagent_reservations_finished_empty_total"] == 1
    assert figures["siteagent_reserved_core_hours_sold_total"] == pytest.approx(6 * 60 / 3600)
    assert figures["siteagent_reserved_core_hours_used_total"] == pytest.approx(
        usage["core_hours"], abs=1e-3
    )


def final(config_file: Path, rid: str) -> Callable[[], bool]:
    """Whether the reservation's figures are final, as `reservations show` says."""
    return lambda: bool(shown(config_file, rid)["usage"]["final"])


def job_done(cluster: SlurmTestCluster, job_id: str) -> bool:
    return show_job(cluster, job_id)["JobState"] in ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED")


@contextlib.contextmanager
def silent_agent(path: Path) -> Iterator[None]:
    """A socket at ``path`` that takes connections and never answers: an agent that hangs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(16)
        try:
            yield
        finally:
            path.unlink()


def prolog_running(site: Site) -> bool:
    # its command line names it as the chroot's slurmctld does, if there is a chroot
    program = site.cluster.install.inside(site.prolog)
    found = subprocess.run(["pgrep", "-f", program], capture_output=True, check=False)
    return found.returncode == 0


def test_the_programs_never_hold_slurmctld_and_the_agent_catches_up(
    site: Site, tmp_path: Path
) -> None:
    """The reservation starts while the agent hangs: slurmctld answers meanwhile, and its
    ResvProlog gives up by itself. The agent started afterwards finds the reservation started
    at its first poll, and hears of its end from the ResvEpilog."""
    cluster = site.cluster
    config_file = write_config(tmp_path, site, poll_interval_s=600)
    start = int(time.time()) + LEAD_S
    rid = confirmed_reservation(config_file, site, 2, start)
    with silent_agent(site.socket):
        wait_for("slurmctld to run the ResvProlog", lambda: prolog_running(site), LEAD_S + 30)
        assert cluster.run(["squeue", "-h"]).returncode == 0
        assert cluster.run(["scontrol", "show", "reservation", f"{PREFIX}{rid}"]).returncode == 0
        assert prolog_running(site), "slurmctld answered only once its program had given up"
        wait_for("the ResvProlog to give up", lambda: not prolog_running(site), 10)
    agent = start_agent(config_file)
    try:
        wait_for("its first poll", lambda: state_of(config_file, rid) is S.ACTIVE, timeout=10)
        wait_for("COMPLETED", lambda: state_of(config_file, rid) is S.COMPLETED, timeout=120)
    finally:
        stop_agent(agent)
    steps = shown(config_file, rid)["history"]
    assert the_move(steps, "ACTIVE")["reason"] == f"{BY_POLL} started"
    assert the_move(steps, "COMPLETED")["reason"] == f"{BY_NOTICE} ended"
