"""Transient requests are answered by RabbitMQ's direct reply-to; persistent ones by queue.

A foreign server (plain aio-pika) answers at whatever ``reply_to`` a request names, so it
shows what the bus asked for. While the direct reply-to consumer is not on the publishing
channel (the moment after a reopen) a request names the instance queue instead: the
broker closes a channel that publishes to direct reply-to without its consumer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aio_pika
import pytest
from helpers import BusFactory
from sample_agents import Alpha

from agentbus import Bus, Unroutable
from agentbus.bus import Topology
from agentbus.bus._rabbitmq._publisher import Publisher
from agentbus.envelopes import RequestEnvelope, ResponseEnvelope

pytestmark = pytest.mark.integration


@pytest.fixture
async def foreign_server(
    raw_channel: aio_pika.abc.AbstractChannel, exchange_name: str
) -> AsyncIterator[list[str]]:
    """Serve ``echo`` for service ``foreign``; yield the ``reply_to`` of each request."""
    topology = Topology(exchange_name)
    exchange = await raw_channel.declare_exchange(
        exchange_name, aio_pika.ExchangeType.TOPIC, durable=True
    )
    queue = await raw_channel.declare_queue(topology.service_queue("foreign"), auto_delete=True)
    await queue.bind(exchange, "agent.foreign.request")
    seen: list[str] = []

    async def serve(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        async with message.process():
            request = RequestEnvelope.model_validate_json(message.body)
            seen.append(message.reply_to or "")
            reply = request.response({"echo": request.payload.parameters}, sender_id="foreign-1")
            body = reply.model_dump_json().encode()
            await raw_channel.default_exchange.publish(
                aio_pika.Message(body, correlation_id=request.message_id),
                routing_key=message.reply_to or "",
            )

    tag = await queue.consume(serve)
    yield seen
    await queue.cancel(tag)


def _publisher(bus: Bus) -> Publisher:
    publisher = bus._publisher
    assert isinstance(publisher, Publisher)
    return publisher


async def test_a_transient_request_is_answered_by_direct_reply_to(
    make_bus: BusFactory, foreign_server: list[str]
) -> None:
    bus = await make_bus()

    quick = await bus.request("foreign", "echo", {"n": 1}, timeout=5, persistent=False)
    kept = await bus.request("foreign", "echo", {"n": 2}, timeout=5)

    assert quick.result == {"echo": {"n": 1}}
    assert kept.result == {"echo": {"n": 2}}
    direct, queued = foreign_server
    # The broker gives each channel its own address under the reserved name.
    assert direct.startswith("amq.rabbitmq.reply-to.")
    assert queued == bus.topology.instance_queue(bus.agent_id)


async def test_an_agent_answers_a_transient_request_by_direct_reply_to(
    make_bus: BusFactory,
) -> None:
    server = await make_bus("echo-1")

    async def handle(request: RequestEnvelope) -> dict[str, Any]:
        return {"echo": request.payload.parameters}

    await server.serve(handle, service="echo")
    client = await make_bus()
    replies = await asyncio.gather(
        *(client.request("echo", "echo", {"n": n}, timeout=5, persistent=False) for n in range(50))
    )

    assert [reply.result for reply in replies] == [{"echo": {"n": n}} for n in range(50)]
    assert client.stats.replies_matched == 50
    assert server.stats.replies_dropped == 0


async def test_after_a_reopen_a_transient_request_is_answered_again(
    make_bus: BusFactory, foreign_server: list[str]
) -> None:
    bus = await make_bus()
    publisher = _publisher(bus)
    await bus.request("foreign", "echo", {"n": 0}, timeout=5, persistent=False)

    # What a reconnect does: the channel without confirms is opened afresh, and the
    # direct reply-to consumer on it with it.
    assert publisher._plain is not None
    await publisher._plain.reopen()
    reply = await bus.request("foreign", "echo", {"n": 1}, timeout=5, persistent=False)

    assert reply.result == {"echo": {"n": 1}}
    before, after = foreign_server
    assert before.startswith("amq.rabbitmq.reply-to.")
    assert after.startswith("amq.rabbitmq.reply-to.")


async def test_without_its_consumer_a_request_names_the_fallback_queue(
    make_bus: BusFactory, foreign_server: list[str]
) -> None:
    bus = await make_bus()
    direct = _publisher(bus).direct
    assert direct is not None
    # The consumer as it is between a channel's reopen and its restart: not there yet.
    direct._consumer._tag = None

    reply = await bus.request("foreign", "echo", {"n": 1}, timeout=5, persistent=False)

    assert reply.result == {"echo": {"n": 1}}
    assert foreign_server == [bus.topology.instance_queue(bus.agent_id)]


async def test_a_transient_request_waiting_for_progress_gets_it_in_order_first(
    make_bus: BusFactory,
) -> None:
    """Progress travels by the instance queue: a request with ``on_progress`` is answered
    there too, not by direct reply-to, so no chunk comes after the answer. (By two paths
    the order held in every run tried here, the chunks being confirmed first; it is one
    path by construction, not by timing.)"""
    alpha = Alpha(agent_id="alpha-1", bus=await make_bus("alpha-1"), heartbeat_interval=5)
    client = await make_bus()
    word = "abcdefghijklmnopqrstuvwxyz"
    async with alpha:
        for _ in range(5):
            chunks: list[str] = []

            def on_progress(notice: ResponseEnvelope, into: list[str] = chunks) -> None:
                update = notice.payload.result
                if isinstance(update, dict) and update.get("state") == "partial":
                    into.append(update["chunk"])

            reply = await client.request(
                "alpha", "spell", {"word": word}, timeout=10, persistent=False,
                on_progress=on_progress,
            )  # fmt: skip
            assert reply.result == list(word)
            assert "".join(chunks) == word


async def test_a_transient_request_nobody_serves_is_unroutable_after_the_presence_check(
    make_bus: BusFactory,
) -> None:
    """It goes without a confirm, so no return says so at once: the presence check finds
    no queue for the receiver, and the request ends ``Unroutable`` well before its timeout."""
    bus = await make_bus(presence_check=0.2)

    # Not RequestTimeout: the check, not the timeout, ends it.
    with pytest.raises(Unroutable, match="nobody serves it"):
        await bus.request("nobody-serves-this", "echo", {}, timeout=20, persistent=False)
