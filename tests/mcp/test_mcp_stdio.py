"""``agentbus mcp`` over stdio, started by the SDK's client as a desktop client starts it.

The team runs on the real broker; the server is a process of its own, found by the client
through ``StdioServerParameters``; both protocol eras.
"""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp_agents import Scribe, Shouter
from mcp_team import ERAS, HEARTBEAT, Team

from agentbus.mcp import ERROR_META
from waiting import wait_until


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

    async with Client(team.stdio(), mode=era, message_handler=on_message) as client:
        await until_listed(client, "registry__list_agents")
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
