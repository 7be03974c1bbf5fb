"""``siteagent keys`` and ``siteagent check-config``: setting an agent up before serving.

``keys`` makes what a first deployment needs before anything starts, and prints the entries
that admit it: a self-signed server certificate (an agent's, or the bank's, which the agents
of a federation must name as ``ledger.ca`` before their configuration checks), a client's
Ed25519 key pair with its authorized-clients entry, and a site's own key (the one ``serve``
would make on first start) with its entry in the bank's participants file. ``check-config``
validates a configuration file the way ``serve`` will at start (the files it names included:
those others may write are refused; for ``backend.type: pyslurm``, the installed pyslurm too),
and shows the effective settings, so that a mistake is found before a restart, not by it.
"""

from __future__ import annotations

import argparse
import getpass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import yaml

from siteagent.backends.pyslurm import versions as pyslurm_versions
from siteagent.cli import console, options
from siteagent.cli.exits import BadInput, as_bad_input
from siteagent.config import loading, reading, schema
from siteagent.config.reading import scheduler_user
from siteagent.core.files import UnsafeFile, check_not_writable_by_others
from siteagent.protocol.keys import (
    check_key_id,
    load_or_create_site_key,
    public_key_text,
    write_key_pair,
)
from siteagent.security import tls
from siteagent.security.clients import load_authorized_clients

#: Exit code for a configuration with errors (the same as any input a user must fix).


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _add_keys(commands)
    _add_check_config(commands)


def _add_keys(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "keys",
        help="make TLS certificates, client key pairs and the site key before a first start",
        description=(
            "With DIR: write DIR/server.crt and DIR/server.key (a self-signed certificate for "
            "the --host names: an agent's, or a bank's, whose server.crt its agents name as "
            "ledger.ca), and DIR/client.key and DIR/client.pub (an Ed25519 key pair a buyer "
            "signs its requests with), and print the authorized-clients entry that lets the "
            "client reserve as USER; --tls or --client writes only those. With --site: make "
            "the site's own key (security.site_key of --config) if it is missing, as `serve` "
            "does on first start, and print the site's entry for the bank's participants "
            "file. Private keys are written mode 0600."
        ),
    )
    sub.add_argument("dir", metavar="DIR", nargs="?", help="directory to write the files to")
    sub.add_argument(
        "--tls", action="store_true", help="write only the TLS certificate and its key"
    )
    sub.add_argument("--client", action="store_true", help="write only the client's key pair")
    sub.add_argument(
        "--site",
        action="store_true",
        help="the site key of --config instead (made if missing) and its participants entry",
    )
    sub.add_argument(
        "--host",
        action="append",
        metavar="NAME",
        help="host name or IP address the certificate is valid for; repeat for several "
        "(default: localhost, 127.0.0.1, ::1)",
    )
    sub.add_argument("--user", help="scheduler user the client reserves for (default: you)")
    sub.add_argument("--account", default="", help="scheduler account charged (default: none)")
    sub.add_argument(
        "--key-id", help="the client's key id (default: USER@HOST, this host's short name)"
    )
    sub.add_argument("--force", action="store_true", help="replace files that exist")
    sub.add_argument("--json", action="store_true", help="print one JSON object")
    options.add_site_options(sub)
    sub.set_defaults(command=_keys)


def _add_check_config(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "check-config",
        help="validate a configuration file and show the effective settings",
        description=(
            "Read FILE as `siteagent serve` would, report every problem with its key path, "
            "or print the effective configuration (file values and defaults) and the "
            "authorized clients. Exits 1 if anything is wrong. Without FILE: the defaults."
        ),
    )
    sub.add_argument("file", metavar="FILE", nargs="?", help="YAML configuration file")
    sub.add_argument("--json", action="store_true", help="print one JSON object")
    sub.set_defaults(command=_check_config)


def _keys(args: argparse.Namespace) -> int:
    if args.site:
        if args.dir or args.tls or args.client:
            raise BadInput(
                "--site makes the key of --config's security.site_key: give no DIR, --tls or "
                "--client"
            )
        return _site_key(args)
    if args.dir is None:
        raise BadInput("give DIR to write the files to (or --site for the site's key)")
    directory = Path(args.dir)
    names: List[str] = []
    if args.tls or not args.client:
        names += ["server.crt", "server.key"]
    if args.client or not args.tls:
        names += ["client.key", "client.pub"]
    files = {name: directory / name for name in names}
    existing = [str(path) for path in files.values() if path.exists()]
    if existing and not args.force:
        raise BadInput(f"{', '.join(existing)} already exist; --force replaces them")
    client = _client_entry(args) if "client.key" in files else None
    report: Dict[str, Any] = {"files": {name: str(path) for name, path in files.items()}}
    written: List[Tuple[Path, str]] = []
    if "server.crt" in files:
        hosts = tuple(args.host or tls.LOCAL_HOSTS)
        with as_bad_input(OSError):
            tls.write_self_signed(files["server.crt"], files["server.key"], hosts, args.force)
        report["hosts"] = list(hosts)
        written += [
            (files["server.crt"], "TLS certificate for " + ", ".join(hosts)),
            (files["server.key"], "its private key"),
        ]
    if client is not None:
        key_id, entry = client
        with as_bad_input(OSError):
            entry["public_key"] = write_key_pair(
                files["client.key"], files["client.pub"], args.force
            )
        report["client"] = {"key_id": key_id, **entry}
        report["authorized_clients"] = yaml.safe_dump({"clients": {key_id: entry}}, sort_keys=False)
        written += [
            (files["client.key"], f"client {key_id}'s Ed25519 private key"),
            (files["client.pub"], "its public key"),
        ]
    if args.json:
        console.print_json(report)
        return 0
    _print_written(written)
    if client is not None:
        console.stdout.print("Add the client to the authorized-clients file:\n")
        console.stdout.print(report["authorized_clients"], highlight=False, markup=False)
    return 0


