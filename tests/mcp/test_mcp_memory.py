"""The team server in one process, on the in-memory bus, with the SDK's in-process client.

Both protocol eras: ``legacy`` (the 2025 handshake, JSON-RPC over memory streams) and
``auto`` (2026-07-28, the SDK's direct dispatcher). The broker tiers (stdio, HTTP) run the
same server in front of agents on RabbitMQ.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_agents import Scribe, Shouter

from agentbus import Agent, Artifact, Settings, put_artifact, skill
from agentbus.leader import Leader
from agentbus.mcp import ERROR_META, UPDATE_META, McpSettings, TeamServer
from agentbus.registry import Registry
from agentbus.testing import MemoryBroker, MemoryBus
from support.waiting import wait_until

BEAT = 0.1


@dataclass
class Memory:
    """A team on the in-memory bus and the MCP server in front of it."""

    broker: MemoryBroker
    server: TeamServer
    scribe: Scribe
    stack: contextlib.AsyncExitStack
    notes: list[Any] = field(default_factory=list)

    def bus(self, agent_id: str) -> MemoryBus:
        return MemoryBus(self.broker, Settings(), agent_id=agent_id)

    async def on_message(self, message: Any) -> None:
        self.notes.append(message)

    def client(self, era: str) -> Client:
        return Client(self.server.server, mode=era, message_handler=self.on_message)


@pytest.fixture
async def memory() -> AsyncIterator[Memory]:
    """Registry, leader and scribe on the in-memory bus; the server sees them all."""
    broker = MemoryBroker()
    async with contextlib.AsyncExitStack() as stack:

        def bus(agent_id: str) -> MemoryBus:
            return MemoryBus(broker, Settings(), agent_id=agent_id)

        await stack.enter_async_context(Registry(bus=bus("registry-1"), heartbeat_interval=BEAT))
        await stack.enter_async_context(Leader(bus=bus("leader-1"), heartbeat_interval=BEAT))
        scribe = await stack.enter_async_context(
            Scribe(bus=bus("scribe-1"), heartbeat_interval=BEAT)
        )
        server = TeamServer(bus("mcp-1"), McpSettings(refresh_interval=BEAT))
        await stack.enter_async_context(server)
        every = {"registry__list_agents", "run_plan", "scribe__echo"}
        await wait_until(lambda: every <= server.tools.keys())  # no change to tell from here on
        yield Memory(broker, server, scribe, stack)


ERAS = pytest.mark.parametrize("era", ["legacy", "auto"])


@ERAS
async def test_every_live_skill_is_a_tool_with_the_cards_schemas(memory: Memory, era: str) -> None:
    """scribe's skills, the registry's, run_plan; stats' output schema is its result's."""
    async with memory.client(era) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert {
        "scribe__echo",
        "scribe__stats",
        "scribe__wait",
        "registry__list_agents",
        "run_plan",
    } <= set(listed)
    stats = listed["scribe__stats"]
    assert stats.input_schema["required"] == ["text"]
    assert stats.output_schema is not None
    assert stats.output_schema["properties"] == {
        "words": {"title": "Words", "type": "integer"},
        "letters": {"title": "Letters", "type": "integer"},
    }
    assert stats.title == "stats (scribe)"


@ERAS
async def test_a_call_is_a_bus_request_with_a_structured_result(memory: Memory, era: str) -> None:
    """An object result is the structured content; a string one is {"result": ...}."""
    async with memory.client(era) as client:
        stats = await client.call_tool("scribe__stats", {"text": "two words"})
        echo = await client.call_tool("scribe__echo", {"text": "as it came"})
    assert stats.structured_content == {"words": 2, "letters": 8}
    assert not stats.is_error
    assert echo.structured_content == {"result": "as it came"}
    assert echo.content[0] == types.TextContent(type="text", text="as it came")
    assert memory.scribe.senders == ["mcp-1", "mcp-1"]


class Filer(Agent):
    name = "filer"

    @skill
    async def report(self, size: int) -> Artifact:
        """``size`` bytes of a report, stored for the caller."""
        return await put_artifact(bytes(range(256)) * (size // 256), name="report.bin")


@ERAS
async def test_an_artifact_result_is_an_embedded_resource_up_to_the_cap(
    memory: Memory, era: str
) -> None:
    """A tool returning an artifact: its bytes embedded as a blob resource, its reference the
    structured content; one over ``max_embedded_size`` (16 MiB) is named, not embedded."""
    await memory.stack.enter_async_context(
        Filer(bus=memory.bus("filer-1"), heartbeat_interval=BEAT)
    )
    await wait_until(lambda: "filer__report" in memory.server.tools)
    async with memory.client(era) as client:
        small = await client.call_tool("filer__report", {"size": 100 * 1024})
        large = await client.call_tool("filer__report", {"size": 17 * 1024 * 1024})
    assert not small.is_error
    (embedded,) = [part for part in small.content if isinstance(part, types.EmbeddedResource)]
    assert isinstance(embedded.resource, types.BlobResourceContents)
    assert base64.b64decode(embedded.resource.blob) == bytes(range(256)) * 400
    assert embedded.resource.mime_type == "application/octet-stream"
    assert small.structured_content is not None
    reference = small.structured_content  # an object result: the reference itself
    assert embedded.resource.uri == f"agentbus://artifacts/{reference['id']}"
    assert reference["size"] == 100 * 1024
    assert not [part for part in large.content if isinstance(part, types.EmbeddedResource)]
    assert "is over 16777216 bytes: not embedded" in large.content[-1].text


@ERAS
async def test_progress_and_partial_results_are_progress_notifications(
    memory: Memory, era: str
) -> None:
    """The skill's progress report, then each streamed word, in order, numbered 1, 2, ..."""
    heard: list[tuple[float, str | None]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        heard.append((value, message))

    async with memory.client(era) as client:
        result = await client.call_tool(
            "scribe__steps", {"words": ["a", "b"]}, progress_callback=progress
        )
    assert result.structured_content == {"result": ["A", "B"]}
    assert heard == [(1, "halfway there (50%)"), (2, "A"), (3, "B")]
    if era == "legacy":  # over JSON-RPC the notification also carries the bus update itself
        updates = [
            note.params.meta[UPDATE_META]["in_progress"]
            for note in memory.notes
            if isinstance(note, types.ProgressNotification)
        ]
        assert [(u["state"], u.get("chunk")) for u in updates] == [
            ("progress", None),
            ("partial", "A"),
            ("partial", "B"),
        ]


@ERAS
async def test_errors_are_tool_errors_with_the_wire_code(memory: Memory, era: str) -> None:
    """The agent's error envelope and a validation error come back as tool errors."""
    async with memory.client(era) as client:
        refused = await client.call_tool("scribe__refuse", {"text": "calls"})
        invalid = await client.call_tool("scribe__echo", {"txt": "typo"})
        with pytest.raises(MCPError, match="no tool 'scribe__nothing'"):
            await client.call_tool("scribe__nothing", {})
    assert refused.is_error
    assert refused.content[0] == types.TextContent(
        type="text", text="quota_exceeded: no more calls today"
    )
    assert refused.meta is not None
    assert refused.meta[ERROR_META] == {
        "code": "quota_exceeded",
        "message": "no more calls today",
        "details": {"left": 0},
    }
    assert invalid.is_error
    assert invalid.meta is not None
    assert invalid.meta[ERROR_META]["code"] == "invalid_parameters"


@ERAS
async def test_a_cancelled_call_cancels_the_bus_request(memory: Memory, era: str) -> None:
    """The client gives up on a call: the skill running it is cancelled on the bus."""
    async with memory.client(era) as client:
        call = asyncio.create_task(client.call_tool("scribe__wait", {"seconds": 60}))
        await asyncio.wait_for(memory.scribe.waiting.wait(), 10)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await wait_until(lambda: memory.scribe.ended == ["cancelled"])
    assert memory.scribe.in_flight == 0


@ERAS
async def test_the_tools_follow_the_agents(memory: Memory, era: str) -> None:
    """A new agent's skills are listed, and the client is told; a leaving one's are gone."""
    async with memory.client(era) as client:
        if era == "legacy":
            await memory.stack.enter_async_context(
                Shouter(bus=memory.bus("shouter-1"), heartbeat_interval=BEAT)
            )
            await wait_until(
                lambda: any(isinstance(n, types.ToolListChangedNotification) for n in memory.notes)
            )
        else:
            async with client.listen(tools_list_changed=True) as changes:
                shouter = Shouter(bus=memory.bus("shouter-1"), heartbeat_interval=BEAT)
                await memory.stack.enter_async_context(shouter)
                event = await asyncio.wait_for(anext(aiter(changes)), 10)
            assert type(event).__name__ == "ToolsListChanged"
        await wait_until(lambda: "shouter__shout" in memory.server.tools)
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert "shouter__shout" in names
        shouted = await client.call_tool("shouter__shout", {"text": "hey"})
        assert shouted.structured_content == {"result": "HEY"}
        await memory.scribe.stop()
        await wait_until(lambda: "scribe__echo" not in memory.server.tools)
        names = {tool.name for tool in (await client.list_tools()).tools}
    assert "scribe__echo" not in names


@ERAS
async def test_the_cards_are_resources(memory: Memory, era: str) -> None:
    """agentbus://agents/<service> is the service's card, as JSON."""
    async with memory.client(era) as client:
        listed = [str(resource.uri) for resource in (await client.list_resources()).resources]
        read = await client.read_resource("agentbus://agents/scribe")
        with pytest.raises(MCPError, match="no resource"):
            await client.read_resource("agentbus://agents/nobody")
    assert listed == [
        "agentbus://agents/leader",
        "agentbus://agents/registry",
        "agentbus://agents/scribe",
    ]
    [content] = read.contents
    assert isinstance(content, types.TextResourceContents)
    assert content.mime_type == "application/json"
    assert '"version":"1.2.0"' in content.text


@ERAS
async def test_run_plan_is_a_tool_whose_progress_is_the_plans(memory: Memory, era: str) -> None:
    """Each subtask's transitions are progress notifications; the aggregate is the result."""
    heard: list[str] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        heard.append(str(message))

    plan = {
        "subtasks": [
            {"id": "first", "skill": "steps", "parameters": {"words": ["one", "two"]}},
            {"id": "then", "skill": "steps", "depends_on": ["first"], "inputs": {"words": "first"}},
        ]
    }
    async with memory.client(era) as client:
        result = await client.call_tool("run_plan", {"plan": plan}, progress_callback=progress)
    assert result.structured_content is not None
    assert result.structured_content["status"] == "completed"
    outcomes = {s["id"]: s["result"] for s in result.structured_content["subtasks"]}
    assert outcomes == {"first": ["ONE", "TWO"], "then": ["ONE", "TWO"]}
    first = [said for said in heard if said.startswith("first ")]
    assert first == [
        "first (steps): started [0/2]",
        "first (steps): running [0/2]",
        "first (steps): progress halfway there (50%) [0/2]",
        "first (steps): partial ONE [0/2]",
        "first (steps): partial TWO [0/2]",
        "first (steps): succeeded [1/2]",
    ]
    assert heard[-1] == "then (steps): succeeded [2/2]"


@ERAS
async def test_a_shaped_plans_items_and_skipped_branch_are_its_progress(
    memory: Memory, era: str
) -> None:
    """A step mapped over a result: each item's transitions are told under ``<step>[i]``; a
    branch whose condition fails is told skipped; the gathered results are the step's."""
    heard: list[str] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        heard.append(str(message))

    plan = {
        "subtasks": [
            {"id": "first", "skill": "steps", "parameters": {"words": ["ant", "bee"]}},
            {"id": "each", "skill": "echo", "depends_on": ["first"],
             "map": {"over": "first", "as": "text"}},
            {"id": "never", "skill": "echo", "parameters": {"text": "no"},
             "depends_on": ["first"], "when": {"in": ["CAT", {"var": "first"}]}},
        ]
    }  # fmt: skip
    async with memory.client(era) as client:
        result = await client.call_tool("run_plan", {"plan": plan}, progress_callback=progress)
    assert result.structured_content is not None
    assert result.structured_content["status"] == "completed"
    outcomes = {s["id"]: s for s in result.structured_content["subtasks"]}
    assert outcomes["each"]["result"] == ["ANT", "BEE"]
    assert outcomes["never"]["status"] == "skipped"
    told = {said.rsplit(" [", 1)[0] for said in heard}
    assert {"each[0] (echo): succeeded", "each[1] (echo): succeeded"} <= told
    assert "never (echo): skipped" in told
