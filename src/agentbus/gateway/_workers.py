"""Several gateway processes on one address: uvicorn's workers, each a whole gateway.

``agentbus gateway --workers N --task-store redis://...`` binds the address once and
starts N worker processes (uvicorn's supervisor: a worker that dies is replaced; SIGTERM
stops them all). Each worker builds its own ``Gateway`` from the settings the parent
hands down in its environment, opens it in the ASGI lifespan's startup (its buses, the
registry) and closes it in its shutdown; the kernel spreads the connections over them.
They share their tasks through the task store (``_shared_tasks``) and their cancels over
the bus (``_peers``).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from agentbus._config import Settings
from agentbus._logging import configure_logging
from agentbus.gateway._app import Gateway
from agentbus.gateway._keys import ApiKeys
from agentbus.gateway._settings import GatewaySettings

__all__ = ["keys_of", "serve_workers", "worker_app"]

_PLAN = "AGENTBUS_GATEWAY__WORKER_PLAN"
"""The environment variable the parent hands the workers their settings in (JSON)."""


def keys_of(config: GatewaySettings) -> ApiKeys:
    """Return the API keys ``config`` names (its keys file), or anonymous callers.

    Raises:
        ConfigurationError: the keys file cannot be read or is malformed.
    """
    if config.keys_file is not None:
        return ApiKeys.from_file(config.keys_file)
    return ApiKeys({}, allow_anonymous=True)


def serve_workers(
    settings: Settings,
    config: GatewaySettings,
    *,
    log_level: str,
    log_format: str,
    certfile: str | None = None,
    keyfile: str | None = None,
) -> None:
    """Serve ``config.workers`` gateway processes on ``config.host``:``config.port`` until
    SIGTERM or SIGINT (blocks)."""
    import uvicorn

    plan = {
        "settings": settings.model_dump(mode="json"),
        "gateway": config.model_dump(mode="json"),
        "log": [log_level, log_format],
    }
    os.environ[_PLAN] = orjson.dumps(plan).decode()
    uvicorn.run(
        f"{__name__}:worker_app",
        factory=True,
        host=config.host,
        port=config.port,
        workers=config.workers,
        lifespan="on",
        ssl_certfile=certfile,
        ssl_keyfile=keyfile,
        log_config=None,
        timeout_graceful_shutdown=5,
    )


def worker_app() -> ASGIApp:
    """Return a worker's app: its gateway, opened and closed by the ASGI lifespan."""
    plan: dict[str, Any] = orjson.loads(os.environ[_PLAN])
    level, log_format = plan["log"]
    configure_logging(level, log_format, transport_level=logging.WARNING)
    config = GatewaySettings(**plan["gateway"])
    return _Worker(Gateway(Settings(**plan["settings"]), config, keys_of(config)))


class _Worker:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    def __repr__(self) -> str:
        return f"<gateway worker {self.gateway!r}>"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.gateway.app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.gateway.open()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.gateway.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return
