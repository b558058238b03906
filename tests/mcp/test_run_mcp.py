"""``run-mcp``: MCP servers on the bus as agents, called by bus clients and by plans.

The servers: one on the official SDK (``wordsmith_mcp.py``, started as a command, or served
over HTTP in this process to watch it), a published one from npm
(``@modelcontextprotocol/server-filesystem``), and agentbus's own ``agentbus mcp``.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mcp_agents import Scribe, Shouter
from mcp_team import HEARTBEAT, Team
from mcp_tools import npm_tool
from wordsmith_mcp import Seen, wordsmith

from agentbus import RemoteError
from agentbus.envelopes import BROADCAST, RequestEnvelope, RequestPayload, ResponseEnvelope
from agentbus.leader import Leader, PlanClient
from agentbus.mcp import McpTarget, RemoteMcpAgent
from support.ports import free_port
from support.servers import start_uvicorn, stop_uvicorn

WORDSMITH = [sys.executable, str(Path(__file__).with_name("wordsmith_mcp.py"))]


async def listed_skills(team: Team) -> dict[str, list[str]]:
    """The registry's services and their skills."""
    reply = await team.client.request("registry", "list_agents", timeout=5)
    return {row["service"]: sorted(row["skills"]) for row in reply.result}


async def on_the_bus(team: Team, target: McpTarget, **options: object) -> RemoteMcpAgent:
    agent = await RemoteMcpAgent.connect(
        target, agent_id="words-1", settings=team.settings, heartbeat_interval=HEARTBEAT, **options
    )
    await team.add(agent)
    return agent


async def test_an_mcp_servers_tools_are_skills_on_the_bus(team: Team) -> None:
    """A server started as a command: its tools, their schemas, results and errors."""
    agent = await on_the_bus(team, McpTarget(command=WORDSMITH))
    assert agent.name == "Word-smith"  # from the server's name, "Word smith"
    skills = await listed_skills(team)
    assert skills["Word-smith"] == ["refuse", "reverse", "sign", "slow-wait", "stats"]
    card = (
        await team.client.request("registry", "get_card", {"agent_id": "words-1"}, timeout=5)
    ).result
    schemas = {skill["name"]: skill for skill in card["skills"]}
    assert schemas["reverse"]["result"] == {"title": "Result", "type": "string"}
    assert schemas["stats"]["result"]["required"] == ["words", "letters"]
    client = team.client
    reversed_ = await client.request("Word-smith", "reverse", {"text": "one two three"}, timeout=10)
    stats = await client.request("Word-smith", "stats", {"text": "hello bus world"}, timeout=10)
    assert reversed_.result == "three two one"
    assert stats.result == {"words": 3, "letters": 13}
    with pytest.raises(RemoteError) as refused:
        await client.request("Word-smith", "refuse", {"text": "this"}, timeout=10)
    assert refused.value.code == "processing_failed"
    assert refused.value.message == "Error executing tool refuse: refused 'this', as always"
    with pytest.raises(RemoteError) as invalid:
        await client.request("Word-smith", "reverse", {"words": "typo"}, timeout=10)
    assert invalid.value.code == "invalid_parameters"


@dataclass
class Served:
    """The wordsmith over HTTP in this process, and what it saw."""

    url: str
    seen: Seen


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    seen = Seen()
    port = free_port()
    server, serving = await start_uvicorn(
        wordsmith(seen).streamable_http_app(), port, lifespan="on"
    )
    try:
        yield Served(f"http://127.0.0.1:{port}/mcp", seen)
    finally:
        await stop_uvicorn(server, serving)


async def test_progress_comes_back_and_a_bus_cancel_cancels_the_call(
    team: Team, served: Served
) -> None:
    """A server reached by URL: its progress notification is a progress report; the bus
    cancel reaches it as notifications/cancelled."""
    agent = await on_the_bus(team, McpTarget(url=served.url))
    notices: list[ResponseEnvelope] = []
    request = RequestEnvelope(
        sender_id=team.client.agent_id,
        receiver_id=agent.name,
        payload=RequestPayload(action="slow-wait", parameters={"seconds": 60}),
    )
    waiting = asyncio.create_task(
        team.client.send_request(request, timeout=30, on_progress=notices.append)
    )
    await asyncio.wait_for(served.seen.waiting.wait(), 15)
    cancel = RequestEnvelope(
        sender_id=team.client.agent_id,
        receiver_id=BROADCAST,
        payload=RequestPayload(action="cancel", parameters={"message_id": request.message_id}),
    )
    await team.client.publish(cancel, mandatory=False)
    with pytest.raises(RemoteError) as caught:
        await waiting
    assert caught.value.code == "cancelled"
    async with asyncio.timeout(15):
        while served.seen.cancelled != ["wait"]:  # noqa: ASYNC110 - the server's own record
            await asyncio.sleep(0.05)
    progress = [n.payload.result for n in notices if n.payload.result["state"] == "progress"]
    assert [(p["fraction"], p["message"]) for p in progress] == [(0.5, "waiting 60s")]


