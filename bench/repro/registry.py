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
    #: the paper whose every result ID (REPRODUCTION.md §1) the command's report must hold
    seed: str


COMMANDS: Dict[str, Command] = {
    "repro-ramp": Command("bench.repro.ramp", "000"),  # Zasada & Coveney, RAMP (§4.1)
    "repro-bgl": Command("bench.repro.bgl", "001"),  # Aridor et al., Blue Gene/L (§4.2)
    "repro-singh": Command("bench.repro.singh", "002"),  # Singh's thesis (§4.3)
    "repro-english": Command("bench.repro.english", "003"),  # Baranov et al. (§4.4)
    "repro-selection": Command("bench.repro.selection", "004"),  # Ha et al. (§4.5)
}


def available() -> Dict[str, Command]:
    """The registered commands whose module exists (in registration order)."""
    return {
        name: command
        for name, command in COMMANDS.items()
        if importlib.util.find_spec(command.module) is not None
    }
