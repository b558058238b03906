"""Unit tests of ``agentbus.testing``'s broker: queues, prefetch, acks, TTL, dead letters."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from agentbus import ConfigurationError, Unroutable
from agentbus.bus import Transport
from agentbus.envelopes import EventEnvelope, EventPayload
from agentbus.testing import (
    DEFAULT_EXCHANGE,
    ConsumerState,
    MemoryBroker,
    MemoryBus,
    MemoryDelivery,
    MemoryMessage,
)

EXCHANGE = "topic"


def message(text: str = "m", **properties: Any) -> MemoryMessage:
    return MemoryMessage(text.encode(), **properties)


def queue_with_inbox(
    broker: MemoryBroker, name: str = "q", *, prefetch: int = 0, ack: bool = True
) -> list[MemoryDelivery]:
    """Declare ``name`` bound to ``#`` and consume it into a list, acking unless told not to."""
    broker.declare_queue(name)
    broker.bind(name, "#", exchange=EXCHANGE)
    inbox: list[MemoryDelivery] = []

    async def collect(delivery: MemoryDelivery) -> None:
        inbox.append(delivery)
        if ack:
            await delivery.ack()

    broker.consume(name, collect, prefetch=prefetch)
    return inbox


async def test_delivery_runs_after_publish_returns_never_inside_it() -> None:
    """A publish only queues the message; the consumer runs later, in a task of its own."""
    broker = MemoryBroker()
    inbox = queue_with_inbox(broker)

    routed = broker.publish(message(), "a.b", exchange=EXCHANGE)

    assert routed == 1
    assert inbox == []
    await broker.idle()
    assert [d.body for d in inbox] == [b"m"]


async def test_unroutable_raises_when_mandatory_and_is_dropped_otherwise() -> None:
    """A message no binding matches raises Unroutable if mandatory, else vanishes."""
    broker = MemoryBroker()
    broker.declare_queue("q")
    broker.bind("q", "only.this", exchange=EXCHANGE)

    with pytest.raises(Unroutable):
        broker.publish(message(), "something.else", exchange=EXCHANGE, mandatory=True)
    assert broker.publish(message(), "something.else", exchange=EXCHANGE) == 0
    assert broker.publish(message(), "only.this", exchange="another-exchange") == 0
    assert broker.message_count("q") == 0


async def test_default_exchange_routes_to_the_queue_named_by_the_key() -> None:
    """The default exchange delivers to the queue of that name, and nowhere else."""
    broker = MemoryBroker()
    broker.declare_queue("replies")

    assert broker.publish(message(), "replies", exchange=DEFAULT_EXCHANGE, mandatory=True) == 1
    with pytest.raises(Unroutable):
        broker.publish(message(), "no-such-queue", exchange=DEFAULT_EXCHANGE, mandatory=True)
    assert broker.message_count("replies") == 1


async def test_one_copy_per_queue_however_many_bindings_match() -> None:
    """A queue bound twice with matching patterns still gets one copy."""
    broker = MemoryBroker()
    inbox = queue_with_inbox(broker)
    broker.bind("q", "a.*", exchange=EXCHANGE)

    broker.publish(message(), "a.b", exchange=EXCHANGE)
    await broker.idle()

    assert len(inbox) == 1


async def test_prefetch_bounds_unacked_deliveries_per_consumer() -> None:
    """A consumer holds at most ``prefetch`` unacked deliveries; an ack lets the next one in."""
    broker = MemoryBroker()
    inbox = queue_with_inbox(broker, prefetch=2, ack=False)
    for n in range(5):
        broker.publish(message(str(n)), "k", exchange=EXCHANGE)

    await broker.idle()
    assert [d.body for d in inbox] == [b"0", b"1"]
    assert broker.message_count("q") == 3

    await inbox[0].ack()
    await broker.idle()
    assert [d.body for d in inbox] == [b"0", b"1", b"2"]


