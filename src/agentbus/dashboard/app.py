"""The HTTP face: the static page, the boards as JSON, server-sent events, token-gated actions.

Thin by design: every answer is a board's snapshot or a board's action; nothing here
decides anything about the team. Who may read and act is ``_access``'s: on localhost
reading is open; beyond it every read needs the token too, unless told ``public_read``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
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

from agentbus._exceptions import AgentBusError, InvalidParameters, QuestionClosed, UsageError
from agentbus._logging import get_logger
from agentbus.dashboard._access import REALM, Access, ReadGate, login_routes
from agentbus.dashboard._changes import TOPICS
from agentbus.dashboard._dashboard import Dashboard
from agentbus.dashboard._download import download
from agentbus.dashboard._http import HEADERS, JSON, STATIC, error
from agentbus.dashboard._settings import DashboardSettings

__all__ = ["create_app"]

_KEEPALIVE: Final = 15.0  # s: an SSE comment line when nothing changed
_COALESCE: Final = 0.05  # s: changes closer together than this go out as one update

_LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]", "::1")

_log = get_logger("agentbus.dashboard")

Handler = Callable[[Request], Awaitable[Response]]


def create_app(
    get_dashboard: Callable[[], Dashboard],
    settings: DashboardSettings,
    *,
    lifespan: Lifespan[Starlette] | None = None,
) -> Starlette:
    """Return the dashboard's ASGI app over the dashboard ``get_dashboard`` returns.

    Raises ``ConfigurationError`` for settings that would show the team beyond localhost
    to anyone by default (no token, not ``public_read``).
    """
    settings.check_exposure()
    access = Access(settings)

    async def page(request: Request) -> Response:
        # Not cached: after logout, the page is asked for again (and the gate answers).
        return FileResponse(STATIC / "index.html", headers=HEADERS | {"Cache-Control": "no-store"})

    async def state(request: Request) -> Response:
        dashboard = get_dashboard()
        # Each snapshot is at least as new as its version: the page drops an older one
        # that arrives after it (this answer and the event stream race on page load).
        versions = dashboard.changes.versions()
        body: dict[str, Any] = {topic: dashboard.snapshot(topic) for topic in TOPICS}
        body["versions"] = versions
        body["actions"] = settings.token is not None
        body["session"] = access.holds_token(request)  # the token given: actions allowed
        body["reading_open"] = settings.reading_open
        return JSON(body, headers={"Cache-Control": "no-store"})

    async def events(request: Request) -> Response:
        dashboard = get_dashboard()

        async def stream() -> AsyncIterator[dict[str, str]]:
            seen: dict[str, int] = {}
            while True:
                changed = await dashboard.changes.wait(seen, timeout=_KEEPALIVE)
                if not access.may_read(request):
                    return  # its session ended (logout, expiry): so does the stream
                if not changed:
                    continue  # sse-starlette's ping keeps the connection alive
                seen = dashboard.changes.versions()
                for topic in changed:
                    data = orjson.dumps(dashboard.snapshot(topic)).decode()
                    yield {"event": topic, "id": str(seen[topic]), "data": data}
                await asyncio.sleep(_COALESCE)  # a rate bound, not a wait for a condition

        return EventSourceResponse(stream(), ping=int(_KEEPALIVE), headers=HEADERS)

    def guarded(action: Callable[[Request], Awaitable[Any]]) -> Handler:
        async def endpoint(request: Request) -> Response:
            if settings.token is None:
                return error(403, "actions are off: the dashboard was started without a token")
            if not access.may_act(request):
                _log.warning("action refused", path=request.url.path, reason="no valid token")
                return error(401, "a valid token is needed for this action", headers=REALM)
            try:
                return JSON(await action(request))
            except InvalidParameters as exc:
                return error(400, str(exc))
            except UsageError as exc:
                return error(409, str(exc))
            except QuestionClosed as exc:  # not open: unknown, expired, answered already
                body = {"error": str(exc), "code": exc.code, **exc.details}
                return JSON(body, status_code=409)
            except AgentBusError as exc:
                return error(502, f"{type(exc).__name__}: {exc}")

        return endpoint

    async def cancel_plan(request: Request) -> dict[str, Any]:
        plan_id = request.path_params["plan_id"]
        answer = await get_dashboard().plans.cancel(plan_id)
        _log.info("plan cancel sent", plan_id=plan_id, request_id=answer["request_id"])
        return answer

    async def artifact(request: Request) -> Response:
        dashboard = get_dashboard()
        plan_id, artifact_id = request.path_params["plan_id"], request.path_params["artifact_id"]
        ref = dashboard.plans.artifact(plan_id, artifact_id)
        if ref is None:
            return error(404, f"plan {plan_id!r} returned no artifact {artifact_id!r} seen here")
        _log.info("artifact download", plan_id=plan_id, artifact=artifact_id, by=_by(request))
        return await download(dashboard.bus, ref)

    async def dead_letters(request: Request) -> Response:
        # Looking is read-only: every message goes back to the queue (see DeadLetters).
        dashboard = get_dashboard()
        try:
            await dashboard.dead_letters.refresh()
        except AgentBusError as exc:
            return error(409, str(exc))
        version = str(dashboard.changes.versions()["dead_letters"])
        return JSON(
            dashboard.dead_letters.snapshot(),
            headers={"Cache-Control": "no-store", "X-Board-Version": version},
        )

    async def answer_question(request: Request) -> dict[str, Any]:
        body = await _body(request)
        decline = body.get("decline") is True
        if not decline and "answer" not in body:
            raise InvalidParameters('expected {"answer": <JSON>} or {"decline": true}')
        question_id = request.path_params["question_id"]
        sent = await get_dashboard().questions.answer(
            question_id, body.get("answer"), decline=decline, by=_by(request)
        )
        if isinstance(sent.error, QuestionClosed):
            raise sent.error
        return sent.view()

    async def settle(request: Request, how: str) -> dict[str, Any]:
        body = await _body(request)
        ids = body.get("ids")
        if not (isinstance(ids, list) and ids and all(isinstance(i, str) for i in ids)):
            raise InvalidParameters('expected {"ids": ["<message id>", ...]}')
        board = get_dashboard().dead_letters
        action = board.replay if how == "replay" else board.discard
        settled = await action(ids, by=_by(request))
        return {how + "ed": settled.done, "failed": settled.failed}

    async def replay(request: Request) -> dict[str, Any]:
        return await settle(request, "replay")

    async def discard(request: Request) -> dict[str, Any]:
        return await settle(request, "discard")

    routes = [
        Route("/", page),
        Route("/api/state", state),
        Route("/api/events", events),
        Route("/api/plans/{plan_id}/cancel", guarded(cancel_plan), methods=["POST"]),
        Route("/api/plans/{plan_id}/artifacts/{artifact_id}", artifact),
        Route("/api/questions/{question_id}/answer", guarded(answer_question), methods=["POST"]),
        Route("/api/dead-letters", dead_letters),
        Route("/api/dead-letters/replay", guarded(replay), methods=["POST"]),
        Route("/api/dead-letters/discard", guarded(discard), methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
        *login_routes(access),
    ]
    # Bound to this machine, answer only to this machine's names: a page elsewhere
    # whose name is made to point here (DNS rebinding) gets a 400, not the team.
    hosts = [*_LOOPBACK_NAMES, settings.host] if settings.loopback else ["*"]
    middleware = [
        Middleware(TrustedHostMiddleware, allowed_hosts=hosts),
        Middleware(ReadGate, access=access),
    ]
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)


def _by(request: Request) -> str:
    """Who acts, as the logs name them: the token, and the client's address."""
    return f"token@{request.client.host if request.client else 'unknown'}"


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        raise InvalidParameters(f"the body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidParameters("the body is not a JSON object")
    return body
