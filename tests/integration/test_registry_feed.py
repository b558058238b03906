"""The registry's heartbeat feed on the real broker: with verify_sender, only a user's own beats."""

from __future__ import annotations

import asyncio
from urllib.parse import unquote, urlsplit

import aio_pika

from agentbus import Settings
from agentbus.agents import HEARTBEAT, AgentStatus, Heartbeat
from agentbus.bus import Topology
from agentbus.envelopes import BROADCAST, EventEnvelope, EventPayload, encode
from agentbus.registry import Registry
from support.broker import delete_topology
from support.waiting import wait_until


def _beat(sender_id: str, about: str) -> bytes:
    data = Heartbeat(
        agent_id=about,
        service="svc",
        status=AgentStatus.READY,
        in_flight=0,
        capacity=1,
        interval=1,
        card_digest="digest",
    )
    payload = EventPayload(event_name=HEARTBEAT, event_data=data.model_dump(mode="json"))
    return encode(EventEnvelope(sender_id=sender_id, receiver_id=BROADCAST, payload=payload))


async def test_with_verify_sender_the_registry_takes_only_a_users_own_heartbeats(
    broker_url: str, exchange_name: str, raw_channel: aio_pika.abc.AbstractChannel
) -> None:
    """Beats without user_id, from another user's id, or about another agent are refused."""
    user = unquote(urlsplit(broker_url).username or "guest")
    settings = Settings(url=broker_url, exchange=exchange_name, verify_sender=True)
    registry = Registry(agent_id=f"{user}-registry", settings=settings, heartbeat_interval=1)
    beats = {
        f"{user}-honest": (f"{user}-honest", user),
        f"{user}-anonymous": (f"{user}-anonymous", None),
        "mallory": ("mallory", user),
        f"{user}-liar": (f"{user}-victim", user),
    }
    try:
        async with registry:
            exchange = await raw_channel.get_exchange(exchange_name)
            for sender_id, (about, user_id) in beats.items():
                message = aio_pika.Message(_beat(sender_id, about), user_id=user_id)
                await exchange.publish(message, routing_key=f"broadcast.event.{HEARTBEAT}")
            await wait_until(lambda: registry.table.get(f"{user}-honest") is not None)
            async with asyncio.timeout(10):
                while (stats := await registry.stats()).get("refused", 0) < 3:  # noqa: ASYNC110 - a skill's counter, no event
                    await asyncio.sleep(0.05)
            known = {record.agent_id for record in registry.table.records()}
    finally:
        topology = Topology(exchange_name)
        queues = [topology.service_queue("registry"), topology.instance_queue(registry.id)]
        await delete_topology(broker_url, exchange_name, queues)

    assert f"{user}-honest" in known
    assert known.isdisjoint({f"{user}-anonymous", "mallory", f"{user}-victim", f"{user}-liar"})
    assert stats["refused"] == 3


async def test_an_agent_online_event_goes_unconfirmed_and_arrives(
    broker_url: str, exchange_name: str, raw_channel: aio_pika.abc.AbstractChannel
) -> None:
    """The registry's ``agent_online`` news goes on its channel without confirms (one
    confirm less per joining agent) and still reaches a subscriber of another process."""
    settings = Settings(url=broker_url, exchange=exchange_name)
    registry = Registry(agent_id="registry-unconfirmed", settings=settings, heartbeat_interval=1)
    exchange = await raw_channel.declare_exchange(
        exchange_name, aio_pika.ExchangeType.TOPIC, durable=True
    )
    news = await raw_channel.declare_queue(exclusive=True)
    await news.bind(exchange, "broadcast.event.agent_online")
    heard: list[str] = []

    async def take(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        heard.append(EventEnvelope.model_validate_json(message.body).payload.event_data["agent_id"])

    await news.consume(take, no_ack=True)
    options: list[dict[str, object]] = []
    try:
        async with registry:
            publish = registry.bus.publish

            async def spied(envelope: object, **kw: object) -> None:
                if isinstance(envelope, EventEnvelope):
                    options.append({"event": envelope.payload.event_name, **kw})
                await publish(envelope, **kw)  # type: ignore[arg-type]

            registry.bus.publish = spied  # type: ignore[method-assign]
            message = aio_pika.Message(_beat("newcomer-1", "newcomer-1"))
            await exchange.publish(message, routing_key=f"broadcast.event.{HEARTBEAT}")
            await wait_until(lambda: "newcomer-1" in heard, timeout=10)
    finally:
        topology = Topology(exchange_name)
        queues = [topology.service_queue("registry"), topology.instance_queue(registry.id)]
        await delete_topology(broker_url, exchange_name, queues)

    online = [o for o in options if o["event"] == "agent_online"]
    assert online
    assert all(o["confirm"] is False for o in online)