async def test_a_server_gone_mid_call_fails_it_at_once(team: Team) -> None:
    """The HTTP server's process dies while it holds a call: the requester gets
    agent_unavailable at once (not at its timeout), and the next call too."""
    port = free_port()
    server = await asyncio.create_subprocess_exec(*WORDSMITH, "--http", str(port))
    try:
        agent = await RemoteMcpAgent.connect(
            McpTarget(url=f"http://127.0.0.1:{port}/mcp"),
            agent_id="words-1",
            settings=team.settings,
            heartbeat_interval=HEARTBEAT,
            wait=30,
        )
        await team.add(agent)
        working = asyncio.Event()
        request = RequestEnvelope(
            sender_id=team.client.agent_id,
            receiver_id=agent.name,
            payload=RequestPayload(action="slow-wait", parameters={"seconds": 60}),
        )
        waiting = asyncio.create_task(
            team.client.send_request(request, timeout=30, on_progress=lambda _: working.set())
        )
        await asyncio.wait_for(working.wait(), 15)  # the server said it is waiting
        server.kill()
        with pytest.raises(RemoteError) as gone:
            await asyncio.wait_for(waiting, 15)
        assert gone.value.code == "agent_unavailable"
        with pytest.raises(RemoteError) as again:
            await team.client.request(agent.name, "reverse", {"text": "a b"}, timeout=15)
        assert again.value.code == "agent_unavailable"
    finally:
        if server.returncode is None:
            server.kill()
        await server.wait()


async def test_agentbus_mcp_behind_run_mcp_keeps_results_and_wire_codes(team: Team) -> None:
    """run-mcp in front of agentbus mcp: a team's skills as another service's, unchanged."""
    await team.add(
        Scribe(agent_id="scribe-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    )
    await team.registered("scribe")
    env = {k: v for k, v in team.env().items() if k.startswith(("AGENTBUS_", "PYTHON"))}
    target = McpTarget(command=[sys.executable, "-m", "agentbus", "mcp"], env=env)
    await on_the_bus(team, target, service="mirror")
    skills = (await listed_skills(team))["mirror"]
    assert {"scribe__echo", "scribe__stats", "registry__list_agents"} <= set(skills)
    echoed = await team.client.request("mirror", "scribe__echo", {"text": "round trip"}, timeout=10)
    stats = await team.client.request("mirror", "scribe__stats", {"text": "two words"}, timeout=10)
    assert echoed.result == "round trip"  # unwrapped from {"result": ...}
    assert stats.result == {"words": 2, "letters": 8}
    with pytest.raises(RemoteError) as refused:
        await team.client.request("mirror", "scribe__refuse", {"text": "calls"}, timeout=10)
    assert (refused.value.code, refused.value.details) == ("quota_exceeded", {"left": 0})


async def test_a_plan_mixes_bus_agents_and_a_published_mcp_server(
    team: Team, tmp_path: Path
) -> None:
    """agentbus run-mcp with @modelcontextprotocol/server-filesystem (npm): shout on the bus,
    write and read the file over MCP, shout what was read."""
    filesystem = npm_tool("mcp-server-filesystem")
    for agent in (
        Leader(agent_id="leader-1", settings=team.settings, heartbeat_interval=HEARTBEAT),
        Shouter(agent_id="shouter-1", settings=team.settings, heartbeat_interval=HEARTBEAT),
    ):
        await team.add(agent)
    run_mcp = ["-m", "agentbus", "run-mcp", "--service", "files", "--heartbeat", str(HEARTBEAT)]
    process = await asyncio.create_subprocess_exec(
        sys.executable, *run_mcp, "--", *filesystem, str(tmp_path), env=team.env()
    )
    try:
        await team.registered("files")
        note = tmp_path / "note.txt"
        plan = {
            "subtasks": [
                {"id": "loud", "skill": "shout", "parameters": {"text": "plans reach mcp"}},
                {
                    "id": "save",
                    "skill": "write_file",
                    "parameters": {"path": str(note)},
                    "inputs": {"content": "loud"},
                    "depends_on": ["loud"],
                },
                {
                    "id": "back",
                    "skill": "read_text_file",
                    "parameters": {"path": str(note)},
                    "depends_on": ["save"],
                },
                {
                    "id": "again",
                    "skill": "shout",
                    "inputs": {"text": "back.content"},
                    "depends_on": ["back"],
                },
            ]
        }
        aggregate = await PlanClient(team.client).run(plan, timeout=60)
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 20) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert aggregate.status.value == "completed"
    results = {s.id: s.result for s in aggregate.subtasks}
    assert results["back"] == {"content": "PLANS REACH MCP"}
    assert results["again"] == "PLANS REACH MCP"
    assert note.read_text() == "PLANS REACH MCP"
    assert {s.id: s.agents for s in aggregate.subtasks}["save"][0].startswith("files-")
