"""`siteagent-client` as a buyer runs it, against three real agents and a real bank on
loopback (replay backends): the key pair `keys` makes is admitted by the entry it prints,
`sites` shows every site's info, `quote` asks the three at once and ranks their offers, a
site that refuses says why, a stopped site is a row (not a failure), and `balance` and
`statement` read the buyer's account at the bank after a deal confirmed through the library.

The client always runs as its own process (the installed `siteagent-client`), with a home
and configuration directory of its own, so that only its sites file and its options count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import yaml

from siteagent.client.connection import SiteConnection
from siteagent.client.sites import load_registry
from siteagent.protocol.models import QuoteRequest
from testbed.processes.agents import BUSY_JOBS
from testbed.processes.market import Market, SiteSpec

CLIENT = Path(sys.executable).parent / "siteagent-client"
BUYER = "alice@laptop"

#: hpc1 advertises its architecture; a request naming one is refused by the others.
ATTRIBUTES: Dict[str, Dict[str, Any]] = {
    "hpc1": {"architecture": "x86_64"},
    "hpc2": {},
    "hpc3": {},
}


class Client:
    """Runs `siteagent-client` in ``home`` (HOME and XDG_CONFIG_HOME point there)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = {
            **os.environ,
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "SITEAGENT_CLIENT_SITES": str(home / "absent.yaml"),
        }
        #: Where `keys` writes the private key by default.
        self.key = home / ".config" / "siteagent" / f"{BUYER}.key"

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(CLIENT), *args], env=self.env, capture_output=True, text=True, timeout=120
        )

    def json(self, *args: str, expect: int = 0) -> Any:
        done = self.run(*args, "--json")
        assert done.returncode == expect, done.stderr
        return json.loads(done.stdout)


@pytest.fixture(scope="module")
def buyer(tmp_path_factory: pytest.TempPathFactory) -> Client:
    """The buyer, with the key pair `siteagent-client keys` made in its config directory."""
    return Client(tmp_path_factory.mktemp("buyer"))


@pytest.fixture(scope="module")
def market(buyer: Client, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Market]:
    """Three agents and the bank, each admitting the buyer by the entry `keys` printed (the
    text an administrator pastes into the authorized-clients file, as it was printed)."""
    printed = buyer.run("keys", "--key-id", BUYER, "--user", "alice")
    assert printed.returncode == 0, printed.stderr
    assert buyer.key.stat().st_mode & 0o777 == 0o600
    entry = printed.stdout.split("with a credit):")[1].split("Your sites file")[0]
    clients = yaml.safe_load(entry)["clients"]
    assert list(clients) == [BUYER]
    specs = [
        SiteSpec(name, seed=0, offset=600, pricing={}, jobs=BUSY_JOBS, settings={"site": site})
        for name, site in ATTRIBUTES.items()
    ]
    made = Market(tmp_path_factory.mktemp("market"), specs, credit="100.00", authorized=clients)
    made.start()
    try:
        yield made
    finally:
        made.stop()


@pytest.fixture(scope="module")
def sites_file(buyer: Client, market: Market) -> Path:
    return market.sites_file_for(BUYER, buyer.key, "buyer-sites.yaml")


def statuses(answer: Dict[str, Any]) -> Dict[str, str]:
    return {row["site"]: row["status"] for row in answer["sites"]}


def test_sites_shows_each_sites_info(buyer: Client, sites_file: Path) -> None:
    shown = buyer.json("sites", "--sites", str(sites_file))
    assert statuses(shown) == {"hpc1": "ok", "hpc2": "ok", "hpc3": "ok"}
    for row in shown["sites"]:
        info = row["info"]
        assert info["site"]["name"] == row["site"] == info["public_key"]["keyid"]
        assert info["cluster"]["cores"] == 64
        assert row["latency_s"] > 0
    table = buyer.run("sites", "--sites", str(sites_file))
    assert table.returncode == 0, table.stderr
    for expected in ("hpc1", "hpc2", "hpc3", "x86_64", "16 cores/node", "(flat)"):
        assert expected in table.stdout


def test_the_entry_keys_printed_admits_the_buyer_at_every_site(
    buyer: Client, sites_file: Path
) -> None:
    """A quote is a signed POST: every site answering one accepted the buyer's key."""
    quoted = buyer.json("quote", "--sites", str(sites_file), "--cores", "8", "--walltime", "1h")
    assert statuses(quoted) == {"hpc1": "offered", "hpc2": "offered", "hpc3": "offered"}
    assert {offer["site"] for offer in quoted["offers"]} == {"hpc1", "hpc2", "hpc3"}


