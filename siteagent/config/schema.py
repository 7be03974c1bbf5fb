"""The configuration's schema: frozen dataclasses whose field names are the YAML keys.

Defaults live here, next to the key they belong to, so that the file, ``siteagent
check-config`` and the code agree on them. :mod:`siteagent.config.loading` fills them from a
file.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import FrozenSet, Optional, Tuple, Union

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
    """The replay backend: ``trace`` (None: the bundled SDSC-SP2 slice), replay speed, how far
    after the trace's first submit to start (seconds), so that the queue has built up, the
    simulated cluster's size (None: the trace header's MaxProcs), and the wall-clock time the
    replay is at its offset (None: when the cluster is first created)."""

    trace: Optional[Path] = None
    speed: float = DEFAULT_REPLAY_SPEED
    offset: int = DEFAULT_REPLAY_OFFSET_S
    cores: Optional[int] = None
    origin: Optional[float] = None


@dataclass(frozen=True)
class SlurmOptions:
    """Slurm (``slurm`` and ``pyslurm`` backends): ``SLURM_CONF``, the one partition served,
    capacity unit, flags put on every reservation, the users a reservation is made for when
    its buyer maps to none (the administrator's commands without ``--user``), the command
    timeout in seconds, each QoS's absolute priority where Slurm preempts by QoS, and the
    words put before every command (``[ssh, ctl]``: Slurm's clients run elsewhere;
    docs/slurm.md §11)."""

    slurm_conf: Optional[Path] = None
    partition: str = ""
    unit: CapacityUnit = CapacityUnit.CORE
    flags: Tuple[str, ...] = ()
    users: Tuple[str, ...] = ()
    timeout: float = DEFAULT_COMMAND_TIMEOUT_S
    qos_levels: Tuple[Tuple[str, int], ...] = ()
    command_prefix: Tuple[str, ...] = ()


@dataclass(frozen=True)
class PbsOptions:
    """PBS: ``PBS_CONF_FILE``, the execution queue served, capacity unit, command timeout (s)."""

    pbs_conf: Optional[Path] = None
    queue: str = ""
    unit: CapacityUnit = CapacityUnit.CORE
    timeout: float = DEFAULT_COMMAND_TIMEOUT_S


@dataclass(frozen=True)
class BackendConfig:
    """The batch system in use and every backend's options (only ``type``'s are used)."""

    type: BackendType = BackendType.SWF
    swf: SwfOptions = SwfOptions()
    slurm: SlurmOptions = SlurmOptions()
    pbs: PbsOptions = PbsOptions()


@dataclass(frozen=True)
class PlannerConfig:
    """The schedule predictor: backfilling policy, how often the cluster is polled, and how the
    batch system preempts running work for jobs of higher absolute priority (docs/design.md
    §4.6)."""

    policy: Policy = Policy.CONSERVATIVE
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S
    preemption: Preemption = Preemption.NONE


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
    confirmed reservation cancelled costs p x its fee)."""

    policy: PricingPolicy = PricingPolicy.FLAT
    flat: FlatPricing = FlatPricing()
    load: LoadPricing = LoadPricing()
    externality: ExternalityPricing = ExternalityPricing()
    cancellation_penalty: Decimal = DEFAULT_PENALTY_FACTOR


@dataclass(frozen=True)
class ReservationsConfig:
    """How long a tentative reservation waits for its confirm, and the name prefix that lets
    reconciliation tell the agent's reservations from everybody else's."""

    confirm_timeout_s: float = DEFAULT_CONFIRM_TIMEOUT_S
    name_prefix: str = DEFAULT_RESERVATION_PREFIX


@dataclass(frozen=True)
class AuctionsConfig:
    """The site's part in English auctions (docs/design.md §4.6): how fast a job's input
    reaches it from another site (bytes per second), the longest auction it takes part in
    (seconds), how many auctions one client may take it into at once and how much of the
    machine its open bids may hold together (hours of the whole machine), how long after an
    auction closes its winner has to accept (seconds: its bid's capacity is held until then),
    and what it bids with (``mode``)."""

    transfer_rate: int = DEFAULT_TRANSFER_RATE
    max_length_s: int = DEFAULT_MAX_AUCTION_S
    max_open_per_client: int = DEFAULT_MAX_OPEN_BIDS_PER_CLIENT
    max_held_machine_hours: float = DEFAULT_MAX_HELD_MACHINE_HOURS
    accept_window_s: int = DEFAULT_AUCTION_ACCEPT_WINDOW_S
    mode: BidMode = BidMode.FUTURE


