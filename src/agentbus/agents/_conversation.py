"""Questions a skill asks its caller: ``ask`` and ``remember``, and the replay that resumes.

A skill that asks is not kept waiting. ``ask`` ends its run (``Suspended``), the agent
keeps what the run needs to go on (the request, the answers so far, what the skill
remembered) in its service's conversation journal on the broker, and answers the request
with the question. The answer, whenever it comes and whichever instance takes it, runs
the skill again from the top: each ``ask`` returns its answer so far, in order, and each
``remember`` what it recorded, until the first ``ask`` with no answer yet asks that, or
the skill returns. So a question holds no delivery, no worker slot and no memory while it
waits, and a kill -9 of the asker loses nothing.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final, TypeVar, overload

import orjson
from pydantic import TypeAdapter, ValidationError

from agentbus._exceptions import QuestionDeclined, UsageError
from agentbus.envelopes import (
    ANSWER_WITHIN,
    Question,
    QuestionKind,
    RequestEnvelope,
    ResponseEnvelope,
    new_question_id,
    utcnow,
)

__all__ = [
    "Conversation",
    "Deferred",
    "Suspended",
    "ask",
    "remember",
]

T = TypeVar("T")

_MAX_REPORTED: Final = 5
_conversation: contextvars.ContextVar[Conversation] = contextvars.ContextVar(
    "agentbus_conversation"
)


class Suspended(BaseException):
    """Raised out of a skill by ``ask``: the run ends here, and the question is its answer.

    A ``BaseException``, so a skill's ``except Exception`` does not swallow it.
    """

    def __init__(self, question: Question, answers: list[dict[str, Any]]) -> None:
        super().__init__(question.text)
        self.question = question
        self.answers = answers
        """The answers that hold, the question's own excluded (a rejected one is not kept)."""


class Deferred(BaseException):
    """Raised out of a skill to end its run with ``reply`` (an ``in_progress`` response, say)
    when its final answer comes later, sent by whoever finishes the work (a leader's plan,
    parked to wait for people, finished by another leader: ``Transport.send_reply``)."""

    def __init__(self, reply: ResponseEnvelope) -> None:
        super().__init__(reply.payload.status)
        self.reply = reply


@dataclass(slots=True)
class Conversation:
    """One run of a skill in its conversation: the request that began it, the answers
    given so far (``{"value": ...}`` or ``{"declined": true}``), and what it remembered."""

    request: RequestEnvelope
    agent_id: str
    service: str
    answers: list[dict[str, Any]] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)
    asked: int = 0
    """The questions this run has reached."""

    def bind(self) -> contextvars.Token[Conversation]:
        """Make this the conversation of the current context (the skill's)."""
        return _conversation.set(self)

    @staticmethod
    def unbind(token: contextvars.Token[Conversation]) -> None:
        """Undo ``bind``."""
        _conversation.reset(token)

    def question(
        self,
        text: str,
        schema: dict[str, Any],
        kind: QuestionKind,
        within: float | None,
        rejected: dict[str, Any] | None,
        *,
        here: bool = False,
    ) -> Question:
        """The question this run asks now, its deadline the asker's or the caller's;
        ``here``: its answer comes to this instance, not to any of the service's."""
        now = utcnow()
        limits = [within] if within is not None else []
        caller = (self.request.metadata.model_extra or {}).get(ANSWER_WITHIN)
        if isinstance(caller, int | float) and not isinstance(caller, bool) and caller > 0:
            limits.append(float(caller))
        answered_by = self.agent_id if here else self.service
        return Question(
            question_id=new_question_id(answered_by),
            text=text,
            answer_schema=schema,
            kind=kind,
            asker=self.agent_id,
            service=answered_by,
            action=self.request.payload.action,
            request_id=self.request.message_id,
            context_id=self.request.metadata.context_id,
            asked_at=now,
            expires_at=now + timedelta(seconds=min(limits)) if limits else None,
            turn=self.asked - 1,
            rejected=rejected,
        )


