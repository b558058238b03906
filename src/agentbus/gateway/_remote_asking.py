"""A remote A2A task's question as a bus question, and the bus answer as its follow-up message.

A remote task that ends a turn in ``input-required`` (``auth-required``: a question of kind
``auth``) asks the text of its status message. The answer's JSON Schema is the one its
status message gives: a data part ``{"question": {"answer_schema": ...}}`` (as an agentbus
gateway sends), or a data part that is a JSON Schema itself; else a string. The answer goes
back as a message on the remote task (its ``taskId`` and ``contextId``): a string as a
text part, anything else as a data part.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from a2a.helpers import get_data_parts, get_text_parts, new_data_part, new_message, new_text_part
from a2a.types import a2a_pb2 as a2a
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import AfterValidator, WithJsonSchema

from agentbus.gateway._parts import from_json
from agentbus.gateway._questions import QUESTION_KEY

__all__ = ["Asks", "answer_message", "answer_type", "asks"]

Asks = dict[str, Any]
"""A remote task's question, as a skill remembers it (JSON): ``task_id``, ``context_id``,
``text``, ``schema``, ``kind``."""

_STRING: Final[dict[str, Any]] = {"type": "string"}
_SCHEMA_WORDS: Final = frozenset({"type", "properties", "enum", "oneOf", "anyOf", "$schema"})


def asks(task: a2a.Task) -> Asks:
    """Return the question of ``task``, a remote task waiting for input."""
    parts = list(task.status.message.parts)
    text = "\n".join(get_text_parts(parts)) or "The remote agent asks for input"
    kind = "auth" if task.status.state == a2a.TaskState.TASK_STATE_AUTH_REQUIRED else "input"
    return {
        "task_id": task.id,
        "context_id": task.context_id,
        "text": text,
        "schema": _schema([from_json(data) for data in get_data_parts(parts)]),
        "kind": kind,
    }


def _schema(data: list[Any]) -> dict[str, Any]:
    for item in data:
        if not isinstance(item, dict):
            continue
        question = item.get(QUESTION_KEY)
        if isinstance(question, dict) and isinstance(question.get("answer_schema"), dict):
            return dict(question["answer_schema"])
        if _SCHEMA_WORDS & set(item):
            return item
    return _STRING


def answer_type(schema: dict[str, Any]) -> Any:
    """Return the type ``ask`` takes for an answer that must fit ``schema``: its JSON Schema
    is ``schema``, and an answer that does not fit is refused (asked again)."""
    if schema == _STRING:
        return str
    try:
        validator = Draft202012Validator(schema)
        Draft202012Validator.check_schema(schema)
    except SchemaError:
        return Annotated[Any, WithJsonSchema(schema)]  # the remote agent checks it

    def fits(value: Any) -> Any:
        error = next(iter(validator.iter_errors(value)), None)
        if error is not None:
            raise ValueError(error.message)
        return value

    return Annotated[Any, AfterValidator(fits), WithJsonSchema(schema)]


def answer_message(question: Asks, answer: Any) -> a2a.Message:
    """Return the message that gives ``answer`` to the remote task ``question`` names."""
    part = new_text_part(answer) if isinstance(answer, str) else new_data_part(answer)
    return new_message(
        [part],
        context_id=question["context_id"],
        task_id=question["task_id"],
        role=a2a.Role.ROLE_USER,
    )
