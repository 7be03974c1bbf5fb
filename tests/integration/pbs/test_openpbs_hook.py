"""contrib/pbs/siteagent_hook.py in a real pbs_server, fed real events: the prefix is the
agent's alone (``resvsub``), jobs in its reservations are clamped and tagged (``queuejob``),
and a reservation's start and end reach `siteagent serve` at once (``resv_begin``,
``resv_end``).

The hook and its configuration are the files ``siteagent install-service`` writes
(:func:`siteagent.host.installation.plan`, under a temporary root), imported with the
``qmgr`` lines it prints (contrib/pbs/README.md, its section 6). The agent account is root
here (the only one the tests use), except where a test imports the configuration as
installed (``siteagent``). Expectations are read with ``qstat -f`` and ``pbs_rstat -f`` text
and the agent's store.
"""

from __future__ import annotations

import json
import shlex
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from siteagent.backends.pbs import PbsBackend, PbsConfig
from siteagent.cli.site.install import pbs_hook_commands
from siteagent.config import loading
from siteagent.host import installation
from siteagent.market.lifecycle import ReservationState
from siteagent.market.reservations import ReservationManager
from siteagent.market.site import STORE_FILE
from siteagent.market.store import Store
from testbed.inprocess.commands import siteagent_json
from testbed.inprocess.offers import record_offer
from testbed.pbs.cluster import SERVER, PbsTestCluster, text_blocks
from testbed.processes.agents import SITEAGENT, spawn_agent
from testbed.processes.ports import free_port
from testbed.processes.programs import stop, wait_until
from testbed.processes.sites import authorize_buyer

pytestmark = pytest.mark.pbs

S = ReservationState
PREFIX = "sa-"
HOOK = "siteagent"
#: How long before its start a test's reservation is made: time for the accept and the
#: confirm (run in this process: a second or two on a busy machine, checked below).
LEAD_S = 8
BY_NOTICE = "the batch system: its window"


@dataclass
class Hooked:
    """The session's cluster with the hook imported, and where its files were installed."""

    cluster: PbsTestCluster
    root: Path
    socket: Path

    def staged(self, name: str) -> Path:
        return installation.staged(installation.SHARE / "pbs" / name, self.root)

    def import_config(self, **changes: str) -> None:
        """Import the installed configuration file, with ``changes``, into the hook."""
        config = json.loads(self.staged("siteagent_hook.json").read_text())
        path = self.root / "hook-config.json"
        path.write_text(json.dumps({**config, **changes}))
        self.cluster.qmgr(f"import hook {HOOK} application/x-config default {path}")


@pytest.fixture(scope="module")
def hooked(
    openpbs_cluster: PbsTestCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Hooked]:
    root = tmp_path_factory.mktemp("root")
    socket_path = root / "run" / "siteagent" / "notify.sock"
    config = loading.parse(
        {"backend": {"type": "pbs"}, "notifications": {"socket": str(socket_path)}}
    )
    files = installation.plan(
        config, Path("/etc/siteagent/siteagent.yaml"), SITEAGENT, Path("/etc/slurm")
    )
    installation.install(files, root, force=False)
    site = Hooked(openpbs_cluster, root, socket_path)
    cluster = openpbs_cluster
    # the qmgr lines `siteagent install-service` prints for the administrator, as printed
    for command in pbs_hook_commands(site.staged("siteagent_hook.py").parent):
        cluster.run(shlex.split(command))
    site.import_config(agent_user="root", agent_host=SERVER)
    cluster.reset()
    try:
        yield site
    finally:
        cluster.reset()
        cluster.qmgr(f"delete hook {HOOK}")


def rsub(cluster: PbsTestCluster, name: str, start_in: int, duration: int) -> str:
    """``pbs_rsub`` of a 2-CPU reservation ``name``; its id once PBS confirmed it."""
    now = int(time.time())
    stamp = [
        time.strftime("%Y%m%d%H%M.%S", time.gmtime(t))
        for t in (now + start_in, now + start_in + duration)
    ]
    reply = cluster.run(
        ["pbs_rsub", "-R", stamp[0], "-E", stamp[1], "-N", name, "-l", "select=2:ncpus=1"]
    ).stdout.split()[0]
    wait_until(
        f"{name} confirmed",
        lambda: (
            text_blocks(cluster.run(["pbs_rstat", "-f", reply]).stdout)
            .get(reply, {})
            .get("reserve_state")
            == "RESV_CONFIRMED"
        ),
        timeout=30,
    )
    return reply


# --------------------------------------------------------------------------- resvsub


def test_the_prefix_is_the_agents_alone(hooked: Hooked) -> None:
    cluster = hooked.cluster
    hooked.import_config()  # as installed: the agent is the account "siteagent", not root
    try:
        stamp = time.strftime("%Y%m%d%H%M", time.gmtime(time.time() + 3600))
        refused = cluster.run(
            ["pbs_rsub", "-R", stamp, "-D", "600", "-N", "sa-byhand", "-l", "select=1:ncpus=1"],
            check=False,
        )
        assert refused.returncode != 0
        assert "are the site agent's (siteagent's on " in refused.stderr
        assert rsub(cluster, "byhand", 3600, 600)  # any other name is left alone
        assert [
            b["Reserve_Name"] for b in text_blocks(cluster.run(["pbs_rstat", "-f"]).stdout).values()
        ] == ["byhand"]
        # the agent's account, but from another host than the one installed (this machine's
        # name; pbs_rsub runs on the cluster's head, SERVER)
        hooked.import_config(agent_user="root")
        elsewhere = cluster.run(
            ["pbs_rsub", "-R", stamp, "-D", "600", "-N", "sa-away", "-l", "select=1:ncpus=1"],
            check=False,
        )
        assert elsewhere.returncode != 0
        assert "are the site agent's (root's on " in elsewhere.stderr
    finally:
        hooked.import_config(agent_user="root", agent_host=SERVER)
        cluster.reset()
    assert rsub(cluster, "sa-byagent", 3600, 600)  # the agent's own account may
    cluster.reset()


