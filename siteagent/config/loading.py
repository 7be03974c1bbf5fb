"""The agent's configuration: one YAML file, validated at start, with errors a person can act on.

Every problem names the key's path and what was expected (``backend.slurm.timeout: expected a
positive number of seconds, got "fast"``); unknown keys are refused with a "did you mean" hint,
because a misspelt key that is silently ignored is a setting the administrator believes in and
the agent does not have. All problems are reported at once, not one per restart.

The result is a tree of frozen dataclasses whose field names are the YAML keys, so the effective
configuration can be printed under the same names the file uses. Paths that the administrator
leaves out are filled in under ``state_dir`` (the user's data directory, or systemd's
``$STATE_DIRECTORY``), so ``siteagent serve`` works with no file at all: replay backend, the
bundled trace, TLS with a self-signed certificate for localhost.

Pricing parameters are kept here as validated data only; the pricing policies read them.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import socket
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from siteagent.config.reading import (
    ConfigError,
    Paths,
    Reading,
    Section,
    amount,
    authority,
    boolean,
    byte_count,
    choice,
    command_word,
    factor,
    keys_of,
    ledger_url,
    list_of_anything,
    listen_address,
    name,
    non_negative_int,
    optional,
    optional_name,
    port,
    positive_int,
    positive_number,
    postgres_url,
    price,
    qos_levels,
    read_yaml,
    reservation_prefix,
    scheduler_user,
    seconds,
    slurm_flag,
    text,
    whole_seconds,
)
from siteagent.config.schema import (
    DEFAULT_CREDIT,
    DEFAULT_REFERENCE_INTERVAL_S,
    ApiConfig,
    AuctionsConfig,
    BackendConfig,
    BackendType,
    BidMode,
    Config,
    ExternalityPricing,
    FlatPricing,
    LedgerConfig,
    LoadPricing,
    MetricsConfig,
    NotificationsConfig,
    PbsOptions,
    PlannerConfig,
    PricingConfig,
    PricingPolicy,
    RateLimit,
    RateLimits,
    ReferenceRequest,
    ReservationsConfig,
    SecurityConfig,
    SiteConfig,
    SlurmOptions,
    SwfOptions,
    TlsConfig,
)
from siteagent.core import names
from siteagent.core.defaults import (
    DEFAULT_COMMAND_TIMEOUT_S,
    DEFAULT_CONFIRM_TIMEOUT_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_LIVE_OFFERS_PER_CLIENT,
    DEFAULT_NONCES_PER_CLIENT,
    DEFAULT_POLL_INTERVAL_S,
    DEFAULT_REPLAY_OFFSET_S,
    DEFAULT_REPLAY_SPEED,
    DEFAULT_REQUEST_TIMEOUT_S,
    DEFAULT_RESERVATION_PREFIX,
)
from siteagent.core.engines import Policy
from siteagent.core.preemption import Preemption
from siteagent.core.values import CapacityUnit


def default_state_dir() -> Path:
    """Where the agent keeps its database, keys and generated certificate when not told.

    systemd's ``StateDirectory=`` sets ``$STATE_DIRECTORY`` (first entry wins); otherwise the
    XDG user data directory, as any per-user program would.
    """
    systemd = os.environ.get("STATE_DIRECTORY", "")
    if systemd:
        return Path(systemd.split(":")[0])
    data_home = os.environ.get("XDG_DATA_HOME", "")
    base = Path(data_home) if data_home else Path.home() / ".local" / "share"
    return base / "siteagent"


def default_site_name() -> str:
    """The host's short name: one agent per cluster, named after the login node it runs on."""
    host = socket.gethostname().split(".")[0]
    return host if names.is_valid(names.NAME, host) else "siteagent"


def read_site(section: Section) -> SiteConfig:
    return SiteConfig(
        name=section.get("name", default_site_name(), name),
        description=section.get("description", "", text),
        architecture=section.get("architecture", None, optional(text)),
        os=section.get("os", None, optional(text)),
        cpu_speed_mhz=section.get("cpu_speed_mhz", None, optional(positive_int)),
        memory_per_core_mb=section.get("memory_per_core_mb", None, optional(positive_int)),
        cores_per_node=section.get("cores_per_node", None, optional(positive_int)),
        partitions=section.items("partitions", name),
    )


