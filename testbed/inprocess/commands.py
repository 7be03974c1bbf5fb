"""Use this when a test drives `siteagent` commands and is not about their process.

The command runs in the test's process and its ``--json`` answer is parsed: the same code
path as the console script after Python's start, which costs a second or two a call on a
busy machine (tests that signal, kill or time a command run it as a process instead:
testbed/processes/)."""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any, Dict

from siteagent.cli.main import main


def siteagent_json(*args: str) -> Dict[str, Any]:
    """``siteagent ARGS --json`` in this process: its answer; the test fails on a non-zero
    exit, with what the command said."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*args, "--json"])
    assert code == 0, f"siteagent {' '.join(args)} exited {code}: {out.getvalue()}"
    answer: Dict[str, Any] = json.loads(out.getvalue())
    return answer
