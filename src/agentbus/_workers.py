"""Several processes on one address: uvicorn's workers, each building its own app.

The parent binds the address once and starts the workers (uvicorn's supervisor: a worker
that dies is replaced, SIGTERM or SIGINT stops them all); the kernel spreads the
connections over them. Each worker calls the factory named by its import path, which
reads what the parent handed down (``plan``: the settings, as JSON in the environment)
and returns a ``Lifespan``: the app, with what it must open first (its buses) opened in
the ASGI lifespan's startup and closed in its shutdown.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from typing import Any

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from agentbus._logging import configure_logging

__all__ = ["Lifespan", "plan", "serve"]

_PLAN = "AGENTBUS__WORKER_PLAN"
"""The environment variable the parent hands the workers their settings in (JSON)."""


def serve(
    factory: str,
    handed: dict[str, Any],
    *,
    host: str,
    port: int,
    workers: int,
    log: tuple[str, str],
    certfile: str | None = None,
    keyfile: str | None = None,
) -> None:
    """Serve ``workers`` processes of the app ``factory`` (``module:function``) makes from
    ``handed`` (JSON-able), on ``host``:``port``, until SIGTERM or SIGINT (blocks).

    ``log``: the workers' log level and format, as ``configure_logging`` takes them.
    """
    import uvicorn

    os.environ[_PLAN] = orjson.dumps({"handed": handed, "log": list(log)}).decode()
    uvicorn.run(
        factory,
        factory=True,
        host=host,
        port=port,
        workers=workers,
        lifespan="on",
        ssl_certfile=certfile,
        ssl_keyfile=keyfile,
        log_config=None,
        timeout_graceful_shutdown=5,
    )


def plan() -> dict[str, Any]:
    """In a worker: set up its logging, and return what the parent handed down."""
    read: dict[str, Any] = orjson.loads(os.environ[_PLAN])
    level, log_format = read["log"]
    configure_logging(level, log_format, transport_level=logging.WARNING)
    handed: dict[str, Any] = read["handed"]
    return handed


class Lifespan:
    """``app``, with ``opened()`` entered around the ASGI lifespan (startup to shutdown)."""

    def __init__(
        self, app: ASGIApp, opened: Callable[[], contextlib.AbstractAsyncContextManager[Any]]
    ) -> None:
        self.app = app
        self._opened = opened

    def __repr__(self) -> str:
        return f"<Lifespan {self.app!r}>"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        message = await receive()
        assert message["type"] == "lifespan.startup"
        try:
            async with self._opened():
                await send({"type": "lifespan.startup.complete"})
                message = await receive()
                assert message["type"] == "lifespan.shutdown"
        except Exception as exc:
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                return
            raise
        await send({"type": "lifespan.shutdown.complete"})
