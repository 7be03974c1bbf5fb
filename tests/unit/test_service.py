"""What a SIGHUP reload changes in a running agent, and what it leaves for a restart.

The signals themselves are tested on a real process in tests/integration/test_service.py;
here the reload's decisions are checked on an assembled (not served) agent.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from siteagent.cli.main import main
from siteagent.config import loading, schema
from siteagent.daemon.assemble import Parts, assemble
from siteagent.daemon.reload import apply, changed_keys, keep_restart_settings
from siteagent.ledger.bank import Ledger
from siteagent.market.site import Site, open_site
from siteagent.protocol import keys
from testbed.parties import Party
from testbed.traces import write_trace


def settings(tmp_path: Path, **sections: Any) -> schema.Config:
    trace = write_trace(tmp_path / "t.swf", [(0, 3600, 8, 3600)], 16)
    document: Dict[str, Any] = {
        "state_dir": str(tmp_path / "state"),
        "backend": {"type": "swf", "swf": {"trace": trace, "offset": 0}},
        **sections,
    }
    return loading.parse(document, tmp_path / "siteagent.yaml")


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Tuple[Site, Parts]]:
    site = open_site(settings(tmp_path))
    parts = assemble(site)
    yield site, parts
    parts.deals.close()
    site.close()


def test_changes_are_sorted_into_applied_now_and_needing_a_restart(tmp_path: Path) -> None:
    old = settings(tmp_path)
    new = settings(
        tmp_path,
        pricing={"flat": {"price": "2.50"}},
        api={"port": 9443},
        reservations={"confirm_timeout_s": 30, "name_prefix": "xx-"},
    )
    applied, pending = changed_keys(old, new)
    assert applied == ["pricing.flat.price", "reservations.confirm_timeout_s"]
    # the port moves the default public names with it
    assert pending == ["reservations.name_prefix", "api.port", "api.public_names"]
    kept = keep_restart_settings(old, new)
    assert (kept.api.port, kept.reservations.name_prefix) == (8443, "sa-")
    assert kept.pricing.flat.price == Decimal("2.50")
    assert kept.reservations.confirm_timeout_s == 30


def test_a_reload_reaches_every_running_object(running: Tuple[Site, Parts], tmp_path: Path) -> None:
    site, parts = running
    alice = Party("alice@laptop")
    ledger = parts.deals.ledger
    assert isinstance(ledger, Ledger) and alice.key_id not in ledger.balances()
    new = settings(
        tmp_path,
        pricing={"flat": {"price": "3"}, "cancellation_penalty": "0.5"},
        planner={"poll_interval_s": 5, "policy": "easy"},
        reservations={"confirm_timeout_s": 45},
        security={"signature_max_age_s": 60},
        metrics={"reference_requests": [{"name": "tiny", "cores": 1, "duration_s": 60}]},
    )
    clients = {alice.key_id: alice.client("alice")}
    apply(site, parts, new, clients)
    assert site.config is new
    assert site.pricing.describe()["unit_price"]["price_per_core_hour"] == "3"
    assert site.manager.confirm_timeout == 45
    assert site.manager.penalty_factor == Decimal("0.5")
    assert parts.agent.pricing is site.pricing
    assert (parts.agent.poll_interval_s, parts.metrics.poll_interval_s) == (5, 5)
    assert parts.agent.policy.value == "easy"
    assert [shape.name for shape in parts.metrics.reference_requests] == ["tiny"]
    assert parts.authenticator.clients == clients and parts.authenticator.max_age_s == 60
    # a new client gets its ledger account at once, so its first receipt can be booked
    assert alice.key_id in ledger.balances()


def test_new_prices_apply_to_the_next_quote_not_the_next_poll(
    running: Tuple[Site, Parts], tmp_path: Path
) -> None:
    site, parts = running
    parts.agent.cycle()
    assert parts.agent.state is not None
    before = parts.agent.state.taken_at
    apply(site, parts, settings(tmp_path, pricing={"flat": {"price": "3"}}), {})
    state = parts.agent.state
    assert state is not None and state.taken_at == before  # no poll: the same snapshot
    assert state.market.pricing is site.pricing
    assert {slot.unit_price for slot in state.market.slots} == {Decimal("3")}


def test_the_site_key_is_made_once_and_kept(running: Tuple[Site, Parts]) -> None:
    site, parts = running
    again = keys.load_or_create_site_key(site.config.security.site_key)
    assert keys.public_key_text(again.public_key()) == keys.public_key_text(
        parts.deals.site_key.public_key()
    )
    assert parts.deals.site_key_id == site.config.site.name


@pytest.mark.parametrize("command", [["serve"], ["ledger", "serve"]])
@pytest.mark.parametrize(
    "option, expected",
    [(["--port", "70000"], "--port: expected"), (["--listen", "not an address!"], "--listen")],
)
def test_a_bad_listener_option_is_refused_naming_it(
    command: List[str],
    option: List[str],
    expected: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The agent and the ledger service check --listen/--port as the file's values, before
    anything starts."""
    code = main([*command, *option, "--state-dir", str(tmp_path)])
    assert code == 1
    assert expected in capsys.readouterr().err
    assert not (tmp_path / "siteagent.sqlite3").exists()
