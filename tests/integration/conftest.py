"""Fixtures for the integration tier: isolated buses, raw AMQP access, forced disconnects."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import aio_pika
import pytest
from helpers import BusFactory, delete_topology

import agentbus
from agentbus import Bus, Settings
from agentbus.bus import Topology


@pytest.fixture
def exchange_name() -> str:
    """A unique exchange name: every test gets its own topology."""
    return f"test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def raw_channel(broker_url: str) -> AsyncIterator[aio_pika.abc.AbstractChannel]:
    """A plain aio-pika channel, standing in for a foreign client."""
    connection = await aio_pika.connect(broker_url)
    try:
        yield await connection.channel()
    finally:
        await connection.close()


@pytest.fixture
async def make_bus(broker_url: str, exchange_name: str) -> AsyncIterator[BusFactory]:
    """Open buses on this test's exchange; close them and delete the topology afterwards."""
    buses: list[Bus] = []

    async def factory(agent_id: str | None = None, **settings: Any) -> Bus:
        config = Settings(url=broker_url, exchange=exchange_name, **settings)
        bus = await agentbus.Bus(config, agent_id=agent_id).open()
        buses.append(bus)
        return bus

    yield factory
    for bus in buses:
        await bus.aclose()
    await _delete_topology(broker_url, Topology(exchange_name), buses)


async def _delete_topology(url: str, topology: Topology, buses: list[Bus]) -> None:
    queues: set[str] = set()
    for bus in buses:
        queues.add(topology.instance_queue(bus.agent_id))
        if bus.service is not None:
            queues.add(topology.service_queue(bus.service))
    await delete_topology(url, topology.exchange, queues)
