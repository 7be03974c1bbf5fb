"""The jobs file of ``siteagent-client english-auction``: the jobs to place, each with its
absolute priority, where its input is, and when it arrives.

One YAML (or JSON) file::

    jobs:
      - name: sim-1            # optional: job-1, job-2, ... in the file's order
        cores: 16
        walltime: 2h           # seconds, or a number with s, m, h or d
        priority: 3            # absolute: 1 the lowest (default), up to 100
        input_bytes: 2000000000
        input_site: hpc2       # the site holding the input (none: every site fetches it)
        submit: 30             # arrives this many seconds after the command starts (0)

The job's fields are the protocol's (:class:`~siteagent.protocol.models.AuctionedJob`), so a
file the client reads is a job every site reads. A mistake is refused naming the file, the
job and the key: unknown keys too, since a misspelt ``priority`` must not silently mean 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Mapping

import pydantic
import yaml

from siteagent.core.durations import parse_duration
from siteagent.core.errors import SiteagentError
from siteagent.protocol.errors import INVALID_JOBS_FILE
from siteagent.protocol.models import AuctionedJob

#: The keys a job may have besides the protocol's.
_OWN_KEYS = ("name", "submit")

#: The longest a stream may wait for its last job: a week.
MAX_SUBMIT_S = 7 * 86400


class JobsFileError(SiteagentError, ValueError):
    """A jobs file that cannot be used: the message names the file, the job and the key."""

    code = INVALID_JOBS_FILE


@dataclass(frozen=True)
class Job:
    """A job to place: its ``name`` (for the buyer), what the sites are told (``job``), and
    ``submit``, when it arrives (seconds after the stream starts)."""

    name: str
    job: AuctionedJob
    submit: float = 0.0


def load_jobs(path: Path) -> List[Job]:
    """The jobs of ``path``, in arrival order (the highest priority first among jobs arriving
    together); JobsFileError naming what is wrong."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise JobsFileError(f"{path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise JobsFileError(f"{path}: not a text file (UTF-8): {exc}") from None
    except yaml.YAMLError as exc:
        raise JobsFileError(f"{path}: not YAML: {exc}") from None
    if not isinstance(document, Mapping) or set(document) != {"jobs"}:
        raise JobsFileError(f"{path}: expected one key, jobs: a list of jobs")
    entries = document["jobs"]
    if not isinstance(entries, list) or not entries:
        raise JobsFileError(f"{path}: jobs: expected a list of at least one job")
    jobs = [_job(path, index, entry) for index, entry in enumerate(entries)]
    names = [job.name for job in jobs]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise JobsFileError(f"{path}: jobs named {', '.join(twice)} more than once")
    return sorted(jobs, key=arrival_order)


def arrival_order(job: Job) -> tuple:  # type: ignore[type-arg]
    """Arrival, then the highest priority first: a job never waits behind a lower one."""
    return (job.submit, -job.job.priority)


def mean_walltime(jobs: List[Job]) -> float:
    """The jobs' mean run time as their walltimes say (the auction's length is a share of it)."""
    return sum(job.job.walltime for job in jobs) / len(jobs)


def _job(path: Path, index: int, entry: Any) -> Job:
    where = f"{path}: jobs[{index}]"
    if not isinstance(entry, Mapping):
        raise JobsFileError(f"{where}: expected a mapping of cores, walltime, priority, ...")
    fields = dict(entry)
    walltime = fields.get("walltime")
    if isinstance(walltime, str):
        try:
            fields["walltime"] = parse_duration(walltime)
        except ValueError as exc:
            raise JobsFileError(f"{where}.walltime: {exc}") from None
    own = {key: fields.pop(key) for key in _OWN_KEYS if key in fields}
    try:
        job = AuctionedJob.model_validate(fields)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        raise JobsFileError(f"{where}.{key}: {first['msg']}") from None
    name = own.get("name", f"job-{index + 1}")
    if not isinstance(name, str) or not name:
        raise JobsFileError(f"{where}.name: expected a name")
    submit = own.get("submit", 0)
    if isinstance(submit, bool) or not isinstance(submit, (int, float)):
        raise JobsFileError(f"{where}.submit: expected seconds after the start")
    if not 0 <= submit <= MAX_SUBMIT_S:
        raise JobsFileError(f"{where}.submit: expected 0 to {MAX_SUBMIT_S} seconds")
    return Job(name, job, float(submit))
