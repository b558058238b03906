"""The dashboard's question board on the in-memory bus: questions listed, answered, gone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

import httpx
import pytest
from pydantic import Field

from agentbus import Agent, InputRequired, Settings, ask, skill
from agentbus._exceptions import QuestionClosed, UsageError
from agentbus.dashboard import Dashboard, DashboardSettings, QuestionBoard
from agentbus.dashboard._answering import Outcome
from agentbus.dashboard.app import create_app
from agentbus.leader import Leader, PlanClient, ProgressReport
from agentbus.registry import Registry
from agentbus.testing import MemoryBroker, MemoryBus
from support.waiting import wait_until

TOKEN = "a-token-for-the-tests"


class Asker(Agent):
    name = "asker"
    go_on = asyncio.Event()

    @skill
    async def power(self, n: int) -> int:
        """Ask which power of ``n`` to take (0 to 5)."""
        exponent = await ask(f"Which power of {n}?", Annotated[int, Field(ge=0, le=5)])
        return int(n**exponent)

    @skill
    async def slow(self) -> str:
        """Ask, then work until ``go_on`` is set."""
        word = await ask("A word?")
        await self.go_on.wait()
        return word

    @skill
    async def soon(self) -> str:
        """Ask a question that expires in a moment."""
        return await ask("Quick, a word?", within=0.3)


@dataclass
class Team:
    dashboard: Dashboard
    client: MemoryBus

    def open(self) -> list[dict[str, Any]]:
        questions: list[dict[str, Any]] = self.dashboard.questions.snapshot()["questions"]
        return questions

    async def asked(self, action: str, parameters: dict[str, Any]) -> str:
        """Send a request whose work asks; return the question's id once it is listed."""
        with pytest.raises(InputRequired) as caught:
            await self.client.request("asker", action, parameters, timeout=5)
        question_id = caught.value.question.question_id
        await wait_until(lambda: question_id in {q["question_id"] for q in self.open()}, 5)
        return question_id


def waiting(team: Team, plan_id: str) -> bool:
    """Whether the plan board shows ``plan_id``'s one step waiting for an answer."""
    plans = {plan["plan_id"]: plan for plan in team.dashboard.plans.snapshot()["plans"]}
    subtasks = plans[plan_id]["subtasks"] if plan_id in plans else []
    return [subtask["status"] for subtask in subtasks] == ["input_required"]


@pytest.fixture
async def team() -> AsyncIterator[Team]:
    """A registry, a leader, an agent that asks, a client and a dashboard, in memory."""
    broker = MemoryBroker()
    settings = Settings(shutdown_grace=0.5)

    def bus(agent_id: str) -> MemoryBus:
        return MemoryBus(broker, settings, agent_id=agent_id)

    async with (
        Registry(bus=bus("registry-1"), settings=settings, heartbeat_interval=0.2),
        Leader(bus=bus("leader-1"), settings=settings, heartbeat_interval=0.2),
        Asker(bus=bus("asker-1"), settings=settings, heartbeat_interval=0.2),
        bus("client-1") as client,
        bus("dashboard-1") as watching,
        Dashboard(watching) as dashboard,
    ):
        yield Team(dashboard, client)


async def test_an_agents_question_is_listed_answered_from_the_board_and_leaves(
    team: Team,
) -> None:
    """Who asks, for which request, since when, what fits; the answer's outcome is the
    work's result, and the question leaves the list."""
    question_id = await team.asked("power", {"n": 3})
    [shown] = team.open()
    assert shown["text"] == "Which power of 3?"
    assert (shown["asker"], shown["service"], shown["caller"]) == ("asker-1", "asker", "client-1")
    assert shown["answer_schema"] == {"type": "integer", "minimum": 0, "maximum": 5}
    assert shown["request_id"]
    assert shown["asked_at"]
    assert shown["plan_id"] is None

    sent = await team.dashboard.questions.answer(question_id, 2, by="token@127.0.0.1")

    assert (sent.outcome, sent.result) == (Outcome.RESULT, 9)
    assert team.open() == []
    [told] = team.dashboard.questions.snapshot()["answers"]
    assert (told["outcome"], told["result"], told["by"]) == ("result", "9", "token@127.0.0.1")
    assert "answer" not in told, "what was answered is not shown (it may be a secret)"


