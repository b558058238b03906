"""Fixtures for the cluster tier: the chaos tier's helpers, a unique exchange, buses closed.

The cluster itself is the chaos kit's ``private_cluster`` fixture (three private nodes,
formed once for the session), opted in by ``tests/conftest.py``.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import pytest

# The fault tests' producer, workers and waits (tests/chaos/fault_support.py) are this
# tier's too; pytest puts tests/chaos on the path only when it collects that directory.
_CHAOS = str(Path(__file__).resolve().parent.parent / "chaos")
if _CHAOS not in sys.path:
    sys.path.insert(0, _CHAOS)

from chaos_support import BusOpener, bus_opener  # noqa: E402
from fault_support import Team  # noqa: E402

from agentbus.testing.chaos import find_rabbitmq  # noqa: E402
from support.required import is_required  # noqa: E402

_TIER = Path(__file__).resolve().parent
SLOW: Final = 300  # seconds: a node killed and back, on a loaded 2-core host, beside other tiers


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A cluster test may take minutes where tiers run side by side (the first one also forms
    the cluster in its set-up): 300 s unless it names its own timeout, not pytest's 120."""
    for item in items:
        if item.path.is_relative_to(_TIER) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SLOW))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip where rabbitmq-server is not installed, unless under CI (there: fail)."""
    needs_cluster = "private_cluster_session" in getattr(item, "fixturenames", ())
    if needs_cluster and find_rabbitmq() is None and not is_required():
        pytest.skip("rabbitmq-server is not installed: no private cluster for the cluster tier")


@pytest.fixture
def cluster_exchange() -> str:
    """A unique exchange name: every test gets its own topology (and quorum queues)."""
    return f"cluster-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def open_bus(cluster_exchange: str) -> AsyncIterator[BusOpener]:
    """Open buses on this test's exchange, at any URL; close them all afterwards."""
    async with bus_opener(cluster_exchange) as opener:
        yield opener


@pytest.fixture
async def team() -> AsyncIterator[Team]:
    """In-process agents, stopped after the test."""
    agents = Team()
    yield agents
    await agents.aclose()


@pytest.fixture
def dedup_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The de-duplication file the workers share."""
    path = str(tmp_path / "dedup.db")
    monkeypatch.setenv("AGENTBUS_DEDUP_PATH", path)
    return path
