"""Several gateway processes on one address (``agentbus gateway --workers N``).

Each worker is a whole ``Gateway`` built from the settings the parent hands down, opened
in the ASGI lifespan (``agentbus._http.run_workers``). They share their tasks through the
task store (``_shared_tasks``) and their cancels over the bus (``_peers``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from agentbus._config import Settings
from agentbus._http import Lifespan, handed_down, keys_of, run_workers
from agentbus.gateway._app import Gateway
from agentbus.gateway._settings import GatewaySettings
from agentbus.gateway._shared_tasks import connect, reachable

__all__ = ["serve_workers", "worker_app"]


def serve_workers(
    settings: Settings,
    config: GatewaySettings,
    *,
    log: tuple[str, str],
    certfile: str | None = None,
    keyfile: str | None = None,
) -> None:
    """Serve ``config.workers`` gateways on ``config.host``:``config.port`` until SIGTERM or
    SIGINT (blocks); ``log``: their log level and format.

    Raises:
        ConfigurationError: the task store does not answer (checked before any worker
            starts: a worker that cannot start would be started again and again).
    """
    if config.task_store is not None:
        asyncio.run(_answers(config.task_store))
    run_workers(
        f"{__name__}:worker_app", settings, config, log=log, certfile=certfile, keyfile=keyfile
    )


async def _answers(url: str) -> None:
    redis = connect(url)
    try:
        await reachable(redis, url)
    finally:
        await redis.aclose()


def worker_app() -> Lifespan:
    """Return a worker's app: its gateway, opened and closed by the ASGI lifespan."""
    settings, config = handed_down(GatewaySettings)
    gateway = Gateway(settings, config, keys_of(config))

    @contextlib.asynccontextmanager
    async def opened() -> AsyncIterator[Gateway]:
        async with gateway:
            yield gateway

    return Lifespan(gateway.app, opened)