async def test_an_answer_that_does_not_fit_is_asked_again_with_the_reason(team: Team) -> None:
    """The re-asked question (a new id, ``rejected`` set) takes the old one's place."""
    question_id = await team.asked("power", {"n": 2})

    sent = await team.dashboard.questions.answer(question_id, 9, by="token@127.0.0.1")

    assert sent.outcome is Outcome.ASKED
    assert sent.next_question is not None
    [again] = team.open()
    assert again["question_id"] == sent.next_question.question_id != question_id
    assert again["rejected"]["answer"] == 9
    assert again["caller"] == "dashboard-1"  # the work now asks whoever answered
    done = await team.dashboard.questions.answer(again["question_id"], 3, by="token@127.0.0.1")
    assert (done.outcome, done.result) == (Outcome.RESULT, 8)
    assert team.open() == []


async def test_a_declined_question_ends_the_work_cancelled(team: Team) -> None:
    """Decline: the skill's ask raises QuestionDeclined, and the work ends ``cancelled``."""
    question_id = await team.asked("power", {"n": 4})

    sent = await team.dashboard.questions.answer(question_id, decline=True, by="token@x")

    assert sent.outcome is Outcome.FAILED
    assert sent.error is not None
    assert sent.error.code == "cancelled"
    await wait_until(lambda: team.open() == [], 5)  # the agent says it took the decline


async def test_a_question_answered_elsewhere_leaves_and_a_second_answer_is_refused(
    team: Team,
) -> None:
    """Answered by another client: gone from the list; the board's answer is refused."""
    question_id = await team.asked("power", {"n": 5})

    reply = await team.client.answer(question_id, 1, timeout=5)

    assert reply.result == 5
    await wait_until(lambda: team.open() == [], 5)
    sent = await team.dashboard.questions.answer(question_id, 1, by="token@x")
    assert sent.outcome is Outcome.CLOSED
    assert isinstance(sent.error, QuestionClosed)
    assert sent.error.details["reason"] == "answered"


async def test_an_expired_question_leaves_the_board(team: Team) -> None:
    """A question past its ``expires_at`` is dropped, with nobody answering it."""
    await team.asked("soon", {})
    [shown] = team.open()
    assert shown["expires_at"] is not None

    await wait_until(lambda: team.open() == [], 5)


async def test_a_plan_question_stands_for_its_agents_and_is_answered_through_the_plan(
    team: Team,
) -> None:
    """The leader's question is listed, the agent's hidden; the answer goes to the
    leader, which takes it; the plan completes and the question leaves."""
    plan = {
        "id": "plan-q",
        "subtasks": [{"id": "pow", "skill": "power", "service": "asker", "parameters": {"n": 3}}],
    }
    running = asyncio.create_task(PlanClient(team.client).run(plan, timeout=10))

    def plan_question() -> bool:
        board = team.dashboard.questions.snapshot()
        return len(board["questions"]) == 1 and board["hidden"] == 1

    await wait_until(plan_question, 5)
    [shown] = team.open()
    assert (shown["service"], shown["plan_id"], shown["subtask_id"]) == ("leader", "plan-q", "pow")
    assert (shown["asker"], shown["text"]) == ("leader-1", "Which power of 3?")
    await wait_until(lambda: waiting(team, "plan-q"), 5)
    [subtask] = team.dashboard.plans.snapshot()["plans"][0]["subtasks"]
    assert subtask["message"] == "asks: Which power of 3?"
    hidden = next(
        q for q in team.dashboard.questions._open.values() if q.question.plan_id is None
    ).question
    with pytest.raises(UsageError, match="through its plan"):
        await team.dashboard.questions.answer(hidden.question_id, 2, by="token@x")

    sent = await team.dashboard.questions.answer(shown["question_id"], 2, by="token@x")

    assert sent.outcome is Outcome.ACCEPTED
    aggregate = await running
    assert aggregate.subtask("pow").result == 9
    board = team.dashboard.questions.snapshot()
    assert (board["questions"], board["hidden"]) == ([], 0)


async def test_a_plans_questions_leave_when_the_plan_ends(team: Team) -> None:
    """An approval step waits; the plan is cancelled from the board; its question goes."""
    plan = {
        "id": "plan-ok",
        "subtasks": [{"id": "ok", "skill": "approval", "parameters": {"question": "Go?"}}],
    }
    running = asyncio.create_task(PlanClient(team.client).run(plan, timeout=10))
    await wait_until(lambda: len(team.open()) == 1, 5)
    [shown] = team.open()
    assert shown["answer_schema"]["properties"]["approved"] == {
        "title": "Approved",
        "type": "boolean",
    }

    await wait_until(lambda: waiting(team, "plan-ok"), 5)  # the plan board knows it
    await team.dashboard.plans.cancel("plan-ok")

    await wait_until(lambda: team.open() == [], 5)
    with pytest.raises(Exception, match="cancelled"):
        await running


