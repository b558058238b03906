"""Between A2A parts and bus payloads: a message's parts as a skill's parameters, a result as parts.

A data part is the parameters (a JSON object). A text part fills the skill's one required
string parameter (or, with none required, its only string parameter); any other skill
refuses text with an error naming its schema. The skill is the
message's ``skill`` metadata, or the agent's only skill. Parameters are checked against the
skill's JSON Schema before anything is sent on the bus.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson
from a2a.helpers import get_data_parts, get_text_parts, new_data_part, new_text_part
from a2a.types import a2a_pb2 as a2a
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToDict
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from agentbus.agents import AgentCard, SkillCard

__all__ = ["SKILL_KEY", "BusCall", "bus_call", "from_json", "result_parts"]

SKILL_KEY = "skill"
"""Message metadata key naming the skill to call."""


@dataclass(frozen=True, slots=True)
class BusCall:
    """What an A2A message asks of the bus: a skill of a service, with parameters."""

    service: str
    skill: str
    parameters: dict[str, Any]


def bus_call(card: AgentCard, message: a2a.Message) -> BusCall:
    """Return the bus request ``message`` stands for, on the service ``card`` describes.

    Raises:
        InvalidParamsError: no skill can be chosen, or the parts do not fit its schema.
    """
    skill = _choose_skill(card, message)
    data = [from_json(item) for item in get_data_parts(message.parts)]
    texts = get_text_parts(message.parts)
    if len(data) > 1:
        raise InvalidParamsError(message="send one data part: the skill's parameters")
    if data:
        parameters = data[0]
        if not isinstance(parameters, dict):
            raise _schema_error(skill, "the data part must be a JSON object of parameters")
    elif texts:
        parameters = {_text_parameter(skill): "\n".join(texts)}
    elif _required(skill):
        raise _schema_error(skill, "the message has no data or text part")
    else:
        parameters = {}
    _check(skill, parameters)
    return BusCall(card.name, skill.name, parameters)


def _wanted_skill(message: a2a.Message) -> Any:
    # The metadata's skill, read from its Struct as it is (a string, mostly).
    value = message.metadata.fields.get(SKILL_KEY) if message.HasField("metadata") else None
    if value is None:
        return None
    if value.WhichOneof("kind") == "string_value":
        return value.string_value
    return MessageToDict(value)


def _choose_skill(card: AgentCard, message: a2a.Message) -> SkillCard:
    names = card.skill_names
    wanted = _wanted_skill(message)
    if wanted is None:
        if len(card.skills) == 1:
            return card.skills[0]
        raise InvalidParamsError(
            message=f"{card.name} has several skills: name one in the message metadata "
            f"{SKILL_KEY!r} ({', '.join(names)})",
            data={"skills": names},
        )
    for skill in card.skills:
        if skill.name == wanted:
            return skill
    raise InvalidParamsError(
        message=f"{card.name} has no skill {wanted!r}; its skills: {', '.join(names)}",
        data={"skills": names},
    )


def _text_parameter(skill: SkillCard) -> str:
    # The one required parameter, a string (others have defaults); with none required,
    # the only string parameter.
    properties: dict[str, Any] = skill.parameters.get("properties", {})
    required = set(skill.parameters.get("required", []))
    strings = {name for name, spec in properties.items() if spec.get("type") == "string"}
    candidates = required if required else strings
    if len(candidates) == 1 and candidates <= strings:
        return next(iter(candidates))
    raise _schema_error(
        skill, "a text part fits only a skill with one string parameter to fill: send a data part"
    )


def _required(skill: SkillCard) -> bool:
    return bool(skill.parameters.get("required"))


def _check(skill: SkillCard, parameters: dict[str, Any]) -> None:
    if not skill.parameters:
        return
    validator = _validator(orjson.dumps(skill.parameters, option=orjson.OPT_SORT_KEYS))
    if validator is None:
        return
    error = next(iter(validator.iter_errors(parameters)), None)
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path)
        raise _schema_error(skill, f"{where + ': ' if where else ''}{error.message}")


@lru_cache(maxsize=512)
def _validator(schema: bytes) -> Draft202012Validator | None:
    try:
        loaded = orjson.loads(schema)
        Draft202012Validator.check_schema(loaded)
    except SchemaError:
        return None  # the agent still checks its own parameters
    return Draft202012Validator(loaded)


def _schema_error(skill: SkillCard, reason: str) -> InvalidParamsError:
    return InvalidParamsError(
        message=f"parameters of {skill.name!r} do not fit its schema: {reason}",
        data={"skill": skill.name, "schema": skill.parameters},
    )


def from_json(value: Any) -> Any:
    """Return ``value`` with whole floats as ints (protobuf's Value holds numbers as doubles)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: from_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [from_json(item) for item in value]
    return value


def result_parts(result: Any) -> list[a2a.Part]:
    """Return a bus result as A2A parts: a text part for a string, else a data part."""
    if isinstance(result, str):
        return [new_text_part(result, media_type="text/plain")]
    return [new_data_part(result, media_type="application/json")]
