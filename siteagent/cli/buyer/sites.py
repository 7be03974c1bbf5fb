"""``siteagent-client sites`` and ``siteagent-client keys``: the sites a buyer knows, and the
key it buys with.

``sites`` asks every site of the sites file for its ``/v1/info`` at once and shows whether
it answered, how fast, its size, its prices and its RFQL attributes. ``keys`` makes the
buyer's Ed25519 key pair and prints the two entries that put it to use: the one each site's
administrator adds to the authorized-clients file (and the bank's participants file), and
the ``buyer:`` section of the sites file.
"""

from __future__ import annotations

import argparse
import getpass
import socket
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

from siteagent.cli import console
from siteagent.cli.buyer import common
from siteagent.cli.console import EXIT_UNAVAILABLE
from siteagent.cli.exits import BadInput, as_bad_input
from siteagent.client.connection import SiteConnection, SiteInfo
from siteagent.client.fanout import SiteResult, ask_all
from siteagent.client.registering import add_site, remove_site
from siteagent.client.sites import config_dir, default_path
from siteagent.core import names
from siteagent.protocol.keys import check_key_id, write_key_pair
from siteagent.protocol.models import PricingTerms


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sites = commands.add_parser(
        "sites",
        help="each site's reachability, latency, cores, pricing and attributes; add, remove",
        description=(
            "Ask every site of the sites file for its GET /v1/info at once and show, per "
            "site, whether it answered (or failed, timed out, and why), the latency, its "
            "cores, its unit price and fee policies and its RFQL attributes. Exits 0 when "
            "at least one site answered, 75 when none did. `sites add NAME URL --ca FILE` "
            "registers a site (making the file if there is none), `sites remove NAME` takes "
            "one out."
        ),
    )
    common.add_sites_options(sites)
    sites.set_defaults(command=_sites)
    actions = sites.add_subparsers(title="actions (none: ask every site)", metavar="ACTION")
    add = actions.add_parser(
        "add",
        help="register a site in the sites file (made if missing)",
        description=(
            "Add site NAME at URL (https://HOST:PORT) to the sites file, trusted by --ca FILE "
            "(its CA's certificate, or its own self-signed server.crt) or by --pin (sha256// "
            "and the SHA-256 of its certificate), checked as every command checks the file. A "
            "new file is made with the buyer's key: --key-id ID (its private key where "
            "`siteagent-client keys` wrote it, or --private-key FILE); in a file that has "
            "one, --key-id/--private-key give this site a key of its own. NAME ledger is "
            "the federation's bank (for balance and statement). The file is rewritten as "
            "YAML (a file with comments is kept as FILE.bak first)."
        ),
    )
    add.add_argument("name", metavar="NAME", help="letters, digits, . _ - (at most 64)")
    add.add_argument("url", metavar="URL", help="the agent's https://HOST:PORT")
    trust = add.add_mutually_exclusive_group(required=True)
    trust.add_argument("--ca", type=Path, metavar="FILE", help="certificates to trust")
    trust.add_argument("--pin", metavar="sha256//DIGEST", help="its certificate's SHA-256")
    add.add_argument("--key-id", metavar="ID", help="the key it knows you by")
    add.add_argument("--private-key", type=Path, metavar="FILE", help="that key's file")
    add.set_defaults(command=_add)
    remove = actions.add_parser(
        "remove",
        help="remove a site from the sites file",
        description="Remove site NAME from the sites file (the journal keeps its history).",
    )
    remove.add_argument("name", metavar="NAME")
    remove.set_defaults(command=_remove)
    for action in (add, remove):
        common.add_sites_options(action, choose=False)

    keys = commands.add_parser(
        "keys",
        help="make the buyer's key pair and print its authorized-clients entry",
        description=(
            "Write an Ed25519 key pair: FILE (the private key, mode 0600) and FILE.pub (the "
            "public key), and print the entry each site's administrator adds to the "
            "authorized-clients file (security.authorized_clients; the bank's participants "
            "file takes the same under clients:, with a credit), and the buyer: section of "
            "your sites file."
        ),
    )
    keys.add_argument(
        "--key-id",
        help="the name sites know the key by: 1-128 letters, digits and . _ @ : + - "
        "(default: USER@HOST, this host's short name)",
    )
    keys.add_argument(
        "--user", help="the scheduler user your reservations are made for (default: you)"
    )
    keys.add_argument("--account", help="the scheduler account they are charged to (default: none)")
    keys.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help=f"the private key's file (default: {config_dir({})}/KEY_ID.key)",
    )
    keys.add_argument("--force", action="store_true", help="replace a key pair that exists")
    keys.add_argument("--json", action="store_true", help="print one JSON object")
    keys.set_defaults(command=_keys)


# --------------------------------------------------------------------------- sites


def _sites(args: argparse.Namespace) -> int:
    registry = common.registry(args)
    with common.connected(registry.select(args.site)) as connections:
        with common.progress("asking", len(connections), args.json) as answered:
            results = ask_all(connections, SiteConnection.info, answered)
        urls = {connection.site.name: connection.site.url for connection in connections}
    rows = [_site_row(result, urls[result.site]) for result in results]
    if args.json:
        console.print_json(
            {
                "sites": [
                    {
                        "site": result.site,
                        "url": urls[result.site],
                        "status": result.outcome.value,
                        "reason": result.reason or None,
                        "latency_s": result.latency_s,
                        "info": None if result.value is None else result.value.model_dump(),
                    }
                    for result in results
                ]
            }
        )
    else:
        console.print_table(
            rows,
            ["site", "url", "status", "latency", "cores", "unit price", "fee", "attributes"],
            title=f"Sites ({registry.path})",
        )
    return 0 if any(result.value is not None for result in results) else EXIT_UNAVAILABLE


