"""The agents the service benchmark runs: a version of the package installed as users get it,
``siteagent serve`` of it on a fresh state directory, its log and its memory.

Two versions may run side by side (the working tree and a reference revision), so each is
given a configuration in the keys that version knows: an agent refuses a key it does not know.
"""

from __future__ import annotations

import multiprocessing
import re
import shutil
import signal
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Tuple

import httpx
import psutil
import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.common import INSTALLS, ROOT, compiled, installed_siteagent
from siteagent.protocol import keys

WORK = INSTALLS / "service"
POLL_S = 30.0
KEY_ID = "bench@service"
CYCLE_LINE = re.compile(r"(\d+) running, (\d+) pending, .* snapshot (\d+) ms, plan (\d+) ms")

#: Far above anything the bench sends or leaves behind (see :func:`unthrottled`).
UNLIMITED = 10**8


@dataclass(frozen=True)
class Build:
    """A version of the package, installed: its ``siteagent`` command, whether its scheduling
    engines are compiled, and the settings that keep its per-client limits out of the way."""

    name: str
    siteagent: str
    compiled: bool
    unthrottled: Mapping[str, Any]

    @classmethod
    def of(cls, name: str, source: Path) -> Build:
        """The tree at ``source``, installed (bench/common.py installed_siteagent)."""
        python = installed_siteagent(source)
        command = str(Path(python).parent / "siteagent")
        return cls(name, command, compiled(python), unthrottled(source))


def unthrottled(source: Path) -> Dict[str, Any]:
    """Settings that lift the per-client limits of the version at ``source``, in its keys.

    The bench's buyers are one client (one key) sending up to several hundred quotes a
    second, each of its offers live for 5 minutes. The front door's defaults (20 quotes/s in
    bursts of 100, 2,000 live offers and 20,000 signature nonces per client) would answer
    nearly all of them 429 or 503, and the latencies measured would be those of refusals; so
    they are set far above the load. The limits are still checked on every quote, so what
    they cost is measured. Before the front door (no ``api.rate_limits`` in its schema) the
    one such limit was a nonce cache shared by all clients (100,000), which the rounds of a
    fast level fill within the replay window.
    """
    schema = (source / "siteagent" / "config" / "schema.py").read_text()
    if "class RateLimits" not in schema:
        return {"security": {"nonce_cache_size": UNLIMITED}}
    rate = {"per_second": UNLIMITED, "burst": UNLIMITED}
    return {
        "api": {
            "rate_limits": {"quotes": rate, "reservations": rate},
            "max_live_offers_per_client": UNLIMITED,
        },
        "security": {"nonces_per_client": UNLIMITED},
    }


@dataclass
class RunningAgent:
    """A ``siteagent serve`` process and what a client needs to reach it."""

    process: subprocess.Popen[bytes]
    url: str
    cert: Path
    log: Path
    started: float
    ready_s: float = 0.0


def start_agent(
    build: Build,
    name: str,
    queue: Mapping[str, Any],
    key: Ed25519PrivateKey,
    settings: Mapping[str, Any],
) -> RunningAgent:
    """Write a configuration under bench/.work/service/NAME (fresh state) and start the agent
    of ``build`` on a free port, replaying the derived trace (bench/service.py).

    Returns once its /healthz answers 200 over HTTPS, that is after its first cycle.
    """
    root = WORK / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    clients = root / "authorized_clients.yaml"
    entry = {"public_key": keys.public_key_text(key.public_key()), "user": "bench"}
    clients.write_text(yaml.safe_dump({"clients": {KEY_ID: entry}}), encoding="utf-8")
    trace = {"trace": str(ROOT / queue["path"]), "speed": 1}
    config: Dict[str, Any] = {
        "state_dir": str(root / "state"),
        "backend": {"type": "swf", "swf": {**trace, "offset": queue["offset_s"]}},
        "planner": {"poll_interval_s": POLL_S},
        "security": {"authorized_clients": str(clients)},
        "api": {"listen": "127.0.0.1", "port": free_port()},
    }
    config = merged(merged(config, build.unthrottled), settings)
    (root / "siteagent.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    log = root / "agent.log"
    began = time.monotonic()
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [build.siteagent, "serve", "--config", str(root / "siteagent.yaml")],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"https://127.0.0.1:{config['api']['port']}"
    agent = RunningAgent(process, url, root / "state" / "tls" / "server.crt", log, began)
    wait_healthy(agent)
    agent.ready_s = time.monotonic() - began
    return agent


def merged(base: Mapping[str, Any], extra: Mapping[str, Any]) -> Dict[str, Any]:
    """``base`` with ``extra``'s keys, sections merged key by key."""
    result = dict(base)
    for key, value in extra.items():
        inner = result.get(key)
        if isinstance(inner, Mapping) and isinstance(value, Mapping):
            value = merged(inner, value)
        result[key] = value
    return result


def wait_healthy(agent: RunningAgent, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if agent.process.poll() is not None:
            raise RuntimeError(f"the agent exited:\n{agent.log.read_text(errors='replace')}")
        if agent.cert.exists():
            try:
                with httpx.Client(verify=tls_context(agent.cert), timeout=5) as client:
                    if client.get(agent.url + "/healthz").status_code == 200:
                        return
            except httpx.HTTPError:
                pass
        time.sleep(0.5)
    stop_agent(agent)
    raise RuntimeError(f"the agent was not healthy within {timeout:.0f} s; see {agent.log}")


def stop_agent(agent: RunningAgent) -> None:
    """SIGTERM, as systemd stops it; it must exit cleanly."""
    agent.process.send_signal(signal.SIGTERM)
    try:
        code = agent.process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        agent.process.kill()
        agent.process.wait()
        raise RuntimeError(f"the agent did not stop on SIGTERM; see {agent.log}") from None
    if code != 0:
        raise RuntimeError(f"the agent exited with {code}; see {agent.log}")


def tls_context(cert: Path) -> ssl.SSLContext:
    """Trust only the agent's own self-signed certificate."""
    return ssl.create_default_context(cafile=str(cert))


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def cycles(log: Path) -> List[Dict[str, int]]:
    """The agent's per-cycle log lines: queue, and the snapshot and plan times."""
    found = []
    for match in CYCLE_LINE.finditer(log.read_text(errors="replace")):
        running, pending, snap, planned = (int(g) for g in match.groups())
        found.append(
            {"running": running, "pending": pending, "snapshot_ms": snap, "plan_ms": planned}
        )
    return found


class RssSampler:
    """A process sampling another's resident memory every ``interval`` seconds until stopped:
    (time.monotonic(), MB) pairs. A process rather than a thread, so that the client
    processes forked meanwhile are forked from a process without threads."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        context = multiprocessing.get_context("fork")
        self.stop_event, self.results = context.Event(), context.Queue()
        arguments = (pid, interval, self.stop_event, self.results)
        self.process = context.Process(target=_sample, args=arguments)
        self.process.start()

    def stop(self) -> List[Tuple[float, float]]:
        self.stop_event.set()
        samples: List[Tuple[float, float]] = self.results.get(timeout=60)
        self.process.join()
        return samples


def _sample(pid: int, interval: float, stop: Any, results: Any) -> None:
    process = psutil.Process(pid)
    samples = []
    while not stop.is_set():
        samples.append((time.monotonic(), process.memory_info().rss / 2**20))
        time.sleep(interval)
    results.put(samples)
