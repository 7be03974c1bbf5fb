"""What a site installs besides the package: the systemd unit, the batch system's programs and
hook, the sample configuration, the Prometheus rules and the Grafana dashboard.

``siteagent install-service`` plans the files from the configuration (its reservation prefix,
the notices' socket, its batch system) and writes them, or with ``--dry-run`` only says what it
would write. The sources are the repository's ``systemd/`` and ``contrib/`` files: those of the
source tree when the agent runs from a checkout, else the copies the wheel installed under
``<prefix>/share/siteagent``. A few constants are written into them (:func:`set_constant`), so
that the programs slurmctld and PBS run need nothing but the standard library and no
configuration of their own.

A file that exists with other content is kept unless forced: it may be the administrator's
own (an edited ``siteagent.yaml``, a site's ``job_submit.lua``), and the report says so.
"""

from __future__ import annotations

import enum
import json
import os
import re
import socket as stdlib_socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from siteagent.config.schema import BackendType, Config

#: Where the batch system's programs go (run by slurmctld or pbs_server, never by users).
LIBEXEC = Path("/usr/libexec/siteagent")
#: Where the files an administrator copies or points other programs at go.
SHARE = Path("/usr/share/siteagent")
#: The account the systemd unit runs the agent as (``User=``): the one PBS lets submit
#: reservations with the agent's prefix.
AGENT_USER = "siteagent"
#: The socket the programs are written for when the configuration names none (the systemd
#: unit's RuntimeDirectory).
DEFAULT_SOCKET = Path("/run/siteagent/notify.sock")


class Action(str, enum.Enum):
    """What installing one file does (or, in a dry run, would do)."""

    INSTALL = "install"
    UNCHANGED = "unchanged"
    KEEP = "keep (differs; --force replaces it)"
    REPLACE = "replace"


@dataclass(frozen=True)
class SiteFile:
    """One file to install: where, with which mode and content, and what it is for."""

    target: Path
    mode: int
    content: bytes
    what: str


def source_root() -> Path:
    """Where the ``systemd/`` and ``contrib/`` sources are: the checkout this package runs
    from, else the wheel's copies under ``<prefix>/share/siteagent``."""
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "contrib" / "slurm" / "resv-notify").is_file():
        return checkout
    return Path(sys.prefix) / "share" / "siteagent"


def set_constant(text: str, name: str, value: str) -> str:
    """``text`` with the one assignment ``NAME = "..."`` (Python) or ``local NAME = "..."``
    (Lua) set to ``value``; ValueError unless there is exactly one. ``value`` is written as a
    JSON string, which both languages read the same for the plain names and paths the
    configuration allows."""
    pattern = re.compile(rf'^((?:local )?{re.escape(name)} = )"[^"\n]*"$', re.MULTILINE)
    found = len(pattern.findall(text))
    if found != 1:
        raise ValueError(f"expected one assignment to {name}, found {found}")
    return pattern.sub(lambda match: match.group(1) + json.dumps(value), text)


