"""Fixtures for the gateway tier: a team on the real broker and a gateway served by uvicorn."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest
from gateway_team import HEARTBEAT, MISSING, Team

from agentbus import Bus, Settings
from support.broker import delete_topology

# Without the a2a extra these tests are not collected locally; under CI they are, and fail.
collect_ignore_glob = (
    ["test_*.py"] if MISSING and os.environ.get("CI") in (None, "", "0", "false") else []
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test here ``gateway`` and ``integration``."""
    for item in items:
        if f"{os.sep}gateway{os.sep}" in str(item.path):
            item.add_marker(pytest.mark.gateway)
            item.add_marker(pytest.mark.integration)


@pytest.fixture
async def team(broker_url: str) -> AsyncIterator[Team]:
    """A registry on a fresh exchange, a client bus; agents and a gateway added by the test."""
    from agentbus.registry import Registry

    exchange = f"test-gw-{uuid.uuid4().hex[:10]}"
    settings = Settings(url=broker_url, exchange=exchange, instance_queue_expires=30)
    client = await Bus(settings).open()
    built = Team(settings, client)
    try:
        await built.add(
            Registry(agent_id="registry-1", settings=settings, heartbeat_interval=HEARTBEAT)
        )
        yield built
    finally:
        await built.aclose()
        await delete_topology(broker_url, exchange, built.queues)
