"""A real Prometheus (Debian's) scrapes a running `siteagent serve` over HTTPS.

The agent replays the bundled trace (128 cores) and polls every second; Prometheus scrapes it
every second, trusting the agent's self-signed certificate, and evaluates the alerting rules
of contrib/prometheus. The test then asks Prometheus' HTTP API what it stored: the metrics
are there with values that agree with each other, every rule evaluates, and every
expression of the Grafana dashboard runs. Both processes are stopped by their PIDs; the agent
must exit cleanly on SIGTERM.
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import yaml

from testbed.processes.agents import BundledReplay, RunningAgent, run_agent
from testbed.processes.ports import free_port
from testbed.processes.programs import require_programs, stop, wait_until

pytestmark = pytest.mark.prometheus

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "contrib" / "prometheus" / "siteagent-rules.yml"
DASHBOARD = REPO / "contrib" / "grafana" / "siteagent-dashboard.json"
CAPACITY = 128  # the bundled SDSC-SP2 slice


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[RunningAgent]:
    """The agent on its bundled replay, polling every second."""
    settings = {"site": {"name": "prom-test"}, "planner": {"poll_interval_s": 1}}
    yield from run_agent(tmp_path, BundledReplay(), settings)


@pytest.fixture
def prometheus(tmp_path: Path, agent: RunningAgent) -> Iterator[str]:
    programs = require_programs("prometheus")
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {
                "job_name": "siteagent",
                "scheme": "https",
                "tls_config": {"ca_file": str(agent.buyer.cert)},
                "static_configs": [{"targets": [urllib.parse.urlsplit(agent.buyer.url).netloc]}],
            }
        ],
    }
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    log = tmp_path / "prometheus.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                programs["prometheus"],
                f"--config.file={config_file}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until("Prometheus to be ready", lambda: ready(url, process, log))
        yield url
    finally:
        stop(process)


def ready(url: str, process: subprocess.Popen[bytes], log: Path) -> bool:
    if process.poll() is not None:
        output = log.read_text(encoding="utf-8", errors="replace")
        pytest.fail(f"prometheus exited with {process.returncode}:\n{output}")
    with urllib.request.urlopen(f"{url}/-/ready", timeout=5) as answer:
        return bool(answer.status == 200)


def api(prometheus: str, path: str, **params: str) -> Any:
    query = urllib.parse.urlencode(params)
    with urllib.request.urlopen(f"{prometheus}/api/v1/{path}?{query}", timeout=10) as answer:
        body = json.load(answer)
    assert body["status"] == "success", body
    return body["data"]


def query(prometheus: str, expr: str) -> List[Dict[str, Any]]:
    """An instant query's vector: [{"metric": {labels}, "value": float}]."""
    data = api(prometheus, "query", query=expr)
    assert data["resultType"] == "vector", (expr, data)
    return [{"metric": r["metric"], "value": float(r["value"][1])} for r in data["result"]]


def one(prometheus: str, expr: str) -> float:
    result = query(prometheus, expr)
    assert len(result) == 1, (expr, result)
    value: float = result[0]["value"]
    return value


def by_label(prometheus: str, expr: str, label: str) -> Dict[str, float]:
    return {r["metric"][label]: r["value"] for r in query(prometheus, expr)}


