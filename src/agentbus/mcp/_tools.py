"""The team's tools: one per live skill, named after its service and action.

A skill ``greet`` of the service ``greeter`` is the tool ``greeter__greet`` (``__``: MCP
hosts hand tool names to model APIs that take ``[A-Za-z0-9_-]`` only); the leader's
``run_plan`` is the tool ``run_plan``. Each tool's input schema is the skill's parameter
schema from the card, its output schema the result schema (``_schemas.wrap``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import mcp_types as types
import orjson

from agentbus._logging import get_logger
from agentbus.agents import AgentCard, SkillCard
from agentbus.mcp._schemas import RESULT_KEY, is_object_schema, wrap

__all__ = [
    "ERROR_META",
    "RUN_PLAN",
    "SEPARATOR",
    "UPDATE_META",
    "Route",
    "Tool",
    "team_tools",
    "tool_error",
    "tool_name",
    "tool_result",
]

SEPARATOR: Final = "__"
"""Between the service and the action in a tool's name."""
RUN_PLAN: Final = "run_plan"
"""The leader's ``run_plan``: the one tool not named after its service."""
ERROR_META: Final = "agentbus/error"
"""A failed call's ``_meta`` key: the wire error ``{"code", "message", "details"}``."""
UPDATE_META: Final = "agentbus/update"
"""A progress notification's ``_meta`` key: the bus update it tells (docs/mcp.md)."""

_MAX_NAME: Final = 128
_log = get_logger("agentbus.mcp")


@dataclass(frozen=True, slots=True)
class Route:
    """Where a tool's calls go on the bus, and how its result comes back."""

    service: str
    action: str
    wrapped: bool
    """The result is not an object: its structured content is ``{"result": value}``."""
    plans: bool = False
    """The call runs a plan (the leader's ``run_plan``): its progress is followed."""


@dataclass(frozen=True, slots=True)
class Tool:
    """One tool: what ``tools/list`` shows, and where its calls go."""

    listing: types.Tool
    route: Route


def tool_name(service: str, action: str) -> str:
    """Return the name of the tool of ``service``'s skill ``action``."""
    return f"{service}{SEPARATOR}{action}"


def team_tools(cards: Mapping[str, AgentCard], *, leader: str) -> dict[str, Tool]:
    """Return the tools of the live services' ``cards``, by name (sorted by service).

    A name that two skills would share (ids holding ``__``), or over 128 characters,
    is left out, with a warning.
    """
    tools: dict[str, Tool] = {}
    for service in sorted(cards):
        for skill in cards[service].skills:
            plans = service == leader and skill.name == RUN_PLAN
            name = RUN_PLAN if plans else tool_name(service, skill.name)
            if name in tools or len(name) > _MAX_NAME:
                _log.warning("skill left out of the tools", service=service, skill=skill.name)
                continue
            tools[name] = _tool(name, service, skill, plans=plans)
    return tools


def _tool(name: str, service: str, skill: SkillCard, *, plans: bool) -> Tool:
    parameters = skill.parameters if is_object_schema(skill.parameters) else {"type": "object"}
    route = Route(service, skill.name, wrapped=not is_object_schema(skill.result), plans=plans)
    listing = types.Tool(
        name=name,
        title=f"{skill.name} ({service})",
        description=skill.description or f"the skill {skill.name} of the agent {service}",
        input_schema=parameters,
        output_schema=wrap(skill.result),
        meta={"agentbus/service": service, "agentbus/action": skill.name},
    )
    return Tool(listing, route)


def tool_result(route: Route, result: Any) -> types.CallToolResult:
    """Return a call's result: structured content as the output schema says, and as text."""
    text = result if isinstance(result, str) else orjson.dumps(result).decode()
    structured = {RESULT_KEY: result} if route.wrapped else result
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=structured,
    )


def tool_error(code: str, message: str, details: dict[str, Any]) -> types.CallToolResult:
    """Return a failed call: the wire error as text (``code: message``) and in ``_meta``."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{code}: {message}")],
        is_error=True,
        meta={ERROR_META: {"code": code, "message": message, "details": details}},
    )
