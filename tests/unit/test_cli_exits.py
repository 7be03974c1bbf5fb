"""Both programs end a failure the same way (cli/exits.py): a SiteagentError is one line and
its exit code; any other exception is a bug and keeps its traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from siteagent.cli.buyer import sites
from siteagent.cli.console import EXIT_BAD_INPUT, EXIT_REFUSED, EXIT_UNAVAILABLE
from siteagent.cli.exits import BadInput, exit_code
from siteagent.cli.main import client_main, main
from siteagent.cli.site import simulate
from siteagent.client.connection import SiteError, SiteUnreachable
from siteagent.core.errors import SiteagentError
from siteagent.market.store import StoreError


def test_a_bug_inside_a_site_command_propagates_instead_of_exiting_as_bad_input(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def broken(_args: object) -> int:
        raise ValueError("a bug in the command, not the user's input")

    monkeypatch.setattr(simulate, "_simulate", broken)
    with pytest.raises(ValueError, match="a bug in the command"):
        main(["simulate", str(tmp_path / "any.swf")])


def test_a_bug_inside_a_buyer_command_propagates_instead_of_exiting_as_bad_input(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(_args: object) -> int:
        raise OSError("a bug in the command, not a file the user named")

    monkeypatch.setattr(sites, "_keys", broken)
    with pytest.raises(OSError, match="a bug in the command"):
        client_main(["keys"])


def test_a_trace_that_cannot_be_read_is_one_line_of_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", str(tmp_path), "--json"]) == EXIT_BAD_INPUT  # a directory
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "Is a directory" in err
    assert json.loads(out)["error"] == {
        "code": "bad_input",
        "message": f"[Errno 21] Is a directory: '{tmp_path}'",
        "exit": EXIT_BAD_INPUT,
    }


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (BadInput("a file to fix"), EXIT_BAD_INPUT),
        (StoreError("written by a newer siteagent"), EXIT_BAD_INPUT),
        (SiteUnreachable("refused", site="hpc1"), EXIT_UNAVAILABLE),
        (SiteError("no", code="not_owner", site="hpc1", status=403), EXIT_REFUSED),
        (SiteError("no", code="invalid_request", site="hpc1", status=400), EXIT_REFUSED),
        (SiteError("later", code="unavailable", site="hpc1", status=503), EXIT_UNAVAILABLE),
    ],
)
def test_one_mapper_gives_both_programs_their_exit_codes(
    error: SiteagentError, status: int
) -> None:
    assert exit_code(error) == status