def _add(args: argparse.Namespace) -> int:
    path = args.sites or default_path()
    site = add_site(path, args.name, args.url, args.ca, args.pin, args.key_id, args.private_key)
    trust = f"ca {site.ca}" if site.ca is not None else f"pin sha256//{site.pin}"
    if args.json:
        console.print_json(
            {
                "sites_file": str(path),
                "added": {
                    "name": site.name,
                    "url": site.url,
                    "ca": None if site.ca is None else str(site.ca),
                    "pin": site.pin,
                    "key_id": site.key_id,
                    "private_key": str(site.private_key),
                },
            }
        )
    else:
        console.stdout.print(
            f"{path}: added {site.name} at {site.url} ({trust}; signing as {site.key_id}). "
            "`siteagent-client sites` asks it.",
            markup=False,
            highlight=False,
        )
    return 0


def _remove(args: argparse.Namespace) -> int:
    path = args.sites or default_path()
    left = remove_site(path, args.name)
    names = [site.name for site in left.sites]
    if args.json:
        console.print_json({"sites_file": str(path), "removed": args.name, "sites": names})
    else:
        console.stdout.print(
            f"{path}: removed {args.name}; left: {', '.join(names) or 'none'}",
            markup=False,
            highlight=False,
        )
    return 0


def _site_row(result: SiteResult[SiteInfo], url: str) -> Dict[str, Any]:
    row: Dict[str, Any] = {
        "site": result.site,
        "url": url,
        "status": result.outcome.value
        if result.value
        else f"{result.outcome.value}: {result.reason}",
        "latency": common.latency_ms(result.latency_s),
    }
    info = result.value
    if info is not None:
        cluster = info.cluster
        row["cores"] = None if cluster is None else cluster.cores
        row["unit price"] = unit_price_text(info.pricing)
        row["fee"] = fee_text(info.pricing)
        row["attributes"] = attributes_text(info)
    return row


def unit_price_text(pricing: PricingTerms) -> str:
    """The unit-price policy in a few words, per core-hour."""
    unit = pricing.unit_price
    if unit.policy == "flat":
        return f"{unit.price_per_core_hour}/core-h (flat)"
    return (
        f"{unit.start_price_per_core_hour} down to {unit.min_price_per_core_hour}/core-h "
        f"over {unit.expected_rounds} rounds (load)"
    )


def fee_text(pricing: PricingTerms) -> str:
    fee = pricing.fee
    if fee.policy == "none":
        return "none"
    return f"{fee.rate_per_core_hour_of_delay}/core-h of delay caused (externality)"


def attributes_text(info: SiteInfo) -> str:
    """The RFQL attributes the site advertises (a request naming another is refused)."""
    site = info.site
    parts: List[Optional[str]] = [
        site.architecture,
        site.os,
        None if site.cpu_speed_mhz is None else f"{site.cpu_speed_mhz} MHz",
        None if site.memory_per_core_mb is None else f"{site.memory_per_core_mb} MB/core",
        None if site.cores_per_node is None else f"{site.cores_per_node} cores/node",
        "partitions " + ", ".join(site.partitions) if site.partitions else None,
    ]
    return ", ".join(part for part in parts if part) or "-"


# --------------------------------------------------------------------------- keys


def _keys(args: argparse.Namespace) -> int:
    user = _checked_name(
        names.USER, args.user or getpass.getuser(), "--user", "a scheduler (Unix) user name"
    )
    key_id = check_key_id(args.key_id or f"{user}@{socket.gethostname().split('.')[0]}")
    private = args.out or config_dir() / f"{key_id}.key"
    public = private.with_name(private.name + ".pub")
    existing = [str(path) for path in (private, public) if path.exists()]
    if existing and not args.force:
        raise BadInput(f"{', '.join(existing)} already exist; --force replaces them")
    with as_bad_input(OSError):
        entry: Dict[str, str] = {
            "public_key": write_key_pair(private, public, args.force),
            "user": user,
        }
    if args.account:
        entry["account"] = _checked_name(names.NAME, args.account, "--account", "an account name")
    authorized = yaml.safe_dump({"clients": {key_id: entry}}, sort_keys=False)
    buyer = yaml.safe_dump(
        {"buyer": {"key_id": key_id, "private_key": str(private.absolute())}}, sort_keys=False
    )
    if args.json:
        console.print_json(
            {
                "key_id": key_id,
                "private_key": str(private),
                "public_key_file": str(public),
                **entry,
                "authorized_clients": authorized,
                "sites_file": buyer,
            }
        )
        return 0
    written = ((private, f"{key_id}'s Ed25519 private key"), (public, "its public key"))
    console.print_table(
        [
            {"file": str(path), "what": what, "mode": f"{path.stat().st_mode & 0o777:o}"}
            for path, what in written
        ],
        ["file", "what", "mode"],
        title="Buyer's key pair",
    )
    console.stdout.print(
        "Each site's administrator adds you to its authorized-clients file "
        "(and the bank's to its participants file, under clients:, with a credit):\n"
    )
    console.stdout.print(authorized, highlight=False, markup=False)
    console.stdout.print("Your sites file signs with it given:\n")
    console.stdout.print(buyer, highlight=False, markup=False)
    return 0


def _checked_name(rule: Any, value: str, option: str, what: str) -> str:
    if not names.is_valid(rule, value):
        raise BadInput(f"{option} {value!r}: expected {what} (matching {rule.pattern})")
    return value
