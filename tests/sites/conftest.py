"""Fixtures for the sites tier: two private nodes, one per site, linked by federation.

Each node runs the ``rabbitmq_federation`` plugin; each test gets its own exchange, and
each site loads the definitions ``agentbus federation`` generates for it (docs/sites.md).
``linked`` runs each site's link through a chaos proxy, for the tests that cut it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

_CHAOS = str(Path(__file__).resolve().parent.parent / "chaos")
if _CHAOS not in sys.path:
    sys.path.insert(0, _CHAOS)

from fault_support import Team  # noqa: E402

from agentbus import Settings  # noqa: E402
from agentbus.definitions import federation_definitions  # noqa: E402
from agentbus.testing.chaos import (  # noqa: E402
    ChaosProxy,
    PrivateBroker,
    PrivateBrokerError,
    find_rabbitmq,
)
from support.required import is_required  # noqa: E402


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip where rabbitmq-server is not installed, unless under CI (there: fail)."""
    needs_nodes = "site_nodes" in getattr(item, "fixturenames", ())
    if needs_nodes and find_rabbitmq() is None and not is_required():
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
    a, b = site_nodes
    return await _link(site_nodes, {"a": b.url, "b": a.url}, tmp_path)


@dataclass(frozen=True)
class Link:
    """Two linked sites whose links run through chaos proxies, to cut, stall or slow.

    ``to_a`` carries the link site ``b`` runs (from ``a``'s outbox: requests from ``a``),
    ``to_b`` the link ``a`` runs (from ``b``'s outbox: answers and heartbeats from ``b``).
    """

    sites: Sites
    nodes: Mapping[str, PrivateBroker]
    to_a: ChaosProxy
    to_b: ChaosProxy
    documents: Mapping[str, Path]

    def cut(self) -> None:
        """The network between the sites goes: every link connection reset, none let in."""
        for proxy in (self.to_a, self.to_b):
            proxy.refuse()
            proxy.cut()

    def stall(self) -> None:
        """The network between the sites goes silent: nothing crosses, nothing closes."""
        for proxy in (self.to_a, self.to_b):
            proxy.stall()

    def slow(self, delay: float) -> None:
        """Add ``delay`` seconds to every chunk across, both ways."""
        for proxy in (self.to_a, self.to_b):
            proxy.slow(delay)

    def restore(self) -> None:
        """The network between the sites is back, without delay."""
        for proxy in (self.to_a, self.to_b):
            proxy.heal()

    async def stop_link(self, site: str) -> None:
        """Stop the link ``site`` runs, as an operator would: remove its upstream."""
        peer = "b" if site == "a" else "a"
        name = f"{self.sites.a.exchange}-site-{peer}"
        await asyncio.to_thread(
            self.nodes[site].rabbitmqctl, "clear_parameter", "federation-upstream", name
        )

    async def start_link(self, site: str) -> None:
        """Load ``site``'s definitions again: its link starts."""
        await _load(self.nodes[site], self.documents[site])


@pytest.fixture
async def linked(
    site_nodes: tuple[PrivateBroker, PrivateBroker], tmp_path: Path
) -> AsyncIterator[Link]:
    """Sites ``a`` and ``b`` linked both ways through a chaos proxy each way."""
    a, b = site_nodes
    async with ChaosProxy("127.0.0.1", a.port) as to_a, ChaosProxy("127.0.0.1", b.port) as to_b:
        # Anything waits two minutes at most in a link's queue: longer than any test's cut.
        uris = {"a": to_b.url(), "b": to_a.url()}
        sites = await _link(site_nodes, uris, tmp_path, link_message_ttl=120)
        nodes = {"a": a, "b": b}
        documents = {site: tmp_path / f"{site}.json" for site in "ab"}
        try:
            yield Link(sites, nodes, to_a, to_b, documents)
        finally:
            # Stop this exchange's links, or they would knock at a closed proxy for good.
            for node in nodes.values():
                with contextlib.suppress(PrivateBrokerError):
                    await asyncio.to_thread(
                        node.rabbitmqctl, "clear_policy", f"{sites.a.exchange}-sites"
                    )


async def _link(
    site_nodes: tuple[PrivateBroker, PrivateBroker],
    uris: Mapping[str, str],
    tmp_path: Path,
    *,
    link_message_ttl: float | None = None,
) -> Sites:
    # uris: the URI each site's link uses to reach its peer.
    exchange = f"sites-{uuid.uuid4().hex[:10]}"
    nodes = dict(zip("ab", site_nodes, strict=True))
    for site, peer in (("a", "b"), ("b", "a")):
        document = federation_definitions(
            site, {peer: uris[site]}, exchange=exchange, link_message_ttl=link_message_ttl
        )
        path = tmp_path / f"{site}.json"
        path.write_bytes(orjson.dumps(document))
        await _load(nodes[site], path)
    return Sites(
        a=Settings(url=nodes["a"].url, exchange=exchange, site="a", peer_sites="b"),
        b=Settings(url=nodes["b"].url, exchange=exchange, site="b", peer_sites="a"),
    )


async def _load(node: PrivateBroker, document: Path) -> None:
    await asyncio.to_thread(node.rabbitmqctl, "import_definitions", str(document))


@pytest.fixture
async def team() -> AsyncIterator[Team]:
    """In-process agents, stopped after the test."""
    agents = Team()
    yield agents
    await agents.aclose()
