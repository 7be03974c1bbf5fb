"""Outages of the batch system, against a running `siteagent serve` on the real Slurm test
cluster: its clients failing, hanging and returning garbage.

The agent's PATH starts with a directory of stand-ins for ``squeue``, ``sinfo`` and
``scontrol`` (:class:`Shims`): each runs the real client unless the test's control file says
``fail`` (a Slurm-like error, exit 1), ``hang`` (sleep past the agent's 2 s command timeout),
``garbage`` (truncated JSON, exit 0) or ``mangled`` (JSON of the wrong shape, exit 0).
Whatever the outage, the agent must stay up, say so on /healthz (503 with the reason) and in
its metrics, refuse quotes with 503 and Retry-After rather than sell from a picture it cannot
refresh, and recover by itself within a few polls once the batch system answers again.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterator, Optional

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testbed.processes.agents import Answer, RunningAgent, SlurmBatch, run_agent
from testbed.processes.programs import wait_until
from testbed.slurm.cluster import SlurmTestCluster
from testbed.slurm.install import SlurmInstall

#: The Slurm clients the agent runs, each replaced by a stand-in.
SHIMMED = ("squeue", "sinfo", "scontrol")
#: The agent's bound on each Slurm command: a hang shows up as a failed poll after this.
COMMAND_TIMEOUT_S = 2.0
POLL_INTERVAL_S = 0.5
#: How long the agent may take to notice an outage or a recovery: a command timing out, then
#: a few polls of a busy two-core machine, each running three Slurm commands.
NOTICE_S = COMMAND_TIMEOUT_S + 8 * POLL_INTERVAL_S + 10
#: What the agent's last error says, by outage.
REASONS = {
    "fail": "Unable to contact slurm controller",
    "hang": f"did not answer within {COMMAND_TIMEOUT_S:g} s",
    "garbage": "output is not JSON",
    "mangled": "not what Slurm writes",
}
QUOTE = {"cores": 8, "walltime": 3600}

#: ``garbage``: JSON cut short, as from a client killed mid-write.
TRUNCATED = '{"meta": {"plugin": {"type": "openapi/v0.0.3'
#: ``mangled``: JSON in a layout the agent knows, but records that are not objects, as from a
#: Slurm release whose output changed shape.
MANGLED = json.dumps({"meta": {"plugin": {"type": "openapi/v0.0.38"}}, "jobs": [1], "nodes": [1]})

SHIM = """#!/bin/sh
# A stand-in for {name}: the outage {control} names, else the real client.
case "$(cat {control} 2>/dev/null)" in
  fail) echo "{name}: error: Unable to contact slurm controller (connect failure)" >&2; exit 1 ;;
  hang) exec sleep 60 ;;
  garbage) printf '%s' {truncated}; exit 0 ;;
  mangled) printf '%s' {mangled}; exit 0 ;;
