"""An agent that asks, reached from an MCP client through ``agentbus mcp``: its questions
are the client's elicitations, over stdio and Streamable HTTP, in both protocol eras.

Each asker is a service whose skill asks its caller, started on the team's bus: a bus
agent (``Clerk``: its skill calls ``agentbus.ask``), and a remote MCP server that elicits,
put on the bus by run-mcp (its elicitations are bus questions, which ``agentbus mcp``
turns back into elicitations). Another remote agent joins ``ASKERS`` the same way: a
function that starts it and says what its tool asks and returns.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import json
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_agents import Clerk
from mcp_team import ERAS, HEARTBEAT, KEY, ROOT, Team, free_port

from agentbus.gateway import RemoteA2AAgent
from agentbus.mcp import ERROR_META, McpTarget, RemoteMcpAgent

WORDSMITH = [sys.executable, str(Path(__file__).with_name("wordsmith_mcp.py"))]
REMOTE_A2A = Path(__file__).parents[1] / "gateway" / "remote_a2a_server.py"
GUIDE = ROOT / "docs" / "conversations.md"


@dataclass(frozen=True)
class Asker:
    """A service on the bus whose skill asks its caller, as an MCP client sees it."""

    tool: str
    arguments: dict[str, Any]
    steps: list[tuple[str, Any]]
    """Each question's text (the form's message) and the answer given to it."""
    result: Any
    """The skill's result, once every question is answered."""

    @property
    def structured(self) -> Any:
        """The call's structured content: the result, an object, or ``{"result": ...}``
        (the tool's output schema wraps a result that is not an object)."""
        return self.result if isinstance(self.result, dict) else {"result": self.result}


async def bus_agent(team: Team) -> Asker:
    """A bus agent whose skill calls ``agentbus.ask`` (an object, then a yes-or-no)."""
    await team.add(Clerk(agent_id="clerk-1", settings=team.settings, heartbeat_interval=HEARTBEAT))
    await team.registered("clerk")
    return Asker(
        tool="clerk__book",
        arguments={"who": "ann"},
        steps=[("Where to, ann?", {"city": "Oslo", "nights": 2}), ("Book 2 nights in Oslo?", True)],
        result="booked 2 nights in Oslo for ann",
    )


async def remote_mcp_server(team: Team) -> Asker:
    """A remote MCP server that elicits twice, on the bus through run-mcp."""
    agent = await RemoteMcpAgent.connect(
        McpTarget(command=WORDSMITH),
        service="smith",
        agent_id="smith-1",
        settings=team.settings,
        heartbeat_interval=HEARTBEAT,
    )
    await team.add(agent)
    await team.registered("smith")
    return Asker(
        tool="smith__sign",
        arguments={"text": "the deal"},
        steps=[("Who signs 'the deal'?", {"name": "Ann"}), ("Sign as Ann?", {"sure": True})],
        result="the deal -- Ann",
    )


async def remote_a2a_agent(team: Team) -> Asker:
    """A remote a2a-sdk agent that asks twice (which city, then how many nights, with its
    JSON Schema), in a process of its own, on the bus through run-a2a."""
    port = free_port()
    server = await asyncio.create_subprocess_exec(sys.executable, str(REMOTE_A2A), str(port))
    team.on_close(lambda: _stopped(server))
    agent = await RemoteA2AAgent.from_url(
        f"http://127.0.0.1:{port}/",
        agent_id="words-1",
        settings=team.settings,
        heartbeat_interval=HEARTBEAT,
        wait=30,
    )
    await team.add(agent)
    await team.registered(agent.name)
    return Asker(
        tool=f"{agent.name}__trip",
        arguments={"text": "ann"},
        steps=[("Which city?", "Oslo"), ("How many nights in Oslo?", 3)],
        result="ann: 3 nights in Oslo",
    )


async def _stopped(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.terminate()
        await process.wait()


ASKERS: dict[str, Callable[[Team], Awaitable[Asker]]] = {
    "bus-agent": bus_agent,
    "run-mcp": remote_mcp_server,
    "run-a2a": remote_a2a_agent,
}
"""How each asker is started on the team's bus; every test below runs with each: a bus
agent, a remote MCP server through run-mcp, a remote A2A agent through run-a2a (issue
38's Done-when: the same remote agent an A2A client talks to through the gateway asks an
MCP client by elicitation)."""


@pytest.fixture(params=sorted(ASKERS))
async def asker(request: pytest.FixtureRequest, team: Team) -> Asker:
    return await ASKERS[request.param](team)


class Person:
    """Fills each form with the asker's next answer; keeps the messages it was shown."""

    def __init__(self, asker: Asker) -> None:
        self.answers = [answer for _, answer in asker.steps]
        self.shown: list[str] = []

    async def __call__(self, ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        self.shown.append(params.message)
        answer = self.answers.pop(0)
        # One property "answer": the form of a value that is not an object.
        wrapped = set(params.requested_schema["properties"]) == {"answer"}
        content = {"answer": answer} if wrapped else answer
        return types.ElicitResult(action="accept", content=content)


async def until_listed(client: Client, name: str) -> None:
    """List the tools until ``name`` is among them (the server sees the agent come)."""
    async with asyncio.timeout(15):
        while name not in {tool.name for tool in (await client.list_tools()).tools}:  # noqa: ASYNC110 - asked, not told
            await asyncio.sleep(HEARTBEAT)


@contextlib.asynccontextmanager
async def over_http(team: Team, era: str, **options: Any) -> AsyncIterator[Client]:
    """The SDK's client of the team served over Streamable HTTP, with a key."""
    if team.server is None:
        await team.serve_http()
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}) as http,
        Client(streamable_http_client(team.url, http_client=http), mode=era, **options) as client,
    ):
        yield client


