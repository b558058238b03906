"""A plan's step that asks waits for its people's answer; an approval step asks them itself."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from agentbus import (
    Agent,
    Leader,
    PlanClient,
    Question,
    QuestionClosed,
    RemoteError,
    Settings,
    ask,
    skill,
)
from agentbus.envelopes import ErrorCode
from agentbus.leader import PlanState, PlanStatus, Progress, SubtaskStatus
from agentbus.registry import Registry
from agentbus.testing import MemoryBroker, MemoryBus


class Editor(Agent):
    name = "editor"

    @skill
    async def title(self, topic: str) -> str:
        """Asks which title to use."""
        chosen = await ask(f"Title for {topic}?")
        return chosen.upper()


@asynccontextmanager
async def team(broker: MemoryBroker) -> AsyncIterator[PlanClient]:
    async with (
        Registry(bus=MemoryBus(broker, agent_id="registry-1"), heartbeat_interval=0.2),
        Leader(bus=MemoryBus(broker, agent_id="leader-1"), heartbeat_interval=0.2),
        Editor(bus=MemoryBus(broker, agent_id="editor-1"), heartbeat_interval=0.2),
        MemoryBus(broker) as client,
    ):
        yield PlanClient(client)


PLAN: dict[str, Any] = {
    "id": "issue-7",
    "subtasks": [
        {"id": "name", "skill": "title", "service": "editor", "parameters": {"topic": "bees"}},
        {
            "id": "sign-off",
            "skill": "approval",
            "parameters": {"question": "Print it?"},
            "inputs": {"title": "name"},
            "depends_on": ["name"],
        },
        {
            "id": "after",
            "skill": "title",
            "service": "editor",
            "depends_on": ["sign-off"],
            "parameters": {"topic": "wasps"},
        },
    ],
}


async def test_on_question_answers_each_step_that_asks_and_the_plan_completes() -> None:
    """The agent's question and the approval come to on_question; their answers decide."""
    broker = MemoryBroker()
    asked: list[Question] = []

    async def answer(question: Question) -> Any:
        asked.append(question)
        if question.subtask_id == "sign-off":
            return {"approved": True, "note": "go"}
        return f"all about {question.text.split()[-1].rstrip('?')}"

    async with team(broker) as plans:
        aggregate = await plans.run(PLAN, timeout=10, on_question=answer)
    assert aggregate.status is PlanStatus.COMPLETED
    assert aggregate.subtask("name").result == "ALL ABOUT BEES"
    assert aggregate.subtask("sign-off").result["approved"] is True
    assert aggregate.subtask("after").result == "ALL ABOUT WASPS"
    assert [q.subtask_id for q in asked] == ["name", "sign-off", "after"]
    assert {q.service for q in asked} == {"leader"}
    assert asked[1].data == {"title": "ALL ABOUT BEES"}


async def test_a_waiting_step_shows_in_status_and_is_answered_from_another_client() -> None:
    """plan_status lists the open question; any client answers it by id."""
    broker = MemoryBroker()
    waiting = asyncio.Event()
    seen: list[Progress] = []

    def follow(progress: Progress) -> None:
        seen.append(progress)
        if progress.transition == "input_required":
            waiting.set()

    plan = {"id": "one-step", "subtasks": PLAN["subtasks"][:1]}
    async with team(broker) as plans:
        run = asyncio.create_task(plans.run(plan, timeout=10, on_progress=follow))
        await waiting.wait()
        state = await plans.status("one-step")
        [question] = state.questions
        assert question.text == "Title for bees?"
        assert state.subtasks[0].status is SubtaskStatus.INPUT_REQUIRED
        async with MemoryBus(broker) as other:
            accepted = await PlanClient(other).answer(question.question_id, "hives")
        assert accepted["subtask_id"] == "name"
        aggregate = await run
        with pytest.raises(QuestionClosed):
            await plans.answer(question.question_id, "again")
    assert aggregate.subtask("name").result == "HIVES"
    transitions = [
        p.transition for p in seen if p.subtask_id == "name" and p.transition != "running"
    ]
    assert transitions == ["started", "input_required", "answered", "succeeded"]


