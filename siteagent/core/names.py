"""The rules for every kind of name the agent passes on, one rule per kind.

Names reach batch-system commands (``scontrol``, ``pbs_rsub``), signature parameters and
configuration listings, so each is checked against its rule before it is used. A rule matches
the *whole* string (:func:`is_valid` uses ``re.fullmatch``): a pattern ending in ``$`` would
let a trailing newline through ("bob\\n"), which a command then reads as something else.

Backend-specific limits (PBS's 15-character names, Unix group names) are rules of their own,
kept here with the others so that one file says what a valid name is.
"""

from __future__ import annotations

import re
from typing import FrozenSet, Pattern

#: A name safe wherever the agent puts one (site, partition, account, Slurm reservation,
#: reference request): what Slurm accepts unquoted, nothing a command line would split.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")

#: The prefix that marks the agent's reservations: the start of a name that Slurm and PBS both
#: accept (PBS names begin with a letter), short enough to leave room for the id after it.
RESERVATION_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,15}")

#: Scheduler (POSIX-portable) user names, as useradd accepts them by default, optionally
#: ending in ``$`` (machine accounts).
USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}\$?")

#: Key ids: printable, no quotes or spaces, short (they are Structured Field strings).
KEY_ID = re.compile(r"[A-Za-z0-9._@:+-]{1,128}")

#: Host names the API may listen on (IP addresses are checked as addresses).
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}")

#: PBS reservation names (``Reserve_Name``): the strictest documented rule (the
#: reservation-attribute man page: 15 characters, the first alphabetic), so that a name
#: accepted here works on every release.
PBS_NAME_MAX = 15
PBS_RESERVATION_NAME = re.compile(rf"[A-Za-z][A-Za-z0-9_.-]{{0,{PBS_NAME_MAX - 1}}}")

#: PBS reservation ids as pbs_rsub and pbs_rstat print them, which the agent passes back to
#: ``pbs_rstat`` and ``pbs_rdel``: advance ``R``, standing ``S`` or maintenance ``M``, a number,
#: then the server (docs/pbs.md §1). The reservation's queue is the id without the server.
PBS_RESERVATION_ID = re.compile(r"([RSM][0-9]+)(?:\.([A-Za-z0-9_.-]+))?")

#: PBS queue names: up to 15 characters, alphanumeric plus ``_``, ``-`` and ``.``.
PBS_QUEUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,14}")

#: Unix group names, which PBS authorises reservations for (``-G``); sites map accounts to them.
UNIX_GROUP = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")

#: Flags the agent may put on a Slurm reservation. The others change the meaning of a
#: reservation in ways the planner does not model (docs/slurm.md §6.2): FLEX lets jobs leak
#: outside it, PURGE_COMP deletes it early even if never used, MAGNETIC pulls in foreign jobs,
#: TIME_FLOAT/DAILY/WEEKLY/... move or repeat it, FIRST_CORES/PART_NODES change its size.
SLURM_RESERVATION_FLAGS: FrozenSet[str] = frozenset(
    {"IGNORE_JOBS", "OVERLAP", "MAINT", "STATIC_ALLOC", "NO_HOLD_JOBS_AFTER", "REPLACE_DOWN"}
)


def is_valid(rule: Pattern[str], value: object) -> bool:
    """Whether ``value`` is a string that ``rule`` matches from its first character to its last."""
    return isinstance(value, str) and rule.fullmatch(value) is not None


def check(rule: Pattern[str], value: object, what: str) -> str:
    """``value`` if it follows ``rule``, else ValueError naming ``what`` and the rule."""
    if isinstance(value, str) and is_valid(rule, value):
        return value
    raise ValueError(f"invalid {what} {value!r}: must match {rule.pattern}")
