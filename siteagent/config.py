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
import difflib
import enum
import ipaddress
import json
import math
import os
import re
import socket
import urllib.parse
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Callable, Dict, FrozenSet, List, Mapping, Optional, Set, Tuple, TypeVar

import yaml

from siteagent.backends.slurm import ALLOWED_FLAGS
from siteagent.model import CapacityUnit
from siteagent.scheduling import Policy

T = TypeVar("T")
E = TypeVar("E", bound=enum.Enum)

#: Names that end up in reservation names, account names and key ids: safe in any of them.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: Reservation name prefixes: a name start that Slurm and PBS both accept unquoted.
PREFIX_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,15}$")


class BackendType(str, enum.Enum):
    """Which batch system the agent talks to."""

    SWF = "swf"
    SLURM = "slurm"
    PYSLURM = "pyslurm"
    PBS = "pbs"


class PricingPolicy(str, enum.Enum):
    """How the unit price per core-hour is set: fixed, or by load (the marketplace paper)."""

    FLAT = "flat"
    LOAD = "load"


# --------------------------------------------------------------------------- the result


@dataclass(frozen=True)
class SiteConfig:
    """What a buyer sees of the site: its name and the static RFQL attributes.

    An attribute left out (None, or no partitions) is not advertised: a request that names it
    cannot be satisfied, because the site cannot promise what it does not know.
    """

    name: str
    description: str = ""
    architecture: Optional[str] = None
    os: Optional[str] = None
    cpu_speed_mhz: Optional[int] = None
    memory_per_core_mb: Optional[int] = None
    cores_per_node: Optional[int] = None
    partitions: Tuple[str, ...] = ()


@dataclass(frozen=True)
class SwfOptions:
    """The replay backend: ``trace`` (None: the bundled SDSC-SP2 slice), replay speed, and how
    far into the trace to start (seconds), so that the queue has built up."""

    trace: Optional[Path] = None
    speed: float = 1.0
    offset: int = 2 * 86400


@dataclass(frozen=True)
class SlurmOptions:
    """Slurm (``slurm`` and ``pyslurm`` backends): ``SLURM_CONF``, the one partition served,
    capacity unit, flags put on every reservation, the users a reservation is made for when
    its buyer maps to none (the administrator's commands without ``--user``), and the command
    timeout in seconds."""

    slurm_conf: Optional[Path] = None
    partition: str = ""
    unit: CapacityUnit = CapacityUnit.CORE
    flags: Tuple[str, ...] = ()
    users: Tuple[str, ...] = ()
    timeout: float = 30.0


@dataclass(frozen=True)
class PbsOptions:
    """PBS: ``PBS_CONF_FILE``, the execution queue served, capacity unit, command timeout (s)."""

    pbs_conf: Optional[Path] = None
    queue: str = ""
    unit: CapacityUnit = CapacityUnit.CORE
    timeout: float = 30.0


@dataclass(frozen=True)
class BackendConfig:
    """The batch system in use and every backend's options (only ``type``'s are used)."""

    type: BackendType = BackendType.SWF
    swf: SwfOptions = SwfOptions()
    slurm: SlurmOptions = SlurmOptions()
    pbs: PbsOptions = PbsOptions()


@dataclass(frozen=True)
class PlannerConfig:
    """The schedule predictor: backfilling policy and how often the cluster is polled."""

    policy: Policy = Policy.CONSERVATIVE
    poll_interval_s: float = 30.0


@dataclass(frozen=True)
class FlatPricing:
    """A fixed price per core-hour (the thesis' default c = 1)."""

    price: Decimal = Decimal("1")


@dataclass(frozen=True)
class LoadPricing:
    """The marketplace paper's load-based auction price: start and minimum price per
    core-hour, and the number of auction rounds the decrement is spread over."""

    start_price: Decimal = Decimal("2")
    min_price: Decimal = Decimal("0.5")
    rounds: int = 3


@dataclass(frozen=True)
class ExternalityPricing:
    """The thesis' fixed fee for the delay a reservation imposes on queued jobs: ``rate`` per
    core-hour of delay, predicted under backfilling ``policy`` (the pricing's scheduling
    policy, which the load-based price's load is computed under too)."""

    enabled: bool = True
    policy: Policy = Policy.CONSERVATIVE
    rate: Decimal = Decimal("1")


