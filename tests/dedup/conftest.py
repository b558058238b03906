"""The shared de-duplication store's tier: a real Redis, the tier's or a private one."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.redis_servers import RedisServer, private_redis_server, tier_redis_url


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test here as ``dedup``."""
    for item in items:
        if f"{os.sep}dedup{os.sep}" in str(item.path):
            item.add_marker(pytest.mark.dedup)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The tier's Redis: ``$AGENTBUS_TEST_DEDUP_URL``, else a private server for the session."""
    with tier_redis_url(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of this test's own, which it may stop and start (the store unreachable)."""
    with private_redis_server(tmp_path / "redis") as server:
        yield server


@pytest.fixture
def namespace() -> str:
    """A key prefix of this test's own, as a bus's exchange gives it."""
    return f"test-{uuid.uuid4().hex[:10]}"
