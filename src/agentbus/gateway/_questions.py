"""A bus question as an A2A task that waits for input, and a follow-up message as its answer.

A question (``InputRequired``) ends the task's turn in ``input-required``, or in
``auth-required`` for a question of kind ``auth``; the status message carries the
question's text (a text part, with why the last answer did not fit when it is asked
again) and the whole question (a data part ``{"question": ...}``). The question is read
back from the stored task when the follow-up comes, in whichever gateway process takes
it: nothing else is kept. The answer is the follow-up's data part, else its text: as it
is for a question whose answer is a string, else read as JSON when it parses.

A plan's question (the leader asks its people for a step) comes as a ``plan_progress``
update while the plan runs on: the task waits for input with it all the same.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

import orjson
from a2a.helpers import get_data_parts, get_text_parts, new_data_part, new_message, new_text_part
from a2a.types import a2a_pb2 as a2a
from pydantic import ValidationError

from agentbus.envelopes import Question, QuestionKind
from agentbus.gateway._parts import from_json
from agentbus.gateway._tasks import WAITING

__all__ = [
    "QUESTION_KEY",
    "WAITING",
    "answer_of",
    "context_of",
    "plan_question",
    "question_message",
    "question_of",
    "waiting_state",
]

QUESTION_KEY: Final = "question"
"""The key of the question in the data part of a waiting task's status message."""

_CONTEXT_ID: Final = re.compile(r"^[\x21-\x7e]{1,255}$")


def waiting_state(question: Question) -> a2a.TaskState:
    """Return the state of a task waiting on ``question``: auth-required or input-required."""
    if question.kind == QuestionKind.AUTH:
        return a2a.TaskState.TASK_STATE_AUTH_REQUIRED
    return a2a.TaskState.TASK_STATE_INPUT_REQUIRED


def question_message(
    question: Question,
    *,
    task_id: str,
    context_id: str,
    before: Sequence[a2a.Part] = (),
) -> a2a.Message:
    """Return the status message of a task waiting on ``question`` (after the parts
    ``before``)."""
    text = question.text
    if question.rejected is not None:
        errors = question.rejected.get("errors") or []
        why = "; ".join(
            f"{error.get('field')}: {error.get('error')}"
            for error in errors
            if isinstance(error, dict)
        )
        text = f"{text} (the last answer did not fit: {why or 'refused'})"
    parts = [
        *before,
        new_text_part(text, media_type="text/plain"),
        new_data_part(
            {QUESTION_KEY: question.model_dump(mode="json")}, media_type="application/json"
        ),
    ]
    return new_message(parts, context_id=context_id, task_id=task_id)


def question_of(task: a2a.Task) -> Question | None:
    """Return the question ``task`` waits on; None when it waits on none."""
    if task.status.state not in WAITING:
        return None
    for data in get_data_parts(task.status.message.parts):
        if isinstance(data, dict) and isinstance(data.get(QUESTION_KEY), dict):
            try:
                return Question.model_validate(from_json(data[QUESTION_KEY]))
            except ValidationError:
                return None
    return None


def plan_question(update: dict[str, Any]) -> Question | None:
    """Return the question a plan's ``input_required`` transition (a ``plan_progress``
    update) asks in the leader's name; None for any other update."""
    progress = update.get("plan_progress")
    if not isinstance(progress, dict) or progress.get("transition") != "input_required":
        return None
    detail = progress.get("detail")
    try:
        return Question.model_validate((detail or {}).get(QUESTION_KEY))
    except ValidationError:
        return None


def answer_of(message: a2a.Message, question: Question) -> Any:
    """Return the answer a follow-up ``message`` gives to ``question``."""
    data = get_data_parts(message.parts)
    if data:
        return from_json(data[0])
    text = "\n".join(get_text_parts(message.parts))
    if question.answer_schema.get("type") == "string":
        return text
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def context_of(context_id: str | None) -> str | None:
    """Return the A2A ``context_id`` as a bus request's ``metadata.context_id``, or None
    when it cannot be one (longer than 255 characters, or not printable ASCII)."""
    if context_id and _CONTEXT_ID.match(context_id):
        return context_id
    return None
