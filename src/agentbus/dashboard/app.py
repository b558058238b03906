"""The HTTP face: the static page, the boards as JSON, server-sent events, token-gated actions.

Thin by design: every answer is a board's snapshot or a board's action; nothing here
decides anything about the team.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import orjson
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Lifespan

from agentbus._exceptions import AgentBusError, InvalidParameters, UsageError
from agentbus._logging import get_logger
from agentbus.dashboard._changes import TOPICS
from agentbus.dashboard._dashboard import Dashboard
from agentbus.dashboard._settings import DashboardSettings

__all__ = ["create_app"]

STATIC: Final = Path(__file__).resolve().parent / "static"
_KEEPALIVE: Final = 15.0  # s: an SSE comment line when nothing changed
_COALESCE: Final = 0.05  # s: changes closer together than this go out as one update
_HEADERS: Final = {
    # Everything the page needs is served from here: no CDN, no inline script.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

_LOOPBACK: Final = frozenset({"127.0.0.1", "::1", "localhost"})
_LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]", "::1")

_log = get_logger("agentbus.dashboard")

Handler = Callable[[Request], Awaitable[Response]]


class _JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def create_app(
    get_dashboard: Callable[[], Dashboard],
    settings: DashboardSettings,
    *,
    lifespan: Lifespan[Starlette] | None = None,
) -> Starlette:
    """Return the dashboard's ASGI app over the dashboard ``get_dashboard`` returns."""

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers=_HEADERS)

    async def state(request: Request) -> Response:
        dashboard = get_dashboard()
        # Each snapshot is at least as new as its version: the page drops an older one
        # that arrives after it (this answer and the event stream race on page load).
        versions = dashboard.changes.versions()
        body: dict[str, Any] = {topic: dashboard.snapshot(topic) for topic in TOPICS}
        body["versions"] = versions
        body["actions"] = settings.token is not None
        return _JSON(body, headers={"Cache-Control": "no-store"})

    async def events(request: Request) -> Response:
        dashboard = get_dashboard()

        async def stream() -> AsyncIterator[dict[str, str]]:
            seen: dict[str, int] = {}
            while True:
                changed = await dashboard.changes.wait(seen, timeout=_KEEPALIVE)
                if not changed:
                    continue  # sse-starlette's ping keeps the connection alive
                seen = dashboard.changes.versions()
                for topic in changed:
                    data = orjson.dumps(dashboard.snapshot(topic)).decode()
                    yield {"event": topic, "id": str(seen[topic]), "data": data}
                await asyncio.sleep(_COALESCE)  # a rate bound, not a wait for a condition

        return EventSourceResponse(stream(), ping=int(_KEEPALIVE), headers=_HEADERS)

    def guarded(action: Callable[[Request], Awaitable[Any]]) -> Handler:
        async def endpoint(request: Request) -> Response:
            if settings.token is None:
                return _error(403, "actions are off: the dashboard was started without a token")
            header = request.headers.get("authorization", "")
            scheme, _, presented = header.partition(" ")
            if scheme.lower() != "bearer" or not settings.allows(presented.strip()):
                _log.warning("action refused", path=request.url.path, reason="bad token")
                return _error(401, "a valid token is needed for this action")
            try:
                return _JSON(await action(request))
            except InvalidParameters as exc:
                return _error(400, str(exc))
            except UsageError as exc:
                return _error(409, str(exc))
            except AgentBusError as exc:
                return _error(502, f"{type(exc).__name__}: {exc}")

        return endpoint

    async def whoami(request: Request) -> dict[str, Any]:
        return {"actions": True}

    async def cancel_plan(request: Request) -> dict[str, Any]:
        plan_id = request.path_params["plan_id"]
        answer = await get_dashboard().plans.cancel(plan_id)
        _log.info("plan cancel sent", plan_id=plan_id, request_id=answer["request_id"])
        return answer

    async def dead_letters(request: Request) -> Response:
        # Looking is read-only: every message goes back to the queue (see DeadLetters).
        dashboard = get_dashboard()
        try:
            await dashboard.dead_letters.refresh()
        except AgentBusError as exc:
            return _error(409, str(exc))
        version = str(dashboard.changes.versions()["dead_letters"])
        return _JSON(
            dashboard.dead_letters.snapshot(),
            headers={"Cache-Control": "no-store", "X-Board-Version": version},
        )

    async def settle(request: Request, how: str) -> dict[str, Any]:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError as exc:
            raise InvalidParameters(f"the body is not JSON: {exc}") from exc
        ids = body.get("ids") if isinstance(body, dict) else None
        if not (isinstance(ids, list) and ids and all(isinstance(i, str) for i in ids)):
            raise InvalidParameters('expected {"ids": ["<message id>", ...]}')
        board = get_dashboard().dead_letters
        by = f"token@{request.client.host if request.client else 'unknown'}"
        action = board.replay if how == "replay" else board.discard
        settled = await action(ids, by=by)
        return {how + "ed": settled.done, "failed": settled.failed}

    async def replay(request: Request) -> dict[str, Any]:
        return await settle(request, "replay")

    async def discard(request: Request) -> dict[str, Any]:
        return await settle(request, "discard")

    routes = [
        Route("/", page),
        Route("/api/state", state),
        Route("/api/events", events),
        Route("/api/auth", guarded(whoami), methods=["POST"]),
        Route("/api/plans/{plan_id}/cancel", guarded(cancel_plan), methods=["POST"]),
        Route("/api/dead-letters", dead_letters),
        Route("/api/dead-letters/replay", guarded(replay), methods=["POST"]),
        Route("/api/dead-letters/discard", guarded(discard), methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    # Bound to this machine, answer only to this machine's names: a page elsewhere
    # whose name is made to point here (DNS rebinding) gets a 400, not the team.
    hosts = list(_LOOPBACK_NAMES) if settings.host in _LOOPBACK else ["*"]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=hosts)]
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)


def _error(status: int, message: str) -> Response:
    return _JSON({"error": message}, status_code=status)
