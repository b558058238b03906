"""The ``@skill`` decorator: parameters validated from type hints, results made JSON."""

from __future__ import annotations

import collections.abc
import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar, overload

import orjson
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model

from agentbus._exceptions import ConfigurationError, InvalidParameters
from agentbus.agents._reporting import send_partial
from agentbus.envelopes import is_valid_id

__all__ = ["SkillMark", "SkillSpec", "collect_skills", "skill"]

F = TypeVar("F", bound=Callable[..., Any])

_MARK: Final = "__agentbus_skill__"
_MAX_REPORTED: Final = 5
_TWENTY_DIGITS: Final = re.compile(rb"[0-9]{20}")


@dataclass(frozen=True, slots=True)
class SkillMark:
    """What ``@skill`` says of a method: its action name, description, and ``long_running``.

    None takes the method's name, or its docstring's first paragraph.
    """

    name: str | None
    description: str | None
    long_running: bool = False


@overload
def skill(func: F, /) -> F: ...


@overload
def skill(
    *, name: str | None = None, description: str | None = None, long_running: bool = False
) -> Callable[[F], F]: ...


def skill(
    func: F | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    long_running: bool = False,
) -> F | Callable[[F], F]:
    """Mark an async method of an ``Agent`` as a skill other agents can request.

    Parameters are validated from the method's type hints; the result may be a
    pydantic model, a dict, a list or a scalar. The docstring's first line is
    the skill's description unless ``description`` is given. An async generator
    streams: each item it yields goes to the requester at once (``send_partial``),
    and its result is the list of them.

    Args:
        func: The method (when used as a bare ``@skill``).
        name: The action name; default the method's name.
        description: The description on the agent card.
        long_running: Work that may outlast the broker's consumer timeout (30 minutes
            by default): its request is acknowledged when the work starts, so the broker
            never takes it back. If this instance dies meanwhile, the request is not
            redelivered: a plan retries it (the leader hears the agent went offline), a
            plain caller times out.
    """

    def mark(target: F) -> F:
        if not _is_async(target):
            raise ConfigurationError(
                f"skill {target.__qualname__} must be an async method or async generator"
            )
        setattr(target, _MARK, SkillMark(name, description, long_running))
        return target

    if func is not None:
        return mark(func)
    return mark


def _is_async(target: object) -> bool:
    # A separate function, so the check does not narrow the decorated type for mypy.
    return inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target)


class SkillSpec:
    """One skill: its name, schemas, and how to validate a call and dump a result."""

    def __init__(self, method: Callable[..., Any], mark: SkillMark) -> None:
        self.method = method
        self.streams = inspect.isasyncgenfunction(method)
        self.long_running = mark.long_running
        """Acknowledged when it starts (``skill(long_running=True)``)."""
        """An async generator: its items go out as partial results, in order."""
        self.name = mark.name or method.__name__
        if not is_valid_id(self.name):
            raise ConfigurationError(f"skill name {self.name!r} is not a valid action name")
        doc = inspect.getdoc(method) or ""
        self.description = mark.description or doc.split("\n\n")[0].replace("\n", " ").strip()
        hints = typing.get_type_hints(method, include_extras=True)
        fields: dict[str, Any] = {}
        for parameter in list(inspect.signature(method).parameters.values())[1:]:
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                raise ConfigurationError(f"skill {self.name!r} cannot take *args or **kwargs")
            annotation = hints.get(parameter.name, Any)
            default = ... if parameter.default is parameter.empty else parameter.default
            fields[parameter.name] = (annotation, default)
        self.parameters_model: type[BaseModel] = create_model(
            f"{self.name}_parameters",
            __config__=ConfigDict(extra="forbid"),
            **fields,
        )
        returned = hints.get("return", Any)
        self._chunk: TypeAdapter[Any] | None = None
        if self.streams:
            self._chunk = TypeAdapter(_item_type(returned))
            returned = list[_item_type(returned)]  # type: ignore[misc]
        self._result = TypeAdapter(returned)

    @property
    def parameters_schema(self) -> dict[str, Any]:
        """The JSON Schema of the skill's parameters."""
        return self.parameters_model.model_json_schema()

    @property
    def result_schema(self) -> dict[str, Any]:
        """The JSON Schema of the skill's result."""
        return self._result.json_schema(mode="serialization")

    def bind(self, parameters: dict[str, Any]) -> dict[str, Any]:
        """Validate request parameters; return the keyword arguments of the call.

        Raises:
            InvalidParameters: naming each field that does not fit.
        """
        try:
            model = self.parameters_model.model_validate(parameters)
        except ValidationError as exc:
            errors = [
                {
                    "field": ".".join(str(part) for part in error["loc"]) or "parameters",
                    "error": error["msg"],
                }
                for error in exc.errors(include_url=False, include_context=False)
            ]
            summary = "; ".join(f"{e['field']}: {e['error']}" for e in errors[:_MAX_REPORTED])
            raise InvalidParameters(
                f"invalid parameters for {self.name!r}: {summary}",
                details={"skill": self.name, "errors": errors},
            ) from exc
        return {name: getattr(model, name) for name in type(model).model_fields}

    def dump(self, result: Any) -> Any:
        """Return the result as JSON for the envelope: text it carries as it is, or data.

        Written by pydantic straight to JSON, a large result (a plan's aggregate of
        thousands of subtasks) is never copied into dicts and lists first. Text holding
        a run of 20 digits may hold an integer over 64 bits, which orjson (and many
        clients) cannot read back: that result goes as data, and the envelope's encoder
        refuses such an integer.
        """
        text = self._result.dump_json(result)
        if _TWENTY_DIGITS.search(text) is None:
            return orjson.Fragment(text)
        return self._result.dump_python(result, mode="json")

    async def run(self, agent: Any, arguments: dict[str, Any]) -> Any:
        """Call the skill on ``agent``; a streaming one sends each item as it comes."""
        if self._chunk is None:
            return await self.method(agent, **arguments)
        items = []
        async for item in self.method(agent, **arguments):
            await send_partial(self._chunk.dump_python(item, mode="json"))
            items.append(item)
        return items


_STREAMS: Final = (
    collections.abc.AsyncIterator,
    collections.abc.AsyncIterable,
    collections.abc.AsyncGenerator,
)


def _item_type(returned: Any) -> Any:
    # AsyncIterator[T], AsyncIterable[T], AsyncGenerator[T, None] -> T; anything else: Any.
    if typing.get_origin(returned) in _STREAMS:
        return typing.get_args(returned)[0]
    return Any


def collect_skills(cls: type) -> dict[str, SkillSpec]:
    """Return the skills of an agent class, its bases' included, by action name."""
    found: dict[str, SkillSpec] = {}
    seen: set[str] = set()
    for klass in cls.__mro__:
        for attribute, value in vars(klass).items():
            if attribute in seen:
                continue
            seen.add(attribute)
            mark = getattr(value, _MARK, None)
            if isinstance(mark, SkillMark):
                spec = SkillSpec(value, mark)
                if spec.name in found:
                    raise ConfigurationError(
                        f"two skills of {cls.__name__} are named {spec.name!r}"
                    )
                found[spec.name] = spec
    return found
