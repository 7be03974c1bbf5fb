"""The buyer's sites file: what it means, each mistake refused with the file, the key and the
fix, and the private key refused unless its owner alone may read it."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path
from typing import Any, Dict

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from siteagent.client.sites import (
    RegistryError,
    Timeouts,
    certificate_pin,
    config_dir,
    default_path,
    load_buyer_key,
    load_registry,
    parse_pin,
)
from siteagent.core.files import UnsafeFile
from siteagent.protocol.keys import private_key_pem, write_private

DIGEST = hashlib.sha256(b"a certificate").digest()


def write(tmp_path: Path, document: Any) -> Path:
    """The sites file, beside the CA files its sites name (``c``, ``hpc1.crt``, ...)."""
    for name in ("c", "hpc1.crt", "bank.crt"):
        (tmp_path / name).write_text("a certificate", encoding="utf-8")
    path = tmp_path / "sites.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def registry_document(**changes: Any) -> Dict[str, Any]:
    document: Dict[str, Any] = {
        "buyer": {"key_id": "alice@laptop", "private_key": "alice.key"},
        "timeouts": {"connect": 2, "read": 8},
        "sites": [
            {"name": "hpc1", "url": "https://127.0.0.1:8443/", "ca": "hpc1.crt"},
            {
                "name": "hpc2",
                "url": "https://hpc2.example.org",
                "pin": "sha256//" + base64.b64encode(DIGEST).decode(),
                "key_id": "alice@hpc2",
                "private_key": "/keys/other.key",
                "timeouts": {"read": 30},
            },
        ],
    }
    document.update(changes)
    return document


def test_a_registry_gives_each_site_its_url_trust_key_and_timeouts(tmp_path: Path) -> None:
    registry = load_registry(write(tmp_path, registry_document()))
    hpc1, hpc2 = registry.sites
    assert (hpc1.name, hpc1.url, hpc1.ca, hpc1.pin) == (
        "hpc1",
        "https://127.0.0.1:8443",
        tmp_path / "hpc1.crt",
        None,
    )
    assert (hpc1.key_id, hpc1.private_key) == ("alice@laptop", tmp_path / "alice.key")
    assert hpc1.timeouts == Timeouts(connect=2.0, read=8.0)
    # a site overrides the buyer's key and one timeout; a pin is kept as hex
    assert (hpc2.ca, hpc2.pin) == (None, DIGEST.hex())
    assert (hpc2.key_id, hpc2.private_key) == ("alice@hpc2", Path("/keys/other.key"))
    assert hpc2.timeouts == Timeouts(connect=2.0, read=30.0)
    assert registry.ledger is None


def test_the_ledger_section_is_the_bank_with_the_buyers_key(tmp_path: Path) -> None:
    document = registry_document(ledger={"url": "https://127.0.0.1:8444", "ca": "bank.crt"})
    bank = load_registry(write(tmp_path, document)).bank()
    assert (bank.name, bank.url, bank.ca) == (
        "ledger",
        "https://127.0.0.1:8444",
        tmp_path / "bank.crt",
    )
    assert bank.key_id == "alice@laptop"


def test_without_a_ledger_section_the_bank_is_refused_saying_how_to_add_it(
    tmp_path: Path,
) -> None:
    registry = load_registry(write(tmp_path, registry_document()))
    with pytest.raises(
        RegistryError,
        match=r"no ledger section: `siteagent-client sites add ledger https://HOST:8444",
    ):
        registry.bank()


def test_select_keeps_the_files_order_and_names_unknown_sites(tmp_path: Path) -> None:
    registry = load_registry(write(tmp_path, registry_document()))
    assert [site.name for site in registry.select(["hpc2", "hpc1"])] == ["hpc1", "hpc2"]
    assert registry.select([]) == registry.sites
    with pytest.raises(RegistryError, match=r"no site named 'hpc9'; the file lists hpc1, hpc2"):
        registry.select(["hpc9"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"site": [1]}, r"the file: unknown key 'site' \(did you mean 'sites'\?\)"),
        ({"sites": []}, "sites: give a list of sites"),
        ({"buyer": {"key": "x"}}, "buyer: unknown key 'key' "),
        ({"timeouts": {"read": 0}}, r"timeouts.read: 0 s: give 0 < seconds <= 3600"),
        ({"timeouts": {"read": True}}, r"timeouts.read: expected seconds \(a number\), got True"),
        ({"buyer": {"key_id": "alice laptop", "private_key": "k"}}, "buyer.key_id: invalid key id"),
        (
            {"ledger": {"url": "https://bank", "ca": "c", "name": "bank"}},
            "ledger: unknown key 'name'",
        ),
    ],
)
def test_mistakes_at_the_top_are_refused_naming_the_key(
    tmp_path: Path, change: Dict[str, Any], message: str
) -> None:
    path = write(tmp_path, registry_document(**change))
    with pytest.raises(RegistryError, match=f"^{path}: {message}"):
        load_registry(path)


@pytest.mark.parametrize(
    ("site", "message"),
    [
        ({"url": "https://h", "ca": "c"}, r"sites\[0\].name: None is not a site name"),
        ({"name": "a b", "url": "https://h", "ca": "c"}, r"sites\[0\].name: 'a b' is not"),
        (
            {"name": "s", "url": "http://h:80", "ca": "c"},
            r"sites\[0\] \(s\).url: 'http://h:80' is not a site's address: write https://HOST\[:PORT\]",
        ),
        (
            {"name": "s", "url": "https://h:99999", "ca": "c"},
            r"\(s\).url: 'https://h:99999': Port out of range",
        ),
        (
            {"name": "s", "url": "https://u:p@h", "ca": "c"},
            r"\(s\).url: .*no user, query or fragment",
        ),
        ({"name": "s", "url": "https://h"}, r"\(s\): give exactly one of ca .* and pin"),
        ({"name": "s", "url": "https://h", "ca": "c", "pin": "p"}, "give exactly one of ca"),
        (
            {"name": "s", "url": "https://h", "pin": "abc"},
            r"\(s\).pin: 'abc' is not a pin: write sha256//",
        ),
        (
            {"name": "s", "url": "https://h", "ca": "c", "pinn": "x"},
            r"unknown key 'pinn' \(did you mean 'pin'\?\)",
        ),
        ({"name": "s", "url": "https://h", "ca": ""}, r"\(s\).ca: expected a file's path"),
        (
            {"name": "s", "url": "https://h", "ca": "none.pem"},
            r"\(s\).ca: no such file .*none.pem: copy the site's CA \(or its self-signed",
        ),
        (
            {"name": "s", "url": "https://h", "ca": "c", "timeouts": {"write": 1}},
            r"\(s\).timeouts: unknown key 'write'",
        ),
    ],
)
def test_mistakes_in_a_site_are_refused_naming_the_site_and_key(
    tmp_path: Path, site: Dict[str, Any], message: str
) -> None:
    path = write(tmp_path, registry_document(sites=[site]))
    with pytest.raises(RegistryError, match=message):
        load_registry(path)


def test_two_sites_of_one_name_are_refused(tmp_path: Path) -> None:
    site = {"name": "hpc1", "url": "https://h", "ca": "c"}
    with pytest.raises(RegistryError, match=r"two sites are named 'hpc1'"):
        load_registry(write(tmp_path, registry_document(sites=[site, site])))


def test_a_site_without_any_buyer_key_is_refused_saying_where_to_set_one(tmp_path: Path) -> None:
    document = registry_document(buyer={"key_id": "alice"})
    with pytest.raises(RegistryError, match=r"sites\[0\] \(hpc1\): no buyer key: set buyer"):
        load_registry(write(tmp_path, document))


def test_a_missing_or_unreadable_file_says_how_to_name_one(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match=r"no such sites file: .* --sites FILE or \$SITEAGENT"):
        load_registry(tmp_path / "none.yaml")
    (tmp_path / "bad.yaml").write_text("sites: [", encoding="utf-8")
    with pytest.raises(RegistryError, match=r"bad.yaml: not YAML"):
        load_registry(tmp_path / "bad.yaml")
    (tmp_path / "list.yaml").write_text("- a\n", encoding="utf-8")
    with pytest.raises(RegistryError, match=r"the file: expected a mapping of buyer, ledger"):
        load_registry(tmp_path / "list.yaml")


def test_the_default_file_is_the_environments_then_the_xdg_config_directory(
    tmp_path: Path,
) -> None:
    assert default_path({"SITEAGENT_CLIENT_SITES": "/x/s.yaml"}) == Path("/x/s.yaml")
    assert default_path({"XDG_CONFIG_HOME": "/cfg"}) == Path("/cfg/siteagent/sites.yaml")
    assert config_dir({}) == Path("~/.config/siteagent").expanduser()


def test_a_pin_is_read_in_base64_or_hex_with_or_without_colons() -> None:
    colons = ":".join(f"{byte:02X}" for byte in DIGEST)
    for written in (
        "sha256//" + base64.b64encode(DIGEST).decode(),
        "sha256//" + DIGEST.hex(),
        "sha256//" + colons,
    ):
        assert parse_pin(written) == DIGEST.hex()
    for wrong in (
        DIGEST.hex(),
        "sha256//" + DIGEST.hex()[:-2],
        "sha1//" + DIGEST.hex(),
        "sha256//",
    ):
        with pytest.raises(ValueError, match=r"is not a pin"):
            parse_pin(wrong)
    assert parse_pin(certificate_pin(b"a certificate")) == DIGEST.hex()


def test_the_buyers_key_is_read_only_if_its_owner_alone_may_read_it(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "alice.key"
    write_private(path, private_key_pem(key))
    assert load_buyer_key(path).public_key() == key.public_key()
    os.chmod(path, 0o400)
    assert load_buyer_key(path).public_key() == key.public_key()
    for mode in (0o640, 0o604, 0o660):
        os.chmod(path, mode)
        with pytest.raises(UnsafeFile, match=f"mode {mode:04o}.*chmod 600 {path}"):
            load_buyer_key(path)


def test_a_missing_or_foreign_key_file_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"no such private key: make one with `siteagent-client keys`"
    ):
        load_buyer_key(tmp_path / "none.key")
    path = tmp_path / "junk.key"
    write_private(path, b"not a key")
    with pytest.raises(ValueError, match=r"junk.key: not an Ed25519 private key in PEM"):
        load_buyer_key(path)


def test_the_docs_sites_file_is_one(tmp_path: Path) -> None:
    guide = Path(__file__).resolve().parents[2] / "docs/client.md"
    section = guide.read_text(encoding="utf-8")
    section = section[section.index("**The sites file**") :]
    start = section.index("```yaml\n") + len("```yaml\n")
    example = section[start : section.index("\n```", start)]
    for name in ("hpc1-ca.pem", "bank-ca.pem"):
        (tmp_path / name).write_text("a certificate", encoding="utf-8")
    path = tmp_path / "sites.yaml"
    path.write_text(example, encoding="utf-8")
    registry = load_registry(path)
    hpc1, hpc2 = registry.sites
    assert hpc1.ca == tmp_path / "hpc1-ca.pem"
    assert hpc2.pin == "a90e59bb5064e233276e120c2e9c4a5a303bcabdca0e202fb03e2ed0d988baf4"
    assert hpc2.key_id == "alice@hpc2" and hpc2.timeouts == Timeouts(connect=3, read=30, total=60)
    assert registry.bank().url == "https://bank.example.org:8444"
