"""The team as one MCP server, on the official SDK's low-level ``Server``.

Tools follow the registry: every live skill is a tool (``_tools``), listed as the cards
are now, and clients are told when the list changes (``_changes``). Each card is a
resource, ``agentbus://agents/<service>``. A call is one bus request (``_calls``), sent
from the caller's bus: the server's own over stdio, the key's identity's over HTTP; the
questions its work asks are the client's elicitations (``_elicit``).
"""

from __future__ import annotations

import asyncio
from typing import Any, Final, cast

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.models import InitializationOptions
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from agentbus import __version__
from agentbus._exceptions import AgentBusError
from agentbus._http import Callers, Face, PlanWatch
from agentbus.bus import Transport
from agentbus.mcp._auth import caller_of
from agentbus.mcp._calls import Calls, Client
from agentbus.mcp._changes import Changes
from agentbus.mcp._elicit import Elicitor
from agentbus.mcp._notify import Notifier
from agentbus.mcp._settings import McpSettings
from agentbus.mcp._stdio import loop_stdin
from agentbus.mcp._tools import Tool, team_tools, tool_error

__all__ = ["CARD_URI", "TeamServer"]

CARD_URI: Final = "agentbus://agents/{service}"
"""The URI of a service's card, as a resource."""
_CARD_PREFIX: Final = CARD_URI.removesuffix("{service}")
_INSTRUCTIONS: Final = (
    "The agents of an agentbus team. Each tool is a skill of a live agent, named "
    "<service>__<action>; run_plan runs a plan of several skills. The tools follow the "
    "agents: the list changes as they come and go. Each agent's card is a resource."
)


class _ChangingServer(Server[Any]):
    """The SDK's server, telling handshake-era clients that its lists change."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        # The Streamable HTTP transport asks with no options: say the lists change there too.
        changing = NotificationOptions(tools_changed=True, resources_changed=True)
        return super().create_initialization_options(
            notification_options or changing, experimental_capabilities, extensions
        )


class TeamServer(Face):
    """The bus's agents as one MCP server; open it, then serve stdio or HTTP (``http_app``).

    Args:
        bus: The server's own bus, unopened: it follows the registry on it, and sends the
            calls that came over stdio. The server opens and closes it.
        config: The server's settings.
        callers: The HTTP callers' buses, one per identity; None: every call from ``bus``.
        plans: Where the plans' progress sent to the callers' buses goes (``callers``'s).
    """

    def __init__(
        self,
        bus: Transport,
        config: McpSettings | None = None,
        *,
        callers: Callers | None = None,
        plans: PlanWatch | None = None,
    ) -> None:
        self.config = config or McpSettings()
        super().__init__(bus, self.config, on_change=self._retool)
        self._callers = callers
        self.plans = plans or PlanWatch()
        self.changes = Changes()
        self.tools: dict[str, Tool] = {}
        self._calls = Calls(
            self.plans,
            timeout=self.config.request_timeout,
            max_embedded_size=self.config.max_embedded_size,
        )
        self._publishing: set[asyncio.Task[None]] = set()
        self.server = _ChangingServer(
            "agentbus",
            version=__version__,
            instructions=_INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_read_resource=self._read_resource,
            on_subscriptions_listen=self.changes.listen,
            get_tool_input_schema=self._input_schema,
        )
        self.server.add_notification_handler(
            "notifications/initialized", types.NotificationParams, self.changes.follow
        )

    def __repr__(self) -> str:
        return f"<TeamServer {self._bus.agent_id} tools={len(self.tools)}>"

    async def _follow(self) -> None:
        await self.plans.attach(self._bus)
        await self.directory.start()

    async def aclose(self) -> None:
        """Stop following the registry, cancel the calls still running, close every bus."""
        await self.directory.aclose()
        self.changes.close()
        await self._calls.aclose()
        await asyncio.gather(*self._publishing, return_exceptions=True)
        if self._callers is not None:
            await self._callers.aclose()
        await self._bus.aclose()

    async def serve_stdio(self) -> None:
        """Serve one client over standard input and output until it goes (or a cancel)."""
        async with (
            loop_stdin() as lines,
            stdio_server(stdin=cast("anyio.AsyncFile[str] | None", lines)) as (reader, writer),
        ):
            await self.server.run(reader, writer, self.server.create_initialization_options())

    def _retool(self) -> None:
        self.tools = team_tools(self.directory.cards, leader=self.config.leader)
        task = asyncio.create_task(self.changes.publish())
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool.listing for tool in self.tools.values()])

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        # What a call's Mcp-Param-* headers are checked against: from the tools at hand (the
        # SDK would otherwise run the whole tools/list for each call to find it).
        tool = self.tools.get(name)
        return tool.listing.input_schema if tool is not None else None

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        tool = self.tools.get(params.name)
        if tool is None:
            raise MCPError(types.INVALID_PARAMS, f"no tool {params.name!r} on this team (now)")
        try:
            bus = await self._caller(ctx)
        except AgentBusError as exc:
            return tool_error(exc.code, exc.message, exc.details)
        client = Client(Notifier(ctx), Elicitor(ctx, params))
        return await self._calls.call(bus, tool, dict(params.arguments or {}), client)

    async def _caller(self, ctx: ServerRequestContext[Any, Any]) -> Transport:
        identity = caller_of(ctx)
        if identity is None or self._callers is None:
            return self._bus
        return await self._callers.bus(identity)

    async def _list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        cards = self.directory.cards
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=CARD_URI.format(service=service),
                    name=service,
                    title=f"the card of {service}",
                    description=cards[service].description or f"the agent card of {service}",
                    mime_type="application/json",
                )
                for service in sorted(cards)
            ]
        )

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        card = self.directory.cards.get(uri.removeprefix(_CARD_PREFIX))
        if not uri.startswith(_CARD_PREFIX) or card is None:
            raise MCPError(types.INVALID_PARAMS, f"no resource {uri!r} on this team (now)")
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(
                    uri=uri, mime_type="application/json", text=card.model_dump_json()
                )
            ]
        )
