"""A feed's consumer acks in batches, so a feed that falls behind stays in the broker.

The feed channel's prefetch bounds what is delivered and not acknowledged; the consumer
acks every ``batch`` messages at once (``multiple``), and a partial batch shortly after
its last message, so the window never stalls on a quiet feed.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from agentbus.bus._rabbitmq._amqp import FeedConsumer


class _Underlay:
    def __init__(self) -> None:
        self.acks: list[tuple[int, bool]] = []
        self.acked = asyncio.Event()
        self.deliver: Any = None

    async def basic_consume(self, queue: str, callback: Any, *, no_ack: bool) -> None:
        assert not no_ack, "a feed must be consumed with acks, or prefetch does not bound it"
        self.deliver = callback

    async def basic_ack(self, delivery_tag: int, *, multiple: bool) -> None:
        self.acks.append((delivery_tag, multiple))
        self.acked.set()


class _Channel:
    def __init__(self) -> None:
        self.underlay = _Underlay()
        self.reopen_callbacks: set[Any] = set()

    async def get_underlay_channel(self) -> _Underlay:
        return self.underlay


def _message(tag: int) -> Any:
    properties = SimpleNamespace(headers=None, user_id=None)
    return SimpleNamespace(
        body=b"{}", header=SimpleNamespace(properties=properties), delivery_tag=tag
    )


async def test_full_batches_are_acked_together_and_a_partial_one_soon_after() -> None:
    channel, heard = _Channel(), []
    consumer = FeedConsumer(
        channel,  # type: ignore[arg-type]
        "feed",
        lambda body, headers, user: heard.append(body),
        batch=4,
    )
    await consumer.start()
    deliver = channel.underlay.deliver
    for tag in range(1, 10):
        await deliver(_message(tag))

    assert channel.underlay.acks == [(4, True), (8, True)]
    channel.underlay.acked.clear()
    await asyncio.wait_for(channel.underlay.acked.wait(), 5)  # the partial batch's ack
    assert channel.underlay.acks == [(4, True), (8, True), (9, True)]
    assert len(heard) == 9


async def test_a_reconnect_forgets_what_the_old_channel_held() -> None:
    channel = _Channel()
    consumer = FeedConsumer(channel, "feed", lambda *_: None, batch=4)  # type: ignore[arg-type]
    await consumer.start()
    await channel.underlay.deliver(_message(1))
    await channel.underlay.deliver(_message(2))
    channel.underlay = _Underlay()  # the robust channel reopened on a new connection
    for restart in channel.reopen_callbacks:
        await restart(channel)
    for tag in range(1, 5):
        await channel.underlay.deliver(_message(tag))

    assert channel.underlay.acks == [(4, True)], "tags of the old channel were counted"
