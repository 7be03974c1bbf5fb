"""One buyer of ``python -m bench auction``: runs ``siteagent-client auction`` (or ``quote``,
``--command``) through its real entry point, in this process, so that interpreter start-up is
not counted, a number of times one after the other, and writes each run's wall time, exit code
and phases as JSON.

    python -m bench.auction_buyer --sites F --state DIR --out F --repeat N --start-at T -- ARGS

Each buyer runs in a process of its own with its own key (the sites file's), journal
(``$XDG_STATE_HOME``) and HTTPS connections, as concurrent users would. ``--start-at`` (epoch
seconds) lets the benchmark start every buyer of a level at the same instant. The phases
(each bidding round, then the commit) come from the times the journal stamps on its rows.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from siteagent.client.journal import JOURNAL_FILE


def phases(journal: Path, created_after: float) -> Dict[str, Any]:
    """The last auction opened after ``created_after``: its rounds' durations (round 1 from
    the auction's opening) and the commit's (from the last round to the final state)."""
    db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True)
    try:
        auction = db.execute(
            "SELECT id, created, updated, state FROM auctions WHERE created > ? "
            "ORDER BY created DESC LIMIT 1",
            (created_after,),
        ).fetchone()
        if auction is None:
            return {}
        auction_id, created, updated, state = auction
        stamps = [
            at
            for (at,) in db.execute(
                "SELECT at FROM rounds WHERE auction_id = ? ORDER BY round", (auction_id,)
            )
        ]
    finally:
        db.close()
    marks = [created, *stamps]
    return {
        "state": state,
        "rounds_s": [later - earlier for earlier, later in zip(marks, marks[1:])],
        "commit_s": updated - marks[-1],
    }


def run(args: argparse.Namespace, auction: Sequence[str]) -> List[Dict[str, Any]]:
    from siteagent.cli.main import client_main  # after the environment names this buyer's files

    journal = Path(args.state) / "siteagent" / JOURNAL_FILE
    pause = args.start_at - time.time()
    if pause > 0:
        time.sleep(pause)
    results = []
    for _ in range(args.repeat):
        opened = time.time()
        began = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = client_main([args.command, *auction, "--json"])
        wall = time.perf_counter() - began
        ended = time.time()
        results.append(
            {
                "wall_s": wall,
                "code": code,
                "began": opened,
                "ended": ended,
                **(phases(journal, opened - 1) if args.command == "auction" else {}),
            }
        )
    return results


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.auction_buyer")
    parser.add_argument("--sites", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--start-at", type=float, default=0.0)
    parser.add_argument("--command", choices=("auction", "quote"), default="auction")
    parser.add_argument("auction", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    os.environ["SITEAGENT_CLIENT_SITES"] = args.sites
    os.environ["XDG_STATE_HOME"] = args.state
    auction = [a for a in args.auction if a != "--"]
    Path(args.out).write_text(json.dumps(run(args, auction)), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
