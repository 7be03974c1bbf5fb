"""Routes about the site: who it is and what it offers (``/v1/info``, ``/v1/slots``), and how
long its queue makes jobs wait (``/v1/history/waits``). Reads only: no signature needed."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Type, Union

import fastapi
from fastapi import Query
from pydantic import BaseModel

import siteagent
from siteagent.api.context import ApiContext
from siteagent.core.defaults import DEFAULT_OFFER_VALID_S
from siteagent.core.durations import SINCE_FORMS, parse_since
from siteagent.core.errors import InvalidRequest
from siteagent.core.values import CapacityUnit, ClusterSnapshot
from siteagent.core.waits import wait_table
from siteagent.market.quoting import cores_per_node
from siteagent.protocol.errors import STATUS
from siteagent.protocol.keys import public_key_text
from siteagent.protocol.models import (
    MAX_BATCH_PARTS,
    MAX_TIME,
    ErrorResponse,
    Info,
    SlotList,
    WaitHistory,
    slot_json,
)

#: The version of the API's contract (the path prefix says the major one).
API_VERSION = "1.0"

#: Error answers every route may give, for the OpenAPI.
ERRORS: Dict[Union[int, str], Dict[str, Any]] = {
    status: {"model": ErrorResponse} for status in sorted(set(STATUS.values()))
}


def answers(model: Type[BaseModel]) -> Dict[str, Any]:
    """A route's published answers: ``model`` (the keys the route sets, as it sets them), or
    an error."""
    return {"responses": ERRORS, "response_model": model, "response_model_exclude_unset": True}


def add_routes(app: fastapi.FastAPI, context: ApiContext) -> None:
    """Register this area's routes on ``app``."""

    @app.get("/v1/info", tags=["site"], **answers(Info))
    def info() -> Dict[str, Any]:
        """The site's description, visible pricing parameters, public key and API version."""
        return info_of(context)

    @app.get(
        "/v1/slots",
        tags=["site"],
        **answers(SlotList),
    )
    def slots(
        min_cores: int = Query(1, ge=1, le=10**7, description="only slots this wide (units)"),
        min_duration: int = Query(1, ge=1, le=MAX_TIME, description="only slots this long (s)"),
        start: Optional[int] = Query(None, ge=0, le=MAX_TIME, description="window start"),
        end: Optional[int] = Query(None, ge=0, le=MAX_TIME, description="window end"),
        limit: int = Query(100, ge=1, le=1000),
    ) -> Dict[str, Any]:
        """Advertised slots: free holes of the predicted conservative schedule (whatever policy
        predicts the starts) overlapping the window."""
        if start is not None and end is not None and end <= start:
            raise InvalidRequest("end must be after start", field="end")
        view = context.view()
        rows: List[Dict[str, Any]] = []
        for slot in view.slots:
            wanted = slot.cores >= min_cores and slot.duration >= min_duration
            after = end is not None and slot.start >= end
            before = start is not None and slot.end <= start
            if wanted and not after and not before:
                rows.append(slot_json(slot))
            if len(rows) >= limit:
                break
        return {"now": view.now, "unit": view.snapshot.unit.value, "slots": rows}

    @app.get(
        "/v1/history/waits",
        tags=["site"],
        **answers(WaitHistory),
    )
    def waits(
        since: Optional[str] = Query(
            None,
            max_length=64,
            description=f"only jobs that started since then: {SINCE_FORMS}",
            examples=["30d", "1795000000"],
        ),
    ) -> Dict[str, Any]:
        """Observed queue waits by core-count and walltime bins; ``since`` is written as for
        ``siteagent history --since``, and answered as the epoch seconds it meant."""
        start = None if since is None else since_epoch(since, int(context.site.manager.clock()))
        table: Dict[str, Any] = wait_table(context.site.store.queue_waits(start)).to_json()
        if start is not None:
            table["since"] = start
        return table


def since_epoch(text: str, now: int) -> int:
    """``since`` of the history routes in epoch seconds (``now`` is the site's clock, the one
    the waits were recorded by); 422 naming the field and the accepted forms."""
    try:
        return parse_since(text, now)
    except ValueError as exc:
        raise InvalidRequest(str(exc), field="since") from None


def info_of(context: ApiContext) -> Dict[str, Any]:
    """``GET /v1/info`` (also what ``siteagent-client sites`` shows of a site)."""
    site, state = context.site.config.site, context.agent.state
    snapshot = None if state is None else state.snapshot
    deals = context.deals
    return {
        "api_version": API_VERSION,
        "software_version": siteagent.__version__,
        "site": {
            "name": site.name,
            "description": site.description,
            "architecture": site.architecture,
            "os": site.os,
            "cpu_speed_mhz": site.cpu_speed_mhz,
            "memory_per_core_mb": site.memory_per_core_mb,
            "cores_per_node": cores_per_node(site, snapshot),
            "partitions": list(site.partitions),
        },
        "cluster": None if snapshot is None else cluster_figures(snapshot),
        "pricing": context.site.pricing.describe(),
        "offers_valid_s": DEFAULT_OFFER_VALID_S,
        "confirm_timeout_s": context.site.manager.confirm_timeout,
        "public_key": {
            "keyid": deals.site_key_id,
            "alg": "ed25519",
            "value": public_key_text(deals.site_key.public_key()),
        },
        "batches": {"max_parts": MAX_BATCH_PARTS},
    }


def cluster_figures(snapshot: ClusterSnapshot) -> Dict[str, Any]:
    """What the snapshot says of the machine: capacity in its unit and in cores, nodes."""
    per_unit = snapshot.cores_per_node if snapshot.unit is CapacityUnit.NODE else 1
    usable = [node for node in snapshot.nodes if node.usable]
    return {
        "backend": snapshot.backend,
        "unit": snapshot.unit.value,
        "capacity": snapshot.capacity,
        "cores": snapshot.capacity * per_unit,
        "nodes": len(usable) if snapshot.nodes else None,
        "snapshot_time": snapshot.now,
    }
