"""Use this when test_client.py needs a bank and replay agents as processes.

A marketplace for the client's integration tests: a bank (`siteagent ledger serve`) and
agents (`siteagent serve` on the replay backend) booking there, as real processes over HTTPS
on loopback, all admitting one buyer by the authorized-clients entry the test gives (the one
`siteagent-client keys` printed), and the buyer's sites file naming them.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, Mapping, Sequence

import yaml

from siteagent.protocol import keys
from testbed.inprocess.parties import Party
from testbed.inprocess.traces import write_trace
from testbed.processes.agents import BUSY_JOBS, SITEAGENT, Buyer, Service
from testbed.processes.programs import free_port


@dataclass
class MarketSite:
    """One agent: its name, address, certificate (the file its buyers trust) and process."""

    name: str
    url: str
    cert: Path
    service: Service


class Marketplace:
    """The bank and one agent per name of ``attributes`` (each name's ``site`` section
    beyond its name), admitting the buyer of ``clients`` (an authorized-clients mapping:
    key id -> public_key, user) with ``credit`` at the bank."""

    def __init__(
        self,
        tmp_path: Path,
        clients: Mapping[str, Mapping[str, Any]],
        attributes: Mapping[str, Mapping[str, Any]],
        credit: str = "100.00",
    ) -> None:
        self.tmp_path = tmp_path
        self.clients = clients
        self.sites: Dict[str, MarketSite] = {}
        site_keys = {name: self._site_key(name) for name in attributes}
        self.bank_config = self._bank_config(site_keys, credit)
        bank_port = yaml.safe_load(self.bank_config.read_text())["ledger"]["port"]
        self.bank_url = f"https://127.0.0.1:{bank_port}"
        self.bank_cert = tmp_path / "bank" / "tls" / "server.crt"
        self.bank = Service(
            ["ledger", "serve", "--config", str(self.bank_config)], tmp_path / "bank.log"
        )
        self.bank.wait_healthy("the bank", Buyer(self.bank_url, self.bank_cert, Party("nobody")))
        for name, site in attributes.items():
            self.sites[name] = self._start_agent(name, site)

    def _site_key(self, name: str) -> str:
        """The site's key, made where its agent will find it; its public key."""
        key = keys.load_or_create_site_key(self.tmp_path / name / "site.key")
        return keys.public_key_text(key.public_key())

    def _bank_config(self, site_keys: Mapping[str, str], credit: str) -> Path:
        participants = self._write(
            "participants.yaml",
            {
                "sites": {name: {"public_key": public} for name, public in site_keys.items()},
                "clients": {
                    key_id: {**entry, "credit": credit} for key_id, entry in self.clients.items()
                },
            },
        )
        ledger = {"participants": str(participants), "port": free_port()}
        return self._write(
            "bank.yaml", {"state_dir": str(self.tmp_path / "bank"), "ledger": ledger}
        )

    def _start_agent(self, name: str, site: Mapping[str, Any]) -> MarketSite:
        state, port = self.tmp_path / name, free_port()
        clients = self._write(f"{name}-clients.yaml", {"clients": dict(self.clients)})
        config = self._write(
            f"{name}.yaml",
            {
                "state_dir": str(state),
                "site": {"name": name, "cores_per_node": 16, **site},
                "backend": {
                    "type": "swf",
                    "swf": {"trace": write_trace(state / "t.swf", BUSY_JOBS, 64), "offset": 600},
                },
                "planner": {"poll_interval_s": 0.5},
                "security": {"authorized_clients": str(clients)},
                "api": {"listen": "127.0.0.1", "port": port},
                "ledger": {"url": self.bank_url, "ca": str(self.bank_cert)},
            },
        )
        service = Service(["serve", "--config", str(config)], self.tmp_path / f"{name}.log")
        url, cert = f"https://127.0.0.1:{port}", state / "tls" / "server.crt"
        service.wait_healthy(f"agent {name}", Buyer(url, cert, Party("nobody")))
        return MarketSite(name, url, cert, service)

    def deposit(self, account: str, amount: Decimal) -> None:
        """Fund ``account`` at the bank, as its administrator does."""
        subprocess.run(
            [
                str(SITEAGENT),
                "ledger",
                "deposit",
                account,
                str(amount),
                "--config",
                str(self.bank_config),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )

    def sites_file(self, key_id: str, private_key: Path, names: Sequence[str] = ()) -> Path:
        """The buyer's sites file: every agent (or those of ``names``) and the bank."""
        chosen = [self.sites[name] for name in names] if names else list(self.sites.values())
        document = {
            "buyer": {"key_id": key_id, "private_key": str(private_key)},
            "ledger": {"url": self.bank_url, "ca": str(self.bank_cert)},
            "timeouts": {"connect": 5, "read": 20},
            "sites": [
                {"name": site.name, "url": site.url, "ca": str(site.cert)} for site in chosen
            ],
        }
        return self._write("sites.yaml", document)

    def close(self) -> None:
        for site in self.sites.values():
            if site.service.process.poll() is None:
                site.service.stop()
        self.bank.stop()

    def _write(self, name: str, document: Dict[str, Any]) -> Path:
        path = self.tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(document), encoding="utf-8")
        return path