def plan(
    config: Config,
    config_file: Path,
    executable: Path,
    slurm_conf_dir: Path,
    root: Optional[Path] = None,
) -> List[SiteFile]:
    """The files for a site running ``config`` (read from ``config_file``) with the
    ``siteagent`` program at ``executable``; the batch system's ones for its backend, with
    ``job_submit.lua`` beside slurm.conf in ``slurm_conf_dir``. ``root`` holds the sources
    (default :func:`source_root`)."""
    sources = root or source_root()
    socket = str(config.notifications.socket or DEFAULT_SOCKET)
    prefix = config.reservations.name_prefix

    def read(relative: str) -> str:
        return (sources / relative).read_text(encoding="utf-8")

    unit = _with_exec_start(read("systemd/siteagent.service"), executable, config_file)
    files = [
        SiteFile(
            Path("/etc/systemd/system/siteagent.service"), 0o644, unit.encode(), "systemd unit"
        ),
        _copy(
            sources,
            "systemd/siteagent.env.example",
            Path("/etc/default/siteagent"),
            0o644,
            "the unit's optional environment",
        ),
        _copy(
            sources,
            "contrib/siteagent.yaml",
            config_file,
            0o644,
            "configuration (every key at its default)",
        ),
        _copy(
            sources,
            "contrib/prometheus/siteagent-rules.yml",
            SHARE / "prometheus" / "siteagent-rules.yml",
            0o644,
            "Prometheus alerting rules",
        ),
        _copy(
            sources,
            "contrib/grafana/siteagent-dashboard.json",
            SHARE / "grafana" / "siteagent-dashboard.json",
            0o644,
            "Grafana dashboard",
        ),
    ]
    if config.backend.type in (BackendType.SLURM, BackendType.PYSLURM):
        notify = set_constant(
            set_constant(read("contrib/slurm/resv-notify"), "SOCKET", socket), "PREFIX", prefix
        )
        lua = set_constant(read("contrib/slurm/job_submit.lua"), "PREFIX", prefix)
        files += [
            SiteFile(
                LIBEXEC / "slurm-resv-prolog", 0o755, notify.encode(), "slurm.conf ResvProlog"
            ),
            SiteFile(
                LIBEXEC / "slurm-resv-epilog", 0o755, notify.encode(), "slurm.conf ResvEpilog"
            ),
            SiteFile(
                slurm_conf_dir / "job_submit.lua", 0o644, lua.encode(), "JobSubmitPlugins=lua"
            ),
        ]
    if config.backend.type is BackendType.PBS:
        hook_config = {
            "socket": socket,
            "prefix": prefix,
            "agent_user": AGENT_USER,
            "agent_host": agent_host(),
        }
        files += [
            _copy(
                sources,
                "contrib/pbs/siteagent_hook.py",
                SHARE / "pbs" / "siteagent_hook.py",
                0o644,
                "PBS hook (qmgr import hook)",
            ),
            SiteFile(
                SHARE / "pbs" / "siteagent_hook.json",
                0o644,
                (json.dumps(hook_config, indent=2) + "\n").encode(),
                "the hook's configuration",
            ),
        ]
    return files


def agent_host() -> str:
    """The host the agent submits its PBS reservations from: this one, where install-service
    runs (the PBS hook refuses the agent's prefix from any other)."""
    return stdlib_socket.getfqdn()


#: The unit's command line as the repository ships it (the administrator's guide's paths).
_EXEC_START = "ExecStart=/usr/bin/siteagent serve --config /etc/siteagent/siteagent.yaml"


def _with_exec_start(unit: str, executable: Path, config_file: Path) -> str:
    """The unit running this ``siteagent`` with this configuration file."""
    if unit.count(_EXEC_START) != 1:
        raise ValueError(f"the systemd unit has no line {_EXEC_START!r} to adapt")
    return unit.replace(_EXEC_START, f"ExecStart={executable} serve --config {config_file}")


def _copy(sources: Path, relative: str, target: Path, mode: int, what: str) -> SiteFile:
    return SiteFile(target, mode, (sources / relative).read_bytes(), what)


def action(file: SiteFile, destdir: Path, force: bool) -> Action:
    """What installing ``file`` under ``destdir`` does: a file that exists with other content
    is kept unless ``force``."""
    path = staged(file.target, destdir)
    if not path.exists():
        return Action.INSTALL
    if path.read_bytes() == file.content:
        return Action.UNCHANGED
    return Action.REPLACE if force else Action.KEEP


def install(files: Sequence[SiteFile], destdir: Path, force: bool) -> Dict[Path, Action]:
    """Write the files under ``destdir`` (``/`` for the real system), creating directories
    (0755) as needed; what was done to each."""
    done = {}
    for file in files:
        what = action(file, destdir, force)
        if what in (Action.INSTALL, Action.REPLACE):
            path = staged(file.target, destdir)
            path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            path.write_bytes(file.content)
            os.chmod(path, file.mode)
        done[file.target] = what
    return done


def staged(target: Path, destdir: Path) -> Path:
    """Where ``target`` (absolute) lands under ``destdir``."""
    return destdir / target.relative_to(target.anchor)
