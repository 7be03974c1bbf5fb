"""The HTTP API's request and response bodies, and its errors, as pydantic models.

They are the published contract (``/v1/openapi.json``), shared by the agent, which answers
with them, and the client, which reads them. Request bounds are ones a client can read, and a
value outside them is refused as a 422 that names the field before any code of the agent runs;
they are generous for any real cluster and tight enough that no figure can overflow the
planner or the SQLite store (integers there are 64-bit). Money is always a decimal string
("12.30"), never a JSON number, so that no amount passes through a float.

The signed documents (deal, receipt, cancellation) are described here for the OpenAPI, but
their bytes are defined by :mod:`siteagent.protocol.documents`: their models allow extra keys
and leave absent fields out, so that what a buyer signs is exactly what the site built.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, Dict, List, Literal, Optional

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
    model_serializer,
)

from siteagent.core import money
from siteagent.core.values import Offer, Slot

#: The latest epoch second a request may name (year 2242): far beyond any plan's horizon.
MAX_TIME = 2**33
#: The longest walltime a request may ask for: a year, the planner's "unlimited".
MAX_WALLTIME_S = 366 * 86400
#: The widest request: more cores than any machine has.
MAX_CORES = 10**7
#: A price per core-hour in a request: bounded as every price is (:data:`money.PRICE`).
Price = Annotated[
    Decimal,
    Field(
        ge=0,
        max_digits=money.PRICE.max_digits,
        decimal_places=money.PRICE.places,
        allow_inf_nan=False,
    ),
]

OFFER_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
#: An auction's id, chosen by its auctioneer: the same characters as an offer's.
AUCTION_ID_PATTERN = OFFER_ID_PATTERN
#: A site's name, as sites are named in deals and in a buyer's sites file.
SITE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
#: The highest absolute priority a job may have (1 is the lowest).
MAX_PRIORITY = 100
#: The largest input a job may name: a petabyte.
MAX_INPUT_BYTES = 10**15
#: A bid's value, or the bid to beat: core-hours to the thousandth, either sign.
BidValue = Annotated[
    Decimal, Field(max_digits=money.INTEGER_DIGITS + 3, decimal_places=3, allow_inf_nan=False)
]


class Strict(BaseModel):
    """Unknown fields are refused (a misspelt RFQL field must not silently mean "don't
    care")."""

    model_config = ConfigDict(extra="forbid")


class QuoteRequest(Strict):
    """A request for quotes in the marketplace paper's RFQL. Absent fields mean "don't care";
    a present field the site cannot satisfy makes it refuse, saying which and why. Types are
    strict: an integer is a JSON integer (not ``true``, not ``"8"``), a price a decimal number
    or its string, ``alpha`` a number."""

    walltime: StrictInt = Field(
        ge=1, le=MAX_WALLTIME_S, description="seconds the reservation lasts"
    )
    cores: Optional[StrictInt] = Field(None, ge=1, le=MAX_CORES, description="total cores")
    nodes: Optional[StrictInt] = Field(
        None, ge=1, le=MAX_CORES, description="node count (with or instead of cores)"
    )
    cores_per_node: Optional[StrictInt] = Field(None, ge=1, le=MAX_CORES)
    max_price: Optional[Price] = Field(None, description="per core-hour")
    deadline: Optional[StrictInt] = Field(
        None, ge=0, le=MAX_TIME, description="latest end (epoch seconds)"
    )
    earliest_start: Optional[StrictInt] = Field(
        None,
        ge=0,
        le=MAX_TIME,
        description="earliest start (epoch seconds); offers start a minute after the quote at "
        "the soonest, and can be accepted until their window starts",
    )
    memory_per_core_mb: Optional[StrictInt] = Field(None, ge=1, le=2**31)
    architecture: Optional[StrictStr] = Field(None, min_length=1, max_length=64)
    os: Optional[StrictStr] = Field(None, min_length=1, max_length=64)
    cpu_speed_mhz: Optional[StrictInt] = Field(None, ge=1, le=10**6)
    disk_gb: Optional[StrictInt] = Field(None, ge=1, le=10**9)
    round: StrictInt = Field(1, ge=1, le=1000, description="reverse-auction round (1 = first call)")
    best_price: Optional[Price] = Field(None, description="best price so far")
    alpha: StrictFloat = Field(
        0.5, ge=0.0, le=1.0, description="which offer to mark chosen: 0 earliest, 1 cheapest"
    )
    limit: StrictInt = Field(20, ge=1, le=100, description="at most this many offers")


class AcceptRequest(Strict):
    """Accept one offer: the site creates a tentative reservation for it."""

    offer_id: str = Field(pattern=OFFER_ID_PATTERN)


#: Parts one batch may hold (docs/batches.md); a site says so in ``GET /v1/info``.
MAX_BATCH_PARTS = 100
#: Offers one batch quote may withdraw (the most a client may hold by default).
MAX_WITHDRAWN = 2000

OfferId = Annotated[str, Field(pattern=OFFER_ID_PATTERN)]


class BatchQuoteRequest(Strict):
    """Several requests for quotes in one call (docs/batches.md), each answered as
    ``POST /v1/quotes`` would; ``withdraw`` gives up offers quoted to this buyer before."""

    requests: List[QuoteRequest] = Field(min_length=1, max_length=MAX_BATCH_PARTS)
    withdraw: List[OfferId] = Field(
        default_factory=list,
        max_length=MAX_WITHDRAWN,
        description="offers of this buyer's that lapse at once, before the quotes",
    )


class BatchAcceptRequest(Strict):
    """Accept several offers, all or nothing (docs/batches.md)."""

    offer_ids: List[OfferId] = Field(min_length=1, max_length=MAX_BATCH_PARTS)

    @field_validator("offer_ids")
    @classmethod
    def _distinct(cls, offer_ids: List[str]) -> List[str]:
        if len(set(offer_ids)) != len(offer_ids):
            raise ValueError("an offer may be accepted once in a batch")
        return offer_ids


class ConfirmPart(Strict):
    """One reservation of a batch confirm and the receipt id (SHA-256 of its deal's
    canonical JSON) the buyer signed for it."""

    reservation_id: str = Field(pattern=OFFER_ID_PATTERN)
    receipt_id: str = Field(pattern=r"^[0-9a-f]{64}$")


class BatchConfirmRequest(Strict):
    """Confirm several reservations: the buyer's one Ed25519 signature over the RFC 8785
    canonical JSON of ``{"receipt_ids": [...]}``, the parts' receipt ids in order."""

    parts: List[ConfirmPart] = Field(min_length=1, max_length=MAX_BATCH_PARTS)
    signature: Dict[str, Any]

    @field_validator("parts")
    @classmethod
    def _distinct(cls, parts: List[ConfirmPart]) -> List[ConfirmPart]:
        if len({part.reservation_id for part in parts}) != len(parts):
            raise ValueError("a reservation may be confirmed once in a batch")
        return parts


class AuctionedJob(Strict):
    """The job an English auction sells: what it needs, its absolute priority, and where its
    input is (the sites bid for it with their free capacity, docs/design.md §4.6)."""

    cores: StrictInt = Field(ge=1, le=MAX_CORES, description="total cores")
    walltime: StrictInt = Field(ge=1, le=MAX_WALLTIME_S, description="seconds it runs at most")
    priority: StrictInt = Field(
        1, ge=1, le=MAX_PRIORITY, description="absolute priority: 1 the lowest"
    )
    input_bytes: StrictInt = Field(0, ge=0, le=MAX_INPUT_BYTES, description="its input's size")
    input_site: Optional[StrictStr] = Field(
        None,
        pattern=SITE_NAME_PATTERN,
        description="the site holding its input (none: every site must fetch it)",
    )


class BidRequest(Strict):
    """An auctioneer's call for bids: the first one for an ``auction_id`` announces the job,
    each later one (the same job, the same ``closes_at``) asks the site to value its bid again
    while the auction is open."""

    auction_id: str = Field(pattern=AUCTION_ID_PATTERN, description="chosen by the auctioneer")
    job: AuctionedJob
    closes_at: StrictInt = Field(
        ge=0, le=MAX_TIME, description="when the auction ends (epoch seconds)"
    )
    to_beat: Optional[BidValue] = Field(
        None,
        description="the bid to beat: the standing bid, or the auction's starting price; a "
        "site that cannot beat it holds nothing",
    )


class ConfirmRequest(BaseModel):
    """A confirm: the deal the reservation's GET shows, and the buyer's Ed25519 signature over
    its RFC 8785 canonical JSON (``{"keyid", "alg": "ed25519", "value": base64}``)."""

    deal: Dict[str, Any]
    signature: Dict[str, Any]


class ErrorDetail(BaseModel):
    code: str = Field(description="stable, for programs")
    message: str = Field(description="a sentence a person can act on")
    field: Optional[str] = Field(None, description="the request field at fault, if one is")
    problems: Optional[List[str]] = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


# --------------------------------------------------------------------------- responses

#: Money as the API writes it: a decimal string.
Money = str


class Answer(BaseModel):
    """A response body; keys the agent adds later are kept by older clients' parsers."""

    model_config = ConfigDict(extra="allow")


class SiteAttributes(Answer):
    """The site's RFQL attributes; ``None`` (or no partitions) means not advertised, and a
    request that names it is refused."""

    name: str
    description: str
    architecture: Optional[str]
    os: Optional[str]
    cpu_speed_mhz: Optional[int]
    memory_per_core_mb: Optional[int]
    cores_per_node: Optional[int]
    partitions: List[str]


class ClusterFigures(Answer):
    """The machine as the latest snapshot shows it: capacity in its unit and in cores."""

    backend: str
    unit: Literal["core", "node"]
    capacity: int = Field(description="usable capacity, in ``unit``")
    cores: int
    nodes: Optional[int]
    snapshot_time: int


class UnitPriceTerms(Answer):
    """The unit-price policy: ``flat`` (``price_per_core_hour``) or ``load`` (the start and
    minimum price and the auction rounds the marketplace paper's decrement is spread over)."""

    policy: Literal["flat", "load"]
    price_per_core_hour: Optional[Money] = None
    start_price_per_core_hour: Optional[Money] = None
    min_price_per_core_hour: Optional[Money] = None
    expected_rounds: Optional[int] = None


class FeeTerms(Answer):
    """The fee policy: ``none``, or ``externality`` (the queued jobs' delay, in core-hours,
    times ``rate_per_core_hour_of_delay``)."""

    policy: Literal["none", "externality"]
    rate_per_core_hour_of_delay: Optional[Money] = None


class PricingTerms(Answer):
    unit_price: UnitPriceTerms
    fee: FeeTerms
    scheduling_policy: str = Field(description="the policy load and fees are computed under")
    cancellation_penalty_factor: Money


class PublicKey(Answer):
    """An Ed25519 public key: ``value`` is the base64 of its 32 bytes."""

    keyid: str
    alg: Literal["ed25519"]
    value: str


class BatchTerms(Answer):
    """The site takes batches (docs/batches.md): of at most ``max_parts`` parts."""

    max_parts: int


class Info(Answer):
    """``GET /v1/info``: who the site is, what it offers, and the key its receipts are
    countersigned with; ``batches`` when it takes batch calls (older agents: absent)."""

    api_version: str
    software_version: str
    site: SiteAttributes
    cluster: Optional[ClusterFigures] = Field(description="null until the first poll")
    pricing: PricingTerms
    offers_valid_s: int
    confirm_timeout_s: float
    public_key: PublicKey
    batches: Optional[BatchTerms] = None


class SlotView(Answer):
    """An advertised slot ``<s, n, d, c, f, b, e>`` (Singh, thesis ch. 3)."""

    start: int
    duration: int
    cores: int = Field(description="free units (the snapshot's unit)")
    unit_price: Money
    fee: Money
    divisible: bool
    extensible: bool


def slot_json(slot: Slot) -> Dict[str, Any]:
    """An advertised slot as :class:`SlotView` JSON."""
    return {
        "start": slot.start,
        "duration": slot.duration,
        "cores": slot.cores,
        "unit_price": str(slot.unit_price),
        "fee": str(slot.fee),
        "divisible": slot.divisible,
        "extensible": slot.extensible,
    }


class SlotList(Answer):
    """``GET /v1/slots``: the holes of the predicted conservative schedule."""

    now: int
    unit: Literal["core", "node"]
    slots: List[SlotView]


class OfferView(Answer):
    """A priced alternative: ``total`` = cores x hours x ``unit_price`` + ``fee``; accept it
    by its ``offer_id`` before ``expires``."""

    offer_id: str
    start: int
    end: int
    cores: int = Field(description="units (the snapshot's unit)")
    unit_price: Money
    fee: Money
    total: Money
    expires: int


def offer_json(offer: Offer) -> Dict[str, Any]:
    """An offer as :class:`OfferView` JSON (built by hand: quotes are the hot route)."""
    return {
        "offer_id": offer.id,
        "start": offer.start,
        "end": offer.end,
        "cores": offer.size,
        "unit_price": str(offer.unit_price),
        "fee": str(offer.fee),
        "total": str(offer.total),
        "expires": offer.expires,
    }


class RefusalView(Answer):
    """Why the site offers nothing: ``unsatisfiable`` (``field`` names what it cannot
    promise), ``no_offer`` or ``price_above_maximum``."""

    code: str
    reason: str
    field: Optional[str]


class QuoteAnswer(Answer):
    """``POST /v1/quotes``: offers earliest first and the index ``chosen`` by the request's
    ``alpha``; or ``status: refused`` with the reason."""

    status: Literal["offered", "refused"]
    now: int
    snapshot_time: Optional[int] = None
    unit: Optional[Literal["core", "node"]] = None
    offers: List[OfferView]
    chosen: Optional[int] = None
    refusal: Optional[RefusalView] = None


class BatchQuoteAnswer(Answer):
    """``POST /v1/quotes/batch``: each request's answer in order, and how many of the
    offers asked to be withdrawn lapsed."""

    answers: List[QuoteAnswer]
    withdrawn: int


class BidView(Answer):
    """A site's bid: its ``value`` (core-hours) and its parts, and the offer that wins it
    (accept it with ``POST /v1/reservations``)."""

    value: str = Field(description="cores_value - displacement - transfer")
    cores_value: str = Field(description="the cores offered, by how soon they are free")
    displacement: str = Field(description="the delay imposed on queued work (core-hours)")
    transfer: str = Field(description="the input's transfer time, in the job's core-hours")
    transfer_s: int = Field(description="seconds the input takes to reach the site")
    offer: OfferView


class BidAnswer(Answer):
    """``POST /v1/bids`` and ``DELETE /v1/bids/{auction_id}``: where the site's bid stands.
    ``open``: the site bids ``bid`` and holds its capacity until ``held_until``; ``none``: it
    takes part without a bid (``refusal`` says why); ``won``: its offer was accepted;
    ``released``: it holds nothing any more (``refusal`` says why)."""

    auction_id: str
    state: Literal["open", "none", "won", "released"]
    now: int
    closes_at: int
    held_until: int = Field(description="its offer can be accepted until then")
    updates: int = Field(description="how many times the site valued this bid")
    bid: Optional[BidView] = None
    refusal: Optional[RefusalView] = None


class RequestDocument(Answer):
    """The request as the deal carries it: only the fields the buyer set."""

    cores: int
    duration: int
    earliest: Optional[int] = None
    deadline: Optional[int] = None
    max_price: Optional[Money] = None
    nodes: Optional[int] = None
    cores_per_node: Optional[int] = None
    memory_per_core_mb: Optional[int] = None
    architecture: Optional[str] = None
    os: Optional[str] = None
    cpu_speed_mhz: Optional[int] = None
    disk_gb: Optional[int] = None
    round: Optional[int] = None
    best_price: Optional[Money] = None

    @model_serializer(mode="wrap")
    def _present_only(self, handler: SerializerFunctionWrapHandler) -> Dict[str, Any]:
        data: Dict[str, Any] = handler(self)
        return {key: value for key, value in data.items() if value is not None}


class OfferDocument(Answer):
    id: str
    site: str
    start: int
    duration: int
    size: int
    unit_price: str = Field(description="exact decimal, without trailing zeros")
    fee: str
    expires: int


class DealDocument(Answer):
    """What a buyer signs to confirm: Ed25519 over its RFC 8785 canonical JSON (see
    docs/protocol.md, "The deal, the confirm, the receipt and the refund")."""

    version: Literal[1]
    site: str = Field(description="the site's key id")
    buyer: str = Field(description="the buyer's key id")
    reservation_id: str
    request: RequestDocument
    offer: OfferDocument
    price: Money
    cancellation_penalty: Money


class Signature(Answer):
    """A detached Ed25519 signature: ``value`` is base64 of its 64 bytes."""

    keyid: str
    alg: Literal["ed25519"]
    value: str


class ReceiptDocument(Answer):
    """A confirmed deal, countersigned by the site; ``id`` is the SHA-256 (hex) of the deal's
    canonical JSON."""

    id: str
    deal: DealDocument
    user_signature: Signature
    confirmed_at: int
    site_signature: Signature


class CancellationDocument(Answer):
    """The site's signed word that a confirmed deal was cancelled and what it keeps."""

    receipt_id: str
    penalty: Money
    cancelled_at: int
    site_signature: Signature


class LedgerEntry(Answer):
    account: str
    amount: Money


class LedgerTransaction(Answer):
    """A booking at the bank: entries that sum to zero."""

    id: int
    kind: str
    at: int
    memo: str
    receipt_id: Optional[str]
    entries: List[LedgerEntry]


class AccountBalance(Answer):
    """The bank's ``GET /v1/accounts/{id}``: the account's balance, and the ``credit`` it may
    owe the bank (how far below zero a deal may take it)."""

    account: str
    balance: Money
    credit: Money


class StatementLine(Answer):
    """One movement of an account: its transaction, when, what kind (``deposit``, ``deal``,
    ``refund``), the receipt it books (null for a deposit), the amount (negative when the
    account paid) and the balance after it."""

    transaction_id: int
    at: int
    kind: str
    receipt_id: Optional[str]
    memo: str
    amount: Money
    balance: Money


class AccountStatement(Answer):
    """The bank's ``GET /v1/accounts/{id}/statement``: the movements in booking order."""

    account: str
    balance: Money
    lines: List[StatementLine]


class PublicReservationView(Answer):
    """What anybody may see of a reservation (``GET /v1/reservations/{id}`` unsigned, or
    signed by another client than its buyer): where it stands and what it holds when."""

    id: str
    state: Literal[
        "REQUESTED",
        "TENTATIVE",
        "CONFIRMED",
        "ACTIVE",
        "COMPLETED",
        "EXPIRED",
        "CANCELLED",
        "FAILED",
        "LOST",
    ]
    start: int
    end: int
    size: int
    unit: Literal["core", "node"]


class ReservationJobView(Answer):
    """A job that ran (or runs) in the reservation: its cores and nodes, start and end (null
    while it runs), epoch seconds by the batch system's clock."""

    id: str
    user: str
    cores: int
    nodes: int
    start: int
    end: Optional[int]


class UsageView(Answer):
    """What the jobs in the reservation used of it, within its window: in its unit
    (``used_unit_hours`` of ``sold_unit_hours``) and in core-hours. ``source`` ``poll``: the
    agent's polls (ends to within one poll interval), ``accounting``: the batch system's
    records (exact). ``final`` once the window is over and the figures will not change."""

    jobs: List[ReservationJobView]
    core_hours: float
    used_unit_hours: float
    sold_unit_hours: float
    utilization: float = Field(description="used_unit_hours / sold_unit_hours, 0 when empty")
    source: Literal["poll", "accounting"]
    final: bool


class ReservationView(PublicReservationView):
    """A reservation as its buyer sees it: where it stands, the deal to sign, its receipt
    once confirmed; after a confirm or a cancel the bank's transaction (null without a
    bank), after a cancel the penalty kept and the site's signed cancellation (kept in the
    reservation's view from then on); when read (GET), the jobs that ran in it."""

    name: str = Field(description="the reservation's name in the batch system")
    offer_id: str
    client: str
    users: List[str]
    accounts: List[str]
    unit_price: Money
    fee: Money
    total: Money
    penalty_factor: Money
    created: float
    updated: float
    deadline: Optional[float] = Field(description="confirm by then, or it is released")
    penalty: Optional[Money]
    message: str
    deal: DealDocument
    receipt: Optional[ReceiptDocument]
    ledger_transaction: Optional[LedgerTransaction] = None
    cancellation: Optional[CancellationDocument] = None
    usage: Optional[UsageView] = Field(
        None, description="the jobs that ran in it and what they used (in a GET's answer)"
    )


class BatchReservations(Answer):
    """A batch accept's or confirm's reservations, in the order of the request."""

    reservations: List[ReservationView]


class WaitBoundView(Answer):
    """With probability ``confidence``, at least a fraction ``quantile`` of the bin's jobs
    wait at most ``upper_bound_s`` seconds (QBETS' binomial bound over the bin's most recent
    waits); ``null`` when the bin holds too few waits to say so."""

    quantile: float
    confidence: float
    upper_bound_s: Optional[int]


class WaitBinView(Answer):
    """Waits of jobs with ``cores[0] <= cores <= cores[1]`` and a walltime limit in
    ``(walltime_s[0], walltime_s[1]]``; ``null`` bounds mean no bound, ``null`` figures no
    jobs."""

    cores: List[Optional[int]]
    walltime_s: List[Optional[int]]
    jobs: int
    mean_wait_s: Optional[float]
    median_wait_s: Optional[float]
    p90_wait_s: Optional[int]
    wait_bounds: List[WaitBoundView] = Field(
        default_factory=list,
        description="upper bounds on quantiles of the wait (empty from older agents)",
    )


class WaitHistory(Answer):
    """``GET /v1/history/waits``: observed queue waits by cores and walltime bins."""

    bins: List[WaitBinView]
    jobs: int
    skipped: int
    source: str
    bound_window_jobs: Optional[int] = Field(
        None, description="how many of each bin's most recent waits its bounds are taken over"
    )
    since: Optional[int] = Field(None, description="the epoch seconds ``since`` meant, if given")


class Health(Answer):
    """``GET /healthz``: whether the batch system answers and how old the snapshot is."""

    status: str
    backend: str
    backend_reachable: bool
    snapshot_age_s: Optional[float]
    last_error: Optional[str]