@dataclass(frozen=True)
class TlsConfig:
    """TLS for the API. ``self_signed`` (derived, not a key): cert and key were not given, so
    the agent makes a self-signed pair for localhost at these paths on first start."""

    enabled: bool
    cert: Path
    key: Path
    self_signed: bool


@dataclass(frozen=True)
class RateLimit:
    """A token bucket: ``per_second`` requests on average, ``burst`` at once."""

    per_second: float
    burst: int


@dataclass(frozen=True)
class RateLimits:
    """Per client: quotes, the reservation requests (accept, confirm, cancel), and bids."""

    quotes: RateLimit = RateLimit(DEFAULT_QUOTES_PER_S, DEFAULT_QUOTES_BURST)
    reservations: RateLimit = RateLimit(DEFAULT_RESERVATIONS_PER_S, DEFAULT_RESERVATIONS_BURST)
    bids: RateLimit = RateLimit(DEFAULT_BIDS_PER_S, DEFAULT_BIDS_BURST)


@dataclass(frozen=True)
class ApiConfig:
    """Where the HTTPS API listens (localhost by default: exposing it is a decision), the
    names it answers to (``public_names``: the ``host[:port]`` authorities buyers sign for; a
    signature made for another is refused), the largest request it reads and how long it
    waits for one, the connections one address may hold, and what one client may ask of
    it."""

    listen: str
    port: int
    tls: TlsConfig
    public_names: Tuple[str, ...] = ()
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    max_connections_per_address: int = DEFAULT_MAX_CONNECTIONS_PER_ADDRESS
    rate_limits: RateLimits = RateLimits()
    max_live_offers_per_client: int = DEFAULT_MAX_LIVE_OFFERS_PER_CLIENT


@dataclass(frozen=True)
class SecurityConfig:
    """Who may change state, and the replay window.

    ``authorized_clients`` maps key ids to public keys and scheduler users (missing file: no
    client may change anything). ``signature_max_age_s`` is how old a request signature may be;
    ``nonces_per_client`` bounds the nonces remembered of each client within that window (one
    client cannot crowd out another's). ``site_key`` is the agent's own Ed25519 key that
    countersigns receipts (made on first start if missing).
    """

    authorized_clients: Path
    site_key: Path
    signature_max_age_s: int = 300
    nonces_per_client: int = DEFAULT_NONCES_PER_CLIENT


#: What each authorized client may owe the agent's embedded bank (see LedgerConfig): enough
#: to try the agent out of the box (an hour of the whole bundled cluster at the default price
#: is 128.00, plus its fee), a limit all the same.
DEFAULT_CREDIT = Decimal("1000.00")


@dataclass(frozen=True)
class LedgerConfig:
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

    path: Path
    database: Optional[str] = None
    url: Optional[str] = None
    ca: Optional[Path] = None
    default_credit: Decimal = DEFAULT_CREDIT
    participants: Optional[Path] = None
    listen: str = "127.0.0.1"
    port: int = 8444

    @property
    def location(self) -> Union[str, Path]:
        """The bank's database: the PostgreSQL URL if one is given, else the SQLite file."""
        return self.database if self.database is not None else self.path


@dataclass(frozen=True)
class ReferenceRequest:
    """A request shape whose quote the metrics follow, quoted as a buyer's request for ``cores``
    cores (whole nodes on a partition that allocates them) for ``duration_s`` seconds."""

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
class NotificationsConfig:
    """The local socket on which the batch system's reservation programs (contrib/slurm's
    ResvProlog and ResvEpilog, contrib/pbs's hook) tell the agent that one of its reservations
    started or ended, so that it moves at once rather than at the next poll. ``socket`` None:
    no socket, the polls alone notice. ``users``: who may notify besides root (Slurm's
    SlurmUser); the kernel says who connected, so nobody else can."""

    socket: Optional[Path] = None
    users: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Config:
    """The whole effective configuration. ``source`` is the file read (None: defaults);
    ``explicit`` holds the dotted paths the file set, so a listing can tell them from
    defaults; ``deprecations`` says which old keys the file used and what replaces them (they
    still work)."""

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
    auctions: AuctionsConfig = AuctionsConfig()
    notifications: NotificationsConfig = NotificationsConfig()
    source: Optional[Path] = None
    explicit: FrozenSet[str] = frozenset()
    deprecations: Tuple[str, ...] = ()
