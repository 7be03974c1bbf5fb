"""Queue-wait history: binning and statistics, the ``sacct --json`` parser, ``siteagent history``.

Two sacct fixtures: one constructed by hand (rarer cases: TIMEOUT, unlimited, still running)
and one captured from slurmdbd (tests/data/slurm/README.md); the live slurmdbd is exercised in
tests/integration/test_slurm_accounting.py.
"""

from __future__ import annotations

import calendar
import json
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

import pytest

from siteagent.backends.base import BackendError, BackendUnavailable
from siteagent.backends.slurm import SlurmBackend
from siteagent.backends.slurm.arguments import sacct_args
from siteagent.backends.slurm.sacct import sacct_waits, waits_from_sacct
from siteagent.cli.main import main
from siteagent.core.durations import parse_duration, parse_since
from siteagent.core.values import UNLIMITED_S
from siteagent.core.waits import (
    DEFAULT_CORE_BINS,
    DEFAULT_WALLTIME_BINS_S,
    QueueWait,
    percentile,
    wait_table,
)
from siteagent.market.store import Store
from testbed.inprocess.fakes import FakeRun

DATA = Path(__file__).resolve().parent.parent / "data" / "slurm"
T0 = 1795318000
#: Submission time of every job in the real capture sacct-22.05.json (2026-11-23T20:30:35Z).
T_CAPTURE = 1795465835


def sacct_doc() -> Dict[str, Any]:
    text = (DATA / "sacct-22.05-constructed.json").read_text()
    return dict(json.loads(text))


def wait(job_id: str, cores: int, walltime: int, waited: int, start: int = T0) -> QueueWait:
    return QueueWait(job_id, cores, walltime, start - waited, start)


def bin_of(table: Dict[str, Any], cores: Sequence[Any], walltime: Sequence[Any]) -> Dict[str, Any]:
    found: List[Dict[str, Any]] = [
        b for b in table["bins"] if b["cores"] == list(cores) and b["walltime_s"] == list(walltime)
    ]
    assert len(found) == 1, (cores, walltime)
    return found[0]


# --------------------------------------------------------------------------- binning


def test_default_grid_has_every_bin_in_order() -> None:
    table = wait_table([]).to_json()
    assert table["jobs"] == 0 and table["source"] == "store"
    assert len(table["bins"]) == (len(DEFAULT_CORE_BINS) + 1) * (len(DEFAULT_WALLTIME_BINS_S) + 1)
    cores = sorted({tuple(b["cores"]) for b in table["bins"]}, key=lambda c: c[0])
    assert cores == [(1, 1), (2, 4), (5, 16), (17, 64), (65, 256), (257, None)]
    walls = sorted({tuple(b["walltime_s"]) for b in table["bins"]}, key=lambda w: w[0])
    assert walls == [(0, 3600), (3600, 14400), (14400, 43200), (43200, 86400), (86400, None)]
    assert all(b["jobs"] == 0 and b["median_wait_s"] is None for b in table["bins"])


@pytest.mark.parametrize(
    ("cores", "expected"),
    [
        (1, (1, 1)),
        (2, (2, 4)),
        (4, (2, 4)),
        (5, (5, 16)),
        (16, (5, 16)),
        (17, (17, 64)),
        (64, (17, 64)),
        (65, (65, 256)),
        (256, (65, 256)),
        (257, (257, None)),
        (100000, (257, None)),
    ],
)
def test_core_bin_edges_are_inclusive_upper_bounds(cores: int, expected: Sequence[Any]) -> None:
    table = wait_table([wait("1", cores, 600, 10)]).to_json()
    assert bin_of(table, expected, (0, 3600))["jobs"] == 1
    assert table["jobs"] == 1


@pytest.mark.parametrize(
    ("walltime", "expected"),
    [
        (1, (0, 3600)),
        (3600, (0, 3600)),
        (3601, (3600, 14400)),
        (14400, (3600, 14400)),
        (43200, (14400, 43200)),
        (86400, (43200, 86400)),
        (86401, (86400, None)),
        (UNLIMITED_S, (86400, None)),
    ],
)
def test_walltime_bin_edges(walltime: int, expected: Sequence[Any]) -> None:
    table = wait_table([wait("1", 1, walltime, 10)]).to_json()
    assert bin_of(table, (1, 1), expected)["jobs"] == 1


