"""docs/federation.md, run as written: a bank and three agents on the
replay backend, set up by a new administrator's commands in its order.

Every block the page marks ``<!-- federation: KIND -->`` is taken from the page itself,
so that the documentation and this test cannot drift apart:

- ``run``: a shell script, run with bash in the federation's directory; it must succeed;
- ``file NAME``: written to NAME, with each ``<NAME's public key>`` replaced by the key that
  an earlier command printed for NAME (as the administrator pastes it);
- ``start``: one long-running service per line, started in the background; the test waits
  until its ``/healthz`` answers over HTTPS (its address and certificate read from the
  configuration the line names);
- ``after a deal``: run once the test, as the buyer, has quoted, accepted and confirmed at
  hpc1 with the key the page made, signing as the protocol says.

The directory is ``fed/`` beside a ``traces/`` that is the repository's, as in a checkout.
Ports are the page's, each replaced by a free one.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

from siteagent.config import loading
from siteagent.protocol import documents
from siteagent.protocol.keys import load_private_key
from testbed.inprocess.parties import Party
from testbed.processes.agents import Buyer
from testbed.processes.ports import free_port
from testbed.processes.programs import require_programs, stop, wait_until

ROOT = Path(__file__).resolve().parents[2]

#: A marked block of the page: its kind and its text.
BLOCK = re.compile(r"<!-- federation: (?P<kind>[^>]+?) -->\n```[a-z]*\n(?P<text>.*?)\n```", re.S)

#: The ports the page uses: the bank's and the agents'.
PAGE_PORTS = ("8443", "8444", "8445", "8446")

#: What `siteagent keys` prints for a site or a client: its entry's name and public key.
PRINTED_KEY = re.compile(r"^  (?P<name>\S+):\n    public_key: (?P<key>\S+)$", re.M)

#: Where an administrator pastes a printed key.
PLACEHOLDER = re.compile(r"<(?P<name>\S+)'s public key>")


@dataclass(frozen=True)
class Step:
    kind: str
    text: str


def federation_steps() -> List[Step]:
    """The marked blocks of docs/federation.md, in order."""
    page = (ROOT / "docs/federation.md").read_text(encoding="utf-8")
    return [Step(m["kind"], m["text"]) for m in BLOCK.finditer(page)]


class Administrator:
    """Runs the README's steps in ``fed``, remembering the keys printed and the services."""

    def __init__(self, fed: Path) -> None:
        self.fed = fed
        self.ports = {port: str(free_port()) for port in PAGE_PORTS}
        self.printed_keys: Dict[str, str] = {}
        self.services: List[subprocess.Popen[bytes]] = []
        bin_dir = str(Path(sys.executable).parent)
        self.env = {
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "HOME": str(fed.parent),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
        }

    def text(self, step: Step) -> str:
        """The step's text with this run's ports."""
        return re.sub(r"\b(8443|8444|8445|8446)\b", lambda m: self.ports[m[1]], step.text)

    def run(self, step: Step) -> str:
        script = self.text(step)
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", script],
            cwd=self.fed,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"
        for printed in PRINTED_KEY.finditer(done.stdout):
            self.printed_keys[printed["name"]] = printed["key"]
        healthy = done.stdout.count('"status":"ok"')
        assert healthy == script.count("/healthz"), done.stdout
        return done.stdout

    def write(self, step: Step) -> None:
        name = step.kind.split(" ", 1)[1]
        text = PLACEHOLDER.sub(lambda m: self.printed_keys[m["name"]], self.text(step))
        (self.fed / name).write_text(text + "\n", encoding="utf-8")

    def start(self, step: Step) -> None:
        for line in self.text(step).splitlines():
            arguments = shlex.split(line)
            config = self.fed / arguments[arguments.index("--config") + 1]
            log = config.with_suffix(".log")
            with open(log, "ab") as out:
                process = subprocess.Popen(
                    arguments, cwd=self.fed, env=self.env, stdout=out, stderr=subprocess.STDOUT
                )
            self.services.append(process)
            self.wait_healthy(process, self.service_of(arguments, config), log)

    def service_of(self, arguments: List[str], config: Path) -> Buyer:
        """Who reaches the service a command line starts: its URL and certificate."""
        loaded = loading.load(config)
        listener = loaded.ledger if arguments[1] == "ledger" else loaded.api
        url = f"https://{listener.listen}:{listener.port}"
        return Buyer(url, loaded.api.tls.cert, Party("nobody"))

    def wait_healthy(self, process: subprocess.Popen[bytes], client: Buyer, log: Path) -> None:
        def up() -> bool:
            if process.poll() is not None:
                pytest.fail(f"the service of {log.name} exited:\n{log.read_text(errors='replace')}")
            return client.cert.exists() and client.call("GET", "/healthz").status == 200

        wait_until(f"{client.url}/healthz", up)

    def stop_all(self) -> None:
        for process in reversed(self.services):
            assert stop(process) == 0, process.args


@pytest.fixture
def administrator(tmp_path: Path) -> Iterator[Administrator]:
    require_programs("curl")
    (tmp_path / "traces").symlink_to(ROOT / "traces")
    fed = tmp_path / "fed"
    fed.mkdir()
    admin = Administrator(fed)
    try:
        yield admin
    finally:
        admin.stop_all()


def buy_at_hpc1(admin: Administrator) -> Dict[str, object]:
    """Quote, accept and confirm as alice at hpc1, with the key and certificate the README's
    steps made; the confirmed reservation."""
    config = loading.load(admin.fed / "hpc1.yaml")
    alice = Party("alice@laptop", load_private_key(admin.fed / "alice" / "client.key"))
    buyer = Buyer(f"https://127.0.0.1:{config.api.port}", config.api.tls.cert, alice)
    reservation = buyer.reserve()
    body = documents.confirm_body(reservation["deal"], alice.key, alice.key_id)
    status, confirmed = buyer.request("POST", f"/v1/reservations/{reservation['id']}/confirm", body)
    assert status == 200, confirmed
    assert confirmed["state"] == "CONFIRMED"
    return confirmed


def test_the_readme_federation_set_up_works_as_written(administrator: Administrator) -> None:
    steps = federation_steps()
    kinds = [step.kind.split(" ")[0] for step in steps]
    assert kinds.count("start") == 2 and kinds[-1] == "after" and "file" in kinds
    confirmed: Dict[str, object] = {}
    for step in steps:
        if step.kind == "run":
            administrator.run(step)
        elif step.kind.startswith("file "):
            administrator.write(step)
        elif step.kind == "start":
            administrator.start(step)
        elif step.kind == "after a deal":
            confirmed = buy_at_hpc1(administrator)
            shown = administrator.run(step)
        else:
            pytest.fail(f"the README marks a block {step.kind!r} this test does not know")
    assert set(administrator.printed_keys) == {"alice@laptop", "hpc1", "hpc2", "hpc3"}
    receipt = confirmed["receipt"]
    assert isinstance(receipt, dict)
    deal = receipt["deal"]
    # the statement shows the deal by its receipt id, and hpc1 was paid its price
    assert receipt["id"] in "".join(shown.split())
    assert f"hpc1: {Decimal(deal['price']):.2f}" in shown
    assert not (administrator.fed / "hpc1-state" / "ledger.sqlite3").exists()  # booked at the bank
