"""Use this when a client CLI test needs a buyer's files or an in-process run of the command.

A buyer's files for ``siteagent-client`` tests against scripted sites, and a run of the
command in-process: every client CLI test module writes the same sites file."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence, Tuple

import pytest
import yaml

from siteagent.cli.main import client_main
from siteagent.protocol import keys
from testbed.inprocess.parties import Party

#: A site as a sites file names it: (name, url, CA certificate).
SiteEntry = Tuple[str, str, Path]


def sites_file(
    directory: Path,
    buyer: Party,
    sites: Sequence[SiteEntry],
    ledger: Optional[Tuple[str, Path]] = None,
) -> Path:
    """Write ``buyer``'s private key and a sites file naming ``sites`` (and the ``ledger``'s
    url and CA, if given) into ``directory``; the sites file's path."""
    key = directory / "buyer.key"
    keys.write_private(key, keys.private_key_pem(buyer.key))
    document = {
        "buyer": {"key_id": buyer.key_id, "private_key": str(key)},
        "sites": [{"name": name, "url": url, "ca": str(ca)} for name, url, ca in sites],
    }
    if ledger is not None:
        document["ledger"] = {"url": ledger[0], "ca": str(ledger[1])}
    path = directory / "sites.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def run_client(capsys: pytest.CaptureFixture[str], *args: str) -> Tuple[int, str, str]:
    """``siteagent-client ARGS`` in this process: its exit code, output and errors."""
    code = client_main(list(args))
    out, err = capsys.readouterr()
    return code, out, err