@pytest.mark.parametrize("era", ERAS)
async def test_over_stdio_the_agent_asks_by_elicitation(team: Team, asker: Asker, era: str) -> None:
    """A desktop client starts ``agentbus mcp``; each question is a form it fills."""
    person = Person(asker)
    async with Client(team.stdio(), mode=era, elicitation_callback=person) as client:
        await until_listed(client, asker.tool)
        result = await client.call_tool(asker.tool, asker.arguments)
    assert not result.is_error, result.content
    assert result.structured_content == asker.structured
    assert person.shown == [text for text, _ in asker.steps]


@pytest.mark.parametrize("era", ERAS)
async def test_over_http_the_agent_asks_by_elicitation(team: Team, asker: Asker, era: str) -> None:
    """A client with a key, over Streamable HTTP: the same questions, the same result."""
    person = Person(asker)
    async with over_http(team, era, elicitation_callback=person) as client:
        await until_listed(client, asker.tool)
        result = await client.call_tool(asker.tool, asker.arguments)
    assert not result.is_error, result.content
    assert result.structured_content == asker.structured
    assert person.shown == [text for text, _ in asker.steps]


async def test_a_client_without_elicitation_is_told_and_the_cli_answers(
    team: Team, asker: Asker
) -> None:
    """No capability: the call ends at once with the question and the command that
    answers it; that command, run as told, finishes the work."""
    async with Client(team.stdio()) as client:
        await until_listed(client, asker.tool)
        async with asyncio.timeout(30):  # at once, not at a timeout
            result = await client.call_tool(asker.tool, asker.arguments)
    assert result.is_error
    assert result.meta is not None
    error = result.meta[ERROR_META]
    question = error["details"]["question"]
    assert (error["code"], question["text"]) == ("input_required", asker.steps[0][0])
    ident = question["question_id"]
    assert f"answer with `agentbus answer {ident} ANSWER`" in error["message"]
    first, *rest = (json.dumps(answer) for _, answer in asker.steps)
    more = [word for answer in rest for word in ("--answer", answer)]
    answered = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "agentbus", "answer", ident, first, *more, "--result"),
        env=team.env(),
        cwd=str(ROOT),
        stdout=asyncio.subprocess.PIPE,
    )
    printed, _ = await asyncio.wait_for(answered.communicate(), 60)
    assert answered.returncode == 0
    assert json.loads(printed) == asker.result


def guide_block(mark: str) -> str:
    """The first block of docs/conversations.md under ``mark``."""
    text = GUIDE.read_text(encoding="utf-8")
    found = re.search(re.escape(mark) + r"\s*```\w+\n(.*?)```", text, re.DOTALL)
    assert found is not None, mark
    return found[1]


async def test_the_guide_runs_as_written(team: Team) -> None:
    """docs/conversations.md, "From an MCP client": the page's clerk on the bus, and its
    client block as written (the broker and exchange the test's; ``agentbus`` run by
    this interpreter), tried again while the server starts."""
    clerk: dict[str, Any] = {}
    exec(compile(guide_block("<!-- doc-test: ask-in-a-skill -->"), "clerk", "exec"), clerk)
    await team.add(
        clerk["Clerk"](agent_id="clerk-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    )
    await team.registered("clerk")
    block = guide_block("<!-- tested-by: tests/mcp/test_mcp_conversations.py -->")
    written = 'command="agentbus", args=["mcp"], env={"AGENTBUS_URL": "amqp://guest:guest@localhost:5672/"}'
    assert written in block
    here = f'command={sys.executable!r}, args=["-m", "agentbus", "mcp"], env={team.env()!r}'
    code = compile(
        block.replace(written, here), "guide", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    )
    async with asyncio.timeout(60):
        while True:
            printed = io.StringIO()
            try:
                with contextlib.redirect_stdout(printed):
                    await eval(code, {"__name__": "__guide__"})
                break
            except Exception:  # the server not up, the tools not listed yet
                await asyncio.sleep(HEARTBEAT)
    assert printed.getvalue().splitlines() == [
        "Where to, ann?",
        "Book 2 nights in Oslo?",
        "booked 2 nights in Oslo for ann",
    ]