async def test_a_late_asked_does_not_bring_back_a_closed_question(team: Team) -> None:
    """News may come out of order: once a question is answered, its asking is ignored."""
    question = {
        "question_id": "leader.1795883700500.14852a33ad910141",
        "text": "Print it?",
        "asker": "leader-9",
        "service": "leader",
        "action": "run_plan",
        "request_id": "r-1",
        "asked_at": "2026-11-28T16:28:40.140Z",
        "plan_id": "p-9",
        "subtask_id": "ok",
    }

    def report(transition: str, detail: dict[str, Any]) -> ProgressReport:
        step = {"plan_id": "p-9", "subtask_id": "ok", "skill": "approval", "attempt": 1}
        change = step | {"transition": transition, "detail": detail, "done": 0, "total": 2}
        return ProgressReport.model_validate(
            {"plan_id": "p-9", "done": 0, "total": 2, "transitions": [change]}
        )

    board = team.dashboard.questions
    board.take_report("leader-9", report("answered", {"question_id": question["question_id"]}))
    board.take_report("leader-9", report("input_required", {"question": question}))

    assert team.open() == []


async def test_the_answer_api_needs_the_token_and_says_what_came_of_the_answer(
    team: Team,
) -> None:
    """POST /api/questions/{id}/answer: 401 without the token, 400 for a body that is not
    an answer, the outcome when sent; 409 for a question no longer open."""
    app = create_app(lambda: team.dashboard, DashboardSettings(token=TOKEN))
    question_id = await team.asked("power", {"n": 3})
    path = f"/api/questions/{question_id}/answer"
    token = {"Authorization": f"Bearer {TOKEN}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        assert (await http.post(path, json={"answer": 2})).status_code == 401
        wrong = await http.post(path, json={"answer": 2}, headers={"Authorization": "Bearer no"})
        assert wrong.status_code == 401
        assert team.open() != [], "refused: nothing was sent"
        for body in (b"not json", b"[2]", b"{}"):
            assert (await http.post(path, content=body, headers=token)).status_code == 400
        not_an_id = await http.post("/api/questions/nope/answer", json={"answer": 2}, headers=token)
        assert not_an_id.status_code == 400

        answered = await http.post(path, json={"answer": 2}, headers=token)
        assert answered.status_code == 200
        assert answered.json() | {"at": None} == {
            "question_id": question_id,
            "text": "Which power of 3?",
            "service": "asker",
            "plan_id": None,
            "subtask_id": None,
            "by": "token@127.0.0.1",
            "declined": False,
            "at": None,
            "outcome": "result",
            "result": "9",
            "error": None,
            "next_question_id": None,
        }
        again = await http.post(path, json={"answer": 2}, headers=token)
        assert again.status_code == 409
        assert (again.json()["code"], again.json()["reason"]) == ("question_closed", "answered")

        other = await team.asked("power", {"n": 2})
        declined = await http.post(
            f"/api/questions/{other}/answer", json={"decline": True}, headers=token
        )
        assert declined.status_code == 200
        assert (declined.json()["outcome"], declined.json()["error"]["code"]) == (
            "failed",
            "cancelled",
        )


async def test_an_outcome_that_comes_late_is_shown_when_it_comes(team: Team) -> None:
    """The work after the answer outlasts the wait: the answer returns still waiting (a
    second one is refused as closed), and the board shows the result once it comes."""
    changes: list[None] = []
    board = QuestionBoard(team.client, on_change=lambda: changes.append(None), wait=0.05)
    await board.start()
    try:
        Asker.go_on = asyncio.Event()  # of this test's loop
        question_id = await team.asked("slow", {})
        await wait_until(lambda: bool(board.snapshot()["questions"]), 5)

        sent = await board.answer(question_id, "bees", by="token@x")

        assert sent.outcome is Outcome.WAITING
        [told] = board.snapshot()["answers"]
        assert told["outcome"] == "waiting"
        # Taken: the agent says so before the work is done, and the question leaves.
        await wait_until(lambda: board.snapshot()["questions"] == [], 5)
        second = await board.answer(question_id, "wasps", by="token@y")
        await second.done.wait()
        assert second.outcome is Outcome.CLOSED
        seen = len(changes)
        Asker.go_on.set()
        await sent.done.wait()
        assert (sent.outcome, sent.result) == (Outcome.RESULT, "bees")
        closed, done = board.snapshot()["answers"]  # newest first
        assert (closed["outcome"], done["result"]) == ("closed", '"bees"')
        assert len(changes) > seen, "the page is told"
    finally:
        await board.aclose()
