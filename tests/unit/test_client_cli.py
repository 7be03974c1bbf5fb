"""``siteagent-client`` in-process against scripted HTTPS sites: each command's table and JSON,
the exit codes, and inputs refused with what was wrong and how to fix it."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest
import yaml

from siteagent.cli.console import EXIT_BAD_INPUT, EXIT_REFUSED, EXIT_UNAVAILABLE
from siteagent.protocol import keys
from siteagent.security.clients import load_authorized_clients
from testbed.inprocess.buyer_files import run_client, sites_file
from testbed.inprocess.https_stub import Canned, HttpsStub, https_stub, offer_view, site_info
from testbed.inprocess.parties import Party

BUYER = Party("alice@laptop")


OFFERED = {
    "status": "offered",
    "now": 1_800_000_000,
    "offers": [
        offer_view("cheap-late", 1_800_090_000, "8.00"),
        offer_view("dear-soon", 1_800_000_060, "40.00"),
    ],
    "chosen": 0,
}
REFUSED = {
    "status": "refused",
    "now": 1_800_000_000,
    "offers": [],
    "refusal": {"code": "unsatisfiable", "reason": "no sparc here", "field": "architecture"},
}


@pytest.fixture
def market(tmp_path: Path) -> Iterator[Tuple[Path, HttpsStub, HttpsStub]]:
    """A sites file of three sites: hpc1 offers, hpc2 refuses, hpc3 is not there; and a
    bank (the ledger section)."""
    with contextlib.ExitStack() as stack:
        hpc1, hpc2, bank = (
            stack.enter_context(https_stub(tmp_path / name)) for name in ("hpc1", "hpc2", "bank")
        )
        hpc1.answer("POST", "/v1/quotes", Canned(body=OFFERED))
        hpc2.answer("POST", "/v1/quotes", Canned(body=REFUSED))
        for stub in (hpc1, hpc2):
            stub.answer("GET", "/v1/info", Canned(body=site_info(Party("hpc1"))))
        entries = [("hpc1", hpc1.url, hpc1.cert), ("hpc2", hpc2.url, hpc2.cert)]
        entries.append(("hpc3", "https://127.0.0.1:1", hpc1.cert))
        sites = sites_file(tmp_path, BUYER, entries, ledger=(bank.url, bank.cert))
        yield sites, bank, hpc1


@pytest.mark.parametrize("how_long", ["--duration", "--walltime"])
def test_quote_duration_and_its_published_alias_walltime_ask_the_same(
    market: Tuple[Path, HttpsStub, HttpsStub], capsys: pytest.CaptureFixture[str], how_long: str
) -> None:
    args = ["quote", "--sites", str(market[0]), "--cores", "8", how_long, "90m", "--json"]
    code, out, _ = run_client(capsys, *args)
    assert code == 0 and json.loads(out)["request"]["walltime"] == 5400


def test_quote_takes_duration_or_walltime_not_both(
    market: Tuple[Path, HttpsStub, HttpsStub], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["quote", "--sites", str(market[0]), "--cores", "8", "--duration", "1h"]
    with pytest.raises(SystemExit) as exited:
        run_client(capsys, *args, "--walltime", "2h")
    assert exited.value.code == EXIT_BAD_INPUT
    assert "--walltime: not allowed with argument --duration" in capsys.readouterr().err


def test_quote_ranks_every_sites_offers_and_shows_each_sites_part(
    market: Tuple[Path, HttpsStub, HttpsStub], capsys: pytest.CaptureFixture[str]
) -> None:
    sites = str(market[0])
    args = ["quote", "--sites", sites, "--cores", "8", "--walltime", "1h"]
    code, out, _ = run_client(capsys, *args, "--alpha", "1", "--json")
    assert code == 0
    answer = json.loads(out)
    assert [(o["rank"], o["site"], o["offer_id"]) for o in answer["offers"]] == [
        (1, "hpc1", "cheap-late"),
        (2, "hpc1", "dear-soon"),
    ]
    parts = {row["site"]: (row["status"], row["offers"], row["reason"]) for row in answer["sites"]}
    assert parts["hpc1"] == ("offered", 2, "")
    assert parts["hpc2"] == ("refused", 0, "no sparc here (field architecture)")
    assert parts["hpc3"][0] == "failed" and "cannot connect" in parts["hpc3"][2]
    assert answer["request"] == {"walltime": 3600, "cores": 8, "alpha": 1.0}
    code, out, _ = run_client(capsys, *args, "--alpha", "0")
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert "dear-soon" in rows[0] and "cheap-late" in rows[1]  # earliest first at alpha 0
    assert "2 offers from 1 of 3 sites" in out
    assert any("hpc2" in row and "no sparc here" in row for row in rows)
    assert any("hpc3" in row and "failed" in row for row in rows)


def test_quote_exits_refused_when_every_answer_is_a_refusal(
    market: Tuple[Path, HttpsStub, HttpsStub], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["quote", "--sites", str(market[0]), "--cores", "8", "--walltime", "60"]
    code, out, _ = run_client(capsys, *args, "--site", "hpc2", "--site", "hpc3")
    assert code == EXIT_REFUSED and "No offers from the 2 sites asked" in out
    code, _, _ = run_client(capsys, *args, "--site", "hpc3")
    assert code == EXIT_UNAVAILABLE


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--walltime", "1h"], "give the size: --cores N, or --nodes N"),
        (
            ["--cores", "8", "--walltime", "1h", "--alpha", "2"],
            "--alpha: Input should be less than or equal to 1",
        ),
        (
            ["--cores", "0", "--walltime", "1h"],
            "--cores: Input should be greater than or equal to 1",
        ),
        (
            ["--cores", "8", "--walltime", "1h", "--deadline", "soon"],
            "invalid time 'soon': give +DURATION",
        ),
        (
            ["--cores", "8", "--walltime", "1h", "--site", "hpc9"],
            "no site named 'hpc9'; the file lists hpc1, hpc2, hpc3",
        ),
    ],
)
def test_quote_refuses_bad_input_saying_what_to_fix(
    market: Tuple[Path, HttpsStub, HttpsStub],
    capsys: pytest.CaptureFixture[str],
    args: List[str],
    message: str,
) -> None:
    code, out, err = run_client(capsys, "quote", "--sites", str(market[0]), *args)
    assert code == EXIT_BAD_INPUT and out == ""
    assert message in " ".join(err.split())


def test_a_sites_file_that_is_wrong_is_named_with_its_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "sites.yaml").write_text("sites: [{name: a, url: 'http://h', ca: c}]\n")
    code, _, err = run_client(capsys, "sites", "--sites", str(tmp_path / "sites.yaml"))
    assert code == EXIT_BAD_INPUT
    assert "sites[0] (a).url: 'http://h' is not a site's address" in " ".join(err.split())


def test_sites_shows_each_sites_info_or_why_not(
    market: Tuple[Path, HttpsStub, HttpsStub], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_client(capsys, "sites", "--sites", str(market[0]), "--json")
    assert code == 0
    shown = {row["site"]: row for row in json.loads(out)["sites"]}
    assert (
        shown["hpc1"]["status"] == "ok" and shown["hpc1"]["info"]["public_key"]["keyid"] == "hpc1"
    )
    assert shown["hpc3"]["status"] == "failed" and shown["hpc3"]["info"] is None
    code, out, _ = run_client(capsys, "sites", "--sites", str(market[0]))
    hpc1 = next(line for line in out.splitlines() if "hpc1" in line)
    assert "1/core-h (flat)" in hpc1 and "x86_64, 16 cores/node" in hpc1


def test_keys_writes_a_private_key_and_prints_an_entry_sites_accept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "me.key"
    args = [
        "keys",
        "--key-id",
        "bob@desk",
        "--user",
        "bob",
        "--account",
        "proj1",
        "--out",
        str(out_file),
    ]
    code, out, _ = run_client(capsys, *args)
    assert code == 0
    assert out_file.stat().st_mode & 0o777 == 0o600
    entry = out.split("with a credit):")[1].split("Your sites file")[0]
    clients = tmp_path / "clients.yaml"
    clients.write_text(entry, encoding="utf-8")
    (bob,) = load_authorized_clients(clients).values()
    assert (bob.key_id, bob.user, bob.account) == ("bob@desk", "bob", "proj1")
    assert bob.public_key == keys.load_private_key(out_file).public_key()
    assert yaml.safe_load(out.split("Your sites file signs with it given:")[1]) == {
        "buyer": {"key_id": "bob@desk", "private_key": str(out_file)}
    }
    code, _, err = run_client(capsys, *args)
    assert code == EXIT_BAD_INPUT and "already exist; --force replaces them" in err
    code, _, err = run_client(capsys, "keys", "--user", "Bob Smith", "--out", str(tmp_path / "x"))
    assert code == EXIT_BAD_INPUT and "--user 'Bob Smith': expected a scheduler" in err


def account_answers(bank: HttpsStub) -> None:
    path = "/v1/accounts/alice@laptop"
    bank.answer(
        "GET", path, Canned(body={"account": BUYER.key_id, "balance": "-43.40", "credit": "100.00"})
    )
    line = {
        "transaction_id": 7,
        "at": 1_800_000_000,
        "kind": "deal",
        "receipt_id": "ab" * 32,
        "memo": "deal r-1 at hpc1",
        "amount": "-43.40",
        "balance": "-43.40",
    }
    bank.answer(
        "GET",
        path + "/statement",
        Canned(body={"account": BUYER.key_id, "balance": "-43.40", "lines": [line]}),
    )


def test_balance_and_statement_read_the_buyers_account_with_signed_gets(
    market: Tuple[Path, HttpsStub, HttpsStub], capsys: pytest.CaptureFixture[str]
) -> None:
    sites, bank, _ = market
    account_answers(bank)
    code, out, _ = run_client(capsys, "balance", "--sites", str(sites), "--json")
    assert code == 0 and json.loads(out) == {
        "account": "alice@laptop",
        "balance": "-43.40",
        "credit": "100.00",
    }
    assert "signature" in bank.received[-1].headers
    code, out, _ = run_client(capsys, "statement", "--sites", str(sites))
    assert code == 0 and "ab" * 32 in "".join(out.split()) and "deal r-1 at hpc1" in out
    code, out, _ = run_client(capsys, "statement", "--sites", str(sites), "--json")
    assert json.loads(out)["lines"][0]["receipt_id"] == "ab" * 32


def test_a_bank_refusal_is_the_exit_code_of_a_refusal(
    market: Tuple[Path, HttpsStub, HttpsStub], capsys: pytest.CaptureFixture[str]
) -> None:
    sites, bank, _ = market
    refusal = {"error": {"code": "not_account_holder", "message": "not yours"}}
    bank.answer("GET", "/v1/accounts/alice@laptop", Canned(403, refusal))
    code, _, err = run_client(capsys, "balance", "--sites", str(sites))
    assert code == EXIT_REFUSED and "ledger: not yours" in err


def test_without_a_ledger_section_balance_says_how_to_add_one(
    market: Tuple[Path, HttpsStub, HttpsStub], capsys: pytest.CaptureFixture[str]
) -> None:
    document = yaml.safe_load(market[0].read_text())
    del document["ledger"]
    market[0].write_text(yaml.safe_dump(document))
    code, _, err = run_client(capsys, "balance", "--sites", str(market[0]))
    said = " ".join(err.split())
    assert code == EXIT_BAD_INPUT and "no ledger section: `siteagent-client sites add" in said


PLANNER_LIBRARIES_HIDDEN = """
import sys
for name in ("networkx", "pymoo"):
    sys.modules[name] = None  # as if the `client` extra were not installed
from siteagent.cli.main import client_main
raise SystemExit(client_main(sys.argv[1:]))
"""


def test_without_the_client_extra_only_the_planners_say_what_to_install(tmp_path: Path) -> None:
    def client(*argv: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-c", PLANNER_LIBRARIES_HIDDEN, *argv]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    assert client("auction", "--help").returncode == 0
    workflow = tmp_path / "one.yaml"
    workflow.write_text("tasks: [{id: a, cores: 1, runtime: 10}]\n", encoding="utf-8")
    refused = client("provision", str(workflow), "--dry-run", "--sites", str(tmp_path / "none"))
    assert refused.returncode == EXIT_BAD_INPUT
    message = " ".join(refused.stderr.split())
    assert "networkx is not installed" in message
    assert "pip install 'siteagent[client]'" in message  # brackets kept: text, not markup
    refused = client("select", str(workflow), "--sites", str(tmp_path / "none"))
    assert refused.returncode == EXIT_BAD_INPUT
    assert "select needs the planners' libraries" in " ".join(refused.stderr.split())