async def test_competing_consumers_take_turns() -> None:
    """Consumers of one queue receive its messages round-robin."""
    broker = MemoryBroker()
    broker.declare_queue("work")
    broker.bind("work", "job", exchange=EXCHANGE)
    got: dict[str, list[bytes]] = {"a": [], "b": []}
    for name in got:

        async def take(delivery: MemoryDelivery, name: str = name) -> None:
            got[name].append(delivery.body)
            await delivery.ack()

        broker.consume("work", take, prefetch=1)

    for n in range(4):
        broker.publish(message(str(n)), "job", exchange=EXCHANGE)
    await broker.idle()

    assert got == {"a": [b"0", b"2"], "b": [b"1", b"3"]}


async def test_nack_requeues_at_the_head_marked_redelivered() -> None:
    """A nacked message comes back first, flagged as redelivered."""
    broker = MemoryBroker()
    seen: list[tuple[bytes, bool]] = []

    async def refuse_once(delivery: MemoryDelivery) -> None:
        seen.append((delivery.body, delivery.redelivered))
        if delivery.body == b"first" and not delivery.redelivered:
            await delivery.nack(requeue=True)
        else:
            await delivery.ack()

    broker.declare_queue("q")
    broker.bind("q", "k", exchange=EXCHANGE)
    broker.publish(message("first"), "k", exchange=EXCHANGE)
    broker.publish(message("second"), "k", exchange=EXCHANGE)
    broker.consume("q", refuse_once, prefetch=1)
    await broker.idle()

    assert seen == [(b"first", False), (b"first", True), (b"second", False)]


async def test_reject_dead_letters_and_settling_twice_fails() -> None:
    """A rejected message lands in dead_letters; a second settle of a delivery raises."""
    broker = MemoryBroker()
    inbox = queue_with_inbox(broker, ack=False)
    broker.publish(message("bad", message_id="m-1"), "a.b", exchange=EXCHANGE)
    await broker.idle()

    await inbox[0].reject(requeue=False)

    [letter] = broker.dead_letters
    assert (letter.queue, letter.routing_key, letter.reason) == ("q", "a.b", "rejected")
    assert letter.message.message_id == "m-1"
    with pytest.raises(RuntimeError):
        await inbox[0].ack()


async def test_expired_messages_are_dead_lettered_or_dropped() -> None:
    """A message past its TTL is never delivered: dead-lettered by a DLX queue, else dropped."""
    broker = MemoryBroker()
    broker.declare_queue("with-dlx")
    broker.declare_queue("without", dead_letter=False)
    for name in ("with-dlx", "without"):
        broker.bind(name, "k", exchange=EXCHANGE)

    broker.publish(message("stale", expiration=0.01), "k", exchange=EXCHANGE)

    def waiting() -> int:
        return broker.message_count("with-dlx") + broker.message_count("without")

    async with asyncio.timeout(5):
        while waiting():  # noqa: ASYNC110 - the broker's own TTL timers
            await asyncio.sleep(0.01)
    delivered: list[MemoryDelivery] = []
    for name in ("with-dlx", "without"):
        broker.consume(name, lambda d: asyncio.sleep(0, delivered.append(d)))
    await broker.idle()

    assert [(d.queue, d.reason) for d in broker.dead_letters] == [("with-dlx", "expired")]
    assert delivered == []


async def test_closing_a_consumer_requeues_what_it_holds() -> None:
    """Closing a consumer (its channel) requeues its unacked deliveries, in order."""
    broker = MemoryBroker()
    broker.declare_queue("q")
    broker.bind("q", "k", exchange=EXCHANGE)
    held: list[MemoryDelivery] = []

    async def hold(delivery: MemoryDelivery) -> None:
        held.append(delivery)

    consumer = broker.consume("q", hold)
    for n in range(3):
        broker.publish(message(str(n)), "k", exchange=EXCHANGE)
    await broker.idle()

    consumer.close()

    assert consumer.state is ConsumerState.CLOSED
    assert broker.message_count("q") == 3
    with pytest.raises(Exception, match="closed"):
        await held[0].ack()
    inbox = queue_with_inbox(broker, "q")
    await broker.idle()
    assert [(d.body, d.redelivered) for d in inbox] == [(b"0", True), (b"1", True), (b"2", True)]


