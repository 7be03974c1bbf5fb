"""`python -m bench repro-all [options]`: every reproduction command, one after another, with
the same common options; a summary of each report's verdicts at the end. Exit code: the
worst of the commands'."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
import traceback
from collections import Counter
from typing import Any, Dict, List

from bench.repro.options import add_options, options_from
from bench.repro.registry import available
from bench.repro.verdicts import VERDICTS
from siteagent.cli import console


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench repro-all", description=__doc__)
    add_options(parser)
    options = options_from(parser.parse_args(argv))
    commands = available()
    if not commands:
        console.error("no reproduction command is built yet (bench/repro/registry.py)")
        return 1
    child_argv = [arg for arg in argv if arg != "--json"]
    summary: List[Dict[str, Any]] = []
    worst = 0
    for name, command in commands.items():
        console.stderr.print(f"== {name}", highlight=False)
        # the commands' tables go to stderr: stdout is the summary's (one JSON with --json)
        try:
            with contextlib.redirect_stdout(sys.stderr):
                code = int(importlib.import_module(command.module).main(child_argv))
        except Exception:  # one paper failing must not hide the others' results
            console.error(f"{name} failed:\n{traceback.format_exc()}")
            code = 1
        worst = max(worst, code)
        summary.append({"command": name, "exit": code, **_verdicts(options.out, name)})
    if options.json:
        console.print_json({"commands": summary})
    else:
        console.print_table(summary, ["command", "exit", *VERDICTS], title="Reproductions")
    return worst


def _verdicts(out: Any, name: str) -> Dict[str, int]:
    """How many rows of each verdict the command's report holds (none if it wrote none)."""
    path = out / f"{name}.json"
    if not path.exists():
        return {}
    counts = Counter(row["verdict"] for row in json.loads(path.read_text())["rows"])
    return {verdict: counts.get(verdict, 0) for verdict in VERDICTS}
