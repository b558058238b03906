"""Progress and partial results from skills: in order, before the result, to every caller."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentbus import (
    Agent,
    Leader,
    Metrics,
    PlanClient,
    RemoteError,
    ResponseEnvelope,
    Settings,
    UsageError,
    report_progress,
    report_usage,
    send_partial,
    skill,
)
from agentbus.leader import PlanStatus, Progress
from agentbus.registry import Registry
from agentbus.testing import MemoryBroker, MemoryBus


class Writer(Agent):
    name = "writer"

    @skill
    async def essay(self, topic: str, parts: int = 3) -> str:
        """Writes part by part, saying how far it is and sending each part as it is done."""
        written = []
        for n in range(parts):
            await report_progress(n / parts, f"writing part {n + 1}")
            written.append(f"{topic} {n}.")
            await send_partial({"part": n, "text": written[-1]})
        return " ".join(written)

    @skill
    async def words(self, text: str) -> AsyncIterator[str]:
        """Streams: each word is a partial result; the result is the list of them."""
        for word in text.split():
            yield word.upper()

    @skill
    async def overdone(self) -> None:
        await report_progress(1.5)


def _updates(replies: list[ResponseEnvelope]) -> list[tuple[str, Any]]:
    shown = []
    for reply in replies:
        result = dict(reply.payload.result)
        assert result.pop("agent_id") == "writer-1"
        state = result.pop("state")
        shown.append((state, result))
    return shown


async def test_progress_and_partial_results_arrive_in_order_before_the_result() -> None:
    """report_progress and send_partial reach on_progress as in_progress responses, in order."""
    broker = MemoryBroker()
    seen: list[ResponseEnvelope] = []
    async with (
        Writer(bus=MemoryBus(broker, agent_id="writer-1")),
        MemoryBus(broker) as client,
    ):
        reply = await client.request("writer", "essay", {"topic": "bees"}, on_progress=seen.append)
    assert reply.result == "bees 0. bees 1. bees 2."
    assert _updates(seen) == [
        ("progress", {"fraction": 0.0, "message": "writing part 1"}),
        ("partial", {"seq": 0, "chunk": {"part": 0, "text": "bees 0."}}),
        ("progress", {"fraction": 1 / 3, "message": "writing part 2"}),
        ("partial", {"seq": 1, "chunk": {"part": 1, "text": "bees 1."}}),
        ("progress", {"fraction": 2 / 3, "message": "writing part 3"}),
        ("partial", {"seq": 2, "chunk": {"part": 2, "text": "bees 2."}}),
    ]


async def test_an_async_generator_skill_streams_its_items_and_returns_their_list() -> None:
    """Each yielded item is a partial result at once; the result is the list; the card says so."""
    broker = MemoryBroker()
    seen: list[ResponseEnvelope] = []
    writer = Writer(bus=MemoryBus(broker, agent_id="writer-1"))
    async with writer, MemoryBus(broker) as client:
        reply = await client.request("writer", "words", {"text": "a b c"}, on_progress=seen.append)
    assert reply.result == ["A", "B", "C"]
    assert _updates(seen) == [("partial", {"seq": n, "chunk": w}) for n, w in enumerate("ABC")]
    [card] = [s for s in writer.card.skills if s.name == "words"]
    assert card.result == {"items": {"type": "string"}, "type": "array"}


async def test_a_fraction_outside_zero_to_one_is_the_skill_s_error() -> None:
    """report_progress(1.5) fails the skill with a clear error, answered to the caller."""
    broker = MemoryBroker()
    async with Writer(bus=MemoryBus(broker, agent_id="writer-1")), MemoryBus(broker) as client:
        with pytest.raises(RemoteError, match="not between 0 and 1"):
            await client.request("writer", "overdone")


async def test_progress_outside_a_skill_is_a_usage_error() -> None:
    """Called from anywhere but a running skill, it says so."""
    with pytest.raises(UsageError, match="inside a running skill"):
        await report_progress(0.5)
    with pytest.raises(UsageError, match="inside a running skill"):
        await send_partial("x")


async def test_a_plan_reports_a_subtask_s_progress_and_partials_in_order() -> None:
    """Plan progress carries the skill's own updates: progress and partial transitions."""
    broker = MemoryBroker()
    settings = Settings(shutdown_grace=0.5)
    seen: list[Progress] = []
    async with (
        Registry(bus=MemoryBus(broker, settings, agent_id="registry-1"), heartbeat_interval=0.2),
        Leader(bus=MemoryBus(broker, settings, agent_id="leader-1"), heartbeat_interval=0.2),
        Writer(bus=MemoryBus(broker, settings, agent_id="writer-1"), heartbeat_interval=0.2),
        MemoryBus(broker, settings, agent_id="submitter") as bus,
    ):
        plan = {
            "id": "streamed",
            "subtasks": [{"id": "w", "skill": "words", "parameters": {"text": "x y"}}],
        }
        aggregate = await PlanClient(bus).run(plan, timeout=20, on_progress=seen.append)
    assert aggregate.status is PlanStatus.COMPLETED
    assert aggregate.subtask("w").result == ["X", "Y"]
    updates = [(p.transition, p.detail) for p in seen if p.transition in ("progress", "partial")]
    assert updates == [("partial", {"seq": 0, "chunk": "X"}), ("partial", {"seq": 1, "chunk": "Y"})]
    transitions = [p.transition for p in seen]
    assert transitions.index("running") < transitions.index("partial")
    assert transitions[-1] == "succeeded"


