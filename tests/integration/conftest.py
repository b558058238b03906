"""Fixtures for the integration tier: isolated buses, raw AMQP access, agent processes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aio_pika
import pytest
from helpers import BusFactory
from processes import Processes

import agentbus
from agentbus import Bus, Settings
from support.broker import delete_topology, queues_of


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
    await delete_topology(broker_url, exchange_name, queues_of(exchange_name, buses))


@pytest.fixture
async def procs(
    broker_url: str, exchange_name: str, tmp_path: Path, make_bus: BusFactory
) -> AsyncIterator[Processes]:
    """Start processes on this test's exchange; stop every one and delete the topology after."""
    processes = Processes(broker_url, exchange_name, tmp_path, make_bus)
    try:
        yield processes
    finally:
        await asyncio.to_thread(processes.stop_all)
        processes.report()
        for bus in processes.clients:
            await bus.aclose()
        # What no test can name (a one-shot CLI client's queue) goes at the session's end.
        await delete_topology(broker_url, exchange_name, processes.queues())
