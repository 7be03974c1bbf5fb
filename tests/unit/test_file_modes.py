"""File modes: trusted files that others may write are refused, as ssh refuses them, and what
the agent keeps in its state directory is its own (0700, files 0600) whatever the umask."""

from __future__ import annotations

import json
import os
import pwd
import stat
from pathlib import Path
from typing import Callable, Dict, Iterator

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from siteagent.backends.replay import REPLAY_STATE_FILE
from siteagent.cli.main import main
from siteagent.config import loading
from siteagent.config.reading import ConfigError
from siteagent.core.files import UnsafeFile
from siteagent.daemon.assemble import assemble
from siteagent.ledger.bank import Ledger
from siteagent.ledger.participants import load_participants
from siteagent.market.site import STORE_FILE, open_site
from siteagent.protocol.keys import load_private_key, private_key_pem, public_key_text
from siteagent.security.clients import load_authorized_clients
from siteagent.security.tls import ensure_self_signed, server_ssl_context, write_self_signed
from testbed.traces import write_trace


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def no_umask() -> Iterator[None]:
    """The most permissive umask: whatever the agent makes private, it makes so itself."""
    before = os.umask(0)
    yield
    os.umask(before)


def clients_file(path: Path) -> Path:
    public = public_key_text(Ed25519PrivateKey.generate().public_key())
    path.write_text(
        yaml.safe_dump({"clients": {"alice@laptop": {"public_key": public, "user": "alice"}}})
    )
    return path


def participants_file(path: Path) -> Path:
    public = public_key_text(Ed25519PrivateKey.generate().public_key())
    path.write_text(yaml.safe_dump({"sites": {"hpc1": {"public_key": public}}}))
    return path


def key_file(path: Path) -> Path:
    path.write_bytes(private_key_pem(Ed25519PrivateKey.generate()))
    return path


def tls_key(path: Path) -> Path:
    write_self_signed(path.with_suffix(".crt"), path)
    return path


#: Each trusted file: how to make one, and the reader that must refuse it when others may
#: write it.
TRUSTED: Dict[str, Callable[[Path], object]] = {
    "configuration": lambda path: loading.load(path),
    "authorized clients": load_authorized_clients,
    "participants": load_participants,
    "private key": load_private_key,
    "TLS key": lambda path: server_ssl_context(path.with_suffix(".crt"), path),
}
MAKERS: Dict[str, Callable[[Path], Path]] = {
    "configuration": lambda path: (path.write_text("site: {name: hpc1}\n"), path)[1],
    "authorized clients": clients_file,
    "participants": participants_file,
    "private key": key_file,
    "TLS key": tls_key,
}


#: Modes that let someone else write a file, and who.
WRITABLE = {0o666: "group and others", 0o664: "group", 0o602: "others"}


@pytest.mark.parametrize("kind", sorted(TRUSTED))
def test_a_trusted_file_is_read_only_while_nobody_else_may_write_it(
    tmp_path: Path, kind: str
) -> None:
    path = MAKERS[kind](tmp_path / "trusted.key")
    for safe in (0o644, 0o640, 0o600):
        os.chmod(path, safe)
        TRUSTED[kind](path)
    for writable, who in WRITABLE.items():
        os.chmod(path, writable)
        with pytest.raises((UnsafeFile, ConfigError)) as caught:
            TRUSTED[kind](path)
        message = str(caught.value)
        assert str(path) in message and f"mode {writable:04o}" in message
        assert f"so {who} may change it" in message
        assert f"chmod go-w {path}" in message


NOBODY = pwd.getpwnam("nobody").pw_uid


@pytest.mark.skipif(os.geteuid() != 0, reason="gives files to nobody, which needs root")
@pytest.mark.parametrize("kind", sorted(TRUSTED))
def test_a_trusted_file_another_user_owns_or_could_replace_is_refused(
    tmp_path: Path, kind: str
) -> None:
    """As ssh's StrictModes: the file's owner, and each directory it is in."""
    place = tmp_path / "etc"
    place.mkdir(mode=0o755)
    path = MAKERS[kind](place / "trusted.key")
    os.chmod(path, 0o600)
    TRUSTED[kind](path)
    os.chown(path, NOBODY, -1)
    with pytest.raises((UnsafeFile, ConfigError)) as caught:
        TRUSTED[kind](path)
    assert "the " in str(caught.value) and "is owned by nobody, not by root" in str(caught.value)
    assert f"chown root {path}" in str(caught.value)
    os.chown(path, 0, -1)
    for writable in (0o777, 0o775):
        os.chmod(place, writable)
        with pytest.raises((UnsafeFile, ConfigError)) as caught:
            TRUSTED[kind](path)
        assert f"its directory {place} is mode {writable:04o}" in str(caught.value)
        assert f"chmod go-w {place}" in str(caught.value)
    os.chmod(place, 0o1777)  # sticky and root's, as /tmp: nobody may replace root's file
    TRUSTED[kind](path)
    os.chmod(place, 0o755)
    os.chown(place, NOBODY, -1)
    with pytest.raises((UnsafeFile, ConfigError)) as caught:
        TRUSTED[kind](path)
    assert f"its directory {place} is owned by nobody" in str(caught.value)


