"""A signature is used once, across restarts too: a request signed up to 30 s ahead of the
agent's clock (clocks differ) and used once is refused when sent again after the agent
restarted, though the restart took only a second or two (``siteagent serve`` stopped and
started on the same state directory)."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Dict, Iterator, Tuple

import pytest

from siteagent.protocol import signing
from testbed.processes.agents import BUSY_JOBS, ReplayBatch, RunningAgent, run_agent, spawn_agent
from testbed.processes.programs import stop, wait_until


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[RunningAgent]:
    yield from run_agent(tmp_path, ReplayBatch(BUSY_JOBS))


def send(agent: RunningAgent, body: bytes, headers: Dict[str, str]) -> Tuple[int, str]:
    request = urllib.request.Request(
        agent.buyer.url + "/v1/quotes", data=body, headers=headers, method="POST"
    )
    context = ssl.create_default_context(cafile=str(agent.buyer.cert))
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return answer.status, ""
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())["error"]["code"]


def restart(agent: RunningAgent, tmp_path: Path) -> None:
    """SIGTERM, and the same configuration started again (run_agent stops the new one)."""
    assert stop(agent.process) == 0, agent.log_text()
    agent.process = spawn_agent(tmp_path / "siteagent.yaml", agent.log)
    wait_until("the restarted agent", lambda: agent.buyer.call("GET", "/healthz").status == 200)


def test_a_signature_dated_ahead_and_used_before_a_restart_is_refused_after_it(
    agent: RunningAgent, tmp_path: Path
) -> None:
    party = agent.buyer.party
    body = json.dumps({"cores": 1, "walltime": 600, "limit": 1}).encode()
    created = int(time.time()) + 29  # 30 s ahead are accepted: a restart takes less
    headers = signing.sign_request(
        "POST", agent.buyer.url + "/v1/quotes", body, party.key, party.key_id, created=created
    )
    headers["Content-Type"] = "application/json"
    assert send(agent, body, headers) == (200, "")
    assert send(agent, body, headers) == (401, "replayed_signature")
    restart(agent, tmp_path)
    assert time.time() < created  # restarted before the signature's date: not "before start"
    assert send(agent, body, headers) == (401, "replayed_signature")
    fresh = signing.sign_request(
        "POST", agent.buyer.url + "/v1/quotes", body, party.key, party.key_id
    )
    assert send(agent, body, {**fresh, "Content-Type": "application/json"}) == (200, "")