def test_statistics_of_one_bin() -> None:
    waits = [
        wait(str(i), 8, 7200, w) for i, w in enumerate([0, 10, 20, 30, 40, 50, 60, 70, 80, 1000])
    ]
    b = bin_of(wait_table(waits).to_json(), (5, 16), (3600, 14400))
    assert b["jobs"] == 10
    assert b["mean_wait_s"] == 136.0
    assert b["median_wait_s"] == 45.0
    assert b["p90_wait_s"] == 80  # nearest rank: the 9th of 10, a wait some job really had


def test_percentile_nearest_rank() -> None:
    assert percentile([5], 90) == 5
    assert percentile([1, 2], 90) == 2
    assert percentile(list(range(1, 101)), 90) == 90
    assert percentile(list(range(1, 101)), 50) == 50


def test_inconsistent_records_are_skipped_not_binned() -> None:
    table = wait_table(
        [
            QueueWait("never-started", 1, 600, T0, 0),
            QueueWait("start-before-submit", 1, 600, T0, T0 - 5),
            QueueWait("no-cores", 0, 600, T0, T0 + 5),
            QueueWait("ok", 1, 600, T0, T0 + 5),
        ]
    ).to_json()
    assert table["jobs"] == 1 and table["skipped"] == 3


def test_custom_bins_and_their_validation() -> None:
    table = wait_table([wait("1", 3, 100, 7)], core_bins=[2], walltime_bins_s=[60]).to_json()
    assert [(b["cores"], b["walltime_s"], b["jobs"]) for b in table["bins"]] == [
        ([1, 2], [0, 60], 0),
        ([1, 2], [60, None], 0),
        ([3, None], [0, 60], 0),
        ([3, None], [60, None], 1),
    ]
    for bad in ([], [4, 4], [8, 2], [0, 4], [True]):
        with pytest.raises(ValueError, match="core bins"):
            wait_table([], core_bins=bad)
    with pytest.raises(ValueError, match="walltime bins"):
        wait_table([], walltime_bins_s=[3600, 60])


# --------------------------------------------------------------------------- sacct --json


def test_sacct_22_05_document() -> None:
    waits = {w.job_id: w for w in waits_from_sacct(sacct_doc())}
    # 105 was cancelled while pending: Start = End, "None assigned" -> not a wait
    assert sorted(waits) == ["101", "102", "103", "104", "106", "108_0", "108_1", "111"]
    assert waits["101"] == QueueWait("101", 1, 1800, T0, T0 + 12)
    assert waits["102"].cores == 8 and waits["102"].wait == 300
    # --exclusive: 2 CPUs requested, 32 allocated; the allocation is what held the nodes
    assert waits["103"].cores == 32 and waits["103"].walltime == 3600
    # held for an hour: the wait counts from eligibility, not submission
    assert waits["104"].submit == T0 + 3700 and waits["104"].wait == 60
    assert waits["106"].walltime == UNLIMITED_S  # time.limit null
    # the last array task to start keeps the array's job id (108); both are named A_T
    assert waits["108_0"].start == T0 + 401 and waits["108_1"].start == T0 + 402
    assert waits["111"].cores == 64 and waits["111"].walltime == 86400  # still running


def test_sacct_document_binned() -> None:
    table = wait_table(waits_from_sacct(sacct_doc()), source="sacct").to_json()
    assert table["source"] == "sacct" and table["jobs"] == 8
    assert bin_of(table, (1, 1), (0, 3600))["jobs"] == 1
    assert bin_of(table, (1, 1), (86400, None))["jobs"] == 1
    assert bin_of(table, (2, 4), (0, 3600))["jobs"] == 2  # the two array tasks
    assert bin_of(table, (2, 4), (3600, 14400))["p90_wait_s"] == 60
    assert bin_of(table, (17, 64), (43200, 86400))["median_wait_s"] == 7200.0


def _sacct_text_record(line: str) -> QueueWait:
    """A line of the text capture (``JobID,Submit,Eligible,Start,AllocCPUS,Timelimit,State``,
    UTC) as the wait it describes: counted from eligibility when that came later."""
    job_id, submit, eligible, start, cpus, limit, _state = line.split("|")

    def epoch(text: str) -> int:
        return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))

    days, _, clock = limit.rpartition("-")
    h, m, sec = (int(x) for x in clock.split(":"))
    walltime = (int(days) if days else 0) * 86400 + h * 3600 + m * 60 + sec
    since = max(epoch(submit), epoch(eligible))
    return QueueWait(job_id, int(cpus), walltime, since, epoch(start))


