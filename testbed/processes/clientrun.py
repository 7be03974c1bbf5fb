"""Use this when a test interrupts, kills or pauses `siteagent-client` at a journal write.

Run ``siteagent-client`` with a break point: at a chosen journal write the process is
interrupted (SIGINT, as Ctrl-C), killed (SIGKILL, as a crash) or paused for the test.

    python -m testbed.processes.clientrun [--at METHOD:N:WHEN --then ACTION] -- ARGS...

runs ``siteagent-client ARGS...`` (the real entry point, in this process) after arranging
that the Nth call (counting from 1) of ``Journal.METHOD`` does ACTION ``before`` the call runs
or ``after`` it returned. ACTION is ``INT`` or ``KILL`` (the signal the process sends itself),
or ``pause=DIR``: the process writes ``DIR/paused`` and waits until the test writes
``DIR/resume`` (the test kills a site, takes its capacity, stops the bank meanwhile).

The journal is written before every request of the commit and after every answer, so its
writes are exactly the steps between which a user can press Ctrl-C or the machine can die.
The product knows nothing of this: the test patches.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from siteagent.cli import main as cli
from siteagent.client.journal import Journal

WHEN = ("before", "after")
SIGNALS = {"INT": signal.SIGINT, "KILL": signal.SIGKILL}
#: How long a paused client waits for the test before giving up (a test that forgot it).
PAUSE_LIMIT_S = 120.0


def action(spec: str) -> Callable[[], None]:
    """What ``--then`` names, as a function to call at the break point."""
    if spec in SIGNALS:
        number = SIGNALS[spec]
        return lambda: os.kill(os.getpid(), number)
    if spec.startswith("pause="):
        directory = Path(spec.split("=", 1)[1])
        return functools.partial(pause, directory)
    raise SystemExit(f"clientrun: --then is INT, KILL or pause=DIR, not {spec!r}")


def pause(directory: Path) -> None:
    (directory / "paused").write_text(str(os.getpid()), encoding="utf-8")
    deadline = time.monotonic() + PAUSE_LIMIT_S
    while not (directory / "resume").exists():
        if time.monotonic() > deadline:
            raise SystemExit("clientrun: nobody resumed the paused client")
        time.sleep(0.05)


def install(spec: str, then: Callable[[], None]) -> None:
    """Arm ``Journal.METHOD:N:WHEN``."""
    target, count, when = spec.rsplit(":", 2)
    method = target.split(".", 1)[1] if target.startswith("Journal.") else ""
    if when not in WHEN or not method or not callable(vars(Journal).get(method)):
        raise SystemExit(f"clientrun: bad break point {spec!r} (Journal.METHOD:N:before|after)")
    original = vars(Journal)[method]
    calls = {"n": 0}
    nth = int(count)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == nth and when == "before":
            then()
        result = original(*args, **kwargs)
        if calls["n"] == nth and when == "after":
            then()
        return result

    setattr(Journal, method, wrapper)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="clientrun")
    parser.add_argument("--at", help="Journal.METHOD:N:before|after")
    parser.add_argument("--then", help="INT, KILL or pause=DIR")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    args = options.args[1:] if options.args[:1] == ["--"] else options.args
    if options.at:
        install(options.at, action(options.then or ""))
    return cli.client_main(args)


if __name__ == "__main__":
    sys.exit(main())
