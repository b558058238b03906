"""Failover across broker nodes: a bus given several node URLs moves to the next when one goes.

Two chaos proxies in front of the private node stand for two cluster nodes: refusing
and cutting one is, to the bus, that node dying. The cluster tier kills real nodes.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from chaos_support import BusOpener, until

from agentbus import BrokerUnavailable
from agentbus.envelopes import RequestEnvelope
from agentbus.testing.chaos import ChaosProxy, PrivateBroker

pytestmark = pytest.mark.chaos

FAST = {"reconnect_interval": 0.2, "heartbeat": 2}


async def _echo(request: RequestEnvelope) -> object:
    return request.payload.parameters


@pytest.fixture
async def second_node(private_broker: PrivateBroker) -> AsyncIterator[ChaosProxy]:
    """Another way in to the private node: a second "node" for the bus."""
    async with ChaosProxy("127.0.0.1", private_broker.port) as proxy:
        yield proxy


async def test_a_server_moves_to_the_next_node_and_serves_again(
    private_broker: PrivateBroker,
    chaos_proxy: ChaosProxy,
    second_node: ChaosProxy,
    open_bus: BusOpener,
) -> None:
    """Node one dies: the bus reconnects to node two, restores its consumers, and answers."""
    nodes = f"{chaos_proxy.url()};{second_node.url()}"
    server = await open_bus(nodes, agent_id="echo-1", **FAST)
    await server.serve(_echo, service="echo")
    client = await open_bus(private_broker.url, **FAST)
    assert (await client.request("echo", "say", {"n": 1}, timeout=5)).result == {"n": 1}
    assert server.stats.node is not None
    assert server.stats.node.startswith(f"amqp://guest:***@127.0.0.1:{chaos_proxy.port}/")

    began = time.monotonic()
    chaos_proxy.refuse()
    chaos_proxy.cut()
    await until(lambda: server.stats.connections == 2, 10, "the reconnect to node two")
    reply = await client.request("echo", "say", {"n": 2}, timeout=10)
    recovered = time.monotonic() - began

    assert reply.result == {"n": 2}
    assert server.stats.node is not None
    assert server.stats.node.startswith(f"amqp://guest:***@127.0.0.1:{second_node.port}/")
    assert second_node.open_connections >= 1
    print(f"\nfailover to node two: requests flow again after {recovered:.2f} s")


async def test_a_bus_opens_on_the_first_node_that_answers(
    private_broker: PrivateBroker, chaos_proxy: ChaosProxy, open_bus: BusOpener
) -> None:
    """The first node refuses: the bus opens on the second without waiting for the first."""
    chaos_proxy.refuse()
    bus = await open_bus(f"{chaos_proxy.url()};{private_broker.url}", **FAST)
    assert bus.stats.node == f"amqp://guest:***@127.0.0.1:{private_broker.port}/"
    assert bus.stats.connections == 1


async def test_no_node_answering_is_broker_unavailable_naming_them(
    chaos_proxy: ChaosProxy, second_node: ChaosProxy, open_bus: BusOpener
) -> None:
    """Every node refuses: one clear error that names every node, password masked."""
    chaos_proxy.refuse()
    second_node.refuse()
    with pytest.raises(BrokerUnavailable) as raised:
        await open_bus(f"{chaos_proxy.url()};{second_node.url()}", **FAST)
    message = str(raised.value)
    assert f":{chaos_proxy.port}/" in message
    assert f":{second_node.port}/" in message
    assert "guest:guest" not in message
