"""Questions on the wire (since 1.2): what a skill asks its caller, and how it is answered."""

from __future__ import annotations

import enum
import os
import re
import time
from datetime import UTC, datetime
from typing import Any, Final

from pydantic import Field

from agentbus.envelopes._codes import PROTOCOL_MAJOR, QUESTIONS_SINCE
from agentbus.envelopes._models import (
    AgentId,
    ContextId,
    MessageId,
    RequestEnvelope,
    UtcDateTime,
    _is_none,
    _WireModel,
)

__all__ = [
    "ANSWER_ACTION",
    "ANSWER_WITHIN",
    "AnswerParameters",
    "Question",
    "QuestionKind",
    "answers_questions",
    "new_question_id",
    "question_origin",
]

ANSWER_ACTION: Final = "answer_question"
"""The built-in action every agent answers questions by (docs/wire.md, "Questions")."""


ANSWER_WITHIN: Final = "answer_within"
"""Request metadata key: seconds the caller will wait for an answer to a question."""

_VERSION: Final = re.compile(r"^(\d+)\.(\d+)$")


class QuestionKind(enum.StrEnum):
    """What a question asks for: input for the work, or an authorization to go on."""

    INPUT = "input"
    AUTH = "auth"


class Question(_WireModel):
    """A question a running skill asks its caller (a response's ``result`` when its status
    is ``input_required``).

    The caller answers with the built-in action ``answer_question`` sent to ``service``
    (any instance may take it): ``{"question_id": ..., "answer": ...}``. The answer must
    fit ``answer_schema``; the reply to it is what the work does next: its result,
    another question, or an error.
    """

    question_id: MessageId
    text: str
    answer_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "string"})
    """The JSON Schema the answer must fit."""
    kind: QuestionKind = QuestionKind.INPUT
    asker: AgentId
    """The agent instance that asked."""
    service: AgentId
    """Where the answer goes: the asker's service (any of its instances takes it)."""
    action: AgentId
    """The skill that asks."""
    request_id: MessageId
    """The request whose work asks: the first of the conversation."""
    context_id: ContextId | None = Field(default=None, exclude_if=_is_none)
    asked_at: UtcDateTime
    expires_at: UtcDateTime | None = Field(default=None, exclude_if=_is_none)
    """After this, an answer is refused (``question_closed``); None: the conversation
    store's retention."""
    turn: int = 0
    """How many questions this request's work asked before this one."""
    data: dict[str, Any] | None = Field(default=None, exclude_if=_is_none)
    """What the question is about, for whoever answers (a draft to approve)."""
    plan_id: AgentId | None = Field(default=None, exclude_if=_is_none)
    """A plan's question (asked by a leader for one of its steps): the plan..."""
    subtask_id: MessageId | None = Field(default=None, exclude_if=_is_none)
    """...and the step that asks (``<step>[<index>]`` for an item of a mapped step)."""
    rejected: dict[str, Any] | None = Field(default=None, exclude_if=_is_none)
    """Asked again: why the last answer did not fit (``errors``)."""


class AnswerParameters(_WireModel):
    """The parameters of ``answer_question``: the answer, or a decline."""

    question_id: MessageId
    answer: Any = None
    decline: bool = False
    """Not answering: the skill's ``ask`` raises ``QuestionDeclined``."""


def new_question_id(service: str) -> str:
    """A new question's id: ``<service>.<milliseconds since the epoch>.<random>``.

    The service says where its answer goes, the time where the asker keeps its record.
    """
    return f"{service}.{time.time_ns() // 1_000_000}.{os.urandom(8).hex()}"


def question_origin(question_id: str) -> tuple[str, datetime] | None:
    """The service and the time a question's id names; None for an id not of that form."""
    service, _, rest = question_id.partition(".")
    millis, _, random = rest.partition(".")
    if not service or not millis.isdigit() or not random:
        return None
    return service, datetime.fromtimestamp(int(millis) / 1000, tz=UTC)


def answers_questions(request: RequestEnvelope) -> bool:
    """Tell whether ``request``'s sender reads an ``input_required`` response (1.2 or later).

    An older sender is told of a question with the error ``input_required`` instead,
    which it handles as any error (the question is in its ``details``).
    """
    match = _VERSION.match(request.protocol_version)
    if match is None:
        return False
    return (int(match[1]), int(match[2])) >= QUESTIONS_SINCE or int(match[1]) > PROTOCOL_MAJOR
