"""``siteagent slots`` and ``siteagent quote`` on the replay backend, in-process, on a temporary
state directory: 16 cores, 8 of them busy for ten hours, and a queued job of 12 cores for one
hour that can only start when they are free.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

from siteagent.cli.console import EXIT_BAD_INPUT
from siteagent.cli.main import main
from siteagent.market.quoting import ACCEPT_LEAD_S
from testbed.inprocess.traces import write_trace

H = 3600
SLOT_KEYS = {"start", "duration", "cores", "unit_price", "fee", "divisible", "extensible"}
#: The API's offer keys: what ``siteagent reservations accept`` takes, and when it lapses.
OFFER_KEYS = {"start", "end", "cores", "unit_price", "fee", "total", "offer_id", "expires"}


@pytest.fixture
def site(tmp_path: Path) -> List[str]:
    """``--config`` and ``--state-dir`` of a small replayed cluster, at price ``c = 2``."""
    trace = write_trace(
        tmp_path / "t.swf", [(0, 10 * H, 8, 10 * H), (0, H, 12, H), (500000, 10, 1, 10)], 16
    )
    config = tmp_path / "siteagent.yaml"
    config.write_text(
        f"backend: {{type: swf, swf: {{trace: {trace}, offset: 0}}}}\n"
        "pricing: {flat: {price: 2}}\n",
        encoding="utf-8",
    )
    return ["--config", str(config), "--state-dir", str(tmp_path / "state")]


def hours(now: int, t: int) -> float:
    """Hours from ``now`` to ``t``, to the hundredth: the replayed clock has run a few seconds
    since the trace's first job started, which these tests count from."""
    return round((t - now) / H, 2)


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Dict[str, Any]:
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_slots_json(site: List[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Free: 8 cores until the big job starts (at 10 h), 4 while it runs, then 16. Bands: 4
    cores free from now on (open), 4 more until 10 h (closed by the job), 12 from 11 h."""
    answer = run_json(capsys, "slots", *site)
    assert set(answer) == {"now", "unit", "slots"} and answer["unit"] == "core"
    now, slots = answer["now"], answer["slots"]
    assert all(set(slot) == SLOT_KEYS for slot in slots)
    shape = sorted(
        (hours(now, s["start"]), s["cores"], s["divisible"], s["extensible"]) for s in slots
    )
    assert shape == [(0, 4, False, False), (0, 4, True, True), (11, 12, True, True)]
    assert {(s["unit_price"], s["fee"]) for s in slots} == {("2", "0")}
    bounded = next(s for s in slots if not s["divisible"])
    assert hours(now, bounded["start"] + bounded["duration"]) == 10
    assert run_json(capsys, "slots", "--min-cores", "5", *site)["slots"] == [
        s for s in slots if s["cores"] >= 5
    ]
    price = run_json(capsys, "slots", "--price", "0.5", *site)["slots"]
    assert {s["unit_price"] for s in price} == {"0.5"}


def test_quote_json(site: List[str], capsys: pytest.CaptureFixture[str]) -> None:
    """10 cores for 10 h: 8 are free until 10 h, so the earliest start is 10 h, where the window
    pushes the queued 12-core job back 10 h: fee 12 x 10 = 120. From 11 h it delays nobody.
    At c = 2: totals 2·10·10 + 120 = 320 and 200."""
    request = ["quote", "--cores", "10", "--duration", "10h", *site]
    answer = run_json(capsys, *request, "--alpha", "0")
    assert set(answer) == {"status", "now", "snapshot_time", "unit", "offers", "chosen"} | {
        "alternatives"  # the offers under their name before 0.2, kept for older scripts
    }
    alternatives = answer["offers"]
    assert answer["alternatives"] == alternatives and answer["status"] == "offered"
    assert all(set(row) == OFFER_KEYS for row in alternatives)
    first, free, now = alternatives[0], alternatives[-1], answer["now"]
    assert (hours(now, first["start"]), first["end"] - first["start"]) == (10, 10 * H)
    assert (first["cores"], first["unit_price"]) == (10, "2")
    assert (first["fee"], first["total"]) == ("120.00", "320.00")
    assert (hours(now, free["start"]), free["fee"], free["total"]) == (11, "0", "200.00")
    assert answer["chosen"] == 0
    cheapest = run_json(capsys, *request, "--alpha", "1")
    assert cheapest["chosen"] == len(cheapest["offers"]) - 1
    no_fee = run_json(capsys, *request, "--no-fee", "--price", "1")["offers"][0]
    assert (no_fee["fee"], no_fee["total"]) == ("0", "100.00")


def test_quote_earliest_and_load_price(site: List[str], capsys: pytest.CaptureFixture[str]) -> None:
    """--earliest moves the first start (by default a minute out, the buyer's time to accept);
    --load START MIN ROUNDS prices by load: 8 of the 16 cores are allocated over the first
    hour, L = 0.5, Δ = (10 - 4)(1 - 0.5)/3 = 1: 9."""
    request = ["quote", "--cores", "4", "--duration", "1h", *site]
    now_answer = run_json(capsys, *request)
    assert now_answer["offers"][0]["start"] == now_answer["now"] + ACCEPT_LEAD_S
    later = run_json(capsys, *request, "--earliest", "+2h")
    assert later["offers"][0]["start"] == later["now"] + 2 * H
    loaded = run_json(capsys, *request, "--load", "10", "4", "3")["offers"][0]
    assert loaded["unit_price"] == "9.00"


def test_tables_are_readable(site: List[str], capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["slots", *site]) == 0
    out = capsys.readouterr().out
    assert "3 advertised slots on swf (16 cores)" in out and "{" not in out
    assert main(["quote", "--cores", "10", "--duration", "10h", "--alpha", "0", *site]) == 0
    out = capsys.readouterr().out
    assert "alternatives (alpha 0.0)" in out and "<- chosen" in out and "320.00" in out


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--cores", "0", "--duration", "1h"], "--cores must be at least 1, got 0"),
        (["--cores", "2", "--duration", "0"], "--duration must be at least 1, got 0"),
        (["--cores", "2", "--duration", "1h", "--alpha", "2"], "--alpha must be between 0 and 1"),
        (["--cores", "2", "--duration", "1h", "--limit", "0"], "--limit must be at least 1"),
        (["--cores", "2", "--duration", "1h", "--load", "3", "4", "2"], "--load expects"),
        (["--cores", "2", "--duration", "1h", "--earliest", "soon"], "invalid time 'soon'"),
    ],
)
def test_bad_quote_input_names_the_option(
    site: List[str], capsys: pytest.CaptureFixture[str], argv: List[str], says: str
) -> None:
    capsys.readouterr()
    assert main(["quote", *argv, *site]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_bad_slots_input_names_the_option(
    site: List[str], capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["slots", "--min-cores", "0", *site]) == EXIT_BAD_INPUT
    assert "--min-cores" in capsys.readouterr().err
