"""The chaos kit against a real, private RabbitMQ node: each fault, and the bus recovering.

Every wait is bounded. Timings (detection, kill, restart) are printed: ``pytest -s`` or
``-rP`` shows them.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import aio_pika
import pytest
from chaos_support import BusOpener, eventually, until

from agentbus import AgentBusError, Bus, RequestEnvelope, RequestTimeout
from agentbus.testing.chaos import (
    AgentLauncher,
    AgentProcess,
    BrokerState,
    ChaosProxy,
    PrivateBroker,
)

pytestmark = pytest.mark.chaos

HERE = Path(__file__).resolve().parent
FAST = {"reconnect_interval": 0.2}  # settings of every bus: reconnect quickly


async def echo(request: RequestEnvelope) -> dict[str, Any]:
    return dict(request.payload.parameters)


async def _ask(bus: Bus, n: int, timeout: float = 5.0) -> int | None:
    reply = await bus.request("echo", "say", {"n": n}, timeout=timeout)
    return int(reply.result["n"])


async def test_bus_rides_out_a_five_second_stall(
    private_broker: PrivateBroker, chaos_proxy: ChaosProxy, open_bus: BusOpener
) -> None:
    """A 5 s stall, shorter than the heartbeat timeouts, is ridden out on the same connection."""
    server = await open_bus(private_broker.url, **FAST)
    await server.serve(echo, service="echo")
    client = await open_bus(chaos_proxy.url(), heartbeat=5, **FAST)
    assert await _ask(client, 1) == 1
    connections = chaos_proxy.connections

    chaos_proxy.stall()
    during = asyncio.create_task(_ask(client, 2, timeout=30))
    await asyncio.sleep(5)  # the fault's duration, not a wait for an event
    assert not during.done()
    chaos_proxy.resume()

    async with asyncio.timeout(10):
        assert await during == 2
    assert await _ask(client, 3) == 3
    assert chaos_proxy.connections == connections, "the client reconnected"
    assert (chaos_proxy.closed_by_client, chaos_proxy.closed_by_target) == (0, 0)


async def test_long_stall_is_detected_and_the_bus_reconnects_after_resume(
    private_broker: PrivateBroker, chaos_proxy: ChaosProxy, open_bus: BusOpener
) -> None:
    """A stall outlasting the heartbeats: both ends give up, and the bus is back after resume."""
    heartbeat = 2
    server = await open_bus(private_broker.url, **FAST)
    await server.serve(echo, service="echo")
    client = await open_bus(chaos_proxy.url(), heartbeat=heartbeat, **FAST)
    assert await _ask(client, 1) == 1
    connections = chaos_proxy.connections

    chaos_proxy.stall()
    broker_side = await until(lambda: chaos_proxy.closed_by_target >= 1, 20, "the broker")
    client_side = broker_side + await until(
        lambda: chaos_proxy.closed_by_client >= 1, 20, "the client"
    )
    chaos_proxy.resume()
    resumed = time.monotonic()
    assert await eventually(lambda: _ask(client, 2), 30, "a reply after resume") == 2
    back = time.monotonic() - resumed

    print(
        f"heartbeat {heartbeat} s: broker gave up after {broker_side:.1f} s, "
        f"client after {client_side:.1f} s; a reply {back:.1f} s after resume"
    )
    # RabbitMQ closes after 2-3 silent heartbeat intervals; aiormq waits 3 * (heartbeat + 1).
    assert broker_side <= 3 * heartbeat + 1.5
    assert client_side <= 3 * (heartbeat + 1) + heartbeat + 1.5
    assert chaos_proxy.connections > connections


async def test_bus_closes_promptly_during_a_stall(
    private_broker: PrivateBroker, chaos_proxy: ChaosProxy, open_bus: BusOpener
) -> None:
    """Closing a bus whose link is stalled takes bounded time and raises nothing."""
    client = await open_bus(chaos_proxy.url(), heartbeat=5, shutdown_grace=1, **FAST)
    await client.serve(echo, service="echo")
    chaos_proxy.stall()

    began = time.monotonic()
    async with asyncio.timeout(10):
        await client.aclose()

    assert time.monotonic() - began < 5


async def test_cut_connections_reconnect_and_the_next_request_works(
    private_broker: PrivateBroker, chaos_proxy: ChaosProxy, open_bus: BusOpener
) -> None:
    """After cut(), both robust buses reconnect through the proxy and requests flow again."""
    server = await open_bus(chaos_proxy.url(), **FAST)
    await server.serve(echo, service="echo")
    client = await open_bus(chaos_proxy.url(), **FAST)
    assert await _ask(client, 1) == 1
    connections = chaos_proxy.connections

    chaos_proxy.cut()

    assert chaos_proxy.cuts == 2
    assert await eventually(lambda: _ask(client, 2), 20, "a reply after the cut") == 2
    assert chaos_proxy.connections >= connections + 2


async def test_kill_and_restart_keeps_persistent_confirmed_messages(
    private_broker: PrivateBroker, open_bus: BusOpener
) -> None:
    """kill -9 of the node, then restart: confirmed persistent messages are all still queued."""
    queue_name = f"chaos-durable-{uuid.uuid4().hex[:8]}"
    bodies = [f"message-{n}".encode() for n in range(50)]
    connection = await aio_pika.connect(private_broker.url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        await channel.declare_queue(queue_name, durable=True)
        for body in bodies:  # each publish returns once the broker confirmed it
            message = aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
            await channel.default_exchange.publish(message, routing_key=queue_name)
    server = await open_bus(private_broker.url, **FAST)
    await server.serve(echo, service="echo")
    client = await open_bus(private_broker.url, **FAST)
    assert await _ask(client, 1) == 1

    began = time.monotonic()
    await asyncio.to_thread(private_broker.kill)
    killed = time.monotonic() - began
    assert private_broker.state is BrokerState.DOWN
    began = time.monotonic()
    await asyncio.to_thread(private_broker.restart)
    restarted = time.monotonic() - began

    print(
        f"kill {killed:.2f} s, restart {restarted:.2f} s (starts: {private_broker.start_seconds})"
    )
    connection = await aio_pika.connect(private_broker.url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(queue_name, passive=True)
        assert queue.declaration_result.message_count == len(bodies)
        received = []
        async with asyncio.timeout(10), queue.iterator(no_ack=True) as messages:
            async for message in messages:
                received.append(message.body)
                if len(received) == len(bodies):
                    break
        await queue.delete(if_unused=False, if_empty=False)
    assert received == bodies
    assert await eventually(lambda: _ask(client, 2), 30, "a reply after the restart") == 2


async def test_forced_close_of_all_connections_brings_consumers_back(
    private_broker: PrivateBroker, open_bus: BusOpener
) -> None:
    """After close_connections(), served and serving buses reconnect and requests flow."""
    server = await open_bus(private_broker.url, **FAST)
    await server.serve(echo, service="echo")
    client = await open_bus(private_broker.url, **FAST)
    assert await _ask(client, 1) == 1

    await asyncio.to_thread(private_broker.close_connections)

    assert await eventually(lambda: _ask(client, 2), 20, "a reply after the close") == 2
    replies = await asyncio.gather(*(_ask(client, n, timeout=10) for n in range(3, 13)))
    assert replies == list(range(3, 13))


async def test_stop_app_and_start_app_reconnect(
    private_broker: PrivateBroker, open_bus: BusOpener
) -> None:
    """While the RabbitMQ app is stopped nothing answers; after start_app the bus is back."""
    server = await open_bus(private_broker.url, **FAST)
    await server.serve(echo, service="echo")
    client = await open_bus(private_broker.url, **FAST)
    assert await _ask(client, 1) == 1

    await asyncio.to_thread(private_broker.stop_app)
    assert private_broker.state is BrokerState.APP_STOPPED
    with pytest.raises(AgentBusError):
        async with asyncio.timeout(10):
            await _ask(client, 2, timeout=1)
    began = time.monotonic()
    await asyncio.to_thread(private_broker.start_app)
    started = time.monotonic() - began

    print(f"start_app {started:.2f} s")
    assert await eventually(lambda: _ask(client, 3), 30, "a reply after start_app") == 3


async def test_agent_process_is_paused_resumed_terminated_and_killed(
    private_broker: PrivateBroker,
    agent_process: AgentLauncher,
    open_bus: BusOpener,
    chaos_exchange: str,
) -> None:
    """An agent process answers, freezes on SIGSTOP, goes on after SIGCONT, drains on SIGTERM."""
    client = await open_bus(private_broker.url, **FAST)

    def start(agent_id: str) -> AgentProcess:
        return agent_process.start(
            "chaos_agents:Doubler",
            *("--id", agent_id, "--heartbeat", "1"),
            url=private_broker.url,
            exchange=chaos_exchange,
            cwd=HERE,
        )

    async def double(n: int, timeout: float = 10.0) -> int:
        return int((await client.request("doubler", "double", {"n": n}, timeout=timeout)).result)

    first = start("doubler-1")
    await first.started()
    assert await double(2) == 4

    first.pause()
    with pytest.raises(RequestTimeout):
        await double(3, timeout=1)
    first.resume()
    assert await double(4) == 8
    first.terminate()
    assert await first.exited(15) == 0

    second = start("doubler-2")
    await second.started()
    second.kill()
    assert await second.exited(5) == -signal.SIGKILL
