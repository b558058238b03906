"""Fixtures of the foreign-client tier: a team of agent processes on this test's exchange.

The processes are the integration tier's (tests/integration/processes.py); pytest puts
tests/integration on the path only when it collects that directory, so it is added here.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

_INTEGRATION = str(Path(__file__).resolve().parent.parent / "integration")
if _INTEGRATION not in sys.path:
    sys.path.insert(0, _INTEGRATION)

from helpers import BusFactory  # noqa: E402
from processes import Processes  # noqa: E402

import agentbus  # noqa: E402
from agentbus import Bus, Settings  # noqa: E402
from support.broker import delete_topology  # noqa: E402


@pytest.fixture
def exchange_name() -> str:
    """A unique exchange name: every test gets its own topology."""
    return f"test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def procs(broker_url: str, exchange_name: str, tmp_path: Path) -> AsyncIterator[Processes]:
    """Start processes on this test's exchange; stop every one and delete the topology after."""
    buses: list[Bus] = []

    async def make_bus(agent_id: str | None = None, **settings: Any) -> Bus:
        config = Settings(url=broker_url, exchange=exchange_name, **settings)
        bus = await agentbus.Bus(config, agent_id=agent_id).open()
        buses.append(bus)
        return bus

    factory: BusFactory = make_bus
    processes = Processes(broker_url, exchange_name, tmp_path, factory)
    try:
        yield processes
    finally:
        await asyncio.to_thread(processes.stop_all)
        processes.report()
        for bus in buses:
            await bus.aclose()
        await delete_topology(broker_url, exchange_name, processes.queues())
