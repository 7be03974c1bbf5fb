"""``siteagent-client``'s failures exactly as the README documents them: one line prefixed
``siteagent-client:``, exit 1 for input to fix (argparse's refusals too), 3 when the sites that
answered refused (an unknown key or a rate limit is an answer), 75 when none answered, one
JSON error object with ``--json``, and the file named in every file error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

from siteagent.cli.console import EXIT_BAD_INPUT, EXIT_REFUSED, EXIT_UNAVAILABLE
from siteagent.cli.main import client_main, main
from testbed.inprocess.buyer_files import run_client, sites_file
from testbed.inprocess.https_stub import Canned, HttpsStub, https_stub
from testbed.inprocess.parties import Party

BUYER = Party("alice@laptop")

UNKNOWN_KEY = Canned(
    401,
    {"error": {"code": "unknown_key", "message": "no authorized client has key id 'x'"}},
)
TOO_MANY_OFFERS = Canned(
    429,
    {
        "error": {
            "code": "too_many_offers",
            "message": "alice@laptop holds 10 live offers, the most this site keeps for one "
            "client; accept some, or retry in 280 s when the first lapses",
        }
    },
    headers={"Retry-After": "280"},
)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Tuple[Path, HttpsStub]]:
    with https_stub(tmp_path / "hpc1") as stub:
        yield sites_file(tmp_path, BUYER, [("hpc1", stub.url, stub.cert)]), stub


def refused_usage(capsys: pytest.CaptureFixture[str], argv: List[str]) -> Tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        client_main(argv)
    out, err = capsys.readouterr()
    assert isinstance(exited.value.code, int)
    return exited.value.code, out, err


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("--walltime", "abc", "invalid duration 'abc'"),
        ("--walltime", "-5m", "invalid duration '-5m'"),
        ("--max-price", "-1", "expected a price per core-hour"),
        ("--max-price", "1e400", "expected a price per core-hour"),
    ],
)
def test_a_value_argparse_refuses_is_input_to_fix_in_one_line(
    capsys: pytest.CaptureFixture[str], option: str, value: str, words: str
) -> None:
    argv = ["quote", "--cores", "1", "--walltime", "1h", option, value]
    code, out, err = refused_usage(capsys, argv)
    assert code == EXIT_BAD_INPUT
    assert out == ""
    assert err.count("\n") == 1 and "usage:" not in err
    assert err.startswith(f"siteagent-client: error: quote: argument {option}: ")
    assert words in err and "siteagent-client quote --help" in err
    code, out, _ = refused_usage(capsys, [*argv, "--json"])
    assert code == EXIT_BAD_INPUT
    error = json.loads(out)["error"]
    assert error["exit"] == EXIT_BAD_INPUT and words in error["message"]


def test_the_site_program_says_siteagent_and_exits_1_too(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["quote", "--cores", "1", "--duration", "ten"])
    assert exited.value.code == EXIT_BAD_INPUT
    assert capsys.readouterr().err.startswith("siteagent: error: quote: argument --duration")


@pytest.mark.parametrize("refusal", [UNKNOWN_KEY, TOO_MANY_OFFERS], ids=["401", "429"])
def test_a_refusal_of_the_request_itself_is_an_answer_exit_3(
    site: Tuple[Path, HttpsStub], capsys: pytest.CaptureFixture[str], refusal: Canned
) -> None:
    sites, stub = site
    stub.answer("POST", "/v1/quotes", refusal)
    stub.answer("GET", "/v1/history/waits", Canned(body={"now": 0, "since": 0, "bins": []}))
    quote = ["quote", "--sites", str(sites), "--cores", "1", "--walltime", "1h", "--json"]
    code, out, _ = run_client(capsys, *quote)
    assert code == EXIT_REFUSED
    (row,) = json.loads(out)["sites"]
    assert row["status"] == "refused" and refusal.body["error"]["code"] in row["reason"]
    odds = ["odds", "--sites", str(sites), "--cores", "1", "--walltime", "1h", "--start", "+6h"]
    code, _, _ = run_client(capsys, *odds)
    assert code == EXIT_REFUSED


def test_no_answer_at_all_is_still_75(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with https_stub(tmp_path / "cert") as stub:
        cert = stub.cert
    sites = sites_file(tmp_path, BUYER, [("hpc1", "https://127.0.0.1:1", cert)])
    code, _, _ = run_client(
        capsys, "quote", "--sites", str(sites), "--cores", "1", "--walltime", "1h"
    )
    assert code == EXIT_UNAVAILABLE


def test_json_prints_one_error_object_when_the_command_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere.yaml"
    code, out, err = run_client(
        capsys, "quote", "--sites", str(missing), "--cores", "1", "--walltime", "1h", "--json"
    )
    assert code == EXIT_BAD_INPUT
    error = json.loads(out)["error"]
    assert error["code"] == "invalid_sites_file" and str(missing) in error["message"]
    assert err.startswith("siteagent-client: error: ") and err.count("\n") == 1


@pytest.mark.parametrize("command", ["sites", "provision", "select", "english-auction"])
def test_a_binary_file_is_named_in_its_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(bytes(range(256)))
    argv = [command, "--sites", str(binary)]
    if command != "sites":
        good = sites_file(tmp_path, BUYER, [("hpc1", "https://127.0.0.1:1", binary)])
        argv = [command, str(binary), "--sites", str(good)]
    code, _, err = run_client(capsys, *argv)
    assert code == EXIT_BAD_INPUT
    assert str(binary) in err and err.count("\n") == 1


def test_recover_refuses_a_journal_that_does_not_exist_rather_than_making_it(
    site: Tuple[Path, HttpsStub], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "TYPO.db"
    for argv in (["recover"], ["reservations", "list"], ["reservations", "show", "x"]):
        code, out, err = run_client(capsys, *argv, "--journal", str(typo), "--sites", str(site[0]))
        assert code == EXIT_BAD_INPUT, argv
        assert f"{typo}: no such journal" in err and "Nothing to recover" not in out
        assert not typo.exists()


def test_recover_without_any_journal_yet_says_so_and_makes_none(
    site: Tuple[Path, HttpsStub],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    code, out, _ = run_client(capsys, "recover", "--sites", str(site[0]))
    assert code == 0 and "No journal yet" in out
    assert not (tmp_path / "state").exists()


def test_an_english_auction_every_site_refuses_exits_3(
    site: Tuple[Path, HttpsStub], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sites, stub = site
    refusal = {"error": {"code": "invalid_request", "message": "too much", "field": "job"}}
    stub.answer("POST", "/v1/bids", Canned(422, refusal))
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  - {cores: 64, walltime: 30d}\n", encoding="utf-8")
    argv = ["english-auction", str(jobs), "--sites", str(sites), "--mean-run-time", "1"]
    code, out, _ = run_client(capsys, *argv, "-k", "0.5", "--rounds", "1")
    assert code == EXIT_REFUSED and "too much" in out
