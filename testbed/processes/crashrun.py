"""Use this when a test crashes `siteagent` at a chosen call.

Run ``siteagent`` with a crash point: the process SIGKILLs itself at a chosen call.

    python -m testbed.processes.crashrun [--crash TARGET:N:WHEN] -- ARGS...

runs ``siteagent ARGS...`` (the real command-line entry point, in this process) after
arranging that the Nth call (counting from 1) of TARGET kills the process with SIGKILL,
``before`` the call runs or ``after`` it returned. TARGET is ``store.METHOD`` (a method of
:class:`siteagent.market.store.Store`) or ``backend.METHOD`` (that method on every Backend class).

A random delay before an external SIGKILL mostly lands in interpreter start-up; crash points
land exactly between the writes that matter (intent written / reservation created /
transition recorded / deletion done). The product knows nothing of this: the test patches.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import signal
import sys
from typing import Any, Callable, List, Optional, Sequence

from siteagent.backends.base import Backend
from siteagent.cli import main as cli
from siteagent.market.store import Store

WHEN = ("before", "after")


def _subclasses(cls: type) -> List[type]:
    found: List[type] = []
    subclasses: List[type] = cls.__subclasses__()
    for sub in subclasses:
        found.append(sub)
        found.extend(_subclasses(sub))
    return found


def install(spec: str) -> None:
    """Arm the crash point ``TARGET:N:WHEN``."""
    target, count, when = spec.rsplit(":", 2)
    kind, _, method = target.partition(".")
    if when not in WHEN or kind not in ("store", "backend") or not method:
        raise SystemExit(f"crashrun: bad crash point {spec!r} (TARGET:N:before|after)")
    # the CLI imports a command's modules only when it runs: the registry brings every backend
    importlib.import_module("siteagent.backends.registry")
    classes = [Store] if kind == "store" else _subclasses(Backend)
    calls = {"n": 0}
    nth = int(count)

    def arm(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == nth and when == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            result = original(*args, **kwargs)
            if calls["n"] == nth and when == "after":
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        return wrapper

    patched = 0
    for cls in classes:
        if method in vars(cls):
            setattr(cls, method, arm(vars(cls)[method]))
            patched += 1
    if not patched:
        raise SystemExit(f"crashrun: nothing has a method {method!r} to crash in")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="crashrun")
    parser.add_argument("--crash", help="TARGET:N:before|after")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    args = options.args[1:] if options.args[:1] == ["--"] else options.args
    if options.crash:
        install(options.crash)
    return cli.main(args)


if __name__ == "__main__":
    sys.exit(main())