def _client_entry(args: argparse.Namespace) -> Tuple[str, Dict[str, Any]]:
    """The client's key id and its authorized-clients entry (public key to come), checked as
    the authorized-clients file will check them."""
    user = _checked(scheduler_user, args.user or getpass.getuser(), "--user")
    key_id = check_key_id(args.key_id or f"{user}@{schema.default_site_name()}")
    entry: Dict[str, Any] = {"public_key": "", "user": user}
    if args.account:
        entry["account"] = _checked(reading.name, args.account, "--account")
    return key_id, entry


def _site_key(args: argparse.Namespace) -> int:
    """The site's own key, made where ``serve`` would make it on first start (by the same
    function), so that the bank's participants file can list the site before it starts."""
    loaded = options.load_config(args)
    path, site = loaded.security.site_key, loaded.site.name
    made = not path.exists()
    with as_bad_input(OSError):
        public = public_key_text(load_or_create_site_key(path).public_key())
    participants = yaml.safe_dump({"sites": {site: {"public_key": public}}}, sort_keys=False)
    if args.json:
        console.print_json(
            {
                "site": site,
                "file": str(path),
                "made": made,
                "public_key": public,
                "participants": participants,
            }
        )
        return 0
    status = "made now" if made else "kept: it existed"
    _print_written([(path, f"site {site}'s Ed25519 private key ({status})")])
    console.stdout.print("Add the site to the bank's participants file (ledger.participants):\n")
    console.stdout.print(participants, highlight=False, markup=False)
    return 0


def _print_written(files: List[Tuple[Path, str]]) -> None:
    console.print_table(
        [
            {"file": str(path), "what": what, "mode": f"{path.stat().st_mode & 0o777:o}"}
            for path, what in files
        ],
        ["file", "what", "mode"],
        title="Keys",
    )


def _checked(convert: Callable[[Any], str], value: str, option: str) -> str:
    """``value`` as the authorized-clients file would accept it, or a clear error."""
    try:
        return convert(value)
    except reading.Invalid as exc:
        raise BadInput(f"{option} {value!r}: expected {exc}") from None


def _check_config(args: argparse.Namespace) -> int:
    source: Optional[Path] = Path(args.file) if args.file else None
    try:
        effective = loading.load(source)
        clients = _clients(effective)
        _check_trusted_files(effective)
        _check_pyslurm(effective)
    except reading.ConfigError as exc:
        if args.json:
            console.print_json(
                {
                    "ok": False,
                    "file": exc.source,
                    "errors": [
                        {"path": problem.path, "message": problem.message}
                        for problem in exc.problems
                    ],
                }
            )
        else:
            console.error(str(exc))
        return console.EXIT_BAD_INPUT
    if args.json:
        console.print_json(
            {
                "ok": True,
                "file": args.file,
                "config": loading.to_json(effective),
                "deprecations": list(effective.deprecations),
                "authorized_clients": [
                    {"key_id": key_id, "user": user, "account": account}
                    for key_id, user, account in clients
                ],
            }
        )
        return 0
    for deprecation in effective.deprecations:
        console.warning(deprecation)
    console.print_table(
        [
            {"key": key, "value": _text(value), "from": _origin(effective, key)}
            for key, value in loading.flatten(effective)
        ],
        ["key", "value", "from"],
        title=f"Effective configuration ({args.file or 'defaults'})",
    )
    console.print_table(
        [{"key id": key_id, "user": user, "account": account} for key_id, user, account in clients],
        ["key id", "user", "account"],
        title=f"Authorized clients ({effective.security.authorized_clients})"
        + ("" if clients else ": none, so no client can reserve"),
    )
    return 0


def _clients(effective: schema.Config) -> List[Tuple[str, str, str]]:
    """The authorized clients, checked too; a missing default file means no client yet."""
    path = effective.security.authorized_clients
    if not path.exists():
        return []
    return [
        (client.key_id, client.user, client.account)
        for client in load_authorized_clients(path).values()
    ]


def _check_pyslurm(effective: schema.Config) -> None:
    """A pyslurm site's pyslurm: installed, supported and built for the local Slurm, as the
    backend will require at start (ConfigError at ``backend.type`` saying what would work)."""
    if effective.backend.type is not schema.BackendType.PYSLURM:
        return
    refused = pyslurm_versions.installed_refusal()
    if refused:
        source = str(effective.source or "configuration")
        raise reading.ConfigError(source, [reading.Problem("backend.type", refused)])


def _check_trusted_files(effective: schema.Config) -> None:
    """The other files ``serve`` and ``ledger serve`` refuse when others may write them (the
    configuration and the authorized clients were checked as they were read): ConfigError
    naming each one's key."""
    trusted = (
        ("api.tls.key", effective.api.tls.key, "TLS private key"),
        ("security.site_key", effective.security.site_key, "private key"),
        ("ledger.participants", effective.ledger.participants, "participants file"),
    )
    problems: List[reading.Problem] = []
    for key, path, what in trusted:
        if path is None or not path.exists():
            continue
        try:
            check_not_writable_by_others(path, what)
        except UnsafeFile as exc:
            problems.append(reading.Problem(key, str(exc)))
    if problems:
        raise reading.ConfigError(str(effective.source or "configuration"), problems)


def _origin(effective: schema.Config, key: str) -> str:
    return "file" if key in effective.explicit else "default"


def _text(value: Any) -> str:
    json_value = loading.json_value(value)
    if isinstance(json_value, list):
        return ", ".join(str(item) for item in json_value) or "-"
    return console.format_value(json_value)
