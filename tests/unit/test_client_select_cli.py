"""``siteagent-client select`` and ``odds`` in-process against scripted HTTPS sites: what they
ask each site, their tables and JSON, and their exit codes."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
import yaml

from siteagent.cli.console import EXIT_BAD_INPUT, EXIT_REFUSED, EXIT_UNAVAILABLE
from siteagent.cli.options import local_time
from testbed.inprocess.buyer_files import run_client, sites_file
from testbed.inprocess.https_stub import Canned, HttpsStub, https_stub, site_info
from testbed.inprocess.parties import Party
from testbed.inprocess.provisioning import wait_bin, wait_history

BUYER = Party("alice@laptop")
H = 3600
NOW = 1_800_000_000


def info(name: str, mhz: int, cores: int) -> Dict[str, Any]:
    """The site's /v1/info: its clock rate and its size."""
    answer = site_info(Party(name))
    answer["site"].update({"name": name, "cpu_speed_mhz": mhz})
    cluster = {"backend": "swf", "unit": "core", "capacity": cores, "cores": cores}
    answer["cluster"] = {**cluster, "nodes": None, "snapshot_time": NOW}
    return answer


def waits(**bounds: Optional[int]) -> Dict[str, Any]:
    """One bin, 1-4 cores asking up to an hour, its quantiles bounded: q50=..., q95=..."""
    return wait_history(wait_bin([1, 4], [0, H], **bounds)).model_dump(mode="json")


def slots(free_now: int) -> Dict[str, Any]:
    """``free_now`` cores free from now, and 64 more from an hour on (not free now)."""
    return {
        "now": NOW,
        "unit": "core",
        "slots": [
            {"start": start, "duration": H, "cores": cores, "unit_price": "1", "fee": "0",
             "divisible": True, "extensible": True}
            for start, cores in ((NOW, free_now), (NOW + H, 64))
        ],
    }  # fmt: skip


@pytest.fixture
def market(tmp_path: Path) -> Iterator[Tuple[Path, HttpsStub, HttpsStub]]:
    """hpc1: 3.6 GHz, 64 cores (16 free now), median wait at most 600 s; hpc2: 1.8 GHz, 128
    cores (64 free now), at most 60 s; hpc3 is not there."""
    with contextlib.ExitStack() as stack:
        hpc1, hpc2 = (stack.enter_context(https_stub(tmp_path / n)) for n in ("hpc1", "hpc2"))
        for stub, (name, mhz, cores, wait, free) in zip(
            (hpc1, hpc2), (("hpc1", 3600, 64, 600, 16), ("hpc2", 1800, 128, 60, 64))
        ):
            stub.answer("GET", "/v1/info", Canned(body=info(name, mhz, cores)))
            stub.answer("GET", "/v1/history/waits", Canned(body=waits(q50=wait, q95=None)))
            stub.answer("GET", "/v1/slots?limit=1000", Canned(body=slots(free)))
        entries = [("hpc1", hpc1.url, hpc1.cert), ("hpc2", hpc2.url, hpc2.cert)]
        entries.append(("hpc3", "https://127.0.0.1:1", hpc1.cert))
        sites = sites_file(tmp_path, BUYER, entries)
        yield sites, hpc1, hpc2


def write_bag(path: Path, tasks: List[Dict[str, Any]]) -> str:
    path.write_text(yaml.safe_dump({"tasks": tasks}), encoding="utf-8")
    return str(path)


#: Five 4-core tasks of 3.6e6 Mcycles (1,000 s at hpc1, 2,000 s at hpc2), and one of 128
#: cores, larger than hpc1 and than what hpc2 has free.
BAG = [
    {"id": "a", "cores": 4, "work": 3.6e6, "count": 5},
    {"id": "big", "cores": 128, "runtime": 60},
]


