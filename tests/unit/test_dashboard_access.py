"""Who may read the dashboard and who may act: the token beyond localhost, sessions, the CLI.

The app is served by uvicorn in this loop over a dashboard on the in-memory bus, and
asked over HTTP as a browser or an API client would ask it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

import httpx
import pytest
import uvicorn

from agentbus import Settings
from agentbus._exceptions import ConfigurationError
from agentbus.bus import DeadLetter, DeadLetters, Settled
from agentbus.dashboard import Dashboard, DashboardSettings
from agentbus.dashboard._sessions import Sessions
from agentbus.dashboard._settings import is_loopback
from agentbus.dashboard.app import create_app
from agentbus.testing import MemoryBroker, MemoryBus

TOKEN = "s3cret-token-for-the-tests"
PAGES = ("/", "/static/app.js", "/static/index.html", "/no-such-page")
APIS = ("/api/state", "/api/events", "/api/dead-letters")
ACTIONS = (
    ("/api/plans/plan-1/cancel", None),
    ("/api/dead-letters/replay", {"ids": ["poison"]}),
    ("/api/dead-letters/discard", {"ids": ["poison"]}),
)
SAME_ORIGIN = {"Sec-Fetch-Site": "same-origin"}


class Letters:
    """A dead-letter queue holding one letter, settled in memory."""

    def __init__(self) -> None:
        self.letters = [
            DeadLetter(
                id="poison",
                reason="rejected",
                queue="svc",
                exchange="team",
                routing_key="agent.svc.request",
                sender_id="client",
                dead_lettered_at=None,
                deaths=1,
                size=2,
                body="{}",
                truncated=False,
            )
        ]

    async def count(self) -> int:
        return len(self.letters)

    async def browse(self, limit: int = 200) -> list[DeadLetter]:
        return self.letters[:limit]

    async def replay(self, ids: Collection[str]) -> Settled:
        return self._settle(ids)

    async def discard(self, ids: Collection[str]) -> Settled:
        return self._settle(ids)

    def _settle(self, ids: Collection[str]) -> Settled:
        known = {letter.id for letter in self.letters}
        self.letters = [letter for letter in self.letters if letter.id not in ids]
        return Settled(
            done=[i for i in ids if i in known],
            failed={i: "not in the dead-letter queue" for i in ids if i not in known},
        )


@dataclass
class Served:
    client: httpx.AsyncClient
    dashboard: Dashboard
    cookie: str

    async def login(self, token: str = TOKEN) -> httpx.Response:
        """Log in with the form; the client keeps no cookie (each test sends its own)."""
        response = await self.client.post("/login", data={"token": token})
        self.client.cookies.clear()
        return response

    async def session(self) -> str:
        response = await self.login()
        assert response.status_code == 303
        value = response.cookies.get(self.cookie)
        assert value
        return f"{self.cookie}={value}"


@asynccontextmanager
async def served(**options: Any) -> AsyncIterator[Served]:
    """The dashboard app with ``options`` (host, token, public_read), served on 127.0.0.1."""
    settings = DashboardSettings(**options)
    bus = await MemoryBus(MemoryBroker(), Settings(), agent_id="dashboard-1").open()
    dashboard = Dashboard(bus, dead_letters=cast(DeadLetters, Letters()))
    app = create_app(lambda: dashboard, settings)
    # A socket listening before the server starts: connections wait in its backlog.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    config = uvicorn.Config(app, lifespan="off", log_level="warning", ws="none")
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        async with dashboard, httpx.AsyncClient(base_url=url, timeout=10) as client:
            yield Served(client, dashboard, f"agentbus_dashboard_{settings.port}")
    finally:
        server.should_exit = server.force_exit = True
        await serving
        sock.close()
        await bus.aclose()


async def read(client: httpx.AsyncClient, path: str, **headers: str) -> httpx.Response:
    """GET ``path``; for the event stream, the status and the first event (then hang up)."""
    if path != "/api/events":
        return await client.get(path, headers=headers)
    async with client.stream("GET", path, headers=headers) as response:
        if response.status_code == 200:
            async for line in response.aiter_lines():
                if line.startswith("event:"):
                    break
        else:
            await response.aread()
        return response


@pytest.mark.parametrize("path", PAGES + APIS)
async def test_beyond_localhost_every_read_needs_the_token(path: str) -> None:
    """No token: pages go to the login page, APIs answer 401; the token, by header or session."""
    async with served(host="0.0.0.0", token=TOKEN) as dash:
        refused = await read(dash.client, path)
        wrong = await read(dash.client, path, Authorization="Bearer not-the-token")
        for answer in (refused, wrong):
            if path.startswith("/api/"):
                assert answer.status_code == 401
                assert answer.headers["www-authenticate"].startswith("Bearer")
                assert "token" in answer.json()["error"]
            else:
                assert answer.status_code == 303
                assert answer.headers["location"] == "/login"
        expected = 404 if path == "/no-such-page" else 200
        by_header = await read(dash.client, path, Authorization=f"Bearer {TOKEN}")
        by_session = await read(dash.client, path, Cookie=await dash.session())
        assert (by_header.status_code, by_session.status_code) == (expected, expected)


async def test_what_anyone_may_fetch_shows_nothing_of_the_team() -> None:
    """The login page and its stylesheet are open; neither holds a board."""
    async with served(host="0.0.0.0", token=TOKEN) as dash:
        page = await dash.client.get("/login")
        style = await dash.client.get("/static/style.css")
        assert (page.status_code, style.status_code) == (200, 200)
        assert 'action="/login"' in page.text
        assert 'id="services"' not in page.text  # no board, no script: a form
        assert "<script" not in page.text
        assert page.headers["cache-control"] == "no-store"
        assert "default-src 'self'" in page.headers["content-security-policy"]


async def test_the_login_form_starts_a_session_held_in_a_strict_http_only_cookie() -> None:
    """A refused token shows the login page again (401); the good one sets the cookie."""
    async with served(host="0.0.0.0", token=TOKEN) as dash:
        refused = await dash.login("not-the-token")
        assert refused.status_code == 401
        assert '<p id="login-error" role="alert">' in refused.text
        assert "set-cookie" not in refused.headers
        accepted = await dash.login()
        assert (accepted.status_code, accepted.headers["location"]) == (303, "/")
        cookie = accepted.headers["set-cookie"].lower()
        for attribute in ("httponly", "samesite=strict", "path=/", "max-age=43200"):
            assert attribute in cookie
        assert TOKEN.lower() not in cookie  # the cookie holds a session, not the token
        state = await dash.client.get("/api/state", headers={"Cookie": await dash.session()})
        assert state.json()["session"] is True


async def test_logout_ends_the_session_here_even_if_the_cookie_is_kept() -> None:
    """After logout the old cookie reads nothing; logout sends the browser to the login page."""
    async with served(host="0.0.0.0", token=TOKEN) as dash:
        cookie = await dash.session()
        assert (await dash.client.get("/api/state", headers={"Cookie": cookie})).status_code == 200
        out = await dash.client.post("/logout", headers={"Cookie": cookie})
        dash.client.cookies.clear()
        assert (out.status_code, out.headers["location"]) == (303, "/login")
        assert "max-age=0" in out.headers["set-cookie"].lower()
        assert (await dash.client.get("/api/state", headers={"Cookie": cookie})).status_code == 401


async def test_an_open_event_stream_ends_with_its_session() -> None:
    """Logged out while following: the stream closes at the next change, sending nothing more."""
    async with served(host="0.0.0.0", token=TOKEN) as dash:
        cookie = await dash.session()
        after: list[str] = []
        async with dash.client.stream("GET", "/api/events", headers={"Cookie": cookie}) as stream:
            assert stream.status_code == 200
            lines = stream.aiter_lines()
            seen: set[str] = set()
            async for line in lines:  # the first snapshot of each board, whole
                if line.startswith("event:"):
                    seen.add(line.removeprefix("event:").strip())
                elif line.startswith("data:") and len(seen) == len(
                    dash.dashboard.changes.versions()
                ):
                    break
            await dash.client.post("/logout", headers={"Cookie": cookie})
            dash.dashboard.changes.touch("agents")
            async with asyncio.timeout(10):  # an open stream would hang here: fail instead
                after = [line async for line in lines if line.startswith(("event:", "data:"))]
        assert after == []


@pytest.mark.parametrize(("path", "body"), ACTIONS)
async def test_actions_need_the_token_and_a_session_needs_a_same_origin_request(
    path: str, body: dict[str, Any] | None
) -> None:
    """Beyond localhost or not, an action needs the token; a cookie alone is not enough
    when the request comes from another site (cross-site request forgery)."""
    async with served(host="0.0.0.0", token=TOKEN, public_read=True) as dash:
        post = dash.client.post
        assert (await post(path, json=body)).status_code == 401
        cookie = await dash.session()
        cross = await post(
            path, json=body, headers={"Cookie": cookie, "Sec-Fetch-Site": "cross-site"}
        )
        no_origin = await post(path, json=body, headers={"Cookie": cookie})
        foreign = await post(
            path, json=body, headers={"Cookie": cookie, "Origin": "http://evil.example"}
        )
        assert [r.status_code for r in (cross, no_origin, foreign)] == [401, 401, 401]
        # The plan is unknown (409) and the letter is there (200): past the token, both.
        allowed = 409 if "plans" in path else 200
        same = await post(path, json=body, headers={"Cookie": cookie, **SAME_ORIGIN})
        assert same.status_code == allowed
        by_header = await post(path, json=body, headers={"Authorization": f"Bearer {TOKEN}"})
        assert by_header.status_code == allowed


async def test_the_header_form_gives_the_token_once_and_gets_a_session() -> None:
    """POST /api/auth with the token by header: a session cookie; a wrong token: 401."""
    async with served(host="127.0.0.1", token=TOKEN) as dash:
        wrong = await dash.client.post("/api/auth", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        right = await dash.client.post("/api/auth", headers={"Authorization": f"Bearer {TOKEN}"})
        dash.client.cookies.clear()
        assert right.json() == {"actions": True}
        cookie = f"{dash.cookie}={right.cookies[dash.cookie]}"
        state = await dash.client.get("/api/state", headers={"Cookie": cookie})
        assert state.json()["session"] is True
        replay = await dash.client.post(
            "/api/dead-letters/replay",
            json={"ids": ["poison"]},
            headers={"Cookie": cookie, **SAME_ORIGIN},
        )
        assert replay.json() == {"replayed": ["poison"], "failed": {}}


@pytest.mark.parametrize("path", PAGES[:1] + APIS)
async def test_on_localhost_reading_stays_open_and_actions_need_a_token(path: str) -> None:
    """The demo's dashboard: no token, the page and its APIs for whoever is on this machine."""
    async with served(host="127.0.0.1") as dash:
        assert (await read(dash.client, path)).status_code == 200
        state = await dash.client.get("/api/state")
        assert state.json()["reading_open"] is True
        assert state.json()["session"] is False
        assert (await dash.client.get("/login")).status_code == 303  # nothing to log in to
        cancel = await dash.client.post("/api/plans/plan-1/cancel")
        assert cancel.status_code == 403


