"""Fixtures for the sites tier: two private nodes, one per site, linked by federation.

Each node runs the ``rabbitmq_federation`` plugin; each test gets its own exchange, and
each site loads the definitions ``agentbus federation`` generates for it (docs/sites.md).
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

_CHAOS = str(Path(__file__).resolve().parent.parent / "chaos")
if _CHAOS not in sys.path:
    sys.path.insert(0, _CHAOS)

from chaos_support import broker_required  # noqa: E402
from fault_support import Team  # noqa: E402

from agentbus import Settings  # noqa: E402
from agentbus.security import federation_definitions  # noqa: E402
from agentbus.testing.chaos import PrivateBroker, find_rabbitmq  # noqa: E402


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip where rabbitmq-server is not installed, unless under CI (there: fail)."""
    needs_nodes = "site_nodes" in getattr(item, "fixturenames", ())
    if needs_nodes and find_rabbitmq() is None and not broker_required():
        pytest.skip("rabbitmq-server is not installed: no private nodes for the sites tier")


@pytest.fixture(scope="session")
def site_nodes() -> Iterator[tuple[PrivateBroker, PrivateBroker]]:
    """Two private nodes with the federation plugin: site ``a`` and site ``b``."""
    with (
        PrivateBroker("agentbus-site-a", plugins=["rabbitmq_federation"]) as a,
        PrivateBroker("agentbus-site-b", plugins=["rabbitmq_federation"]) as b,
    ):
        yield a, b


@dataclass(frozen=True)
class Sites:
    """Two linked sites on one test's exchange: a participant's settings at each."""

    a: Settings
    b: Settings


@pytest.fixture
async def sites(site_nodes: tuple[PrivateBroker, PrivateBroker], tmp_path: Path) -> Sites:
    """Link sites ``a`` and ``b`` both ways for a fresh exchange, as an operator would."""
    exchange = f"sites-{uuid.uuid4().hex[:10]}"
    nodes = dict(zip("ab", site_nodes, strict=True))
    for site, peer in (("a", "b"), ("b", "a")):
        document = federation_definitions(site, {peer: nodes[peer].url}, exchange=exchange)
        path = tmp_path / f"{site}.json"
        path.write_bytes(orjson.dumps(document))
        await asyncio.to_thread(nodes[site].rabbitmqctl, "import_definitions", str(path))
    return Sites(
        a=Settings(url=nodes["a"].url, exchange=exchange, site="a", peer_sites="b"),
        b=Settings(url=nodes["b"].url, exchange=exchange, site="b", peer_sites="a"),
    )


@pytest.fixture
async def team() -> AsyncIterator[Team]:
    """In-process agents, stopped after the test."""
    agents = Team()
    yield agents
    await agents.aclose()
