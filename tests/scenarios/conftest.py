"""Fixtures for the shared scenarios: each one runs on the in-memory bus and on RabbitMQ."""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from scenario_support import TransportFactory

from agentbus import Bus, Settings
from agentbus._config import DEFAULT_URL
from agentbus.bus import Transport
from agentbus.testing import MemoryBroker, MemoryBus
from support.broker import delete_topology, queues_of


@pytest.fixture(params=["memory", pytest.param("rabbitmq", marks=pytest.mark.integration)])
async def transport(request: pytest.FixtureRequest) -> AsyncIterator[TransportFactory]:
    """Open buses of one kind on this test's own exchange; close and clean up afterwards."""
    exchange = f"test-{uuid.uuid4().hex[:10]}"
    if request.param == "memory":
        url = DEFAULT_URL  # never dialled
        make: Callable[..., Transport] = functools.partial(MemoryBus, MemoryBroker())
    else:
        url = request.getfixturevalue("broker_url")
        make = Bus

    opened: list[Transport] = []

    async def factory(agent_id: str | None = None, **settings: Any) -> Transport:
        bus = await make(Settings(url=url, exchange=exchange, **settings), agent_id=agent_id).open()
        opened.append(bus)
        return bus

    yield factory
    for bus in opened:
        await bus.aclose()
    if request.param == "rabbitmq":
        await delete_topology(url, exchange, queues_of(exchange, opened))
