"""Routes for the people and programs that run the agent: ``/healthz`` (is the batch system
answering, how old is the snapshot) and ``/metrics`` (Prometheus)."""

from __future__ import annotations

import fastapi
from fastapi.responses import JSONResponse, Response

from siteagent.api.context import ApiContext
from siteagent.api.site import ERRORS
from siteagent.core.errors import SiteagentError
from siteagent.protocol.errors import METRICS_DISABLED
from siteagent.protocol.models import Health


def add_routes(app: fastapi.FastAPI, context: ApiContext) -> None:
    """Register this area's routes on ``app``."""

    @app.get(
        "/healthz", tags=["operations"], response_model=Health, responses={503: {"model": Health}}
    )
    def healthz() -> JSONResponse:
        """Whether the batch system answers, and how old the agent's snapshot is."""
        agent = context.agent
        problem = agent.staleness()
        body = {
            "status": "ok" if problem is None else problem[0],
            "backend": context.site.backend.name,
            "backend_reachable": agent.last_error is None and agent.state is not None,
            "snapshot_age_s": agent.snapshot_age(),
            "last_error": agent.last_error,
        }
        if problem is None:
            return JSONResponse(body)
        headers = {"Retry-After": str(context.retry_after_s())}
        return JSONResponse(body, status_code=503, headers=headers)

    @app.get("/metrics", tags=["operations"], responses=ERRORS, response_class=Response)
    def metrics() -> Response:
        """Prometheus metrics (text exposition format)."""
        if context.metrics is None:
            raise SiteagentError("this agent was started without metrics", code=METRICS_DISABLED)
        data, content_type = context.metrics.render()
        return Response(data, media_type=content_type)