def test_prometheus_scrapes_the_agent(prometheus: str) -> None:
    # scraped twice at least, so that rates and the age below are past the first sample
    wait_until(
        "two scrapes of the agent's state",
        lambda: query(prometheus, "count_over_time(siteagent_cluster_capacity_cores[1m]) >= 2"),
    )
    assert one(prometheus, 'up{job="siteagent"}') == 1
    assert one(prometheus, "siteagent_info") == 1
    info = query(prometheus, "siteagent_info")[0]["metric"]
    assert (info["site"], info["backend"]) == ("prom-test", "swf")

    assert one(prometheus, "siteagent_cluster_capacity_cores") == CAPACITY
    cores = by_label(prometheus, "siteagent_cluster_cores", "state")
    assert set(cores) == {"allocated", "idle", "unavailable"}
    assert sum(cores.values()) == CAPACITY and min(cores.values()) >= 0
    jobs = by_label(prometheus, "siteagent_jobs", "state")
    assert set(jobs) == {"running", "pending"} and jobs["running"] > 0

    assert one(prometheus, "siteagent_backend_up") == 1
    assert one(prometheus, "siteagent_poll_interval_seconds") == 1
    assert 0 <= one(prometheus, "siteagent_snapshot_age_seconds") < 10
    assert one(prometheus, "siteagent_advertised_slots") >= 1

    free = by_label(prometheus, "siteagent_free_core_hours", "within")
    assert 0 <= free["1h"] <= free["6h"] <= free["24h"]
    assert free["1h"] <= CAPACITY and free["24h"] <= CAPACITY * 24

    quoted = by_label(prometheus, "siteagent_reference_quote_available", "request")
    assert set(quoted) == {"one-core-hour", "small", "wide-day"}
    assert quoted["one-core-hour"] == 1
    delay = by_label(prometheus, "siteagent_reference_quote_start_delay_seconds", "request")
    assert delay["one-core-hour"] >= 0
    assert one(prometheus, 'siteagent_reference_quote_fee{request="one-core-hour"}') >= 0

    reservations = by_label(prometheus, "siteagent_reservations", "state")
    assert len(reservations) == 9 and sum(reservations.values()) == 0
    for sold in ("cores_sold", "cores_used", "core_hours_sold_total", "core_hours_used_total"):
        assert one(prometheus, f"siteagent_reserved_{sold}") == 0  # nothing sold yet
    assert one(prometheus, "siteagent_reservations_active_empty") == 0
    assert one(prometheus, "siteagent_reservations_finished_empty_total") == 0
    assert one(prometheus, "siteagent_refresh_failures_total") == 0
    snapshots = by_label(
        prometheus, "siteagent_backend_operation_duration_seconds_count", "operation"
    )
    assert snapshots["snapshot"] >= 2
    assert 0 < one(prometheus, "process_resident_memory_bytes") < 1e9


def test_every_rule_evaluates_and_none_fires(prometheus: str) -> None:
    def evaluated() -> List[Dict[str, Any]]:
        groups = api(prometheus, "rules")["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        done = rules and all(rule["lastEvaluation"] > "2000" for rule in rules)
        return rules if done else []

    rules = wait_until("every rule evaluated", evaluated)
    names = {rule["name"] for rule in rules}
    assert names == {
        "SiteagentDown",
        "SiteagentSnapshotStale",
        "SiteagentBackendDown",
        "SiteagentBackendErrors",
        "SiteagentConfirmTimeoutsRising",
        "SiteagentLedgerBookingsOwed",
        "SiteagentReservationLeftEmpty",
        "SiteagentSoldCapacityMostlyUnused",
    }
    assert [rule["name"] for rule in rules if rule["health"] != "ok"] == []
    assert [rule["name"] for rule in rules if rule["state"] != "inactive"] == []


def test_every_dashboard_expression_runs(prometheus: str) -> None:
    wait_until(
        "two scrapes of the agent's state",
        lambda: query(prometheus, "count_over_time(siteagent_cluster_capacity_cores[1m]) >= 2"),
    )
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert exprs
    empty = []
    for expr in exprs:
        result = query(prometheus, expr.replace("$instance", ".*"))  # fails on an error
        if not result and " > 0" not in expr:
            empty.append(expr)
    # rates need two samples in their window; the plain gauges must all have data by now
    assert [e for e in empty if "rate(" not in e and "increase(" not in e] == []


def test_promtool_accepts_the_rules() -> None:
    programs = require_programs("promtool")
    result = subprocess.run(
        [programs["promtool"], "check", "rules", str(RULES)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 8 rules found" in result.stdout