@pytest.mark.parametrize("token", [TOKEN, None])
@pytest.mark.parametrize("path", PAGES[:1] + APIS)
async def test_public_read_opens_reading_beyond_localhost_and_not_actions(
    path: str, token: str | None
) -> None:
    """--public-read: the team for whoever reaches the page; actions still need the token."""
    async with served(host="0.0.0.0", token=token, public_read=True) as dash:
        assert (await read(dash.client, path)).status_code == 200
        cancel = await dash.client.post("/api/plans/plan-1/cancel")
        assert cancel.status_code == (401 if token else 403)


def test_beyond_localhost_without_a_token_or_public_read_the_app_is_refused() -> None:
    """The library refuses what the CLI refuses: no app that shows the team to anyone."""
    with pytest.raises(ConfigurationError, match="--public-read"):
        create_app(lambda: cast(Dashboard, None), DashboardSettings(host="0.0.0.0"))
    with pytest.raises(ConfigurationError, match="empty"):
        DashboardSettings(host="0.0.0.0", token="").check_exposure()
    DashboardSettings(host="0.0.0.0", public_read=True).check_exposure()
    DashboardSettings(host="0.0.0.0", token=TOKEN).check_exposure()
    DashboardSettings(host="127.0.0.1").check_exposure()


def test_public_read_and_the_token_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """AGENTBUS_DASHBOARD_PUBLIC_READ and _TOKEN are the settings' own."""
    monkeypatch.setenv("AGENTBUS_DASHBOARD_HOST", "0.0.0.0")
    monkeypatch.setenv("AGENTBUS_DASHBOARD_PUBLIC_READ", "true")
    settings = DashboardSettings()
    assert (settings.loopback, settings.reading_open) == (False, True)
    monkeypatch.setenv("AGENTBUS_DASHBOARD_PUBLIC_READ", "false")
    monkeypatch.setenv("AGENTBUS_DASHBOARD_TOKEN", TOKEN)
    settings = DashboardSettings()
    assert settings.reading_open is False
    assert settings.allows(TOKEN)
    assert not settings.allows(TOKEN[:-1])


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("127.0.0.2", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("10.1.2.3", False),
        ("dashboard.example", False),
    ],
)
def test_loopback_is_this_machine_only(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_sessions_expire_end_and_are_bounded() -> None:
    """A session holds until its lifetime or its logout; the oldest goes past the limit."""
    now = [1000.0]
    sessions = Sessions(lifetime=60, limit=2, clock=lambda: now[0])
    first = sessions.start()
    assert sessions.valid(first)
    assert not sessions.valid(first[:-1] + "x")
    assert not sessions.valid(None)
    now[0] += 61
    assert not sessions.valid(first)
    second, third = sessions.start(), sessions.start()
    assert len(sessions) == 2  # the expired one went when the next started
    fourth = sessions.start()
    assert (sessions.valid(second), sessions.valid(third), sessions.valid(fourth)) == (
        False,
        True,
        True,
    )
    sessions.end(third)
    sessions.end("never-started")
    assert not sessions.valid(third)


def test_the_cli_refuses_to_show_the_team_beyond_localhost_without_a_token() -> None:
    """One line, exit status 2, before any connection: give a token or --public-read."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_DASHBOARD_")}
    env["AGENTBUS_URL"] = "amqp://guest:guest@127.0.0.1:1/"  # nothing listens: never reached
    done = subprocess.run(
        [sys.executable, "-m", "agentbus", "dashboard", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("agentbus: error: the dashboard would listen on 0.0.0.0")
    for named in ("--token-file", "AGENTBUS_DASHBOARD_TOKEN", "--public-read"):
        assert named in lines[0]
