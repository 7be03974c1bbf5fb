"""``siteagent-client auction``, ``recover`` and ``reservations`` in-process, where no site is
needed: inputs refused with what to fix, and the journal read offline. (Against real agents:
tests/integration/test_client_auction.py.)"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from siteagent.cli.console import EXIT_BAD_INPUT
from siteagent.cli.main import client_main
from siteagent.client.journal import Journal
from siteagent.client.reverse_auction import Bid
from testbed.inprocess.buyer_files import sites_file
from testbed.inprocess.parties import Party


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """A sites file naming one site that is not there, and where the journal goes."""
    ca = tmp_path / "ca.pem"
    ca.write_text("not used\n", encoding="utf-8")
    sites_file(tmp_path, Party("alice@laptop"), [("hpc1", "https://127.0.0.1:1", ca)])
    return tmp_path


def run(files: Path, *args: str) -> int:
    return client_main(
        [*args, "--sites", str(files / "sites.yaml"), "--journal", str(files / "j.db")]
    )


def journal_with_a_confirmed_part(files: Path) -> None:
    journal = Journal(files / "j.db")
    auction = journal.open_auction({"parts": 1})
    bid = Bid(
        "hpc1",
        0,
        1,
        0,
        "o-1",
        1_800_000_600,
        1_800_004_200,
        8,
        Decimal(1),
        Decimal(0),
        Decimal("8.00"),
        1_800_000_300,
    )
    entry = journal.tentative(journal.accepting(auction.id, bid), "r-1", {"price": "8.00"}, None)
    journal.confirmed(journal.confirming(entry), {"id": "receipt-1"})
    journal.close()


@pytest.mark.parametrize(("option", "value"), [("--parts", "0"), ("--rounds", "0")])
def test_an_auction_needs_a_part_and_a_round(
    files: Path, option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["auction", "--cores", "8", "--walltime", "1h", option, value]
    assert run(files, *args) == EXIT_BAD_INPUT
    assert "--parts and --rounds must be at least 1" in capsys.readouterr().err


def test_an_auction_without_a_size_says_how_to_give_one(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(files, "auction", "--walltime", "1h") == EXIT_BAD_INPUT
    assert "--cores N" in capsys.readouterr().err
    assert not (files / "j.db").exists() or Journal(files / "j.db").auctions() == []


def test_reservations_are_listed_from_the_journal_offline(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal_with_a_confirmed_part(files)
    assert run(files, "reservations", "list", "--json") == 0
    (listed,) = json.loads(capsys.readouterr().out)["reservations"]
    assert (listed["site"], listed["reservation_id"], listed["state"]) == (
        "hpc1",
        "r-1",
        "confirmed",
    )


def test_an_unknown_reservation_is_named(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal_with_a_confirmed_part(files)
    assert run(files, "reservations", "cancel", "hpc2:r-1") == EXIT_BAD_INPUT
    said = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert "knows no reservation hpc2:r-1" in said


def test_recover_with_nothing_unsettled_asks_no_site(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal_with_a_confirmed_part(files)  # hpc1 is not there: asking it would fail
    assert run(files, "recover") == 0
    assert "Nothing to recover" in capsys.readouterr().out
