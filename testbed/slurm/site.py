"""Use this when an English-auction test needs an agent on the Slurm test cluster.

An agent (``siteagent serve``) on the Slurm test cluster for English-auction tests: its
configuration, alice's key and sites entry, and its store read as the tests check it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

from siteagent.client.sites import Site, Timeouts
from siteagent.market.lifecycle import BidRecord
from siteagent.market.site import STORE_FILE
from siteagent.market.store import Store
from siteagent.protocol import keys
from testbed.inprocess.parties import Party
from testbed.processes.agents import Buyer, SlurmBatch
from testbed.processes.market import Service
from testbed.processes.ports import free_port
from testbed.slurm.cluster import SlurmTestCluster


class SlurmSite:
    """One agent on the Slurm test cluster, restartable, and alice's key and sites entry;
    ``sections`` add keys to the configuration's sections (``{"planner": {...}}``);
    ``accept_window_s``: a winner's time to accept (short, so that a test outwaits it)."""

    def __init__(
        self,
        cluster: SlurmTestCluster,
        root: Path,
        sections: Optional[Dict[str, Dict[str, Any]]] = None,
        accept_window_s: int = 3,
    ) -> None:
        self.cluster = cluster
        self.state = root / "state"
        self.alice = Party("alice@laptop")
        clients = root / "clients.yaml"
        entry = {"public_key": keys.public_key_text(self.alice.key.public_key()), "user": "root"}
        clients.write_text(yaml.safe_dump({"clients": {self.alice.key_id: entry}}))
        port = free_port()
        config = root / "siteagent.yaml"
        settings = {
            "state_dir": str(self.state),
            "site": {"name": "slurm1", "cores_per_node": 16},
            "backend": SlurmBatch(cluster).backend_config(root),
            "planner": {"poll_interval_s": 0.5},
            "security": {"authorized_clients": str(clients)},
            "api": {"listen": "127.0.0.1", "port": port},
            "auctions": {"accept_window_s": accept_window_s},
        }
        for section, keys_added in (sections or {}).items():
            settings[section] = {**settings.get(section, {}), **keys_added}
        config.write_text(yaml.safe_dump(settings))
        self.url = f"https://127.0.0.1:{port}"
        self.buyer = Buyer(self.url, self.state / "tls" / "server.crt", self.alice)
        self.service = Service(["serve", "--config", str(config)], root / "agent.log", self.buyer)
        self.key_file = root / "alice.key"
        keys.write_private(self.key_file, keys.private_key_pem(self.alice.key))

    def site(self) -> Site:
        return Site(
            name="slurm1",
            url=self.url,
            ca=self.buyer.cert,
            pin=None,
            key_id=self.alice.key_id,
            private_key=self.key_file,
            timeouts=Timeouts(connect=5, read=60),
        )

    def store(self) -> Store:
        return Store(str(self.state / STORE_FILE))

    def bids(self) -> List[BidRecord]:
        store = self.store()
        try:
            return store.bids()
        finally:
            store.close()

    def bid(self, auction_id: str) -> Any:
        return next((b for b in self.bids() if b.auction_id == auction_id), None)
