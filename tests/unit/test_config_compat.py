"""Compatibility pins for the configuration (issue 28, item 8 of the architecture review).

Every document below is read today with a given meaning, or refused with given messages;
``data/config_compat.json`` records both. A rewrite of siteagent/config/ (pydantic models in
place of the hand-written reader) must leave this file unchanged: same effective settings
(``loading.to_json``), same ``explicit`` keys and deprecations, same problem lines. A key
added later is not in the record and needs no change to it. The temporary directory is written
``<dir>`` so the record does not depend on where tests run.

Regenerate (only when a change of meaning is intended, and say so in the commit):
``python tests/unit/test_config_compat.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import yaml

from siteagent.config import loading
from siteagent.config.reading import ConfigError

RECORD = Path(__file__).parent / "data" / "config_compat.json"
SAMPLE = Path(__file__).parents[2] / "contrib" / "siteagent.yaml"

#: Documents accepted today, each exercising other spellings of the same keys.
ACCEPTED: List[Tuple[str, Any]] = [
    ("no-file", None),
    ("empty-mapping", {}),
    ("sample", "SAMPLE"),
    (
        "money-as-text-and-numbers",
        {
            "site": {"name": "alpha", "description": "a test site", "partitions": ["batch"]},
            "pricing": {
                "policy": "load",
                "flat": {"price": "1.25"},
                "load": {"start_price": 3, "min_price": 0.1, "rounds": 5},
                "externality": {"enabled": False, "policy": "easy", "rate": " 0.5 "},
                "cancellation_penalty": "0.25",
            },
            "ledger": {"default_credit": 0, "url": "https://bank.example.org:8444"},
        },
    ),
    (
        "slurm",
        {
            "site": {"name": "beta", "cores_per_node": 16, "cpu_speed_mhz": 2600},
            "backend": {
                "type": "slurm",
                "slurm": {
                    "slurm_conf": "remote/slurm.conf",
                    "partition": "batch",
                    "unit": "node",
                    "flags": ["IGNORE_JOBS"],
                    "users": ["alice", "bob"],
                    "timeout": 5,
                    "qos_levels": {"low": 1, "high": 2},
                    "command_prefix": ["ssh", "ctl"],
                },
                "swf": {"trace": "elsewhere/trace.swf", "speed": 2, "offset": 0, "cores": 128},
            },
            "planner": {"policy": "easy", "poll_interval_s": 5},
        },
    ),
    (
        "pbs-and-relative-paths",
        {
            "state_dir": "state",
            "backend": {"type": "pbs", "pbs": {"pbs_conf": "pbs.conf", "queue": "workq"}},
            "security": {"site_key": "keys/site.key", "signature_max_age_s": 60},
            "ledger": {"path": "bank.sqlite3", "participants": "participants.yaml"},
            "notifications": {"socket": "notify.sock", "users": ["slurm"]},
        },
    ),
    (
        "api",
        {
            "api": {
                "listen": "10.0.0.5",
                "port": 9443,
                "tls": {"cert": "server.crt", "key": "server.key"},
                "public_names": ["site.example.org:443"],
                "max_body_bytes": 65536,
                "request_timeout_s": 2.5,
                "rate_limits": {"quotes": {"per_second": 1}, "bids": {"burst": 3}},
            },
            "reservations": {"confirm_timeout_s": 30, "name_prefix": "x-"},
        },
    ),
    ("tls-off-ipv6", {"api": {"listen": "::1", "tls": {"enabled": False}}}),
    ("deprecated-nonce-cache-size", {"security": {"nonce_cache_size": 500}}),
    (
        "metrics-and-auctions",
        {
            "metrics": {
                "reference_requests": [{"name": "one", "cores": 2, "duration_s": 60}],
                "reference_interval_s": 10,
            },
            "auctions": {"transfer_rate": 1000, "max_length_s": 600, "mode": "now"},
        },
    ),
]

#: Added when the reader became pydantic models, recorded with the old reader: null as the
#: default, both spellings of a renamed key, a Slurm whose commands run elsewhere.
ACCEPTED += [
    (
        "nulls-are-defaults",
        {
            "site": None,
            "backend": {"swf": None, "slurm": {"slurm_conf": None}},
            "pricing": None,
            "api": {"tls": {"cert": None, "key": None}, "rate_limits": {"quotes": None}},
            "security": None,
            "ledger": {"ca": None},
            "metrics": {"reference_requests": None},
            "notifications": {"socket": None},
        },
    ),
    ("both-nonce-keys", {"security": {"nonce_cache_size": 5, "nonces_per_client": 7}}),
    (
        "remote-slurm-conf",
        {"backend": {"type": "slurm", "slurm": {"slurm_conf": "no.conf", "command_prefix": ["x"]}}},
    ),
]

#: Documents refused today; several wrong keys at once, to pin that all are reported.
REFUSED: List[Tuple[str, Any]] = [
    ("not-a-mapping", ["site"]),
    ("section-not-a-mapping", {"site": 3}),
    ("unknown-keys", {"sit": {}, "pricing": {"flat": {"prize": 1}}, "api": {"prot": 1}}),
    (
        "wrong-values",
        {
            "backend": {"type": "lsf", "swf": {"speed": -1, "offset": 1.5}},
            "planner": {"policy": "bogus", "poll_interval_s": "10m"},
            "pricing": {"flat": {"price": "abc"}, "cancellation_penalty": -1},
            "api": {"port": 0, "listen": "not an address", "max_header_bytes": True},
            "ledger": {"default_credit": "1.001", "database": "mysql://x"},
        },
    ),
    ("min-above-start", {"pricing": {"load": {"start_price": 1, "min_price": 2}}}),
    ("tls-half-pair", {"api": {"tls": {"cert": "server.crt"}}}),
    ("missing-files", {"security": {"authorized_clients": "none.yaml"}, "ledger": {"ca": "x"}}),
    (
        "slurm-lists",
        {
            "backend": {
                "slurm": {
                    "flags": ["NO_SUCH_FLAG"],
                    "users": "alice",
                    "qos_levels": {"low": 0},
                    "command_prefix": ["ok", ""],
                }
            }
        },
    ),
    (
        "reference-requests",
        {
            "metrics": {
                "reference_requests": [
                    {"name": "a", "cores": 1, "duration_s": 60},
                    {"name": "a", "cores": 0},
                    "not a mapping",
                ]
            }
        },
    ),
    ("names", {"site": {"name": "bad name!"}, "reservations": {"name_prefix": "1x"}}),
]

#: Added with the pydantic models, recorded with the old reader: no coercion (text for a
#: number, a float for an integer, true for a count), a relation beside a wrong key, a wrong
#: value under a renamed key, derived fields that are not keys, null where a path is required.
REFUSED += [
    (
        "no-coercion",
        {
            "site": {"cores_per_node": True},
            "backend": {"swf": {"speed": "5", "cores": 4.0}},
            "pricing": {"load": {"rounds": 0, "min_price": 9}},
            "api": {"port": 8443.0, "rate_limits": {"quotes": {"burst": "3"}}},
            "security": {"nonce_cache_size": "x"},
        },
    ),
    ("derived-are-not-keys", {"api": {"tls": {"self_signed": True}}, "source": "x"}),
    ("local-slurm-conf-missing", {"backend": {"type": "slurm", "slurm": {"slurm_conf": "n"}}}),
    ("required-paths-null", {"security": {"authorized_clients": None}, "ledger": {"path": None}}),
    (
        "pbs-conf-despite-slurm-prefix",
        {"backend": {"type": "pbs", "pbs": {"pbs_conf": "n"}, "slurm": {"command_prefix": ["x"]}}},
    ),
]


def read(name: str, document: Any, base: Path) -> Dict[str, Any]:
    """What loading ``document`` from a file in ``base`` gives: its effective settings, or
    its problem lines, with ``base`` written ``<dir>``."""
    for existing in ("server.crt", "server.key", "participants.yaml", "pbs.conf"):
        (base / existing).write_text("")
    if document == "SAMPLE":
        document = yaml.safe_load(SAMPLE.read_text())
    state_dir = None if isinstance(document, dict) and "state_dir" in document else base / "s"
    try:
        config = loading.parse(document, base / "siteagent.yaml", state_dir)
    except ConfigError as exc:
        out: Dict[str, Any] = {"problems": [str(problem) for problem in exc.problems]}
    else:
        settings = loading.to_json(config)
        settings.pop("site.name")  # the host's name when unset
        out = {
            "settings": settings,
            "explicit": sorted(config.explicit),
            "deprecations": list(config.deprecations),
        }
    return json.loads(json.dumps(out).replace(str(base), "<dir>"))


@pytest.mark.parametrize(
    "name,document", ACCEPTED + REFUSED, ids=[n for n, _ in ACCEPTED + REFUSED]
)
def test_reading_is_unchanged(name: str, document: Any, tmp_path: Path) -> None:
    """Same problems, or the same value for every recorded key (a key added since is new)."""
    recorded = json.loads(RECORD.read_text())[name]
    now = read(name, document, tmp_path)
    if "settings" in now and "settings" in recorded:
        now["settings"] = {
            key: now["settings"].get(key, "<missing>") for key in recorded["settings"]
        }
    assert now == recorded


def test_accepted_and_refused_are_what_they_say() -> None:
    record = json.loads(RECORD.read_text())
    assert all("settings" in record[name] for name, _ in ACCEPTED)
    assert all(record[name]["problems"] for name, _ in REFUSED)


if __name__ == "__main__":
    import tempfile

    results = {}
    for name, document in ACCEPTED + REFUSED:
        with tempfile.TemporaryDirectory() as directory:
            results[name] = read(name, document, Path(directory))
    RECORD.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    sys.exit(0)
