"""Serving a face's app with uvicorn: in this process, or in several on one address.

One process (``serve_app``): the face is opened around the server, and closed after it;
a caught SIGTERM or SIGINT only stops serving, so the face still closes its buses.

Several (``run_workers``, ``--workers N``): the parent binds the address once and starts
the workers (uvicorn's supervisor: a worker that dies is replaced, SIGTERM or SIGINT
stops them all); the kernel spreads the connections over them. Each worker calls the
factory named by its import path, which reads what the parent handed down
(``handed_down``: the settings, as JSON in the environment) and returns a ``Lifespan``:
the app, with what it must open first (its buses) opened in the ASGI lifespan's startup
and closed in its shutdown.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import os
import signal
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from agentbus._config import Settings
from agentbus._http._settings import HttpSettings
from agentbus._logging import configure_logging
from agentbus.bus import Transport
from agentbus.registry import ServiceDirectory

if TYPE_CHECKING:
    import uvicorn

__all__ = ["Face", "Lifespan", "handed_down", "run_workers", "serve_app"]

_PLAN = "AGENTBUS__WORKER_PLAN"
"""The environment variable the parent hands the workers their settings in (JSON)."""
_GRACE = 5  # s: uvicorn's graceful shutdown, open requests and streams included

ConfigT = TypeVar("ConfigT", bound=HttpSettings)


class Face(abc.ABC):
    """A face on a bus of its own, following the registry: ``open`` it before serving its
    app, ``aclose`` it after; ``async with`` does both.

    Args:
        bus: The face's own bus, unopened: it follows the registry on it. The face opens
            and closes it.
        config: The face's settings: which registry, how often to look.
        on_change: Called when the live services change (the face's routes, its tools).
    """

    def __init__(
        self, bus: Transport, config: HttpSettings, *, on_change: Callable[[], None]
    ) -> None:
        self._bus = bus
        self.directory = ServiceDirectory(
            bus, registry=config.registry, interval=config.refresh_interval, on_change=on_change
        )

    async def open(self) -> Self:
        """Connect to the bus and start following the registry.

        Raises:
            BrokerUnavailable: the broker cannot be reached.
        """
        await self._bus.open()
        try:
            await self._follow()
        except BaseException:
            await self._bus.aclose()
            raise
        return self

    @abc.abstractmethod
    async def _follow(self) -> None:
        """Start following the team on the open bus (the ``directory`` too); stop what
        started when a step fails."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Stop following the registry and close the face's buses."""

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def serve_app(
    app: ASGIApp,
    config: HttpSettings,
    *,
    lifespan: Literal["on", "off"],
    certfile: str | None = None,
    keyfile: str | None = None,
) -> None:
    """Serve ``app`` on ``config.host``:``config.port`` in this process until SIGTERM or
    SIGINT; ``lifespan``: whether the app's own lifespan runs; TLS with ``certfile`` and
    ``keyfile`` where given."""
    import uvicorn

    server = _server_class()(
        uvicorn.Config(
            app,
            host=config.host,
            port=config.port,
            lifespan=lifespan,
            ssl_certfile=certfile,
            ssl_keyfile=keyfile,
            log_config=None,
            timeout_graceful_shutdown=_GRACE,
        )
    )
    await server.serve()


def _server_class() -> type[uvicorn.Server]:
    import uvicorn

    class Server(uvicorn.Server):
        # uvicorn raises a caught SIGTERM/SIGINT again once it has shut down, which would
        # end the process before the face closes its buses: here it only stops serving.
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            handled = (signal.SIGINT, signal.SIGTERM)
            previous = {signum: signal.signal(signum, self.handle_exit) for signum in handled}
            try:
                yield
            finally:
                for signum, handler in previous.items():
                    signal.signal(signum, handler)

    return Server


def run_workers(
    factory: str,
    settings: Settings,
    config: HttpSettings,
    *,
    log: tuple[str, str],
    certfile: str | None = None,
    keyfile: str | None = None,
) -> None:
    """Serve ``config.workers`` processes of the app ``factory`` (``module:function``)
    makes, on ``config.host``:``config.port``, until SIGTERM or SIGINT (blocks).

    Each worker's factory reads ``settings`` and ``config`` back with ``handed_down``.
    ``log``: the workers' log level and format, as ``configure_logging`` takes them.
    """
    import uvicorn

    handed = {"settings": settings.model_dump(mode="json"), "face": config.model_dump(mode="json")}
    os.environ[_PLAN] = orjson.dumps({"handed": handed, "log": list(log)}).decode()
    uvicorn.run(
        factory,
        factory=True,
        host=config.host,
        port=config.port,
        workers=config.workers,
        lifespan="on",
        ssl_certfile=certfile,
        ssl_keyfile=keyfile,
        log_config=None,
        timeout_graceful_shutdown=_GRACE,
    )


def handed_down(kind: type[ConfigT]) -> tuple[Settings, ConfigT]:
    """In a worker: set up its logging, and return the bus settings and the face's
    settings (of ``kind``) the parent handed down."""
    read: dict[str, Any] = orjson.loads(os.environ[_PLAN])
    level, log_format = read["log"]
    configure_logging(level, log_format, transport_level=logging.WARNING)
    handed: dict[str, Any] = read["handed"]
    return Settings(**handed["settings"]), kind(**handed["face"])


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
