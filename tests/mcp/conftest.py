"""Fixtures of the MCP tier: a team on the real broker; the MCP server in front of it."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:  # the helpers, however run
    sys.path.insert(0, str(_HERE))

from mcp_team import HEARTBEAT, MISSING, Team  # noqa: E402

from agentbus import Bus, Settings  # noqa: E402
from support.broker import delete_topology  # noqa: E402

# Without the mcp extra these tests are not collected locally; under CI they are, and fail.
collect_ignore_glob = (
    ["test_*.py"] if MISSING and os.environ.get("CI") in (None, "", "0", "false") else []
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test here ``mcp``; those on the broker ``integration`` too."""
    for item in items:
        if f"{os.sep}mcp{os.sep}" in str(item.path):
            item.add_marker(pytest.mark.mcp)
            if "broker_url" in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.integration)


@pytest.fixture
async def team(broker_url: str) -> AsyncIterator[Team]:
    """A registry on a fresh exchange, a client bus; agents and servers added by the test."""
    from agentbus.registry import Registry

    exchange = f"test-mcp-{uuid.uuid4().hex[:10]}"
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
        # The processes' queues (an `agentbus mcp`, its callers) go at the session's end.
        await delete_topology(broker_url, exchange, built.queues)
