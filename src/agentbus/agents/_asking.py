"""An agent's side of its conversations: questions kept on the broker until answered, and
the answers that run the skill that asked again."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from pydantic import ValidationError

from agentbus._exceptions import InvalidParameters, QuestionClosed, UnknownAction
from agentbus.agents._conversation import Conversation, Suspended
from agentbus.agents._skills import SkillSpec
from agentbus.bus import Journal, Transport
from agentbus.envelopes import (
    ANSWER_ACTION,
    AnswerParameters,
    ErrorCode,
    ErrorEnvelope,
    Question,
    RequestEnvelope,
    ResponseEnvelope,
    ResponseStatus,
    answers_questions,
    question_origin,
    utcnow,
)

__all__ = [
    "QUESTION_ANSWERED",
    "QUESTION_ASKED",
    "Asked",
    "AskedQuestions",
    "Asking",
    "answer_parameters",
]

QUESTION_ASKED: Final = "question_asked"
"""The broadcast event an agent sends when a skill asks (``question``, ``caller``)."""
QUESTION_ANSWERED: Final = "question_answered"
"""The broadcast event an agent sends when it takes an answer (``question_id``, ``by``)."""

News = Callable[[str, dict[str, Any]], None]
"""Sends a broadcast event, best effort, without waiting."""

# Read from this long before a question's time: the asker's clock named it, the broker's
# stamps the stream's chunks, and a stream is read from the chunk that holds a time.
_SKEW: Final = timedelta(seconds=5)
# An answer to a question this instance asked less than this long ago is taken from its
# memory, without reading the journal back (a read costs ~10 ms and 0.25 ms a record
# since the question); the journal still notes the answer before it runs.
_FRESH: Final = 60.0
_FRESH_MAX: Final = 1024  # questions remembered so, at most


@dataclass(frozen=True, slots=True)
class Asked:
    """An open question, as the journal keeps it: with what its answer runs again."""

    question: Question
    request: RequestEnvelope
    answers: list[dict[str, Any]]
    notes: dict[str, Any]


class AskedQuestions:
    """One service's conversation journal: a question is kept before it is sent, and an
    answer taken is noted there before it runs, so a second answer is refused.

    Opened on first use: an agent that never asks declares nothing.
    """

    def __init__(
        self, bus: Transport, service: str, *, retention: str = "7D", instance: str | None = None
    ) -> None:
        self._bus = bus
        self._service = service
        self._instance = instance
        self._retention = retention
        self._journal: Journal | None = None
        self._opening = asyncio.Lock()
        # Recent questions asked here, oldest first: (when, what) by question id.
        self._fresh: OrderedDict[str, tuple[float, Asked]] = OrderedDict()

    def __repr__(self) -> str:
        return f"<AskedQuestions service={self._service!r} open={self._journal is not None}>"

    async def keep(
        self,
        question: Question,
        request: RequestEnvelope,
        answers: list[dict[str, Any]],
        notes: dict[str, Any],
    ) -> None:
        """Keep ``question`` and what its answer runs again with; return once the broker
        has it (then the question can go out)."""
        journal = await self._open()
        await journal.append(
            {
                "kind": "question",
                "question": question.model_dump(mode="json"),
                "request": request.model_dump(mode="json"),
                "answers": answers,
                "notes": notes,
            }
        )
        self._fresh[question.question_id] = (
            time.monotonic(),
            Asked(question, request, list(answers), dict(notes)),
        )
        while len(self._fresh) > _FRESH_MAX:
            self._fresh.popitem(last=False)

    async def take(self, question_id: str, answer_id: str, by: str) -> Asked:
        """Return the open question ``question_id``, noted as answered by the request
        ``answer_id`` (a redelivered copy of that request takes it again).

        Raises:
            QuestionClosed: not asked here, past the journal's retention, answered by
                another request, or past its ``expires_at``.
        """
        asked, taken_by = self._recent(question_id) or await self._find(question_id)
        if taken_by is not None and taken_by != answer_id:
            raise _closed(question_id, "answered", "the question was answered already")
        expires = asked.question.expires_at
        if expires is not None and expires <= utcnow():
            raise _closed(question_id, "expired", f"the question expired at {expires.isoformat()}")
        if taken_by is None:
            journal = await self._open()
            await journal.append(
                {"kind": "answered", "question_id": question_id, "by": by, "answer_id": answer_id}
            )
        return asked

    def _recent(self, question_id: str) -> tuple[Asked, str | None] | None:
        # A question asked here moments ago, taken once: the next answer reads the journal.
        fresh = self._fresh.pop(question_id, None)
        if fresh is None or time.monotonic() - fresh[0] > _FRESH:
            return None
        return fresh[1], None

    async def _find(self, question_id: str) -> tuple[Asked, str | None]:
        named = question_origin(question_id)
        if named is None or named[0] not in (self._service, self._instance):
            raise _closed(question_id, "unknown", f"{self._service} asked no such question")
        journal = await self._open()
        asked: Asked | None = None
        taken_by: str | None = None
        for record in await journal.read(named[1] - _SKEW):
            kind = record.get("kind")
            if kind == "question" and record["question"].get("question_id") == question_id:
                asked = Asked(
                    question=Question.model_validate(record["question"]),
                    request=RequestEnvelope.model_validate(record["request"]),
                    answers=list(record.get("answers", ())),
                    notes=dict(record.get("notes", {})),
                )
            elif kind == "answered" and record.get("question_id") == question_id:
                taken_by = taken_by or record.get("answer_id")
        if asked is None:
            raise _closed(
                question_id,
                "unknown",
                f"{self._service} keeps no such question (never asked, or past its retention)",
            )
        return asked, taken_by

    async def _open(self) -> Journal:
        if self._journal is None:
            async with self._opening:
                if self._journal is None:
                    self._journal = await self._bus.conversations(
                        self._service, max_age=self._retention
                    )
        return self._journal


class Asking:
    """An agent's side of its conversations.

    A skill that asks ends its run with ``Suspended``: ``asked`` keeps the question on the
    service's journal, tells whoever lists questions, and answers the request with it. An
    answer (``answer_question``) comes to ``resume``, on any instance: the question is
    taken from the journal, and the skill runs again with every answer so far.
    """

    def __init__(
        self, bus: Transport, agent_id: str, service: str, *, retention: str, news: News
    ) -> None:
        self._agent_id = agent_id
        self._store = AskedQuestions(bus, service, retention=retention, instance=agent_id)
        self._service = service
        self._news = news

    def __repr__(self) -> str:
        return f"<Asking service={self._service!r}>"

    async def asked(
        self, asked: Suspended, conversation: Conversation, answering: RequestEnvelope
    ) -> ResponseEnvelope | ErrorEnvelope:
        """Keep the question a run ended with, and return the reply that asks it."""
        # Kept before it goes out: the answer may come at once, to another instance.
        await self._store.keep(
            asked.question, conversation.request, asked.answers, conversation.notes
        )
        question = asked.question.model_dump(mode="json")
        news: dict[str, Any] = {"question": question, "caller": answering.sender_id}
        extra = conversation.request.metadata.model_extra or {}
        if isinstance(extra.get("plan_id"), str):  # a plan's step: its leader asks the people
            news |= {"plan_id": extra["plan_id"], "subtask_id": extra.get("subtask_id")}
        self._news(QUESTION_ASKED, news)
        if answers_questions(answering):
            return answering.response(
                question, sender_id=self._agent_id, status=ResponseStatus.INPUT_REQUIRED
            )
        return answering.error(
            ErrorCode.INPUT_REQUIRED,
            f"input required: {asked.question.text}",
            sender_id=self._agent_id,
            details={"question": question},
        )

    async def resume(
        self, request: RequestEnvelope, skills: Mapping[str, SkillSpec]
    ) -> tuple[SkillSpec, dict[str, Any], Conversation]:
        """Take the answer ``request`` carries: the skill to run again, its arguments, and
        its conversation with the answer added.

        Raises:
            InvalidParameters: the request is not a valid ``answer_question``.
            QuestionClosed: the question is not open (``AskedQuestions.take``).
            UnknownAction: this agent no longer has the skill that asked.
        """
        answer = answer_parameters(request)
        asked = await self._store.take(answer.question_id, request.message_id, request.sender_id)
        original = asked.request
        spec = skills.get(original.payload.action)
        if spec is None:
            raise UnknownAction(
                f"{self._service} has no action {original.payload.action!r} to answer",
                details={"action": original.payload.action},
            )
        self._news(
            QUESTION_ANSWERED,
            {
                "question_id": answer.question_id,
                "by": request.sender_id,
                "declined": answer.decline,
            },
        )
        given = {"declined": True} if answer.decline else {"value": answer.answer}
        conversation = Conversation(
            original,
            self._agent_id,
            self._service,
            answers=[*asked.answers, given],
            notes=asked.notes,
        )
        return spec, spec.bind(original.payload.parameters), conversation


def answer_parameters(request: RequestEnvelope) -> AnswerParameters:
    """The parameters of an ``answer_question`` request.

    Raises:
        InvalidParameters: they are not those of ``answer_question``.
    """
    try:
        return AnswerParameters.model_validate(request.payload.parameters)
    except ValidationError as exc:
        raise InvalidParameters(
            f"invalid parameters for {ANSWER_ACTION!r}: {exc.errors()[0]['msg']}",
            details={"skill": ANSWER_ACTION},
        ) from exc


def _closed(question_id: str, reason: str, message: str) -> QuestionClosed:
    return QuestionClosed(message, details={"question_id": question_id, "reason": reason})
