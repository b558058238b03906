"""A team on the real broker and a gateway served by uvicorn, for the gateway tests."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field
from typing import Any

import aio_pika

from agentbus import Agent, Bus, Settings
from agentbus.bus import Topology

try:
    import uvicorn

    from agentbus.gateway import ApiKeys, Gateway, GatewaySettings
except ImportError as exc:  # the a2a extra is not installed
    MISSING: str | None = f"the a2a extra is not installed ({exc}): pip install -e '.[a2a]'"
else:
    MISSING = None

KEY = "alice-key-0123456789abcdef"
OTHER_KEY = "bob-key-0123456789abcdef00"
HEARTBEAT = 0.2


def free_port() -> int:
    """Return a TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def start_uvicorn(app: Any, port: int) -> tuple[Any, asyncio.Task[None]]:
    """Serve ``app`` on 127.0.0.1:``port`` with uvicorn in this loop; return it once started."""
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
    )
    serving = asyncio.create_task(server.serve())
    async with asyncio.timeout(10):
        while not server.started:
            if serving.done():
                serving.result()
            await asyncio.sleep(0.01)
    return server, serving


async def stop_uvicorn(server: Any, serving: asyncio.Task[None], *, force: bool = False) -> None:
    """Stop a server ``start_uvicorn`` started (``force``: drop open connections at once)."""
    server.should_exit = True
    server.force_exit = force
    await serving


@dataclass
class Team:
    """Agents, a gateway and a client bus on one test's exchange."""

    settings: Settings
    client: Bus
    agents: dict[str, Agent] = field(default_factory=dict)
    gateway: Gateway | None = None
    url: str = ""
    _server: Any = None
    _serving: asyncio.Task[None] | None = None
    queues: set[str] = field(default_factory=set)

    async def add(self, agent: Agent) -> Agent:
        """Start ``agent`` on the bus."""
        await agent.start()
        self.agents[agent.id] = agent
        topology = Topology(self.settings.exchange)
        self.queues |= {topology.instance_queue(agent.id), topology.service_queue(agent.name)}
        return agent

    async def remove(self, agent_id: str) -> None:
        """Stop the agent ``agent_id`` (it says goodbye: offline at once)."""
        await self.agents.pop(agent_id).stop()

    async def serve(
        self, keys: ApiKeys | None = None, *, public_host: str | None = None, **options: Any
    ) -> Gateway:
        """Start a gateway on a free port; ``url`` is its base URL.

        ``public_host``: the host name its cards (and ``url``) name instead of 127.0.0.1.
        """
        port = free_port()
        if public_host is not None:
            options["public_url"] = f"http://{public_host}:{port}"
        config = GatewaySettings(host="127.0.0.1", port=port, refresh_interval=HEARTBEAT, **options)
        if keys is None:  # not ``or``: anonymous keys are empty, hence falsy
            keys = ApiKeys.from_mapping({KEY: "alice", OTHER_KEY: "bob"})
        self.gateway = await Gateway(self.settings, config, keys).open()
        self._server, self._serving = await start_uvicorn(self.gateway.app, port)
        self.url = f"http://{public_host or '127.0.0.1'}:{port}"
        return self.gateway

    async def close_gateway(self) -> None:
        """Stop serving and close the gateway (its buses' queues are deleted at the end)."""
        if self._server is not None:
            assert self._serving is not None
            await stop_uvicorn(self._server, self._serving)
            self._server = None
        if self.gateway is not None:
            topology = Topology(self.settings.exchange)
            for bus in [*self.gateway.callers._buses.values(), self.gateway._bus]:
                self.queues.add(topology.instance_queue(bus.agent_id))
            await self.gateway.aclose()
            self.gateway = None

    async def aclose(self) -> None:
        await self.close_gateway()
        for agent in list(self.agents.values()):
            await agent.stop()
        self.queues.add(Topology(self.settings.exchange).instance_queue(self.client.agent_id))
        await self.client.aclose()


async def delete_topology(url: str, exchange: str, queues: set[str]) -> None:
    topology = Topology(exchange)
    # Its streams too: the plans' journal, the audit trail, its services' conversations.
    services = {queue for queue in queues if queue.startswith(topology.service_queue(""))}
    streams = {topology.journal_queue("plans"), topology.audit_stream}
    streams |= {f"{queue}.conversations" for queue in services}
    connection = await aio_pika.connect(url)
    async with connection:
        for name in {*queues, *streams, topology.dead_letter_queue}:
            channel = await connection.channel()
            await channel.queue_delete(name)
        channel = await connection.channel()
        for name in (exchange, topology.dead_letter_exchange):
            await channel.exchange_delete(name)
