"""``agentbus mcp`` over stdio, started by the SDK's client as a desktop client starts it.

The team runs on the real broker; the server is a process of its own, found by the client
through ``StdioServerParameters``; both protocol eras.
"""

from __future__ import annotations

import asyncio
import json
import signal
from asyncio.subprocess import PIPE
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp_agents import Scribe, Shouter
from mcp_team import ERAS, HEARTBEAT, Team

from agentbus.mcp import ERROR_META
from support.waiting import wait_until

INITIALIZE = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "a-desktop-client", "version": "1"},
}


async def listed(client: Client) -> set[str]:
    return {tool.name for tool in (await client.list_tools()).tools}


async def until_listed(client: Client, name: str, present: bool = True) -> set[str]:
    """List the tools until ``name`` is among them (or, ``present`` false, is not)."""
    async with asyncio.timeout(15):
        while (name in (names := await listed(client))) != present:  # noqa: ASYNC110 - asked, not told
            await asyncio.sleep(HEARTBEAT)
    return names


@pytest.mark.parametrize("era", ERAS)
async def test_a_desktop_client_calls_the_team(team: Team, era: str) -> None:
    """Tools from the cards; a call with its progress; an agent's error with its wire code."""
    scribe = await team.add(
        Scribe(agent_id="scribe-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    )
    heard: list[str | None] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        heard.append(message)

    async with Client(team.stdio(), mode=era) as client:
        names = await until_listed(client, "scribe__steps")
        assert {"scribe__echo", "scribe__stats", "registry__list_agents"} <= names
        steps = await client.call_tool(
            "scribe__steps", {"words": ["x", "y"]}, progress_callback=progress
        )
        stats = await client.call_tool("scribe__stats", {"text": "on the bus"})
        refused = await client.call_tool("scribe__refuse", {"text": "calls"})
    assert steps.structured_content == {"result": ["X", "Y"]}
    assert heard == ["halfway there (50%)", "X", "Y"]
    assert stats.structured_content == {"words": 3, "letters": 8}
    assert refused.is_error
    assert refused.meta is not None
    assert refused.meta[ERROR_META]["code"] == "quota_exceeded"
    assert scribe.senders[0].startswith("mcp-")


@pytest.mark.parametrize("era", ERAS)
async def test_the_tool_list_follows_the_agents_and_a_cancel_reaches_one(
    team: Team, era: str
) -> None:
    """Told when an agent comes (and goes); a cancelled call stops the skill on the bus."""
    changes = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changes.set()

    await team.registered("registry")  # the server's first look sees it: no change to tell
    async with Client(team.stdio(), mode=era, message_handler=on_message) as client:
        assert "registry__list_agents" in await listed(client)
        if era == "legacy":
            await team.add(
                Shouter(agent_id="shouter-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
            )
            await asyncio.wait_for(changes.wait(), 15)
        else:
            async with client.listen(tools_list_changed=True) as events:
                shouter = Shouter(
                    agent_id="shouter-1", settings=team.settings, heartbeat_interval=HEARTBEAT
                )
                await team.add(shouter)
                await asyncio.wait_for(anext(aiter(events)), 15)
        assert "shouter__shout" in await listed(client)
        scribe = await team.add(
            Scribe(agent_id="scribe-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
        )
        await until_listed(client, "scribe__wait")
        call = asyncio.create_task(client.call_tool("scribe__wait", {"seconds": 60}))
        await asyncio.wait_for(scribe.waiting.wait(), 15)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await wait_until(lambda: scribe.ended == ["cancelled"], 15)
        await team.remove("shouter-1")
        await until_listed(client, "shouter__shout", present=False)


async def test_sigterm_cancels_the_calls_running_and_exits_0(team: Team) -> None:
    """A client that stops the server with SIGTERM mid-call: the skill is cancelled on the
    bus, and the server exits 0 (its standard input still open)."""
    scribe = await team.add(
        Scribe(agent_id="scribe-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    )
    await team.registered("scribe")
    server = team.stdio()
    process = await asyncio.create_subprocess_exec(
        server.command, *server.args, env=server.env, stdin=PIPE, stdout=PIPE
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        for message in (
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "scribe__wait", "arguments": {"seconds": 60}},
            },
        ):
            process.stdin.write(json.dumps(message).encode() + b"\n")
        await process.stdin.drain()
        assert json.loads(await process.stdout.readline())["id"] == 1
        await asyncio.wait_for(scribe.waiting.wait(), 15)
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 20) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    await wait_until(lambda: scribe.ended == ["cancelled"], 15)
