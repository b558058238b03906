"""Test agents without a broker: an in-memory bus with the RabbitMQ bus's interface.

``MemoryBroker`` is one in-process broker with RabbitMQ's topic routing, competing
consumers, prefetch, acks, requeues, TTLs and dead letters; ``MemoryBus`` is a
``Transport`` on it that behaves as ``agentbus.Bus`` does::

    broker = MemoryBroker()
    async with MemoryBus(broker) as server, MemoryBus(broker) as client:
        await server.serve(handler, service="echo")
        reply = await client.request("echo", "say", {"text": "hi"}, timeout=1)

For chaos tests on a real broker (a private RabbitMQ node, a TCP proxy, agent processes,
a ledger of what was sent and done, and their opt-in pytest plugin), see
``agentbus.testing.chaos``.
"""

from typing import TYPE_CHECKING

from agentbus.testing._consumer import ConsumerState, MemoryConsumer, MemoryDelivery
from agentbus.testing._memory_artifacts import MemoryArtifacts, MemoryArtifactStore
from agentbus.testing._memory_broker import DEFAULT_EXCHANGE, MemoryBroker
from agentbus.testing._memory_bus import MemoryBus
from agentbus.testing._message import DeadLetter, DeadLetterReason, MemoryMessage

__all__ = [
    "DEFAULT_EXCHANGE",
    "ConsumerState",
    "DeadLetter",
    "DeadLetterReason",
    "MemoryArtifactStore",
    "MemoryArtifacts",
    "MemoryBroker",
    "MemoryBus",
    "MemoryConsumer",
    "MemoryDelivery",
    "MemoryMessage",
]

if TYPE_CHECKING:  # mypy proves the in-memory bus satisfies the transport seam.
    from agentbus.bus import Transport

    def _conforms(bus: MemoryBus) -> Transport:
        return bus
