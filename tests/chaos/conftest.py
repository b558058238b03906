"""Fixtures for the chaos tier: a unique exchange and buses closed after each test.

The broker-side fixtures (``private_broker``, ``chaos_proxy``, ``agent_process``,
``ledger``) come from the chaos kit's pytest plugin
(``agentbus.testing.chaos.pytest_plugin``), opted in by ``tests/conftest.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from chaos_support import BusOpener, bus_opener

from agentbus.testing.chaos import find_rabbitmq
from support.redis_servers import tier_redis_url
from support.required import is_required


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip tests on a private node where rabbitmq-server is not installed (fail under CI)."""
    needs_node = "private_broker_node" in getattr(item, "fixturenames", ())
    if needs_node and find_rabbitmq() is None and not is_required():
        pytest.skip("rabbitmq-server is not installed: no private broker node for chaos tests")


@pytest.fixture
def chaos_exchange() -> str:
    """A unique exchange name: every test gets its own topology."""
    return f"chaos-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def open_bus(chaos_exchange: str) -> AsyncIterator[BusOpener]:
    """Open buses on this test's exchange, at any URL; close them all afterwards."""
    async with bus_opener(chaos_exchange) as opener:
        yield opener


@pytest.fixture(scope="session")
def dedup_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis for the shared de-duplication store: the tier's, else a private server."""
    with tier_redis_url(tmp_path_factory.mktemp("redis")) as url:
        yield url