esac
exec {real} "$@"
"""


class Shims:
    """Stand-ins for Slurm's clients in ``directory``, steered by one control file. For a
    Slurm in a chroot they are in the chroot, where the agent's prefixed commands look them
    up on PATH (``chroot ROOT env ... squeue``), and name the files as it sees them."""

    def __init__(self, directory: Path, install: SlurmInstall) -> None:
        self.directory = directory
        self.install = install
        self.control = directory / "outage"
        directory.mkdir()
        for name in SHIMMED:
            real = f"/usr/bin/{name}"
            assert not install.missing([name]), f"no {name} in /usr/bin"
            script = directory / name
            script.write_text(
                SHIM.format(
                    name=name,
                    control=shlex.quote(install.inside(self.control)),
                    real=shlex.quote(real),
                    truncated=shlex.quote(TRUNCATED),
                    mangled=shlex.quote(MANGLED),
                ),
                encoding="utf-8",
            )
            script.chmod(0o755)

    def start(self, outage: str) -> None:
        self.control.write_text(outage, encoding="utf-8")

    def end(self) -> None:
        self.control.unlink(missing_ok=True)

    def environment(self) -> Dict[str, str]:
        """The agent's environment: the test's, with the stand-ins first on PATH."""
        inside = self.install.inside(self.directory)
        path = os.pathsep.join([inside, os.environ.get("PATH", "")])
        return {**os.environ, "PATH": path}


@pytest.fixture
def shims(tmp_path: Path, slurm_version: SlurmInstall) -> Iterator[Shims]:
    where = slurm_version.tmp_dir()
    base = Path(tempfile.mkdtemp(dir=where)) if where else tmp_path
    yield Shims(base / "shims", slurm_version)
    if where:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def agent(tmp_path: Path, slurm: SlurmTestCluster, shims: Shims) -> Iterator[RunningAgent]:
    """An agent on the Slurm test cluster whose Slurm clients are the stand-ins."""
    batch = SlurmBatch(slurm, timeout=COMMAND_TIMEOUT_S)
    settings = {"planner": {"poll_interval_s": POLL_INTERVAL_S}}
    try:
        yield from run_agent(tmp_path, batch, settings, env=shims.environment())
    finally:
        shims.end()  # a hanging stand-in would only slow the agent's stop down


def metrics(agent: RunningAgent) -> Dict[str, float]:
    """The agent's samples by name and labels, e.g. ``siteagent_backend_up`` or
    ``siteagent_backend_operation_errors_total{backend=slurm,kind=unavailable,...}``."""
    answer = agent.buyer.call("GET", "/metrics")
    assert answer.status == 200, answer.body
    samples = {}
    for family in text_string_to_metric_families(answer.body.decode()):
        for sample in family.samples:
            labels = ",".join(f"{key}={value}" for key, value in sorted(sample.labels.items()))
            samples[sample.name + (f"{{{labels}}}" if labels else "")] = sample.value
    return samples


def healthz(agent: RunningAgent, status: int) -> Optional[Answer]:
    """The agent's /healthz answer if it has this status, else None (to wait for it)."""
    answer = agent.buyer.call("GET", "/healthz")
    return answer if answer.status == status else None


def backend_up(agent: RunningAgent) -> bool:
    return metrics(agent)["siteagent_backend_up"] == 1


SNAPSHOT_ERRORS = (
    "siteagent_backend_operation_errors_total{backend=slurm,kind=unavailable,operation=snapshot}"
)


@pytest.mark.parametrize("outage", ["fail", "hang", "garbage", "mangled"])
def test_the_agent_survives_a_batch_system_outage_and_recovers(
    agent: RunningAgent, shims: Shims, outage: str
) -> None:
    buyer = agent.buyer
    assert buyer.call("POST", "/v1/quotes", QUOTE).status == 200
    wait_until("the metrics to say the backend is up", lambda: backend_up(agent), NOTICE_S)
    before = metrics(agent)

    shims.start(outage)
    began = time.monotonic()
    health = wait_until(
        f"/healthz to report the outage ({outage})", lambda: healthz(agent, 503), NOTICE_S
    ).json()
    noticed_s = time.monotonic() - began
    assert agent.alive(), agent.log_text()
    assert health["status"] == "backend_unavailable", health
    assert health["backend_reachable"] is False
    assert REASONS[outage] in health["last_error"], health

    during = metrics(agent)
    assert during["siteagent_backend_up"] == 0
    assert during[SNAPSHOT_ERRORS] > before.get(SNAPSHOT_ERRORS, 0.0)
    assert during["siteagent_refresh_failures_total"] > before["siteagent_refresh_failures_total"]
    assert during["siteagent_snapshot_age_seconds"] >= POLL_INTERVAL_S

    refused = buyer.call("POST", "/v1/quotes", QUOTE)
    assert refused.status == 503, refused.body
    assert refused.json()["error"]["code"] == "backend_unavailable"
    assert int(refused.headers["retry-after"]) >= 1

    shims.end()
    began = time.monotonic()
    wait_until(f"/healthz to recover from {outage}", lambda: healthz(agent, 200), NOTICE_S)
    recovered_s = time.monotonic() - began
    assert agent.alive(), agent.log_text()
    quoted = buyer.call("POST", "/v1/quotes", QUOTE)
    assert quoted.status == 200 and quoted.json()["offers"], quoted.body
    # the metrics follow at the end of the first good cycle, after its housekeeping
    wait_until("the metrics to say the backend is up", lambda: backend_up(agent), NOTICE_S)
    print(f"{outage}: noticed in {noticed_s:.1f} s, recovered in {recovered_s:.1f} s")
