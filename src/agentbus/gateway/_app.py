"""The gateway: an ASGI app serving each live bus service as an A2A agent, on the SDK's routes.

Paths: ``/agents`` lists the agent cards; ``/agents/<service>/.well-known/agent-card.json``
is a service's card; ``/agents/<service>/`` takes its JSON-RPC calls, and
``/agents/<service>/rest/...`` the same calls in the HTTP+JSON (REST) binding. One service
(``root_service``) can also be served at the root, so that a client discovering an agent by
its host finds it: its card at ``/.well-known/agent-card.json``, JSON-RPC at ``POST /``, and
HTTP+JSON at the root too (``/message:send``, ``/tasks/{id}``, ...), where clients that
discover by host look for it. The routes follow the registry: a service that leaves is gone
(404), a new one appears, without a restart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from a2a.server.cluster import VersionedTaskStore
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.tasks import (
    InMemoryPushNotificationConfigStore,
    PushNotificationConfigStore,
    TaskStore,
)
from a2a.types import a2a_pb2 as a2a
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from a2a.utils.push_url_validator import validate_push_notification_url
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentbus._config import Settings
from agentbus._exceptions import ConfigurationError
from agentbus._http import ApiKeys, Callers, Face, KeyBackend, PlanWatch, unauthorized
from agentbus.bus import Bus
from agentbus.gateway._cards import REST_PREFIX, a2a_card
from agentbus.gateway._checks import checked_jsonrpc, checked_rest
from agentbus.gateway._executor import BusExecutor
from agentbus.gateway._files import Files
from agentbus.gateway._follow import PlanProgress
from agentbus.gateway._handler import GatewayHandler
from agentbus.gateway._peers import PeerCancels
from agentbus.gateway._push import Pushes, PushSender
from agentbus.gateway._settings import GatewaySettings
from agentbus.gateway._shared_push import RedisPushConfigs
from agentbus.gateway._shared_tasks import (
    NewTaskIds,
    RedisTaskEvents,
    RedisTaskStore,
    connect,
    reachable,
)
from agentbus.gateway._tasks import BoundedTaskStore, OpenTasks
from agentbus.security import default_id

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["Gateway"]

_PREFIX = "/agents"


class Gateway(Face):
    """Makes the bus's agents A2A agents over HTTP; open it, then serve ``app`` with uvicorn.

    Args:
        settings: The bus settings (broker, exchange).
        gateway: The gateway's own settings.
        keys: The API keys; every non-public path needs one.
    """

    _bus: Bus

    def __init__(self, settings: Settings, gateway: GatewaySettings, keys: ApiKeys) -> None:
        self.settings = settings
        self.config = gateway
        self.public_url = (gateway.public_url or f"http://{gateway.host}:{gateway.port}").rstrip(
            "/"
        )
        self.root_service = gateway.root_service
        self._secured = not keys.allow_anonymous
        self.open_tasks = OpenTasks(gateway.max_open_tasks)
        self._bus = Bus(settings, agent_id=default_id(settings, "gateway"), app_id="gateway")
        super().__init__(self._bus, gateway, on_change=self._reroute)
        self.plans = PlanWatch()
        self.callers = Callers(settings, keys, self.plans, app_id="gateway")
        self._executor = BusExecutor(
            self.callers,
            self.open_tasks,
            timeout=gateway.request_timeout,
            follow=PlanProgress(self.plans, leader=gateway.leader),
            files=Files(None if gateway.file_private_hosts else validate_push_notification_url),
        )
        self.store: TaskStore | VersionedTaskStore
        self._shared: _Shared | None = None
        configs: PushNotificationConfigStore
        if gateway.task_store is None:
            self.store = BoundedTaskStore(
                size=gateway.max_tasks,
                retention=gateway.task_retention,
                waiting=gateway.waiting_retention,
            )
            configs = InMemoryPushNotificationConfigStore()
        else:
            self._shared = _Shared.of(gateway.task_store, settings, gateway, self._bus)
            self.store = self._shared.store
            configs = self._shared.webhooks
            self._shared.peers = PeerCancels(self._bus, self._executor, self.store)
        screen = None if gateway.push_private_hosts else validate_push_notification_url
        sender = PushSender(
            configs, attempts=gateway.push_attempts, backoff=gateway.push_backoff, screen=screen
        )
        self.pushes = Pushes(configs, sender, screen)
        self._handlers: dict[str, GatewayHandler] = {}
        self._mounts: dict[str, Mount] = {}
        self._root: dict[str, list[BaseRoute]] = {}
        self.app = Starlette(
            routes=self._routes(),
            middleware=[
                Middleware(
                    AuthenticationMiddleware,
                    backend=KeyBackend(keys, _is_public),
                    on_error=unauthorized,
                ),
                Middleware(_BodyLimit, max_size=gateway.max_body_size),
            ],
        )
        self.app.router.default = self._no_such_agent

    def __repr__(self) -> str:
        state = self._bus.state.value
        return f"<Gateway {self.public_url} {state} services={sorted(self.directory.cards)}>"

    async def _follow(self) -> None:
        try:
            if self._shared is not None:
                await self._shared.start()
            await self.directory.start()
        except BaseException:
            if self._shared is not None:
                await self._shared.aclose()
            raise

    async def aclose(self) -> None:
        """Stop following the registry, cancel running tasks (on the bus too), close every bus."""
        await self.directory.aclose()
        await self._executor.aclose()
        for handler in list(self._handlers.values()):
            await handler.aclose()
        await self.pushes.sender.aclose()
        await self.callers.aclose()
        await self._bus.aclose()
        if self._shared is not None:
            await self._shared.aclose()

    def card_url(self, service: str, *, root: bool = False) -> str:
        """Return the URL of ``service``'s A2A endpoint (its card is under it).

        ``root``: the URL of the root, where the ``root_service`` is served too.
        """
        return f"{self.public_url}/" if root else f"{self.public_url}{_PREFIX}/{service}/"

    def a2a_card(self, service: str, *, root: bool = False) -> a2a.AgentCard | None:
        """Return ``service``'s A2A card (served at the root: ``root``), or None when not live.

        Without keys (anonymous) the card declares no security scheme and requires none.
        """
        card = self.directory.cards.get(service)
        if card is None:
            return None
        url = self.card_url(service, root=root)
        rest_url = self.public_url if root else None  # at the root, HTTP+JSON is there too
        sites = self.directory.sites.get(service, ())
        return a2a_card(card, url, secured=self._secured, rest_url=rest_url, sites=sites)

    def _routes(self) -> list[BaseRoute]:
        routes: list[BaseRoute] = [Route(_PREFIX, self._listing, methods=["GET"])]
        routes += [self._mount(service) for service in sorted(self.directory.cards)]
        if self.root_service is not None and self.root_service in self.directory.cards:
            routes += self._root_routes(self.root_service)
        return routes

    def _reroute(self) -> None:
        # In place: the app's router keeps the list object.
        self.app.router.routes[:] = self._routes()

    def _mount(self, service: str) -> Mount:
        mount = self._mounts.get(service)
        if mount is not None:
            return mount
        card = self.a2a_card(service)
        assert card is not None
        handler = GatewayHandler(
            service,
            lambda: self.directory.cards.get(service),
            card,
            executor=self._executor,
            store=self.store,
            open_tasks=self.open_tasks,
            events=self._shared.events if self._shared is not None else None,
            cancelled=self._shared.peers.tell if self._shared is not None else None,
            task_ids=NewTaskIds(self._shared.store) if self._shared is not None else None,
            pushes=self.pushes,
        )
        self._handlers[service] = handler
        routes = self._service_routes(service, root=False)
        mount = self._mounts[service] = Mount(f"{_PREFIX}/{service}", routes=routes)
        return mount

    def _root_routes(self, service: str) -> list[BaseRoute]:
        # The SDK's tenant paths (/{tenant}/rest/...) are left out at the root: they would
        # take every other path, /agents/<a service that left>/ included.
        routes = self._root.get(service)
        if routes is None:
            routes = self._root[service] = [
                route
                for route in self._service_routes(service, root=True)
                if not isinstance(route, Mount)
            ]
        return routes

    def _service_routes(self, service: str, *, root: bool) -> list[BaseRoute]:
        card = self.a2a_card(service, root=root)
        assert card is not None
        handler = self._handlers[service]

        async def current(served: a2a.AgentCard) -> a2a.AgentCard:
            return self.a2a_card(service, root=root) or served

        rest = "" if root else REST_PREFIX
        # v0.3 compatibility too: clients without the A2A-Version header, message/send.
        return [
            *create_agent_card_routes(card, card_modifier=current),
            *checked_jsonrpc(create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True)),
            *checked_rest(create_rest_routes(handler, path_prefix=rest), rest),
        ]

    async def _listing(self, request: Request) -> JSONResponse:
        cards = [self.a2a_card(service) for service in sorted(self.directory.cards)]
        return JSONResponse({"agents": [agent_card_to_dict(card) for card in cards if card]})

    async def _no_such_agent(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if path.startswith(_PREFIX + "/"):
            service = path.removeprefix(_PREFIX + "/").split("/", 1)[0]
        elif self.root_service is not None and self.root_service not in self.directory.cards:
            service = self.root_service  # served at the root when it is live
        else:
            service = ""
        message = f"no agent {service!r} on this gateway" if service else f"no such path {path!r}"
        body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32601, "message": message}}
        await JSONResponse(body, status_code=404)(scope, receive, send)


@dataclass(slots=True)
class _Shared:
    """The tasks every gateway process shares: the store and its events on Redis, and
    the cancels told over the bus."""

    redis: Redis
    store: RedisTaskStore
    events: RedisTaskEvents
    webhooks: RedisPushConfigs
    url: str
    peers: PeerCancels = field(init=False)

    @classmethod
    def of(cls, url: str, settings: Settings, gateway: GatewaySettings, bus: Bus) -> _Shared:
        try:
            redis = connect(url)
        except ImportError as exc:
            raise ConfigurationError(
                f"a shared task store needs redis-py: pip install 'agentbus[redis]' ({exc})"
            ) from exc
        prefix = f"{settings.exchange}:a2a"
        store = RedisTaskStore(
            redis,
            prefix=prefix,
            size=gateway.max_tasks,
            retention=gateway.task_retention,
            open_expiry=gateway.request_timeout + gateway.task_retention,
            waiting_expiry=gateway.waiting_retention,
        )
        # A task's webhooks last as long as the task may: waiting, then finished.
        expiry = max(gateway.request_timeout, gateway.waiting_retention) + gateway.task_retention
        webhooks = RedisPushConfigs(redis, prefix=prefix, expiry=expiry)
        return cls(redis, store, RedisTaskEvents(redis, store), webhooks, url)

    async def start(self) -> None:
        await reachable(self.redis, self.url)
        await self.peers.start()

    async def aclose(self) -> None:
        await self.redis.aclose()


def _is_public(scope: Scope) -> bool:
    # Discovery is open: the listing and the cards (they name the security scheme).
    path: str = scope.get("path", "")
    return scope.get("method") == "GET" and (
        path == _PREFIX or path.endswith(AGENT_CARD_WELL_KNOWN_PATH)
    )


class _BodyLimit:
    """Refuse request bodies over ``max_size`` bytes: the SDK answers a JSON-RPC error."""

    def __init__(self, app: ASGIApp, max_size: int) -> None:
        self.app = app
        self.max_size = max_size

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared <= self.max_size:
            # The HTTP parser reads no more than the declared length: nothing to count.
            await self.app(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            # Once over, over on every later read too (a second reader gets the same answer).
            if (declared is not None and declared > self.max_size) or seen > self.max_size:
                raise HTTPException(413, f"the body is over {self.max_size} bytes")
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_size:
                raise HTTPException(413, f"the body is over {self.max_size} bytes")
            return message

        await self.app(scope, limited, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
