"""The dead-letter queue on RabbitMQ: browsed without loss, replayed once, kept if unroutable."""

from __future__ import annotations

from datetime import UTC, datetime

import aio_pika
import orjson
from helpers import BusFactory

from agentbus.bus import Topology


def death(exchange: str, routing_key: str) -> dict[str, object]:
    """An x-death header as RabbitMQ writes it for a request rejected from a service queue."""
    return {
        "x-death": [
            {
                "count": 1,
                "reason": "rejected",
                "queue": f"{exchange}.service.alpha",
                "time": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
                "exchange": exchange,
                "routing-keys": [routing_key],
            }
        ]
    }


async def dead_letter(
    channel: aio_pika.abc.AbstractChannel, exchange: str, message_id: str, routing_key: str
) -> None:
    """Put a message in the dead-letter queue the way the broker does (through the DLX)."""
    dlx = await channel.get_exchange(Topology(exchange).dead_letter_exchange)
    body = orjson.dumps({"sender_id": "someone", "message_id": message_id, "payload": {}})
    await dlx.publish(
        aio_pika.Message(body, message_id=message_id, headers=death(exchange, routing_key)),
        routing_key="",
    )


async def test_browse_replay_and_discard_on_the_broker(
    make_bus: BusFactory, raw_channel: aio_pika.abc.AbstractChannel, exchange_name: str
) -> None:
    """Looking keeps everything; replay is refused when unroutable and sends once when not."""
    bus = await make_bus("dashboard-1")
    dead_letters = bus.dead_letters()
    await dead_letter(raw_channel, exchange_name, "nowhere", "agent.nobody.request")
    await dead_letter(raw_channel, exchange_name, "somewhere", "agent.alpha.request")
    target = await raw_channel.declare_queue("", exclusive=True)
    await target.bind(exchange_name, routing_key="agent.alpha.request")

    for _ in range(3):  # looking, again and again, loses nothing and keeps the order
        letters = await dead_letters.browse()
        assert [letter.id for letter in letters] == ["nowhere", "somewhere"]
        assert await dead_letters.count() == 2
    first = letters[0]
    assert (first.reason, first.routing_key, first.sender_id) == (
        "rejected",
        "agent.nobody.request",
        "someone",
    )
    assert first.dead_lettered_at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    refused = await dead_letters.replay(["nowhere"])
    assert refused.done == []
    assert "republish failed" in refused.failed["nowhere"]
    assert await dead_letters.count() == 2  # an unroutable replay keeps its dead letter

    replayed = await dead_letters.replay(["somewhere"])
    assert replayed.done == ["somewhere"]
    copy = await target.get(timeout=5)
    assert copy.message_id == "somewhere"
    assert copy.headers is not None
    assert "x-death" not in copy.headers
    assert copy.headers["x-agentbus-replayed"] == 1
    assert await target.get(fail=False) is None  # once
    again = await dead_letters.replay(["somewhere"])
    assert again.failed == {"somewhere": "not in the dead-letter queue"}

    discarded = await dead_letters.discard(["nowhere"])
    assert discarded.done == ["nowhere"]
    assert await dead_letters.count() == 0