def test_select_gives_each_task_the_soonest_site_with_room(
    market: Tuple[Path, HttpsStub, HttpsStub], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """hpc1 finishes a task in 600 + 1,000 s, hpc2 in 60 + 2,000 s: hpc1 takes the four it
    has cores free for, hpc2 the fifth; ``big`` fits neither's free cores."""
    sites, hpc1, _ = market
    bag = write_bag(tmp_path / "bag.yaml", BAG)
    began = int(time.time())
    code, out, _ = run_client(
        capsys, "select", bag, "--capacity", "free", "--sites", str(sites), "--json"
    )
    assert code == 0
    answer = json.loads(out)
    tasks = [(t["task"], t["site"], t["wait_bound_s"], t["run_s"]) for t in answer["tasks"]]
    assert tasks == [(f"a/{k}", "hpc1", 600, 1000.0) for k in range(1, 5)] + [
        ("a/5", "hpc2", 60, 2000.0)
    ]
    first = answer["tasks"][0]
    assert began <= answer["now"] <= int(time.time())
    assert (first["start_by"], first["done_by"]) == (answer["now"] + 600, answer["now"] + 1600)
    assert answer["unassigned"] == ["big"]
    per_site = {s["site"]: (s["status"], s["tasks"], s["cores_assigned"], s["capacity"])
                for s in answer["sites"]}  # fmt: skip
    assert per_site == {
        "hpc1": ("ok", 4, 16, 16),
        "hpc2": ("ok", 1, 4, 64),
        "hpc3": ("failed", 0, 0, None),
    }
    assert "cannot connect" in answer["sites"][2]["reason"]
    assert "state" not in answer  # nothing reserved
    asked = [(r.method, r.path) for r in hpc1.received]
    assert asked == [
        ("GET", "/v1/info"),
        ("GET", "/v1/history/waits"),
        ("GET", "/v1/slots?limit=1000"),
    ]


def test_select_counts_a_sites_cores_as_its_room_unless_told(
    market: Tuple[Path, HttpsStub, HttpsStub], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """By default hpc1's room is its 64 cores: all five tasks go there, and ``big`` goes to
    hpc2, which has 128 cores (it publishes no bound for jobs so large: it waits as long as
    hpc2's largest bound, 60 s). The table shows it, and the sites' totals."""
    sites, hpc1, _ = market
    bag = write_bag(tmp_path / "bag.yaml", BAG)
    code, out, _ = run_client(capsys, "select", bag, "--sites", str(sites), "--json")
    assert code == 0
    answer = json.loads(out)
    assert [(t["task"], t["site"]) for t in answer["tasks"]] == [
        *((f"a/{k}", "hpc1") for k in range(1, 6)),
        ("big", "hpc2"),
    ]
    assert answer["unassigned"] == []
    assert ("GET", "/v1/slots?limit=1000") not in [(r.method, r.path) for r in hpc1.received]
    code, out, _ = run_client(capsys, "select", bag, "--sites", str(sites))
    assert code == 0
    lines = out.splitlines()
    a1 = next(line for line in lines if "a/1" in line)
    assert "hpc1" in a1 and "10 min (600 s)" in a1
    hpc1_total = next(line for line in lines if line.startswith("│ hpc1") and "ok" in line)
    assert [cell.strip() for cell in hpc1_total.split("│")[1:6]] == ["hpc1", "ok", "5", "20", "64"]
    assert any(line.startswith("│ hpc3") and "failed" in line for line in lines)
    assert "select: 6 task(s) assigned" in out


def test_select_exit_codes(
    market: Tuple[Path, HttpsStub, HttpsStub], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sites = str(market[0])
    big = write_bag(tmp_path / "big.yaml", [{"id": "big", "cores": 256, "runtime": 60}])
    code, out, err = run_client(capsys, "select", big, "--sites", sites)
    assert code == EXIT_REFUSED and "no task can be assigned" in err
    assert "Left for later (no site can run them or has room): big" in out
    bag = write_bag(tmp_path / "bag.yaml", BAG)
    code, _, err = run_client(capsys, "select", bag, "--sites", sites, "--site", "hpc3")
    assert code == EXIT_UNAVAILABLE and "no site answered" in err
    code, _, err = run_client(capsys, "select", bag, "--sites", sites, "--probability", "1")
    assert code == EXIT_BAD_INPUT and "--probability must be in (0, 1)" in err
    journal = tmp_path / "journal.db"
    code, _, _ = run_client(
        capsys, "select", big, "--sites", sites, "--reserve", "--journal", str(journal)
    )
    assert code == EXIT_REFUSED and not journal.exists()  # nothing to reserve, nothing journaled


def quoted(start_by: int) -> Dict[str, Any]:
    """hpc1's offers: 9.00 an hour before ``start_by``, 8.00 ten minutes before."""
    return {
        "status": "offered",
        "now": NOW,
        "offers": [
            {"offer_id": name, "start": start, "end": start + 1800, "cores": 2,
             "unit_price": "1", "fee": "0", "total": total, "expires": start_by}
            for name, start, total in (("early", start_by - H, "9.00"),
                                       ("late", start_by - 600, "8.00"))
        ],
    }  # fmt: skip


def test_odds_shows_the_cheapest_reservation_by_then_beside_when_to_submit(
    market: Tuple[Path, HttpsStub, HttpsStub], capsys: pytest.CaptureFixture[str]
) -> None:
    """hpc1 offers and bounds the 0.95-quantile at 1,800 s; hpc2 refuses and bounds nothing
    at 0.95; hpc3 is not there."""
    sites, hpc1, hpc2 = market
    start_by = int(time.time()) + 2 * H
    hpc1.answer("POST", "/v1/quotes", Canned(body=quoted(start_by)))
    hpc1.answer("GET", "/v1/history/waits", Canned(body=waits(q50=600, q95=1800)))
    refusal = {"code": "no_offer", "reason": "full until then", "field": None}
    hpc2.answer(
        "POST",
        "/v1/quotes",
        Canned(body={"status": "refused", "now": NOW, "offers": [], "refusal": refusal}),
    )
    args = ["odds", "--cores", "2", "--walltime", "30m", "--start", str(start_by)]
    code, out, _ = run_client(capsys, *args, "--sites", str(sites), "--json")
    assert code == 0
    answer = json.loads(out)
    assert answer["request"] == {
        "cores": 2,
        "walltime": 1800,
        "start_by": start_by,
        "probability": 0.95,
    }
    rows = {row["site"]: row for row in answer["sites"]}
    assert (rows["hpc1"]["offer"], rows["hpc1"]["total"]) == ("late", "8.00")
    assert (rows["hpc1"]["submit_by"], rows["hpc1"]["queue_walltime"]) == (start_by - 1800, 3600)
    assert rows["hpc2"]["offer"] is None and rows["hpc2"]["no_offer"] == "full until then"
    assert rows["hpc2"]["submit_by"] is None
    assert rows["hpc3"]["status"] == "failed" and rows["hpc3"]["total"] is None
    (sent,) = [r for r in hpc1.received if r.method == "POST"]
    assert json.loads(sent.body) == {
        "cores": 2,
        "walltime": 1800,
        "deadline": start_by + 1800,
        "limit": 100,
    }
    assert "signature" in sent.headers  # a quote is signed
    code, out, _ = run_client(capsys, *args, "--sites", str(sites))
    assert code == 0
    line = {row.split("│")[1].strip(): row for row in out.splitlines() if row.startswith("│ hpc")}
    assert local_time(start_by - 600) in line["hpc1"] and "8.00" in line["hpc1"]
    assert local_time(start_by - 1800) in line["hpc1"] and "1 h 0 min" in line["hpc1"]
    assert "full until then" in line["hpc2"] and "no bound" in line["hpc2"]
    assert "failed" in line["hpc3"]


def test_odds_exits_refused_when_no_site_offers_either_and_unavailable_when_none_answers(
    market: Tuple[Path, HttpsStub, HttpsStub], capsys: pytest.CaptureFixture[str]
) -> None:
    sites, _, hpc2 = market
    refusal = {"code": "no_offer", "reason": "full", "field": None}
    hpc2.answer(
        "POST",
        "/v1/quotes",
        Canned(body={"status": "refused", "now": NOW, "offers": [], "refusal": refusal}),
    )
    args = ["odds", "--cores", "2", "--walltime", "30m", "--start", "+2h", "--sites", str(sites)]
    code, out, _ = run_client(capsys, *args, "--site", "hpc2", "--probability", "0.95")
    assert code == EXIT_REFUSED and "no bound" in out
    code, _, _ = run_client(capsys, *args, "--site", "hpc3")
    assert code == EXIT_UNAVAILABLE
    code, _, err = run_client(capsys, *args, "--probability", "0")
    assert code == EXIT_BAD_INPUT and "probability must be in (0, 1)" in err
