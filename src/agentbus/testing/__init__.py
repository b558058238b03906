"""Test agents without a broker: an in-memory bus with the RabbitMQ bus's interface.

``MemoryBroker`` is one in-process broker with RabbitMQ's topic routing, competing
consumers, prefetch, acks, requeues, TTLs and dead letters; ``MemoryBus`` is a
``Transport`` on it that behaves as ``agentbus.Bus`` does::

    broker = MemoryBroker()
    async with MemoryBus(broker) as server, MemoryBus(broker) as client:
        await server.serve(handler, service="echo")
        reply = await client.request("echo", "say", {"text": "hi"}, timeout=1)

For chaos tests on a real broker: ``PrivateBroker`` (a RabbitMQ node of the test's own,
to kill and restart), ``ChaosProxy`` (a TCP proxy that stalls, cuts, slows or refuses)
and ``AgentLauncher`` (agents as OS processes, to SIGKILL, SIGTERM or SIGSTOP). The
pytest plugin ``agentbus.testing.pytest_plugin`` offers them as the fixtures
``private_broker``, ``chaos_proxy`` and ``agent_process``. ``Ledger`` records what
producers sent and what agents did, and reports what was lost or done twice.
"""

from typing import TYPE_CHECKING

from agentbus.testing._broker import DEFAULT_EXCHANGE, MemoryBroker
from agentbus.testing._chaos_broker import (
    BrokerState,
    PrivateBroker,
    PrivateBrokerError,
    find_rabbitmq,
)
from agentbus.testing._consumer import ConsumerState, MemoryConsumer, MemoryDelivery
from agentbus.testing._ledger import (
    LEDGER_ENV,
    Ledger,
    LedgerReport,
    QueueDepth,
    SendOutcome,
    queue_depths,
)
from agentbus.testing._memory import MemoryBus
from agentbus.testing._message import DeadLetter, DeadLetterReason, MemoryMessage
from agentbus.testing._processes import AgentLauncher, AgentProcess
from agentbus.testing._proxy import ChaosProxy, ProxyState

__all__ = [
    "DEFAULT_EXCHANGE",
    "LEDGER_ENV",
    "AgentLauncher",
    "AgentProcess",
    "BrokerState",
    "ChaosProxy",
    "ConsumerState",
    "DeadLetter",
    "DeadLetterReason",
    "Ledger",
    "LedgerReport",
    "MemoryBroker",
    "MemoryBus",
    "MemoryConsumer",
    "MemoryDelivery",
    "MemoryMessage",
    "PrivateBroker",
    "PrivateBrokerError",
    "ProxyState",
    "QueueDepth",
    "SendOutcome",
    "find_rabbitmq",
    "queue_depths",
]

if TYPE_CHECKING:  # mypy proves the in-memory bus satisfies the transport seam.
    from agentbus.bus import Transport

    def _conforms(bus: MemoryBus) -> Transport:
        return bus