def read_backend(section: Section, paths: Paths) -> BackendConfig:
    kind = section.get("type", BackendType.SWF, choice(BackendType))
    swf = section.section("swf", keys_of(SwfOptions))
    slurm = section.section("slurm", keys_of(SlurmOptions))
    pbs = section.section("pbs", keys_of(PbsOptions))
    # the selected backend's files must exist now; the others may name files of another host,
    # and so does slurm_conf when the commands run elsewhere (command_prefix)
    used_file = paths.existing_file
    prefix = slurm.items("command_prefix", command_word)
    return BackendConfig(
        type=kind,
        swf=SwfOptions(
            trace=swf.get(
                "trace", None, optional(used_file if kind is BackendType.SWF else paths.path)
            ),
            speed=swf.get("speed", DEFAULT_REPLAY_SPEED, positive_number),
            offset=swf.get("offset", DEFAULT_REPLAY_OFFSET_S, non_negative_int),
            cores=swf.get("cores", None, optional(positive_int)),
            origin=swf.get("origin", None, optional(positive_number)),
        ),
        slurm=SlurmOptions(
            slurm_conf=slurm.get(
                "slurm_conf",
                None,
                optional(
                    used_file
                    if kind in (BackendType.SLURM, BackendType.PYSLURM) and not prefix
                    else paths.path
                ),
            ),
            partition=slurm.get("partition", "", optional_name),
            unit=slurm.get("unit", CapacityUnit.CORE, choice(CapacityUnit)),
            flags=slurm.items("flags", slurm_flag),
            users=slurm.items("users", scheduler_user),
            timeout=slurm.get("timeout", DEFAULT_COMMAND_TIMEOUT_S, seconds),
            qos_levels=slurm.get("qos_levels", (), qos_levels),
            command_prefix=prefix,
        ),
        pbs=PbsOptions(
            pbs_conf=pbs.get(
                "pbs_conf", None, optional(used_file if kind is BackendType.PBS else paths.path)
            ),
            queue=pbs.get("queue", "", optional_name),
            unit=pbs.get("unit", CapacityUnit.CORE, choice(CapacityUnit)),
            timeout=pbs.get("timeout", DEFAULT_COMMAND_TIMEOUT_S, seconds),
        ),
    )


def read_planner(section: Section) -> PlannerConfig:
    return PlannerConfig(
        policy=section.get("policy", Policy.CONSERVATIVE, choice(Policy)),
        poll_interval_s=section.get("poll_interval_s", DEFAULT_POLL_INTERVAL_S, seconds),
        preemption=section.get("preemption", Preemption.NONE, choice(Preemption)),
    )


def read_pricing(section: Section) -> PricingConfig:
    flat = section.section("flat", keys_of(FlatPricing))
    load = section.section("load", keys_of(LoadPricing))
    externality = section.section("externality", keys_of(ExternalityPricing))
    load_pricing = LoadPricing(
        start_price=load.get("start_price", LoadPricing.start_price, price),
        min_price=load.get("min_price", LoadPricing.min_price, price),
        rounds=load.get("rounds", LoadPricing.rounds, positive_int),
    )
    if load_pricing.min_price > load_pricing.start_price:
        section.reading.problem(
            load.child("min_price"),
            f"expected at most start_price ({load_pricing.start_price}), "
            f"got {load_pricing.min_price}",
        )
    return PricingConfig(
        policy=section.get("policy", PricingPolicy.FLAT, choice(PricingPolicy)),
        flat=FlatPricing(price=flat.get("price", FlatPricing.price, price)),
        load=load_pricing,
        externality=ExternalityPricing(
            enabled=externality.get("enabled", True, boolean),
            policy=externality.get("policy", Policy.CONSERVATIVE, choice(Policy)),
            rate=externality.get("rate", ExternalityPricing.rate, price),
        ),
        cancellation_penalty=section.get(
            "cancellation_penalty", PricingConfig.cancellation_penalty, factor
        ),
    )


def read_reservations(section: Section) -> ReservationsConfig:
    return ReservationsConfig(
        confirm_timeout_s=section.get("confirm_timeout_s", DEFAULT_CONFIRM_TIMEOUT_S, seconds),
        name_prefix=section.get("name_prefix", DEFAULT_RESERVATION_PREFIX, reservation_prefix),
    )


