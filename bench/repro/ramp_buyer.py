"""One buyer of ``python -m bench repro-ramp``: a process that runs the auctions it is sent,
one JSON command a line on stdin, and answers each with one JSON line on stdout.

    python -m bench.repro.ramp_buyer --sites F --state DIR --clock ORIGIN:SPEED

A command: ``{"id": ..., "at": EPOCH or null, "auction": [ARGS], "start_in_s": S or null,
"walltime_s": W, "exact_start": true, "cancel": false}``. The buyer waits until ``at`` (so
that concurrent buyers start together), runs ``siteagent-client auction ARGS --json``
through the client's real entry point, in this process (interpreter start-up is not
counted), with a journal of its own for every auction (a fresh User Agent, as in the paper).
With ``start_in_s`` the request asks to start that long after the auction opens, on the
agents' clock (they replay their traces at ``SPEED`` times the wall clock from ``ORIGIN``:
docs/repro-ramp.md §2), exactly then (ending ``walltime_s`` later) unless ``exact_start`` is
false. With ``cancel`` the confirmed reservations are cancelled afterwards, so that the next
auction finds the market as this one did. The answer holds the auction's JSON report, its
wall time and phases (each round and the commit, from the journal's stamps), and exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench.auction_buyer import phases


def agent_now(clock: Tuple[float, float]) -> int:
    """The agents' time now (epoch seconds): ``origin + (wall - origin) x speed``."""
    origin, speed = clock
    return int(origin + (time.time() - origin) * speed)


def client(argv: List[str]) -> Tuple[int, str]:
    """``siteagent-client ARGV`` in this process: its exit code and standard output."""
    from siteagent.cli.main import client_main  # after the environment names this buyer's files

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = client_main(argv)
    return code, out.getvalue()


def run(command: Dict[str, Any], state: Path, clock: Tuple[float, float]) -> Dict[str, Any]:
    """One command: the auction, and the cancels it asks for."""
    pause = (command.get("at") or 0) - time.time()
    if pause > 0:
        time.sleep(pause)
    journal = state / f"journal-{command['id']}.db"
    args = list(command["auction"])
    start_in = command.get("start_in_s")
    if start_in is not None:
        start = agent_now(clock) + int(start_in)
        args += ["--earliest", str(start)]
        if command.get("exact_start", True):
            args += ["--deadline", str(start + int(command["walltime_s"]))]
    began_at, agent_began = time.time(), agent_now(clock)
    began = time.perf_counter()
    code, out = client(["auction", *args, "--journal", str(journal), "--json"])
    wall = time.perf_counter() - began
    report: Optional[Dict[str, Any]] = json.loads(out) if out.strip() else None
    cancelled = []
    if command.get("cancel") and report is not None:
        for entry in report.get("confirmed", []):
            target = f"{entry['site']}:{entry['reservation_id']}"
            cancel = ["reservations", "cancel", target, "--journal", str(journal)]
            cancelled.append(client(cancel)[0])
    return {
        "id": command["id"],
        "code": code,
        "wall_s": wall,
        "began": began_at,
        "agent_began": agent_began,
        "report": report,
        "phases": phases(journal, began_at - 1) if journal.exists() else {},
        "cancel_codes": cancelled,
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.repro.ramp_buyer")
    parser.add_argument("--sites", required=True, help="this buyer's sites file (its key)")
    parser.add_argument("--state", required=True, help="where its journals go")
    parser.add_argument("--clock", required=True, help="ORIGIN:SPEED of the agents' replay")
    args = parser.parse_args(argv)
    origin, speed = (float(part) for part in args.clock.split(":"))
    state = Path(args.state)
    state.mkdir(parents=True, exist_ok=True)
    os.environ["SITEAGENT_CLIENT_SITES"] = args.sites
    os.environ["XDG_STATE_HOME"] = str(state)
    with contextlib.suppress(SystemExit):  # import the client before the first auction is timed
        client(["sites", "--help"])
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip():
            answer = run(json.loads(line), state, (origin, speed))
            print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