async def test_queue_with_expires_is_deleted_once_unused() -> None:
    """A queue declared with ``expires`` goes away after that long without consumers."""
    broker = MemoryBroker()
    broker.declare_queue("brief", expires=0.01)
    consumer = broker.consume("brief", lambda d: d.ack())
    consumer.cancel()

    async with asyncio.timeout(5):
        while "brief" in broker.queues:  # noqa: ASYNC110 - the broker's own expiry timer
            await asyncio.sleep(0.01)


async def test_redeclaring_a_queue_with_other_arguments_is_refused() -> None:
    """Declaring an existing queue is idempotent, unless the arguments differ."""
    broker = MemoryBroker()
    broker.declare_queue("q")
    broker.declare_queue("q")

    with pytest.raises(ConfigurationError):
        broker.declare_queue("q", dead_letter=False)


async def test_memory_bus_conforms_to_the_transport_protocol() -> None:
    """MemoryBus is a Transport at run time, like the RabbitMQ bus."""
    assert isinstance(MemoryBus(MemoryBroker()), Transport)


async def test_undecodable_request_is_answered_to_reply_to_and_dead_lettered() -> None:
    """Bad bytes get an error envelope on their reply_to queue and land in dead_letters."""
    broker = MemoryBroker()
    async with MemoryBus(broker) as server:
        await server.serve(lambda request: asyncio.sleep(0), service="svc")
        replies = queue_with_inbox(broker, "raw-replies")
        body = orjson.dumps({"protocol_version": "1.0", "sender_id": "raw", "message_type": "x"})
        broker.publish(
            MemoryMessage(body, message_id="raw-1", reply_to="raw-replies"),
            "agent.svc.request",
            exchange=server.topology.exchange,
        )
        await broker.idle()

    [reply] = [orjson.loads(d.body) for d in replies]
    assert reply["message_type"] == "error"
    assert reply["payload"]["code"] == "invalid_envelope"
    assert reply["metadata"]["correlation_id"] == "raw-1"
    [letter] = broker.dead_letters
    assert (letter.queue, letter.reason) == ("agentbus.service.svc", "rejected")
    assert server.stats.dead_lettered == 1


async def test_event_handlers_see_envelopes_not_bytes() -> None:
    """What a MemoryBus subscriber gets went through encode and decode, as on the wire."""
    broker = MemoryBroker()
    got: list[EventEnvelope] = []

    async def on_event(event: EventEnvelope) -> None:
        got.append(event)

    async with MemoryBus(broker) as listener, MemoryBus(broker, agent_id="speaker") as speaker:
        await listener.subscribe("broadcast.event.*", on_event)
        sent = EventEnvelope(
            sender_id="speaker",
            receiver_id="broadcast",
            payload=EventPayload(event_name="said", event_data={"n": 1}),
            future_field="kept",  # type: ignore[call-arg]
        )
        await speaker.publish(sent)
        await broker.idle()

    assert got == [sent]
    assert got[0] is not sent
    assert got[0].model_extra == {"future_field": "kept"}


async def test_an_event_nobody_subscribes_to_is_dropped_unless_a_listener_is_required() -> None:
    """Pub/sub: emit drops an unheard event; with mandatory=True it is Unroutable."""
    async with MemoryBus(MemoryBroker()) as bus:
        sent = await bus.emit("deployed", {"version": "1.2"})
        with pytest.raises(Unroutable):
            await bus.emit("deployed", {"version": "1.2"}, mandatory=True)
    assert sent.payload.event_name == "deployed"
    assert bus.stats.published_by_type["event"] == 1
