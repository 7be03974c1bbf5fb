"""The request bodies of the HTTP API, and the shape of its errors, as pydantic models.

They are the published contract (``/v1/openapi.json``): every bound here is one a client can
read, and a value outside it is refused as a 422 that names the field before any code of the
agent runs. The bounds are generous for any real cluster and tight enough that no figure can
overflow the planner or the SQLite store (integers there are 64-bit).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Dict, List, Optional

from pydantic import BaseModel, ConfigDict, Field

#: The latest epoch second a request may name (year 2242): far beyond any plan's horizon.
MAX_TIME = 2**33
#: The longest walltime a request may ask for: a year, the planner's "unlimited".
MAX_WALLTIME_S = 366 * 86400
#: The widest request: more cores than any machine has.
MAX_CORES = 10**7
#: Money bounds (per core-hour): a virtual currency, but still a finite one.
MAX_PRICE = Decimal(10**9)

OFFER_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


class Strict(BaseModel):
    """Unknown fields are refused (a misspelt RFQL field must not silently mean "don't
    care")."""

    model_config = ConfigDict(extra="forbid")


class QuoteRequest(Strict):
    """A request for quotes in the marketplace paper's RFQL. Absent fields mean "don't care";
    a present field the site cannot satisfy makes it refuse, saying which and why."""

    walltime: int = Field(ge=1, le=MAX_WALLTIME_S, description="seconds the reservation lasts")
    cores: Optional[int] = Field(None, ge=1, le=MAX_CORES, description="total cores")
    nodes: Optional[int] = Field(
        None, ge=1, le=MAX_CORES, description="node count (with or instead of cores)"
    )
    cores_per_node: Optional[int] = Field(None, ge=1, le=MAX_CORES)
    max_price: Optional[Decimal] = Field(
        None, ge=0, le=MAX_PRICE, allow_inf_nan=False, description="per core-hour"
    )
    deadline: Optional[int] = Field(
        None, ge=0, le=MAX_TIME, description="latest end (epoch seconds)"
    )
    earliest_start: Optional[int] = Field(
        None,
        ge=0,
        le=MAX_TIME,
        description="earliest start (epoch seconds); offers start a minute after the quote at "
        "the soonest, and can be accepted until their window starts",
    )
    memory_per_core_mb: Optional[int] = Field(None, ge=1, le=2**31)
    architecture: Optional[str] = Field(None, min_length=1, max_length=64)
    os: Optional[str] = Field(None, min_length=1, max_length=64)
    cpu_speed_mhz: Optional[int] = Field(None, ge=1, le=10**6)
    disk_gb: Optional[int] = Field(None, ge=1, le=10**9)
    round: int = Field(1, ge=1, le=1000, description="reverse-auction round (1 = first call)")
    best_price: Optional[Decimal] = Field(
        None, ge=0, le=MAX_PRICE, allow_inf_nan=False, description="best price so far"
    )
    alpha: float = Field(
        0.5, ge=0.0, le=1.0, description="which offer to mark chosen: 0 earliest, 1 cheapest"
    )
    limit: int = Field(20, ge=1, le=100, description="at most this many offers")


class AcceptRequest(Strict):
    """Accept one offer: the site creates a tentative reservation for it."""

    offer_id: str = Field(pattern=OFFER_ID_PATTERN)


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