@dataclass(frozen=True)
class PricingConfig:
    """Unit-price policy, the externality fee, and the cancellation penalty factor p (a
    confirmed reservation cancelled costs p x its fee; 0.1 is the thesis' value, the same
    default as :mod:`siteagent.reservations`)."""

    policy: PricingPolicy = PricingPolicy.FLAT
    flat: FlatPricing = FlatPricing()
    load: LoadPricing = LoadPricing()
    externality: ExternalityPricing = ExternalityPricing()
    cancellation_penalty: Decimal = Decimal("0.1")


@dataclass(frozen=True)
class ReservationsConfig:
    """How long a tentative reservation waits for its confirm, and the name prefix that lets
    reconciliation tell the agent's reservations from everybody else's."""

    confirm_timeout_s: float = 120.0
    name_prefix: str = "sa-"


@dataclass(frozen=True)
class TlsConfig:
    """TLS for the API. ``self_signed`` (derived, not a key): cert and key were not given, so
    the agent makes a self-signed pair for localhost at these paths on first start."""

    enabled: bool
    cert: Path
    key: Path
    self_signed: bool


@dataclass(frozen=True)
class ApiConfig:
    """Where the HTTPS API listens (localhost by default: exposing it is a decision)."""

    listen: str
    port: int
    tls: TlsConfig


@dataclass(frozen=True)
class SecurityConfig:
    """Who may change state, and the replay window.

    ``authorized_clients`` maps key ids to public keys and scheduler users (missing file: no
    client may change anything). ``signature_max_age_s`` is how old a request signature may be;
    ``nonce_cache_size`` bounds the nonces remembered within that window. ``site_key`` is the
    agent's own Ed25519 key that countersigns receipts (made on first start if missing).
    """

    authorized_clients: Path
    site_key: Path
    signature_max_age_s: int = 300
    nonce_cache_size: int = 100_000


@dataclass(frozen=True)
class LedgerConfig:
    """The bank: embedded SQLite at ``path`` unless ``url`` names a ledger service, whose
    certificate the agent checks against ``ca`` (default: the system's trusted CAs).

    ``siteagent ledger serve`` reads ``path`` too, listens on ``listen``:``port`` with the
    ``api.tls`` certificate, and opens accounts for the sites and clients of ``participants``.
    """

    path: Path
    url: Optional[str] = None
    ca: Optional[Path] = None
    participants: Optional[Path] = None
    listen: str = "127.0.0.1"
    port: int = 8444


@dataclass(frozen=True)
class ReferenceRequest:
    """A request shape whose quote the metrics follow: ``cores`` units for ``duration_s``."""

    name: str
    cores: int
    duration_s: int


#: Shapes quoted every cycle when the file names none: one core-hour, a small parallel job,
#: and a wide day-long one (refused, and reported so, on a site too small for it).
DEFAULT_REFERENCE_REQUESTS = (
    ReferenceRequest("one-core-hour", 1, 3600),
    ReferenceRequest("small", 16, 4 * 3600),
    ReferenceRequest("wide-day", 64, 24 * 3600),
)


#: How often the reference requests are quoted again: each quote with the externality fee is a
#: re-plan of the whole queue (a quarter second on a 10,000-job queue), too dear every cycle.
DEFAULT_REFERENCE_INTERVAL_S = 300.0


@dataclass(frozen=True)
class MetricsConfig:
    """What the Prometheus metrics quote, besides the cluster's own figures: the earliest start,
    fee and unit price of each reference request (a buyer's view of the site over time, for
    dashboards and alerts), at the first cycle and then every ``reference_interval_s``."""

    reference_requests: Tuple[ReferenceRequest, ...] = DEFAULT_REFERENCE_REQUESTS
    reference_interval_s: float = DEFAULT_REFERENCE_INTERVAL_S


@dataclass(frozen=True)
class Config:
    """The whole effective configuration. ``source`` is the file read (None: defaults);
    ``explicit`` holds the dotted paths the file set, so a listing can tell them from
    defaults."""

    site: SiteConfig
    backend: BackendConfig
    planner: PlannerConfig
    pricing: PricingConfig
    reservations: ReservationsConfig
    api: ApiConfig
    security: SecurityConfig
    ledger: LedgerConfig
    state_dir: Path
    metrics: MetricsConfig = MetricsConfig()
    source: Optional[Path] = None
    explicit: FrozenSet[str] = frozenset()


