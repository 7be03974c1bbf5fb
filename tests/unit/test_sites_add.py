"""``siteagent-client sites add|remove``: a new buyer registers sites without writing YAML,
and every mistake is refused with the checks the sites file always gets, before anything is
written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from siteagent.cli.console import EXIT_BAD_INPUT
from siteagent.client.sites import certificate_pin, load_registry
from testbed.inprocess.buyer_files import run_client
from testbed.inprocess.https_stub import Canned, HttpsStub, https_stub, site_info
from testbed.inprocess.parties import Party


@pytest.fixture
def stub(tmp_path: Path) -> Iterator[HttpsStub]:
    with https_stub(tmp_path / "hpc1") as made:
        made.answer("GET", "/v1/info", Canned(body=site_info(Party("hpc1"))))
        yield made


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A new buyer's configuration directory, with the key pair `keys` made."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SITEAGENT_CLIENT_SITES", raising=False)
    return tmp_path / "config" / "siteagent"


def test_a_new_buyer_registers_a_site_and_asks_it(
    stub: HttpsStub, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_client(capsys, "keys", "--key-id", "alice@laptop", "--user", "alice")
    assert code == 0, err
    code, out, err = run_client(capsys, "sites", "add", "hpc1", stub.url, "--ca", str(stub.cert))
    assert code == 0, err
    assert "added hpc1" in out
    registry = load_registry(home / "sites.yaml")
    (site,) = registry.sites
    assert (site.name, site.url, site.ca, site.key_id) == (
        "hpc1",
        stub.url,
        stub.cert,
        "alice@laptop",
    )
    assert site.private_key == home / "alice@laptop.key"
    code, out, _ = run_client(capsys, "sites", "--json")
    assert code == 0 and json.loads(out)["sites"][0]["status"] == "ok"


def test_a_site_is_added_by_pin_with_its_own_key_and_removed(
    stub: HttpsStub, tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_client(capsys, "keys", "--key-id", "alice@laptop")
    run_client(capsys, "keys", "--key-id", "alice@hpc2", "--out", str(tmp_path / "hpc2.key"))
    run_client(capsys, "sites", "add", "hpc1", stub.url, "--ca", str(stub.cert))
    pin = certificate_pin(stub.der)
    code, _, err = run_client(
        capsys, "sites", "add", "hpc2", stub.url, "--pin", pin,
        "--key-id", "alice@hpc2", "--private-key", str(tmp_path / "hpc2.key"),
    )  # fmt: skip
    assert code == 0, err
    hpc1, hpc2 = load_registry(home / "sites.yaml").sites
    assert hpc2.pin is not None and hpc2.ca is None and hpc2.key_id == "alice@hpc2"
    assert hpc1.key_id == "alice@laptop"
    code, out, _ = run_client(capsys, "sites", "remove", "hpc1", "--json")
    assert code == 0 and json.loads(out)["sites"] == ["hpc2"]
    assert [site.name for site in load_registry(home / "sites.yaml").sites] == ["hpc2"]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["hpc1", "http://127.0.0.1:1", "--ca", "CERT"], "is not a site's address"),
        (["hpc1", "https://127.0.0.1:1", "--ca", "missing.crt"], "no such file"),
        (["hpc1", "https://127.0.0.1:1", "--pin", "sha256//abc"], "is not a pin"),
        (["bad name", "https://127.0.0.1:1", "--ca", "CERT"], "is not a site name"),
        (["hpc0", "https://127.0.0.1:1", "--ca", "CERT"], "a site is named 'hpc0' already"),
        (["hpc1", "https://127.0.0.1:1"], "one of the arguments --ca --pin is required"),
    ],
)
def test_a_mistake_is_refused_naming_the_file_and_nothing_is_written(
    stub: HttpsStub,
    home: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    words: str,
) -> None:
    run_client(capsys, "keys", "--key-id", "alice@laptop")
    run_client(capsys, "sites", "add", "hpc0", stub.url, "--ca", str(stub.cert))
    before = (home / "sites.yaml").read_text(encoding="utf-8")
    argv = [str(stub.cert) if word == "CERT" else word for word in argv]
    try:
        code, _, err = run_client(capsys, "sites", "add", *argv)
    except SystemExit as exited:  # refused as the command line is read
        code, err = int(str(exited.code)), capsys.readouterr().err
    assert code == EXIT_BAD_INPUT
    assert words in err and err.count("\n") == 1
    assert (home / "sites.yaml").read_text(encoding="utf-8") == before


def test_a_new_file_needs_to_know_the_buyers_key(
    stub: HttpsStub, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_client(capsys, "sites", "add", "hpc1", stub.url, "--ca", str(stub.cert))
    assert code == EXIT_BAD_INPUT and "--key-id ID" in err
    assert not (home / "sites.yaml").exists()


def test_a_commented_file_is_kept_as_a_backup(
    stub: HttpsStub, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_client(capsys, "keys", "--key-id", "alice@laptop")
    run_client(capsys, "sites", "add", "hpc0", stub.url, "--ca", str(stub.cert))
    path = home / "sites.yaml"
    commented = "# my sites\n" + path.read_text(encoding="utf-8")
    path.write_text(commented, encoding="utf-8")
    run_client(capsys, "sites", "remove", "hpc0")
    assert (home / "sites.yaml.bak").read_text(encoding="utf-8") == commented
    assert yaml.safe_load(path.read_text(encoding="utf-8"))["sites"] == []


def test_the_bank_is_added_as_the_ledger_section(
    stub: HttpsStub, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_client(capsys, "keys", "--key-id", "alice@laptop")
    run_client(capsys, "sites", "add", "hpc1", stub.url, "--ca", str(stub.cert))
    code, _, err = run_client(capsys, "sites", "add", "ledger", stub.url, "--ca", str(stub.cert))
    assert code == 0, err
    registry = load_registry(home / "sites.yaml")
    assert registry.bank().url == stub.url and [s.name for s in registry.sites] == ["hpc1"]
    run_client(capsys, "sites", "remove", "ledger")
    assert load_registry(home / "sites.yaml").ledger is None
