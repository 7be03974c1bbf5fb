"""The configuration's schema: one pydantic model per section, whose fields are the YAML keys.

Each key is declared once, here: its type, its default and its converter (see
:mod:`siteagent.config.fields`), so that the file, ``siteagent check-config`` and the code agree
on it. Defaults that depend on the host or the state directory are given by ``complete``.
"""

from __future__ import annotations

import enum
import os
import socket
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar, Dict, FrozenSet, List, Mapping, Optional, Tuple, Union

from pydantic import Field, ValidationError, ValidatorFunctionWrapHandler, WrapValidator
from pydantic_core import InitErrorDetails, PydanticCustomError
from typing_extensions import Annotated

from siteagent.config import reading as r
from siteagent.config.fields import Section, check, expected, items, path, problem, refuse
from siteagent.config.reading import Invalid
from siteagent.core import names
from siteagent.core.defaults import (
    DEFAULT_AUCTION_ACCEPT_WINDOW_S,
    DEFAULT_BIDS_BURST,
    DEFAULT_BIDS_PER_S,
    DEFAULT_COMMAND_TIMEOUT_S,
    DEFAULT_CONFIRM_TIMEOUT_S,
    DEFAULT_MAX_AUCTION_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_HELD_MACHINE_HOURS,
    DEFAULT_MAX_LIVE_OFFERS_PER_CLIENT,
    DEFAULT_MAX_OPEN_BIDS_PER_CLIENT,
    DEFAULT_NONCES_PER_CLIENT,
    DEFAULT_PENALTY_FACTOR,
    DEFAULT_POLL_INTERVAL_S,
    DEFAULT_QUOTES_BURST,
    DEFAULT_QUOTES_PER_S,
    DEFAULT_REPLAY_OFFSET_S,
    DEFAULT_REPLAY_SPEED,
    DEFAULT_REQUEST_TIMEOUT_S,
    DEFAULT_RESERVATION_PREFIX,
    DEFAULT_RESERVATIONS_BURST,
    DEFAULT_RESERVATIONS_PER_S,
    DEFAULT_TRANSFER_RATE,
)
from siteagent.core.engines import Policy
from siteagent.core.preemption import Preemption
from siteagent.core.values import CapacityUnit


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


class BidMode(str, enum.Enum):
    """What a site bids with in English auctions (docs/design.md §4.6): ``future``, the best
    window within one walltime, future ones included (the project's); ``now``, only capacity
    free now or held by running jobs of lower absolute priority, which the job would suspend
    (Baranov et al.'s sites, for a batch system that preempts)."""

    FUTURE = "future"
    NOW = "now"