# --------------------------------------------------------------------------- queuejob


def test_jobs_in_the_agents_reservations_are_clamped_and_tagged(hooked: Hooked) -> None:
    cluster = hooked.cluster
    try:
        ours = rsub(cluster, "sa-clamp", 600, 1800).split(".")[0]
        other = rsub(cluster, "other-resv", 600, 1800).split(".")[0]
        long_in = cluster.submit("-q", ours, "-l", "walltime=02:00:00")
        unlimited_in = cluster.submit("-q", ours)
        short_in = cluster.submit("-q", ours, "-l", "walltime=00:10:00")
        outside = cluster.submit("-h", "-l", "walltime=02:00:00")
        foreign = cluster.submit("-q", other, "-l", "walltime=02:00:00")
        # a tag its owner set by hand on a job outside the agent's reservations is taken off
        forged = cluster.submit("-h", "-v", "SITEAGENT_RESERVATION=sa-clamp")
        jobs = text_blocks(cluster.run(["qstat", "-f"]).stdout)
        tag = "SITEAGENT_RESERVATION=sa-clamp"
        for job in (long_in, unlimited_in):
            assert jobs[job]["Resource_List.walltime"] == "00:30:00", job
            assert tag in jobs[job]["Variable_List"].split(","), job
        assert jobs[short_in]["Resource_List.walltime"] == "00:10:00"
        assert tag in jobs[short_in]["Variable_List"].split(",")
        for job in (outside, foreign):
            assert jobs[job]["Resource_List.walltime"] == "02:00:00", job
            assert "SITEAGENT_RESERVATION" not in jobs[job]["Variable_List"], job
        assert "SITEAGENT_RESERVATION" not in jobs[forged]["Variable_List"]
    finally:
        cluster.reset()


# --------------------------------------------------------------------------- the agent


def state_of(state_dir: Path, rid: str) -> ReservationState:
    store = Store(str(state_dir / STORE_FILE))
    try:
        record = store.get_reservation(rid)
    finally:
        store.close()
    assert record is not None
    return record.state


def test_start_and_end_reach_the_agent_at_once(
    hooked: Hooked, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent polls every ten minutes, so only the notices can move the reservation."""
    cluster = hooked.cluster
    monkeypatch.setenv("PATH", cluster.env["PATH"])  # the agent's PBS commands
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    authorize_buyer(state_dir, "tester@ci")
    config = {
        "state_dir": str(state_dir),
        "site": {"name": "hpc1"},
        "backend": {"type": "pbs", "pbs": {"pbs_conf": str(cluster.conf), "queue": "workq"}},
        "planner": {"poll_interval_s": 600},
        "reservations": {"name_prefix": PREFIX},
        "notifications": {"socket": str(hooked.socket)},
        "api": {"listen": "127.0.0.1", "port": free_port(), "tls": {"enabled": False}},
    }
    config_file = tmp_path / "siteagent.yaml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    log = state_dir / "agent.log"
    agent = spawn_agent(config_file, log)
    try:
        wait_until("the agent to serve", lambda: "ready: API on" in log.read_text())
        start = int(time.time()) + LEAD_S
        store = Store(str(state_dir / STORE_FILE))
        try:
            manager = ReservationManager(
                store, PbsBackend(PbsConfig(pbs_conf=str(cluster.conf))), name_prefix=PREFIX
            )
            offer = record_offer(manager, 2, start, 60, offer_id=uuid.uuid4().hex[:16])
        finally:
            store.close()
        common = ["--config", str(config_file), "--client", "tester@ci"]
        accepted = siteagent_json("reservations", "accept", offer.id, "--user", "root", *common)
        rid = str(accepted["reservation"]["id"])
        key = str(state_dir / "buyer.key")
        siteagent_json("reservations", "confirm", rid, "--signing-key", key, *common)
        assert time.time() < start, f"the accept and confirm outlasted LEAD_S ({LEAD_S} s)"
        wait_until("ACTIVE", lambda: state_of(state_dir, rid) is S.ACTIVE, timeout=LEAD_S + 60)
        wait_until("COMPLETED", lambda: state_of(state_dir, rid) is S.COMPLETED, timeout=120)
    finally:
        assert stop(agent) == 0, log.read_text()
    steps = siteagent_json("reservations", "show", rid, "--config", str(config_file))["history"]
    reasons = {step["to"]: step["reason"] for step in steps}
    assert reasons["ACTIVE"] == f"{BY_NOTICE} started"
    assert reasons["COMPLETED"] == f"{BY_NOTICE} ended"
    assert "notice that" in log.read_text()
