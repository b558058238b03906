"""The W3C trace of a request reaches every request and event its handler sends, and a
plan's reaches every subtask."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from agentbus import Agent, EventEnvelope, Leader, Settings, current_request, skill
from agentbus.bus import current_trace
from agentbus.leader import PlanStatus
from agentbus.registry import Registry
from agentbus.testing import MemoryBroker, MemoryBus

TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class Front(Agent):
    name = "front"

    @skill
    async def ask(self, question: str) -> dict[str, Any]:
        """Asks the back service and tells everyone."""
        await self.bus.emit("asked", {"question": question})
        reply = await self.bus.request("back", "answer", {"question": question}, timeout=5)
        return {"answer": reply.result, "reply_trace": reply.metadata.trace}


class Back(Agent):
    name = "back"
    seen: list[str | None] = []

    @skill
    async def answer(self, question: str) -> str:
        Back.seen.append(current_request().metadata.trace)
        return question[::-1]


async def test_a_handler_s_requests_and_events_carry_the_trace_it_was_served_with() -> None:
    """front's request to back and its event have the trace of the request front served."""
    Back.seen = []
    broker = MemoryBroker()
    events: list[EventEnvelope] = []
    async with (
        Front(bus=MemoryBus(broker, agent_id="front-1")),
        Back(bus=MemoryBus(broker, agent_id="back-1")),
        MemoryBus(broker) as client,
    ):
        await client.subscribe("broadcast.event.asked", events.append)
        traced = await client.request(
            "front", "ask", {"question": "bees"}, metadata={"trace": TRACE}
        )
        untraced = await client.request("front", "ask", {"question": "wasps"})
    assert traced.result == {"answer": "seeb", "reply_trace": TRACE}
    assert traced.metadata.trace == TRACE
    assert untraced.result == {"answer": "spsaw", "reply_trace": None}
    assert Back.seen == [TRACE, None]
    assert [event.metadata.trace for event in events] == [TRACE, None]
    assert current_trace() is None  # nothing leaks into the caller's context


async def test_a_plan_s_trace_reaches_every_subtask() -> None:
    """run_plan with a trace: each subtask request carries it."""
    Back.seen = []
    broker = MemoryBroker()
    settings = Settings(shutdown_grace=0.5)
    plan = {
        "id": "traced",
        "subtasks": [
            {"id": "one", "skill": "answer", "parameters": {"question": "ab"}},
            {"id": "two", "skill": "answer", "depends_on": ["one"], "inputs": {"question": "one"}},
        ],
    }
    async with (
        Registry(bus=MemoryBus(broker, settings, agent_id="registry-1"), heartbeat_interval=0.2),
        Leader(bus=MemoryBus(broker, settings, agent_id="leader-1"), heartbeat_interval=0.2),
        Back(bus=MemoryBus(broker, settings, agent_id="back-1"), heartbeat_interval=0.2),
        MemoryBus(broker, settings, agent_id="submitter") as bus,
    ):
        reply = await bus.request(
            "leader", "run_plan", {"plan": plan}, timeout=20, metadata={"trace": TRACE}
        )
    assert reply.result["status"] == PlanStatus.COMPLETED.value
    assert Back.seen == [TRACE, TRACE]


def test_without_tracing_nothing_of_opentelemetry_is_imported() -> None:
    """Tracing off (the default): a request served and answered imports no OpenTelemetry."""
    program = """
import asyncio, sys
from agentbus import RequestEnvelope
from agentbus.testing import MemoryBroker, MemoryBus

async def main() -> None:
    broker = MemoryBroker()
    async def echo(request: RequestEnvelope) -> str:
        return "ok"
    async with MemoryBus(broker) as server, MemoryBus(broker) as client:
        await server.serve(echo, service="echo")
        await client.request("echo", "go", metadata={"trace": sys.argv[1]})
    print(sorted(name for name in sys.modules if name.startswith("opentelemetry")))

asyncio.run(main())
"""
    done = subprocess.run(
        [sys.executable, "-c", program, TRACE], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