def test_quote_ranks_the_offers_of_all_sites(buyer: Client, sites_file: Path) -> None:
    base = ["quote", "--sites", str(sites_file), "--cores", "8", "--walltime", "1h"]
    cheapest = buyer.json(*base, "--alpha", "1")["offers"]
    totals = [Decimal(offer["total"]) for offer in cheapest]
    assert totals == sorted(totals) and [offer["rank"] for offer in cheapest][:2] == [1, 2]
    earliest = buyer.json(*base, "--alpha", "0")["offers"]
    ends = [offer["end"] for offer in earliest]
    assert ends == sorted(ends)
    table = buyer.run(*base, "--alpha", "1")
    assert table.returncode == 0, table.stderr
    first = next(line for line in table.stdout.splitlines() if line.startswith("│ 1 "))
    assert f" {min(totals)} " in first  # the table's first row is the cheapest offer


def test_a_refusal_is_shown_with_its_reason(buyer: Client, sites_file: Path) -> None:
    args = ["--sites", str(sites_file), "--cores", "8", "--walltime", "1h"]
    quoted = buyer.json("quote", *args, "--architecture", "x86_64")
    assert statuses(quoted) == {"hpc1": "offered", "hpc2": "refused", "hpc3": "refused"}
    reasons = {row["site"]: row["reason"] for row in quoted["sites"]}
    assert "architecture" in reasons["hpc2"] and reasons["hpc1"] == ""
    assert {offer["site"] for offer in quoted["offers"]} == {"hpc1"}
    everyone_refuses = buyer.run("quote", *args, "--architecture", "sparc")
    assert everyone_refuses.returncode == 3, everyone_refuses.stderr
    assert "refused" in everyone_refuses.stdout and "architecture" in everyone_refuses.stdout


def test_balance_and_statement_show_a_confirmed_deal(
    buyer: Client, market: Market, sites_file: Path
) -> None:
    market.deposit(BUYER, Decimal("500.00"))
    before = Decimal(buyer.json("balance", "--sites", str(sites_file))["balance"])
    hpc1 = load_registry(sites_file).select(["hpc1"])[0]
    with SiteConnection(hpc1) as connection:
        quote = connection.quote(QuoteRequest(walltime=3600, cores=8))
        tentative = connection.accept(quote.offers[0].offer_id, "test-balance-1")
        receipt = connection.confirm(tentative)
    price = Decimal(receipt.deal["price"])
    balance = buyer.json("balance", "--sites", str(sites_file))
    assert (balance["account"], Decimal(balance["balance"])) == (BUYER, before - price)
    assert Decimal(balance["credit"]) == Decimal("100.00")
    statement = buyer.json("statement", "--sites", str(sites_file))
    deals = [line for line in statement["lines"] if line["kind"] == "deal"]
    assert [line["receipt_id"] for line in deals][-1] == receipt.id
    assert Decimal(deals[-1]["amount"]) == -price
    table = buyer.run("statement", "--sites", str(sites_file))
    assert table.returncode == 0 and receipt.id[:16] in table.stdout.replace("\n", "")


def test_a_stopped_site_is_shown_failed_and_the_quote_still_succeeds(
    buyer: Client, market: Market, sites_file: Path
) -> None:
    """Stops hpc3 for good: this module's last test."""
    market.agents["hpc3"].service.stop()
    args = ["--sites", str(sites_file), "--cores", "8", "--walltime", "1h"]
    quoted = buyer.json("quote", *args)
    assert statuses(quoted) == {"hpc1": "offered", "hpc2": "offered", "hpc3": "failed"}
    failed = next(row for row in quoted["sites"] if row["site"] == "hpc3")
    assert "cannot connect" in failed["reason"]
    assert {offer["site"] for offer in quoted["offers"]} == {"hpc1", "hpc2"}
    table = buyer.run("quote", *args)
    assert table.returncode == 0, table.stderr
    lines: List[str] = [line for line in table.stdout.splitlines() if "hpc3" in line]
    assert lines and "failed" in lines[0]
    shown = buyer.json("sites", *args[:2])
    assert statuses(shown)["hpc3"] == "failed"
