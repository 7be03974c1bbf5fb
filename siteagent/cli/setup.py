"""``siteagent keys`` and ``siteagent check-config``: setting an agent up before serving.

``keys`` makes what a test or a first deployment needs (a self-signed server certificate and
a client's Ed25519 key pair) and prints the authorized-clients entry that admits the client.
``check-config`` validates a configuration file the way ``serve`` will at start (the files it
names included: those others may write are refused), and shows the effective settings, so that
a mistake is found before a restart, not by it.
"""

from __future__ import annotations

import argparse
import getpass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from siteagent.cli import console
from siteagent.config import loading, reading, schema
from siteagent.config.reading import scheduler_user
from siteagent.core.files import UnsafeFile, check_not_writable_by_others
from siteagent.protocol.keys import (
    check_key_id,
    private_key_pem,
    public_key_text,
    write_private,
    write_public,
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
        help="make a self-signed TLS certificate and a client Ed25519 key pair (for testing)",
        description=(
            "Write DIR/server.crt and DIR/server.key (a self-signed certificate for the given "
            "host names), and DIR/client.key and DIR/client.pub (an Ed25519 key pair a client "
            "signs its requests with). Private keys are written mode 0600. Prints the "
            "authorized-clients entry that lets the client reserve as USER."
        ),
    )
    sub.add_argument("dir", metavar="DIR", help="directory to write the files to")
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
    directory = Path(args.dir)
    files = {name: directory / name for name in ("server.crt", "server.key", "client.key")}
    files["client.pub"] = directory / "client.pub"
    existing = [str(path) for path in files.values() if path.exists()]
    if existing and not args.force:
        raise ValueError(f"{', '.join(existing)} already exist; --force replaces them")
    user = _checked(scheduler_user, args.user or getpass.getuser(), "--user")
    key_id = check_key_id(args.key_id or f"{user}@{loading.default_site_name()}")
    if args.account:
        _checked(reading.name, args.account, "--account")
    hosts = tuple(args.host or tls.LOCAL_HOSTS)
    tls.write_self_signed(files["server.crt"], files["server.key"], hosts, args.force)
    client_key = Ed25519PrivateKey.generate()
    write_private(files["client.key"], private_key_pem(client_key), args.force)
    public = public_key_text(client_key.public_key())
    write_public(files["client.pub"], (public + "\n").encode(), args.force)
    entry: Dict[str, Any] = {"public_key": public, "user": user}
    if args.account:
        entry["account"] = args.account
    snippet = yaml.safe_dump({"clients": {key_id: entry}}, sort_keys=False)
    if args.json:
        console.print_json(
            {
                "files": {name: str(path) for name, path in files.items()},
                "hosts": list(hosts),
                "client": {"key_id": key_id, **entry},
                "authorized_clients": snippet,
            }
        )
        return 0
    console.print_table(
        [
            {"file": str(path), "what": what, "mode": f"{path.stat().st_mode & 0o777:o}"}
            for path, what in (
                (files["server.crt"], "TLS certificate for " + ", ".join(hosts)),
                (files["server.key"], "its private key"),
                (files["client.key"], f"client {key_id}'s Ed25519 private key"),
                (files["client.pub"], "its public key"),
            )
        ],
        ["file", "what", "mode"],
        title="Keys written",
    )
    console.stdout.print("Add the client to the authorized-clients file:\n")
    console.stdout.print(snippet, highlight=False, markup=False)
    return 0


def _checked(convert: Callable[[Any], str], value: str, option: str) -> str:
    """``value`` as the authorized-clients file would accept it, or a clear error."""
    try:
        return convert(value)
    except reading.Invalid as exc:
        raise ValueError(f"{option} {value!r}: expected {exc}") from None


def _check_config(args: argparse.Namespace) -> int:
    source: Optional[Path] = Path(args.file) if args.file else None
    try:
        effective = loading.load(source)
        clients = _clients(effective)
        _check_trusted_files(effective)
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
