"""Fixtures for the chaos tier: a unique exchange and buses closed after each test.

The broker-side fixtures (``private_broker``, ``chaos_proxy``, ``agent_process``) come
from agentbus's pytest plugin (``agentbus.testing.pytest_plugin``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from chaos_support import BusOpener

import agentbus
from agentbus import Bus, Settings
from agentbus.testing import find_rabbitmq


def _require_broker() -> bool:
    flag = os.environ.get("AGENTBUS_REQUIRE_BROKER") or os.environ.get("CI")
    return flag not in (None, "", "0", "false")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip tests on a private node where rabbitmq-server is not installed (fail under CI)."""
    needs_node = "private_broker_node" in getattr(item, "fixturenames", ())
    if needs_node and find_rabbitmq() is None and not _require_broker():
        pytest.skip("rabbitmq-server is not installed: no private broker node for chaos tests")


@pytest.fixture
def chaos_exchange() -> str:
    """A unique exchange name: every test gets its own topology."""
    return f"chaos-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def open_bus(chaos_exchange: str) -> AsyncIterator[BusOpener]:
    """Open buses on this test's exchange, at any URL; close them all afterwards."""
    buses: list[Bus] = []

    async def opener(url: str, agent_id: str | None = None, **settings: Any) -> Bus:
        config = Settings(url=url, exchange=chaos_exchange, **settings)
        bus = await agentbus.Bus(config, agent_id=agent_id).open()
        buses.append(bus)
        return bus

    yield opener
    for bus in reversed(buses):
        await bus.aclose()
