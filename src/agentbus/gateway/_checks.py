"""What A2A 1.0 refuses and the SDK's routes let through: checked before the SDK's endpoint.

- ``ListTasks`` with a ``status`` that is no task state: the SDK parses params leniently
  (unknown enum names become the default, no filter), so it would list every task; here it
  is ``InvalidParamsError`` (``-32602``, HTTP 400 on the HTTP+JSON binding).
- a 0.3 JSON-RPC method (``message/send``) sent with ``A2A-Version: 1.0``: the SDK's 0.3
  adapter has no 0.3 code for "version not supported" and answers ``-32603``; here it is
  ``VersionNotSupportedError`` (``-32009``).

The errors are the SDK's own, rendered by the SDK's helpers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from a2a.compat.v0_3.jsonrpc_adapter import JSONRPC03Adapter
from a2a.server.request_handlers.response_helpers import build_error_response
from a2a.types import a2a_pb2 as a2a
from a2a.utils.constants import VERSION_HEADER
from a2a.utils.error_handlers import rest_error_handler
from a2a.utils.errors import A2AError, InvalidParamsError, VersionNotSupportedError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

__all__ = ["checked_jsonrpc", "checked_rest", "rpc_refusal", "status_refusal"]

Endpoint = Callable[[Request], Awaitable[Response]]

_STATE_NAMES = frozenset(a2a.TaskState.keys())
_STATE_NUMBERS = frozenset(a2a.TaskState.values())
_V03_METHODS = frozenset(JSONRPC03Adapter.METHOD_TO_MODEL)
_LIST_TASKS = "/tasks"


def status_refusal(status: Any) -> InvalidParamsError | None:
    """Return the error for a ``ListTasks`` ``status`` filter that is no task state, else None."""
    if status is None or _is_state(status):
        return None
    names = ", ".join(sorted(_STATE_NAMES - {"TASK_STATE_UNSPECIFIED"}))
    return InvalidParamsError(message=f"status {status!r} is not a task state: one of {names}")


def _is_state(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value in _STATE_NUMBERS
    if isinstance(value, str):
        return value in _STATE_NAMES or (value.isdigit() and int(value) in _STATE_NUMBERS)
    return False


def rpc_refusal(body: Any, version: str | None) -> A2AError | None:
    """Return the A2A error a JSON-RPC request gets before the SDK sees it, else None."""
    if not isinstance(body, dict):
        return None  # the SDK answers what is not a JSON-RPC request
    method = body.get("method")
    if method in _V03_METHODS and version and version.split(".")[0].strip() != "0":
        return VersionNotSupportedError(
            message=f"{method!r} is an A2A 0.3 method, and the request says A2A-Version "
            f"{version}: use the 1.0 method, or send no A2A-Version header for 0.3"
        )
    params = body.get("params")
    if method == "ListTasks" and isinstance(params, dict):
        return status_refusal(params.get("status"))
    return None


def _checked_rpc(endpoint: Endpoint) -> Endpoint:
    async def checked(request: Request) -> Response:
        # Starlette keeps the parsed body: the SDK's endpoint reads the same one. What does
        # not parse (or is over the size limit) is left to the SDK to answer.
        with contextlib.suppress(ValueError, HTTPException):
            body = await request.json()
            refusal = rpc_refusal(body, request.headers.get(VERSION_HEADER))
            if refusal is not None:
                request_id = body.get("id")
                if not isinstance(request_id, str | int) or isinstance(request_id, bool):
                    request_id = None
                return JSONResponse(build_error_response(request_id, refusal))
        return await endpoint(request)

    return checked


def _checked_list(endpoint: Endpoint) -> Endpoint:
    @rest_error_handler
    async def checked(request: Request) -> Response:
        for status in request.query_params.getlist("status"):
            refusal = status_refusal(status)
            if refusal is not None:
                raise refusal
        return await endpoint(request)

    return checked


def checked_jsonrpc(routes: Sequence[BaseRoute]) -> list[BaseRoute]:
    """Return the SDK's JSON-RPC routes, each endpoint behind ``rpc_refusal``."""
    return _wrapped(routes, lambda route: True, _checked_rpc)


def checked_rest(routes: Sequence[BaseRoute], prefix: str) -> list[BaseRoute]:
    """Return the SDK's HTTP+JSON routes, ``GET prefix/tasks`` behind ``status_refusal``."""
    return _wrapped(
        routes,
        lambda route: route.path.endswith(prefix + _LIST_TASKS) and "GET" in (route.methods or ()),
        _checked_list,
    )


def _wrapped(
    routes: Sequence[BaseRoute],
    chosen: Callable[[Route], bool],
    wrap: Callable[[Endpoint], Endpoint],
) -> list[BaseRoute]:
    out: list[BaseRoute] = []
    for route in routes:
        if isinstance(route, Mount):
            route = Mount(route.path, routes=_wrapped(list(route.routes), chosen, wrap))
        elif isinstance(route, Route) and chosen(route):
            route = Route(route.path, wrap(route.endpoint), methods=route.methods)
        out.append(route)
    return out
