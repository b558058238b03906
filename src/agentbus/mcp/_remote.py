"""An MCP server on the bus: its tools offered as bus skills, calls forwarded.

The bus agent opens a session with the server (a command it starts, or a URL), offers
each tool as a skill (its action the tool's name, ``[A-Za-z0-9_-]`` only; its parameter
schema the tool's input schema, its result schema the output schema, unwrapped from
``{"result": ...}``), heartbeats like any agent, and forwards each request as a
``tools/call``. The server's progress notifications are progress reports; the structured
content, or else the content, is the result; a tool error an error envelope (with its
wire code when another agentbus server sent it); a bus ``cancel`` cancels the call
(the SDK sends ``notifications/cancelled``). The server's elicitations are questions to
the bus caller, the call kept open meanwhile (``_kept``).
"""

from __future__ import annotations

import re
from typing import Any, Final

import mcp_types as types
from jsonschema import Draft202012Validator, validators

from agentbus._config import Settings
from agentbus._exceptions import AgentBusError
from agentbus._http import SchemaSkill
from agentbus.agents import Agent, SkillMark, SkillSpec, current_request, remember
from agentbus.envelopes import ErrorCode
from agentbus.mcp._kept import KeptCalls, follow
from agentbus.mcp._link import McpLink, McpTarget
from agentbus.mcp._schemas import RESULT_KEY, unwrap
from agentbus.mcp._tools import ERROR_META

__all__ = ["RemoteMcpAgent"]

_NOT_ID: Final = re.compile(r"[^A-Za-z0-9_-]+")
_ANY_OBJECT: Final[dict[str, Any]] = {"type": "object", "additionalProperties": True}

ANSWER_WITHIN: Final = 900.0
"""Seconds an elicitation of the server waits for its bus answer, by default."""


class RemoteMcpAgent(Agent):
    """A bus agent fronting an MCP server; build it with ``connect``.

    The agent owns its link to the server: stopping it closes the session (and stops a
    server it started as a command). ``answer_within``: seconds a question the server
    asks (an elicitation) may wait for its answer; the call is kept open meanwhile, and
    cancelled after.
    """

    name = "mcp"
    description = "An MCP server"

    def __init__(
        self, *, link: McpLink, answer_within: float = ANSWER_WITHIN, **options: Any
    ) -> None:
        super().__init__(**options)
        self.link = link
        self.waiting = KeptCalls(answer_within)
        """The calls kept open while the server's elicitations wait for bus answers."""

    @classmethod
    def for_tools(
        cls,
        tools: list[types.Tool],
        *,
        service: str,
        description: str = "",
        version: str = "0.0.0",
    ) -> type[RemoteMcpAgent]:
        """Return the agent class offering ``tools`` as the service ``service``.

        A tool whose action name (its name in ``[A-Za-z0-9_-]``) another tool has
        already taken is left out.
        """
        attributes: dict[str, Any] = {
            "name": service,
            "description": description or f"the MCP server {service}",
            "version": version or "0.0.0",
            "tags": ("mcp",),
        }
        agent_class: type[RemoteMcpAgent] = type(f"RemoteMcpAgent_{service}", (cls,), attributes)
        skills: dict[str, SkillSpec] = {}
        for tool in tools:
            spec = _ToolSkill(tool)
            skills.setdefault(spec.name, spec)
        agent_class.skills = skills
        return agent_class

    @classmethod
    async def connect(
        cls,
        target: McpTarget,
        *,
        service: str | None = None,
        settings: Settings | None = None,
        wait: float = 0.0,
        **options: Any,
    ) -> RemoteMcpAgent:
        """Open a session with the MCP server at ``target``; return an agent offering its tools.

        ``service``: the service name on the bus (default: the server's name).
        ``wait``: seconds to keep trying while the server does not answer yet.

        Raises:
            AgentBusError: the server cannot be reached (``agent_unavailable``).
        """
        link = await McpLink.open(target, wait=wait)
        try:
            info = link.server_info
            name = service or _as_id(info.name if info else "") or "mcp-server"
            agent_class = cls.for_tools(
                link.tools,
                service=name,
                description=(info.description or info.title or "") if info else "",
                version=info.version if info else "0.0.0",
            )
            return agent_class(link=link, settings=settings, **options)
        except BaseException:
            await link.aclose()
            raise

    async def start(self) -> None:
        try:
            await super().start()
        except BaseException:
            await self.link.aclose()
            raise

    async def on_stop(self) -> None:
        await self.waiting.aclose()
        await self.link.aclose()

    async def forward(self, tool: str, arguments: dict[str, Any], wrapped: bool) -> Any:
        """From the skill: call ``tool`` with ``arguments``; return its result, reporting
        its progress, and asking the caller what the server elicits.

        Raises:
            AgentBusError: the call failed (its wire code), or an answer came for a call
                this instance no longer keeps (``agent_unavailable``).
        """
        key = current_request().message_id  # the conversation's first request, every run
        first = False

        async def begin() -> str:
            nonlocal first
            first = True
            return key

        await remember("mcp_call", begin)
        call = self.waiting.get(key)
        if call is None and not first:
            raise AgentBusError(
                f"the call of {tool!r} this answer was for is no longer kept here (its wait "
                "ran out, or the agent restarted): send the request again",
                code=ErrorCode.AGENT_UNAVAILABLE,
                details={"tool": tool},
            )
        if call is None:
            call = self.waiting.start(
                key, lambda kept: self.link.call(tool, arguments, kept.on_progress, kept.elicit)
            )
        result = await follow(call, self.waiting.answer_within)
        if result.is_error:
            raise _failure(tool, result)
        if result.structured_content is not None:
            return (
                result.structured_content.get(RESULT_KEY) if wrapped else result.structured_content
            )
        return _content_value(result.content)


