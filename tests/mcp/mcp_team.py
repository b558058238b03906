"""A team on the real broker, and the MCP server in front of it, for the MCP tests."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentbus import Agent, Bus, Settings
from agentbus.bus import Topology
from support.ports import free_port
from support.servers import start_uvicorn, stop_uvicorn

try:
    import uvicorn  # noqa: F401 - the extra's server: no uvicorn, no MCP tests
    from mcp import StdioServerParameters

    from agentbus.mcp import ApiKeys, Callers, McpSettings, PlanWatch, TeamServer, http_app
except ImportError as exc:  # the mcp extra is not installed
    MISSING: str | None = f"the mcp extra is not installed ({exc}): pip install -e '.[mcp]'"
else:
    MISSING = None

ROOT = Path(__file__).resolve().parents[2]
KEY = "alice-key-0123456789abcdef"
OTHER_KEY = "bob-key-0123456789abcdef00"
HEARTBEAT = 0.2
ERAS = ("legacy", "auto")
"""The SDK client's modes: the 2025 handshake, and ``auto`` (2026-07-28 where served)."""


@dataclass
class Team:
    """Agents, an MCP server and a client bus on one test's exchange."""

    settings: Settings
    client: Bus
    agents: dict[str, Agent] = field(default_factory=dict)
    queues: set[str] = field(default_factory=set)
    server: TeamServer | None = None
    url: str = ""
    _uvicorn: Any = None
    _serving: asyncio.Task[None] | None = None
    _closing: list[Callable[[], Any]] = field(default_factory=list)

    @property
    def topology(self) -> Topology:
        return Topology(self.settings.exchange)

    def env(self, **more: str) -> dict[str, str]:
        """The environment of a process on this team's bus."""
        return {
            **os.environ,
            "AGENTBUS_URL": self.settings.url,
            "AGENTBUS_EXCHANGE": self.settings.exchange,
            "AGENTBUS_INSTANCE_QUEUE_EXPIRES": "5",
            "AGENTBUS_MCP_REFRESH_INTERVAL": str(HEARTBEAT),
            "AGENTBUS_LOG_LEVEL": "warning",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            **more,
        }

    async def add(self, agent: Agent) -> Agent:
        """Start ``agent`` on the bus."""
        await agent.start()
        self.agents[agent.id] = agent
        self.queues |= {
            self.topology.instance_queue(agent.id),
            self.topology.service_queue(agent.name),
        }
        return agent

    async def registered(self, service: str) -> None:
        """Wait until the registry lists ``service`` (it has heard the agent's first beat)."""
        async with asyncio.timeout(15):
            while True:
                reply = await self.client.request("registry", "list_agents", timeout=5)
                if any(row["service"] == service for row in reply.result):
                    return
                await asyncio.sleep(HEARTBEAT)

    async def remove(self, agent_id: str) -> None:
        """Stop the agent ``agent_id`` (it says goodbye: offline at once)."""
        await self.agents.pop(agent_id).stop()

    def stdio(self) -> StdioServerParameters:
        """``agentbus mcp`` over stdio on this team's bus, as a client starts it (wait until
        ``registered("registry")`` first for a server that sees the registry at once)."""
        return StdioServerParameters(
            command=sys.executable, args=["-m", "agentbus", "mcp"], env=self.env(), cwd=str(ROOT)
        )

    async def serve_http(self, keys: ApiKeys | None = None) -> TeamServer:
        """Serve the team over Streamable HTTP, in this process; ``url`` is its endpoint.

        Once the registry lists itself: the server's first look sees it, so a change the
        server tells of later is a test's own.
        """
        await self.registered("registry")
        port = free_port()
        keys = keys or ApiKeys.from_mapping({KEY: "alice", OTHER_KEY: "bob"})
        config = McpSettings(transport="http", port=port, refresh_interval=HEARTBEAT)
        plans = PlanWatch()
        callers = Callers(self.settings, keys, plans, app_id="mcp")
        own = Bus(self.settings, agent_id="mcp-1", app_id="mcp")
        self.server = await TeamServer(own, config, callers=callers, plans=plans).open()
        self._uvicorn, self._serving = await start_uvicorn(
            http_app(self.server, keys), port, lifespan="on"
        )
        self.queues.add(self.topology.instance_queue(own.agent_id))
        self.url = f"http://127.0.0.1:{port}/mcp"
        return self.server

    def on_close(self, step: Callable[[], Any]) -> None:
        """Run ``step`` (awaited if a coroutine) when the team closes, before its agents stop."""
        self._closing.append(step)

    async def aclose(self) -> None:
        for step in reversed(self._closing):
            done = step()
            if asyncio.iscoroutine(done):
                await done
        if self._uvicorn is not None:
            assert self._serving is not None
            await stop_uvicorn(self._uvicorn, self._serving)
        if self.server is not None:
            await self.server.aclose()
        for agent in list(self.agents.values()):
            await agent.stop()
        self.queues.add(self.topology.instance_queue(self.client.agent_id))
        await self.client.aclose()
