"""Where each service runs, for a team across sites: the directory's view, the A2A card."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from google.protobuf.json_format import MessageToDict

from agentbus import Agent, Settings, skill
from agentbus.agents import AgentCard, SkillCard
from agentbus.registry import Registry, ServiceDirectory
from agentbus.testing import MemoryBroker, MemoryBus


class Greeter(Agent):
    name = "greeter"

    @skill
    async def greet(self, who: str) -> str:
        return f"hello {who}"


@pytest.fixture
async def directory() -> AsyncIterator[ServiceDirectory]:
    """A registry, a greeter at site ``eu`` and one at ``us``, and a directory following."""
    broker = MemoryBroker()
    agents: list[Agent] = []
    for agent_id, cls, site in (
        ("registry-1", Registry, None),
        ("greeter-eu", Greeter, "eu"),
        ("greeter-us", Greeter, "us"),
    ):
        settings = Settings(shutdown_grace=0.5, site=site)
        bus = await MemoryBus(broker, settings, agent_id=agent_id).open()
        agent = cls(agent_id=agent_id, bus=bus, settings=settings, heartbeat_interval=0.1)
        await agent.start()
        agents.append(agent)
    bus = await MemoryBus(broker, Settings(), agent_id="gateway-1").open()
    following = ServiceDirectory(bus)
    try:
        yield following
    finally:
        for agent in reversed(agents):
            await agent.stop()
            await agent.bus.aclose()
        await bus.aclose()


async def test_the_directory_knows_each_services_sites(directory: ServiceDirectory) -> None:
    async with asyncio.timeout(5):
        await directory.refresh()
        while directory.sites.get("greeter") != ("eu", "us"):
            await asyncio.sleep(0.05)
            await directory.refresh()
    assert "registry" not in directory.sites  # no site: a team of one site shows none


def test_the_a2a_card_names_the_sites_only_across_sites() -> None:
    pytest.importorskip("a2a")  # the gateway's extra
    from agentbus.gateway import SITES_EXTENSION, a2a_card

    card = AgentCard(id="greeter-eu", name="greeter", skills=[SkillCard(name="greet")])
    plain = a2a_card(card, "http://gw/agents/greeter/")
    assert SITES_EXTENSION not in {e.uri for e in plain.capabilities.extensions}
    across = a2a_card(card, "http://gw/agents/greeter/", sites=("eu", "us"))
    (extension,) = [e for e in across.capabilities.extensions if e.uri == SITES_EXTENSION]
    assert MessageToDict(extension.params) == {"sites": ["eu", "us"]}
