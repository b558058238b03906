"""Who may read and who may act: the one token, by header or by a session; the read gate.

The token is presented as ``Authorization: Bearer <token>`` (API clients) or once, at the
login page or the page's own form, which starts a session held in an HttpOnly,
SameSite=Strict cookie (browsers: the page's script never holds the token). Reading is
open on localhost or with ``public_read``; otherwise every path but the login page and its
stylesheet needs the token: APIs answer 401, pages redirect to the login page. Actions
always need the token; one presented by the session cookie also needs a same-origin
request (the browser's ``Sec-Fetch-Site``, else ``Origin``), against cross-site forgery.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import parse_qs, urlsplit

from starlette.datastructures import Headers
from starlette.requests import HTTPConnection, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocketClose

from agentbus._http import bearer_key
from agentbus._logging import get_logger
from agentbus.dashboard._http import HEADERS, JSON, STATIC, error
from agentbus.dashboard._sessions import Sessions
from agentbus.dashboard._settings import DashboardSettings

__all__ = ["OPEN_PATHS", "REALM", "Access", "ReadGate", "login_routes"]

OPEN_PATHS: Final = frozenset({"/login", "/logout", "/static/style.css"})
"""What anyone may fetch: the login page, logging out, and the stylesheet both pages use."""
_MAX_FORM: Final = 8192  # bytes: a login form is a token, not an upload
_ERROR_HIDDEN: Final = '<p id="login-error" role="alert" hidden>'
REALM: Final = {"WWW-Authenticate": 'Bearer realm="agentbus dashboard"'}

_log = get_logger("agentbus.dashboard")


def _client(connection: HTTPConnection) -> str:
    return connection.client.host if connection.client else "unknown"


def same_origin(headers: Headers) -> bool:
    """Whether the browser says the request comes from this dashboard's own page."""
    site = headers.get("sec-fetch-site")
    if site is not None:
        return site == "same-origin"
    origin = headers.get("origin")
    return origin is not None and urlsplit(origin).netloc == headers.get("host")


class Access:
    """The token's checks for one dashboard: by header, by session, for reading, for acting."""

    def __init__(self, settings: DashboardSettings, sessions: Sessions | None = None) -> None:
        self.settings = settings
        self.sessions = sessions if sessions is not None else Sessions()
        # Cookies are not kept apart by port: two dashboards on one host keep theirs apart.
        self.cookie = f"agentbus_dashboard_{settings.port}"

    def bearer(self, headers: Headers) -> bool | None:
        """Whether the ``Authorization`` header holds the token; None: there is no header."""
        header = headers.get("authorization")
        if header is None:
            return None
        return self.settings.allows(bearer_key(header))

    def in_session(self, connection: HTTPConnection) -> bool:
        return self.sessions.valid(connection.cookies.get(self.cookie))

    def holds_token(self, connection: HTTPConnection) -> bool:
        """Whether the request presents the token (a header decides where there is one)."""
        bearer = self.bearer(connection.headers)
        return bearer if bearer is not None else self.in_session(connection)

    def may_read(self, connection: HTTPConnection) -> bool:
        return self.settings.reading_open or self.holds_token(connection)

    def may_act(self, connection: HTTPConnection) -> bool:
        """Whether the request may act: the token by header, or a session from this page."""
        bearer = self.bearer(connection.headers)
        if bearer is not None:
            return bearer
        return self.in_session(connection) and same_origin(connection.headers)

    def start_session(self, request: Request, response: Response) -> None:
        response.set_cookie(
            self.cookie,
            self.sessions.start(),
            max_age=int(self.sessions.lifetime),
            path="/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )

    def end_session(self, request: Request, response: Response) -> None:
        self.sessions.end(request.cookies.get(self.cookie))
        response.delete_cookie(self.cookie, path="/", httponly=True, samesite="strict")


class ReadGate:
    """ASGI middleware: beyond localhost, no read without the token (deny by default)."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] not in ("http", "websocket")
            or self.access.settings.reading_open
            or scope["path"] in OPEN_PATHS
            or self.access.holds_token(HTTPConnection(scope))
        ):
            await self.app(scope, receive, send)
            return
        refusal: ASGIApp
        if scope["type"] == "websocket":
            refusal = WebSocketClose(code=1008)  # policy violation
        elif scope["path"].startswith("/api/"):
            refusal = error(401, "reading this dashboard needs its token", headers=REALM)
        else:
            refusal = RedirectResponse(
                "/login", status_code=303, headers={"Cache-Control": "no-store"}
            )
        await refusal(scope, receive, send)


async def _form_token(request: Request) -> str:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > _MAX_FORM:
            return ""
    values = parse_qs(body.decode("utf-8", "replace")).get("token", [""])
    return values[0].strip()


def login_routes(access: Access) -> list[BaseRoute]:
    """``/login`` (the page and its form), ``/logout``, and ``POST /api/auth`` (the header)."""
    settings = access.settings
    page = (STATIC / "login.html").read_text(encoding="utf-8")
    refused = page.replace(_ERROR_HIDDEN, _ERROR_HIDDEN.replace(" hidden", ""))
    headers = HEADERS | {"Cache-Control": "no-store"}

    async def login_page(request: Request) -> Response:
        if settings.token is None or access.holds_token(request):
            return RedirectResponse("/", status_code=303)  # nothing to log in to, or done
        return HTMLResponse(page, headers=headers)

    async def login(request: Request) -> Response:
        if settings.token is None:
            return RedirectResponse("/", status_code=303)
        if not settings.allows(await _form_token(request)):
            _log.warning("dashboard login refused", client=_client(request))
            return HTMLResponse(refused, status_code=401, headers=headers | REALM)
        response = RedirectResponse("/", status_code=303)
        access.start_session(request, response)
        _log.info("dashboard login", client=_client(request))
        return response

    async def logout(request: Request) -> Response:
        response = RedirectResponse("/" if settings.reading_open else "/login", status_code=303)
        access.end_session(request, response)
        return response

    async def auth(request: Request) -> Response:
        """The page's header form: the token by header, once; a session for what follows."""
        if settings.token is None:
            return error(403, "actions are off: the dashboard was started without a token")
        if not access.bearer(request.headers):
            _log.warning("dashboard login refused", client=_client(request))
            return error(401, "a valid token is needed", headers=REALM)
        response = JSON({"actions": True}, headers={"Cache-Control": "no-store"})
        access.start_session(request, response)
        _log.info("dashboard login", client=_client(request))
        return response

    return [
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/api/auth", auth, methods=["POST"]),
    ]