# The value types keys are declared with: each is its converter in pydantic's form.
Text = Annotated[str, check(r.text)]
Name = Annotated[str, check(r.name)]
OptionalName = Annotated[str, check(r.optional_name)]
PositiveInt = Annotated[int, check(r.positive_int)]
OptionalPositiveInt = Annotated[Optional[int], check(r.optional(r.positive_int))]
PositiveNumber = Annotated[float, check(r.positive_number)]
Seconds = Annotated[float, check(r.seconds)]
WholeSeconds = Annotated[int, check(r.whole_seconds)]
Bytes = Annotated[int, check(r.byte_count)]
Port = Annotated[int, check(r.port)]
Boolean = Annotated[bool, check(r.boolean)]
Price = Annotated[Decimal, check(r.price)]
Amount = Annotated[Decimal, check(r.amount)]
ListenAddress = Annotated[str, check(r.listen_address)]
Users = Annotated[Tuple[str, ...], items(r.scheduler_user)]
Unit = Annotated[CapacityUnit, check(r.choice(CapacityUnit))]
Engine = Annotated[Policy, check(r.choice(Policy))]
FilePath = Annotated[Path, path()]
ExistingFile = Annotated[Path, path("file")]
OptionalFile = Annotated[Optional[Path], path("file", optional=True)]


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
    found: List[str] = []
    for host in hosts:
        name = r.authority(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
        if name not in found:
            found.append(name)
    return tuple(found)


def converted(data: Mapping[str, Any], key: str, convert: Any, default: Any) -> Any:
    """The file's value of ``key`` converted, or ``default`` if it is absent or wrong (its
    problem is reported by the key's own check): what relations between keys and defaults
    derived from other keys are computed from."""
    try:
        return convert(data[key]) if key in data else default
    except Invalid:
        return default


class SiteConfig(Section):
    """What a buyer sees of the site: its name and the static RFQL attributes.

    An attribute left out (None, or no partitions) is not advertised: a request that names it
    cannot be satisfied, because the site cannot promise what it does not know.
    """

    name: Name = Field(default_factory=default_site_name)
    description: Text = ""
    architecture: Annotated[Optional[str], check(r.optional(r.text))] = None
    os: Annotated[Optional[str], check(r.optional(r.text))] = None
    cpu_speed_mhz: OptionalPositiveInt = None
    memory_per_core_mb: OptionalPositiveInt = None
    cores_per_node: OptionalPositiveInt = None
    partitions: Annotated[Tuple[str, ...], items(r.name)] = ()


class SwfOptions(Section):
    """The replay backend: ``trace`` (None: the bundled SDSC-SP2 slice), replay speed, how far
    after the trace's first submit to start (seconds), so that the queue has built up, the
    simulated cluster's size (None: the trace header's MaxProcs), and the wall-clock time the
    replay is at its offset (None: when the cluster is first created)."""

    trace: Annotated[Optional[Path], path(optional=True, exists_for=("swf",))] = None
    speed: PositiveNumber = DEFAULT_REPLAY_SPEED
    offset: Annotated[int, check(r.non_negative_int)] = DEFAULT_REPLAY_OFFSET_S
    cores: OptionalPositiveInt = None
    origin: Annotated[Optional[float], check(r.optional(r.positive_number))] = None


class SlurmOptions(Section):
    """Slurm (``slurm`` and ``pyslurm`` backends): ``SLURM_CONF``, the one partition served,
    capacity unit, flags put on every reservation, the users a reservation is made for when
    its buyer maps to none (the administrator's commands without ``--user``), the command
    timeout in seconds, each QoS's absolute priority where Slurm preempts by QoS, and the
    words put before every command (``[ssh, ctl]``: Slurm's clients run elsewhere;
    docs/slurm.md §11)."""

    #: whether slurm_conf must exist here depends on it
    checked_first = ("command_prefix",)

    slurm_conf: Annotated[Optional[Path], path(optional=True, exists_for=("slurm", "pyslurm"))] = (
        None
    )
    partition: OptionalName = ""
    unit: Unit = CapacityUnit.CORE
    flags: Annotated[Tuple[str, ...], items(r.slurm_flag)] = ()
    users: Users = ()
    timeout: Seconds = DEFAULT_COMMAND_TIMEOUT_S
    qos_levels: Annotated[Tuple[Tuple[str, int], ...], check(r.qos_levels)] = ()
    command_prefix: Annotated[Tuple[str, ...], items(r.command_word)] = ()


class PbsOptions(Section):
    """PBS: ``PBS_CONF_FILE``, the execution queue served, capacity unit, command timeout (s)."""

    pbs_conf: Annotated[Optional[Path], path(optional=True, exists_for=("pbs",))] = None
    queue: OptionalName = ""
    unit: Unit = CapacityUnit.CORE
    timeout: Seconds = DEFAULT_COMMAND_TIMEOUT_S


class BackendConfig(Section):
    """The batch system in use and every backend's options (only ``type``'s are used)."""

    type: Annotated[BackendType, check(r.choice(BackendType))] = BackendType.SWF
    swf: SwfOptions = SwfOptions()
    slurm: SlurmOptions = SlurmOptions()
    pbs: PbsOptions = PbsOptions()

    @classmethod
    def complete(cls, fields: Mapping[str, Any], context: Dict[str, Any]) -> Dict[str, Any]:
        """Tell the path checks which backend's files must exist here: the selected one's,
        unless its commands run on another host (``command_prefix``)."""
        kind = converted(fields, "type", r.choice(BackendType), BackendType.SWF)
        slurm = fields.get("slurm")
        prefix = slurm.get("command_prefix") if isinstance(slurm, Mapping) else None
        context["backend"] = kind.value
        slurm_kinds = (BackendType.SLURM, BackendType.PYSLURM)
        context["remote"] = kind in slurm_kinds and bool(isinstance(prefix, list) and prefix)
        return {}


class PlannerConfig(Section):
    """The schedule predictor: backfilling policy, how often the cluster is polled, and how the
    batch system preempts running work for jobs of higher absolute priority (docs/design.md
    §4.6)."""

    policy: Engine = Policy.CONSERVATIVE
    poll_interval_s: Seconds = DEFAULT_POLL_INTERVAL_S
    preemption: Annotated[Preemption, check(r.choice(Preemption))] = Preemption.NONE


class FlatPricing(Section):
    """A fixed price per core-hour (the thesis' default c = 1)."""

    price: Price = Decimal("1")


class LoadPricing(Section):
    """The marketplace paper's load-based auction price: start and minimum price per
    core-hour, and the number of auction rounds the decrement is spread over."""

    start_price: Price = Decimal("2")
    min_price: Price = Decimal("0.5")
    rounds: PositiveInt = 3

    @classmethod
    def relations(cls, data: Mapping[str, Any]) -> List[InitErrorDetails]:
        start = converted(data, "start_price", r.price, cls.default("start_price"))
        least = converted(data, "min_price", r.price, cls.default("min_price"))
        if least <= start:
            return []
        message = f"expected at most start_price ({start}), got {least}"
        return [problem(("min_price",), message, data.get("min_price"))]


class ExternalityPricing(Section):
    """The thesis' fixed fee for the delay a reservation imposes on queued jobs: ``rate`` per
    core-hour of delay, predicted under backfilling ``policy`` (the pricing's scheduling
    policy, which the load-based price's load is computed under too)."""

    enabled: Boolean = True
    policy: Engine = Policy.CONSERVATIVE
    rate: Price = Decimal("1")


class PricingConfig(Section):
    """Unit-price policy, the externality fee, and the cancellation penalty factor p (a
    confirmed reservation cancelled costs p x its fee)."""

    policy: Annotated[PricingPolicy, check(r.choice(PricingPolicy))] = PricingPolicy.FLAT
    flat: FlatPricing = FlatPricing()
    load: LoadPricing = LoadPricing()
    externality: ExternalityPricing = ExternalityPricing()
    cancellation_penalty: Annotated[Decimal, check(r.factor)] = DEFAULT_PENALTY_FACTOR


class ReservationsConfig(Section):
    """How long a tentative reservation waits for its confirm, and the name prefix that lets
    reconciliation tell the agent's reservations from everybody else's."""

    confirm_timeout_s: Seconds = DEFAULT_CONFIRM_TIMEOUT_S
    name_prefix: Annotated[str, check(r.reservation_prefix)] = DEFAULT_RESERVATION_PREFIX


class AuctionsConfig(Section):
    """The site's part in English auctions (docs/design.md §4.6): how fast a job's input
    reaches it from another site (bytes per second), the longest auction it takes part in
    (seconds), how many auctions one client may take it into at once and how much of the
    machine its open bids may hold together (hours of the whole machine), how long after an
    auction closes its winner has to accept (seconds: its bid's capacity is held until then),
    and what it bids with (``mode``)."""

    transfer_rate: PositiveInt = DEFAULT_TRANSFER_RATE
    max_length_s: WholeSeconds = DEFAULT_MAX_AUCTION_S
    max_open_per_client: PositiveInt = DEFAULT_MAX_OPEN_BIDS_PER_CLIENT
    max_held_machine_hours: PositiveNumber = DEFAULT_MAX_HELD_MACHINE_HOURS
    accept_window_s: WholeSeconds = DEFAULT_AUCTION_ACCEPT_WINDOW_S
    mode: Annotated[BidMode, check(r.choice(BidMode))] = BidMode.FUTURE


class TlsConfig(Section):
    """TLS for the API. ``self_signed`` (derived, not a key): cert and key were not given, so
    the agent makes a self-signed pair for localhost at these paths (in the state directory)
    on first start."""

    derived = ("self_signed",)

    enabled: Boolean = True
    cert: ExistingFile
    key: ExistingFile
    self_signed: bool

    @classmethod
    def complete(cls, fields: Mapping[str, Any], context: Dict[str, Any]) -> Dict[str, Any]:
        tls = Path(context["state_dir"]) / "tls"
        given = "cert" in fields or "key" in fields
        out: Dict[str, Any] = {"self_signed": not given}
        out.update(
            {
                key: tls / name
                for key, name in (("cert", "server.crt"), ("key", "server.key"))
                if fields.get(key) is None  # null: the default, as absent
            }
        )
        return out

    @classmethod
    def relations(cls, data: Mapping[str, Any]) -> List[InitErrorDetails]:
        if ("cert" in data) == ("key" in data):
            return []
        given, missing = ("cert", "key") if "cert" in data else ("key", "cert")
        message = f"expected a file path: {given} and {missing} go together"
        return [problem((missing,), message, None)]


class RateLimit(Section):
    """A token bucket: ``per_second`` requests on average, ``burst`` at once."""

    per_second: PositiveNumber
    burst: PositiveInt


class RateLimits(Section):
    """Per client: quotes, the reservation requests (accept, confirm, cancel), and bids."""

    quotes: RateLimit = RateLimit(per_second=DEFAULT_QUOTES_PER_S, burst=DEFAULT_QUOTES_BURST)
    reservations: RateLimit = RateLimit(
        per_second=DEFAULT_RESERVATIONS_PER_S, burst=DEFAULT_RESERVATIONS_BURST
    )
    bids: RateLimit = RateLimit(per_second=DEFAULT_BIDS_PER_S, burst=DEFAULT_BIDS_BURST)

    @classmethod
    def complete(cls, fields: Mapping[str, Any], context: Dict[str, Any]) -> Dict[str, Any]:
        """A bucket's keys left out are its default's."""
        return {
            key: {**dict(cls.default(key)), **(value or {})}
            for key, value in fields.items()
            if isinstance(value, Mapping) or value is None
        }


class ApiConfig(Section):
    """Where the HTTPS API listens (localhost by default: exposing it is a decision), the
    names it answers to (``public_names``: the ``host[:port]`` authorities buyers sign for; a
    signature made for another is refused; none given: :func:`default_public_names`), the
    largest request it reads and how long it waits for one, the connections one address may
    hold, and what one client may ask of it."""

    listen: ListenAddress = "127.0.0.1"
    port: Port = 8443
    tls: TlsConfig
    public_names: Annotated[Tuple[str, ...], items(r.authority)] = ()
    max_header_bytes: Bytes = DEFAULT_MAX_HEADER_BYTES
    max_body_bytes: Bytes = DEFAULT_MAX_BODY_BYTES
    request_timeout_s: Seconds = DEFAULT_REQUEST_TIMEOUT_S
    max_connections_per_address: PositiveInt = DEFAULT_MAX_CONNECTIONS_PER_ADDRESS
    rate_limits: RateLimits = RateLimits()
    max_live_offers_per_client: PositiveInt = DEFAULT_MAX_LIVE_OFFERS_PER_CLIENT

    @classmethod
    def complete(cls, fields: Mapping[str, Any], context: Dict[str, Any]) -> Dict[str, Any]:
        if fields.get("public_names", []) != []:
            return {}
        listen = converted(fields, "listen", r.listen_address, cls.default("listen"))
        port = converted(fields, "port", r.port, cls.default("port"))
        return {"public_names": default_public_names(listen, port)}


class SecurityConfig(Section):
    """Who may change state, and the replay window.

    ``authorized_clients`` maps key ids to public keys and scheduler users (missing file: no
    client may change anything). ``signature_max_age_s`` is how old a request signature may be;
    ``nonces_per_client`` bounds the nonces remembered of each client within that window (one
    client cannot crowd out another's). ``site_key`` is the agent's own Ed25519 key that
    countersigns receipts (made on first start if missing).
    """

    renamed: ClassVar[Dict[str, Tuple[str, str]]] = {
        "nonce_cache_size": (
            "nonces_per_client",
            "use nonces_per_client (the bound is now per client); its value is read as that",
        )
    }

    authorized_clients: ExistingFile
    site_key: FilePath
    signature_max_age_s: WholeSeconds = 300
    nonces_per_client: PositiveInt = DEFAULT_NONCES_PER_CLIENT

    @classmethod
    def complete(cls, fields: Mapping[str, Any], context: Dict[str, Any]) -> Dict[str, Any]:
        state_dir = Path(context["state_dir"])
        defaults = {
            "authorized_clients": state_dir / "authorized_clients.yaml",
            "site_key": state_dir / "site.key",
        }
        return {key: value for key, value in defaults.items() if key not in fields}


#: What each authorized client may owe the agent's embedded bank (see LedgerConfig): enough
#: to try the agent out of the box (an hour of the whole bundled cluster at the default price
#: is 128.00, plus its fee), a limit all the same.
DEFAULT_CREDIT = Decimal("1000.00")


class LedgerConfig(Section):
    """The bank: embedded SQLite at ``path`` unless ``url`` names a ledger service, whose
    certificate the agent checks against ``ca`` (default: the system's trusted CAs).

    ``default_credit`` is how far below zero each authorized client's balance may go in the
    embedded bank to pay for deals (a confirm it cannot pay is refused); a ledger service
    takes each client's credit from its participants file instead (0 unless given).

    ``siteagent ledger serve`` reads ``path`` too, listens on ``listen``:``port`` with the
    ``api.tls`` certificate, and opens accounts for the sites and clients of ``participants``.
    ``database``, a PostgreSQL URL, replaces the SQLite file at ``path``: the database that
    several bank processes share (docs/ledger.md).
    """

    path: FilePath
    database: Annotated[Optional[str], check(r.optional(r.postgres_url))] = None
    url: Annotated[Optional[str], check(r.optional(r.ledger_url))] = None
    ca: OptionalFile = None
    default_credit: Amount = DEFAULT_CREDIT
    participants: OptionalFile = None
    listen: ListenAddress = "127.0.0.1"
    port: Port = 8444

    @property
    def location(self) -> Union[str, Path]:
        """The bank's database: the PostgreSQL URL if one is given, else the SQLite file."""
        return self.database if self.database is not None else self.path

    @classmethod
    def complete(cls, fields: Mapping[str, Any], context: Dict[str, Any]) -> Dict[str, Any]:
        if "path" in fields:
            return {}
        return {"path": Path(context["state_dir"]) / "ledger.sqlite3"}


class ReferenceRequest(Section):
    """A request shape whose quote the metrics follow, quoted as a buyer's request for ``cores``
    cores (whole nodes on a partition that allocates them) for ``duration_s`` seconds."""

    name: Name
    cores: PositiveInt
    duration_s: WholeSeconds


def unique_names(raw: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """A list of reference requests, each named once (checked even when others are wrong)."""
    if isinstance(raw, tuple):
        return handler(raw)
    if not isinstance(raw, list):
        raise PydanticCustomError("config", expected(Invalid("a list"), raw))
    problems: List[InitErrorDetails] = []
    value = None
    try:
        value = handler(raw)
    except ValidationError as exc:
        problems += [
            problem(tuple(error["loc"]), str(error["msg"]), error.get("input"))
            for error in exc.errors()
        ]
    seen: List[str] = []
    for index, item in enumerate(raw):
        name = converted(item, "name", r.name, "") if isinstance(item, Mapping) else ""
        if name and name in seen:
            message = f'expected a unique name, got "{name}" twice'
            problems.append(problem((index, "name"), message, name))
        seen.append(name)
    if problems:
        raise refuse("reference_requests", sorted(problems, key=lambda item: item["loc"][0]))
    return value


#: Shapes quoted every cycle when the file names none: one core-hour, a small parallel job,
#: and a wide day-long one (refused, and reported so, on a site too small for it).
DEFAULT_REFERENCE_REQUESTS = (
    ReferenceRequest(name="one-core-hour", cores=1, duration_s=3600),
    ReferenceRequest(name="small", cores=16, duration_s=4 * 3600),
    ReferenceRequest(name="wide-day", cores=64, duration_s=24 * 3600),
)


#: How often the reference requests are quoted again: each quote with the externality fee is a
#: re-plan of the whole queue (a quarter second on a 10,000-job queue), too dear every cycle.
DEFAULT_REFERENCE_INTERVAL_S = 300.0


class MetricsConfig(Section):
    """What the Prometheus metrics quote, besides the cluster's own figures: the earliest start,
    fee and unit price of each reference request (a buyer's view of the site over time, for
    dashboards and alerts), at the first cycle and then every ``reference_interval_s``."""

    reference_requests: Annotated[Tuple[ReferenceRequest, ...], WrapValidator(unique_names)] = (
        DEFAULT_REFERENCE_REQUESTS
    )
    reference_interval_s: Seconds = DEFAULT_REFERENCE_INTERVAL_S

    @classmethod
    def complete(cls, fields: Mapping[str, Any], context: Dict[str, Any]) -> Dict[str, Any]:
        """``reference_requests: null`` is the default shapes (an empty list is none)."""
        if "reference_requests" in fields and fields["reference_requests"] is None:
            return {"reference_requests": DEFAULT_REFERENCE_REQUESTS}
        return {}


class NotificationsConfig(Section):
    """The local socket on which the batch system's reservation programs (contrib/slurm's
    ResvProlog and ResvEpilog, contrib/pbs's hook) tell the agent that one of its reservations
    started or ended, so that it moves at once rather than at the next poll. ``socket`` None:
    no socket, the polls alone notice. ``users``: who may notify besides root (Slurm's
    SlurmUser); the kernel says who connected, so nobody else can."""

    socket: Annotated[Optional[Path], path("socket", optional=True)] = None
    users: Users = ()


class Config(Section):
    """The whole effective configuration. ``source`` is the file read (None: defaults);
    ``explicit`` holds the dotted paths the file set, so a listing can tell them from
    defaults; ``deprecations`` says which old keys the file used and what replaces them (they
    still work). Those three are set by :func:`siteagent.config.loading.parse`, not keys."""

    derived = ("source", "explicit", "deprecations")

    site: SiteConfig = SiteConfig()
    backend: BackendConfig = BackendConfig()
    planner: PlannerConfig = PlannerConfig()
    pricing: PricingConfig = PricingConfig()
    reservations: ReservationsConfig = ReservationsConfig()
    api: ApiConfig
    security: SecurityConfig
    ledger: LedgerConfig
    state_dir: FilePath
    metrics: MetricsConfig = MetricsConfig()
    auctions: AuctionsConfig = AuctionsConfig()
    notifications: NotificationsConfig = NotificationsConfig()
    source: Optional[Path] = None
    explicit: FrozenSet[str] = frozenset()
    deprecations: Tuple[str, ...] = ()

    @classmethod
    def complete(cls, fields: Mapping[str, Any], context: Dict[str, Any]) -> Dict[str, Any]:
        return {} if "state_dir" in fields else {"state_dir": Path(context["state_dir"])}