def read_api(section: Section, paths: Paths, state_dir: Path) -> ApiConfig:
    tls = section.section("tls", keys_of(TlsConfig, "self_signed"))
    enabled = tls.get("enabled", True, boolean)
    cert = tls.get("cert", None, optional(paths.existing_file))
    key = tls.get("key", None, optional(paths.existing_file))
    if tls.has("cert") != tls.has("key"):
        given, missing = ("cert", "key") if tls.has("cert") else ("key", "cert")
        tls.reading.problem(
            tls.child(missing), f"expected a file path: {given} and {missing} go together"
        )
    listen = section.get("listen", "127.0.0.1", listen_address)
    api_port = section.get("port", 8443, port)
    limits = section.section("rate_limits", keys_of(RateLimits))
    return ApiConfig(
        listen=listen,
        port=api_port,
        tls=TlsConfig(
            enabled=enabled,
            cert=cert or state_dir / "tls" / "server.crt",
            key=key or state_dir / "tls" / "server.key",
            self_signed=not (tls.has("cert") or tls.has("key")),
        ),
        public_names=section.items("public_names", authority)
        or default_public_names(listen, api_port),
        max_header_bytes=section.get("max_header_bytes", DEFAULT_MAX_HEADER_BYTES, byte_count),
        max_body_bytes=section.get("max_body_bytes", DEFAULT_MAX_BODY_BYTES, byte_count),
        request_timeout_s=section.get("request_timeout_s", DEFAULT_REQUEST_TIMEOUT_S, seconds),
        max_connections_per_address=section.get(
            "max_connections_per_address", DEFAULT_MAX_CONNECTIONS_PER_ADDRESS, positive_int
        ),
        rate_limits=RateLimits(
            quotes=read_rate_limit(limits, "quotes", RateLimits.quotes),
            reservations=read_rate_limit(limits, "reservations", RateLimits.reservations),
            bids=read_rate_limit(limits, "bids", RateLimits.bids),
        ),
        max_live_offers_per_client=section.get(
            "max_live_offers_per_client", DEFAULT_MAX_LIVE_OFFERS_PER_CLIENT, positive_int
        ),
    )


def read_rate_limit(section: Section, key: str, default: RateLimit) -> RateLimit:
    bucket = section.section(key, keys_of(RateLimit))
    return RateLimit(
        per_second=bucket.get("per_second", default.per_second, positive_number),
        burst=bucket.get("burst", default.burst, positive_int),
    )


