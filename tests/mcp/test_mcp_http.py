"""The team server over Streamable HTTP: the gateway's bearer keys and identities, both eras.

Served in this process by uvicorn (the app ``agentbus mcp --transport http`` serves), but
for the last test, which runs the command itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_agents import Scribe
from mcp_team import ERAS, HEARTBEAT, KEY, OTHER_KEY, Team

from support.ports import free_port
from support.waiting import wait_until

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "curl", "version": "1"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@contextlib.asynccontextmanager
async def client(url: str, key: str, era: str, **options: Any) -> AsyncIterator[Client]:
    """The SDK's client for ``url``, sending ``key`` as its bearer token."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http,
        Client(streamable_http_client(url, http_client=http), mode=era, **options) as session,
    ):
        yield session


async def listening(port: int) -> None:
    """Wait until a server listens on ``port`` (it opens its bus and sees the team first)."""
    async with asyncio.timeout(30):
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(HEARTBEAT)
                continue
            writer.close()
            await writer.wait_closed()
            return


async def test_a_call_needs_a_known_key(team: Team) -> None:
    """No key or an unknown one: 401 with WWW-Authenticate, before anything reaches the bus."""
    await team.serve_http()
    async with httpx2.AsyncClient() as http:
        bare = await http.post(team.url, json=INITIALIZE, headers=ACCEPT)
        wrong = await http.post(
            team.url,
            json=INITIALIZE,
            headers={**ACCEPT, "Authorization": "Bearer not-a-key-at-all"},
        )
        right = await http.post(
            team.url, json=INITIALIZE, headers={**ACCEPT, "Authorization": f"Bearer {KEY}"}
        )
    assert (bare.status_code, wrong.status_code) == (401, 401)
    assert bare.headers["www-authenticate"].startswith("Bearer")
    assert right.status_code == 200


@pytest.mark.parametrize("era", ERAS)
async def test_each_key_calls_as_its_identity(team: Team, era: str) -> None:
    """alice's calls come from an alice-... bus, bob's from a bob-... one."""
    scribe = await team.add(
        Scribe(agent_id="scribe-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    )
    server = await team.serve_http()
    await wait_until(lambda: "scribe__echo" in server.tools, 15)
    for key in (KEY, OTHER_KEY):
        async with client(team.url, key, era) as session:
            echoed = await session.call_tool("scribe__echo", {"text": key[:5]})
            assert echoed.structured_content == {"result": key[:5]}
    assert [sender.split("-")[0] for sender in scribe.senders] == ["alice", "bob"]


@pytest.mark.parametrize("era", ERAS)
async def test_progress_changes_and_cancellation_over_http(team: Team, era: str) -> None:
    """Progress on the call's stream, the list's changes on the session's, a cancel to the bus."""
    server = await team.serve_http()
    changes = asyncio.Event()
    heard: list[str | None] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changes.set()

    async def progress(value: float, total: float | None, message: str | None) -> None:
        heard.append(message)

    async with client(team.url, KEY, era, message_handler=on_message) as session:
        await session.list_tools()
        scribe = Scribe(agent_id="scribe-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
        if era == "legacy":
            await team.add(scribe)
            await asyncio.wait_for(changes.wait(), 15)
        else:
            async with session.listen(tools_list_changed=True) as events:
                await team.add(scribe)
                await asyncio.wait_for(anext(aiter(events)), 15)
        assert "scribe__steps" in server.tools
        steps = await session.call_tool(
            "scribe__steps", {"words": ["a"]}, progress_callback=progress
        )
        assert steps.structured_content == {"result": ["A"]}
        assert heard == ["halfway there (50%)", "A"]
        call = asyncio.create_task(session.call_tool("scribe__wait", {"seconds": 60}))
        await asyncio.wait_for(scribe.waiting.wait(), 15)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await wait_until(lambda: scribe.ended == ["cancelled"], 15)


async def test_the_command_serves_http_with_keys_and_stops_on_sigterm(
    team: Team, tmp_path: Path
) -> None:
    """agentbus mcp --transport http --keys FILE: a call as alice; SIGTERM exits 0."""
    scribe = await team.add(
        Scribe(agent_id="scribe-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    )
    await team.registered("scribe")
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({KEY: "alice"}))
    port = free_port()
    command = ["mcp", "--transport", "http", "--port", str(port), "--keys", str(keys)]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentbus", *command, env=team.env()
    )
    try:
        await listening(port)
        async with client(f"http://127.0.0.1:{port}/mcp", KEY, "auto") as session:
            names = {tool.name for tool in (await session.list_tools()).tools}
            stats = await session.call_tool("scribe__stats", {"text": "by http"})
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 20) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert "scribe__stats" in names
    assert stats.structured_content == {"words": 2, "letters": 6}
    assert scribe.senders[0].startswith("alice-")
