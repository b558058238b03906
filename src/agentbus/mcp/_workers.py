"""Several ``agentbus mcp`` processes on one address (``--transport http --workers N``).

Each worker is a whole team server built from the settings the parent hands down, opened
in the ASGI lifespan with the SDK's session manager (``agentbus._workers``). The 2026-07-28
protocol is one HTTP exchange per call, which any worker answers; the earlier protocols'
sessions would live in one process, so with several workers the endpoint is stateless
(the SDK's ``stateless_http``): no session id, no stream of notifications outside a call.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from agentbus import _workers
from agentbus._config import Settings
from agentbus.bus import Bus
from agentbus.gateway import ApiKeys
from agentbus.mcp._callers import Callers
from agentbus.mcp._http import http_app
from agentbus.mcp._plans import PlanWatch
from agentbus.mcp._server import TeamServer
from agentbus.mcp._settings import McpSettings
from agentbus.security import default_id

__all__ = ["serve_workers", "worker_app"]


def serve_workers(settings: Settings, config: McpSettings, *, log: tuple[str, str]) -> None:
    """Serve ``config.workers`` team servers over HTTP on ``config.host``:``config.port``
    until SIGTERM or SIGINT (blocks); ``log``: their log level and format."""
    handed = {"settings": settings.model_dump(mode="json"), "mcp": config.model_dump(mode="json")}
    _workers.serve(
        f"{__name__}:worker_app",
        handed,
        host=config.host,
        port=config.port,
        workers=config.workers,
        log=log,
    )


def worker_app() -> _workers.Lifespan:
    """Return a worker's app: its team server, opened and closed by the ASGI lifespan."""
    handed = _workers.plan()
    settings = Settings(**handed["settings"])
    config = McpSettings(**handed["mcp"])
    keys = (
        ApiKeys.from_file(config.keys_file)
        if config.keys_file is not None
        else ApiKeys({}, allow_anonymous=True)
    )
    plans = PlanWatch()
    bus = Bus(settings, agent_id=default_id(settings, "mcp"), app_id="mcp")
    team = TeamServer(bus, config, callers=Callers(settings, keys, plans), plans=plans)
    app = http_app(team, keys)

    @contextlib.asynccontextmanager
    async def opened() -> AsyncIterator[TeamServer]:
        async with team, app.router.lifespan_context(app):
            yield team

    return _workers.Lifespan(app, opened)
