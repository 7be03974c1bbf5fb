"""What slurmctld's job_submit/lua plugin gives a ``job_submit.lua``, for running the script
with a plain Lua 5.1 interpreter (Debian's ``lua5.1``, the Lua that Debian's slurmctld links).

Taken from Slurm 22.05's job_submit/lua plugin: the global ``slurm`` table with ``SUCCESS`` and
``ERROR`` and the log functions (``log_error`` and friends format their arguments like
``string.format``), ``slurm.reservations`` as a table from reservation name to a record with
``start_time`` and ``end_time`` (epoch seconds), and the job descriptor whose ``time_limit`` is
in minutes, with 4294967294 (NO_VAL) when the job gave none. ``slurm_job_submit(job_desc,
part_list, submit_uid)`` and ``slurm_job_modify(job_desc, job_rec, part_list, modify_uid)`` are
called as slurmctld calls them; a job descriptor here is a plain table, and ``os.time`` answers
the test's "now". The real cluster's test (tests/integration/test_slurm_notices.py) runs the
same script inside slurmctld.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

#: Slurm's "no value" in a 32-bit field: a job submitted without a time limit.
NO_VAL = 4294967294
#: Slurm's "unlimited" in a 32-bit field.
INFINITE = 4294967295

#: The fields of a job descriptor the tests look at afterwards.
FIELDS = ("time_limit", "admin_comment", "reservation")


@dataclass(frozen=True)
class Outcome:
    """What one call returned, the job descriptor's fields afterwards (None when unset),
    and the messages the script logged as errors."""

    rc: int
    job: Dict[str, Any]
    errors: List[str]


def lua_value(value: Any) -> str:
    """A Lua literal for a JSON-like value (strings, numbers, booleans, tables, None)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # ASCII: Lua reads JSON's escapes the same
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"[{lua_value(k)}] = {lua_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no Lua literal for {value!r}")


def run_job_submit(
    script: Path,
    job: Mapping[str, Any],
    reservations: Optional[Mapping[str, Mapping[str, int]]],
    now: int,
    record: Optional[Mapping[str, Any]] = None,
    lua: str = "lua5.1",
) -> Outcome:
    """Load ``script`` and submit ``job`` (or, with the job's current ``record``, modify it)
    at ``now``, with ``reservations`` as slurmctld's (None: no ``slurm.reservations`` at all)."""
    call = (
        "slurm_job_submit(job, {}, 0)"
        if record is None
        else f"slurm_job_modify(job, {lua_value(record)}, {{}}, 0)"
    )
    program = f"""
slurm = {{SUCCESS = 0, ERROR = -1, reservations = {lua_value(reservations)}}}
local errors = {{}}
function slurm.log_error(fmt, ...) table.insert(errors, string.format(fmt, ...)) end
function slurm.log_info(fmt, ...) end
slurm.log_debug, slurm.log_verbose, slurm.log_user = slurm.log_info, slurm.log_info, slurm.log_info
os.time = function() return {now} end
dofile({lua_value(str(script))})
job = {lua_value(dict(job))}
print("rc", tostring({call}))
for _, key in ipairs({{{", ".join(lua_value(field) for field in FIELDS)}}}) do
  print("job", key, tostring(job[key]))
end
for _, message in ipairs(errors) do print("error", message) end
"""
    done = subprocess.run(
        [lua, "-"], input=program, capture_output=True, text=True, timeout=30, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{lua} failed: {done.stderr.strip()}")
    return _outcome(done.stdout)


def _outcome(output: str) -> Outcome:
    rc, job, errors = 0, {}, []
    for line in output.splitlines():
        kind, _, rest = line.partition("\t")
        if kind == "rc":
            rc = int(rest)
        elif kind == "job":
            key, _, value = rest.partition("\t")
            job[key] = None if value == "nil" else int(value) if value.isdigit() else value
        elif kind == "error":
            errors.append(rest)
    return Outcome(rc, job, errors)
