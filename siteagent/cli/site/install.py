"""``siteagent install-service``: what a site installs besides the package, in one command.

The systemd unit (running this ``siteagent``), its environment file, the sample configuration,
the Prometheus rules and the Grafana dashboard, and for the configuration's batch system the
programs it runs (Slurm's ResvProlog/ResvEpilog and job_submit.lua, PBS's hook), with the
configuration's socket and reservation prefix written into them
(:mod:`siteagent.host.installation`). ``--dry-run`` says what it would do and writes nothing;
a file that exists with other content is kept unless ``--force``. It then prints what is left to
do by hand: the lines for slurm.conf or the qmgr commands, and starting the service.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, List, Sequence

from siteagent.cli import console, options
from siteagent.config.schema import BackendType, Config
from siteagent.host import installation

#: Where the configuration goes when ``--config`` names none.
DEFAULT_CONFIG_FILE = Path("/etc/siteagent/siteagent.yaml")


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "install-service",
        help="install the systemd unit and the batch system's programs (as root)",
        description=(
            "Install what a site runs besides the package: the systemd unit (running this "
            "siteagent with --config), /etc/default/siteagent, the sample configuration, the "
            "Prometheus rules and Grafana dashboard under /usr/share/siteagent, and for the "
            "configuration's backend Slurm's ResvProlog/ResvEpilog programs and job_submit.lua "
            "or PBS's hook, written for its notifications.socket and reservation prefix. A file "
            "that exists with other content is kept unless --force. Prints the steps left."
        ),
    )
    options.add_site_options(sub)
    sub.add_argument(
        "--dry-run", action="store_true", help="say what would be installed; write nothing"
    )
    sub.add_argument(
        "--destdir",
        type=Path,
        default=Path("/"),
        metavar="DIR",
        help="install under DIR instead of / (staging, packaging)",
    )
    sub.add_argument(
        "--slurm-conf-dir",
        type=Path,
        metavar="DIR",
        help="where slurm.conf is, for job_submit.lua (default: backend.slurm.slurm_conf's "
        "directory, else /etc/slurm)",
    )
    sub.add_argument("--force", action="store_true", help="replace files that differ")
    sub.add_argument("--json", action="store_true", help="print one JSON object")
    sub.set_defaults(command=_install)


def _install(args: argparse.Namespace) -> int:
    config = options.load_config(args)
    config_file = Path(args.config).resolve() if args.config else DEFAULT_CONFIG_FILE
    files = installation.plan(config, config_file, _executable(), _slurm_conf_dir(args, config))
    if args.dry_run:
        done = {file.target: installation.action(file, args.destdir, args.force) for file in files}
    else:
        done = installation.install(files, args.destdir, args.force)
    steps = next_steps(config, config_file)
    rows: List[Dict[str, Any]] = [
        {
            "file": str(installation.staged(file.target, args.destdir)),
            "mode": f"{file.mode:o}",
            "action": done[file.target].value,
            "what": file.what,
        }
        for file in files
    ]
    if args.json:
        console.print_json({"dry_run": args.dry_run, "files": rows, "next_steps": steps})
        return 0
    title = "Would install (dry run)" if args.dry_run else "Installed"
    console.print_table(rows, ["file", "mode", "action", "what"], title=title)
    console.stdout.print("Then:\n" + "\n".join(steps), highlight=False, markup=False)
    return 0


def _executable() -> Path:
    """This ``siteagent`` program (the unit runs the same one), or the guide's path."""
    beside = Path(sys.executable).parent / "siteagent"
    return beside if beside.exists() else Path("/usr/bin/siteagent")


def _slurm_conf_dir(args: argparse.Namespace, config: Config) -> Path:
    if args.slurm_conf_dir is not None:
        return Path(args.slurm_conf_dir)
    slurm_conf = config.backend.slurm.slurm_conf
    return slurm_conf.parent if slurm_conf is not None else Path("/etc/slurm")


def next_steps(config: Config, config_file: Path) -> List[str]:
    """What is left to do by hand once the files are in place."""
    libexec, share = installation.LIBEXEC, installation.SHARE
    steps: List[str] = []
    if config.notifications.socket is None and config.backend.type is not BackendType.SWF:
        steps.append(
            f"  set notifications.socket: {installation.DEFAULT_SOCKET} in {config_file} "
            "(the programs below notify it; without it the agent notices at its polls)"
        )
    if config.backend.type in (BackendType.SLURM, BackendType.PYSLURM):
        steps += [
            "  sacctmgr -i add user siteagent account=root && "
            "sacctmgr -i modify user siteagent set adminlevel=operator",
            "  add to slurm.conf, then scontrol reconfigure (contrib/slurm/README.md):",
            f"    ResvProlog={libexec / 'slurm-resv-prolog'}",
            f"    ResvEpilog={libexec / 'slurm-resv-epilog'}",
            "    JobSubmitPlugins=lua",
        ]
    if config.backend.type is BackendType.PBS:
        steps += ["  as root on the PBS server (contrib/pbs/README.md):"]
        steps += [f"    {command}" for command in pbs_hook_commands(share / "pbs")]
    steps += [
        "  useradd --system --home-dir /var/lib/siteagent --shell /usr/sbin/nologin siteagent",
        f"  siteagent check-config {config_file}",
        "  systemctl daemon-reload && systemctl enable --now siteagent",
    ]
    return steps


def pbs_hook_commands(directory: Path) -> Sequence[str]:
    """The qmgr commands that install the hook from ``directory``."""
    return (
        'qmgr -c "create hook siteagent"',
        "qmgr -c \"set hook siteagent event = 'resvsub,resv_begin,resv_end,queuejob'\"",
        'qmgr -c "set hook siteagent alarm = 10"',
        f'qmgr -c "import hook siteagent application/x-python default '
        f'{directory / "siteagent_hook.py"}"',
        f'qmgr -c "import hook siteagent application/x-config default '
        f'{directory / "siteagent_hook.json"}"',
        'qmgr -c "set hook siteagent enabled = true"',
    )
