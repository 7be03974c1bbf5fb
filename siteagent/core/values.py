"""Value types shared by the planner, the backends, the simulator and the API.

Units everywhere: times are integer seconds since the Unix epoch (UTC), durations are integer
seconds, capacity is counted in the snapshot's unit (cores, or whole nodes for partitions that
allocate whole nodes). Backends translate their batch system's view into these types and
nothing else crosses the boundary, so the core never sees a Slurm or PBS string.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Optional, Tuple

from siteagent.core.money import cost

#: A year of seconds: stands in for "no time limit" so that unlimited jobs still end somewhere
#: in the plan (Slurm stores UNLIMITED reservations as 365 days for the same reason).
UNLIMITED_S = 365 * 86400


class CapacityUnit(str, enum.Enum):
    """What one unit of capacity is: a core, or a whole node for node-exclusive partitions."""

    CORE = "core"
    NODE = "node"


class Placement(str, enum.Enum):
    """How the batch system puts work on its nodes, which the planner then follows.

    POOLED: any free unit will do (the replay): capacity is one count. SLURM: each job on
    particular nodes as Slurm's select/cons_tres with the backfill scheduler chooses them
    (:mod:`siteagent.core.nodes`); the snapshot then carries its nodes, their weights, and the
    cores every running job and reservation holds on each. PBS: reservations on vnodes with
    CPUs free all through their window, as pbs_sched confirms them (docs/pbs.md §11.5); the
    queue is planned pooled.
    """

    POOLED = "pooled"
    SLURM = "slurm"
    PBS = "pbs"


@dataclass(frozen=True)
class Backfill:
    """The parameters of Slurm's backfill pass the node-aware plan follows (seconds):
    ``bf_resolution``, ``bf_window``, and ``KillWait`` (the grace after a time limit)."""

    resolution: int = 60
    window: int = 86400
    kill_wait: int = 30


#: Cores held on each node (name, cores), in the batch system's node order.
Allocation = Tuple[Tuple[str, int], ...]


class Source(str, enum.Enum):
    """Where a pending job's planned start came from: the batch system's own plan or ours."""

    BATCH = "batch"
    PREDICTED = "predicted"


@dataclass(frozen=True)
class Job:
    """A job as the planner needs it.

    ``limit`` is the requested wall time (the estimate the scheduler plans with). A running job
    has ``start``; a pending one has ``start is None``. ``expected_start`` is the batch system's
    own prediction for a pending job, when it published one (Slurm's backfill does).
    ``eligible`` is False for jobs that cannot start whatever the capacity (held, waiting on a
    dependency); they are reported but not planned. ``not_before`` is the earliest start the
    user asked for (Slurm ``--begin``, PBS ``-a``). ``reservation`` names the reservation the
    job runs in or waits for: its units are that reservation's, not the open machine's.
    ``exclusive`` asks for whole nodes; ``nodes`` is the least node count (the count of a
    running job), ``max_nodes`` the most (0: any). ``allocation`` is where a running job runs,
    when the batch system says (the cores it holds on each node). ``priority`` is the batch
    system's (higher first), for ordering queues of different partitions together.
    ``absolute_priority`` is its level among absolute priorities (1 the lowest; 0: none known,
    and a bid never counts on suspending it), where the batch system suspends lower levels for
    higher ones (docs/design.md §4.6): the simulator's preemptive tasks, Slurm's QoS under
    ``PreemptType=preempt/qos``.
    """

    id: str
    cores: int
    submit: int
    limit: int
    start: Optional[int] = None
    nodes: int = 0
    user: str = ""
    account: str = ""
    partition: str = ""
    expected_start: Optional[int] = None
    eligible: bool = True
    not_before: Optional[int] = None
    reservation: str = ""
    exclusive: bool = False
    max_nodes: int = 0
    allocation: Allocation = ()
    priority: int = 0
    absolute_priority: int = 0

    @property
    def running(self) -> bool:
        return self.start is not None

    def demand(self, unit: CapacityUnit) -> int:
        """Capacity this job takes, in the snapshot's unit."""
        if unit is CapacityUnit.NODE:
            return max(1, self.nodes)
        return self.cores


@dataclass(frozen=True)
class NodeState:
    """One compute node: total and allocated cores, whether new work may use it, and its
    scheduling weight (Slurm fills lower weights first)."""

    name: str
    cores: int
    alloc_cores: int = 0
    state: str = "idle"
    usable: bool = True
    memory_mb: int = 0
    partitions: Tuple[str, ...] = ()
    reason: str = ""
    weight: int = 1


@dataclass(frozen=True)
class BatchReservation:
    """A reservation as the batch system reports it (ours or anybody's): it holds capacity.

    ``node_names`` are the nodes it is on, where the batch system lists them; ``allocation``
    the cores it holds on each, where the batch system says or it can be told (whole nodes,
    one node); empty when only the total is known.
    """

    name: str
    start: int
    end: int
    cores: int
    nodes: int = 0
    node_list: str = ""
    users: Tuple[str, ...] = ()
    accounts: Tuple[str, ...] = ()
    partition: str = ""
    flags: Tuple[str, ...] = ()
    state: str = ""
    node_names: Tuple[str, ...] = ()
    allocation: Allocation = ()

    def demand(self, unit: CapacityUnit) -> int:
        if unit is CapacityUnit.NODE:
            return max(1, self.nodes)
        return self.cores


@dataclass(frozen=True)
class Neighbours:
    """Partitions sharing nodes with the one a snapshot is of: their ``nodes`` outside it, the
    jobs ``running`` there only, and their ``pending`` jobs (in priority order)."""

    nodes: Tuple[NodeState, ...] = ()
    running: Tuple[Job, ...] = ()
    pending: Tuple[Job, ...] = ()


@dataclass(frozen=True)
class ClusterSnapshot:
    """Everything the planner needs to know about a cluster at one instant.

    ``pending`` is in the batch system's priority order: the planner lays jobs out in this order.
    ``capacity`` is the usable capacity (down and drained nodes excluded) in ``unit``.
    ``placement`` says how the batch system puts jobs on ``nodes`` (in its node order), and
    ``backfill`` how its backfill pass plans. ``neighbours`` is what other partitions sharing
    some of ``nodes`` do: a node-aware plan places their jobs too, but they are not this
    partition's capacity or queue. ``end_margin`` is how many seconds past its end a running
    job still keeps a new reservation off its units (Slurm: 1, since it refuses a core
    reservation starting at the very second a job's limit ends; docs/slurm.md §6.1).
    """

    now: int
    capacity: int
    running: Tuple[Job, ...] = ()
    pending: Tuple[Job, ...] = ()
    reservations: Tuple[BatchReservation, ...] = ()
    nodes: Tuple[NodeState, ...] = ()
    unit: CapacityUnit = CapacityUnit.CORE
    cores_per_node: int = 1
    backend: str = ""
    extra: dict = field(default_factory=dict, compare=False)  # type: ignore[type-arg]
    placement: Placement = Placement.POOLED
    backfill: Backfill = Backfill()
    neighbours: Neighbours = Neighbours()
    end_margin: int = 0

    def demand(self, job: Job) -> int:
        return job.demand(self.unit)


@dataclass(frozen=True)
class ReservationSpec:
    """What the agent asks a batch system to reserve: ``size`` units for [start, start+duration).

    ``name`` carries the agent's prefix so that reconciliation can tell its reservations apart
    from everybody else's. ``users``/``accounts`` are the scheduler identities the buyer maps to.
    ``allocation`` names the nodes (and cores on each) the agent's plan chose, where the batch
    system places work on particular nodes; empty: the batch system chooses.
    ``over_running`` asks for it over running jobs too (Slurm's ``IGNORE_JOBS``): a won English
    auction's job that the batch system's preemption makes room for (docs/design.md §4.6).
    """

    name: str
    start: int
    duration: int
    size: int
    unit: CapacityUnit = CapacityUnit.CORE
    users: Tuple[str, ...] = ()
    accounts: Tuple[str, ...] = ()
    partition: str = ""
    allocation: Allocation = ()
    over_running: bool = False

    @property
    def end(self) -> int:
        return self.start + self.duration


@dataclass(frozen=True)
class Request:
    """A request for quotes (the marketplace paper's RFQL): what a buyer needs, and limits.

    ``cores`` for ``duration`` seconds, starting no earlier than ``earliest`` and ending by
    ``deadline`` (epoch seconds). Optional fields mean "don't care"; a present field the site
    cannot satisfy makes it refuse. ``max_price`` is per core-hour. ``round`` counts the
    reverse auction's rounds (1 = first call). ``best_price`` is the best price so far, which
    a site's load-based pricing undercuts in later rounds.
    """

    cores: int
    duration: int
    earliest: Optional[int] = None
    deadline: Optional[int] = None
    max_price: Optional[Decimal] = None
    nodes: Optional[int] = None
    cores_per_node: Optional[int] = None
    memory_per_core_mb: Optional[int] = None
    architecture: Optional[str] = None
    os: Optional[str] = None
    cpu_speed_mhz: Optional[int] = None
    disk_gb: Optional[int] = None
    round: int = 1
    best_price: Optional[Decimal] = None


@dataclass(frozen=True)
class Offer:
    """A priced alternative a site proposes for a request, valid until ``expires``, to the
    ``client`` that asked (the only one that may accept it; "" for anyone).

    Cost is ``size`` x hours x ``unit_price`` + ``fee`` (the thesis' n·d·c + f), in the
    site's virtual currency; ``fee`` is the harm done to queued jobs (0 for a free slot).
    """

    id: str
    request: Request
    start: int
    duration: int
    size: int
    unit_price: Decimal
    fee: Decimal
    expires: int
    site: str = ""
    client: str = ""

    @property
    def end(self) -> int:
        return self.start + self.duration

    @property
    def total(self) -> Decimal:
        return cost(self.size, self.duration, self.unit_price, self.fee)


@dataclass(frozen=True)
class Slot:
    """An advertised hole ``<s, n, d, c, f, b, e>`` (Singh, thesis ch. 3).

    ``cores`` units free from ``start`` for ``duration`` seconds, at ``unit_price`` per
    core-hour plus a fixed ``fee``. ``divisible``: a part may be taken; ``extensible``: it may
    be used past its end (it is free up to the horizon).
    """

    start: int
    duration: int
    cores: int
    unit_price: Decimal
    fee: Decimal
    divisible: bool
    extensible: bool

    @property
    def end(self) -> int:
        return self.start + self.duration