def test_sacct_22_05_real_capture_matches_the_text_form() -> None:
    """The capture from slurmdbd gives the waits sacct's own text form shows for the same jobs
    (a held job and array tasks become eligible after their submission)."""
    doc = json.loads((DATA / "sacct-22.05.json").read_text())
    lines = (DATA / "sacct-22.05.txt").read_text().splitlines()
    expected = {w.job_id: w for w in map(_sacct_text_record, lines)}
    got = {w.job_id: w for w in waits_from_sacct(doc)}
    assert got == expected
    assert got["6"].wait == 3 and got["6"].submit - T_CAPTURE == 6  # held, released at +5 s
    assert got["5_1"].walltime == 2 * 86400 and got["1"].cores == 64
    table = wait_table(got.values(), source="sacct").to_json()
    assert bin_of(table, (17, 64), (0, 3600))["jobs"] == 1
    assert bin_of(table, (17, 64), (43200, 86400))["median_wait_s"] == 9.0
    assert bin_of(table, (1, 1), (86400, None))["jobs"] == 2


def test_sacct_data_parser_layout() -> None:
    """Slurm 23.02+ wraps numbers as {set, infinite, number} and makes states lists."""
    rec = sacct_doc()["jobs"][0]
    rec["time"]["limit"] = {"set": True, "infinite": False, "number": 90}
    rec["time"]["start"] = {"set": True, "infinite": False, "number": T0 + 40}
    rec["state"] = {"current": ["COMPLETED"], "reason": "None"}
    rec["required"] = {"CPUs": 3, "memory_per_cpu": {"set": False, "infinite": False, "number": 0}}
    rec["tres"]["allocated"] = []
    unlimited = json.loads(json.dumps(rec))
    unlimited["job_id"] = 7
    unlimited["time"]["limit"] = {"set": True, "infinite": True, "number": 0}
    doc = {
        "meta": {"plugin": {"data_parser": "data_parser/v0.0.40"}},
        "errors": [],
        "jobs": [rec, unlimited],
    }
    got = waits_from_sacct(doc)
    assert got[0] == QueueWait("101", 3, 5400, T0, T0 + 40)
    assert got[1].walltime == UNLIMITED_S


def test_sacct_pending_job_is_left_out() -> None:
    doc = sacct_doc()
    rec = doc["jobs"][0]
    rec["state"] = {"current": "PENDING", "reason": "Priority"}
    rec["time"]["start"] = 0
    rec["nodes"] = "None assigned"
    assert "101" not in {w.job_id for w in waits_from_sacct(doc)}


def test_sacct_errors_entry_is_an_outage() -> None:
    doc = {
        "meta": sacct_doc()["meta"],
        "errors": [{"error": "Unable to connect to database", "error_number": 7000}],
        "jobs": [],
    }
    with pytest.raises(BackendUnavailable, match="Unable to connect to database"):
        waits_from_sacct(doc)


# --------------------------------------------------------------------------- running sacct


def test_sacct_arguments() -> None:
    assert sacct_args(T0, T0 + 86400) == [
        "sacct",
        "--json",
        "-a",
        "-X",
        "-S",
        "2026-11-22T03:26:40",
        "-E",
        "2026-11-23T03:26:40",
        "--state=R,CD,F,TO,CA,NF,OOM,PR",
    ]
    with pytest.raises(ValueError, match="empty accounting window"):
        sacct_args(T0, T0)


def test_sacct_waits_runs_sacct_and_keeps_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = SlurmBackend()
    fake = FakeRun(0, (DATA / "sacct-22.05-constructed.json").read_text())
    monkeypatch.setattr(backend, "_run", fake)
    waits = sacct_waits(backend, T0 + 400, T0 + 90000)
    assert fake.calls == [sacct_args(T0 + 400, T0 + 90000)]
    # jobs running since before the window (sacct --state=R selects them) are dropped
    assert sorted(w.job_id for w in waits) == ["103", "104", "106", "108_0", "108_1", "111"]


def test_sacct_without_accounting_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = SlurmBackend()
    monkeypatch.setattr(
        backend, "_run", FakeRun(1, stderr="sacct: error: Slurm accounting storage is disabled\n")
    )
    with pytest.raises(BackendError, match="accounting storage is disabled") as info:
        backend.accounting(T0, T0 + 60)
    assert not isinstance(info.value, BackendUnavailable)  # retrying will not help
    monkeypatch.setattr(backend, "_run", FakeRun(0, "sacct: garbage"))
    with pytest.raises(BackendUnavailable, match="not JSON"):
        backend.accounting(T0, T0 + 60)


