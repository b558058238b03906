"""A skill that asks, called through the team server: its questions are the client's
elicitations (form mode), in both protocol eras, on the in-memory bus with the SDK's
in-process client. The broker tiers (tests/mcp/test_mcp_conversations.py) run the same
over stdio and HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp_agents import Clerk
from mcp_team import free_port, start_uvicorn, stop_uvicorn

from agentbus import QuestionClosed, Settings
from agentbus.leader import Leader, PlanClient
from agentbus.mcp import ERROR_META, ApiKeys, McpSettings, TeamServer, http_app
from agentbus.registry import Registry
from agentbus.testing import MemoryBroker, MemoryBus
from support.waiting import wait_until

BEAT = 0.1
ERAS = pytest.mark.parametrize("era", ["legacy", "auto"])

Answer = Callable[[types.ElicitRequestFormParams], types.ElicitResult]


@dataclass
class Desk:
    """The clerk on the in-memory bus, the team server in front of it, a bus to answer from."""

    broker: MemoryBroker
    server: TeamServer
    clerk: Clerk
    bus: MemoryBus
    asked: list[types.ElicitRequestFormParams] = field(default_factory=list)

    def client(self, era: str, *answers: Answer) -> Client:
        """A client of ``era`` that fills each form with the next of ``answers`` (none: a
        client without the elicitation capability)."""
        callback = self.fill(*answers) if answers else None
        return Client(self.server.server, mode=era, elicitation_callback=callback)

    def fill(self, *answers: Answer) -> Callable[[Any, Any], Awaitable[types.ElicitResult]]:
        """An elicitation callback that fills each form with the next of ``answers``."""
        queue = list(answers)

        async def elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            assert isinstance(params, types.ElicitRequestFormParams)
            self.asked.append(params)
            return queue.pop(0)(params)

        return elicit


@pytest.fixture
async def desk() -> AsyncIterator[Desk]:
    broker = MemoryBroker()
    async with contextlib.AsyncExitStack() as stack:

        def bus(agent_id: str) -> MemoryBus:
            return MemoryBus(broker, Settings(), agent_id=agent_id)

        await stack.enter_async_context(Registry(bus=bus("registry-1"), heartbeat_interval=BEAT))
        await stack.enter_async_context(Leader(bus=bus("leader-1"), heartbeat_interval=BEAT))
        clerk = await stack.enter_async_context(Clerk(bus=bus("clerk-1"), heartbeat_interval=BEAT))
        server = TeamServer(bus("mcp-1"), McpSettings(refresh_interval=BEAT))
        await stack.enter_async_context(server)
        await wait_until(lambda: {"clerk__book", "run_plan"} <= server.tools.keys())
        answering = await stack.enter_async_context(bus("answerer-1"))
        yield Desk(broker, server, clerk, answering)


def accept(content: dict[str, Any]) -> Answer:
    return lambda params: types.ElicitResult(action="accept", content=content)


def refuse(action: str) -> Answer:
    return lambda params: types.ElicitResult(action=action)  # type: ignore[arg-type]


def error_of(result: types.CallToolResult) -> dict[str, Any]:
    assert result.is_error
    assert result.meta is not None
    error: dict[str, Any] = result.meta[ERROR_META]
    return error


@ERAS
async def test_each_question_is_an_elicitation_and_the_answers_finish_the_work(
    desk: Desk, era: str
) -> None:
    """An object of primitives is the form as it is; a yes-or-no the form's one property
    ``answer``; the result is the skill's, its effect done once."""
    trip = accept({"city": "Oslo", "nights": 2})
    async with desk.client(era, trip, accept({"answer": True})) as client:
        result = await client.call_tool("clerk__book", {"who": "ann"})
    assert not result.is_error, result.content
    assert result.structured_content == {"result": "booked 2 nights in Oslo for ann"}
    first, second = desk.asked
    assert first.message == "Where to, ann?"
    assert first.requested_schema == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "title": "City"},
            "nights": {"type": "integer", "title": "Nights", "minimum": 1, "maximum": 30},
        },
        "required": ["city", "nights"],
    }
    assert second.message == "Book 2 nights in Oslo?"
    assert second.requested_schema == {
        "type": "object",
        "properties": {"answer": {"type": "boolean", "title": "Answer"}},
        "required": ["answer"],
    }
    assert desk.clerk.booked == ["ann: Oslo"]


@ERAS
async def test_an_answer_that_does_not_fit_is_asked_again_with_the_reason(
    desk: Desk, era: str
) -> None:
    """The skill's own schema is the judge (nights <= 30): the next form says why."""
    answers = (
        accept({"city": "Oslo", "nights": 90}),
        accept({"city": "Oslo", "nights": 3}),
        accept({"answer": False}),
    )
    async with desk.client(era, *answers) as client:
        result = await client.call_tool("clerk__book", {"who": "bo"})
    assert result.structured_content == {"result": "not booked"}
    again = desk.asked[1]
    assert again.message.startswith("Where to, bo?\n\n(The last answer did not fit: nights: ")
    assert "less than or equal to 30" in again.message
    assert desk.clerk.booked == []


@ERAS
@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_a_declined_form_declines_the_question(desk: Desk, era: str, action: str) -> None:
    """Declined or dismissed, the question is declined: the skill's ``ask`` raises
    QuestionDeclined; one that handles it answers, one that does not is cancelled."""
    async with desk.client(era, refuse(action), refuse(action)) as client:
        polite = await client.call_tool("clerk__polite", {"who": "cy"})
        book = await client.call_tool("clerk__book", {"who": "cy"})
    assert polite.structured_content == {"result": "no name for cy"}
    assert error_of(book)["code"] == "cancelled"
    assert desk.clerk.booked == []