def _current() -> Conversation:
    try:
        return _conversation.get()
    except LookupError:
        raise UsageError("a question can only be asked from inside a running skill") from None


@overload
async def ask(
    text: str,
    *,
    kind: QuestionKind | str = ...,
    within: float | None = ...,
    data: dict[str, Any] | None = ...,
    here: bool = ...,
) -> str: ...


@overload
async def ask(
    text: str,
    answer: type[T],
    *,
    kind: QuestionKind | str = ...,
    within: float | None = ...,
    data: dict[str, Any] | None = ...,
    here: bool = ...,
) -> T: ...


async def ask(
    text: str,
    answer: Any = str,
    *,
    kind: QuestionKind | str = QuestionKind.INPUT,
    within: float | None = None,
    data: dict[str, Any] | None = None,
    here: bool = False,
) -> Any:
    """From inside a skill: ask the caller ``text`` and return the answer, as ``answer``.

    The first time, this ends the skill's run: the caller gets the question (a response
    with status ``input_required``; the JSON Schema of ``answer`` says what fits), and
    the agent holds nothing while it waits. The caller's answer runs the skill again
    from the top, on whichever instance takes it; this call then returns the answer,
    validated as ``answer`` (a model, ``bool``, a ``Literal``...): one that does not
    fit is asked again, with the reason. So everything before an ``ask`` runs again on
    every answer: keep effects after the last question, make them idempotent, or wrap
    them in ``remember``.

    Args:
        text: The question, for a person or an agent.
        answer: The type of the answer (default ``str``).
        kind: ``input`` (an answer to go on with) or ``auth`` (an authorization).
        within: Seconds the answer may take; the caller may set a shorter wait.
        data: What the question is about, shown with it (a draft to approve).
        here: The answer must come to this instance (its ``service`` is the instance
            id): for a skill that keeps what the answer needs in memory, such as a
            remote session waiting on it. Lost with the instance.

    Raises:
        QuestionDeclined: the caller declined to answer.
        UsageError: not called from a running skill.
    """
    conversation = _current()
    turn = conversation.asked
    conversation.asked += 1
    adapter: TypeAdapter[Any] = TypeAdapter(answer)
    rejected = None
    if turn < len(conversation.answers):
        given = conversation.answers[turn]
        if given.get("declined"):
            raise QuestionDeclined(f"the caller declined to answer: {text}")
        try:
            return adapter.validate_python(given.get("value"))
        except ValidationError as exc:
            # Only the newest answer can be new here; an older one fitted when it came.
            rejected = {"answer": given.get("value"), "errors": _errors(exc)}
    schema = adapter.json_schema(mode="serialization")
    question = conversation.question(text, schema, QuestionKind(kind), within, rejected, here=here)
    if data is not None:
        question = question.model_copy(update={"data": data})
    raise Suspended(question, conversation.answers[:turn])


async def remember(key: str, make: Callable[[], Awaitable[T]]) -> T:
    """From inside a skill: run ``make`` once per conversation and return its result.

    On the first run ``make()`` is awaited and its result (JSON data) kept with the
    conversation; when an answer runs the skill again, the kept result is returned and
    ``make`` is not called. For work before an ``ask`` that must not run twice: start a
    remote job, reserve a seat.

    Raises:
        UsageError: not called from a running skill.
    """
    conversation = _current()
    if key in conversation.notes:
        value: T = conversation.notes[key]
        return value
    # Kept as JSON, and returned as it will be read back: the same on every run.
    value = orjson.loads(orjson.dumps(await make()))
    conversation.notes[key] = value
    return value


def _errors(exc: ValidationError) -> list[dict[str, str]]:
    return [
        {
            "field": ".".join(str(part) for part in error["loc"]) or "answer",
            "error": error["msg"],
        }
        for error in exc.errors(include_url=False, include_context=False)[:_MAX_REPORTED]
    ]
