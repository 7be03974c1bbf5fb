"""`siteagent serve` as systemd runs it: notifications on a real socket, SIGHUP, SIGTERM.

The test plays systemd's part: it binds the notification socket, starts the agent with
``NOTIFY_SOCKET`` and ``WATCHDOG_USEC`` set, and reads what the agent says while it signals it.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import yaml

from testbed.processes.ports import free_port
from testbed.processes.programs import stop, wait_until

SITEAGENT = Path(sys.executable).parent / "siteagent"


class Service:
    """A running agent, its notification socket, its configuration file and its log."""

    def __init__(self, tmp_path: Path) -> None:
        self.port = free_port()
        self.state = tmp_path / "state"
        self.config_file = tmp_path / "siteagent.yaml"
        self.log = tmp_path / "agent.log"
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(str(tmp_path / "notify"))
        self.notify.settimeout(0.2)
        self.messages: List[str] = []
        self.write_config(poll_interval_s=1)
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "NOTIFY_SOCKET": str(tmp_path / "notify"),
            "WATCHDOG_USEC": "2000000",
        }
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [str(SITEAGENT), "serve", "--config", str(self.config_file)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )

    def write_config(self, **planner: Any) -> None:
        config = {
            "state_dir": str(self.state),
            "planner": planner,
            "api": {"listen": "127.0.0.1", "port": self.port},
        }
        self.config_file.write_text(yaml.safe_dump(config), encoding="utf-8")

    def said(self, message: str) -> bool:
        """Read notifications for a moment; True once ``message`` was among them."""
        with contextlib.suppress(TimeoutError):
            self.messages.append(self.notify.recv(4096).decode("utf-8"))
        if self.process.poll() is not None:
            pytest.fail(f"the agent exited with {self.process.returncode}:\n{self.output()}")
        return any(message in line.split("\n") for line in self.messages)

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def get(self, path: str) -> bytes:
        context = ssl.create_default_context(cafile=str(self.state / "tls" / "server.crt"))
        url = f"https://127.0.0.1:{self.port}{path}"
        with urllib.request.urlopen(url, context=context, timeout=5) as answer:
            body: bytes = answer.read()
            return body

    def metric(self, name: str) -> float:
        for line in self.get("/metrics").decode("utf-8").splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"{name} not exposed")


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    running = Service(tmp_path)
    try:
        yield running
    finally:
        stop(running.process)
        running.notify.close()


def test_ready_is_sent_once_the_api_answers_with_a_snapshot(service: Service) -> None:
    wait_until("READY=1", lambda: service.said("READY=1"))
    health: Dict[str, Any] = json.loads(service.get("/healthz"))
    assert health["status"] == "ok" and health["snapshot_age_s"] is not None
    assert any(line.startswith("STATUS=") for m in service.messages for line in m.split("\n"))
    # the loop feeds the watchdog while it runs (every half period at the latest)
    service.messages.clear()
    wait_until("WATCHDOG=1", lambda: service.said("WATCHDOG=1"), timeout=5)


def test_sighup_applies_a_new_poll_interval_and_keeps_a_broken_file_out(
    service: Service,
) -> None:
    wait_until("READY=1", lambda: service.said("READY=1"))
    assert service.metric("siteagent_poll_interval_seconds") == 1
    service.write_config(poll_interval_s=2, policy="easy")
    service.messages.clear()
    service.process.send_signal(signal.SIGHUP)
    wait_until("RELOADING=1", lambda: service.said("RELOADING=1"), timeout=10)
    wait_until("READY=1 after the reload", lambda: service.said("READY=1"), timeout=10)
    assert service.metric("siteagent_poll_interval_seconds") == 2
    assert "applied: planner.policy, planner.poll_interval_s" in service.output()

    service.config_file.write_text("planner: {poll_interval_s: -5}\n", encoding="utf-8")
    service.process.send_signal(signal.SIGHUP)
    wait_until(
        "the reload error in the log",
        lambda: "reload failed, the running configuration is kept" in service.output(),
        timeout=10,
    )
    assert "planner.poll_interval_s" in service.output().split("reload failed")[1]
    assert service.metric("siteagent_poll_interval_seconds") == 2
    assert json.loads(service.get("/healthz"))["status"] == "ok"


def test_a_change_needing_a_restart_is_logged_and_not_applied(service: Service) -> None:
    wait_until("READY=1", lambda: service.said("READY=1"))
    config = yaml.safe_load(service.config_file.read_text(encoding="utf-8"))
    config["api"]["port"] = service.port + 1
    service.config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    service.process.send_signal(signal.SIGHUP)
    wait_until(
        "the restart warning",
        lambda: "take effect only after a restart: api.port" in service.output(),
        timeout=10,
    )
    assert json.loads(service.get("/healthz"))["status"] == "ok"  # still on the old port


def test_sigterm_stops_cleanly_and_the_next_start_finds_the_same_cluster(
    service: Service,
) -> None:
    wait_until("READY=1", lambda: service.said("READY=1"))
    now = json.loads(service.get("/v1/info"))["cluster"]
    started = time.monotonic()
    assert stop(service.process) == 0
    assert time.monotonic() - started < 10
    assert any("STOPPING=1" in m for m in service.messages + drain(service.notify))
    output = service.output()
    assert "Finished server process" in output and "agent stopped" in output
    again = subprocess.run(
        [str(SITEAGENT), "serve", "--config", str(service.config_file), "--once", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert json.loads(again.stdout)["capacity"] == now["capacity"]


def test_sigterm_does_not_wait_for_an_idle_keep_alive_connection(service: Service) -> None:
    """A client that keeps its connection open after a request, idle but still running, used
    to hold the stop for 30 s (the TLS close waited for the client's close_notify)."""
    wait_until("READY=1", lambda: service.said("READY=1"))
    context = ssl.create_default_context(cafile=str(service.state / "tls" / "server.crt"))
    idle = http.client.HTTPSConnection("127.0.0.1", service.port, context=context, timeout=30)
    idle.request("GET", "/healthz")
    answer = idle.getresponse()
    assert answer.status == 200 and answer.getheader("connection") != "close"
    answer.read()
    started = time.monotonic()
    assert stop(service.process) == 0
    assert time.monotonic() - started < 10, "the stop waited for the idle connection"
    idle.close()


def drain(sock: socket.socket) -> List[str]:
    messages = []
    while True:
        try:
            messages.append(sock.recv(4096).decode("utf-8"))
        except TimeoutError:
            return messages
