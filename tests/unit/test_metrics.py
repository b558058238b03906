"""Metrics on the in-memory bus: a bus's counters are scraped while it is open, not after."""

from __future__ import annotations

from prometheus_client import generate_latest

from agentbus import Metrics
from agentbus.testing import MemoryBroker, MemoryBus


def _scrape(metrics: Metrics) -> str:
    return generate_latest(metrics.registry).decode()


async def test_a_closed_bus_leaves_the_scrape_and_the_collector() -> None:
    """Counters of an open bus are scraped; once it closes its series go and nothing holds it."""
    metrics = Metrics()
    broker = MemoryBroker()
    bus = MemoryBus(broker, agent_id="metered-1", metrics=metrics)
    async with bus, MemoryBus(broker, agent_id="other-1", metrics=metrics):
        await bus.emit("tick", mandatory=False)
        assert 'agentbus_messages_published_total{agent_id="metered-1",type="event"} 1.0' in (
            _scrape(metrics)
        )
        await bus.aclose()

        scraped = _scrape(metrics)
        assert 'agent_id="metered-1"' not in scraped
        assert 'agentbus_in_flight{agent_id="other-1"} 0.0' in scraped


async def test_the_node_a_bus_is_connected_to_and_its_connections_are_scraped() -> None:
    """One series names the broker node of each bus; a counter counts its connections."""
    metrics = Metrics()
    async with MemoryBus(MemoryBroker(), agent_id="metered-1", metrics=metrics):
        scraped = _scrape(metrics)
    assert 'agentbus_broker_node{agent_id="metered-1",node="memory://"} 1.0' in scraped
    assert 'agentbus_connections_total{agent_id="metered-1"} 1.0' in scraped
