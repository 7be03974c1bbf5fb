"""The proxies the environment names are used by the buyer's connections and the agent's
ledger client alike, though they are resolved once per host; the user's ~/.netrc credentials
are sent by neither (protocol/sessions.py)."""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Iterator, List

import pytest

from siteagent.client.connection import SiteConnection, SiteUnreachable
from siteagent.client.sites import Site, Timeouts
from siteagent.ledger.bank import LedgerUnavailable
from siteagent.ledger.client import RemoteLedger
from siteagent.protocol import keys
from testbed.inprocess.https_stub import Canned, https_stub, site_info
from testbed.inprocess.parties import Party, receipt


class RefusingProxy:
    """A proxy on loopback that writes down each request line and refuses it."""

    def __init__(self) -> None:
        self.lines: List[str] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                peer, _ = self._server.accept()
            except OSError:
                return
            with peer:
                self.lines.append(peer.recv(4096).decode("latin-1").split("\r\n")[0])
                peer.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")

    def close(self) -> None:
        self._server.close()


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[RefusingProxy]:
    running = RefusingProxy()
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", running.url)
    monkeypatch.setenv("https_proxy", running.url)
    try:
        yield running
    finally:
        running.close()


def test_a_site_is_reached_through_the_environment_s_proxy(
    proxy: RefusingProxy, tmp_path: Path
) -> None:
    key_file = tmp_path / "alice.key"
    keys.write_private(key_file, keys.private_key_pem(Party("alice@laptop").key))
    site = Site(
        "hpc1",
        "https://hpc1.example:8443",
        None,
        "ab" * 32,
        "alice@laptop",
        key_file,
        Timeouts(connect=2, read=2),
    )
    with SiteConnection(site) as connection:
        for _ in range(2):  # resolved once, used for every request
            with pytest.raises(SiteUnreachable):
                connection.info()
    assert proxy.lines == ["CONNECT hpc1.example:8443 HTTP/1.0"] * 2


def test_the_ledger_service_is_reached_through_the_environment_s_proxy(
    proxy: RefusingProxy,
) -> None:
    ledger = RemoteLedger("https://bank.example:8444", timeout=2)
    with pytest.raises(LedgerUnavailable):
        ledger.book(receipt(Party("hpc1"), Party("alice@laptop")))
    assert proxy.lines == ["CONNECT bank.example:8444 HTTP/1.0"]


@pytest.fixture
def netrc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The user's ~/.netrc holds a password for the host the site and the bank listen on."""
    path = tmp_path / "netrc"
    path.write_text("machine 127.0.0.1 login alice password secret\n")
    path.chmod(0o600)
    monkeypatch.setenv("NETRC", str(path))


def test_neither_the_buyer_nor_the_agent_sends_the_user_s_netrc_password(
    netrc: None, tmp_path: Path
) -> None:
    key_file = tmp_path / "alice.key"
    keys.write_private(key_file, keys.private_key_pem(Party("alice@laptop").key))
    with https_stub(tmp_path) as stub:
        stub.answer("GET", "/v1/info", Canned(body=site_info(Party("hpc1"))))
        stub.answer("POST", "/v1/receipts", Canned(status=503, body={}))
        site = Site("hpc1", stub.url, stub.cert, None, "alice@laptop", key_file, Timeouts(2, 2))
        with SiteConnection(site) as connection:
            connection.info()
        with pytest.raises(LedgerUnavailable):
            RemoteLedger(stub.url, ca=stub.cert, timeout=2).book(
                receipt(Party("hpc1"), Party("alice@laptop"))
            )
    assert [(seen.method, seen.path) for seen in stub.received] == [
        ("GET", "/v1/info"),
        ("POST", "/v1/receipts"),
    ]
    assert all("authorization" not in seen.headers for seen in stub.received)