# --------------------------------------------------------------------------- the command


def test_history_command_from_the_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    now = int(time.time())
    store = Store(str(tmp_path / "siteagent.sqlite3"))
    store.record_waits(
        [
            QueueWait("1", 1, 1800, now - 1000, now - 990),
            QueueWait("2", 1, 1800, now - 1000, now - 700),
            QueueWait("old", 1, 1800, now - 9000, now - 8000),
        ]
    )
    store.close()
    assert main(["history", "--state-dir", str(tmp_path), "--since", "2h", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["jobs"] == 2 and table["source"] == "store"
    assert table["since"] == pytest.approx(now - 7200, abs=5)
    assert bin_of(table, (1, 1), (0, 3600))["p90_wait_s"] == 300
    assert [b["upper_bound_s"] for b in bin_of(table, (1, 1), (0, 3600))["wait_bounds"]] == [
        None
    ] * 4  # two waits bound no quantile at 95%
    assert main(["history", "--state-dir", str(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "3 jobs" in out and "<= 1h" in out
    assert "p50 <=" in out and "p95 <=" in out and "95% confidence" in out


def test_history_command_shows_the_bounds_of_a_bin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ten waits of 1..10 minutes: the median's 95% bound is the 9th smallest, 9 minutes."""
    now = int(time.time())
    store = Store(str(tmp_path / "siteagent.sqlite3"))
    store.record_waits(
        [QueueWait(str(m), 1, 1800, now - 3000 - 60 * m, now - 3000) for m in range(1, 11)]
    )
    store.close()
    assert main(["history", "--state-dir", str(tmp_path), "--json"]) == 0
    bounds = bin_of(json.loads(capsys.readouterr().out), (1, 1), (0, 3600))["wait_bounds"]
    assert bounds[0] == {"quantile": 0.5, "confidence": 0.95, "upper_bound_s": 540}
    assert main(["history", "--state-dir", str(tmp_path)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "<= 1h" in line)
    cells = [cell.strip() for cell in row.split("│") if cell.strip()]
    assert cells[-4:] == ["9m", "-", "-", "-"]


def test_history_sacct_needs_slurm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "--state-dir", str(tmp_path), "--source", "sacct"]) != 0
    assert "needs a Slurm site" in capsys.readouterr().err


def test_since_accepts_an_age_an_epoch_or_a_date() -> None:
    assert parse_since("30d", T0) == T0 - 30 * 86400
    assert parse_since("12h", T0) == T0 - 12 * 3600
    assert parse_since(" 90m ", T0) == T0 - 90 * 60
    assert parse_since("1795000000", T0) == 1795000000
    assert parse_since("2026-11-01T00:00:00+00:00", T0) == 1793491200
    assert parse_since("+10m", T0) == T0 + 600
    for bad in ("yesterday", "30x", "30d\nx", "\u0663\u0660d", "1" * 13, "-5"):
        with pytest.raises(ValueError, match="invalid since"):
            parse_since(bad, T0)


def test_durations_are_whole_ascii_numbers_with_a_unit() -> None:
    assert [parse_duration(text) for text in ("90", "90s", "15m", "2h", "1d")] == [
        90,
        90,
        900,
        7200,
        86400,
    ]
    for bad in ("", "m", "1.5h", "2w", "\u0663\u0660", "1" * 13, "+5m"):
        with pytest.raises(ValueError, match="invalid duration"):
            parse_duration(bad)


def test_history_command_takes_since_as_the_api_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["history", "--state-dir", str(tmp_path), "--since", "yesterday"]) != 0
    assert "invalid since 'yesterday'" in capsys.readouterr().err


def test_history_sacct_on_a_slurm_site(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: List[List[str]] = []

    def fake_run(_self: SlurmBackend, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        calls.append(list(args))
        text = (DATA / "sacct-22.05-constructed.json").read_text()
        return subprocess.CompletedProcess(list(args), 0, text, "")

    monkeypatch.setattr(SlurmBackend, "_run", fake_run)
    path = tmp_path / "agent.yaml"
    path.write_text("backend:\n  type: pyslurm\n")  # sacct needs no pyslurm
    argv = ["history", "--config", str(path), "--state-dir", str(tmp_path), "--source", "sacct"]
    assert main([*argv, "--since", str(T0), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["source"] == "sacct" and table["jobs"] == 8
    assert calls and calls[0][:4] == ["sacct", "--json", "-a", "-X"]