class Metered(Agent):
    name = "metered"

    @skill
    async def think(self, prompt: str) -> str:
        """Reports what it used, in two goes: the amounts are summed."""
        report_usage(tokens_in=len(prompt), usd=0.001)
        report_usage(tokens_out=5, usd=0.002)
        return prompt.upper()

    @skill
    async def wasteful(self) -> None:
        report_usage(tokens_in=-1)


async def test_usage_rides_on_the_response_and_is_counted_per_service() -> None:
    """report_usage sums per unit into metadata.usage; the metrics count it by service."""
    broker = MemoryBroker()
    metrics = Metrics()
    agent = Metered(bus=MemoryBus(broker, agent_id="metered-1"), metrics=metrics)
    async with agent, MemoryBus(broker) as client:
        reply = await client.request("metered", "think", {"prompt": "bees"})
        with pytest.raises(RemoteError, match="tokens_in=-1 is not a finite amount"):
            await client.request("metered", "wasteful")
    assert reply.result == "BEES"
    assert reply.metadata.model_extra == {"usage": {"tokens_in": 4, "usd": 0.003, "tokens_out": 5}}
    sample = metrics.registry.get_sample_value
    labels = {"service": "metered", "action": "think"}
    assert sample("agentbus_usage_total", labels | {"unit": "tokens_in"}) == 4
    assert sample("agentbus_usage_total", labels | {"unit": "usd"}) == pytest.approx(0.003)


async def test_a_plan_sums_usage_per_subtask_and_stops_when_its_budget_is_spent() -> None:
    """Per subtask and in totals, exact; past the budget no further attempt starts."""
    broker = MemoryBroker()
    settings = Settings(shutdown_grace=0.5)
    step = {"skill": "think", "parameters": {"prompt": "0123456789"}}
    plan = {
        "id": "budgeted",
        "budget": {"tokens_in": 15},
        "subtasks": [
            {"id": "a", **step},
            {"id": "b", **step, "depends_on": ["a"]},
            {"id": "c", **step, "depends_on": ["b"]},
        ],
    }
    async with (
        Registry(bus=MemoryBus(broker, settings, agent_id="registry-1"), heartbeat_interval=0.2),
        Leader(bus=MemoryBus(broker, settings, agent_id="leader-1"), heartbeat_interval=0.2),
        Metered(bus=MemoryBus(broker, settings, agent_id="metered-1"), heartbeat_interval=0.2),
        MemoryBus(broker, settings, agent_id="submitter") as bus,
    ):
        aggregate = await PlanClient(bus).run(plan, timeout=20)
    one = {"tokens_in": 10, "tokens_out": 5, "usd": 0.003}
    assert aggregate.subtask("a").usage == one
    assert aggregate.subtask("b").usage == one
    assert aggregate.totals.usage == {
        "tokens_in": 20,
        "tokens_out": 10,
        "usd": pytest.approx(0.006),
    }
    c = aggregate.subtask("c")
    assert (c.status.value, c.attempts, c.usage) == ("cancelled", 1, None)
    assert c.error == {"code": "cancelled", "message": "plan budget spent (tokens_in 20 of 15)"}
    assert aggregate.status is PlanStatus.FAILED
