"""The questions of the plans a leader runs: a step's agent asks, or an approval step does.

A plan's step that asks is not answered by the leader. The leader asks the plan's
people in its own name: a question of the leader's service (its id routes the answer to a
leader), carrying the plan and the step, shown in the plan's progress and status. The
answer, to any leader, reaches the one running the plan (``PlanQuestions.answer``), which
hands it on to the agent that asked, or, for an approval step, decides the step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final

from pydantic import BaseModel, TypeAdapter, ValidationError

from agentbus._exceptions import InvalidParameters, QuestionClosed
from agentbus.agents import QUESTION_ANSWERED, QUESTION_ASKED
from agentbus.envelopes import Question, QuestionKind, new_question_id, utcnow

__all__ = [
    "APPROVAL",
    "Approval",
    "Given",
    "OpenQuestion",
    "PlanAsking",
    "PlanQuestions",
    "approval_answer",
    "seconds_to",
]

News = Callable[[str, dict[str, Any]], None]

APPROVAL: Final = "approval"
"""The skill of an approval step: the leader asks the plan's people, no agent runs."""


class Approval(BaseModel):
    """The answer to an approval step: ``true`` alone approves too."""

    approved: bool
    note: str = ""


_APPROVAL: Final = TypeAdapter(Approval | bool)


def approval_answer(value: Any) -> Approval | None:
    """The approval an answer gives; None when it is not one."""
    try:
        given = _APPROVAL.validate_python(value)
    except ValidationError:
        return None
    return given if isinstance(given, Approval) else Approval(approved=given)


@dataclass(frozen=True, slots=True)
class PlanAsking:
    """How a plan's run asks its people: the leader's open questions, the ``run_plan``
    request's id (each question's ``request_id``), and after how many seconds a durable
    plan whose every step waits parks (None: never)."""

    questions: PlanQuestions
    request_id: str
    park_after: float | None = None


@dataclass(frozen=True, slots=True)
class Given:
    """An answer to a plan's question: its value (or a decline), and who gave it."""

    value: Any
    declined: bool
    by: str


@dataclass(slots=True)
class OpenQuestion:
    """A question of a plan waiting for its answer."""

    question: Question
    """The plan's question: asked in the leader's name, answered to the leader's service."""
    asked: Question | None
    """The agent's question it stands for; None for an approval step."""
    plan_id: str
    subtask_id: str
    answered: asyncio.Future[Given] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class PlanQuestions:
    """The open questions of the plans this leader runs, by question id."""

    def __init__(self, leader_id: str, service: str, news: News | None = None) -> None:
        self._leader_id = leader_id
        self._service = service
        self._news = news
        self._open: dict[str, OpenQuestion] = {}

    def __repr__(self) -> str:
        return f"<PlanQuestions open={len(self._open)}>"

    def __len__(self) -> int:
        return len(self._open)

    def ask(
        self,
        *,
        plan_id: str,
        subtask_id: str,
        request_id: str,
        asked: Question | None = None,
        text: str | None = None,
        data: dict[str, Any] | None = None,
        question_id: str | None = None,
    ) -> OpenQuestion:
        """Open the plan's question for a step: ``asked``, the agent's question it stands
        for, or ``text`` for an approval step. ``question_id``: the id it had before (a
        plan taken over keeps its questions' ids)."""
        now = utcnow()
        fields: dict[str, Any] = {
            "question_id": question_id or new_question_id(self._service),
            "asker": self._leader_id,
            "service": self._service,
            "action": "run_plan",
            "request_id": request_id,
            "asked_at": now,
            "plan_id": plan_id,
            "subtask_id": subtask_id,
        }
        if asked is not None:
            fields |= {
                "text": asked.text,
                "answer_schema": asked.answer_schema,
                "kind": asked.kind,
                "context_id": asked.context_id,
                "expires_at": asked.expires_at,
                "turn": asked.turn,
                "rejected": asked.rejected,
                "data": asked.data,
            }
        else:
            fields |= {
                "text": text or "Approve?",
                "answer_schema": Approval.model_json_schema(),
                "kind": QuestionKind.INPUT,
                "data": data,
            }
        opened = OpenQuestion(Question.model_validate(fields), asked, plan_id, subtask_id)
        self._open[opened.question.question_id] = opened
        if self._news is not None:
            news: dict[str, Any] = {"question": opened.question.model_dump(mode="json")}
            if asked is not None:  # the agent's question this one stands for
                news["stands_for"] = asked.question_id
            self._news(QUESTION_ASKED, news)
        return opened

    def answer(self, question_id: str, given: Given) -> OpenQuestion | None:
        """Hand ``given`` to the step waiting on ``question_id``; None: not open here.

        Raises:
            QuestionClosed: the question was answered already.
        """
        opened = self._open.get(question_id)
        if opened is None:
            return None
        if opened.answered.done():
            raise QuestionClosed(
                "the question was answered already",
                details={"question_id": question_id, "reason": "answered"},
            )
        if opened.asked is None and not given.declined and approval_answer(given.value) is None:
            raise InvalidParameters(
                'an approval is true, false, or {"approved": true|false, "note": "..."}',
                details={"question_id": question_id},
            )
        opened.answered.set_result(given)
        if self._news is not None:
            news = {"question_id": question_id, "by": given.by, "declined": given.declined}
            self._news(QUESTION_ANSWERED, news)
        return opened

    def close(self, opened: OpenQuestion) -> None:
        """Forget a question once its step has gone on (or stopped)."""
        self._open.pop(opened.question.question_id, None)

    def of_plan(self, plan_id: str) -> list[Question]:
        """The plan's questions waiting for an answer, oldest first."""
        return [
            opened.question
            for opened in self._open.values()
            if opened.plan_id == plan_id and not opened.answered.done()
        ]


def seconds_to(question: Question, plan_left: float | None) -> float | None:
    """Seconds a step may wait for the answer: until the question expires, or the plan's
    deadline, whichever comes first; None: no limit."""
    limits = [] if plan_left is None else [plan_left]
    if question.expires_at is not None:
        limits.append(max((question.expires_at - utcnow()) / timedelta(seconds=1), 0.0))
    return min(limits) if limits else None