@ERAS
async def test_a_client_without_elicitation_gets_the_question_to_answer_elsewhere(
    desk: Desk, era: str
) -> None:
    """At once, never a wait: the tool error input_required, with the question's id and
    the command that answers it; the question stays open, and an answer from the bus
    finishes the work."""
    async with desk.client(era) as client:
        result = await client.call_tool("clerk__polite", {"who": "di"})
    error = error_of(result)
    question = error["details"]["question"]
    ident = question["question_id"]
    assert error["code"] == "input_required"
    assert error["message"] == (
        f"What should I call di? (question {ident}; the client takes no form elicitation; "
        f"answer with `agentbus answer {ident} ANSWER`)"
    )
    assert isinstance(result.content[0], types.TextContent)
    assert result.content[0].text == f"input_required: {error['message']}"
    reply = await desk.bus.answer(ident, "Dee")
    assert reply.result == "hello Dee"


@ERAS
async def test_a_question_no_form_can_ask_is_a_tool_error_naming_why(desk: Desk, era: str) -> None:
    """A list of objects is no form: the client, though it takes forms, is not asked."""
    async with desk.client(era, accept({})) as client:
        result = await client.call_tool("clerk__route", {"start": "Oslo"})
    error = error_of(result)
    assert error["code"] == "input_required"
    assert "no MCP form can ask it: the answer is a list of free values" in error["message"]
    assert desk.asked == []
    ident = error["details"]["question"]["question_id"]
    reply = await desk.bus.answer(ident, [{"city": "Bergen"}])
    assert reply.result == "Oslo -> Bergen"
    with pytest.raises(QuestionClosed):
        await desk.bus.answer(ident, [])


APPROVAL: dict[str, Any] = {
    "id": "ok", "skill": "approval", "parameters": {"question": "Send it?"}
}  # fmt: skip
TRIP_PLAN: dict[str, Any] = {
    "subtasks": [
        {"id": "trip", "skill": "book", "parameters": {"who": "ed"}},
        {**APPROVAL, "inputs": {"booking": "trip"}, "depends_on": ["trip"]},
    ]
}


async def test_a_plans_questions_are_elicitations_beside_the_call(desk: Desk) -> None:
    """2025 era: the step's questions (asked in the leader's name) and the approval step's
    are forms while run_plan waits; the answers go to the leader, and the plan ends."""
    answers = (
        accept({"city": "Rome", "nights": 1}),
        accept({"answer": True}),
        accept({"approved": True}),
    )
    async with desk.client("legacy", *answers) as client:
        result = await client.call_tool("run_plan", {"plan": TRIP_PLAN})
    assert result.structured_content is not None, result.content
    assert result.structured_content["status"] == "completed"
    outcomes = {s["id"]: s["result"] for s in result.structured_content["subtasks"]}
    assert outcomes["trip"] == "booked 1 nights in Rome for ed"
    assert [asked.message for asked in desk.asked][:2] == [
        "Where to, ed?",
        "Book 1 nights in Rome?",
    ]
    assert desk.asked[2].message.startswith("Send it?")
    assert desk.clerk.booked == ["ed: Rome"]


@pytest.mark.parametrize(("era", "elicits"), [("legacy", False), ("auto", True)])
async def test_a_plans_question_the_client_cannot_take_ends_the_call_not_the_plan(
    desk: Desk, era: str, elicits: bool
) -> None:
    """Without the capability, or in the 2026-07-28 era (a call asks only by ending its
    round): the tool error input_required names the plan; the plan goes on, and the
    answer from the bus lets it finish."""
    answers = (accept({}),) if elicits else ()
    plan = {"id": f"go-{era}", "subtasks": [APPROVAL]}
    async with desk.client(era, *answers) as client:
        result = await client.call_tool("run_plan", {"plan": plan})
    error = error_of(result)
    question = error["details"]["question"]
    assert (error["code"], question["plan_id"]) == ("input_required", plan["id"])
    assert f"the plan {plan['id']} goes on meanwhile" in error["message"]
    assert desk.asked == []
    assert question["text"] == "Send it?"
    reply = await desk.bus.answer(question["question_id"], True)
    assert reply.result["accepted"] is True
    plans = PlanClient(desk.bus)
    async with asyncio.timeout(10):
        while (state := await plans.status(plan["id"])).state == "running":  # noqa: ASYNC110
            await asyncio.sleep(BEAT)
    assert state.aggregate is not None
    assert state.aggregate.status == "completed"


@pytest.mark.parametrize(("era", "asked"), [("legacy", False), ("auto", True)])
async def test_a_stateless_endpoint_asks_2026_clients_and_tells_2025_ones(
    desk: Desk, era: str, asked: bool
) -> None:
    """Over HTTP with several workers (stateless, here one server so): a 2026-07-28 call
    asks by its round's end, which any worker's retry answers; a 2025 client's call has
    no channel back to it, and gets the tool error at once."""
    port = free_port()
    config = McpSettings(transport="http", port=port, workers=2, refresh_interval=BEAT)
    server = TeamServer(MemoryBus(desk.broker, Settings(), agent_id="mcp-2"), config)
    app = http_app(server, ApiKeys({}, allow_anonymous=True))
    fill = desk.fill(accept({"answer": "Eve"}))
    async with server:
        await wait_until(lambda: "clerk__polite" in server.tools)
        uvicorn, serving = await start_uvicorn(app, port, lifespan="on")
        try:
            url = f"http://127.0.0.1:{port}/mcp"
            async with Client(url, mode=era, elicitation_callback=fill) as client:
                result = await client.call_tool("clerk__polite", {"who": "e"})
        finally:
            await stop_uvicorn(uvicorn, serving)
    if asked:
        assert result.structured_content == {"result": "hello Eve"}
    else:
        assert "(a stateless endpoint)" in error_of(result)["message"]
