"""The configuration file: defaults with no file, typed values, and errors that name the key
path and what was expected; ``siteagent check-config`` on good and bad files."""

from __future__ import annotations

import json
import textwrap
from decimal import Decimal
from pathlib import Path
from typing import List

import pytest

from siteagent.cli.main import main
from siteagent.config import loading, schema
from siteagent.config.reading import ConfigError
from siteagent.config.schema import BackendType, PricingPolicy
from siteagent.core import defaults, names
from siteagent.core.engines import Policy
from siteagent.core.values import CapacityUnit
from siteagent.market import site


@pytest.fixture(autouse=True)
def data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private user data directory, so defaults never point into the real home."""
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path / "data"


def write(tmp_path: Path, text: str, name: str = "siteagent.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def problems(tmp_path: Path, text: str) -> List[str]:
    with pytest.raises(ConfigError) as caught:
        loading.load(write(tmp_path, text))
    return [str(problem) for problem in caught.value.problems]


# --------------------------------------------------------------------------- defaults


def test_defaults_load_with_no_file(data_home: Path) -> None:
    effective = loading.load()
    state = data_home / "siteagent"
    assert effective.source is None and effective.explicit == frozenset()
    assert effective.state_dir == state
    assert effective.backend.type is BackendType.SWF
    assert effective.backend.swf.trace is None  # the bundled slice
    assert effective.planner.policy is Policy.CONSERVATIVE
    assert effective.api.listen == "127.0.0.1"
    assert effective.api.tls.enabled and effective.api.tls.self_signed
    assert effective.api.tls.cert == state / "tls" / "server.crt"
    assert effective.security.authorized_clients == state / "authorized_clients.yaml"
    assert effective.ledger.path == state / "ledger.sqlite3" and effective.ledger.url is None
    assert effective.reservations.name_prefix == "sa-"
    assert names.is_valid(names.NAME, effective.site.name)


def test_an_empty_file_is_the_defaults(tmp_path: Path) -> None:
    loaded = loading.load(write(tmp_path, ""))
    assert loaded.backend == loading.load().backend
    assert loaded.source == tmp_path / "siteagent.yaml"


def test_systemd_state_directory_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATE_DIRECTORY", f"{tmp_path}/one:{tmp_path}/two")
    assert loading.load().state_dir == tmp_path / "one"


def test_defaults_agree_with_the_reservation_lifecycle() -> None:
    effective = loading.load()
    assert effective.pricing.cancellation_penalty == defaults.DEFAULT_PENALTY_FACTOR
    assert effective.reservations.confirm_timeout_s == defaults.DEFAULT_CONFIRM_TIMEOUT_S


# --------------------------------------------------------------------------- a full file


def test_a_full_file_gives_typed_values(tmp_path: Path) -> None:
    (tmp_path / "slurm.conf").write_text("ClusterName=test\n")
    (tmp_path / "clients.yaml").write_text("clients: {}\n")
    path = write(
        tmp_path,
        """
        site:
          name: hpc1
          description: Test cluster
          architecture: x86_64
          os: linux
          cpu_speed_mhz: 2400
          memory_per_core_mb: 4096
          cores_per_node: 16
          partitions: [batch, debug]
        backend:
          type: slurm
          slurm: {slurm_conf: slurm.conf, partition: batch, unit: node,
                  flags: [MAINT, IGNORE_JOBS], users: [market, alice], timeout: 12.5}
        planner: {policy: easy, poll_interval_s: 10}
        pricing:
          policy: load
          flat: {price: 1.1}
          load: {start_price: "3.00", min_price: 0.25, rounds: 5}
          externality: {enabled: false, policy: fcfs, rate: 0.5}
          cancellation_penalty: 0.2
        reservations: {confirm_timeout_s: 60, name_prefix: market-}
        api: {listen: "::", port: 9443, tls: {enabled: false}}
        security: {authorized_clients: clients.yaml, signature_max_age_s: 60,
                   nonce_cache_size: 1000, site_key: keys/site.key}
        state_dir: state
        ledger: {url: "https://bank.example.org:8444/"}
        """,
    )
    loaded = loading.load(path)
    assert loaded.site.partitions == ("batch", "debug") and loaded.site.cores_per_node == 16
    assert loaded.backend.type is BackendType.SLURM
    slurm = loaded.backend.slurm
    assert slurm.slurm_conf == tmp_path / "slurm.conf"  # relative to the file
    assert (slurm.partition, slurm.unit, slurm.timeout) == ("batch", CapacityUnit.NODE, 12.5)
    assert slurm.flags == ("MAINT", "IGNORE_JOBS") and slurm.users == ("market", "alice")
    assert site.slurm_config(loaded).users == ("market", "alice")
    assert loaded.planner == schema.PlannerConfig(policy=Policy.EASY, poll_interval_s=10.0)
    pricing = loaded.pricing
    assert pricing.policy is PricingPolicy.LOAD
    assert pricing.flat.price == Decimal("1.1")  # through repr, not the binary fraction
    assert pricing.load == schema.LoadPricing(
        start_price=Decimal("3.00"), min_price=Decimal("0.25"), rounds=5
    )
    assert pricing.externality == schema.ExternalityPricing(
        enabled=False, policy=Policy.FCFS, rate=Decimal("0.5")
    )
    assert pricing.cancellation_penalty == Decimal("0.2")
    assert loaded.api.port == 9443 and not loaded.api.tls.enabled
    assert loaded.state_dir == tmp_path / "state"
    assert loaded.api.tls.cert == tmp_path / "state" / "tls" / "server.crt"
    assert loaded.security.site_key == tmp_path / "keys" / "site.key"
    assert loaded.security.authorized_clients == tmp_path / "clients.yaml"
    assert loaded.ledger.url == "https://bank.example.org:8444/"
    assert "backend.slurm.timeout" in loaded.explicit
    assert "backend.swf.speed" not in loaded.explicit


def test_tls_files_given_are_used_not_generated(tmp_path: Path) -> None:
    (tmp_path / "a.crt").write_text("x")
    (tmp_path / "a.key").write_text("x")
    loaded = loading.load(write(tmp_path, "api: {tls: {cert: a.crt, key: a.key}}"))
    assert loaded.api.tls.cert == tmp_path / "a.crt" and not loaded.api.tls.self_signed


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "backend: {type: slurm, slurm: {timeout: fast}}",
            'backend.slurm.timeout: expected a positive number of seconds, got "fast"',
        ),
        ("backend: {pbs: {timeout: -1}}", "backend.pbs.timeout: expected a positive number"),
        ("backend: {type: lsf}", 'backend.type: expected one of "swf", "slurm", "pyslurm", "pbs"'),
        ("backend: {swf: {speed: 0}}", "backend.swf.speed: expected a positive number, got 0"),
        ("backend: {swf: {offset: 1.5}}", "backend.swf.offset: expected an integer >= 0"),
        ("backend: {slurm: {unit: rack}}", 'backend.slurm.unit: expected one of "core", "node"'),
        (
            "backend: {slurm: {users: [ok, 'bad user']}}",
            "backend.slurm.users[1]: expected a scheduler (Unix) user name",
        ),
        (
            "backend: {slurm: {flags: [MAINT, BOGUS]}}",
            "backend.slurm.flags[1]: expected a reservation flag, one of IGNORE_JOBS",
        ),
        ("backend: {slurm: {flags: MAINT}}", 'backend.slurm.flags: expected a list, got "MAINT"'),
        (
            "backend: {slurm: {partition: 'a b'}}",
            "backend.slurm.partition: expected a name of letters",
        ),
        ("site: {name: my cluster}", "site.name: expected a name of letters"),
        ("site: {cores_per_node: 0}", "site.cores_per_node: expected a positive integer, got 0"),
        (
            "site: {cpu_speed_mhz: true}",
            "site.cpu_speed_mhz: expected a positive integer, got true",
        ),
        ("site: {os: 7}", "site.os: expected a string, got 7"),
        ("site: [a, b]", "site: expected a mapping of keys to values, got a list"),
        (
            "planner: {policy: sjf}",
            'planner.policy: expected one of "fcfs", "easy", "conservative"',
        ),
        ("planner: {poll_interval_s: null}", "planner.poll_interval_s: expected a positive number"),
        ("pricing: {policy: auction}", 'pricing.policy: expected one of "flat", "load"'),
        ("pricing: {flat: {price: -1}}", "pricing.flat.price: expected a price >= 0 per core-hour"),
        ("pricing: {flat: {price: 1.0000001}}", "pricing.flat.price: expected a price >= 0"),
        ("pricing: {flat: {price: .nan}}", "pricing.flat.price: expected a price >= 0"),
        ("pricing: {load: {rounds: 0}}", "pricing.load.rounds: expected a positive integer, got 0"),
        (
            "pricing: {load: {start_price: 1, min_price: 3}}",
            "pricing.load.min_price: expected at most start_price (1), got 3",
        ),
        ("pricing: {externality: {enabled: maybe}}", "pricing.externality.enabled: expected true"),
        ("pricing: {externality: {rate: x}}", "pricing.externality.rate: expected a price >= 0"),
        (
            "pricing: {cancellation_penalty: -0.1}",
            "pricing.cancellation_penalty: expected a factor",
        ),
        ("backend: {swf: {cores: 0}}", "backend.swf.cores: expected a positive integer, got 0"),
        ("backend: {swf: {offset: -1}}", "backend.swf.offset: expected"),
        ("reservations: {confirm_timeout_s: 0}", "reservations.confirm_timeout_s: expected a pos"),
        ("reservations: {name_prefix: '-x'}", "reservations.name_prefix: expected a prefix"),
        ("api: {port: 99999}", "api.port: expected a TCP port number from 1 to 65535, got 99999"),
        ("api: {listen: 'not an address!'}", "api.listen: expected an IP address or host name"),
        (
            "api: {tls: {cert: /nonexistent.crt, key: /nonexistent.key}}",
            "api.tls.cert: expected an existing file (/nonexistent.crt does not exist)",
        ),
        ("api: {tls: {enabled: yes-please}}", "api.tls.enabled: expected true or false"),
        (
            "security: {signature_max_age_s: 2.5}",
            "security.signature_max_age_s: expected a positive whole",
        ),
        (
            "security: {nonce_cache_size: 0}",
            "security.nonce_cache_size: expected a positive integer",
        ),
        (
            "security: {authorized_clients: nope.yaml}",
            "security.authorized_clients: expected an existing file",
        ),
        ("ledger: {url: 'ftp://bank'}", "ledger.url: expected an https:// URL"),
        ("ledger: {url: 'http://bank:8444'}", "ledger.url: expected an https:// URL"),
        ("ledger: {ca: nope.pem}", "ledger.ca: expected an existing file"),
        ("ledger: {participants: nope.yaml}", "ledger.participants: expected an existing file"),
        ("ledger: {port: 0}", "ledger.port: expected a TCP port number from 1 to 65535, got 0"),
        ("ledger: {default_credit: -1}", "ledger.default_credit: expected an amount"),
        ("ledger: {default_credit: '1e99'}", "ledger.default_credit: expected an amount"),
        ("ledger: {listen: 'not an address!'}", "ledger.listen: expected an IP address or host"),
        ("state_dir: 5", "state_dir: expected a file path, got 5"),
        (
            f"notifications: {{socket: /{'x' * 107}}}",
            "notifications.socket: expected a socket path of at most 107 printable bytes",
        ),
        (
            """notifications: {socket: '/run/a"b.sock'}""",
            "notifications.socket: expected a socket path without quotes or backslashes",
        ),
        ("notifications: {users: [Slurm User]}", "notifications.users[0]: expected a scheduler"),
        ("planner: {preemption: kill}", 'planner.preemption: expected one of "none", "suspend"'),
        ("auctions: {mode: later}", 'auctions.mode: expected one of "future", "now"'),
        (
            "backend: {slurm: {qos_levels: {high: 0}}}",
            "backend.slurm.qos_levels: expected a priority 1 and up for QoS high",
        ),
        ("backend: {slurm: {qos_levels: [high]}}", "backend.slurm.qos_levels: expected a mapping"),
    ],
)
def test_every_error_names_the_path_and_the_expectation(
    tmp_path: Path, text: str, expected: str
) -> None:
    found = problems(tmp_path, text)
    assert any(problem.startswith(expected) for problem in found), found


def test_the_ledger_service_keys(tmp_path: Path, data_home: Path) -> None:
    defaults = loading.load().ledger
    assert (defaults.ca, defaults.participants) == (None, None)
    assert defaults.default_credit == Decimal("1000.00")  # the embedded bank's clients
    assert (defaults.listen, defaults.port) == ("127.0.0.1", 8444)
    (tmp_path / "bank-ca.pem").write_text("x")
    (tmp_path / "participants.yaml").write_text("sites: {}")
    text = """\
        ledger:
          url: https://bank.example.org:8444
          ca: bank-ca.pem
          participants: participants.yaml
          default_credit: "250.00"
          listen: 0.0.0.0
          port: 9444
        """
    ledger = loading.load(write(tmp_path, text)).ledger
    assert ledger.default_credit == Decimal("250.00")
    assert ledger.ca == tmp_path / "bank-ca.pem"  # relative to the file
    assert ledger.participants == tmp_path / "participants.yaml"
    assert (ledger.listen, ledger.port) == ("0.0.0.0", 9444)


def test_the_notices_socket_is_off_unless_named(tmp_path: Path) -> None:
    assert loading.load(None).notifications == schema.NotificationsConfig(socket=None, users=())
    config = loading.load(
        write(tmp_path, "notifications: {socket: run/notify.sock, users: [slurm]}")
    )
    assert config.notifications.socket == tmp_path / "run" / "notify.sock"
    assert config.notifications.users == ("slurm",)


def test_cert_without_key_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.crt").write_text("x")
    assert problems(tmp_path, "api: {tls: {cert: a.crt}}") == [
        "api.tls.key: expected a file path: cert and key go together"
    ]


def test_unknown_keys_are_refused_with_a_hint(tmp_path: Path) -> None:
    found = problems(tmp_path, "backend: {slurm: {timout: 3}}\nsite: {cpu_speed: 2}\nplaner: {}")
    assert sorted(found) == [
        'backend.slurm.timout: unknown key; did you mean "timeout"?',
        'planer: unknown key; did you mean "planner"?',
        'site.cpu_speed: unknown key; did you mean "cpu_speed_mhz"?',
    ]


def test_an_unknown_key_far_from_any_lists_the_keys(tmp_path: Path) -> None:
    assert problems(tmp_path, "ledger: {zzz: 1}") == [
        "ledger.zzz: unknown key; expected one of: path, database, url, ca, default_credit, "
        "participants, listen, port"
    ]


def test_all_problems_are_reported_at_once(tmp_path: Path) -> None:
    found = problems(tmp_path, "api: {port: 0}\nplanner: {policy: x}\nsite: {name: ''}")
    assert {problem.split(":")[0] for problem in found} == {
        "api.port",
        "planner.policy",
        "site.name",
    }


def test_only_the_selected_backend_needs_its_files(tmp_path: Path) -> None:
    text = "backend: {type: swf, slurm: {slurm_conf: /etc/elsewhere/slurm.conf}}"
    assert loading.load(write(tmp_path, text)).backend.slurm.slurm_conf == Path(
        "/etc/elsewhere/slurm.conf"
    )
    found = problems(tmp_path, "backend: {type: pyslurm, slurm: {slurm_conf: missing.conf}}")
    assert found[0].startswith("backend.slurm.slurm_conf: expected an existing file")


def test_a_file_that_is_not_yaml_says_where(tmp_path: Path) -> None:
    path = write(tmp_path, "site:\n  name: [unclosed\n")
    with pytest.raises(ConfigError, match=r"line \d+, column \d+: not valid YAML"):
        loading.load(path)


def test_a_document_that_is_not_a_mapping(tmp_path: Path) -> None:
    assert problems(tmp_path, "- a\n- b\n") == ["expected a mapping of keys to values, got a list"]


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read it"):
        loading.load(tmp_path / "absent.yaml")


def test_the_error_text_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "api: {port: 0}")
    with pytest.raises(ConfigError) as caught:
        loading.load(path)
    assert str(caught.value) == (
        f"{path}: api.port: expected a TCP port number from 1 to 65535, got 0"
    )


# --------------------------------------------------------------------------- check-config


def test_check_config_prints_the_effective_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "planner: {policy: easy}\n")
    assert main(["check-config", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # tables wrap to the terminal width
    assert "planner.policy" in out and "easy" in out and "file" in out
    assert "backend.type" in out and "default" in out
    assert "no client can reserve" in out


def test_check_config_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "pricing: {flat: {price: 2.5}}\n")
    assert main(["check-config", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    assert report["config"]["pricing.flat.price"] == "2.5"
    assert report["config"]["backend.type"] == "swf"
    assert report["authorized_clients"] == []


def test_check_config_reports_errors_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "backend: {type: slurm, slurm: {timeout: fast}}\n")
    assert main(["check-config", str(path)]) == 1
    captured = capsys.readouterr()
    assert 'backend.slurm.timeout: expected a positive number of seconds, got "fast"' in " ".join(
        captured.err.split()
    )
    assert main(["check-config", str(path), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert report["errors"] == [
        {
            "path": "backend.slurm.timeout",
            "message": 'expected a positive number of seconds, got "fast"',
        }
    ]


def test_check_config_checks_the_authorized_clients_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "clients.yaml").write_text(
        "clients:\n  alice:\n    public_key: nope\n    user: alice\n"
    )
    path = write(tmp_path, "security: {authorized_clients: clients.yaml}\n")
    assert main(["check-config", str(path), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["errors"][0]["path"] == "clients.alice.public_key"
    assert report["file"] == str(tmp_path / "clients.yaml")


def test_check_config_without_a_file_shows_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["api.tls.self_signed"] is True


def test_the_command_lines_state_dir_moves_every_path_derived_from_it(tmp_path: Path) -> None:
    """``--state-dir`` is applied before the defaults under the state directory are derived:
    the database, the site key, the authorized clients, the ledger and the certificate all
    follow it (they stayed under the default state directory before)."""
    file = write(tmp_path, "state_dir: /var/lib/elsewhere\n")
    moved = tmp_path / "state"
    loaded = loading.load(file, state_dir=moved)
    assert loaded.state_dir == moved
    assert loaded.security.site_key == moved / "site.key"
    assert loaded.security.authorized_clients == moved / "authorized_clients.yaml"
    assert loaded.ledger.path == moved / "ledger.sqlite3"
    assert loaded.api.tls.cert == moved / "tls" / "server.crt"
    assert loading.parse(None, state_dir=moved).ledger.path == moved / "ledger.sqlite3"


def test_preemption_bid_mode_and_qos_levels_are_read(tmp_path: Path) -> None:
    config = loading.load(
        write(
            tmp_path,
            """
            planner: {preemption: requeue}
            auctions: {mode: now}
            backend: {slurm: {qos_levels: {low: 1, high: 3}}}
            """,
        )
    )
    assert config.planner.preemption.value == "requeue"
    assert config.auctions.mode.value == "now"
    assert config.backend.slurm.qos_levels == (("low", 1), ("high", 3))
    defaults = loading.load(write(tmp_path, "{}", "empty.yaml"))
    assert defaults.planner.preemption.value == "none"
    assert defaults.auctions.mode.value == "future"
    assert defaults.backend.slurm.qos_levels == ()


def test_a_command_prefix_runs_slurm_elsewhere(tmp_path: Path) -> None:
    """The commands run through another program (ssh, chroot): slurm.conf is then a path
    there, not checked here, and the prefix reaches the backend's configuration."""
    loaded = loading.load(
        write(
            tmp_path,
            "backend: {type: slurm, slurm: {slurm_conf: /srv/ctl/slurm.conf,"
            " command_prefix: [ssh, -oBatchMode=yes, ctl]}}",
        )
    )
    assert loaded.backend.slurm.command_prefix == ("ssh", "-oBatchMode=yes", "ctl")
    assert site.slurm_config(loaded).command_prefix == ("ssh", "-oBatchMode=yes", "ctl")
    found = problems(tmp_path, "backend: {type: slurm, slurm: {command_prefix: [ssh, '']}}")
    assert found == [
        "backend.slurm.command_prefix[1]: expected a command word: non-empty text without NUL"
        ' or line breaks, got ""'
    ]
    found = problems(tmp_path, "backend: {type: slurm, slurm: {slurm_conf: missing.conf}}")
    assert found[0].startswith("backend.slurm.slurm_conf: expected an existing file")
