"""Between A2A parts and bus payloads: a message's parts as a skill's parameters, a result as parts.

A data part is the parameters (a JSON object). A text part fills the skill's one required
string parameter (or, with none required, its only string parameter); any other skill
refuses text with an error naming its schema. The skill is the
message's ``skill`` metadata, or the agent's only skill. Parameters are checked against the
skill's JSON Schema before anything is sent on the bus.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final

import orjson
from a2a.helpers import get_data_parts, get_text_parts, new_data_part, new_text_part
from a2a.types import a2a_pb2 as a2a
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToDict
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from agentbus.agents import AgentCard, SkillCard

__all__ = [
    "PARAMETER_KEY",
    "SKILL_KEY",
    "BusCall",
    "artifact_parameters",
    "bus_call",
    "from_json",
    "result_parts",
]

SKILL_KEY = "skill"
"""Message metadata key naming the skill to call."""
PARAMETER_KEY: Final = "parameter"
"""File part metadata key naming the skill parameter the file fills."""
_ARTIFACT_REF: Final = "#/$defs/Artifact"


@dataclass(frozen=True, slots=True)
class BusCall:
    """What an A2A message asks of the bus: a skill of a service, with parameters."""

    service: str
    skill: str
    parameters: dict[str, Any]
    files: dict[str, a2a.Part] = field(default_factory=dict)
    """File parts by the parameter each fills, stored as artifacts before the call is sent."""


def bus_call(card: AgentCard, message: a2a.Message) -> BusCall:
    """Return the bus request ``message`` stands for, on the service ``card`` describes.

    Raises:
        InvalidParamsError: no skill can be chosen, or the parts do not fit its schema.
    """
    skill = _choose_skill(card, message)
    data = [from_json(item) for item in get_data_parts(message.parts)]
    texts = get_text_parts(message.parts)
    files = _assign(skill, _file_parts(message.parts))
    if len(data) > 1:
        raise InvalidParamsError(message="send one data part: the skill's parameters")
    if data:
        parameters = data[0]
        if not isinstance(parameters, dict):
            raise _schema_error(skill, "the data part must be a JSON object of parameters")
    elif texts:
        parameters = {_text_parameter(skill): "\n".join(texts)}
    elif _required(skill) - files.keys():
        raise _schema_error(skill, "the message has no data, text or file part")
    else:
        parameters = {}
    _check(skill, parameters, files.keys())
    return BusCall(card.name, skill.name, parameters, files)


def _file_parts(parts: Any) -> list[a2a.Part]:
    """The parts of a message that are files: bytes or a URL."""
    return [part for part in parts if part.WhichOneof("content") in ("raw", "url")]


def artifact_parameters(skill: SkillCard) -> list[str]:
    """The names of ``skill``'s parameters typed ``Artifact`` (or ``Artifact | None``)."""
    properties: dict[str, Any] = skill.parameters.get("properties", {})
    return [name for name, spec in properties.items() if _is_artifact(spec)]


def _is_artifact(spec: Any) -> bool:
    if not isinstance(spec, dict):
        return False
    if spec.get("$ref") == _ARTIFACT_REF:
        return True
    return any(_is_artifact(option) for option in spec.get("anyOf", ()))


def _assign(skill: SkillCard, files: list[a2a.Part]) -> dict[str, a2a.Part]:
    """Which parameter each file fills.

    Raises:
        InvalidParamsError: the skill takes no file, or not as many, or a named one is
            not an artifact parameter.
    """
    wanted = artifact_parameters(skill)
    filled: dict[str, a2a.Part] = {}
    unnamed = []
    for part in files:
        named = part.metadata.fields.get(PARAMETER_KEY) if part.HasField("metadata") else None
        if named is None:
            unnamed.append(part)
        elif named.string_value in wanted:
            filled[named.string_value] = part
        else:
            raise _refused(skill, f"{named.string_value!r} is not one of its file parameters")
    free = [name for name in wanted if name not in filled]
    if len(unnamed) > len(free):
        takes = ", ".join(wanted) or "none"
        raise _refused(skill, f"{len(files)} files for its file parameters ({takes})")
    filled.update(zip(free, unnamed, strict=False))
    return filled


def _refused(skill: SkillCard, reason: str) -> InvalidParamsError:
    return InvalidParamsError(
        message=f"files for {skill.name!r} do not fit its schema: {reason}",
        data={"skill": skill.name, "schema": skill.parameters},
    )


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


def _required(skill: SkillCard) -> set[str]:
    return set(skill.parameters.get("required", ()))


def _check(skill: SkillCard, parameters: dict[str, Any], files: Collection[str] = ()) -> None:
    if not skill.parameters:
        return
    schema = skill.parameters
    if files:  # filled once the files are stored
        schema = schema | {"required": sorted(_required(skill) - set(files))}
    validator = _validator(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS))
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