class _ToolSkill(SchemaSkill):
    """A tool of the server: checked against its input schema, forwarded as ``tools/call``."""

    def __init__(self, tool: types.Tool) -> None:
        parameters: dict[str, Any] = dict(tool.input_schema) or _ANY_OBJECT
        result, self.wrapped = unwrap(tool.output_schema)
        # The draft the schema names (a TypeScript server's are draft-07), else 2020-12.
        checker = validators.validator_for(parameters, default=Draft202012Validator)
        super().__init__(
            SkillMark(_as_id(tool.name)[:128] or "tool", tool.description or tool.title or ""),
            parameters=parameters,
            result=result,
            validator=checker(parameters),
        )
        self.tool = tool.name

    async def run(self, agent: Any, arguments: dict[str, Any]) -> Any:
        assert isinstance(agent, RemoteMcpAgent)
        return await agent.forward(self.tool, arguments, self.wrapped)


def _failure(tool: str, result: types.CallToolResult) -> AgentBusError:
    # Another agentbus server's wire error when it sent one, else the error's text.
    error = (result.meta or {}).get(ERROR_META)
    text = " ".join(block.text for block in result.content if isinstance(block, types.TextContent))
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        details = error.get("details")
        return AgentBusError(
            str(error.get("message") or text),
            code=error["code"],
            details=details if isinstance(details, dict) else {},
        )
    return AgentBusError(
        text or f"the tool {tool!r} failed",
        code=ErrorCode.PROCESSING_FAILED,
        details={"tool": tool},
    )


def _content_value(content: list[types.ContentBlock]) -> Any:
    # One text is the result; several blocks, each as text or as its JSON form.
    values = [
        block.text
        if isinstance(block, types.TextContent)
        else block.model_dump(mode="json", by_alias=True, exclude_none=True)
        for block in content
    ]
    return values[0] if len(values) == 1 else values


def _as_id(name: str) -> str:
    return _NOT_ID.sub("-", name).strip("-")[:128]