async def test_a_refused_approval_fails_the_step_and_stops_the_plan() -> None:
    """Approved false: the approval step fails, its dependents are skipped."""
    broker = MemoryBroker()

    async def answer(question: Question) -> Any:
        if question.subtask_id == "sign-off":
            return {"approved": False, "note": "too long"}
        return "t"

    async with team(broker) as plans:
        aggregate = await plans.run(PLAN, timeout=10, on_question=answer)
    sign_off = aggregate.subtask("sign-off")
    assert aggregate.status is PlanStatus.FAILED
    assert sign_off.status is SubtaskStatus.FAILED
    assert sign_off.error is not None
    assert "too long" in sign_off.error["message"]
    assert aggregate.subtask("after").status is SubtaskStatus.SKIPPED


async def test_an_answer_that_is_no_approval_is_refused_and_the_question_stays_open() -> None:
    """'maybe' to an approval: invalid_parameters to the answerer; a true later approves."""
    broker = MemoryBroker()
    waiting = asyncio.Event()
    questions: list[Question] = []

    def follow(progress: Progress) -> None:
        if progress.transition == "input_required":
            questions.append(Question.model_validate(progress.detail["question"]))
            waiting.set()

    plan = {"id": "approve-only", "subtasks": [{"id": "ok", "skill": "approval"}]}
    async with team(broker) as plans:
        run = asyncio.create_task(plans.run(plan, timeout=10, on_progress=follow))
        await waiting.wait()
        with pytest.raises(RemoteError) as refused:
            await plans.answer(questions[0], "maybe")
        assert refused.value.code == ErrorCode.INVALID_PARAMETERS
        await plans.answer(questions[0], True)
        aggregate = await run
    assert aggregate.subtask("ok").result["approved"] is True
    assert questions[0].text == "Approve ok?"


async def test_a_plan_that_waits_only_for_people_parks_and_an_answer_resumes_it() -> None:
    """Durable, park_after 0.05 s: the leader lets the plan go (nothing running, status
    waiting); the answer, taken by another leader, resumes it; the aggregate reaches the
    request that began it."""
    broker = MemoryBroker()
    settings = Settings(plan_park_after=0.05)
    waiting = asyncio.Event()
    questions: list[Question] = []

    def follow(progress: Progress) -> None:
        if progress.transition == "input_required":
            questions.append(Question.model_validate(progress.detail["question"]))
            waiting.set()

    plan = {"id": "parked", "subtasks": PLAN["subtasks"][:1]}
    first = Leader(
        bus=MemoryBus(broker, settings, agent_id="leader-1"),
        settings=settings,
        durable=True,
        heartbeat_interval=0.2,
    )
    async with (
        Registry(bus=MemoryBus(broker, agent_id="registry-1"), heartbeat_interval=0.2),
        Editor(bus=MemoryBus(broker, agent_id="editor-1"), heartbeat_interval=0.2),
        MemoryBus(broker) as client,
    ):
        plans = PlanClient(client)
        async with first:
            run = asyncio.create_task(plans.run(plan, timeout=20, on_progress=follow))
            await waiting.wait()
            state = await _parked(plans, "parked")
            assert first.in_flight == 0  # nothing held: no run_plan running
        assert state.questions[0].question_id == questions[0].question_id
        # The first leader is gone; another takes the answer and resumes the plan.
        second = Leader(
            bus=MemoryBus(broker, settings, agent_id="leader-2"),
            settings=settings,
            durable=True,
            heartbeat_interval=0.2,
        )
        async with second:
            accepted = await plans.answer(questions[0].question_id, "swarms")
            aggregate = await run
    assert accepted["accepted"] is True
    assert aggregate.status is PlanStatus.COMPLETED
    assert aggregate.subtask("name").result == "SWARMS"


async def _parked(plans: PlanClient, plan_id: str) -> PlanState:
    # Parking is the leader's own timer (park_after): look until the plan says it waits.
    async with asyncio.timeout(10):
        while (state := await plans.status(plan_id)).state != "waiting":  # noqa: ASYNC110
            await asyncio.sleep(0.02)  # a look every 20 ms: no event says a plan parked
    return state