def test_check_config_reports_every_trusted_file_others_may_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    cert, key = state / "tls" / "server.crt", state / "tls" / "server.key"
    write_self_signed(cert, key)
    site_key = key_file(state / "site.key")
    participants = participants_file(tmp_path / "participants.yaml")
    for path in (key, site_key, participants):
        os.chmod(path, 0o646)
    config = tmp_path / "siteagent.yaml"
    config.write_text(
        yaml.safe_dump({"state_dir": str(state), "ledger": {"participants": str(participants)}})
    )
    assert main(["check-config", str(config), "--json"]) == 1
    errors = json.loads(capsys.readouterr().out)["errors"]
    assert {error["path"] for error in errors} == {
        "api.tls.key",
        "security.site_key",
        "ledger.participants",
    }
    assert all("mode 0646" in error["message"] for error in errors)

    os.chmod(config, 0o666)
    assert main(["check-config", str(config), "--json"]) == 1
    answer = json.loads(capsys.readouterr().out)
    assert answer["file"] == str(config)
    assert "the configuration file is mode 0666" in answer["errors"][0]["message"]

    os.chmod(config, 0o644)
    clients = clients_file(state / "authorized_clients.yaml")
    os.chmod(clients, 0o666)
    assert main(["check-config", str(config)]) == 1
    assert "the authorized-clients file is mode 0666" in capsys.readouterr().err


def settings_file(tmp_path: Path) -> Path:
    trace = write_trace(tmp_path / "t.swf", [(0, 3600, 8, 3600)], 16)
    document = {
        "state_dir": str(tmp_path / "state"),
        "backend": {"type": "swf", "swf": {"trace": trace, "offset": 0}},
    }
    path = tmp_path / "siteagent.yaml"
    path.write_text(yaml.safe_dump(document))
    os.chmod(path, 0o644)
    return path


def test_the_state_directory_and_everything_in_it_are_private_whatever_the_umask(
    tmp_path: Path, no_umask: None
) -> None:
    """What ``serve`` makes on first start: the directory 0700, the store, its SQLite files
    and lock, the replayed cluster's state and lock, the ledger, the site key and the TLS key
    0600; the self-signed certificate 0644 at most."""
    config = loading.load(settings_file(tmp_path))
    site = open_site(config)
    parts = assemble(site)
    ensure_self_signed(config.api.tls.cert, config.api.tls.key)  # as serve's first start
    site.manager.housekeeping()  # a write: SQLite's -wal and -shm exist while it is open
    state = config.state_dir
    try:
        kept = sorted(path for path in state.rglob("*") if path.is_file())
        names = {str(path.relative_to(state)) for path in kept}
        assert {
            STORE_FILE,
            f"{STORE_FILE}-wal",
            f"{STORE_FILE}-shm",
            f"{STORE_FILE}.lock",
            REPLAY_STATE_FILE,
            f"{REPLAY_STATE_FILE}.lock",
            "ledger.sqlite3",
            "site.key",
            "tls/server.key",
            "tls/server.crt",
        } <= names
        assert mode(state) == 0o700 and mode(state / "tls") == 0o700
        modes = {str(path.relative_to(state)): mode(path) for path in kept}
        assert modes.pop("tls/server.crt") & 0o133 == 0  # 0644 at most
        assert modes == dict.fromkeys(modes, 0o600)
    finally:
        parts.deals.close()
        site.close()


def test_files_an_older_version_left_readable_are_made_private_on_open(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    store, ledger = state / STORE_FILE, state / "ledger.sqlite3"
    for path in (store, f"{store}-wal", f"{store}.lock", ledger, f"{ledger}-shm"):
        Path(path).touch(mode=0o644)
        os.chmod(path, 0o644)
    site = open_site(loading.load(settings_file(tmp_path)))
    bank = Ledger(ledger)
    try:
        for path in (store, f"{store}-wal", f"{store}.lock", ledger, f"{ledger}-shm"):
            assert mode(Path(path)) == 0o600, path
    finally:
        bank.close()
        site.close()
