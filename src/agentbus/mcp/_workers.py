"""Several ``agentbus mcp`` processes on one address (``--transport http --workers N``).

Each worker is a whole team server built from the settings the parent hands down, opened
in the ASGI lifespan with the SDK's session manager (``agentbus._http.run_workers``). The
2026-07-28 protocol is one HTTP exchange per call, which any worker answers; the earlier
protocols' sessions would live in one process, so with several workers the endpoint is
stateless (the SDK's ``stateless_http``): no session id, no stream of notifications
outside a call.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from agentbus._config import Settings
from agentbus._http import Callers, Lifespan, PlanWatch, handed_down, keys_of, run_workers
from agentbus.bus import Bus
from agentbus.mcp._http import http_app
from agentbus.mcp._server import TeamServer
from agentbus.mcp._settings import McpSettings
from agentbus.security import default_id

__all__ = ["serve_workers", "worker_app"]


def serve_workers(settings: Settings, config: McpSettings, *, log: tuple[str, str]) -> None:
    """Serve ``config.workers`` team servers over HTTP on ``config.host``:``config.port``
    until SIGTERM or SIGINT (blocks); ``log``: their log level and format."""
    run_workers(f"{__name__}:worker_app", settings, config, log=log)


def worker_app() -> Lifespan:
    """Return a worker's app: its team server, opened and closed by the ASGI lifespan."""
    settings, config = handed_down(McpSettings)
    keys = keys_of(config)
    plans = PlanWatch()
    callers = Callers(settings, keys, plans, app_id="mcp")
    bus = Bus(settings, agent_id=default_id(settings, "mcp"), app_id="mcp")
    team = TeamServer(bus, config, callers=callers, plans=plans)
    app = http_app(team, keys)

    @contextlib.asynccontextmanager
    async def opened() -> AsyncIterator[TeamServer]:
        async with team, app.router.lifespan_context(app):
            yield team

    return Lifespan(app, opened)