# --------------------------------------------------------------------------- errors


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a file: where (dotted key path) and what was expected."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(ValueError):
    """A file that cannot be used; ``problems`` lists every reason, each with its key path."""

    def __init__(self, source: str, problems: List[Problem]) -> None:
        self.source = source
        self.problems = tuple(problems)
        if len(problems) == 1:
            text = f"{source}: {problems[0]}"
        else:
            text = f"{source}: {len(problems)} problems:\n" + "\n".join(
                f"  {problem}" for problem in problems
            )
        super().__init__(text)


class Invalid(ValueError):
    """Raised by a converter: the value is not what was expected (the message says what)."""


# --------------------------------------------------------------------------- reading


class Reading:
    """What one pass over a document accumulates: its problems and the keys it set."""

    def __init__(self) -> None:
        self.problems: List[Problem] = []
        self.explicit: Set[str] = set()

    def problem(self, path: str, message: str) -> None:
        self.problems.append(Problem(path, message))


class Section:
    """One mapping of the document. Each accessor validates one key and returns a usable value
    (the default when the key is absent or wrong), recording problems instead of raising, so
    that a whole file is checked in one pass."""

    def __init__(self, data: Any, path: str, keys: Tuple[str, ...], reading: Reading) -> None:
        self.path = path
        self.reading = reading
        self.data: Mapping[str, Any] = {}
        if data is None:
            return
        if not isinstance(data, Mapping):
            reading.problem(path, f"expected a mapping of keys to values, got {show(data)}")
            return
        self.data = data
        for key in data:
            if key not in keys:
                reading.problem(self.child(str(key)), unknown_key_message(str(key), keys))

    def child(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.data

    def section(self, key: str, keys: Tuple[str, ...]) -> Section:
        return Section(self.data.get(key), self.child(key), keys, self.reading)

    def get(self, key: str, default: T, convert: Callable[[Any], T]) -> T:
        """The value of ``key`` converted, or ``default`` if absent or invalid."""
        if key not in self.data:
            return default
        raw = self.data[key]
        self.reading.explicit.add(self.child(key))
        try:
            return convert(raw)
        except Invalid as exc:
            self.reading.problem(self.child(key), f"expected {exc}, got {show(raw)}")
            return default

    def items(self, key: str, convert: Callable[[Any], T]) -> Tuple[T, ...]:
        """A list whose items are each converted; a bad item is named by its index."""
        raw: List[Any] = self.get(key, [], list_of_anything)
        values: List[T] = []
        for index, item in enumerate(raw):
            try:
                values.append(convert(item))
            except Invalid as exc:
                path = f"{self.child(key)}[{index}]"
                self.reading.problem(path, f"expected {exc}, got {show(item)}")
        return tuple(values)


def unknown_key_message(key: str, keys: Tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, keys, n=1)
    if close:
        return f'unknown key; did you mean "{close[0]}"?'
    return "unknown key; expected one of: " + ", ".join(keys)


def show(value: Any) -> str:
    """A value as the file spelt it, for error messages."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return json.dumps(value, default=str)


# ---- converters: each returns a typed value or raises Invalid(expectation)


def text(raw: Any) -> str:
    if not isinstance(raw, str):
        raise Invalid("a string")
    return raw


def name(raw: Any) -> str:
    if not isinstance(raw, str) or not NAME_RE.match(raw):
        raise Invalid("a name of letters, digits, '.', '_' or '-' (at most 64)")
    return raw


def optional_name(raw: Any) -> str:
    """A name, or "" for none (how the backends spell "no partition/queue")."""
    return "" if raw is None or raw == "" else name(raw)


def optional(convert: Callable[[Any], T]) -> Callable[[Any], Optional[T]]:
    def converted(raw: Any) -> Optional[T]:
        return None if raw is None else convert(raw)

    return converted


def positive_int(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw <= 0:
        raise Invalid("a positive integer")
    return raw


def non_negative_int(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise Invalid("an integer >= 0")
    return raw


def port(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= 65535:
        raise Invalid("a TCP port number from 1 to 65535")
    return raw


def positive_number(raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
        raise Invalid("a positive number")
    if raw <= 0:
        raise Invalid("a positive number")
    return float(raw)


def seconds(raw: Any) -> float:
    try:
        return positive_number(raw)
    except Invalid:
        raise Invalid("a positive number of seconds") from None


def whole_seconds(raw: Any) -> int:
    try:
        return positive_int(raw)
    except Invalid:
        raise Invalid("a positive whole number of seconds") from None


def boolean(raw: Any) -> bool:
    if not isinstance(raw, bool):
        raise Invalid("true or false")
    return raw


def price(raw: Any) -> Decimal:
    """Money per core-hour: written as a number or a string ("1.25"), kept as Decimal.

    A YAML float goes through its shortest repr, so ``1.1`` is Decimal("1.1"), not the binary
    fraction; amounts finer than a millionth of a unit are refused as typos.
    """
    expect = "a price >= 0 per core-hour (e.g. 1.25)"
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise Invalid(expect)
    try:
        value = Decimal(repr(raw) if isinstance(raw, float) else str(raw).strip())
    except InvalidOperation:
        raise Invalid(expect) from None
    if not value.is_finite() or value < 0:
        raise Invalid(expect)
    exponent = value.normalize().as_tuple().exponent
    if isinstance(exponent, int) and exponent < -6:
        raise Invalid(expect)
    return value


def factor(raw: Any) -> Decimal:
    try:
        return price(raw)
    except Invalid:
        raise Invalid("a factor >= 0 (e.g. 0.1)") from None


def choice(kind: type[E]) -> Callable[[Any], E]:
    def converted(raw: Any) -> E:
        for member in kind:
            if raw == member.value:
                return member
        raise Invalid("one of " + ", ".join(f'"{member.value}"' for member in kind))

    return converted


def list_of_anything(raw: Any) -> List[Any]:
    if not isinstance(raw, list):
        raise Invalid("a list")
    return raw


def slurm_flag(raw: Any) -> str:
    if raw not in ALLOWED_FLAGS:
        raise Invalid("a reservation flag, one of " + ", ".join(sorted(ALLOWED_FLAGS)))
    return str(raw)


def listen_address(raw: Any) -> str:
    expect = "an IP address or host name to listen on"
    if not isinstance(raw, str) or not raw:
        raise Invalid(expect)
    try:
        ipaddress.ip_address(raw)
    except ValueError:
        if not re.match(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$", raw):
            raise Invalid(expect) from None
    return raw


def ledger_url(raw: Any) -> str:
    expect = "an http:// or https:// URL of a ledger service"
    if not isinstance(raw, str):
        raise Invalid(expect)
    parts = urllib.parse.urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Invalid(expect)
    return raw


def reservation_prefix(raw: Any) -> str:
    if not isinstance(raw, str) or not PREFIX_RE.match(raw):
        raise Invalid("a prefix starting with a letter, of letters, digits, '.', '_', '-' (<= 16)")
    return raw


class Paths:
    """Converters for paths, which are relative to the configuration file's directory."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir

    def path(self, raw: Any) -> Path:
        if not isinstance(raw, str) or not raw:
            raise Invalid("a file path")
        path = Path(raw).expanduser()
        return path if path.is_absolute() else self.base_dir / path

    def existing_file(self, raw: Any) -> Path:
        path = self.path(raw)
        if not path.is_file():
            raise Invalid(f"an existing file ({path} does not exist)")
        return path


# --------------------------------------------------------------------------- sections


def keys_of(cls: type, *derived: str) -> Tuple[str, ...]:
    """The YAML keys of a section: its dataclass's fields, less those derived from others."""
    return tuple(item.name for item in dataclasses.fields(cls) if item.name not in derived)


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
    return host if NAME_RE.match(host) else "siteagent"


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
    # the selected backend's files must exist now; the others may name files of another host
    used_file = paths.existing_file
    return BackendConfig(
        type=kind,
        swf=SwfOptions(
            trace=swf.get(
                "trace", None, optional(used_file if kind is BackendType.SWF else paths.path)
            ),
            speed=swf.get("speed", 1.0, positive_number),
            offset=swf.get("offset", 2 * 86400, non_negative_int),
        ),
        slurm=SlurmOptions(
            slurm_conf=slurm.get(
                "slurm_conf",
                None,
                optional(
                    used_file if kind in (BackendType.SLURM, BackendType.PYSLURM) else paths.path
                ),
            ),
            partition=slurm.get("partition", "", optional_name),
            unit=slurm.get("unit", CapacityUnit.CORE, choice(CapacityUnit)),
            flags=slurm.items("flags", slurm_flag),
            users=slurm.items("users", name),
            timeout=slurm.get("timeout", 30.0, seconds),
        ),
        pbs=PbsOptions(
            pbs_conf=pbs.get(
                "pbs_conf", None, optional(used_file if kind is BackendType.PBS else paths.path)
            ),
            queue=pbs.get("queue", "", optional_name),
            unit=pbs.get("unit", CapacityUnit.CORE, choice(CapacityUnit)),
            timeout=pbs.get("timeout", 30.0, seconds),
        ),
    )


def read_planner(section: Section) -> PlannerConfig:
    return PlannerConfig(
        policy=section.get("policy", Policy.CONSERVATIVE, choice(Policy)),
        poll_interval_s=section.get("poll_interval_s", 30.0, seconds),
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
        confirm_timeout_s=section.get("confirm_timeout_s", 120.0, seconds),
        name_prefix=section.get("name_prefix", "sa-", reservation_prefix),
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
    return ApiConfig(
        listen=section.get("listen", "127.0.0.1", listen_address),
        port=section.get("port", 8443, port),
        tls=TlsConfig(
            enabled=enabled,
            cert=cert or state_dir / "tls" / "server.crt",
            key=key or state_dir / "tls" / "server.key",
            self_signed=not (tls.has("cert") or tls.has("key")),
        ),
    )


def read_security(section: Section, paths: Paths, state_dir: Path) -> SecurityConfig:
    return SecurityConfig(
        authorized_clients=section.get(
            "authorized_clients", state_dir / "authorized_clients.yaml", paths.existing_file
        ),
        site_key=section.get("site_key", state_dir / "site.key", paths.path),
        signature_max_age_s=section.get("signature_max_age_s", 300, whole_seconds),
        nonce_cache_size=section.get("nonce_cache_size", 100_000, positive_int),
    )


def read_ledger(section: Section, paths: Paths, state_dir: Path) -> LedgerConfig:
    return LedgerConfig(
        path=section.get("path", state_dir / "ledger.sqlite3", paths.path),
        url=section.get("url", None, optional(ledger_url)),
        ca=section.get("ca", None, optional(paths.existing_file)),
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


# --------------------------------------------------------------------------- entry points


def parse(data: Any, source: Optional[Path] = None) -> Config:
    """Validate a loaded document (None: no file, all defaults); raise ConfigError."""
    reading = Reading()
    paths = Paths(source.parent if source else Path.cwd())
    root = Section(data, "", keys_of(Config, "source", "explicit"), reading)
    state_dir = root.get("state_dir", default_state_dir(), paths.path)
    config = Config(
        site=read_site(root.section("site", keys_of(SiteConfig))),
        backend=read_backend(root.section("backend", keys_of(BackendConfig)), paths),
        planner=read_planner(root.section("planner", keys_of(PlannerConfig))),
        pricing=read_pricing(root.section("pricing", keys_of(PricingConfig))),
        reservations=read_reservations(root.section("reservations", keys_of(ReservationsConfig))),
        api=read_api(root.section("api", keys_of(ApiConfig)), paths, state_dir),
        security=read_security(root.section("security", keys_of(SecurityConfig)), paths, state_dir),
        ledger=read_ledger(root.section("ledger", keys_of(LedgerConfig)), paths, state_dir),
        state_dir=state_dir,
        metrics=read_metrics(root.section("metrics", keys_of(MetricsConfig))),
        source=source,
        explicit=frozenset(reading.explicit),
    )
    if reading.problems:
        raise ConfigError(str(source) if source else "configuration", reading.problems)
    return config


def load(path: Optional[Path] = None) -> Config:
    """Read and validate ``path``; with None, the defaults (no file is needed to run)."""
    if path is None:
        return parse(None)
    try:
        with open(path, encoding="utf-8") as stream:
            data = yaml.safe_load(stream)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        reason = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(str(path), [Problem("", f"{where}not valid YAML ({reason})")]) from None
    except UnicodeDecodeError:
        raise ConfigError(str(path), [Problem("", "not a UTF-8 text file")]) from None
    except OSError as exc:
        raise ConfigError(str(path), [Problem("", f"cannot read it ({exc.strerror})")]) from None
    return parse(data, path)


def flatten(config: Config) -> List[Tuple[str, Any]]:
    """The effective settings as (dotted key, value) pairs, in file order."""
    rows: List[Tuple[str, Any]] = []
    _flatten(config, "", rows)
    return [(key, value) for key, value in rows if key not in ("source", "explicit")]


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
