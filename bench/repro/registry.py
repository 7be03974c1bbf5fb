"""The reproduction commands: ``python -m bench repro-NAME`` runs ``main(argv)`` of its module.

One line per paper module, already written for the five seeds: a command appears (in
``python -m bench``'s list and in ``repro-all``) as soon as its module exists. A new command is
one more line here. See docs/reproductions.md.
"""

from __future__ import annotations

import importlib.util
from typing import Dict, NamedTuple


class Command(NamedTuple):
    module: str
    #: the paper whose every result ID (paper_values.yaml) the command's report must hold
    seed: str


COMMANDS: Dict[str, Command] = {
    "repro-ramp": Command("bench.repro.ramp", "000"),  # Zasada & Coveney, RAMP
    "repro-bgl": Command("bench.repro.bgl", "001"),  # Aridor et al., Blue Gene/L
    "repro-singh": Command("bench.repro.singh", "002"),  # Singh's thesis
    "repro-english": Command("bench.repro.english", "003"),  # Baranov et al., English auction
    "repro-selection": Command("bench.repro.selection", "004"),  # Ha et al., resource selection
}


def available() -> Dict[str, Command]:
    """The registered commands whose module exists (in registration order)."""
    return {
        name: command
        for name, command in COMMANDS.items()
        if importlib.util.find_spec(command.module) is not None
    }
