"""Feeds on the in-memory bus: the same path as on RabbitMQ, admission included."""

from __future__ import annotations

from typing import Any

import pytest

from agentbus import ConfigurationError, Settings
from agentbus.bus import FeedState
from agentbus.envelopes import BROADCAST, EventEnvelope, EventPayload, encode
from agentbus.testing import MemoryBroker, MemoryBus, MemoryMessage

KEY = "broadcast.event.tick"


def _tick(n: int, sender_id: str = "beater") -> bytes:
    payload = EventPayload(event_name="tick", event_data={"n": n})
    return encode(EventEnvelope(sender_id=sender_id, receiver_id=BROADCAST, payload=payload))


def _publish(broker: MemoryBroker, body: bytes, **properties: Any) -> None:
    broker.publish(MemoryMessage(body, **properties), KEY, exchange="agentbus")


async def test_feed_takes_json_objects_in_order() -> None:
    """Each message's JSON object reaches the handler, in the order published."""
    broker = MemoryBroker()
    taken: list[int] = []
    async with MemoryBus(broker) as bus:
        feed = await bus.consume_feed(
            KEY, lambda item: taken.append(item["payload"]["event_data"]["n"]), name="ticks"
        )
        for n in range(5):
            _publish(broker, _tick(n))
        await broker.idle()

    assert taken == [0, 1, 2, 3, 4]
    assert feed.stats.received == 5


async def test_a_full_feed_drops_its_oldest_messages() -> None:
    """A feed's queue is bounded: past max_length the oldest waiting messages go."""
    broker = MemoryBroker()
    taken: list[int] = []
    async with MemoryBus(broker) as bus:
        feed = await bus.consume_feed(
            KEY,
            lambda item: taken.append(item["payload"]["event_data"]["n"]),
            name="ticks",
            max_length=3,
        )
        for n in range(10):  # published before the consumer gets a turn
            _publish(broker, _tick(n))
        await broker.idle()

    assert taken == [7, 8, 9]
    assert feed.stats.received == 3


async def test_a_failing_handler_or_a_bad_body_does_not_stop_the_feed() -> None:
    """Not-JSON and non-object bodies are counted as invalid; a raising handler is logged."""
    broker = MemoryBroker()
    taken: list[int] = []

    def handler(item: dict[str, Any]) -> None:
        n = item["payload"]["event_data"]["n"]
        if n == 1:
            raise RuntimeError("boom")
        taken.append(n)

    async with MemoryBus(broker) as bus:
        feed = await bus.consume_feed(KEY, handler, name="ticks")
        for body in (_tick(0), b"{oops", b'"text"', _tick(1), _tick(2)):
            _publish(broker, body)
        await broker.idle()

    assert taken == [0, 2]
    assert feed.stats.invalid == 2


async def test_admission_refuses_what_the_bus_would_refuse_for_how_it_was_sent() -> None:
    """With verify_sender: no user_id, or a sender_id of another user, is refused and counted."""
    broker = MemoryBroker()
    taken: list[str] = []
    settings = Settings(verify_sender=True)
    async with MemoryBus(broker, settings, agent_id="guest-registry") as bus:
        feed = await bus.consume_feed(KEY, lambda item: taken.append(item["sender_id"]), name="t")
        _publish(broker, _tick(0, "guest-a"), user_id="guest")
        _publish(broker, _tick(1, "guest-b"))
        _publish(broker, _tick(2, "mallory"), user_id="guest")
        _publish(broker, _tick(3, "guest-c"), user_id="guest", headers={"CC": ["elsewhere"]})
        await broker.idle()

        assert taken == ["guest-a"]
        assert feed.stats.refused == 3
        assert dict(bus.stats.refused_by) == {
            "missing_user_id": 1,
            "sender_mismatch": 1,
            "carbon_copy": 1,
        }


async def test_feeds_close_with_the_bus_and_their_queues_go() -> None:
    """Closing the bus closes its feeds; their exclusive queues are deleted."""
    broker = MemoryBroker()
    async with MemoryBus(broker) as bus:
        feed = await bus.consume_feed(KEY, lambda _: None, name="ticks")
        assert feed.queue in broker.queues

    assert feed.state is FeedState.CLOSED
    assert feed.queue not in broker.queues


async def test_a_feed_name_must_be_an_id() -> None:
    """A feed name stands in a queue name: dots and spaces are refused."""
    async with MemoryBus(MemoryBroker()) as bus:
        with pytest.raises(ConfigurationError, match="feed name"):
            await bus.consume_feed(KEY, lambda _: None, name="a.b")


async def test_a_groups_feed_is_shared_each_message_going_to_one() -> None:
    """Two buses consuming feed ``ticks`` of group ``svc``: one queue, every message taken once."""
    broker = MemoryBroker()
    taken: dict[str, list[int]] = {"a": [], "b": []}
    async with MemoryBus(broker, agent_id="a") as a, MemoryBus(broker, agent_id="b") as b:
        feeds = []
        for bus, into in ((a, taken["a"]), (b, taken["b"])):
            feeds.append(
                await bus.consume_feed(
                    KEY,
                    lambda item, into=into: into.append(item["payload"]["event_data"]["n"]),
                    name="ticks",
                    group="svc",
                )
            )
        for n in range(20):
            _publish(broker, _tick(n))
        await broker.idle()
        assert feeds[0].queue == feeds[1].queue == "agentbus.feed.svc.ticks"
        assert feeds[0].shared
    assert sorted(taken["a"] + taken["b"]) == list(range(20))
    assert taken["a"]
    assert taken["b"]
