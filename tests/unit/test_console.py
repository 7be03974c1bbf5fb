"""Errors and warnings reach a person as one line, whatever the terminal's width."""

from __future__ import annotations

import os
import subprocess
import sys

LONG = "/tmp/" + "x" * 150 + "/client.key already exist; --force replaces them"


def _output_of(code: str, columns: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run(
        [sys.executable, "-c", "from siteagent.cli import console; " + code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )


def _stderr_of(call: str, columns: str | None) -> str:
    return _output_of(f"console.{call}({LONG!r})", columns).stderr


def test_an_error_is_one_line_when_stderr_is_a_pipe_with_no_columns() -> None:
    assert _stderr_of("error", None) == f"siteagent: error: {LONG}\n"


def test_an_error_is_one_line_on_a_narrow_terminal_width() -> None:
    assert _stderr_of("error", "40") == f"siteagent: error: {LONG}\n"


def test_a_warning_is_one_line_too() -> None:
    assert _stderr_of("warning", "40") == f"siteagent: warning: {LONG}\n"


def test_text_on_stdout_keeps_a_long_path_on_one_line() -> None:
    printed = _output_of(f"console.stdout.print({LONG!r}, markup=False)", None).stdout
    assert printed == f"{LONG}\n"