def default_public_names(listen: str, port: int) -> Tuple[str, ...]:
    """The authorities a site answers to when the file names none: its listen address, and
    this host's names when it listens on every address (behind a proxy or a DNS alias, name
    them in ``api.public_names``)."""
    loopback = ("127.0.0.1", "localhost", "::1")
    hosts = [listen]
    if listen in ("0.0.0.0", "::"):
        hosts = [socket.getfqdn(), socket.gethostname(), *loopback]
    elif listen in loopback:
        hosts = list(loopback)
    names: List[str] = []
    for host in hosts:
        name = authority(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
        if name not in names:
            names.append(name)
    return tuple(names)


def read_security(section: Section, paths: Paths, state_dir: Path) -> SecurityConfig:
    return SecurityConfig(
        authorized_clients=section.get(
            "authorized_clients", state_dir / "authorized_clients.yaml", paths.existing_file
        ),
        site_key=section.get("site_key", state_dir / "site.key", paths.path),
        signature_max_age_s=section.get("signature_max_age_s", 300, whole_seconds),
        nonces_per_client=nonces_per_client(section),
    )


#: Keys of the security section still read (with a deprecation) under their old names.
DEPRECATED_SECURITY_KEYS = ("nonce_cache_size",)


def nonces_per_client(section: Section) -> int:
    """``nonces_per_client``, or the old ``nonce_cache_size`` (one bound for all clients, which
    let one client crowd out the others) read as a bound per client, with a deprecation."""
    if section.has("nonce_cache_size") and not section.has("nonces_per_client"):
        section.reading.deprecated(
            section.child("nonce_cache_size"),
            "use nonces_per_client (the bound is now per client); its value is read as that",
        )
        return section.get("nonce_cache_size", DEFAULT_NONCES_PER_CLIENT, positive_int)
    return section.get("nonces_per_client", DEFAULT_NONCES_PER_CLIENT, positive_int)


def read_ledger(section: Section, paths: Paths, state_dir: Path) -> LedgerConfig:
    return LedgerConfig(
        path=section.get("path", state_dir / "ledger.sqlite3", paths.path),
        database=section.get("database", None, optional(postgres_url)),
        url=section.get("url", None, optional(ledger_url)),
        ca=section.get("ca", None, optional(paths.existing_file)),
        default_credit=section.get("default_credit", DEFAULT_CREDIT, amount),
        participants=section.get("participants", None, optional(paths.existing_file)),
        listen=section.get("listen", "127.0.0.1", listen_address),
        port=section.get("port", 8444, port),
    )


def read_metrics(section: Section) -> MetricsConfig:
    interval = section.get("reference_interval_s", DEFAULT_REFERENCE_INTERVAL_S, seconds)
    raw = section.get("reference_requests", None, optional(list_of_anything))
    if raw is None:
        return MetricsConfig(reference_interval_s=interval)
    shapes: List[ReferenceRequest] = []
    for index, item in enumerate(raw):
        keys = keys_of(ReferenceRequest)
        shape = Section(
            item, f"{section.child('reference_requests')}[{index}]", keys, section.reading
        )
        missing = [key for key in keys if isinstance(item, Mapping) and key not in item]
        for key in missing:
            shape.reading.problem(shape.child(key), "expected a value: the key is required")
        request = ReferenceRequest(
            name=shape.get("name", "", name),
            cores=shape.get("cores", 1, positive_int),
            duration_s=shape.get("duration_s", 3600, whole_seconds),
        )
        if request.name and any(other.name == request.name for other in shapes):
            shape.reading.problem(
                shape.child("name"), f'expected a unique name, got "{request.name}" twice'
            )
        shapes.append(request)
    return MetricsConfig(reference_requests=tuple(shapes), reference_interval_s=interval)


def read_auctions(section: Section) -> AuctionsConfig:
    return AuctionsConfig(
        transfer_rate=section.get("transfer_rate", AuctionsConfig.transfer_rate, positive_int),
        max_length_s=section.get("max_length_s", AuctionsConfig.max_length_s, whole_seconds),
        max_open_per_client=section.get(
            "max_open_per_client", AuctionsConfig.max_open_per_client, positive_int
        ),
        max_held_machine_hours=section.get(
            "max_held_machine_hours", AuctionsConfig.max_held_machine_hours, positive_number
        ),
        accept_window_s=section.get(
            "accept_window_s", AuctionsConfig.accept_window_s, whole_seconds
        ),
        mode=section.get("mode", AuctionsConfig.mode, choice(BidMode)),
    )


def read_notifications(section: Section, paths: Paths) -> NotificationsConfig:
    return NotificationsConfig(
        socket=section.get("socket", None, optional(paths.socket)),
        users=section.items("users", scheduler_user),
    )


def parse(data: Any, source: Optional[Path] = None, state_dir: Optional[Path] = None) -> Config:
    """Validate a loaded document (None: no file, all defaults); raise ConfigError.

    ``state_dir`` (the command line's ``--state-dir``) wins over the file's, before the paths
    that default to places in it (database, keys, ledger, certificate) are derived from it.
    """
    reading = Reading()
    paths = Paths(source.parent if source else Path.cwd())
    root = Section(data, "", keys_of(Config, "source", "explicit", "deprecations"), reading)
    file_state_dir = root.get("state_dir", default_state_dir(), paths.path)
    state_dir = state_dir or file_state_dir
    config = Config(
        site=read_site(root.section("site", keys_of(SiteConfig))),
        backend=read_backend(root.section("backend", keys_of(BackendConfig)), paths),
        planner=read_planner(root.section("planner", keys_of(PlannerConfig))),
        pricing=read_pricing(root.section("pricing", keys_of(PricingConfig))),
        reservations=read_reservations(root.section("reservations", keys_of(ReservationsConfig))),
        api=read_api(root.section("api", keys_of(ApiConfig)), paths, state_dir),
        security=read_security(
            root.section("security", (*keys_of(SecurityConfig), *DEPRECATED_SECURITY_KEYS)),
            paths,
            state_dir,
        ),
        ledger=read_ledger(root.section("ledger", keys_of(LedgerConfig)), paths, state_dir),
        state_dir=state_dir,
        metrics=read_metrics(root.section("metrics", keys_of(MetricsConfig))),
        auctions=read_auctions(root.section("auctions", keys_of(AuctionsConfig))),
        notifications=read_notifications(
            root.section("notifications", keys_of(NotificationsConfig)), paths
        ),
        source=source,
        explicit=frozenset(reading.explicit),
        deprecations=tuple(reading.deprecations),
    )
    if reading.problems:
        raise ConfigError(str(source) if source else "configuration", reading.problems)
    return config


def load(path: Optional[Path] = None, state_dir: Optional[Path] = None) -> Config:
    """Read and validate ``path`` (refused if others may write it, see :func:`read_yaml`);
    with None, the defaults (no file is needed to run). ``state_dir`` overrides the file's
    (see :func:`parse`)."""
    if path is None:
        return parse(None, state_dir=state_dir)
    data = read_yaml(path, "configuration file")
    return parse(data, path, state_dir)


def flatten(config: Config) -> List[Tuple[str, Any]]:
    """The effective settings as (dotted key, value) pairs, in file order."""
    rows: List[Tuple[str, Any]] = []
    _flatten(config, "", rows)
    return [
        (key, value) for key, value in rows if key not in ("source", "explicit", "deprecations")
    ]


def _flatten(node: Any, prefix: str, rows: List[Tuple[str, Any]]) -> None:
    for item in dataclasses.fields(node):
        value = getattr(node, item.name)
        key = f"{prefix}{item.name}"
        if dataclasses.is_dataclass(value):
            _flatten(value, key + ".", rows)
        else:
            rows.append((key, value))


def to_json(config: Config) -> Dict[str, Any]:
    """The effective configuration as plain JSON values (enums by value, paths and money as
    strings, so that no amount passes through a float)."""
    return {key: json_value(value) for key, value in flatten(config)}


def json_value(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (Path, Decimal)):
        return str(value)
    if isinstance(value, tuple):
        return [json_value(item) for item in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            item.name: json_value(getattr(value, item.name)) for item in dataclasses.fields(value)
        }
    return value
