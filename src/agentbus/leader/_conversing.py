"""A plan's steps that ask: the plan's question opened, waited on, answered, journaled.

A step whose agent asks (``Asked``) waits, holding no agent: the plan asks its people
in the leader's name (``PlanQuestions``), the step shows ``input_required`` with the
question in the plan's progress and status, and the answer goes to the agent that asked.
Its reply is how the step goes on: the result, another question, or an error. An
approval step asks without any agent; its answer decides it. A durable plan journals
each question and each answer, so a leader taking the plan over waits on the same
question (same id), or gives the answer it finds there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from agentbus.envelopes import Question
from agentbus.leader._aggregate import SubtaskStatus
from agentbus.leader._attempt import Answered, AttemptResult, Failed, SubtaskError
from agentbus.leader._limits import Limits
from agentbus.leader._plan import Subtask
from agentbus.leader._questions import (
    Given,
    OpenQuestion,
    PlanAsking,
    approval_answer,
    seconds_to,
)
from agentbus.leader._record import SubtaskRecord
from agentbus.leader._sender import AttemptSender, Emit
from agentbus.leader._takeover import TakeOver

__all__ = ["Conversing"]


class Conversing:
    """The questions of one plan's steps.

    A durable plan whose every step still running waits for an answer, for
    ``asking.park_after`` seconds, is told to park (``wake``); ``park`` then closes its
    questions, for the journal to keep.

    Args:
        asking: The leader's open questions, the request's id, when to park.
        sender: Sends each answer on to the agent that asked.
        limits: The plan's deadline, which caps every wait.
        emit: Reports a step's ``input_required`` and ``answered`` transitions.
        takeover: A durable plan's journal, and what an earlier leader left of it.
        plan_id: The plan's id.
        running: How many steps run now (waiting ones included).
        wake: Called when the plan is to park.
    """

    def __init__(
        self,
        asking: PlanAsking,
        sender: AttemptSender,
        limits: Limits,
        emit: Emit,
        takeover: TakeOver | None,
        *,
        plan_id: str,
        running: Callable[[], int],
        wake: Callable[[], None],
    ) -> None:
        self._questions = asking.questions
        self._sender = sender
        self._limits = limits
        self._emit = emit
        self._takeover = takeover
        self._plan_id = plan_id
        self._request_id = asking.request_id
        self._running = running
        self._waiting: dict[str, OpenQuestion] = {}  # by subtask id
        self._park_after = asking.park_after if takeover is not None else None
        self._wake = wake
        self._timer: asyncio.TimerHandle | None = None

    def __repr__(self) -> str:
        return f"<Conversing plan_id={self._plan_id!r} waiting={len(self._waiting)}>"

    def park(self) -> list[Question] | None:
        """Close the questions of the steps waiting, for the plan to park; None when a
        step runs, or one has its answer already (then nothing is closed: it goes on)."""
        self._timer = None
        if self._park_after is None or len(self._waiting) != self._running():
            return None
        if any(opened.answered.done() for opened in self._waiting.values()):
            return None
        questions = [opened.question for opened in self._waiting.values()]
        for opened in self._waiting.values():
            self._questions.close(opened)
        return questions

    async def converse(
        self, subtask: Subtask, record: SubtaskRecord, asked: Question, tried: set[str]
    ) -> AttemptResult:
        """Ask the plan's people what the step's agent asks; give it their answer."""
        opened = self._open(record.id, asked=asked)
        return await self._wait_and_give(subtask, record, opened, tried, journal=True)

    async def approve(
        self, subtask: Subtask, record: SubtaskRecord, parameters: dict[str, Any]
    ) -> AttemptResult:
        """Ask the plan's people to approve (``parameters["question"]``, the rest shown
        with it); the answer is the step's result, or a refusal its failure."""
        record.attempts = max(record.attempts, 1)
        resumed = await self.resumed(subtask, record, set())
        if resumed is not None:
            return resumed
        data = {name: value for name, value in parameters.items() if name != "question"}
        text = str(parameters.get("question") or f"Approve {subtask.id}?")
        opened = self._open(record.id, text=text, data=data or None)
        return await self._wait_and_give(subtask, record, opened, set(), journal=True)

    async def resumed(
        self, subtask: Subtask, record: SubtaskRecord, tried: set[str]
    ) -> AttemptResult | None:
        """Go on with a question an earlier leader left the step waiting on (the same
        question, by id); None when it left none."""
        left = None if self._takeover is None else self._takeover.asking(record.id)
        if left is None:
            return None
        plan_question = Question.model_validate(left["question"])
        asked = None if left.get("asked") is None else Question.model_validate(left["asked"])
        opened = self._open(
            record.id,
            asked=asked,
            text=plan_question.text,
            data=plan_question.data,
            question_id=plan_question.question_id,
        )
        answer = left.get("answer")
        if answer is None:
            return await self._wait_and_give(subtask, record, opened, tried, journal=False)
        self._questions.close(opened)
        given = Given(answer.get("value"), bool(answer.get("declined")), str(answer.get("by")))
        return await self._give(subtask, record, opened, given, tried)

    def _open(
        self,
        step_id: str,
        *,
        asked: Question | None = None,
        text: str | None = None,
        data: dict[str, Any] | None = None,
        question_id: str | None = None,
    ) -> OpenQuestion:
        return self._questions.ask(
            plan_id=self._plan_id,
            subtask_id=step_id,
            request_id=self._request_id,
            asked=asked,
            text=text,
            data=data,
            question_id=question_id,
        )

    async def _wait_and_give(
        self,
        subtask: Subtask,
        record: SubtaskRecord,
        opened: OpenQuestion,
        tried: set[str],
        *,
        journal: bool,
    ) -> AttemptResult:
        question = opened.question
        try:
            if journal and self._takeover is not None:
                asked = None if opened.asked is None else opened.asked.model_dump(mode="json")
                await self._takeover.asked(record.id, question.model_dump(mode="json"), asked)
            record.status = SubtaskStatus.INPUT_REQUIRED
            self._emit(record, "input_required", detail={"question": _shown(question)})
            self._waits(record.id, opened)
            given = await self._wait(opened)
        finally:
            self._waits(record.id, None)
            self._questions.close(opened)
        if given is None:
            return Failed(SubtaskError.unanswered(question.question_id))
        if self._takeover is not None:
            answer = {"value": given.value, "declined": given.declined, "by": given.by}
            await self._takeover.answered(record.id, question.question_id, answer)
        return await self._give(subtask, record, opened, given, tried)

    def stop_parking(self) -> None:
        """The run ends: no park is due."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _waits(self, subtask_id: str, opened: OpenQuestion | None) -> None:
        if opened is None:
            self._waiting.pop(subtask_id, None)
        else:
            self._waiting[subtask_id] = opened
        if self._park_after is None:
            return
        running = self._running()
        if running > 0 and len(self._waiting) == running and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._park_after, self._wake)
        elif len(self._waiting) != running:
            self.stop_parking()

    async def _wait(self, opened: OpenQuestion) -> Given | None:
        try:
            async with asyncio.timeout(seconds_to(opened.question, self._limits.seconds_left())):
                return await asyncio.shield(opened.answered)
        except TimeoutError:
            return None

    async def _give(
        self,
        subtask: Subtask,
        record: SubtaskRecord,
        opened: OpenQuestion,
        given: Given,
        tried: set[str],
    ) -> AttemptResult:
        record.status = SubtaskStatus.RUNNING
        detail = {"question_id": opened.question.question_id, "by": given.by}
        self._emit(record, "answered", detail=detail | {"declined": given.declined})
        if opened.asked is not None:
            return await self._sender.answer(
                subtask, record, opened.asked, given, tried, timeout=subtask.timeout
            )
        approval = None if given.declined else approval_answer(given.value)
        if approval is None or not approval.approved:
            return Failed(SubtaskError.declined(given.by, approval.note if approval else ""))
        result = {"approved": True, "note": approval.note, "by": given.by}
        return Answered(result, opened.question.asker)


def _shown(question: Question) -> dict[str, Any]:
    return question.model_dump(mode="json")
